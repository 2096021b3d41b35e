//! Not written yet.

/// The property check.
pub fn check(_data: &[u8]) {}

/// The seed corpus.
pub fn seeds() -> Vec<Vec<u8>> {
    Vec::new()
}
