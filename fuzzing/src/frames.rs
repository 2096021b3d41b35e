//! Not written yet.
pub fn handshake(_data: &[u8]) {}
pub fn handshake_seeds() -> Vec<Vec<u8>> {
    Vec::new()
}
pub fn client(_data: &[u8]) {}
pub fn client_seeds() -> Vec<Vec<u8>> {
    Vec::new()
}
pub fn control(_data: &[u8]) {}
pub fn control_seeds() -> Vec<Vec<u8>> {
    Vec::new()
}
pub fn group(_data: &[u8]) {}
pub fn group_seeds() -> Vec<Vec<u8>> {
    Vec::new()
}
pub fn peer(_data: &[u8]) {}
pub fn peer_seeds() -> Vec<Vec<u8>> {
    Vec::new()
}
pub fn tool(_data: &[u8]) {}
pub fn tool_seeds() -> Vec<Vec<u8>> {
    Vec::new()
}
