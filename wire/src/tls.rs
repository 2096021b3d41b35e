//! The cluster's own certificate authority and the TLS configurations built from it
//! (docs/design.md, "Security").
//!
//! [`init_cluster`] (what `glass cluster init` runs) writes into `cert_dir`:
//!
//! ```text
//! ca.pem, ca.key                  the cluster's CA (self-signed, ECDSA P-256)
//! coordinator-<id>.pem, .key      CN "glass coordinator <id>", identity
//!                                 coordinator-<id>.identity.glass.invalid, one pair per
//!                                 [[coordinators]] entry
//! node-<id>.pem, .key             CN "glass node <id>", identity node-<id>.identity.glass.invalid,
//!                                 one pair per [[nodes]] entry
//! client.pem, .key                CN "glass client", identity client.identity.glass.invalid:
//!                                 the benchmark and CLI client
//! ```
//!
//! Guarantees:
//! - every leaf certificate is signed by the CA and carries both the ServerAuth and the
//!   ClientAuth extended key usages (nodes and the coordinator dial each other), and a subject
//!   alternative name for every name it may be dialled by: the host part of its configured
//!   address (an IP address or a DNS name), plus `localhost`, `127.0.0.1` and `::1` when that
//!   address is a loopback (or unspecified) one ([`names_for_address`]);
//! - every leaf is bound to exactly one identity — coordinator N, node N or the client — by
//!   one more DNS subject alternative name, [`Identity::identity_name`], under the reserved
//!   `.invalid` top-level domain (RFC 6761: never resolved, so never confused with an
//!   address). [`check_identity`] tells whether a certificate is a given identity's (the
//!   transport refuses a Hello claiming another one: `crate::endpoint`); a certificate issued
//!   before identities were bound carries none and is refused everywhere with
//!   [`IdentityProblem::NoIdentity`], which says to run `glass cluster init --force`;
//! - [`load_credentials`] refuses a process's own certificate when the CA in `cert_dir` did not
//!   issue it or it is not that process's identity, and [`check_certificates`] (what `glass
//!   cluster up` runs before starting anything) checks every certificate of `cert_dir`
//!   against the CA, its identity and the current addresses of `cluster.toml`, naming the
//!   certificate and the address that do not match and what to run;
//! - private keys are created with mode 0600 from the start (never loosened then tightened),
//!   the directory with 0700;
//! - an existing CA is never overwritten unless `force` is given ([`TlsError::CaExists`]);
//! - [`server_config`] requires a client certificate issued by the CA
//!   (`WebPkiClientVerifier`) and [`client_config`] trusts the CA alone and presents its own
//!   certificate; both use the ring provider explicitly, TLS 1.3 only, ALPN [`ALPN`].

use std::fs::{DirBuilder, OpenOptions};
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::RootCertStore;

use crate::config::{split_address, ClusterConfig};

mod reissue;
use crate::error::Problem;
use crate::messages::{self, Hello, NodeId};
pub use reissue::reissue;

/// The ALPN protocol every glass connection negotiates.
pub const ALPN: &[u8] = b"glass/1";
/// File name of the CA certificate in `cert_dir`.
pub const CA_CERT_FILE: &str = "ca.pem";
/// File name of the CA private key in `cert_dir`.
pub const CA_KEY_FILE: &str = "ca.key";
/// Mode of every private key file.
pub const KEY_FILE_MODE: u32 = 0o600;
/// Mode of every certificate file.
pub const CERT_FILE_MODE: u32 = 0o644;
/// Mode of `cert_dir` when [`init_cluster`] creates it.
pub const CERT_DIR_MODE: u32 = 0o700;
/// The domain under which every identity name lies ([`Identity::identity_name`]): `.invalid` is
/// reserved (RFC 6761) and never resolves, so an identity name can never be an address a
/// process is dialled by.
pub const IDENTITY_DOMAIN: &str = "identity.glass.invalid";

