//! glass node (being written).
