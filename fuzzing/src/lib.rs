//! The properties every input crossing a trust boundary must hold (docs/design.md §13), one
//! [`Target`] per boundary: bytes from the network (each channel's frames, the Hello, snapshot
//! and log-base chunk streams, shipped redo), from disk (the write-ahead log and its
//! checkpoint) and from users (`cluster.toml`, TPC-C procedure inputs).
//!
//! Each target's `check` takes arbitrary bytes and panics only when a property is broken: a
//! decoder either refuses with a typed error or yields a value that re-encodes to the very
//! bytes it was decoded from; recovery over garbage either refuses or yields a consistent
//! database; two engines given the same inputs agree. A panic is a finding, whatever its
//! message.
//!
//! The same functions run three ways: under libFuzzer (the `fuzz` folder's binaries, built and
//! run by `scripts/fuzz`), over each target's seed corpus ([`Target::seeds`], written to
//! `fuzz/seeds` by `fuzz-seeds`), and over every minimised crasher kept in
//! `fuzzing/regressions/<target>/` — the last two by `cargo test`, so CI replays them without
//! a fuzzer.

pub mod config;
pub mod frames;
pub mod hello;
pub mod log_base;
pub mod redo;
pub mod snapshot;
pub mod tpcc;
pub mod wal;

/// One fuzz target: a trust boundary and the property its inputs must hold.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// The name of its libFuzzer binary (`fuzz/fuzz_targets/<name>.rs`) and of its corpus,
    /// seed and regression folders.
    pub name: &'static str,
    /// What crosses the boundary and what is checked, one line.
    pub what: &'static str,
    /// Panics when a property is broken.
    pub check: fn(&[u8]),
    /// Inputs to start fuzzing from: real encodings of every kind of message or file.
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// libFuzzer's `-max_len`: the largest input worth trying.
    pub max_len: usize,
    /// libFuzzer's `-rss_limit_mb` (and `-malloc_limit_mb`): no input may make the process
    /// use more.
    pub rss_limit_mb: usize,
}

/// Every target, in the order `scripts/fuzz` runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "frame_handshake",
        what: "a connection's first frame, both directions: refuse, or re-encode to the same bytes",
        check: frames::handshake,
        seeds: frames::handshake_seeds,
        max_len: 4096,
        rss_limit_mb: 512,
    },
    Target {
        name: "frame_client",
        what: "client ↔ coordinator frames in arbitrary pieces: refuse, or re-encode to the same bytes",
        check: frames::client,
        seeds: frames::client_seeds,
        max_len: 65_536,
        rss_limit_mb: 512,
    },
    Target {
        name: "frame_control",
        what: "node ↔ coordinator frames in arbitrary pieces: refuse, or re-encode to the same bytes",
        check: frames::control,
        seeds: frames::control_seeds,
        max_len: 65_536,
        rss_limit_mb: 512,
    },
    Target {
        name: "frame_group",
        what: "coordinator ↔ coordinator frames in arbitrary pieces: refuse, or re-encode to the same bytes",
        check: frames::group,
        seeds: frames::group_seeds,
        max_len: 65_536,
        rss_limit_mb: 512,
    },
    Target {
        name: "frame_peer",
        what: "node ↔ node frames in arbitrary pieces: refuse, or re-encode to the same bytes",
        check: frames::peer,
        seeds: frames::peer_seeds,
        max_len: 65_536,
        rss_limit_mb: 512,
    },
    Target {
        name: "frame_tool",
        what: "tool ↔ node frames in arbitrary pieces: refuse, or re-encode to the same bytes",
        check: frames::tool,
        seeds: frames::tool_seeds,
        max_len: 65_536,
        rss_limit_mb: 512,
    },
    Target {
        name: "hello",
        what: "a Hello and the certificate presented with it: accepted only from the identity it claims, same version and cluster",
        check: hello::check,
        seeds: hello::seeds,
        max_len: 4096,
        rss_limit_mb: 512,
    },
    Target {
        name: "snapshot_install",
        what: "snapshot chunk streams installed into a replica: refuse, or install a copy equal to the source",
        check: snapshot::check,
        seeds: snapshot::seeds,
        max_len: 262_144,
        rss_limit_mb: 1024,
    },
    Target {
        name: "log_base_install",
        what: "log-base chunk streams assembled by a rejoining full-stack node: refuse, or yield what was sent",
        check: log_base::check,
        seeds: log_base::seeds,
        max_len: 262_144,
        rss_limit_mb: 1024,
    },
    Target {
        name: "redo_apply",
        what: "shipped redo batches applied to a backup: refuse, or apply leaving a consistent replica",
        check: redo::check,
        seeds: redo::seeds,
        max_len: 65_536,
        rss_limit_mb: 1024,
    },
    Target {
        name: "wal_recovery",
        what: "restart recovery over an arbitrary write-ahead log and checkpoint: refuse, or a consistent database",
        check: wal::check,
        seeds: wal::seeds,
        max_len: 262_144,
        rss_limit_mb: 1536,
    },
    Target {
        name: "cluster_toml",
        what: "cluster.toml text: a named error, or a configuration that validates, round-trips and fingerprints stably",
        check: config::check,
        seeds: config::seeds,
        max_len: 16_384,
        rss_limit_mb: 512,
    },
    Target {
        name: "tpcc_engines",
        what: "TPC-C procedure inputs through the input check into the lean kernel and the conventional stack: same outcomes, same digest, consistent",
        check: tpcc::check,
        seeds: tpcc::seeds,
        max_len: 8192,
        rss_limit_mb: 1536,
    },
];

