//! Recording of received frames, for the fuzz targets' seed corpora (docs/design.md §13):
//! when the environment variable [`RECORD_ENV`] names a folder, a process writes the first
//! [`FRAMES_PER_VARIANT`] frames it receives of each variant of each channel to
//! `<folder>/<channel>/<variant>-<pid>-<n>` (the whole frame, length prefix included; frames
//! over [`FRAME_BYTES_RECORDED_MAX`] are skipped). Unset, recording costs one check of a
//! once-initialised flag per frame. A file that cannot be written is skipped: recording never
//! fails a link.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use crate::channel::ChannelMessage;

/// The environment variable naming the recording folder.
pub const RECORD_ENV: &str = "GLASS_RECORD_FRAMES";
/// Frames recorded per variant of a channel, per process.
pub const FRAMES_PER_VARIANT: u32 = 4;
/// Larger frames are not recorded (a fuzz target's inputs are at most a few hundred KiB).
pub const FRAME_BYTES_RECORDED_MAX: usize = 192 << 10;

struct Recorder {
    dir: PathBuf,
    counts: Mutex<HashMap<(&'static str, &'static str), u32>>,
}

fn recorder() -> Option<&'static Recorder> {
    static RECORDER: OnceLock<Option<Recorder>> = OnceLock::new();
    RECORDER
        .get_or_init(|| {
            let dir = std::env::var_os(RECORD_ENV).filter(|d| !d.is_empty())?;
            Some(Recorder { dir: PathBuf::from(dir), counts: Mutex::new(HashMap::new()) })
        })
        .as_ref()
}

/// The folder name of a channel direction ([`ChannelMessage::CHANNEL`]): its letters and
/// digits, the rest as `-` (`node → coordinator` → `node-coordinator`).
pub fn channel_dir_name(channel: &str) -> String {
    let mut out = String::new();
    for c in channel.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// Records `frame`, just decoded as `msg`, if recording is on and its variant's quota is not
/// used up.
pub fn frame<M: ChannelMessage>(msg: &M, frame: &[u8]) {
    let Some(rec) = recorder() else { return };
    if frame.len() > FRAME_BYTES_RECORDED_MAX {
        return;
    }
    let n = {
        let mut counts = rec.counts.lock().unwrap_or_else(|e| e.into_inner());
        let n = counts.entry((M::CHANNEL, msg.name())).or_insert(0);
        if *n >= FRAMES_PER_VARIANT {
            return;
        }
        *n += 1;
        *n
    };
    let dir = rec.dir.join(channel_dir_name(M::CHANNEL));
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join(format!("{}-{}-{n}", msg.name(), std::process::id())), frame);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_folder_names_are_plain() {
        assert_eq!(channel_dir_name("node → coordinator"), "node-coordinator");
        assert_eq!(channel_dir_name("node → node (replies)"), "node-node-replies");
        assert_eq!(channel_dir_name("coordinator ↔ coordinator"), "coordinator-coordinator");
    }
}
