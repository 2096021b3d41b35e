//! Defect #14, item 5, end to end through the built `glass` binary: `glass cluster init` and
//! `glass cluster up` check a cluster.toml — its directories, its addresses, the certificates
//! already issued — before they create anything, and a refusal names the key, the
//! certificate, the address and what to run. (Items 2–4 are tested against the transport
//! itself, in wire/tests/stuffing.rs and wire/tests/transport.rs.)
//!
//! Each test uses its own directory and free ports; a guard runs `cluster down` and kills any
//! process left when the test ends.

mod common;

use std::path::Path;

use common::*;

/// Every file under `dir`, as paths relative to it, sorted.
fn files_relative(dir: &Path) -> Vec<String> {
    files_under(dir).iter().map(|p| p.strip_prefix(dir).unwrap().display().to_string()).collect()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The address of the node with `id` in the cluster.toml at `config`.
fn node_address(config: &Path, id: u16) -> String {
    let cfg = wire::ClusterConfig::parse(&std::fs::read_to_string(config).unwrap()).unwrap();
    cfg.node(id).unwrap().address.clone()
}

/// Replaces `from` by `to` in the file at `config` (which must contain it).
fn edit(config: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(config).unwrap();
    assert!(text.contains(from), "{from} not in {text}");
    std::fs::write(config, text.replace(from, to)).unwrap();
}

/// `cert_dir = ""` was made the directory of cluster.toml before validation, so `cluster up`
/// wrote the CA's key and every private key next to the file; `run_dir = ""` likewise. Both
/// are refused by name, and nothing is written.
#[test]
fn an_empty_cert_dir_or_run_dir_is_refused_and_nothing_is_written() {
    for (key, line) in [("cert_dir", "cert_dir = \"run/certs\""), ("run_dir", "run_dir = \"run\"")] {
        let dir = scratch(&format!("empty-{key}"));
        let config = cluster_toml(&dir, "run/certs");
        let _teardown = Teardown(config.clone());
        edit(&config, line, &format!("{key} = \"\""));
        let cfg = config.to_str().unwrap();
        for command in ["init", "up"] {
            let o = glass(&["cluster", command, "--config", cfg]);
            assert!(!o.status.success(), "{command} with {key} = \"\": {}", text(&o));
            assert!(stderr(&o).contains(&format!("{key}: is empty: name a directory")), "{}", text(&o));
            assert_eq!(files_relative(&dir), ["cluster.toml"], "{command} with {key} = \"\" wrote files");
            assert!(processes_of(&config).is_empty(), "{command} started processes");
        }
    }
}

/// A refused `cluster up` (an address that cannot be bound, or resolved) had already issued
/// certificates for that address and created the run directory; corrected, `up` reused them
/// and the cluster could not connect. Now nothing is created until everything checks out,
/// and the corrected file starts.
#[test]
fn a_refused_up_creates_nothing_and_the_corrected_file_starts() {
    let dir = scratch("refused-up");
    let config = cluster_toml(&dir, "run/certs");
    let _teardown = Teardown(config.clone());
    let cfg = config.to_str().unwrap();
    let good = node_address(&config, 1);
    let port = good.rsplit_once(':').unwrap().1.to_string();
    // TEST-NET-1 (RFC 5737): an address of no interface here; `.invalid` never resolves.
    for (bad, says) in [
        (format!("192.0.2.1:{port}"), format!("nodes[0].address: cannot bind 192.0.2.1:{port}")),
        (
            format!("no-such-host.invalid:{port}"),
            format!("nodes[0].address: cannot resolve `no-such-host.invalid:{port}`"),
        ),
    ] {
        edit(&config, &good, &bad);
        let o = glass(&["cluster", "up", "--config", cfg]);
        assert!(!o.status.success(), "{bad}: {}", text(&o));
        assert!(stderr(&o).contains(&says), "{bad}: {}", text(&o));
        assert_eq!(files_relative(&dir), ["cluster.toml"], "a refused up for {bad} created files");
        edit(&config, &bad, &good);
    }
    // Corrected: `up` issues the certificates itself and the cluster serves.
    let o = glass(&["cluster", "up", "--config", cfg]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(processes_of(&config).len(), 5, "three coordinators and two nodes run");
    let o = glass(&["cluster", "status", "--config", cfg]);
    assert!(o.status.success(), "{}", text(&o));
}

/// Certificates name their process's host: after cluster.toml moves a node to another host,
/// `up` refuses (it used to start a cluster its tools could not reach, and wait out the load
/// timeout), naming the certificate, the address and what to run; after that, it starts.
#[test]
fn certificates_issued_for_other_addresses_are_named_with_what_to_run() {
    let dir = scratch("moved");
    let config = cluster_toml(&dir, "run/certs");
    let _teardown = Teardown(config.clone());
    let cfg = config.to_str().unwrap();
    // A short load timeout, so that an `up` that starts anyway fails in a minute, not ten.
    edit(&config, "load_timeout_s = 600", "load_timeout_s = 60");
    let o = glass(&["cluster", "init", "--config", cfg]);
    assert!(o.status.success(), "{}", text(&o));
    let issued = files_relative(&dir);

    // Another loopback address: bindable here, and not among the names node 1's certificate has.
    let old = node_address(&config, 1);
    let moved = old.replace("127.0.0.1:", "127.0.0.2:");
    edit(&config, &old, &moved);
    let o = glass(&["cluster", "up", "--config", cfg]);
    assert!(!o.status.success(), "{}", text(&o));
    let err = stderr(&o);
    for part in [
        "node-1.pem".to_string(),
        format!("nodes[0].address = \"{moved}\""),
        "`127.0.0.2`".to_string(),
        "glass cluster init --force".to_string(),
    ] {
        assert!(err.contains(&part), "{part}: {}", text(&o));
    }
    assert_eq!(files_relative(&dir), issued, "the refused up created or changed files");
    assert!(processes_of(&config).is_empty());

    let o = glass(&["cluster", "init", "--force", "--config", cfg]);
    assert!(o.status.success(), "{}", text(&o));
    let o = glass(&["cluster", "up", "--config", cfg]);
    assert!(o.status.success(), "{}", text(&o));
    // Status reaches node 1 at its new address, with its reissued certificate.
    let o = glass(&["cluster", "status", "--config", cfg]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).matches(" ready ").count(), 4, "{}", text(&o));
}