/// A certificate identity: which process a certificate and its key belong to (a peer's
/// kind, [`crate::messages::PeerKind`], with its id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Identity {
    /// Coordinator N (an id of `[[coordinators]]`; wide enough for any Hello's id).
    Coordinator(u16),
    Node(NodeId),
    /// The benchmark and CLI client.
    Client,
}

impl Identity {
    /// The file name stem of the identity's certificate and key: `coordinator`, `node-2`,
    /// `client`.
    pub fn file_stem(self) -> String {
        match self {
            Identity::Coordinator(id) => format!("coordinator-{id}"),
            Identity::Node(id) => format!("node-{id}"),
            Identity::Client => "client".to_string(),
        }
    }

    /// The common name of the identity's certificate: `glass coordinator`, `glass node 2`,
    /// `glass client`.
    pub fn common_name(self) -> String {
        match self {
            Identity::Coordinator(id) => format!("glass coordinator {id}"),
            Identity::Node(id) => format!("glass node {id}"),
            Identity::Client => "glass client".to_string(),
        }
    }

    /// The DNS subject alternative name binding a certificate to this identity:
    /// `coordinator.identity.glass.invalid`, `node-2.identity.glass.invalid`,
    /// `client.identity.glass.invalid`.
    pub fn identity_name(self) -> String {
        format!("{}.{IDENTITY_DOMAIN}", self.file_stem())
    }

    /// The identity an identity name (as [`Identity::identity_name`] writes it) stands for.
    pub fn from_identity_name(name: &str) -> Option<Identity> {
        let stem = name.strip_suffix(IDENTITY_DOMAIN)?.strip_suffix('.')?;
        if stem == "client" {
            return Some(Identity::Client);
        }
        // Exactly what `file_stem` writes: no sign, no leading zero.
        let number = |id: &str| -> Option<u16> {
            if id.starts_with('0') && id != "0" || id.starts_with('+') {
                return None;
            }
            id.parse().ok()
        };
        match stem.strip_prefix("coordinator-") {
            Some(id) => number(id).map(Identity::Coordinator),
            None => number(stem.strip_prefix("node-")?).map(Identity::Node),
        }
    }

    /// The identity a Hello claims: its role, and for a node or a coordinator its id (a
    /// client's id is its own choice).
    pub fn claimed_by(hello: &Hello) -> Identity {
        match hello.role {
            messages::PeerKind::Coordinator => Identity::Coordinator(hello.id),
            messages::PeerKind::Node => Identity::Node(hello.id),
            messages::PeerKind::Client => Identity::Client,
        }
    }

    /// Path of the identity's certificate in `cert_dir`.
    pub fn cert_path(self, cert_dir: &Path) -> PathBuf {
        cert_dir.join(format!("{}.pem", self.file_stem()))
    }

    /// Path of the identity's private key in `cert_dir`.
    pub fn key_path(self, cert_dir: &Path) -> PathBuf {
        cert_dir.join(format!("{}.key", self.file_stem()))
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Identity::Coordinator(id) => write!(f, "coordinator {id}"),
            Identity::Node(id) => write!(f, "node {id}"),
            Identity::Client => f.write_str("client"),
        }
    }
}

