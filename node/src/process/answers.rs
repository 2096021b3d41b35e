//! An executor's answers to the requests that read its replica (docs/design.md §10,
//! "Copying without stopping" and "Checks during traffic"): a tool's digest, replica read or
//! copy, a rejoining peer's copy or log base, and the state digest a batch asks for. Copies
//! are stepped by the executor under its copy share and carried off it by tasks and threads;
//! what cannot be copied now is refused or, for a digest, taken at once.
//!
//! Guarantees: a copy never mixes two states (a replica replaced or stopped mid-copy ends it
//! with a refusal); one copy of the replica runs at a time, besides digest copies begun after
//! batches; a requester that does not read costs the executor at most its patience once.

use super::*;

impl Executor {
    /// A tool's request for the replica: a digest, a replica read, or a snapshot.
    pub(super) fn tool(&self, replica: &mut Replica, req: ToolRequest, reply: &mpsc::Sender<ToolReply>) {
        let answer = match req {
            ToolRequest::SnapshotRequest { request_id, partition, .. } => {
                return self.send_snapshot(replica, request_id, partition, reply, ToolReply::SnapshotChunk);
            }
            ToolRequest::DigestRequest { request_id, partition } if partition == replica.partition() => {
                let (node, reply) = (self.node, reply.clone());
                return self.digest_from_copy(replica, None, move |digest| async move {
                    let outcome = match digest {
                        Ok((seq, d)) => DigestOutcome::Digests { seq, digests: vec![(node, d)] },
                        Err(reason) => {
                            debug!(partition, reason, "a tool's digest: its copy was refused; it may ask again");
                            DigestOutcome::Busy
                        }
                    };
                    let answer = ToolReply::DigestReply { request_id, partition, outcome };
                    let _ = tokio::time::timeout(TOOL_REPLY_PATIENCE, reply.send(answer)).await;
                });
            }
            ToolRequest::DigestRequest { request_id, partition } => replica.digest_reply(request_id, partition),
            ToolRequest::ReplicaRead { request_id, partition, input } => {
                replica.replica_read(request_id, partition, &input)
            }
            // Served by the connection's task (`serve_tool`), never queued for a replica.
            ToolRequest::StatusRequest { .. } | ToolRequest::Shutdown { .. } => return,
        };
        match answer {
            Ok(m) => self.reply_to(reply, m),
            Err(e) => warn!(partition = replica.partition(), error = %e, "tool request refused"),
        }
    }

    /// A peer node's request for the replica: a rejoining node's copy or log base.
    pub(super) fn peer(&self, replica: &mut Replica, req: PeerRequest, reply: &mpsc::Sender<PeerReply>) {
        match req {
            // Shipments go to the partition's machine (`Executor::on_work`), never here.
            PeerRequest::Ship(_) => {}
            PeerRequest::SnapshotRequest { request_id, partition, .. } => {
                self.send_snapshot(replica, request_id, partition, reply, PeerReply::SnapshotChunk)
            }
            PeerRequest::LogBaseRequest { request_id, partition, after_seq, checkpoint } => {
                self.send_log_base(replica, request_id, partition, after_seq, checkpoint, reply)
            }
        }
    }

