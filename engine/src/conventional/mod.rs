//! The conventional stack (issue 3): placeholder until its module lands.
