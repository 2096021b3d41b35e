//! Run records: the folder each `bench`, `compare`, `failover` and `breakdown` run keeps
//! (`results/<UTC time>-<command>/` by default, `--out DIR` to choose), and [`RunMeta`], the
//! fields that say what produced a result — glass's version and git commit, the exact command
//! line, host, CPU model, cores, memory, kernel, the file system the run wrote to, start and
//! end times — written as the record's `run.json` and heading every JSON result the run
//! writes (as its `run` field).
//!
//! Guarantees: a record never overwrites another (a default name taken gets `-2`, `-3`, …; an
//! `--out` folder that already holds a `run.json` is refused); `run.json` is written when the
//! record is created (status `running`, no end time) and rewritten when the run ends (its
//! status and end time), and when it is interrupted ([`crate::interrupt`]); a host fact that
//! cannot be read is written as `"unknown"`, never made up; when the run ends, every JSON
//! result it headed and its `report.html` are rewritten with the final status and end time,
//! so that no file of a finished record still says `running`. Each run ends its record with
//! its summary as printed and its checks ([`Record::write_summary`]).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::HarnessError;
use crate::html::{Check, CHECKS_JSON, SUMMARY_TXT};
use crate::Result;

/// The environment variable naming the folder default records go in (`results` if unset).
pub const RESULTS_DIR_ENV: &str = "GLASS_RESULTS_DIR";
/// The default folder of run records, relative to the working directory.
pub const RESULTS_DIR_DEFAULT: &str = "results";
/// The record's metadata file.
pub const RUN_JSON: &str = "run.json";
/// The record's copy of the exact command line, shell-quoted.
pub const COMMAND_TXT: &str = "command.txt";
/// Written for a host fact that cannot be read.
pub const UNKNOWN: &str = "unknown";

/// What produced a result. Heads every JSON result as its `run` field.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunMeta {
    /// The subcommand (`compare`, `bench`, …).
    pub command: String,
    /// glass's version (Cargo.toml) and the git commit it was built from (`-dirty` when the
    /// tree had changes; `unknown` when built outside a git checkout).
    pub glass_version: String,
    pub git_commit: String,
    /// The exact command line, one argument per element.
    pub command_line: Vec<String>,
    pub host: String,
    pub cpu_model: String,
    /// Logical CPUs this process may run on.
    pub cores: usize,
    pub memory_bytes: u64,
    /// `uname -sr`: the kernel's name and release.
    pub kernel: String,
    /// The record folder.
    pub record_dir: PathBuf,
    /// Where the run's processes and logs write (a cluster's run_dir, the WAL directory),
    /// and the file system it lies on (`ext4`, `xfs`, `tmpfs`, …).
    pub run_dir: PathBuf,
    pub run_dir_fs: String,
    /// UTC, RFC 3339 (`2026-12-02T18:04:05Z`).
    pub started_utc: String,
    pub ended_utc: Option<String>,
    /// `running`, then `passed`, `failed` (a check failed), `error` or `interrupted`.
    pub status: String,
}

/// What the binary knows of itself (compile-time facts the harness cannot see).
#[derive(Debug, Clone, Copy)]
pub struct Build {
    pub version: &'static str,
    pub commit: &'static str,
}

/// A run record being written.
#[derive(Debug, Clone)]
pub struct Record {
    pub dir: PathBuf,
    pub meta: RunMeta,
    /// The JSON results headed by `meta` so far ([`Record::write_headed`]), in the record or
    /// where `--json` put them: [`Record::finish`] heads them again with the final status.
    headed: std::cell::RefCell<Vec<PathBuf>>,
}

