//! Instruction counting with valgrind's callgrind, for machines without hardware counters.
//!
//! Owns: the callgrind client requests (the valgrind "magic sequence" as inline asm on
//! x86_64; a no-op returning the default everywhere else and outside valgrind), the parse of
//! callgrind's output files, and the spawning of one valgrind child and the collection of its
//! dumps.
//!
//! Guarantees: a child runs with `--instr-atstart=no --collect-atstart=no`, so nothing is
//! counted until the child turns instrumentation and collection on around its measured loop
//! (the load and warm-up are never counted); a count is returned only when the dump carrying
//! the expected trigger name was found and its total parsed, so a missing or zero count is an
//! error, never a figure.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `VG_USERREQ_TOOL_BASE('C', 'T')`: callgrind's client-request base.
const CALLGRIND_BASE: u64 = ((b'C' as u64) << 24) | ((b'T' as u64) << 16);
/// Dumps the counters to a new file, with a trigger name; then zeroes them.
const DUMP_STATS_AT: u64 = CALLGRIND_BASE + 3;
/// Zeroes the counters.
const ZERO_STATS: u64 = CALLGRIND_BASE + 1;
/// Toggles collection (counting) on and off.
const TOGGLE_COLLECT: u64 = CALLGRIND_BASE + 2;
/// Starts instrumentation (flushes translations; expensive once).
const START_INSTRUMENTATION: u64 = CALLGRIND_BASE + 4;
/// Stops instrumentation.
const STOP_INSTRUMENTATION: u64 = CALLGRIND_BASE + 5;
/// The core request `VG_USERREQ__RUNNING_ON_VALGRIND`.
const RUNNING_ON_VALGRIND: u64 = 0x1001;

/// Why a callgrind count failed.
#[derive(Debug, thiserror::Error)]
pub enum CallgrindError {
    #[error("cannot start valgrind: {0}")]
    Spawn(std::io::Error),
    #[error("the valgrind child for {what} failed ({status}): {stderr}")]
    ChildFailed { what: String, status: String, stderr: String },
    #[error("the valgrind child for {what} printed no worker report (stdout: {stdout:?})")]
    NoReport { what: String, stdout: String },
    #[error("cannot read callgrind output in {}: {source}", dir.display())]
    ReadDir { dir: PathBuf, source: std::io::Error },
    #[error("no callgrind dump triggered by `{trigger}` in {}", dir.display())]
    NoDump { trigger: String, dir: PathBuf },
    #[error("callgrind output {}: {what}", path.display())]
    Parse { path: PathBuf, what: &'static str },
}

/// Issues one valgrind client request; returns `default` when not running under valgrind.
#[inline(always)]
fn client_request(default: u64, request: u64, a1: u64, a2: u64, a3: u64, a4: u64, a5: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        let args: [u64; 6] = [request, a1, a2, a3, a4, a5];
        let mut result = default;
        // SAFETY: the rotations of rdi sum to 128 bits, leaving it unchanged, and `xchg rbx,
        // rbx` is a no-op: on a real CPU the sequence changes nothing but the flags. Under
        // valgrind it is the client-request marker: valgrind reads the six words at rax
        // (which live until the asm returns) and writes its answer to rdx.
        unsafe {
            std::arch::asm!(
                "rol rdi, 3",
                "rol rdi, 13",
                "rol rdi, 61",
                "rol rdi, 51",
                "xchg rbx, rbx",
                inout("rdx") result,
                in("rax") args.as_ptr(),
                inout("rdi") 0u64 => _,
                options(nostack),
            );
        }
        result
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (request, a1, a2, a3, a4, a5);
        default
    }
}

/// Whether client requests can work on this architecture (the asm exists only for x86_64).
pub const SUPPORTED: bool = cfg!(target_arch = "x86_64");

/// How many valgrinds deep this process runs (0 outside valgrind).
pub fn running_on_valgrind() -> u64 {
    client_request(0, RUNNING_ON_VALGRIND, 0, 0, 0, 0, 0)
}

