//! The events of a failover run, as they happen: what the harness did (the kill, the restart,
//! the second kill) and what the coordinators reported (`event=` lines of their logs: a node
//! failed and how it was detected, a backup promoted, a leader elected, a rejoin begun and
//! ended, admission held back and released). Each is printed as a line when it is seen
//! (unless quiet), listed in the run record (`failover.json`'s `events`), and the key ones are
//! marked on the timeline chart.
//!
//! Times are seconds on the run's clock — the clock of the per-100 ms timeline, which starts
//! when the driver's terminals start (the warm-up included) — so the record and the chart say
//! the same time for the same event; a printed line gives it too (`t = …`), after the time
//! into the measured phase that the per-second lines count. A coordinator's event is timed by its log
//! line's UTC stamp, mapped to the run's clock through the wall time read when the clock
//! started.
//!
//! The logs may be text or JSON (`GLASS_LOG_FORMAT=json`): [`text_line`] reads both.
//!
//! Guarantees: events from before the run's clock started (the cluster's start, its loading)
//! are not reported; a log line is read once, whole (a partial last line waits for its end); a
//! coordinator's log appended to by a restart is followed on; the watcher's thread ends when
//! the run's events are taken ([`EventLog::finish`]), having read what the logs held by then.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

/// The run's clock: when it started, on the monotonic and the wall clock (set once, by the
/// driver's first phase; see [`crate::measure::measure_with`]).
pub type RunClock = Arc<OnceLock<(Instant, SystemTime)>>;

/// How often the coordinators' logs are looked at.
const POLL: Duration = Duration::from_millis(20);

/// One event of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunEvent {
    /// Seconds on the run's clock.
    pub t_s: f64,
    /// Who saw it: `glass` (the harness) or `coordinator-N`.
    pub source: String,
    pub what: String,
}

/// A run's events, collected while it runs.
#[derive(Clone)]
pub struct EventLog {
    clock: RunClock,
    events: Arc<Mutex<Vec<RunEvent>>>,
    print: bool,
    /// The warm-up's length: a printed line also gives the time into the measured phase, as
    /// the per-second lines count it.
    warmup_s: f64,
}

impl EventLog {
    /// An empty log on `clock` (whose measured phase begins after `warmup_s`), printing each
    /// event as it comes unless `quiet`.
    pub fn new(clock: RunClock, warmup_s: f64, quiet: bool) -> EventLog {
        EventLog { clock, events: Arc::default(), print: !quiet, warmup_s }
    }

    /// The run's clock.
    pub fn clock(&self) -> &RunClock {
        &self.clock
    }

    /// Something the harness did, now.
    pub fn note(&self, what: impl Into<String>) {
        let Some(&(start, _)) = self.clock.get() else { return };
        self.add(RunEvent { t_s: start.elapsed().as_secs_f64(), source: "glass".into(), what: what.into() });
    }

    fn add(&self, e: RunEvent) {
        if self.print {
            let measured = e.t_s - self.warmup_s;
            println!("  event {measured:>6.2}s (t = {:.2} s)  {:<13} {}", e.t_s, e.source, e.what);
        }
        self.events.lock().unwrap_or_else(|e| e.into_inner()).push(e);
    }

    /// Starts following the coordinators' logs in `run_dir`: the watcher's lines go into this
    /// log until [`EventLog::finish`].
    pub fn watch(&self, run_dir: &Path) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let (log, dir, until) = (self.clone(), run_dir.to_path_buf(), stop.clone());
        // What the logs hold now is from before the run.
        let mut tails: Vec<Tail> = coordinator_logs(run_dir).into_iter().map(Tail::at_end).collect();
        let thread = std::thread::spawn(move || loop {
            let last = until.load(Ordering::SeqCst);
            for path in coordinator_logs(&dir) {
                if !tails.iter().any(|t| t.path == path) {
                    tails.push(Tail { path, offset: 0, partial: String::new() });
                }
            }
            for tail in &mut tails {
                for line in tail.read_lines() {
                    if let Some(e) = log.coordinator_event(&tail.path, &line) {
                        log.add(e);
                    }
                }
            }
            if last {
                return;
            }
            std::thread::sleep(POLL);
        });
        Watcher { stop, thread: Some(thread) }
    }

    /// The event a coordinator's log line reports, if it is one and the run's clock had
    /// started by then.
    fn coordinator_event(&self, path: &Path, line: &str) -> Option<RunEvent> {
        let &(_, wall_start) = self.clock.get()?;
        let line = text_line(line);
        let (_, what) = line.split_once(" event=")?;
        let at = crate::record::parse_rfc3339(line.split(' ').next()?)?;
        let t_s = at.duration_since(wall_start).ok()?.as_secs_f64();
        let source = path.file_stem().and_then(|s| s.to_str()).unwrap_or("coordinator").to_string();
        Some(RunEvent { t_s, source, what: what.trim_end().to_string() })
    }

    /// The events seen so far, in time order (the watcher stopped first).
    pub fn finish(&self, watcher: Option<Watcher>) -> Vec<RunEvent> {
        drop(watcher);
        let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner()).clone();
        events.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
        events
    }
}

/// The thread following the logs; stopped (after a last read) when dropped.
pub struct Watcher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One log followed from `offset` on.
struct Tail {
    path: PathBuf,
    offset: u64,
    /// A last line not ended yet.
    partial: String,
}

impl Tail {
    fn at_end(path: PathBuf) -> Tail {
        let offset = std::fs::metadata(&path).map_or(0, |m| m.len());
        Tail { path, offset, partial: String::new() }
    }