impl Record {
    /// Creates the record folder for `command` — `out`, else a fresh
    /// `<GLASS_RESULTS_DIR or results>/<UTC time>-<command>/` — and writes `run.json` and
    /// `command.txt` into it. `run_dir` is where the run will write.
    pub fn create(out: Option<&Path>, command: &str, build: Build, run_dir: &Path) -> Result<Record> {
        let now = wall_clock();
        let dir = match out {
            Some(dir) => {
                if dir.join(RUN_JSON).exists() {
                    return Err(HarnessError::Invalid(format!(
                        "--out {} already holds a run record ({RUN_JSON}); choose another folder or remove it",
                        dir.display()
                    )));
                }
                if dir.exists() && !dir.is_dir() {
                    return Err(HarnessError::Invalid(format!("--out {} exists and is not a folder", dir.display())));
                }
                std::fs::create_dir_all(dir).map_err(|e| HarnessError::io(format!("create {}", dir.display()), e))?;
                dir.to_path_buf()
            }
            None => fresh_dir(&default_base(), &format!("{}-{command}", file_stamp(now)))?,
        };
        let meta = RunMeta {
            command: command.to_string(),
            glass_version: build.version.to_string(),
            git_commit: build.commit.to_string(),
            command_line: std::env::args().collect(),
            host: host_name(),
            cpu_model: cpu_model(),
            cores: std::thread::available_parallelism().map_or(0, usize::from),
            memory_bytes: memory_bytes(),
            kernel: kernel(),
            record_dir: std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone()),
            run_dir: run_dir.to_path_buf(),
            run_dir_fs: fs_type(run_dir).unwrap_or_else(|| UNKNOWN.to_string()),
            started_utc: rfc3339(now),
            ended_utc: None,
            status: "running".to_string(),
        };
        let record = Record { dir, meta, headed: Default::default() };
        record.write_meta()?;
        crate::interrupt::set_record(&record.meta, record.path(RUN_JSON));
        let line = shell_line(&record.meta.command_line);
        write(&record.path(COMMAND_TXT), format!("{line}\n").as_bytes())?;
        Ok(record)
    }

    /// A file of the record.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Copies the configuration the run used (`cluster.toml`, a derived one) into the
    /// record as `name`.
    pub fn copy_config(&self, from: &Path, name: &str) -> Result<()> {
        let to = self.path(name);
        std::fs::copy(from, &to)
            .map(|_| ())
            .map_err(|e| HarnessError::io(format!("copy {} to {}", from.display(), to.display()), e))
    }

    /// Writes `run.json` as it stands.
    pub fn write_meta(&self) -> Result<()> {
        write_json(&self.path(RUN_JSON), &self.meta)
    }

    /// The run ended with `status` (`passed`, `failed`, `error`): stamps the end time,
    /// rewrites `run.json`, heads every JSON result the run wrote again with it, and rebuilds
    /// `report.html` if the run wrote one.
    pub fn finish(&mut self, status: &str) -> Result<()> {
        self.meta.ended_utc = Some(rfc3339(wall_clock()));
        self.meta.status = status.to_string();
        crate::interrupt::clear_record();
        self.write_meta()?;
        for path in self.headed.borrow().iter() {
            rehead(path, &self.meta)?;
        }
        if self.path(crate::html::REPORT_HTML).exists() {
            crate::html::write_record_page(&self.dir)?;
        }
        Ok(())
    }

    /// Writes the run's summary as printed (`summary.txt`), its checks (`checks.json`) and
    /// the page that shows them with every chart (`report.html`, [`crate::html`]); returns
    /// the page's path.
    pub fn write_summary(&self, summary: &str, checks: &[Check]) -> Result<PathBuf> {
        write(&self.path(SUMMARY_TXT), summary.as_bytes())?;
        write_json(&self.path(CHECKS_JSON), &checks)?;
        crate::html::write_record_page(&self.dir)
    }

    /// Writes `value` to `path` headed by this run's metadata (see [`Headed`]); the run's end
    /// heads it again ([`Record::finish`]).
    pub fn write_headed(&self, path: &Path, key: &'static str, value: &impl Serialize) -> Result<()> {
        let value = serde_json::to_value(value).map_err(|e| HarnessError::Invalid(e.to_string()))?;
        write_json(path, &Headed { run: &self.meta, key, value })?;
        let mut headed = self.headed.borrow_mut();
        if !headed.iter().any(|p| p == path) {
            headed.push(path.to_path_buf());
            crate::interrupt::add_headed(path);
        }
        Ok(())
    }

    /// Writes a result headed by this run ([`Record::write_headed`]) into the record as
    /// `name`, and a copy where `copy` (a `--json`) points, announced to `wrote` once written.
    pub fn write_result(
        &self,
        name: &str,
        key: &'static str,
        value: &impl Serialize,
        copy: Option<&Path>,
        wrote: &mut dyn FnMut(&Path),
    ) -> Result<()> {
        self.write_headed(&self.path(name), key, value)?;
        if let Some(p) = copy {
            self.write_headed(p, key, value)?;
            wrote(p);
        }
        Ok(())
    }
}

