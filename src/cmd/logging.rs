//! Logging and signals for the long-running processes: `tracing` to stderr, one line per
//! event, filtered by `RUST_LOG` (default given by the caller) — plain text, or with
//! `GLASS_LOG_FORMAT=json` one JSON object per line (tracing-subscriber's format: `timestamp`,
//! `level`, `fields` with `message`, `target`), for a log shipper; the processes `cluster up`,
//! `compare` and `failover` start inherit the variable. SIGTERM and SIGINT as the shutdown
//! future.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The environment variable choosing the log format: `text` (the default) or `json`.
pub const LOG_FORMAT_ENV: &str = "GLASS_LOG_FORMAT";

/// Installs the stderr subscriber (once; later calls do nothing). An unknown
/// `GLASS_LOG_FORMAT` is said on stderr, and the text format used.
pub fn init(default_filter: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match std::env::var(LOG_FORMAT_ENV).as_deref() {
        Ok("json") => {
            let _ = builder.json().with_ansi(false).try_init();
        }
        other => {
            if let Some(f) = other.ok().filter(|f| !f.is_empty() && *f != "text") {
                eprintln!("glass: {LOG_FORMAT_ENV}={f:?} is not a log format (text or json); logging text");
            }
            let _ = builder.with_ansi(std::io::stderr().is_terminal()).try_init();
        }
    }
}

/// Completes on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; only SIGINT and a Shutdown message stop this process");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT"),
    }
}
