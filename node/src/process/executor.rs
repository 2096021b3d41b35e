//! A replica's executor: one OS thread per replica owns the replica's [`engine::LeanDb`]
//! outright: it loads the partition's warehouses from the seed (no bulk data crosses the
//! network), then executes what arrives on its bounded inbox strictly in order — the
//! coordinator's batches, and tool requests (digests, snapshots) between two batches; the
//! copies that answer them (and the state digests batches ask for) are stepped between work
//! items under the copy share (`answers`, docs/design.md §10). The partition's machine
//! decides; the executor is its world for the node's carrier (`crate::carrier`).
//!
//! Guarantees:
//! - a request that cannot be answered yet (the replica not at its batch yet, or a copy under
//!   way: one at a time) waits, at most [`DEFERRED_MAX`] of them; past that it is refused as
//!   busy;
//! - a tool or peer connection that does not read its replies costs the executor at most
//!   [`TOOL_REPLY_PATIENCE`] once: its further replies are dropped;
//! - a piece of work that takes [`SLOW_WORK`] or more is logged: every batch of the
//!   partition waited meanwhile.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tracing::{debug, error, info, warn};
use wire::channel::{NodeToCoordinator, PeerReply, PeerRequest, ToolRequest};
use wire::messages::{LoadState, StateDigest};

use super::{
    copy, Begin, Executor, Machine, ReplicaStorage, Reply, Work, DEAF_TOOLS_MAX, DEFERRED_MAX, SLOW_WORK,
    TOOL_REPLY_PATIENCE,
};
use crate::error::{RejoinError, ReplicaError};
use crate::fullstack::{FullStack, Restart};
use crate::machine::{Asked, Began, Effect, FetchOrder, CATCH_UP_SLICE_IDLE};
use crate::replica::{Emit, Replica, Store};

