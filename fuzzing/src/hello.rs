//! The `hello` target: a connection's first frame and the certificate presented with it, put
//! through a listener's checks in the order `wire::endpoint` makes them (docs/design.md §9 on
//! identities, §13 on fuzzing): the frame must decode as a [`Handshake::Hello`]; the leaf
//! certificate must carry the identity the Hello claims ([`tls::check_peer_identity`]); the
//! Hello's protocol version and cluster fingerprint must be ours ([`check_hello`]).
//!
//! Input: `certificate | ours | mutations… | frame`. `certificate` picks what is presented:
//! one of the identities a real `glass cluster init` issued (the coordinator, two nodes, the
//! client), such a certificate with bytes changed (`mutations`: a count, then `(offset u16,
//! xor u8)` triples), the input's own bytes as DER, or nothing. `ours` picks which of our
//! fingerprints the listener holds. `frame` is the first frame.
//!
//! Properties:
//! - nothing panics; every refusal is typed ([`CodecError`], [`IdentityProblem`],
//!   [`HelloMismatch`]);
//! - with an unmodified certificate, a Hello is accepted exactly when it claims the identity
//!   the certificate was issued to, in our version, for our cluster — a certificate claiming
//!   another identity is refused, and the refusal names the certificate's real holder;
//! - a frame in another protocol version is refused as that version, never decoded;
//! - whatever certificate is presented, an accepted Hello's claimed identity name is in it.
//!   (Whether the CA signed it is the TLS handshake's check, made before; it is not repeated
//!   here.)

use std::sync::OnceLock;

use rustls::pki_types::CertificateDer;
use wire::channel::Handshake;
use wire::codec;
use wire::config::ClusterConfig;
use wire::endpoint::{check_hello, HELLO_FRAME_BYTES_MAX};
use wire::error::{CodecError, HelloMismatch};
use wire::messages::{Hello, PeerKind, PROTOCOL_VERSION};
use wire::tls::{self, Identity, IdentityProblem};

/// The fingerprints a listener may hold: the real cluster's and another.
const OURS: [u64; 2] = [0x6c61_7373_2d66_757a, 7];

/// The identities a real `glass cluster init` of the repository's `cluster.toml` issued, with
/// their certificates (DER), made once per process.
fn identities() -> &'static [(Identity, CertificateDer<'static>)] {
    static IDENTITIES: OnceLock<Vec<(Identity, CertificateDer<'static>)>> = OnceLock::new();
    IDENTITIES.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("glass-fuzz-hello-{}", std::process::id()));
        let mut cfg = ClusterConfig::parse(include_str!("../../cluster.toml")).expect("the repository's cluster.toml");
        cfg.cert_dir = dir.clone();
        tls::init_cluster(&cfg, true).expect("cluster init into a temporary folder");
        let mut roles: Vec<Identity> =
            cfg.coordinators.iter().map(|c| Identity::Coordinator(u16::from(c.id))).collect();
        roles.extend(cfg.nodes.iter().map(|n| Identity::Node(n.id)));
        roles.push(Identity::Client);
        let out = roles
            .into_iter()
            .map(|role| {
                let identity = tls::load_credentials(&dir, role).expect("a freshly issued identity");
                (role, identity.chain[0].clone())
            })
            .collect();
        let _ = std::fs::remove_dir_all(&dir);
        out
    })
}

/// The certificate chain an input presents, and the identity it was issued to when it is an
/// unmodified real one.
fn presented(which: u8, rest: &[u8]) -> (Vec<CertificateDer<'static>>, Option<Identity>, &[u8]) {
    let ids = identities();
    let n = ids.len();
    let which = usize::from(which) % (2 * n + 2);
    if which < n {
        return (vec![ids[which].1.clone()], Some(ids[which].0), rest);
    }
    if which < 2 * n {
        let mut der = ids[which - n].1.to_vec();
        let (count, mut rest) = rest.split_first().map_or((0, rest), |(c, r)| (*c % 16, r));
        for _ in 0..count {
            let [a, b, x, tail @ ..] = rest else { break };
            let at = usize::from(u16::from_le_bytes([*a, *b])) % der.len();
            der[at] ^= *x;
            rest = tail;
        }
        return (vec![CertificateDer::from(der)], None, rest);
    }
    if which == 2 * n {
        // The input's own bytes, up to a length byte's worth, as a certificate.
        let (len, rest) = rest.split_first().map_or((0, rest), |(l, r)| (usize::from(*l) * 4, r));
        let len = len.min(rest.len());
        return (vec![CertificateDer::from(rest[..len].to_vec())], None, &rest[len..]);
    }
    (Vec::new(), None, rest)
}

/// A listener's checks; `Ok` is the Hello accepted.
#[derive(Debug)]
enum Verdict {
    Frame(CodecError),
    NotHello,
    Identity(IdentityProblem),
    Mismatch(HelloMismatch),
    Accepted(Hello),
}

