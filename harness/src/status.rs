//! `glass cluster status` as the operator reads it: [`render`] turns a [`StatusSample`] (what
//! every process answered, [`crate::cluster`]) and what a window after it measured (rates and
//! p99 latencies, [`Window`]) into the text the
//! command prints. The same sample as JSON is [`StatusSample::to_json`].

use std::fmt::Write;

use crate::cluster::{p99_ms, StatusSample, Window};
use crate::{Cluster, Proc};
use wire::messages::{LoadState, NodeId, PartitionPhase, ProcessStatus};

/// `glass cluster status` as text: the cluster, each process with its address and uptime,
/// one line per process and partition (state, batch, transactions, CPU, txn/s and p99 over
/// `window`, /// window, lag, digest), and what the digests came to.
pub fn render(c: &Cluster, s: &StatusSample, window: &Window) -> String {
    let mut out = String::new();
    let out = &mut out;
    let _ = writeln!(
        out,
        "cluster {} (mode {}, {} partitions, {} nodes); run_dir {}",
        c.path.display(),
        c.config.mode().name(),
        c.config.partitions.len(),
        c.config.nodes.len(),
        c.config.run_dir.display()
    );
    let up =
        |st: Option<&ProcessStatus>| st.map_or("-".to_string(), |st| format!("up {:.0} s", st.uptime_ms as f64 / 1e3));
    let group = c.config.coordinators.len() > 1;
    for (i, co) in c.config.coordinators.iter().enumerate() {
        let (name, st) = match s.coordinators.get(i) {
            Some((id, st)) if group => (format!("coordinator {id}"), st.as_ref()),
            _ => ("coordinator".to_string(), s.coordinator.as_ref()),
        };
        let _ = writeln!(out, "  {name:<16} {:<24} {}", co.address, up(st));
    }
    for (n, (_, st)) in c.config.nodes.iter().zip(&s.nodes) {
        let _ = writeln!(out, "  {:<16} {:<24} {}", format!("node {}", n.id), n.address, up(st.as_ref()));
    }
    let _ = writeln!(
        out,
        "{:<12} {:>8} {:<6} {:>9} {:<28} {:>8} {:>10} {:>8} {:>9} {:>7} {:>5}  digest",
        "process", "pid", "alive", "partition", "state", "batch", "txns", "cpu_s", "txn/s", "p99_ms", "lag"
    );
    for (id, st) in &s.coordinators {
        let label = format!("coordinator {id}");
        match st {
            Some(st) if st.leader == Some(u16::from(*id)) => {}
            Some(st) => {
                let state = match st.leader {
                    Some(l) => format!("standby (leader: {l})"),
                    None => "standby (no leader known)".to_string(),
                };
                let _ = writeln!(out, "{:<12} {:>8} {:<6} {:>9} {:<28}", label, st.pid, "yes", "-", state);
            }
            None => print_silent(out, &label, s.pid_of(&Proc::Coordinator(Some(*id)))),
        }
    }
    let leader = match &s.coordinator {
        Some(st) if !s.coordinators.is_empty() => format!("coordinator {}", st.id),
        _ => "coordinator".to_string(),
    };
    match &s.coordinator {
        Some(st) => {
            for p in &st.partitions {
                let _ = writeln!(
                    out,
                    "{:<12} {:>8} {:<6} {:>9} {:<28} {:>8} {:>10} {:>8} {:>9} {:>7} {:>5}  -",
                    leader,
                    st.pid,
                    "yes",
                    p.partition,
                    truncate(&p.phase.to_string(), 28),
                    p.seq,
                    format!("{} open", p.txns),
                    "-",
                    "-",
                    p99_text(window.leader_p99(p.partition)),
                    "-",
                );
            }
        }
        None if s.coordinators.is_empty() => print_silent(out, "coordinator", s.pid_of(&Proc::Coordinator(None))),
        None => {
            let _ = writeln!(out, "no coordinator leads");
        }
    }
    for (id, st) in &s.nodes {
        match st {
            Some(st) => print_node(out, s, *id, st, window),
            None => print_silent(out, &format!("node {id}"), s.pid_of(&Proc::Node(*id))),
        }
    }
    for d in &s.digests {
        if !s.mode.every_replica_executes() {
            let _ =
                writeln!(out,
                "partition {}: the primary's digest at batch {} is above; backups are compared once they applied the \
                 same shipments (`glass check`)",
                d.partition, d.seq
            );
        } else {
            let _ = writeln!(
                out,
                "partition {}: the digests of its {} live replicas at batch {} are {}",
                d.partition,
                d.digests.len(),
                d.seq,
                if d.equal() { "equal" } else { "DIFFERENT" }
            );
        }
    }
    if s.local.is_empty() && s.coordinator.is_none() && s.nodes.iter().all(|(_, st)| st.is_none()) {
        let _ =
            writeln!(out,
            "the cluster is not running: no process of it runs here, and none answered (start it: glass cluster up)"
        );
    }
    std::mem::take(out)
}

/// A status line for a process that did not answer (`pid`: it runs here).
fn print_silent(out: &mut String, name: &str, pid: Option<u32>) {
    let _ = writeln!(
        out,
        "{:<12} {:>8} {:<6} {:>9} {:<28}",
        name,
        pid.map_or("-".to_string(), |p| p.to_string()),
        if pid.is_some() { "yes" } else { "no" },
        "-",
        if pid.is_some() { "not answering" } else { "not running" }
    );
}

/// A node's status lines: one per partition it holds.
fn print_node(out: &mut String, s: &StatusSample, id: NodeId, st: &ProcessStatus, window: &Window) {
    let name = format!("node {id}");
    for p in &st.partitions {
        let state = match &p.load {
            Some(LoadState::Loading { rows_loaded, rows_total }) if p.phase == PartitionPhase::Loading => {
                format!("loading {rows_loaded}/{rows_total} rows")
            }
            _ => match p.replication.role {
                None => p.phase.to_string(),
                Some(role) => format!("{} ({role})", p.phase),
            },
        };
        let rate = window.rate(id, p.partition);
        let _ = writeln!(
            out,
            "{:<12} {:>8} {:<6} {:>9} {:<28} {:>8} {:>10} {:>8.1} {:>9} {:>7} {:>5}  {}",
            name,
            st.pid,
            "yes",
            p.partition,
            truncate(&state, 28),
            p.seq,
            p.txns,
            p.cpu_ms as f64 / 1000.0,
            rate.map_or("-".to_string(), |r| format!("{r:.0}")),
            p99_text(window.node_p99(id, p.partition)),
            s.lag_batches(id, p.partition).map_or("-".to_string(), |l| l.to_string()),
            s.digest_text(id, p).unwrap_or_else(|| "-".to_string())
        );
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).collect::<String>() + "…"
    }
}

/// A p99 in seconds (a bucket's bound) as milliseconds; `-` when nothing was timed, `>3277`
/// above every bound.
fn p99_text(p99: Option<f64>) -> String {
    match p99 {
        None => "-".to_string(),
        Some(s) => p99_ms(s).map_or_else(
            || format!(">{:.0}", wire::metrics::latency_bounds().last().unwrap_or(0.0) * 1e3),
            |ms| format!("{ms:.2}"),
        ),
    }
}
