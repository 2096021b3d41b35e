//! The crate boundaries of `docs/design.md` ("Crates, and what may depend on what"), checked
//! against `cargo metadata`: each workspace crate may depend only on the workspace crates its
//! arrows name — `engine` on none; `wire` on `engine`; `node` and `coordinator` on `engine` and
//! `wire` (so never on each other nor on the driver, `workload`); the driver on `engine`,
//! `wire` and `node`; `harness` on `engine`, `wire` and `workload`; `fuzzing` on `engine`, `wire`
//! and `node`. Every dependency kind counts
//! (normal, build and dev): a test that needs another crate belongs to a crate allowed to have
//! it. A new workspace crate fails the check until it is given its arrows here and in the
//! design.

use std::collections::BTreeMap;
use std::process::Command;

/// Each workspace crate and the workspace crates it may depend on.
const ALLOWED: &[(&str, &[&str])] = &[
    ("engine", &[]),
    ("wire", &["engine"]),
    ("coordinator", &["engine", "wire"]),
    ("node", &["engine", "wire"]),
    ("workload", &["engine", "wire", "node"]),
    ("sim", &["engine", "wire", "coordinator", "node", "workload"]),
    ("harness", &["engine", "wire", "workload"]),
    ("fuzzing", &["engine", "wire", "node"]),
    ("glass", &["engine", "wire", "coordinator", "node", "workload", "sim", "harness"]),
];

/// The workspace crates' dependencies on one another: crate → [(dependency, kind)].
fn workspace_edges(metadata: &serde_json::Value) -> BTreeMap<String, Vec<(String, String)>> {
    let packages = metadata["packages"].as_array().expect("cargo metadata lists packages");
    let members: Vec<String> =
        packages.iter().map(|p| p["name"].as_str().expect("a package has a name").to_string()).collect();
    let mut edges = BTreeMap::new();
    for p in packages {
        let name = p["name"].as_str().expect("a package has a name").to_string();
        let deps = p["dependencies"].as_array().expect("a package lists its dependencies");
        let inner: Vec<(String, String)> = deps
            .iter()
            .filter_map(|d| {
                let dep = d["name"].as_str()?.to_string();
                let kind = d["kind"].as_str().unwrap_or("normal").to_string();
                members.contains(&dep).then_some((dep, kind))
            })
            .collect();
        edges.insert(name, inner);
    }
    edges
}

/// Every dependency no arrow allows, as "a → b (kind)", and every crate with no arrows.
fn violations(metadata: &serde_json::Value) -> Vec<String> {
    let mut found = Vec::new();
    for (krate, deps) in workspace_edges(metadata) {
        let Some((_, allowed)) = ALLOWED.iter().find(|(name, _)| *name == krate) else {
            found.push(format!("{krate}: a workspace crate docs/design.md gives no arrows"));
            continue;
        };
        for (dep, kind) in deps {
            if !allowed.contains(&dep.as_str()) {
                found.push(format!("{krate} → {dep} ({kind})"));
            }
        }
    }
    found
}

fn cargo_metadata() -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

#[test]
fn the_workspace_keeps_its_crate_boundaries() {
    let metadata = cargo_metadata();
    let edges = workspace_edges(&metadata);
    for (krate, _) in ALLOWED {
        assert!(edges.contains_key(*krate), "crate {krate} is not in the workspace: update ALLOWED");
    }
    let found = violations(&metadata);
    assert!(found.is_empty(), "dependencies that break docs/design.md's crate boundaries:\n  {}", found.join("\n  "));
}

#[test]
fn a_dependency_no_arrow_allows_is_reported() {
    // The checker itself: engine uses wire, node's tests use the driver, coordinator uses node,
    // and a crate nobody placed appears.
    let metadata = serde_json::json!({
        "packages": [
            { "name": "engine", "dependencies": [ { "name": "wire", "kind": null }, { "name": "serde", "kind": null } ] },
            { "name": "wire", "dependencies": [ { "name": "engine", "kind": null } ] },
            { "name": "node", "dependencies": [ { "name": "workload", "kind": "dev" } ] },
            { "name": "workload", "dependencies": [ { "name": "node", "kind": null } ] },
            { "name": "coordinator", "dependencies": [ { "name": "node", "kind": null } ] },
            { "name": "stray", "dependencies": [] },
        ]
    });
    assert_eq!(
        violations(&metadata),
        vec![
            "coordinator → node (normal)".to_string(),
            "engine → wire (normal)".to_string(),
            "node → workload (dev)".to_string(),
            "stray: a workspace crate docs/design.md gives no arrows".to_string(),
        ]
    );
}