/// Turns instrumentation on (collection stays as it is).
pub fn start_instrumentation() {
    client_request(0, START_INSTRUMENTATION, 0, 0, 0, 0, 0);
}

/// Turns instrumentation off.
pub fn stop_instrumentation() {
    client_request(0, STOP_INSTRUMENTATION, 0, 0, 0, 0, 0);
}

/// Zeroes the counters.
pub fn zero_stats() {
    client_request(0, ZERO_STATS, 0, 0, 0, 0, 0);
}

/// Toggles collection.
pub fn toggle_collect() {
    client_request(0, TOGGLE_COLLECT, 0, 0, 0, 0, 0);
}

/// Dumps the counters with `trigger` as the dump's trigger name (`desc: Trigger: Client
/// Request: <trigger>`); callgrind zeroes them afterwards.
pub fn dump_stats_at(trigger: &str) {
    let mut name = trigger.as_bytes().to_vec();
    name.push(0);
    client_request(0, DUMP_STATS_AT, name.as_ptr() as u64, 0, 0, 0, 0);
}

/// Counts the instructions `f` executes: zero, collect around `f`, dump as `trigger`.
/// Instrumentation must already be on ([`start_instrumentation`]).
#[inline(never)]
pub fn counted<R>(trigger: &str, f: impl FnOnce() -> R) -> R {
    zero_stats();
    toggle_collect();
    let r = f();
    toggle_collect();
    dump_stats_at(trigger);
    r
}

/// One parsed callgrind output file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dump {
    /// The `desc: Trigger:` text, e.g. `Client Request: payment` or `Program termination`.
    pub trigger: String,
    /// Instructions executed (`Ir`) from the `totals:` line, else the `summary:` line.
    pub instructions: u64,
}

/// Parses the header and totals of a callgrind output file. The `events:` line names the
/// columns of `summary:`/`totals:`; `Ir` is taken from its column.
pub fn parse_output(text: &str) -> Result<Dump, &'static str> {
    let mut trigger = None;
    let mut events: Option<Vec<&str>> = None;
    let mut summary = None;
    let mut totals = None;
    for line in text.lines() {
        if let Some(t) = line.strip_prefix("desc: Trigger:") {
            trigger = Some(t.trim().to_string());
        } else if let Some(e) = line.strip_prefix("events:") {
            events = Some(e.split_whitespace().collect());
        } else if let Some(s) = line.strip_prefix("summary:") {
            summary = Some(s);
        } else if let Some(s) = line.strip_prefix("totals:") {
            totals = Some(s);
        }
    }
    let events = events.ok_or("no `events:` line")?;
    let column = events.iter().position(|&e| e == "Ir").ok_or("the events do not include Ir")?;
    let line = totals.or(summary).ok_or("no `totals:` or `summary:` line")?;
    let value = line.split_whitespace().nth(column).ok_or("the totals line has no Ir column")?;
    let instructions = value.parse::<u64>().map_err(|_| "the Ir total is not a number")?;
    Ok(Dump { trigger: trigger.unwrap_or_default(), instructions })
}

/// Reads every callgrind output file in `dir` (files whose name starts with `prefix`).
pub fn read_dumps(dir: &Path, prefix: &str) -> Result<Vec<Dump>, CallgrindError> {
    let read_dir = |source| CallgrindError::ReadDir { dir: dir.to_path_buf(), source };
    let mut dumps = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_dir)? {
        let path = entry.map_err(read_dir)?.path();
        if !path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix)) {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(read_dir)?;
        dumps.push(parse_output(&text).map_err(|what| CallgrindError::Parse { path: path.clone(), what })?);
    }
    Ok(dumps)
}

/// The instructions of the dump whose trigger is the client request `name`.
pub fn find_dump(dumps: &[Dump], name: &str, dir: &Path) -> Result<u64, CallgrindError> {
    let want = format!("Client Request: {name}");
    dumps
        .iter()
        .find(|d| d.trigger == want)
        .map(|d| d.instructions)
        .ok_or_else(|| CallgrindError::NoDump { trigger: name.to_string(), dir: dir.to_path_buf() })
}

