//! Build facts a run record needs (docs/design.md §12): the git commit glass was
//! built from, `-dirty` when tracked files had changes, `unknown` outside a git checkout or
//! without git. Exposed to the binary as `GLASS_GIT_COMMIT`.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).filter(|c| !c.is_empty());
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    let value = match commit {
        Some(c) if dirty => format!("{c}-dirty"),
        Some(c) => c,
        None => "unknown".to_string(),
    };
    println!("cargo:rustc-env=GLASS_GIT_COMMIT={value}");
    // Rebuild when HEAD moves (a commit, a checkout) or the index changes (dirty or not).
    if let Some(git_dir) = git(&["rev-parse", "--git-dir"]) {
        let git_dir = Path::new(&git_dir);
        for f in ["HEAD", "index", "packed-refs"] {
            println!("cargo:rerun-if-changed={}", git_dir.join(f).display());
        }
        if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={}", git_dir.join(head_ref).display());
        }
    }
    // And when any source changes, so that `-dirty` is true of the tree that was built.
    for dir in ["src", "engine", "workload", "wire", "coordinator", "node", "sim", "harness", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={dir}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