/// Why certificates could not be issued, read or turned into a TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// `cert_dir` already holds a CA and `force` was not given.
    #[error(
        "{path} already exists: this cluster has a CA; pass --force to replace it (every certificate is \
         reissued and processes holding the old ones are refused)"
    )]
    CaExists { path: PathBuf },
    /// A file or directory could not be created, written or read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A process address cannot name a certificate.
    #[error("{field}: {problem}")]
    Address { field: String, problem: Problem },
    /// rcgen refused to generate a key or a certificate.
    #[error("cannot generate {what}: {source}")]
    Generate {
        what: String,
        #[source]
        source: rcgen::Error,
    },
    /// A PEM file is missing, unreadable or holds no usable item.
    #[error("{path}: {detail} (run `glass cluster init` to create this cluster's certificates)")]
    Pem { path: PathBuf, detail: String },
    /// rustls refused the certificates or keys.
    #[error("TLS configuration for the {role}: {source}")]
    Rustls {
        role: Identity,
        #[source]
        source: rustls::Error,
    },
    /// The client-certificate verifier could not be built from the CA.
    #[error("client certificate verifier for the {role}: {detail}")]
    Verifier { role: Identity, detail: String },
    /// `cert_dir` holds a CA but no certificate or key for a process of `cluster.toml` (added
    /// after the certificates were issued).
    #[error(
        "{path} is missing: the CA in its directory issued no certificate for the {role} (added to cluster.toml \
         after `glass cluster init`?): run `glass cluster init --force` and copy cert_dir to every host"
    )]
    Missing { path: PathBuf, role: Identity },
    /// A certificate in `cert_dir` is not the identity its file name says.
    #[error("{path} is not the {role}'s certificate: {problem}")]
    WrongIdentity { path: PathBuf, role: Identity, problem: IdentityProblem },
    /// A certificate in `cert_dir` was not issued by the CA there (a CA replaced without
    /// reissuing, or files mixed from two clusters).
    #[error(
        "{path} was not issued by the CA in {ca} ({detail}): run `glass cluster init --force` and copy cert_dir to \
         every host"
    )]
    NotFromCa { path: PathBuf, ca: PathBuf, detail: String },
    /// A certificate does not carry a name its process is dialled by now (the address in
    /// `cluster.toml` changed after the certificates were issued).
    #[error(
        "{} (the {}'s certificate) is not valid for `{}`, the host of {} = \"{}\" ({}); the certificates were \
         issued for other addresses: run `glass cluster cert --config <this cluster.toml>` for that process \
         (or `glass cluster init --force` for all), then `glass cluster deploy` to hosts reached over SSH",
        .0.path.display(), .0.role, .0.name, .0.field, .0.address, .0.detail
    )]
    NotForAddress(Box<AddressMismatch>),
    /// A process cluster.toml does not name.
    #[error("the {role} is not a process of this cluster.toml")]
    UnknownProcess { role: Identity },
}

/// A certificate and the current address it is not valid for ([`TlsError::NotForAddress`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressMismatch {
    /// The certificate's file.
    pub path: PathBuf,
    /// Whose certificate it is.
    pub role: Identity,
    /// The field of `cluster.toml` holding the address (`nodes[0].address`).
    pub field: String,
    /// The address, as `cluster.toml` has it.
    pub address: String,
    /// The name the certificate lacks (the address's host, or a loopback name).
    pub name: String,
    /// What webpki said.
    pub detail: String,
}

/// Why a certificate is not the certificate of a given identity ([`check_identity`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityProblem {
    /// The peer presented no certificate (the TLS handshake requires one: a bug if seen).
    #[error("no certificate was presented")]
    NoCertificate,
    /// The certificate cannot be parsed as an X.509 end-entity certificate.
    #[error("the certificate cannot be parsed ({detail})")]
    Unparsable { detail: String },
    /// The certificate carries no identity name: `glass cluster init` issued it before each
    /// certificate was bound to one identity.
    #[error(
        "the certificate carries no glass identity (it was issued before certificates were bound to one process \
         each): run `glass cluster init --force` and copy cert_dir to every host"
    )]
    NoIdentity,
    /// The certificate is another identity's.
    #[error("the certificate is the {holder}'s")]
    Other { holder: String },
}

/// Checks that `cert` is `role`'s certificate: that it carries `role`'s identity name
/// ([`Identity::identity_name`]). It does not check who issued it: the TLS handshake (or
/// [`load_credentials`]) checked that against the CA.
pub fn check_identity(cert: &CertificateDer<'_>, role: Identity) -> Result<(), IdentityProblem> {
    let parsed =
        ParsedCertificate::try_from(cert).map_err(|e| IdentityProblem::Unparsable { detail: e.to_string() })?;
    let name = ServerName::try_from(role.identity_name()).expect("identity names are DNS names");
    if rustls::client::verify_server_name(&parsed, &name).is_ok() {
        return Ok(());
    }
    match identity_names_in(cert.as_ref()).first() {
        None => Err(IdentityProblem::NoIdentity),
        Some(other) => Err(IdentityProblem::Other {
            holder: Identity::from_identity_name(other).map_or_else(|| other.clone(), |r| r.to_string()),
        }),
    }
}