    /// Sends a full-stack primary's log base, as of batch `after_seq` or later, to a
    /// rejoining backup's node (from a thread of its own), or refuses it.
    fn send_log_base(
        &self,
        replica: &mut Replica,
        request_id: u64,
        partition: PartitionId,
        after_seq: Seq,
        checkpoint: bool,
        reply: &mpsc::Sender<PeerReply>,
    ) {
        let refuse = |why: &str| {
            self.reply_to(reply, PeerReply::LogBaseChunk(snapshot::log_base_refusal(request_id, partition, why)))
        };
        let base = match replica.log_base_for(after_seq) {
            Ok(Some(base)) => base.clone(),
            Err(why) => return refuse(why),
            // The executor defers the request until the base is recent enough
            // (`PartitionMachine::can_answer`); a replica that is no primary never has one.
            Ok(None) => {
                return refuse(
                    "no log base here: this replica is not a full-stack primary told to ship to a rejoining backup",
                )
            }
        };
        // The log generation and the checkpoint are read on the sending thread, not here:
        // the executor goes on with its batches (docs/design.md §10, "Copying without
        // stopping").
        let piece_max = snapshot::chunk_bytes_max(self.frame_bytes_max);
        let reply = reply.clone();
        let name = format!("log-base-p{partition}");
        let sender = std::thread::Builder::new().name(name.clone()).spawn(move || {
            crate::affinity::spread();
            let t0 = Instant::now();
            let (base, image) = match base.read(checkpoint) {
                Ok(read) => read,
                Err(e) => {
                    let why = format!("cannot read the log base: {e}");
                    let _ = reply.blocking_send(PeerReply::LogBaseChunk(snapshot::log_base_refusal(
                        request_id, partition, &why,
                    )));
                    return;
                }
            };
            let pieces = snapshot::log_base_pieces(&base, image.as_deref(), request_id, partition, piece_max);
            info!(
                partition,
                seq = base.seq,
                fork_lsn = ?base.fork_lsn,
                mib = base.records.len() as f64 / (1 << 20) as f64,
                image_mib = image.as_ref().map_or(0, Vec::len) as f64 / (1 << 20) as f64,
                pieces = pieces.len(),
                read_seconds = t0.elapsed().as_secs_f64(),
                "sending the log base to a rejoining backup (read off the executor)"
            );
            for piece in pieces {
                if reply.blocking_send(PeerReply::LogBaseChunk(piece)).is_err() {
                    return;
                }
            }
        });
        if let Err(e) = sender {
            error!(thread = name, error = %e, "cannot start the thread sending a transfer");
        }
    }

    /// How a copy begun on this executor reaches `requester`: at most `limits.copy_share_pct`
    /// of the executor under load, woken through its own inbox when the copy can move again.
    fn forwarding<R>(
        &self,
        requester: &str,
        digest_only: bool,
        reply: mpsc::Sender<R>,
        wrap: fn(wire::messages::SnapshotChunk) -> R,
    ) -> copy::Forwarding<'_, R, impl Fn() + Send + 'static> {
        let inbox = self.self_inbox.clone();
        copy::Forwarding {
            requester: requester.to_string(),
            digest_only,
            share_pct: self.copy_share_pct,
            reply,
            wrap,
            runtime: &self.runtime,
            wake: move || {
                let _ = inbox.try_send(Work::CopyRoom);
            },
            held_by_thread: None,
        }
    }

    /// Ends a tool's copy of the replica under way, if any, for a rejoining node's request
    /// (docs/design.md §10, "Copying without stopping"): the partition's one copy goes to
    /// restoring its redundancy, and a tool that reads slowly or not at all cannot hold it.
    pub(super) fn preempt_tool_copy(&self, machine: &mut Machine) {
        let mut copy = self.copy.borrow_mut();
        if copy.as_ref().is_some_and(copy::Copying::preemptible) {
            if let Some(mut task) = copy.take() {
                task.preempt(machine.replica_mut(), "ended: a rejoining node's copy of the partition goes first");
            }
        }
    }

    /// Carries the digest copy that a batch asking for the state digest began, if any: the
    /// executor steps it like any copy, and a task on the runtime reads its end and reports
    /// the digest to the coordinator (docs/design.md §10, "Checks during traffic").
    pub(super) fn carry_digest_copy(&self, machine: &mut Machine) {
        let Some((copy, replica)) = machine.take_digest_copy() else { return };
        let (partition, seq, link_generation) = (self.partition.id, copy.seq(), self.link_generation.get());
        let to_coordinator = self.to_coordinator.clone();
        self.digest_from_copy(replica, Some(copy), move |digest| async move {
            let msg =
                Emit::ToCoordinator(NodeToCoordinator::StateDigest { partition, seq, digest: digest.map(|d| d.1) });
            let _ = to_coordinator.send((link_generation, msg)).await;
        });
    }