/// Replaces the `run` heading of the JSON result at `path` with `meta` (the rest unchanged).
pub(crate) fn rehead(path: &Path, meta: &RunMeta) -> Result<()> {
    let text = std::fs::read(path).map_err(|e| HarnessError::io(format!("read {}", path.display()), e))?;
    let value: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|e| HarnessError::Invalid(format!("{}: not the JSON result this run wrote: {e}", path.display())))?;
    if !value.is_object() {
        return Err(HarnessError::Invalid(format!("{}: not a headed JSON result", path.display())));
    }
    // Headed as an object, the result keeps its fields (the old heading is skipped): a result
    // that was not an object is `{"run": …, "<key>": value}`, which reads back the same way.
    write_json(path, &Headed { run: meta, key: "", value })
}

/// A JSON result headed by the metadata of its run: `{"run": {...}, ...fields}` for an object
/// (`run` written first), `{"run": {...}, "<key>": value}` for anything else.
pub struct Headed<'a> {
    pub run: &'a RunMeta,
    pub key: &'static str,
    pub value: serde_json::Value,
}

impl Serialize for Headed<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("run", self.run)?;
        match &self.value {
            serde_json::Value::Object(fields) => {
                for (k, v) in fields.iter().filter(|(k, _)| k.as_str() != "run") {
                    map.serialize_entry(k, v)?;
                }
            }
            other => map.serialize_entry(self.key, other)?,
        }
        map.end()
    }
}

/// Writes `value` as pretty JSON, newline-terminated.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| HarnessError::Invalid(e.to_string()))?;
    bytes.push(b'\n');
    write(path, &bytes)
}

/// Writes `bytes` to `path` atomically ([`workload::bench::write_atomic`]).
pub fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    workload::bench::write_atomic(path, bytes).map_err(|e| HarnessError::Invalid(e.to_string()))
}

/// The folder default records go in.
pub fn default_base() -> PathBuf {
    std::env::var_os(RESULTS_DIR_ENV).map_or_else(|| PathBuf::from(RESULTS_DIR_DEFAULT), PathBuf::from)
}

/// `base/name`, or `base/name-2`, `-3`, … if taken; created.
fn fresh_dir(base: &Path, name: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(base).map_err(|e| HarnessError::io(format!("create {}", base.display()), e))?;
    for n in 1u32..10_000 {
        let dir = if n == 1 { base.join(name) } else { base.join(format!("{name}-{n}")) };
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(HarnessError::io(format!("create {}", dir.display()), e)),
        }
    }
    Err(HarnessError::Invalid(format!("no free record name {name}-N in {}", base.display())))
}

/// Arguments joined as a shell would need them (single-quoted where not plain).
pub fn shell_line(args: &[String]) -> String {
    let plain = |a: &str| !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    args.iter()
        .map(|a| if plain(a) { a.clone() } else { format!("'{}'", a.replace('\'', r"'\''")) })
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------------------------------------
// Time, without a calendar crate
// ---------------------------------------------------------------------------------------------

/// Now, by the wall clock: a run record's start and end times are facts about the run, not
/// inputs of any deterministic computation (docs/design.md §5 keeps the wall clock out of
/// those).
#[allow(clippy::disallowed_methods)]
pub fn wall_clock() -> SystemTime {
    SystemTime::now()
}

/// (year, month, day, hour, minute, second) in UTC.
fn civil(t: SystemTime) -> (i64, u32, u32, u32, u32, u32) {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil algorithm (proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, (rem / 3600) as u32, (rem % 3600 / 60) as u32, (rem % 60) as u32)
}

/// `2026-12-02T18:04:05Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = civil(t);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// Reads a UTC time as the processes' logs write it (`2026-12-04T22:10:19.043486Z`, any
/// number of fraction digits or none); `None` for anything else.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let rest = s.get(19..)?;
    let (fraction, zone) = match rest.strip_prefix('.') {
        Some(f) => f.split_at(f.find(|c: char| !c.is_ascii_digit())?),
        None => ("", rest),
    };
    if zone != "Z" {
        return None;
    }
    let nanos = format!("{fraction:0<9}").get(..9)?.parse::<u64>().ok()?;
    // Howard Hinnant's days-from-civil, the inverse of `civil`.
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = u64::try_from(days * 86_400 + h * 3_600 + mi * 60 + sec).ok()?;
    Some(UNIX_EPOCH + std::time::Duration::new(secs, nanos as u32))
}

