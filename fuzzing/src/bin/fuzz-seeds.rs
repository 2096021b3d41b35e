//! `fuzz-seeds OUT [--traffic RECORDED]`: writes every fuzz target's seed corpus
//! (`fuzzing::Target::seeds`) to `OUT/<target>/seed-<n>`; with `--traffic`, also files the
//! frames a real cluster recorded (`GLASS_RECORD_FRAMES`, see `wire::record`) under their
//! frame target as `OUT/<target>/traffic-<channel>-<file>` (docs/design.md §13).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use wire::channel::{
    ChannelMessage, ClientToCoordinator, CoordinatorToClient, CoordinatorToCoordinator, FromCoordinator, Handshake,
    NodeToCoordinator, PeerReply, PeerRequest, ToolReply, ToolRequest,
};

const USAGE: &str = "usage: fuzz-seeds OUT [--traffic RECORDED]\n  OUT       folder to write OUT/<target>/seed-<n> into\n  RECORDED  a GLASS_RECORD_FRAMES folder of a real cluster run, filed under the frame targets";

fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::create_dir_all(path.parent().expect("a file in a folder"))
        .and_then(|()| std::fs::write(path, bytes))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The recorded channel folders: each channel direction's folder name and its channel.
fn channels() -> Vec<(String, &'static str)> {
    [
        Handshake::CHANNEL,
        ClientToCoordinator::CHANNEL,
        CoordinatorToClient::CHANNEL,
        NodeToCoordinator::CHANNEL,
        FromCoordinator::CHANNEL,
        CoordinatorToCoordinator::CHANNEL,
        PeerRequest::CHANNEL,
        PeerReply::CHANNEL,
        ToolRequest::CHANNEL,
        ToolReply::CHANNEL,
    ]
    .into_iter()
    .map(|c| (wire::record::channel_dir_name(c), c))
    .collect()
}

fn traffic(out: &Path, recorded: &Path) -> Result<usize, String> {
    let mut filed = 0;
    let entries = std::fs::read_dir(recorded).map_err(|e| format!("cannot read {}: {e}", recorded.display()))?;
    for entry in entries {
        let dir = entry.map_err(|e| e.to_string())?.path();
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let Some((_, channel)) = channels().into_iter().find(|(d, _)| *d == name) else {
            return Err(format!("{}: no channel is recorded under that name", dir.display()));
        };
        let (target, selector) = fuzzing::frames::target_of_channel(channel).expect("every channel has a target");
        let max_len = fuzzing::target(target).expect("a listed target").max_len;
        let mut files: Vec<PathBuf> =
            std::fs::read_dir(&dir).map_err(|e| e.to_string())?.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for file in files {
            let frame = std::fs::read(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            let mut input = vec![selector, 0];
            input.extend_from_slice(&frame);
            if input.len() > max_len {
                continue;
            }
            let stem = file.file_name().and_then(|n| n.to_str()).unwrap_or("frame");
            write(&out.join(target).join(format!("traffic-{name}-{stem}")), &input)?;
            filed += 1;
        }
    }
    Ok(filed)
}

fn run(args: &[String]) -> Result<(), String> {
    let (out, recorded) = match args {
        [out] => (PathBuf::from(out), None),
        [out, flag, recorded] if flag == "--traffic" => (PathBuf::from(out), Some(PathBuf::from(recorded))),
        _ => return Err(USAGE.to_string()),
    };
    for target in fuzzing::TARGETS {
        let seeds = (target.seeds)();
        for (i, seed) in seeds.iter().enumerate() {
            write(&out.join(target.name).join(format!("seed-{i:03}")), seed)?;
        }
        println!("{:<18} {:>4} seeds", target.name, seeds.len());
    }
    if let Some(recorded) = recorded {
        let filed = traffic(&out, &recorded)?;
        println!("{filed} recorded frames filed from {}", recorded.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fuzz-seeds: {e}");
            ExitCode::from(2)
        }
    }
}
