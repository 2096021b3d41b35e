//! glass wire protocol (being written).
