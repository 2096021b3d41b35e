//! `glass report`: a run record's page ([`harness::html`]). `glass report DIR` rebuilds
//! `DIR/report.html` from the record's own files (after editing one, or for a record written
//! before the page existed); `glass report A B` sets record B beside record A — any two
//! records of `compare`, `sweep`, `bench` or `failover` — every figure of every run they
//! share, named for people, with its ratio B / A, after the parameters the runs differ in:
//! printed, and as a page at `B/report-vs-<A>.html` or `--out`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use harness::html::{self, RecordFiles};

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A run record folder (`results/<time>-compare/`, or of `bench`, `failover`, a sweep);
    /// a second one sets it beside the first.
    #[arg(required = true, num_args = 1..=2, value_name = "RECORD")]
    pub records: Vec<PathBuf>,
    /// With two records: where the side-by-side page goes [default:
    /// <second>/report-vs-<first's folder name>.html].
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

pub fn run(a: ReportArgs) -> Result<ExitCode> {
    match a.records.as_slice() {
        [dir] => {
            if a.out.is_some() {
                anyhow::bail!("--out applies to two records set side by side; one record's page is its report.html");
            }
            let page = html::write_record_page(dir)?;
            println!("wrote {}", page.display());
        }
        [first, second] => {
            let (ra, rb) = (RecordFiles::read(first)?, RecordFiles::read(second)?);
            let (fa, fb) = (html::figures(first)?, html::figures(second)?);
            let page = html::side_by_side(&ra, &fa, &rb, &fb);
            print!("{}", html::side_by_side_text(&ra, &fa, &rb, &fb));
            let name = first
                .canonicalize()
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| "first".into());
            let out = a.out.clone().unwrap_or_else(|| second.join(format!("report-vs-{name}.html")));
            workload::bench::write_atomic(&out, page.as_bytes()).with_context(|| format!("{}", out.display()))?;
            println!("wrote {}", out.display());
        }
        _ => unreachable!("clap takes one or two records"),
    }
    Ok(ExitCode::SUCCESS)
}
