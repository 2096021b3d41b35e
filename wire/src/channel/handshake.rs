//! The handshake channel: the first frame on every connection, in both directions. The
//! dialler sends its [`Hello`]; the listener answers with its own, or with
//! [`Handshake::HelloRefused`] and closes. Both sides check the other's protocol version and
//! cluster fingerprint ([`crate::endpoint`]); only then does the connection carry the
//! messages of its channel.

use crate::channel::channel_enum;
use crate::messages::Hello;

channel_enum! {
    /// The first frame of a connection.
    pub enum Handshake = "handshake" {
        /// Who is speaking, in which protocol version, about which cluster.
        Hello(Hello),
        /// The Hello was refused (version, fingerprint, role or id); the connection closes
        /// after it.
        HelloRefused { reason: String },
    }
}
