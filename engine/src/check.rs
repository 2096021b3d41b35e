//! TPC-C consistency conditions (placeholder until the checker lands).