/// [`check_identity`] for the leaf of a chain a peer presented.
pub fn check_peer_identity(chain: &[CertificateDer<'_>], role: Identity) -> Result<(), IdentityProblem> {
    check_identity(chain.first().ok_or(IdentityProblem::NoCertificate)?, role)
}

/// The identity names a DER certificate carries, for error messages only (whether a
/// certificate *is* an identity's is decided by webpki in [`check_identity`]). A DNS subject
/// alternative name is encoded as `[0x82, length, ASCII bytes]`; the names ending in
/// `.identity.glass.invalid` are found by that suffix and their header.
fn identity_names_in(der: &[u8]) -> Vec<String> {
    let suffix = format!(".{IDENTITY_DOMAIN}");
    let suffix = suffix.as_bytes();
    let mut names = Vec::new();
    for end in suffix.len()..=der.len() {
        if &der[end - suffix.len()..end] != suffix {
            continue;
        }
        // The header is somewhere before the suffix: find the one whose length ends here.
        for start in (2..=end - suffix.len()).rev() {
            if der[start - 2] == 0x82 && usize::from(der[start - 1]) == end - start {
                if let Ok(name) = std::str::from_utf8(&der[start..end]) {
                    names.push(name.to_ascii_lowercase());
                }
                break;
            }
            if end - start > 255 {
                break;
            }
        }
    }
    names
}

/// One certificate and key [`init_cluster`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedIdentity {
    pub role: Identity,
    /// The certificate's file.
    pub cert: PathBuf,
    /// The private key's file (mode 0600).
    pub key: PathBuf,
    /// The names it may be dialled by (subject alternative names besides its identity).
    pub names: Vec<String>,
    /// Its identity name ([`Identity::identity_name`]), a subject alternative name too.
    pub identity: String,
}

/// What [`init_cluster`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitReport {
    pub cert_dir: PathBuf,
    /// The CA certificate's file.
    pub ca_cert: PathBuf,
    /// The CA key's file (mode 0600).
    pub ca_key: PathBuf,
    /// Whether an existing CA was replaced (`force`).
    pub replaced_ca: bool,
    /// The coordinator's, each node's (in `cluster.toml` order) and the client's.
    pub identities: Vec<IssuedIdentity>,
}

/// The names a process listening on `address` (`host:port`) may be dialled by: the host
/// itself, plus `localhost`, `127.0.0.1` and `::1` when it is a loopback or unspecified
/// address (or `localhost`). Duplicates are dropped; the host comes first.
pub fn names_for_address(address: &str) -> Result<Vec<String>, Problem> {
    let (host, _port) = split_address(address)?;
    let loopback = match host.parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback() || ip.is_unspecified(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    };
    let mut names = vec![host.to_ascii_lowercase()];
    if loopback {
        for extra in ["localhost", "127.0.0.1", "::1"] {
            if !names.iter().any(|n| n == extra) {
                names.push(extra.to_string());
            }
        }
    }
    Ok(names)
}