/// `2026-12-02T18-04-05Z`: the time in a file name (no colons).
pub fn file_stamp(t: SystemTime) -> String {
    rfc3339(t).replace(':', "-")
}

// ---------------------------------------------------------------------------------------------
// Host facts, from /proc and statfs(2)
// ---------------------------------------------------------------------------------------------

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

fn host_name() -> String {
    read_trimmed("/proc/sys/kernel/hostname").unwrap_or_else(|| UNKNOWN.to_string())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| UNKNOWN.to_string())
}

fn memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(0)
}

fn kernel() -> String {
    match (read_trimmed("/proc/sys/kernel/ostype"), read_trimmed("/proc/sys/kernel/osrelease")) {
        (Some(t), Some(r)) => format!("{t} {r}"),
        _ => UNKNOWN.to_string(),
    }
}

/// The file system `path` lies on (of its nearest existing ancestor), by statfs(2)'s magic
/// number: `ext4`, `xfs`, `btrfs`, `tmpfs`, … or `0x…` for one not named here.
pub fn fs_type(path: &Path) -> Option<String> {
    let absolute = std::path::absolute(path).ok()?;
    let existing = absolute.ancestors().find(|p| p.exists())?;
    let c = std::ffi::CString::new(existing.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statfs(2) writes into the zeroed struct we own; `c` is a valid C string.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between libcs
    let magic = st.f_type as u64;
    Some(
        match magic {
            0xEF53 => "ext4",
            0x5846_5342 => "xfs",
            0x9123_683E => "btrfs",
            0x0102_1994 => "tmpfs",
            0x8584_58F6 => "ramfs",
            0x794C_7630 => "overlayfs",
            0x6969 => "nfs",
            0x2FC1_2FC1 => "zfs",
            0x6573_5546 => "fuse",
            0x0102_1997 => "9p",
            0xF2F5_2010 => "f2fs",
            _ => return Some(format!("{magic:#x}")),
        }
        .to_string(),
    )
}

/// Whether an fsync on `fs` measures nothing: the file system lives in memory.
pub fn in_memory(fs: &str) -> bool {
    matches!(fs, "tmpfs" | "ramfs")
}

/// Refuses writing a log that is fsynced (`what`, e.g. "--wal-dir /tmp/x") on a file system in
/// memory, unless `allowed` (`--allow-tmpfs`); returns the warning to print when allowed.
pub fn check_durable_dir(dir: &Path, what: &str, allowed: bool) -> Result<Option<String>> {
    let Some(fs) = fs_type(dir) else { return Ok(None) };
    if !in_memory(&fs) {
        return Ok(None);
    }
    let why = format!(
        "{what} is on {fs}, a file system in memory: every fsync there returns at once, so the log's cost is \
         not measured and nothing survives a power loss"
    );
    if allowed {
        Ok(Some(format!("WARNING: {why}; running anyway (--allow-tmpfs)")))
    } else {
        Err(HarnessError::Invalid(format!(
            "{why}. Put it on a disk (--wal-dir, or the cluster's run_dir) or pass --allow-tmpfs to run anyway"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn utc_times_are_the_calendar_dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        // 2000-02-29 (a leap day of a century leap year) 12:34:56.
        let t = UNIX_EPOCH + Duration::from_secs(951_827_696);
        assert_eq!(rfc3339(t), "2000-02-29T12:34:56Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_796_215_200); // 2026-12-02T12:40:00Z
        assert_eq!(rfc3339(t), "2026-12-02T12:40:00Z");
        assert_eq!(file_stamp(t), "2026-12-02T12-40-00Z");
    }

    #[test]
    fn log_times_are_read_back() {
        for secs in [0u64, 951_827_696, 1_796_215_200, 4_102_444_799] {
            let t = UNIX_EPOCH + Duration::from_secs(secs);
            assert_eq!(parse_rfc3339(&rfc3339(t)), Some(t), "{}", rfc3339(t));
        }
        let t = parse_rfc3339("2026-12-04T22:10:19.043486Z").unwrap();
        assert_eq!(t.duration_since(UNIX_EPOCH).unwrap().subsec_micros(), 43_486);
        assert_eq!(rfc3339(t), "2026-12-04T22:10:19Z");
        for bad in
            ["", "2026-12-04 22:10:19Z", "2026-13-04T22:10:19Z", "2026-12-04T22:10:19.5+01:00", "2026-12-04T22:10:19"]
        {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn command_lines_are_quoted_for_a_shell() {
        let args = ["glass", "compare", "--mix", "neworder=50,payment=50", "--out", "my results", "it's"];
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        assert_eq!(shell_line(&args), r"glass compare --mix neworder=50,payment=50 --out 'my results' 'it'\''s'");
    }

    #[test]
    fn a_json_result_is_headed_by_its_run() {
        let meta = RunMeta {
            command: "bench".into(),
            glass_version: "0.1.0".into(),
            git_commit: "abc".into(),
            command_line: vec!["glass".into()],
            host: "h".into(),
            cpu_model: "c".into(),
            cores: 2,
            memory_bytes: 1,
            kernel: "Linux 6".into(),
            record_dir: "r".into(),
            run_dir: "d".into(),
            run_dir_fs: "ext4".into(),
            started_utc: "t".into(),
            ended_utc: None,
            status: "running".into(),
        };
        let text = |value| serde_json::to_string(&Headed { run: &meta, key: "runs", value }).unwrap();
        let object = text(serde_json::json!({"a": 1, "b": 2}));
        assert!(object.starts_with(r#"{"run":{"command":"bench""#), "{object}");
        let v: serde_json::Value = serde_json::from_str(&object).unwrap();
        assert_eq!((v["a"].as_u64(), v["run"]["host"].as_str()), (Some(1), Some("h")));
        let v: serde_json::Value = serde_json::from_str(&text(serde_json::json!([1, 2]))).unwrap();
        assert_eq!(v["runs"], serde_json::json!([1, 2]));
    }

    /// Issue 40: every file of a finished record says how it ended — `run.json`, each JSON
    /// result inside the record or out of it (`--json`), and `report.html`.
    #[test]
    fn a_finished_record_says_so_in_every_file() {
        let base = std::env::temp_dir().join(format!("glass-record-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = base.join("rec");
        let build = Build { version: "0.1.0", commit: "abc" };
        let mut record = Record::create(Some(&dir), "bench", build, &base).unwrap();
        let outside = base.join("elsewhere.json");
        record.write_headed(&record.path("bench.json"), "bench", &serde_json::json!({"txn_per_sec": 5})).unwrap();
        record.write_headed(&outside, "runs", &serde_json::json!([1, 2])).unwrap();
        crate::html::write_record_page(&record.dir).unwrap();
        let read = |p: &Path| serde_json::from_slice::<serde_json::Value>(&std::fs::read(p).unwrap()).unwrap();
        assert_eq!(read(&record.path("bench.json"))["run"]["status"], "running");
        record.finish("passed").unwrap();
        for path in [record.path(RUN_JSON), record.path("bench.json"), outside.clone()] {
            let v = read(&path);
            let run = if path.ends_with(RUN_JSON) { &v } else { &v["run"] };
            assert_eq!(run["status"], "passed", "{}", path.display());
            assert_eq!(run["ended_utc"].as_str(), record.meta.ended_utc.as_deref(), "{}", path.display());
        }
        assert_eq!(read(&record.path("bench.json"))["txn_per_sec"], 5, "the result itself is kept");
        assert_eq!(read(&outside)["runs"], serde_json::json!([1, 2]), "a result that is not an object too");
        let page = std::fs::read_to_string(record.path(crate::html::REPORT_HTML)).unwrap();
        assert!(
            !page.contains("<td>running</td>") && page.contains("<td>passed</td>"),
            "report.html says how it ended"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn the_file_system_of_a_path_is_named() {
        let fs = fs_type(Path::new("/proc/self")).unwrap();
        assert_eq!(fs, "0x9fa0", "procfs's magic is not one of the named ones");
        assert!(fs_type(Path::new("/no/such/dir/below/root")).is_some(), "an existing ancestor is used");
    }
}
