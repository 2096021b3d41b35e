//! Replays, without a fuzzer, what each fuzz target was given that mattered: its seed corpus
//! (real encodings of every kind of message and file) and every minimised crasher kept in
//! `fuzzing/regressions/<target>/` (docs/design.md §13). A crasher that fails here again is a
//! regression of the defect it was kept for.

use std::path::{Path, PathBuf};

/// The files of `folder/<target>` (relative to this crate), sorted.
fn files(folder: &str, target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(folder).join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries.map(|e| e.expect("a readable folder").path()).collect();
    files.sort();
    files.into_iter().map(|p| (p.clone(), std::fs::read(&p).expect("a readable file"))).collect()
}

fn replay(name: &str) {
    let target = fuzzing::target(name).expect("a target of fuzzing::TARGETS");
    let seeds = (target.seeds)();
    assert!(!seeds.is_empty(), "{name} has no seeds");
    for seed in &seeds {
        assert!(
            seed.len() <= target.max_len,
            "{name}: a seed of {} bytes is over -max_len {}",
            seed.len(),
            target.max_len
        );
        (target.check)(seed);
    }
    // Committed seeds (frames recorded from a real cluster), then the kept crashers.
    for (path, bytes) in files("../fuzz/seeds", name).into_iter().chain(files("regressions", name)) {
        eprintln!("{name}: replaying {}", path.display());
        (target.check)(&bytes);
    }
}

macro_rules! replay_tests {
    ($($name:ident),* $(,)?) => {
        $( #[test] fn $name() { replay(stringify!($name)); } )*

        /// Every target has a test here, a libFuzzer binary and nothing else is fuzzed.
        #[test]
        fn every_target_is_replayed_and_has_a_fuzz_binary() {
            let here: Vec<&str> = vec![$(stringify!($name)),*];
            let listed: Vec<&str> = fuzzing::TARGETS.iter().map(|t| t.name).collect();
            assert_eq!(here, listed);
            let bins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/fuzz_targets");
            let mut found: Vec<String> = std::fs::read_dir(&bins)
                .expect("fuzz/fuzz_targets")
                .map(|e| e.unwrap().path().file_stem().unwrap().to_string_lossy().into_owned())
                .collect();
            found.sort();
            let mut listed: Vec<String> = listed.iter().map(|s| s.to_string()).collect();
            listed.sort();
            assert_eq!(found, listed, "fuzz/fuzz_targets/*.rs and fuzzing::TARGETS differ");
        }
    };
}

replay_tests!(
    frame_handshake,
    frame_client,
    frame_control,
    frame_group,
    frame_peer,
    frame_tool,
    hello,
    snapshot_install,
    log_base_install,
    redo_apply,
    wal_recovery,
    cluster_toml,
    tpcc_engines,
);

/// Not a check: each target's executions per second over its seeds, without instrumentation
/// (`cargo test -p fuzzing --release --test replay seed_speed -- --ignored --nocapture`);
/// `scripts/fuzz` reports the rates under libFuzzer.
#[test]
#[ignore = "a measurement"]
fn seed_speed() {
    for target in fuzzing::TARGETS {
        let seeds = (target.seeds)();
        let start = std::time::Instant::now();
        let mut runs = 0u64;
        while start.elapsed().as_secs_f64() < 2.0 {
            for seed in &seeds {
                (target.check)(seed);
                runs += 1;
            }
        }
        eprintln!(
            "{:<18} {:>10.0} exec/s over its {} seeds",
            target.name,
            runs as f64 / start.elapsed().as_secs_f64(),
            seeds.len()
        );
    }
}
