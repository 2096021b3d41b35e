//! Reissuing one process's certificate (`glass cluster cert`; docs/cluster.md, "Several
//! hosts"): after one process's address changed, its certificate is issued again by the
//! cluster's existing CA, for its address in cluster.toml now, and every other certificate,
//! key and the CA stay as they are — so only that process's host needs new files.
//!
//! Guarantees: the CA's key is checked to be the key of `ca.pem` before anything is signed;
//! a bad address or an unknown process fails before any file is written; the new key is
//! written mode 0600.

use rcgen::{Issuer, KeyPair};

use super::{
    address_names, ca_params, leaf_params, load_ca, write_file, Identity, IssuedIdentity, TlsError, CA_KEY_FILE,
    CERT_FILE_MODE, KEY_FILE_MODE,
};
use crate::config::ClusterConfig;

/// Issues `role` a new certificate and key from the CA in `cfg.cert_dir`, for its address in
/// `cfg` (see the module documentation).
pub fn reissue(cfg: &ClusterConfig, role: Identity) -> Result<IssuedIdentity, TlsError> {
    let dir = cfg.cert_dir.as_path();
    let names = match role {
        Identity::Client => Vec::new(),
        Identity::Coordinator(id) => {
            let (i, c) = cfg
                .coordinators
                .iter()
                .enumerate()
                .find(|(_, c)| u16::from(c.id) == id)
                .ok_or(TlsError::UnknownProcess { role })?;
            address_names(&cfg.coordinator_field(i), &c.address)?
        }
        Identity::Node(id) => {
            let (i, n) =
                cfg.nodes.iter().enumerate().find(|(_, n)| n.id == id).ok_or(TlsError::UnknownProcess { role })?;
            address_names(&format!("nodes[{i}].address"), &n.address)?
        }
    };
    let ca = load_ca(dir)?;
    let key_path = dir.join(CA_KEY_FILE);
    let pem_error = |detail: String| TlsError::Pem { path: key_path.clone(), detail };
    let key_text = std::fs::read_to_string(&key_path).map_err(|e| pem_error(e.to_string()))?;
    let ca_key = KeyPair::from_pem(&key_text).map_err(|e| pem_error(format!("not a private key: {e}")))?;
    // The key's public half is in the CA certificate it signed (its subject public key info).
    let public = ca_key.public_key_raw().to_vec();
    if !ca.as_ref().windows(public.len()).any(|w| w == public.as_slice()) {
        return Err(pem_error("is not the key of this cluster's ca.pem".to_string()));
    }
    let ca_params = ca_params();
    let issuer = Issuer::from_params(&ca_params, &ca_key);
    let generate = |source| TlsError::Generate { what: format!("the {role}'s certificate"), source };
    let keypair = KeyPair::generate().map_err(generate)?;
    let cert = leaf_params(role, &names).map_err(generate)?.signed_by(&keypair, &issuer).map_err(generate)?;
    let (cert_path, key_path) = (role.cert_path(dir), role.key_path(dir));
    write_file(&key_path, &keypair.serialize_pem(), KEY_FILE_MODE)?;
    write_file(&cert_path, &cert.pem(), CERT_FILE_MODE)?;
    Ok(IssuedIdentity { role, cert: cert_path, key: key_path, names, identity: role.identity_name() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::{check_certificates, init_cluster};

    fn config(dir: &std::path::Path, node1: &str) -> ClusterConfig {
        let text = include_str!("../../../cluster.toml").replacen("127.0.0.1:7401", node1, 1);
        let mut c = ClusterConfig::parse(&text).unwrap();
        c.cert_dir = dir.to_path_buf();
        c
    }

    /// Issue 37: node 1 moved; its certificate alone is reissued from the same CA, the other
    /// files are untouched, and the set fits the new file — which it did not before.
    #[test]
    fn one_process_is_reissued_for_its_new_address_and_nothing_else_changes() {
        let dir = std::env::temp_dir().join(format!("glass-reissue-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let before = config(&dir, "127.0.0.1:7401");
        init_cluster(&before, false).unwrap();
        let files = |c: &ClusterConfig| -> Vec<(String, Vec<u8>)> {
            let mut v: Vec<_> = std::fs::read_dir(&c.cert_dir)
                .unwrap()
                .flatten()
                .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
                .collect();
            v.sort();
            v
        };
        let old = files(&before);
        let moved = config(&dir, "10.1.2.3:7401");
        assert!(matches!(check_certificates(&moved), Err(TlsError::NotForAddress(_))), "the old set does not fit");
        let issued = reissue(&moved, Identity::Node(1)).unwrap();
        assert_eq!(issued.names, vec!["10.1.2.3".to_string()]);
        check_certificates(&moved).unwrap();
        let new = files(&moved);
        let changed: Vec<&str> = old.iter().zip(&new).filter(|(a, b)| a.1 != b.1).map(|(a, _)| a.0.as_str()).collect();
        assert_eq!(changed, ["node-1.key", "node-1.pem"]);
        assert!(matches!(reissue(&moved, Identity::Node(9)), Err(TlsError::UnknownProcess { .. })));
        // Another CA's key is refused before anything is signed.
        let other = std::env::temp_dir().join(format!("glass-reissue-other-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&other);
        let mut c2 = config(&other, "127.0.0.1:7401");
        init_cluster(&c2, false).unwrap();
        std::fs::copy(other.join(CA_KEY_FILE), dir.join(CA_KEY_FILE)).unwrap();
        c2.cert_dir = dir.clone();
        let e = reissue(&c2, Identity::Node(2)).unwrap_err();
        assert!(e.to_string().contains("is not the key of this cluster's ca.pem"), "{e}");
        assert_eq!(std::fs::read(dir.join("node-2.pem")).unwrap(), old.iter().find(|f| f.0 == "node-2.pem").unwrap().1);
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&other);
    }
}