impl Executor {
    /// Queues `msg` for a tool connection, waiting at most [`TOOL_REPLY_PATIENCE`] for room:
    /// a peer that does not read its replies (dead, hung or hostile) loses them (logged) and
    /// costs the executor — the partition's only thread — that long once, never more.
    pub(super) fn reply_to<R: Reply>(&self, reply: &mpsc::Sender<R>, msg: R) {
        let mut deaf = R::deaf(self).borrow_mut();
        deaf.retain(|d| !d.is_closed());
        if deaf.iter().any(|d| d.same_channel(reply)) {
            return;
        }
        let deadline = Instant::now() + TOOL_REPLY_PATIENCE;
        let mut msg = msg;
        loop {
            match reply.try_send(msg) {
                Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => return,
                Err(mpsc::error::TrySendError::Full(m)) => {
                    if Instant::now() >= deadline {
                        warn!(
                            partition = self.partition.id,
                            message = m.name(),
                            patience_ms = TOOL_REPLY_PATIENCE.as_millis() as u64,
                            "a tool connection does not read its replies; its replies are dropped from now on"
                        );
                        if deaf.len() >= DEAF_TOOLS_MAX {
                            deaf.remove(0);
                        }
                        deaf.push(reply.clone());
                        return;
                    }
                    msg = m;
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
    }

    pub(super) fn run(self, inbox: mpsc::Receiver<Work>) {
        let pid = self.partition.id;
        if let Ok(me) = std::fs::read_link("/proc/thread-self") {
            let path = PathBuf::from("/proc").join(me).join("schedstat");
            self.shared.schedstat.lock().unwrap_or_else(|e| e.into_inner()).push(path);
        }
        let (mode, pending) = (self.config.mode(), self.pending_batches_max);
        let machine = match self.begin {
            Begin::Rejoin => {
                let (machine, effects) = Machine::rejoining(mode, self.node, pid, pending);
                let mut machine = self.equipped(machine);
                info!(partition = pid, "asking the coordinator to rejoin");
                self.carry(&mut machine, effects);
                machine
            }
            Begin::Load => match self.load() {
                Ok(replica) => self.equipped(Machine::serving(mode, replica, pending)),
                Err(reason) => Machine::failed(mode, self.node, pid, pending, reason),
            },
        };
        self.serve(machine, inbox);
    }

    /// Loads the partition from the seed, reporting progress and the outcome to the
    /// coordinator; why not, if it failed.
    fn load(&self) -> Result<Replica, String> {
        let pid = self.partition.id;
        let t0 = Instant::now();
        let mut last_logged_rows = 0u64;
        let (node, mode, seed, pending) = (self.node, self.config.mode(), self.seed, self.pending_batches_max);
        let (dir, workers) = match &self.storage {
            ReplicaStorage::Full { dir, workers } => (dir.as_path(), *workers),
            ReplicaStorage::Lean => (std::path::Path::new(""), 0),
        };
        let loaded = Replica::load_for(mode, node, &self.partition, seed, pending, dir, workers, &mut |p| {
            let state = LoadState::Loading { rows_loaded: p.rows_loaded, rows_total: p.rows_total };
            self.shared.load.send_replace(state);
            // Progress may be dropped when the link is backed up; the final state is not.
            let _ = self
                .to_coordinator
                .try_send((self.link_generation.get(), Emit::ToCoordinator(Replica::progress_message(pid, p))));
            if p.rows_loaded - last_logged_rows >= 250_000 || p.rows_loaded == p.rows_total {
                last_logged_rows = p.rows_loaded;
                debug!(partition = pid, rows_loaded = p.rows_loaded, rows_total = p.rows_total, "loading");
            }
        });
        let mut replica = match loaded {
            Ok(r) => r,
            Err(e) => {
                error!(partition = pid, error = %e, "load failed");
                let state = LoadState::Failed { reason: wire::messages::bounded_reason(e.to_string()) };
                self.shared.load.send_replace(state.clone());
                let failed = NodeToCoordinator::LoadStatus { partition: pid, state };
                self.emit(Emit::ToCoordinator(failed));
                return Err(format!("failed to load: {e}"));
            }
        };
        // From here on tables grow: keep their next pages faulted in off this thread.
        engine::arena::set_prefault(true);
        if let Store::Full(f) = replica.store_mut() {
            self.shared.schedstat.lock().unwrap_or_else(|e| e.into_inner()).extend(f.worker_schedstats());
        }
        let ready = replica.ready_message();
        if let NodeToCoordinator::LoadStatus { state, .. } = &ready {
            if let LoadState::Ready { digest } = state {
                info!(
                    partition = pid,
                    warehouses = ?self.partition.warehouses.range(),
                    seconds = t0.elapsed().as_secs_f64(),
                    digest = %digest,
                    "replica loaded"
                );
            }
            self.shared.load.send_replace(state.clone());
        }
        self.emit(Emit::ToCoordinator(ready));
        Ok(replica)
    }

    /// Carries out the inbox in order until stopped: the machine decides, this performs. A
    /// copy under way moves on between two pieces of work (its share of the executor's time)
    /// and whenever the inbox is empty.
    fn serve(&self, mut machine: Machine, mut inbox: mpsc::Receiver<Work>) {
        let pid = self.partition.id;
        // Snapshot, digest and log base requests waiting for the replica to reach their batch.
        let mut deferred: Vec<Work> = Vec::new();
        loop {
            // A new leader's take-over (or fetch) waits in the inbox: the batches ahead of it
            // are held, not executed, and it is answered at once; then the held batches run,
            // one a turn, before anything that came after them (docs/design.md §11).
            let urgent = self.shared.urgent_queued.load(Ordering::SeqCst) > 0;
            machine.set_holding(urgent);
            if !urgent && machine.has_held_to_run() {
                let t0 = Instant::now();
                let effects = machine.run_held();
                self.carry(&mut machine, effects);
                self.shared.batch_seconds.observe(t0.elapsed());
                self.retry_deferred(&mut machine, &mut deferred);
                self.publish(&mut machine);
                continue;
            }
            let work = if self.copy_can_move() || machine.catching_up() {
                match inbox.try_recv() {
                    Ok(w) => w,
                    Err(mpsc::error::TryRecvError::Empty) => {
                        // Nothing waits: catch up, or copy, at full speed.
                        if machine.catching_up() {
                            // The inbox is empty: once nothing is held either, it is caught up.
                            let effects = machine.catch_up(CATCH_UP_SLICE_IDLE, true);
                            self.carry(&mut machine, effects);
                        }
                        self.copy_step(&mut machine, false, &mut deferred);
                        continue;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => break,
                }
            } else {
                match inbox.blocking_recv() {
                    Some(w) => w,
                    None => break,
                }
            };
            if let Work::Stop = work {
                break;
            }
            if urgent && !work.taken_while_holding() {
                self.run_every_held(&mut machine);
            }
            let urgent_work = matches!(&work, Work::Coordinator(m) if super::is_urgent(m));
            let woken = matches!(work, Work::CopyRoom);
            let (what, t0) = (work.name(), Instant::now());
            if !woken {
                // A catching-up replica takes what waits in its inbox first (held, cheaply)
                // and catches up once it is empty: a full inbox would hold up the node's
                // reader, and with it the node's other partitions.
                self.on_work(&mut machine, work, &mut deferred);
                self.retry_deferred(&mut machine, &mut deferred);
            }
            if urgent_work {
                self.shared.urgent_queued.fetch_sub(1, Ordering::SeqCst);
            }
            if woken && !deferred.is_empty() {
                // A tool's rebuilding thread may have ended.
                self.retry_deferred(&mut machine, &mut deferred);
            }
            let worked = t0.elapsed();
            if what == "Batch" {
                self.shared.batch_seconds.observe(worked);
            }
            self.copy_step(&mut machine, !woken, &mut deferred);
            self.free_copy_leftovers(&mut machine);
            self.publish(&mut machine);
            let took = t0.elapsed();
            if took >= SLOW_WORK {
                // Every batch of the partition waits meanwhile: an operator's first clue to a
                // stall (docs/design.md §10).
                warn!(
                    partition = pid,
                    ms = took.as_millis() as u64,
                    work_ms = worked.as_millis() as u64,
                    what,
                    "the executor took long over one piece of work"
                );
            }
        }
        if let Some(replica) = machine.replica() {
            let stats = replica.stats();
            info!(
                partition = pid,
                batches = stats.batches_executed,
                committed = stats.txns_committed,
                aborted = stats.txns_aborted,
                failed = stats.txns_failed,
                "executor finished"
            );
        }
    }

    /// Runs every batch held for an urgent message (`serve`) that can run, and holds again.
    fn run_every_held(&self, machine: &mut Machine) {
        machine.set_holding(false);
        while machine.has_held_to_run() {
            let effects = machine.run_held();
            self.carry(machine, effects);
        }
        machine.set_holding(true);
    }

    /// Once a copy is over, frees a little of what it kept (a few maps and segments a piece of
    /// work: freed at once, or on a thread of their own, they stalled the node's partitions;
    /// docs/design.md §10, "Copying without stopping").
    fn free_copy_leftovers(&self, machine: &mut Machine) {
        if self.copying() {
            return;
        }
        if let Some(Store::Lean(db)) = machine.replica_mut().map(Replica::store_mut) {
            if db.has_copy_leftovers() {
                db.free_copy_leftovers();
            }
        }
    }

    /// Whether a copy under way can move now (not waiting for room or for a batch to end).
    fn copy_can_move(&self) -> bool {
        self.copy.borrow().as_ref().is_some_and(|c| c.can_move())
            || self.digest_copies.borrow().iter().any(copy::Copying::can_move)
    }

    /// Whether a copy of the replica is under way (a requester's or a digest's).
    pub(super) fn copying(&self) -> bool {
        self.copy.borrow().is_some() || !self.digest_copies.borrow().is_empty()
    }

    /// Moves the copy under way on by a step (`under_load`: keeping to its share); once it is
    /// over, the requests deferred behind it are looked at again.
    fn copy_step(&self, machine: &mut Machine, under_load: bool, deferred: &mut Vec<Work>) {
        let over = match self.copy.borrow_mut().as_mut() {
            Some(task) => {
                let before = task.sent_bytes();
                let step = task.step(machine.replica_mut(), under_load);
                self.shared.copy_sent_bytes.fetch_add(task.sent_bytes() - before, Ordering::Relaxed);
                step == copy::Step::Over
            }
            None => false,
        };
        if over {
            self.copy.borrow_mut().take();
        }
        let digests_before = self.digest_copies.borrow().len();
        self.digest_copies
            .borrow_mut()
            .retain_mut(|task| task.step(machine.executing_replica_mut(), under_load) != copy::Step::Over);
        if over || self.digest_copies.borrow().len() < digests_before {
            self.retry_deferred(machine, deferred);
        }
    }

    /// Carries out the deferred requests that can be answered now.
    fn retry_deferred(&self, machine: &mut Machine, deferred: &mut Vec<Work>) {
        let (ready, waiting): (Vec<_>, Vec<_>) =
            std::mem::take(deferred).into_iter().partition(|w| self.can_answer(machine, w));
        *deferred = waiting;
        for w in ready {
            self.on_work(machine, w, deferred);
        }
    }

    /// Whether `w` can be answered now: as the machine says, and a copy only once the copy
    /// under way (one at a time) is over.
    fn can_answer(&self, machine: &Machine, w: &Work) -> bool {
        let copying = matches!(asked(w), Asked::Snapshot { .. } | Asked::Digest) && self.copying();
        let tool_rebuilding = matches!(w, Work::Tool { req: ToolRequest::SnapshotRequest { .. }, .. })
            && self.tool_rebuilds.load(std::sync::atomic::Ordering::SeqCst) > 0;
        !copying && !tool_rebuilding && machine.can_answer(asked(w))
    }

    /// One piece of work: to the machine, or (a tool's or a peer's request) answered from the
    /// replica now, deferred until it can be, or refused.
    fn on_work(&self, machine: &mut Machine, work: Work, deferred: &mut Vec<Work>) {
        if let Work::Peer { req: PeerRequest::SnapshotRequest { .. }, .. } = &work {
            self.preempt_tool_copy(machine);
        }
        let effects = match work {
            Work::Stop | Work::CopyRoom => return,
            Work::Coordinator(msg) => machine.on_coordinator(msg),
            Work::Fetched { id, fetched } => {
                self.fetches.borrow_mut().remove(&id);
                machine.on_fetched(id, *fetched)
            }
            Work::FetchProgress { id, received } => {
                let now_us = self.now_us();
                machine.on_fetch_progress(id, received, now_us);
                machine.tick(now_us)
            }
            Work::Rejoin { only_if_serving: true, .. } if !machine.rejoins_when_left_out() => {
                return;
            }
            Work::Rejoin { link_generation, .. } => {
                self.link_generation.set(link_generation);
                *self.shared.stopped.lock().unwrap_or_else(|e| e.into_inner()) = None;
                self.shared.load.send_replace(LoadState::Loading { rows_loaded: 0, rows_total: 0 });
                let pid = self.partition.id;
                let (fresh, effects) = Machine::rejoining(self.config.mode(), self.node, pid, self.pending_batches_max);
                let fresh = self.equipped(fresh).numbering_fetches_after(machine);
                // The replaced machine's fetches stop (their outcomes would be ignored).
                self.fetches.borrow_mut().clear();
                // The old state (a full stack's database and workers) goes first.
                drop(std::mem::replace(machine, fresh));
                info!(partition = pid, link_generation, "rejoining (the coordinator counted this replica failed)");
                effects
            }
            Work::Peer { req: PeerRequest::Ship(shipment), reply } => machine.on_shipment(shipment, reply),
            w if !self.can_answer(machine, &w) => {
                if deferred.len() < DEFERRED_MAX {
                    deferred.push(w);
                    return;
                }
                let reason = format!("busy: {DEFERRED_MAX} requests already wait for the replica's copy to end");
                match &w {
                    Work::Tool { req, reply } => self.refuse_tool(req, &reason, reply),
                    Work::Peer { req, reply } => self.refuse_peer(req, &reason, reply),
                    _ => {}
                }
                return;
            }
            Work::Tool { req, reply } => {
                match machine.refusal() {
                    Some(reason) => self.refuse_tool(&req, &reason, &reply),
                    None => {
                        let replica = machine.replica_mut().expect("no refusal: the replica serves");
                        self.tool(replica, req, &reply)
                    }
                }
                return;
            }
            Work::Peer { req, reply } => {
                match machine.refusal() {
                    Some(reason) => self.refuse_peer(&req, &reason, &reply),
                    None => {
                        let replica = machine.replica_mut().expect("no refusal: the replica serves");
                        self.peer(replica, req, &reply)
                    }
                }
                return;
            }
        };
        self.carry(machine, effects);
    }

    /// `machine` as this executor drives it: digests taken by a copy stepped between batches,
    /// and fetches abandoned after the configuration's `timeouts.transfer_patience_ms`.
    fn equipped(&self, machine: Machine) -> Machine {
        machine.digesting_by_copy().with_transfer_patience(self.config.timeouts.transfer_patience_ms)
    }

    /// The partition machine's clock: microseconds since this executor started.
    fn now_us(&self) -> u64 {
        self.started.elapsed().as_micros() as u64
    }

    /// Performs the machine's effects, handing it the outcome of those that have one (a
    /// restart recovery runs here, on the executor thread; a fetch on a thread of its own).
    fn carry(&self, machine: &mut Machine, effects: Vec<Effect<mpsc::Sender<PeerReply>>>) {
        crate::carrier::carry_partition(&mut ExecutorLinks { executor: self, machine }, effects);
    }

    /// Sends `m` to the writer task, under this executor's link generation.
    fn emit(&self, m: Emit) {
        if self.to_coordinator.blocking_send((self.link_generation.get(), m)).is_err() {
            debug!(partition = self.partition.id, "the coordinator link is gone; message dropped");
        }
    }

    /// Publishes the replica's figures for status requests.
    fn publish(&self, machine: &mut Machine) {
        let Some(replica) = machine.replica_mut() else { return };
        let sh = &self.shared;
        *sh.role.lock().unwrap_or_else(|e| e.into_inner()) = replica.role();
        sh.applied_seq.store(replica.applied_seq(), Ordering::Relaxed);
        let stats = replica.stats();
        sh.committed.store(stats.txns_committed, Ordering::Relaxed);
        sh.aborted.store(stats.txns_aborted, Ordering::Relaxed);
        sh.failed.store(stats.txns_failed, Ordering::Relaxed);
        sh.applied_bytes.store(replica.applied_bytes(), Ordering::Relaxed);
        if let Store::Full(f) = replica.store_mut() {
            let (bytes, fsyncs) = f.log_counters();
            sh.log_bytes.store(bytes, Ordering::Relaxed);
            sh.fsyncs.store(fsyncs, Ordering::Relaxed);
        }
    }
}

/// What `work` asks of the replica, as far as answering it now is concerned.
fn asked(work: &Work) -> Asked {
    match work {
        Work::Tool { req: ToolRequest::SnapshotRequest { after_seq, .. }, .. }
        | Work::Peer { req: PeerRequest::SnapshotRequest { after_seq, .. }, .. } => {
            Asked::Snapshot { after_seq: *after_seq }
        }
        Work::Tool { req: ToolRequest::DigestRequest { .. }, .. } => Asked::Digest,
        Work::Peer { req: PeerRequest::LogBaseRequest { after_seq, .. }, .. } => {
            Asked::LogBase { after_seq: *after_seq }
        }
        Work::Tool {
            req: ToolRequest::ReplicaRead { .. } | ToolRequest::StatusRequest { .. } | ToolRequest::Shutdown { .. },
            ..
        }
        | Work::Peer { req: PeerRequest::Ship(_), .. }
        | Work::Coordinator(_)
        | Work::Fetched { .. }
        | Work::FetchProgress { .. }
        | Work::Rejoin { .. }
        | Work::CopyRoom
        | Work::Stop => Asked::Other,
    }
}

/// An executor's world as the carrier sees it (`crate::carrier::PartitionLinks`): its
/// partition's machine, the writer task, peers' reply queues, fetch threads and the
/// full-stack database's directory.
struct ExecutorLinks<'a> {
    executor: &'a Executor,
    machine: &'a mut Machine,
}

impl crate::carrier::PartitionLinks<mpsc::Sender<PeerReply>> for ExecutorLinks<'_> {
    fn machine(&mut self) -> Option<&mut Machine> {
        Some(self.machine)
    }

    fn take_digest_copy(&mut self) {
        self.executor.carry_digest_copy(self.machine);
    }

    fn emit(&mut self, emitted: Emit) {
        self.executor.emit(emitted);
    }

    fn reply(&mut self, to: mpsc::Sender<PeerReply>, msg: PeerReply) {
        self.executor.reply_to(&to, msg);
    }

    fn fetch(&mut self, order: FetchOrder) {
        let pid = self.executor.partition.id;
        let (source, after_seq, kind) = (order.source, order.after_seq, order.kind);
        match &order.retrying {
            None => info!(partition = pid, source, after_seq, ?kind, "fetching the starting state from a live replica"),
            Some(error) => warn!(partition = pid, source, error, "copy rejected; fetching it again"),
        }
        self.executor.fetch(order);
    }

    fn abandon_fetch(&mut self, id: u64) {
        if self.executor.fetches.borrow_mut().remove(&id).is_some() {
            info!(partition = self.executor.partition.id, fetch = id, "fetch abandoned");
        }
    }

    fn recover(&mut self, restart: &Restart) -> Result<FullStack, RejoinError> {
        self.executor.restart_recovery(restart)
    }

    fn ready(&mut self, digest: StateDigest, start: Began) {
        let pid = self.executor.partition.id;
        engine::arena::set_prefault(true);
        match start {
            Began::Copy { seq, held } => {
                info!(partition = pid, seq, replayed = held, "copy installed; caught up on the batches sent meanwhile")
            }
            Began::LogBase { seq, bytes, image_bytes, held } => info!(
                partition = pid,
                seq,
                mib = bytes as f64 / (1 << 20) as f64,
                image_mib = image_bytes as f64 / (1 << 20) as f64,
                held,
                "the primary's log base applied; the shipments held applied"
            ),
            Began::OwnLog { from_seq } => info!(partition = pid, from_seq, "serving the recovered partition"),
        }
        info!(partition = pid, start_digest = %digest, "rejoined");
        self.executor.shared.load.send_replace(LoadState::Ready { digest });
        self.executor.publish(self.machine);
    }

    fn failed(&mut self, reason: String) {
        error!(partition = self.executor.partition.id, reason = %reason, "the partition cannot rejoin");
        let state = LoadState::Failed { reason: wire::messages::bounded_reason(reason) };
        self.executor.shared.load.send_replace(state);
    }

    fn stopped(&mut self, reason: String) {
        error!(partition = self.executor.partition.id, reason, "replica stopped");
        *self.executor.shared.stopped.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
    }

    fn refused(&mut self, error: ReplicaError, rejoining: bool) {
        error!(partition = self.executor.partition.id, error = %error, rejoining, "replica refused a message")
    }
}
