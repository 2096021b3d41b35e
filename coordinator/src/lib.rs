//! glass coordinator (being written).
