//! The crate boundaries of `docs/design.md` ("Crates, and what may depend on what"), checked
//! against `cargo metadata`: `engine` depends on no other workspace crate; `wire` on neither
//! `node`, `coordinator`, the driver (`workload`) nor `harness`; `node` and `coordinator` not on
//! each other, nor on the driver, `harness` or `sim`. Every dependency kind counts (normal,
//! build and dev): a test that needs the driver belongs to a crate allowed to have it.

use std::collections::BTreeMap;
use std::process::Command;

/// Which workspace crates each crate must never depend on (`*` = none at all).
const FORBIDDEN: &[(&str, &[&str])] = &[
    ("engine", &["*"]),
    ("wire", &["node", "coordinator", "workload", "harness", "sim", "glass"]),
    ("node", &["coordinator", "workload", "harness", "sim", "glass"]),
    ("coordinator", &["node", "workload", "harness", "sim", "glass"]),
    ("workload", &["coordinator", "harness", "sim", "glass"]),
    ("sim", &["harness", "glass"]),
    ("harness", &["sim", "glass"]),
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

/// Every dependency that breaks a rule of [`FORBIDDEN`], as "a → b (kind)".
fn violations(metadata: &serde_json::Value) -> Vec<String> {
    let edges = workspace_edges(metadata);
    let mut found = Vec::new();
    for (krate, never) in FORBIDDEN {
        for (dep, kind) in edges.get(*krate).map(Vec::as_slice).unwrap_or(&[]) {
            if never.contains(&"*") || never.contains(&dep.as_str()) {
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
    for (krate, _) in FORBIDDEN {
        assert!(edges.contains_key(*krate), "crate {krate} is not in the workspace: update FORBIDDEN");
    }
    let found = violations(&metadata);
    assert!(found.is_empty(), "dependencies that break docs/design.md's crate boundaries:\n  {}", found.join("\n  "));
}

#[test]
fn a_forbidden_dependency_is_reported() {
    // The checker itself: a workspace where node uses the driver and engine uses wire.
    let metadata = serde_json::json!({
        "packages": [
            { "name": "engine", "dependencies": [ { "name": "wire", "kind": null }, { "name": "serde", "kind": null } ] },
            { "name": "wire", "dependencies": [ { "name": "engine", "kind": null } ] },
            { "name": "node", "dependencies": [ { "name": "workload", "kind": "dev" } ] },
            { "name": "workload", "dependencies": [] },
            { "name": "coordinator", "dependencies": [ { "name": "wire", "kind": null } ] },
        ]
    });
    assert_eq!(violations(&metadata), vec!["engine → wire (normal)".to_string(), "node → workload (dev)".to_string()]);
}