    /// Digests `replica`'s state from a copy stepped like any copy: `begun`, or one begun now
    /// (at the replica's last batch); a task on the runtime reads the copy's end and hands
    /// `report` the batch and the digest, or why there is none. A replica that cannot be
    /// copied now (a copy of it is under way already, or a configuration that cannot
    /// checkpoint) is digested here, at once.
    fn digest_from_copy<F>(
        &self,
        replica: &mut Replica,
        begun: Option<DigestCopy>,
        report: impl FnOnce(Result<(Seq, StateDigest), String>) -> F + Send + 'static,
    ) where
        F: Future<Output = ()> + Send + 'static,
    {
        let partition = self.partition.id;
        let (tx, mut rx) = mpsc::channel::<wire::messages::SnapshotChunk>(copy::COPY_CHUNKS_AHEAD);
        let to = self.forwarding("a state digest", true, tx, |c| c);
        let seq = begun.as_ref().map_or(replica.applied_seq(), DigestCopy::seq);
        let task = match begun {
            Some(DigestCopy::Rows { sender, .. }) => {
                Ok(copy::Copying::Rows(copy::CopyTask::around(sender, partition, to)))
            }
            Some(DigestCopy::Image { seq }) => {
                image_copy::ImageCopyTask::around(replica, seq, 0, usize::MAX, to).map(copy::Copying::Image)
            }
            None if self.copying() => Err("a copy is under way".to_string()),
            None => match replica.store_mut() {
                Store::Lean(_) => copy::CopyTask::begin(replica, 0, usize::MAX, to)
                    .map(copy::Copying::Rows)
                    .ok_or_else(|| "a copy is under way".to_string()),
                Store::Full(_) => {
                    image_copy::ImageCopyTask::begin(replica, 0, usize::MAX, to).map(copy::Copying::Image)
                }
            },
        };
        let task = match task {
            Ok(task) => task,
            Err(why) => {
                let t0 = Instant::now();
                let digest = replica.state_digest();
                let ms = t0.elapsed().as_millis() as u64;
                info!(partition, seq, ms, reason = %why, "state digest taken on the executor: no copy could begin");
                self.runtime.spawn(report(Ok((seq, digest))));
                return;
            }
        };
        self.runtime.spawn(async move {
            let digest = loop {
                match rx.recv().await.map(|c| c.end) {
                    Some(None) => continue,
                    Some(Some(SnapshotEnd::Complete { digest, .. })) => break Ok((seq, digest)),
                    Some(Some(SnapshotEnd::Refused { reason })) => break Err(reason),
                    None => break Err("the copy ended before its end".to_string()),
                }
            };
            match &digest {
                Ok((_, d)) => info!(partition, seq, digest = %d, "state digest taken from a copy"),
                Err(reason) => warn!(partition, seq, reason, "no state digest: its copy was refused"),
            }
            report(digest).await;
        });
        self.digest_copies.borrow_mut().push(task);
    }