/// Creates the cluster's CA in `cfg.cert_dir` and issues a certificate and key to the
/// coordinator, every node and the client. Refuses to replace an existing CA unless `force`.
pub fn init_cluster(cfg: &ClusterConfig, force: bool) -> Result<InitReport, TlsError> {
    let dir = cfg.cert_dir.as_path();
    let ca_cert = dir.join(CA_CERT_FILE);
    let ca_key = dir.join(CA_KEY_FILE);
    let mut replaced_ca = false;
    for path in [&ca_cert, &ca_key] {
        if path.exists() {
            if !force {
                return Err(TlsError::CaExists { path: path.clone() });
            }
            replaced_ca = true;
        }
    }

    // Every leaf and its names first: a bad address fails before anything is written.
    let mut leaves = Vec::new();
    for (i, c) in cfg.coordinators.iter().enumerate() {
        let field = cfg.coordinator_field(i);
        leaves.push((Identity::Coordinator(u16::from(c.id)), address_names(&field, &c.address)?));
    }
    for (i, node) in cfg.nodes.iter().enumerate() {
        leaves.push((Identity::Node(node.id), address_names(&format!("nodes[{i}].address"), &node.address)?));
    }
    leaves.push((Identity::Client, Vec::new()));

    let generate = |what: &str| {
        let what = what.to_string();
        move |source| TlsError::Generate { what, source }
    };
    let ca_keypair = KeyPair::generate().map_err(generate("the CA key"))?;
    let ca_params = ca_params();
    let ca_certificate = ca_params.self_signed(&ca_keypair).map_err(generate("the CA certificate"))?;
    let issuer = Issuer::from_params(&ca_params, &ca_keypair);

    let mut files = Vec::new();
    let mut identities = Vec::new();
    for (role, names) in leaves {
        let keypair = KeyPair::generate().map_err(generate(&format!("the {role}'s key")))?;
        let params = leaf_params(role, &names).map_err(generate(&format!("the {role}'s certificate")))?;
        let cert = params.signed_by(&keypair, &issuer).map_err(generate(&format!("the {role}'s certificate")))?;
        let (cert_path, key_path) = (role.cert_path(dir), role.key_path(dir));
        files.push((cert_path.clone(), cert.pem(), CERT_FILE_MODE));
        files.push((key_path.clone(), keypair.serialize_pem(), KEY_FILE_MODE));
        identities.push(IssuedIdentity { role, cert: cert_path, key: key_path, names, identity: role.identity_name() });
    }

    DirBuilder::new()
        .recursive(true)
        .mode(CERT_DIR_MODE)
        .create(dir)
        .map_err(|source| TlsError::Io { path: dir.to_path_buf(), source })?;
    // The leaves first and the CA last: an interrupted run leaves no CA behind, so it can be
    // run again without --force.
    for (path, text, mode) in &files {
        write_file(path, text, *mode)?;
    }
    write_file(&ca_key, &ca_keypair.serialize_pem(), KEY_FILE_MODE)?;
    write_file(&ca_cert, &ca_certificate.pem(), CERT_FILE_MODE)?;
    Ok(InitReport { cert_dir: dir.to_path_buf(), ca_cert, ca_key, replaced_ca, identities })
}

fn address_names(field: &str, address: &str) -> Result<Vec<String>, TlsError> {
    names_for_address(address).map_err(|problem| TlsError::Address { field: field.to_string(), problem })
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "glass cluster CA");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params
}

fn leaf_params(role: Identity, names: &[String]) -> Result<CertificateParams, rcgen::Error> {
    let mut sans = names.to_vec();
    sans.push(role.identity_name());
    let mut params = CertificateParams::new(sans)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, role.common_name());
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    debug_assert!(params
        .subject_alt_names
        .iter()
        .all(|san| matches!(san, SanType::DnsName(_) | SanType::IpAddress(_))));
    Ok(params)
}

/// Writes `text` to a new file created with `mode` (an existing file is removed first, so the
/// mode always applies).
fn write_file(path: &Path, text: &str, mode: u32) -> Result<(), TlsError> {
    let io = |source| TlsError::Io { path: path.to_path_buf(), source };
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    let mut file = OpenOptions::new().write(true).create_new(true).mode(mode).open(path).map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)
}

/// A process's credentials: its certificate chain and key, and the CA it trusts.
#[derive(Debug)]
pub struct Credentials {
    pub role: Identity,
    /// The CA certificate: the only trust anchor.
    pub ca: CertificateDer<'static>,
    /// The process's certificate (the CA is the issuer, not part of the chain).
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl Credentials {
    /// The CA as a root store.
    pub fn roots(&self) -> Result<RootCertStore, TlsError> {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.clone()).map_err(|source| TlsError::Rustls { role: self.role, source })?;
        Ok(roots)
    }
}