/// The target named `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// Run once by a libFuzzer binary before fuzzing (`scripts/fuzz` uses both): with
/// `GLASS_FUZZ_INFO` set, prints the target's `-max_len` and `-rss_limit_mb` and exits; with
/// `GLASS_FUZZ_SEEDS` naming a folder, writes the target's seeds there as `seed-<n>` and
/// exits. Otherwise does nothing.
pub fn init(name: &str) {
    let target = target(name).unwrap_or_else(|| panic!("{name} is not in fuzzing::TARGETS"));
    if std::env::var_os("GLASS_FUZZ_INFO").is_some() {
        println!("{} {}", target.max_len, target.rss_limit_mb);
        std::process::exit(0);
    }
    if let Some(dir) = std::env::var_os("GLASS_FUZZ_SEEDS") {
        let dir = std::path::PathBuf::from(dir);
        let written = std::fs::create_dir_all(&dir).and_then(|()| {
            (target.seeds)()
                .iter()
                .enumerate()
                .try_for_each(|(i, seed)| std::fs::write(dir.join(format!("seed-{i:03}")), seed))
        });
        if let Err(e) = written {
            eprintln!("{name}: cannot write seeds to {}: {e}", dir.display());
            std::process::exit(2);
        }
        std::process::exit(0);
    }
}

/// The input format of the transfer targets (`snapshot_install`, `log_base_install`): a flags
/// byte, then peer replies framed as the peer channel carries them.
pub mod peer_input {
    use wire::channel::PeerReply;
    use wire::codec::{self, FRAME_BYTES_MAX_DEFAULT};

    /// `flags`, then the frames of `replies`.
    pub fn encode(flags: u8, replies: impl IntoIterator<Item = PeerReply>) -> Vec<u8> {
        let mut out = vec![flags];
        for reply in replies {
            codec::encode_into(&reply, &mut out, FRAME_BYTES_MAX_DEFAULT).expect("a reply fits its frame");
        }
        out
    }

    /// The replies `frames` holds, up to the first frame that does not decode (where a
    /// receiver would close the connection).
    pub fn replies(mut frames: &[u8]) -> impl Iterator<Item = PeerReply> + '_ {
        std::iter::from_fn(move || {
            let (reply, used) = codec::decode::<PeerReply>(frames, FRAME_BYTES_MAX_DEFAULT).ok()?;
            frames = &frames[used..];
            Some(reply)
        })
    }
}