fn vet(ours: &Hello, frame: &[u8], chain: &[CertificateDer<'_>]) -> Verdict {
    let first = match codec::decode::<Handshake>(frame, HELLO_FRAME_BYTES_MAX) {
        Ok((msg, _)) => msg,
        Err(e) => return Verdict::Frame(e),
    };
    let Handshake::Hello(hello) = first else { return Verdict::NotHello };
    if let Err(problem) = tls::check_peer_identity(chain, Identity::claimed_by(&hello)) {
        return Verdict::Identity(problem);
    }
    match check_hello(ours, &hello) {
        Ok(()) => Verdict::Accepted(hello),
        Err(m) => Verdict::Mismatch(m),
    }
}

pub fn check(data: &[u8]) {
    let [which, ours, rest @ ..] = data else { return };
    let (chain, issued_to, frame) = presented(*which, rest);
    let ours = Hello {
        protocol_version: PROTOCOL_VERSION,
        role: PeerKind::Node,
        id: 1,
        config_fingerprint: OURS[usize::from(*ours) % OURS.len()],
    };
    let verdict = vet(&ours, frame, &chain);
    match &verdict {
        Verdict::Frame(CodecError::Version { got, expected }) => {
            assert_eq!(frame.get(codec::LENGTH_PREFIX_BYTES), Some(got));
            assert_eq!(*expected, PROTOCOL_VERSION);
        }
        Verdict::Identity(IdentityProblem::Other { holder }) => {
            if let Some(role) = issued_to {
                assert_eq!(holder, &role.to_string(), "a refusal must name the certificate's real holder");
            }
        }
        Verdict::Accepted(hello) => {
            let claimed = Identity::claimed_by(hello);
            if let Some(role) = issued_to {
                assert_eq!(claimed, role, "a Hello claiming {claimed} accepted with {role}'s certificate");
            }
            let name = claimed.identity_name();
            let der = chain[0].as_ref();
            assert!(
                der.windows(name.len()).any(|w| w.eq_ignore_ascii_case(name.as_bytes())),
                "accepted as {claimed} with a certificate not naming {name}"
            );
            assert_eq!(hello.protocol_version, PROTOCOL_VERSION);
            assert_eq!(hello.config_fingerprint, ours.config_fingerprint);
        }
        Verdict::Mismatch(HelloMismatch::Fingerprint { theirs, ours }) => assert_ne!(theirs, ours),
        Verdict::Mismatch(HelloMismatch::Version { theirs, ours }) => assert_ne!(theirs, ours),
        Verdict::Frame(_) | Verdict::NotHello | Verdict::Identity(_) => {}
    }
    // An unmodified certificate and a well-formed Hello of ours: accepted exactly when the
    // claim is the certificate's.
    if let (Some(role), Ok((Handshake::Hello(hello), _))) =
        (issued_to, codec::decode::<Handshake>(frame, HELLO_FRAME_BYTES_MAX))
    {
        let ok = hello.protocol_version == PROTOCOL_VERSION && hello.config_fingerprint == ours.config_fingerprint;
        let claimed_is_holder = Identity::claimed_by(&hello) == role;
        assert_eq!(matches!(verdict, Verdict::Accepted(_)), ok && claimed_is_holder, "{verdict:?}");
    }
}

/// A Hello frame claiming `role`/`id`, of our cluster's fingerprint.
fn hello_frame(role: PeerKind, id: u16, fingerprint: u64) -> Vec<u8> {
    let hello =
        Handshake::Hello(Hello { protocol_version: PROTOCOL_VERSION, role, id, config_fingerprint: fingerprint });
    codec::encode(&hello, HELLO_FRAME_BYTES_MAX).expect("a Hello encodes")
}

pub fn seeds() -> Vec<Vec<u8>> {
    let n = identities().len() as u8;
    let claims = [(PeerKind::Coordinator, 0), (PeerKind::Node, 1), (PeerKind::Node, 2), (PeerKind::Client, 9)];
    let mut out = Vec::new();
    for which in 0..n {
        for (role, id) in claims {
            let mut input = vec![which, 0];
            input.extend(hello_frame(role, id, OURS[0]));
            out.push(input);
        }
        // A mutated copy of the certificate, one byte changed, claiming its own identity.
        let mut input = vec![which + n, 0, 1, 200, 0, 0x20];
        input.extend(hello_frame(PeerKind::Node, 1, OURS[0]));
        out.push(input);
    }
    let mut refused = vec![0, 0];
    refused.extend(
        codec::encode(&Handshake::HelloRefused { reason: "wrong cluster".into() }, HELLO_FRAME_BYTES_MAX).unwrap(),
    );
    out.push(refused);
    let mut other_cluster = vec![1, 1];
    other_cluster.extend(hello_frame(PeerKind::Node, 1, OURS[0]));
    out.push(other_cluster);
    let mut raw = vec![2 * n, 0, 8];
    raw.extend([0x30, 0x82, 0x01, 0x00].repeat(8));
    raw.extend(hello_frame(PeerKind::Node, 1, OURS[0]));
    out.push(raw);
    let mut none = vec![2 * n + 1, 0];
    none.extend(hello_frame(PeerKind::Client, 3, OURS[0]));
    out.push(none);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A certificate claiming another identity is refused and the refusal names its holder.
    #[test]
    fn another_identitys_certificate_is_refused() {
        let ours =
            Hello { protocol_version: PROTOCOL_VERSION, role: PeerKind::Node, id: 1, config_fingerprint: OURS[0] };
        let (_, cert) = identities().iter().find(|(r, _)| *r == Identity::Node(1)).unwrap().clone();
        let frame = hello_frame(PeerKind::Node, 2, OURS[0]);
        match vet(&ours, &frame, std::slice::from_ref(&cert)) {
            Verdict::Identity(IdentityProblem::Other { holder }) => assert_eq!(holder, "node 1"),
            v => panic!("{v:?}"),
        }
        assert!(matches!(vet(&ours, &hello_frame(PeerKind::Node, 1, OURS[0]), &[cert]), Verdict::Accepted(_)));
    }

    #[test]
    fn every_seed_with_every_byte_flipped_keeps_the_property() {
        for seed in seeds() {
            for at in 0..seed.len() {
                let mut input = seed.clone();
                input[at] ^= 0x41;
                check(&input);
            }
        }
    }
}