/// Reads the CA certificate only (no key needed), e.g. to verify peers without an identity.
pub fn load_ca(cert_dir: &Path) -> Result<CertificateDer<'static>, TlsError> {
    load_cert(&cert_dir.join(CA_CERT_FILE))
}

/// Reads `role`'s certificate and key, and the CA certificate, from `cert_dir`; refuses a
/// certificate the CA did not issue or that is not `role`'s identity (one issued before
/// identities were bound included), so that a process with stale certificates stops at start
/// with an error that says what to run.
pub fn load_credentials(cert_dir: &Path, role: Identity) -> Result<Credentials, TlsError> {
    let ca = load_ca(cert_dir)?;
    let cert_path = role.cert_path(cert_dir);
    let cert = load_cert(&cert_path)?;
    check_issued_by(&cert, &cert_path, &ca, &cert_dir.join(CA_CERT_FILE), role)?;
    check_identity(&cert, role).map_err(|problem| TlsError::WrongIdentity { path: cert_path, role, problem })?;
    let key_path = role.key_path(cert_dir);
    let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|e| pem_error(&key_path, e))?;
    Ok(Credentials { role, ca, chain: vec![cert], key })
}

/// Checks that the CA certificate `ca` (read from `ca_path`) issued `cert` (read from `path`).
fn check_issued_by(
    cert: &CertificateDer<'_>,
    path: &Path,
    ca: &CertificateDer<'static>,
    ca_path: &Path,
    role: Identity,
) -> Result<(), TlsError> {
    let not_from_ca =
        |detail: String| TlsError::NotFromCa { path: path.to_path_buf(), ca: ca_path.to_path_buf(), detail };
    let parsed = ParsedCertificate::try_from(cert).map_err(|e| not_from_ca(e.to_string()))?;
    let mut roots = RootCertStore::empty();
    roots.add(ca.clone()).map_err(|source| TlsError::Rustls { role, source })?;
    let algorithms = provider().signature_verification_algorithms.all;
    rustls::client::verify_server_cert_signed_by_trust_anchor(&parsed, &roots, &[], UnixTime::now(), algorithms)
        .map_err(|e| not_from_ca(e.to_string()))
}

/// Checks every certificate of `cfg.cert_dir` before a local cluster starts: each was issued
/// by the CA there, is its process's identity, and is valid for every name its process is
/// dialled by at its current address in `cluster.toml` ([`names_for_address`]); the client's
/// is checked for its identity. The error names the certificate, the address and what to run.
pub fn check_certificates(cfg: &ClusterConfig) -> Result<(), TlsError> {
    let dir = cfg.cert_dir.as_path();
    let mut processes = Vec::new();
    for (i, c) in cfg.coordinators.iter().enumerate() {
        processes.push((Identity::Coordinator(u16::from(c.id)), Some((cfg.coordinator_field(i), &c.address))));
    }
    for (i, node) in cfg.nodes.iter().enumerate() {
        processes.push((Identity::Node(node.id), Some((format!("nodes[{i}].address"), &node.address))));
    }
    processes.push((Identity::Client, None));
    for (role, address) in processes {
        for path in [role.cert_path(dir), role.key_path(dir)] {
            if !path.exists() {
                return Err(TlsError::Missing { path, role });
            }
        }
        let identity = load_credentials(dir, role)?;
        let Some((field, address)) = address else { continue };
        let path = role.cert_path(dir);
        let parsed = ParsedCertificate::try_from(&identity.chain[0]).map_err(|e| TlsError::WrongIdentity {
            path: path.clone(),
            role,
            problem: IdentityProblem::Unparsable { detail: e.to_string() },
        })?;
        for name in address_names(&field, address)? {
            let not_for_address = |detail: String| {
                TlsError::NotForAddress(Box::new(AddressMismatch {
                    path: path.clone(),
                    role,
                    field: field.clone(),
                    address: address.clone(),
                    name: name.clone(),
                    detail,
                }))
            };
            let server_name = ServerName::try_from(name.clone()).map_err(|e| not_for_address(e.to_string()))?;
            rustls::client::verify_server_name(&parsed, &server_name).map_err(|e| not_for_address(e.to_string()))?;
        }
    }
    Ok(())
}

