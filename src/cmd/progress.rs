//! The console's side of the harness's [`Progress`]: a loading bar on stderr while a cluster
//! comes up, the lines worth printing when it is up, and a failed check's verdict on stderr.

use std::path::Path;
use std::time::Duration;

use harness::cluster::{describe, Running};
use harness::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Draws progress when `chatty`; a failed check is always shown.
pub struct Console {
    chatty: bool,
    bar: Option<ProgressBar>,
}

impl Console {
    pub fn new(chatty: bool) -> Console {
        Console { chatty, bar: None }
    }

    fn bar(&mut self) -> Option<&ProgressBar> {
        if self.chatty && self.bar.is_none() {
            let bar = ProgressBar::with_draw_target(Some(1), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("loading  [{bar:40}] {pos}/{len} rows ({elapsed}) {msg}")
                    .expect("valid progress template")
                    .progress_chars("=> "),
            );
            self.bar = Some(bar);
        }
        self.bar.as_ref()
    }
}

impl Progress for Console {
    fn check_failed(&mut self, verdict: &workload::client::ClusterCheck) {
        eprint!("{verdict}");
    }

    fn certificates_created(&mut self, dir: &Path) {
        if self.chatty {
            println!("created the cluster's certificates in {}", dir.display());
        }
    }

    fn loading(&mut self, rows_loaded: u64, rows_total: u64) {
        if let Some(bar) = self.bar() {
            bar.set_length(rows_total.max(1));
            bar.set_position(rows_loaded);
        }
    }

    fn serving(&mut self, serving: usize, partitions: usize) {
        if let Some(bar) = self.bar() {
            bar.set_message(format!("{serving}/{partitions} partitions serving"));
        }
    }

    fn waited(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }

    fn up(&mut self, elapsed: Duration, started: &[Running], run_dir: &Path) {
        if self.chatty {
            println!(
                "cluster up in {:.1} s: {}; logs in {}",
                elapsed.as_secs_f64(),
                describe(started),
                run_dir.display()
            );
        }
    }
}

/// The `glass` executable this process runs: what a cluster's processes are started from.
pub fn glass_exe() -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context;
    std::env::current_exe().context("find the glass binary")
}
