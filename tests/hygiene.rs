//! What the repository must never hold (issue 37; the brief's rule): a private key (a run
//! folder once carried the cluster CA's key), or an absolute path of the machine that built it
//! (its checkout or its home), which means nothing on another machine and tells a reader where
//! someone's files were.
//!
//! Reads `git ls-files`; outside a git checkout it says so on stderr and returns.

use std::path::Path;
use std::process::Command;

/// Tracked files larger than this are not read (none holds text this large).
const READ_BYTES_MAX: u64 = 8 << 20;

#[test]
fn no_tracked_file_holds_a_private_key_or_a_path_of_this_machine() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let o = match Command::new("git").arg("-C").arg(root).args(["ls-files", "-z"]).output() {
        Ok(o) if o.status.success() => o,
        _ => {
            eprintln!("hygiene: not run: {} is not a git checkout", root.display());
            return;
        }
    };
    // Built at run time, so that this file does not hold what it looks for.
    let key_marker = format!("{} KEY-----", "PRIVATE");
    let mut machine_paths = vec![root.display().to_string()];
    if let Some(home) = std::env::var_os("HOME").map(|h| h.to_string_lossy().trim_end_matches('/').to_string()) {
        if home.matches('/').count() >= 1 && home.len() > 1 {
            machine_paths.push(format!("{home}/"));
        }
    }
    let mut found = Vec::new();
    for name in o.stdout.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let name = String::from_utf8_lossy(name).into_owned();
        if name.ends_with(".key") || name.ends_with(".pem") || name.starts_with("run/") || name.contains("/run/") {
            found.push(format!("{name}: a key, certificate or run folder file"));
            continue;
        }
        let path = root.join(&name);
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        if meta.len() > READ_BYTES_MAX {
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else { continue };
        let text = String::from_utf8_lossy(&bytes);
        if text.contains(&key_marker) {
            found.push(format!("{name}: holds a private key"));
        }
        for p in &machine_paths {
            if text.contains(p.as_str()) {
                found.push(format!("{name}: names {p}, a path of the machine that built it"));
            }
        }
    }
    assert!(found.is_empty(), "the repository must not hold these:\n  {}", found.join("\n  "));
}