fn load_cert(path: &Path) -> Result<CertificateDer<'static>, TlsError> {
    let mut certs = CertificateDer::pem_file_iter(path).map_err(|e| pem_error(path, e))?;
    match certs.next() {
        Some(cert) => cert.map_err(|e| pem_error(path, e)),
        None => Err(TlsError::Pem { path: path.to_path_buf(), detail: "no certificate in the file".to_string() }),
    }
}

fn pem_error(path: &Path, e: rustls::pki_types::pem::Error) -> TlsError {
    let detail = match e {
        rustls::pki_types::pem::Error::Io(io) => io.to_string(),
        rustls::pki_types::pem::Error::NoItemsFound => "no PEM item of the expected kind".to_string(),
        other => format!("{other:?}"),
    };
    TlsError::Pem { path: path.to_path_buf(), detail }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The TLS configuration of a process accepting connections as `role`: TLS 1.3, ALPN
/// [`ALPN`], and a client certificate issued by the cluster's CA required of every peer.
pub fn server_config(cert_dir: &Path, role: Identity) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    server_config_for(load_credentials(cert_dir, role)?)
}

/// [`server_config`] from credentials already loaded.
pub fn server_config_for(identity: Credentials) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let role = identity.role;
    let rustls_error = |source| TlsError::Rustls { role, source };
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(identity.roots()?), provider())
        .build()
        .map_err(|e| TlsError::Verifier { role, detail: e.to_string() })?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(rustls_error)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(identity.chain, identity.key)
        .map_err(rustls_error)?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(config))
}

/// The TLS configuration of a process dialling others as `role`: TLS 1.3, ALPN [`ALPN`],
/// trusting the cluster's CA alone and presenting `role`'s certificate.
pub fn client_config(cert_dir: &Path, role: Identity) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    client_config_for(load_credentials(cert_dir, role)?)
}