    /// The whole lines written since the last read.
    fn read_lines(&mut self) -> Vec<String> {
        use std::io::{Read, Seek, SeekFrom};
        let Ok(mut f) = std::fs::File::open(&self.path) else { return Vec::new() };
        let len = f.metadata().map_or(0, |m| m.len());
        if len < self.offset {
            // Replaced by a new file (rotated): from its start.
            self.offset = 0;
            self.partial.clear();
        }
        let mut bytes = Vec::new();
        if f.seek(SeekFrom::Start(self.offset)).is_err() || f.read_to_end(&mut bytes).is_err() {
            return Vec::new();
        }
        self.offset += bytes.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&bytes));
        let Some(end) = self.partial.rfind('\n') else { return Vec::new() };
        let rest = self.partial.split_off(end + 1);
        let lines = std::mem::replace(&mut self.partial, rest);
        lines.lines().map(str::to_string).collect()
    }
}

/// A log line as the text format writes it (`<UTC time> <LEVEL> <target>: <message>
/// <field>=<value>…`), whichever format wrote it: a JSON line (`GLASS_LOG_FORMAT=json`,
/// tracing-subscriber's) is turned into that; any other line is kept as it is.
pub fn text_line(line: &str) -> std::borrow::Cow<'_, str> {
    let json = line.starts_with('{').then(|| serde_json::from_str::<serde_json::Value>(line).ok()).flatten();
    let Some(v) = json else { return line.into() };
    let s = |v: &serde_json::Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    let mut out = format!(
        "{} {} {}:",
        v.get("timestamp").map(s).unwrap_or_default(),
        v.get("level").map(s).unwrap_or_default(),
        v.get("target").map(s).unwrap_or_default()
    );
    if let Some(fields) = v.get("fields").and_then(|f| f.as_object()) {
        if let Some(m) = fields.get("message") {
            out.push(' ');
            out.push_str(&s(m));
        }
        for (k, v) in fields.iter().filter(|(k, _)| k.as_str() != "message") {
            out.push_str(&format!(" {k}={}", s(v)));
        }
    }
    out.into()
}

/// The coordinators' current logs in `run_dir` (`coordinator*.log`), sorted.
fn coordinator_logs(run_dir: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> =
        std::fs::read_dir(run_dir).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    logs.retain(|p| {
        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("coordinator") && n.ends_with(".log"))
    });
    logs.sort();
    logs
}

/// A short label for the chart, for the events worth marking on it.
pub fn chart_label(e: &RunEvent) -> Option<String> {
    let w = &e.what;
    let node = |prefix: &str| w.strip_prefix(prefix).and_then(|r| r.split(' ').next()).map(str::to_string);
    if w.contains(" failed (detected by ") {
        return node("node ").map(|n| format!("node {n} detected"));
    }
    if w.contains("'s primary (applied through") {
        return Some("promoted".into());
    }
    if w.starts_with("leading epoch") {
        return Some("new leader".into());
    }
    if w.contains("is a live replica of partition") {
        return Some("live again".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coordinators_event_lines_are_read_whole_and_timed_on_the_runs_clock() {
        let dir = std::env::temp_dir().join(format!("glass-events-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("coordinator-0.log");
        std::fs::write(&log, "2026-12-04T22:10:00.000000Z  INFO coordinator::process: event=before the run\n").unwrap();
        let wall = crate::record::parse_rfc3339("2026-12-04T22:10:01Z").unwrap();
        let clock: RunClock = Arc::new(OnceLock::new());
        clock.set((Instant::now(), wall)).unwrap();
        let events = EventLog::new(clock, 1.0, true);
        let watcher = events.watch(&dir);
        events.note("SIGKILL node 1");
        let line = "2026-12-04T22:10:06.500000Z ERROR coordinator::process: ALARM event=node 1 failed (detected by \
                    connection lost; silent for 20 ms)\n";
        let (head, tail) = line.split_at(40);
        let append = |s: &str| {
            use std::io::Write;
            std::fs::OpenOptions::new().append(true).open(&log).unwrap().write_all(s.as_bytes()).unwrap();
        };
        append(head);
        std::thread::sleep(POLL * 3);
        append(tail);
        append("2026-12-04T22:10:07.000000Z  INFO coordinator::process: not an event\n");
        std::thread::sleep(POLL * 3);
        let got = events.finish(Some(watcher));
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!((got[0].source.as_str(), got[0].what.as_str()), ("glass", "SIGKILL node 1"));
        assert_eq!(got[1].source, "coordinator-0");
        assert!(got[1].what.starts_with("node 1 failed (detected by connection lost"), "{got:?}");
        assert!((got[1].t_s - 5.5).abs() < 1e-6, "{got:?}");
        assert_eq!(chart_label(&got[1]).as_deref(), Some("node 1 detected"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A JSON log line (`GLASS_LOG_FORMAT=json`) reads as its text form; other lines as they are.
    #[test]
    fn a_json_log_line_reads_as_the_text_format_would_write_it() {
        let json = r#"{"timestamp":"2026-12-04T22:10:06.500000Z","level":"ERROR","fields":{"message":"ALARM","event":"node 1 failed (detected by heartbeat timeout; silent for 510 ms)"},"target":"coordinator::process"}"#;
        assert_eq!(
            text_line(json),
            "2026-12-04T22:10:06.500000Z ERROR coordinator::process: ALARM event=node 1 failed (detected by \
             heartbeat timeout; silent for 510 ms)"
        );
        assert_eq!(text_line("plain line"), "plain line");
        assert_eq!(text_line("{not json"), "{not json");
    }
}
