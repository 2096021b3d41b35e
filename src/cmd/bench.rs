//! `glass bench`: TPC-C against one database, with progress, a per-type table, JSON, dumps
//! and the consistency check.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;

use engine::LeanDb;
use workload::bench::{self, BenchConfig, StopAfter};
use workload::gen::{Mix, Profile};
use workload::report::{self, ConsoleObserver};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Run in this process: one thread against one partition holding every warehouse (the
    /// paper's single-threaded setting). Required until cluster benches exist.
    #[arg(long)]
    embedded: bool,
    /// Workload profile: `paper` (50% NewOrder / 50% Payment, 10 local items, payment by id:
    /// the paper's Section 4 setting) or `standard` (TPC-C's 45/43/4/4/4 mix with remote
    /// items, remote payments, last-name selection and 1% rollbacks).
    #[arg(long, default_value = "paper")]
    profile: String,
    /// Override the profile's mix with weights, e.g. `neworder=50,payment=50` (names:
    /// neworder, payment, orderstatus, delivery, stocklevel; omitted ones get 0).
    #[arg(long)]
    mix: Option<String>,
    /// Number of warehouses (the paper used 5; ≈90 MB each in memory).
    #[arg(long, default_value_t = 5)]
    warehouses: u16,
    /// Length of the measured phase in seconds (ignored when --txns is given).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Measure exactly this many transactions instead of running for --duration.
    #[arg(long)]
    txns: Option<u64>,
    /// Seconds of unmeasured warm-up before the measured phase.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Seed for the loader and the input generator (printed first; the same seed gives the
    /// same database and the same transaction stream).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the result as one JSON object to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// After the run, write one CSV per table into this directory.
    #[arg(long)]
    dump: Option<PathBuf>,
    /// After the run, check TPC-C consistency conditions 1–10 and 12; exit non-zero on a
    /// violation.
    #[arg(long)]
    check: bool,
    /// Do not print the once-a-second lines.
    #[arg(long)]
    quiet: bool,
}

fn check_dump_dir(dir: &std::path::Path) -> Result<()> {
    if dir.exists() && !dir.is_dir() {
        bail!("cannot write --dump {}: it exists and is not a directory", dir.display());
    }
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).map(PathBuf::from).unwrap_or(".".into());
    if !parent.is_dir() {
        bail!("cannot write --dump {}: its parent directory does not exist", dir.display());
    }
    bench::check_writable_file(&parent.join("probe"))
        .map_err(|_| anyhow::anyhow!("cannot write --dump {}: its parent directory is not writable", dir.display()))
}

pub fn run(a: BenchArgs) -> Result<ExitCode> {
    if !a.embedded {
        bail!("only `glass bench --embedded` exists so far (cluster benches arrive with the cluster)");
    }
    let profile: Profile = a.profile.parse()?;
    let mix = a.mix.as_deref().map(Mix::parse).transpose()?;
    let cfg = BenchConfig {
        profile,
        mix,
        warehouses: a.warehouses,
        stop: match a.txns {
            Some(n) => StopAfter::Transactions(n),
            None => StopAfter::Seconds(a.duration),
        },
        warmup_s: a.warmup,
        seed: a.seed,
    };
    cfg.validate()?;
    if let Some(p) = &a.json {
        bench::check_writable_file(p).with_context(|| "--json")?;
    }
    if let Some(d) = &a.dump {
        check_dump_dir(d)?;
    }
    println!("seed: {}", a.seed);
    let mut obs = ConsoleObserver::new(a.quiet);
    let mut db = LeanDb::new();
    let t0 = Instant::now();
    bench::load(&mut db, cfg.warehouses, cfg.seed, &mut obs)?;
    let load_s = t0.elapsed().as_secs_f64();
    let report = bench::run(&mut db, &cfg, "embedded", load_s, &mut obs)?;
    print!("{}", report::render(&report));
    if let Some(p) = &a.json {
        let mut bytes = serde_json::to_vec_pretty(&report)?;
        bytes.push(b'\n');
        bench::write_atomic(p, &bytes)?;
        println!("wrote {}", p.display());
    }
    let mut code = ExitCode::SUCCESS;
    if a.check {
        let r = engine::check::check(&mut db);
        println!("\nTPC-C consistency (clause 3.3.2):\n{r}");
        if !r.all_passed() {
            eprintln!("glass: error: consistency check failed");
            code = ExitCode::from(1);
        }
    }
    if let Some(d) = &a.dump {
        let summary = workload::dump::dump(&mut db, d)?;
        println!("dumped {summary} into {}", d.display());
    }
    Ok(code)
}