/// [`client_config`] from credentials already loaded.
pub fn client_config_for(identity: Credentials) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let role = identity.role;
    let rustls_error = |source| TlsError::Rustls { role, source };
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(rustls_error)?
        .with_root_certificates(identity.roots()?)
        .with_client_auth_cert(identity.chain, identity.key)
        .map_err(rustls_error)?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(address: &str) -> Vec<String> {
        names_for_address(address).unwrap()
    }

    #[test]
    fn a_loopback_ip_also_gets_localhost_names() {
        assert_eq!(names("127.0.0.1:7000"), ["127.0.0.1", "localhost", "::1"]);
        assert_eq!(names("127.0.0.2:7000"), ["127.0.0.2", "localhost", "127.0.0.1", "::1"]);
        assert_eq!(names("[::1]:7000"), ["::1", "localhost", "127.0.0.1"]);
        assert_eq!(names("0.0.0.0:7000"), ["0.0.0.0", "localhost", "127.0.0.1", "::1"]);
    }

    #[test]
    fn localhost_gets_the_loopback_addresses() {
        assert_eq!(names("localhost:7000"), ["localhost", "127.0.0.1", "::1"]);
        assert_eq!(names("LocalHost:7000"), ["localhost", "127.0.0.1", "::1"]);
    }

    #[test]
    fn other_hosts_get_exactly_their_own_name() {
        assert_eq!(names("10.0.0.7:7000"), ["10.0.0.7"]);
        assert_eq!(names("[fd00::7]:7000"), ["fd00::7"]);
        assert_eq!(names("node-2.glass.internal:7000"), ["node-2.glass.internal"]);
    }

    #[test]
    fn bad_addresses_are_refused() {
        assert!(matches!(names_for_address("nohost"), Err(Problem::BadAddress { .. })));
        assert!(matches!(names_for_address(":7000"), Err(Problem::BadAddress { .. })));
    }

    #[test]
    fn leaves_carry_both_usages_and_their_names() {
        let params = leaf_params(Identity::Node(2), &names("10.0.0.7:7000")).unwrap();
        assert_eq!(
            params.extended_key_usages,
            [ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth]
        );
        assert_eq!(
            params.subject_alt_names,
            [
                SanType::IpAddress("10.0.0.7".parse().unwrap()),
                SanType::DnsName("node-2.identity.glass.invalid".try_into().unwrap())
            ]
        );
        let params = leaf_params(Identity::Coordinator(0), &names("coord.example:7000")).unwrap();
        assert_eq!(
            params.subject_alt_names,
            [
                SanType::DnsName("coord.example".try_into().unwrap()),
                SanType::DnsName("coordinator-0.identity.glass.invalid".try_into().unwrap())
            ]
        );
        assert_eq!(Identity::Node(2).common_name(), "glass node 2");
        assert_eq!(Identity::Node(2).file_stem(), "node-2");
    }

    #[test]
    fn identity_names_round_trip_and_nothing_else_parses() {
        for role in [
            Identity::Coordinator(0),
            Identity::Coordinator(2),
            Identity::Client,
            Identity::Node(0),
            Identity::Node(7),
            Identity::Node(u16::MAX),
        ] {
            assert_eq!(Identity::from_identity_name(&role.identity_name()), Some(role), "{role}");
        }
        for name in [
            "node-07.identity.glass.invalid",
            "node-+7.identity.glass.invalid",
            "node-65536.identity.glass.invalid",
            "node.identity.glass.invalid",
            "coordinator.identity.glass.example",
            "xcoordinator.identity.glass.invalid",
            "coordinatoridentity.glass.invalid",
        ] {
            assert_eq!(Identity::from_identity_name(name), None, "{name}");
        }
    }

    /// Defect #14, item 3: a certificate is exactly one identity's, and one issued before
    /// identities were bound (no identity name) is told apart with what to run.
    #[test]
    fn a_certificate_is_its_identity_only() {
        let ca_key = KeyPair::generate().unwrap();
        let ca = ca_params();
        let issuer = Issuer::from_params(&ca, &ca_key);
        let leaf = |role: Identity, with_identity: bool| {
            let key = KeyPair::generate().unwrap();
            let mut params = leaf_params(role, &names("127.0.0.1:7000")).unwrap();
            if !with_identity {
                params.subject_alt_names.pop();
            }
            params.signed_by(&key, &issuer).unwrap().der().clone()
        };
        let node2 = leaf(Identity::Node(2), true);
        check_identity(&node2, Identity::Node(2)).unwrap();
        assert_eq!(check_identity(&node2, Identity::Node(3)), Err(IdentityProblem::Other { holder: "node 2".into() }));
        assert_eq!(
            check_identity(&node2, Identity::Coordinator(0)),
            Err(IdentityProblem::Other { holder: "node 2".into() })
        );
        let client = leaf(Identity::Client, true);
        check_identity(&client, Identity::Client).unwrap();
        let e = check_identity(&client, Identity::Node(2)).unwrap_err();
        assert_eq!(e, IdentityProblem::Other { holder: "client".into() });
        assert_eq!(e.to_string(), "the certificate is the client's");
        let old = leaf(Identity::Coordinator(0), false);
        let e = check_identity(&old, Identity::Coordinator(0)).unwrap_err();
        assert_eq!(e, IdentityProblem::NoIdentity);
        assert!(e.to_string().contains("glass cluster init --force"), "{e}");
        assert_eq!(check_peer_identity(&[], Identity::Client), Err(IdentityProblem::NoCertificate));
    }
}