    /// Copies the replica for a requester, each chunk wrapped by `wrap` for its channel: a
    /// lean replica while it executes on ([`copy::CopyTask`], docs/design.md §10, "Copying
    /// without stopping"); a full-stack one here, between two batches, into memory — as large
    /// as the partition — sent from a thread of its own. A stopped replica refuses.
    fn send_snapshot<R: Reply + Send + 'static>(
        &self,
        replica: &mut Replica,
        request_id: u64,
        partition: PartitionId,
        reply: &mpsc::Sender<R>,
        wrap: fn(wire::messages::SnapshotChunk) -> R,
    ) {
        if let Some(reason) = replica.stopped() {
            let refusal = snapshot::refusal(request_id, partition, format!("stopped: {reason}"));
            self.reply_to(reply, wrap(refusal));
            return;
        }
        let requester = if R::IS_PEER { "a rejoining node" } else { "a tool" };
        if let Store::Lean(_) = replica.store_mut() {
            let to = self.forwarding(requester, false, reply.clone(), wrap);
            match copy::CopyTask::begin(replica, request_id, self.frame_bytes_max, to) {
                Some(task) if !R::IS_PEER => *self.copy.borrow_mut() = Some(copy::Copying::Rows(task.preemptible())),
                Some(task) => *self.copy.borrow_mut() = Some(copy::Copying::Rows(task)),
                None => {
                    let refusal = snapshot::refusal(request_id, partition, "a copy is under way".into());
                    self.reply_to(reply, wrap(refusal));
                }
            }
            return;
        }
        if let Store::Full(_) = replica.store_mut() {
            // A copy of its pages taken while it executes on, rebuilt and streamed by a thread
            // (docs/design.md §10); a configuration that cannot checkpoint (logging switched
            // off on the paper's staircase) is copied between two batches below.
            let mut to = self.forwarding(requester, false, reply.clone(), wrap);
            if !R::IS_PEER {
                to.held_by_thread = Some(self.tool_rebuilds.clone());
            }
            match image_copy::ImageCopyTask::begin(replica, request_id, self.frame_bytes_max, to) {
                Ok(task) => {
                    *self.copy.borrow_mut() = Some(copy::Copying::Image(task));
                    return;
                }
                Err(why) => info!(partition, reason = %why, "copying the full-stack partition between two batches"),
            }
        }
        let t0 = Instant::now();
        let digest = replica.state_digest();
        let seq = replica.applied_seq();
        let frame_max = self.frame_bytes_max;
        let mut chunks = Vec::new();
        let mut keep = |c| {
            chunks.push(c);
            true
        };
        let s = match replica.store_mut() {
            Store::Lean(db) => snapshot::stream(db, request_id, partition, seq, digest, frame_max, &mut keep),
            Store::Full(f) => snapshot::stream(f.session(), request_id, partition, seq, digest, frame_max, &mut keep),
        };
        crate::faults::corrupt_snapshot(&mut chunks);
        info!(
            partition,
            seq,
            rows = s.rows,
            chunks = s.chunks,
            mib = s.bytes as f64 / (1 << 20) as f64,
            seconds = t0.elapsed().as_secs_f64(),
            "snapshot taken; sending it"
        );
        send_from_thread(format!("snapshot-p{partition}"), chunks.into_iter().map(wrap).collect(), reply.clone());
    }

    /// Answers a tool's request the replica cannot serve (`reason`): a snapshot is refused, a
    /// digest answered `Busy` (the tool may ask again); the rest go unanswered.
    pub(super) fn refuse_tool(&self, req: &ToolRequest, reason: &str, reply: &mpsc::Sender<ToolReply>) {
        match req {
            ToolRequest::SnapshotRequest { request_id, partition, .. } => self
                .reply_to(reply, ToolReply::SnapshotChunk(snapshot::refusal(*request_id, *partition, reason.into()))),
            ToolRequest::DigestRequest { request_id, partition } => {
                let busy = DigestOutcome::Busy;
                self.reply_to(
                    reply,
                    ToolReply::DigestReply { request_id: *request_id, partition: *partition, outcome: busy },
                )
            }
            _ => {}
        }
    }

    /// Answers a peer's request the replica cannot serve (`reason`): a snapshot or a log base
    /// is refused; a shipment goes unacknowledged.
    pub(super) fn refuse_peer(&self, req: &PeerRequest, reason: &str, reply: &mpsc::Sender<PeerReply>) {
        let refusal = match req {
            PeerRequest::SnapshotRequest { request_id, partition, .. } => {
                PeerReply::SnapshotChunk(snapshot::refusal(*request_id, *partition, reason.into()))
            }
            PeerRequest::LogBaseRequest { request_id, partition, .. } => {
                PeerReply::LogBaseChunk(snapshot::log_base_refusal(*request_id, *partition, reason))
            }
            PeerRequest::Ship(_) => return,
        };
        self.reply_to(reply, refusal);
    }
}
