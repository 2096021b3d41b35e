//! Fault injection for tests of the failure paths on real processes (in the manner of
//! FoundationDB's BUGGIFY, but only on request): a node process injects a fault into itself
//! only when its environment names it in `GLASS_FAULTS` (comma-separated), and logs each time
//! it does. Without the variable nothing here has any effect.
//!
//! Faults:
//! - `corrupt-snapshot`: the first snapshot this process serves has one byte of its first
//!   non-empty chunk flipped after the chunk's checksum was computed — what a damaged
//!   transfer looks like to the receiver, which must reject the copy and fetch it again.
//! - `stall-snapshot`: the first copy this process serves stops after its first chunk, its
//!   stream left open, until the receiver goes away (or the copy's own receiver patience
//!   passes) — a source hung mid-copy, as its joiner sees it: the joiner's machine must
//!   abandon the fetch for its silence and fetch again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use wire::messages::SnapshotChunk;

/// The environment variable naming the faults to inject.
pub const ENV: &str = "GLASS_FAULTS";

#[derive(Debug, Default)]
struct Faults {
    corrupt_snapshot: AtomicBool,
    stall_snapshot: AtomicBool,
}

/// Every fault's name.
const KNOWN: [&str; 2] = ["corrupt-snapshot", "stall-snapshot"];

fn faults() -> &'static Faults {
    static FAULTS: OnceLock<Faults> = OnceLock::new();
    FAULTS.get_or_init(|| {
        let wanted = std::env::var(ENV).unwrap_or_default();
        let names: Vec<&str> = wanted.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
        for n in &names {
            if !KNOWN.contains(n) {
                tracing::warn!(fault = n, "unknown fault in {ENV}; ignored");
            }
        }
        Faults {
            corrupt_snapshot: AtomicBool::new(names.contains(&"corrupt-snapshot")),
            stall_snapshot: AtomicBool::new(names.contains(&"stall-snapshot")),
        }
    })
}

/// Damages `chunks` (a snapshot about to be served) if `corrupt-snapshot` is armed, once per
/// process; says whether it did.
pub fn corrupt_snapshot(chunks: &mut [SnapshotChunk]) -> bool {
    if !faults().corrupt_snapshot.swap(false, Ordering::Relaxed) {
        return false;
    }
    for SnapshotChunk { rows_bytes, .. } in chunks {
        if let Some(b) = rows_bytes.first_mut() {
            *b ^= 0x5A;
            tracing::warn!("fault injected ({ENV}): a snapshot chunk damaged after its checksum");
            return true;
        }
    }
    false
}

/// Whether the copy whose first chunk just went out stalls now (`stall-snapshot` armed; once
/// per process). Logs that it does.
pub fn stall_snapshot() -> bool {
    if !faults().stall_snapshot.swap(false, Ordering::Relaxed) {
        return false;
    }
    tracing::warn!("fault injected ({ENV}): a copy stalls after its first chunk");
    true
}
