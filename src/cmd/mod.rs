//! One module per subcommand, and what several share ([`wrote`], the console's
//! [`progress`], the run record's flags [`RecordArgs`] and its end, [`finish_record`] and
//! [`close_record`], the value enums of `--profile` and `--engine`). Each turns its flags into
//! calls of the library crates (a cluster's life and the experiments are [`harness`]'s) and
//! prints what they return.

pub mod bench;
pub mod bench_cluster;
pub mod breakdown;
pub mod check;
pub mod cluster;
pub mod compare;
pub mod coordinator;
pub mod dump;
pub mod failover;
pub mod logging;
pub mod node;
pub mod progress;
pub mod recover;
pub mod report;
pub mod sim;

/// Says that `path` was written.
pub fn wrote(path: &std::path::Path) {
    println!("wrote {}", path.display());
}

/// What this binary is, for run records (docs/design.md §12).
pub const BUILD: harness::record::Build =
    harness::record::Build { version: env!("CARGO_PKG_VERSION"), commit: env!("GLASS_GIT_COMMIT") };

/// The run record's flags, shared by `bench`, `compare` and `failover`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RecordArgs {
    /// The run record's folder: the JSON, CSV and SVG results, report.html, the config as
    /// used, the exact command line and run.json (glass version and commit, host, CPU, cores,
    /// memory, kernel, file system, start and end times) [default:
    /// results/<UTC time>-<command>/, or under $GLASS_RESULTS_DIR].
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
    /// Keep the full stack's write-ahead logs, checkpoints and databases after the run
    /// (removed by default: a compare leaves gigabytes of them).
    #[arg(long)]
    pub keep_logs: bool,
    /// Run even when the write-ahead log would be fsynced on tmpfs or ramfs (where fsync
    /// costs nothing, so the figures measure nothing), with a loud warning.
    #[arg(long)]
    pub allow_tmpfs: bool,
}

impl RecordArgs {
    /// Creates the run record of `command` (its run writing into `run_dir`); the run says
    /// where it is when it ends ([`finish_record`]).
    pub fn open(&self, command: &str, run_dir: &std::path::Path) -> anyhow::Result<harness::record::Record> {
        Ok(harness::record::Record::create(self.out.as_deref(), command, BUILD, run_dir)?)
    }

    /// Refuses (or, with --allow-tmpfs, warns about) a log fsynced on a file system in
    /// memory: `dir` as `what` names it.
    pub fn check_durable(&self, dir: &std::path::Path, what: &str) -> anyhow::Result<()> {
        if let Some(warning) = harness::record::check_durable_dir(dir, what, self.allow_tmpfs)? {
            eprintln!("glass: {warning}");
        }
        Ok(())
    }
}

/// Closes a run record with the command's outcome (`passed` on success, `failed` on exit
/// code 1, `error` otherwise) and returns the outcome unchanged.
pub fn close_record(
    record: &mut harness::record::Record,
    outcome: anyhow::Result<std::process::ExitCode>,
) -> anyhow::Result<std::process::ExitCode> {
    let status = match &outcome {
        Ok(code) if *code == std::process::ExitCode::SUCCESS => "passed",
        Ok(_) => "failed",
        Err(_) => "error",
    };
    if let Err(e) = record.finish(status) {
        eprintln!("glass: error: closing the run record: {e}");
    }
    outcome
}

/// Ends a run's record with its summary and checks ([`harness::record::Record::write_summary`])
/// and says where the record is.
pub fn finish_record(
    record: &harness::record::Record,
    summary: &str,
    checks: &[harness::html::Check],
) -> anyhow::Result<()> {
    let page = record.write_summary(summary, checks)?;
    println!("wrote {} (the run record: {})", page.display(), record.dir.display());
    Ok(())
}

/// `--profile` values.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileArg {
    /// 50% NewOrder / 50% Payment, 10 local items, payment by id (the paper's Section 4).
    Paper,
    /// TPC-C's 45/43/4/4/4 mix with remote items, remote payments, last names and 1% rollbacks.
    Standard,
}

impl From<ProfileArg> for workload::gen::Profile {
    fn from(p: ProfileArg) -> Self {
        match p {
            ProfileArg::Paper => workload::gen::Profile::Paper,
            ProfileArg::Standard => workload::gen::Profile::Standard,
        }
    }
}

/// What an interrupt did, on stderr (the signal thread calls this before the exit).
pub fn report_interrupt(done: &harness::interrupt::Interrupted) {
    eprintln!("\n{done}");
}