/// Why there is no valgrind to count with.
#[derive(Debug, thiserror::Error)]
pub enum NoValgrind {
    #[error("`valgrind --version` failed ({0})")]
    Failed(std::process::ExitStatus),
    #[error("valgrind is not installed or not on PATH ({0})")]
    NotInstalled(std::io::Error),
}

/// The installed valgrind's version line, or why there is none.
pub fn valgrind_version() -> Result<String, NoValgrind> {
    match Command::new("valgrind").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).trim().to_string()),
        Ok(o) => Err(NoValgrind::Failed(o.status)),
        Err(e) => Err(NoValgrind::NotInstalled(e)),
    }
}

/// File name prefix of the child's callgrind output files.
pub const OUT_PREFIX: &str = "callgrind.out";

/// Runs `exe args` under callgrind with instrumentation and collection off at start, output
/// files in `out_dir`; returns the child's stdout.
pub fn run_child(exe: &Path, args: &[OsString], out_dir: &Path, what: &str) -> Result<String, CallgrindError> {
    let mut out_file = OsString::from("--callgrind-out-file=");
    out_file.push(out_dir.join(OUT_PREFIX));
    let out = Command::new("valgrind")
        .args(["-q", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no"])
        .arg(out_file)
        .arg(exe)
        .args(args)
        .output()
        .map_err(CallgrindError::Spawn)?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(CallgrindError::ChildFailed {
            what: what.to_string(),
            status: out.status.to_string(),
            stderr: tail.join(" | "),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = "# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 4242
cmd:  ./glass breakdown --worker-step 3
part: 1


desc: I1 cache: 
desc: D1 cache: 
desc: LL cache: 

desc: Timerange: Basic block 0 - 100004
desc: Trigger: Client Request: neworder

positions: line
events: Ir
summary: 600014


ob=(1) /tmp/t
fl=(1) ???
fn=(1) main
0 600014

totals: 600014
";

    #[test]
    fn parses_the_trigger_and_the_ir_total() {
        let d = parse_output(DUMP).unwrap();
        assert_eq!(d, Dump { trigger: "Client Request: neworder".into(), instructions: 600_014 });
    }

    #[test]
    fn takes_ir_from_its_column_and_prefers_totals_over_summary() {
        let text = "desc: Trigger: Program termination\nevents: Dr Ir Dw\nsummary: 1 2 3\ntotals: 10 20 30\n";
        assert_eq!(parse_output(text).unwrap().instructions, 20);
        let text = "events: Ir\nsummary: 77\n";
        assert_eq!(parse_output(text).unwrap(), Dump { trigger: String::new(), instructions: 77 });
    }

    #[test]
    fn refuses_output_without_a_usable_total() {
        assert!(parse_output("summary: 5\n").is_err());
        assert!(parse_output("events: Dr\nsummary: 5\n").is_err());
        assert!(parse_output("events: Ir\n").is_err());
        assert!(parse_output("events: Ir\ntotals: many\n").is_err());
    }

    #[test]
    fn finds_dumps_by_trigger() {
        let dumps = vec![
            Dump { trigger: "Program termination".into(), instructions: 0 },
            Dump { trigger: "Client Request: payment".into(), instructions: 9 },
        ];
        assert_eq!(find_dump(&dumps, "payment", Path::new(".")).unwrap(), 9);
        assert!(matches!(find_dump(&dumps, "neworder", Path::new(".")), Err(CallgrindError::NoDump { .. })));
    }

    #[test]
    fn client_requests_are_harmless_outside_valgrind() {
        // The test runner is not under valgrind: every request returns its default.
        if running_on_valgrind() == 0 {
            zero_stats();
            let x = counted("nothing", || 6 * 7);
            assert_eq!(x, 42);
        }
    }
}
