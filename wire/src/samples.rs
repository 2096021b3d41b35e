//! One message of every variant of every channel, each in the order of its enum's variants
//! (so its index is its tag), with fields at or near their extremes: what the codec's tests
//! round-trip and what the fuzz targets start from (docs/design.md §13).

use engine::procedures::{
    CustomerSelector, NewOrderInput, NewOrderOutput, OrderLineInput, PaymentInput, TxnInput, TxnOutput, ORDER_LINES_MAX,
};

use crate::channel::*;
use crate::messages::*;

pub fn worst_new_order() -> TxnInput {
    let line = OrderLineInput { i_id: u32::MAX, supply_w_id: u16::MAX, quantity: u8::MAX };
    TxnInput::NewOrder(NewOrderInput {
        w_id: u16::MAX,
        d_id: u8::MAX,
        c_id: u32::MAX,
        ol_cnt: ORDER_LINES_MAX as u8,
        lines: [line; ORDER_LINES_MAX],
        entry_d: i64::MIN,
    })
}

pub fn payment() -> TxnInput {
    TxnInput::Payment(PaymentInput {
        w_id: 1,
        d_id: 2,
        c_w_id: 1,
        c_d_id: 3,
        customer: CustomerSelector::ByLastName(*b"BARBARBARBARBARB"),
        h_amount: 12_345,
        date: 1_213_056_000,
    })
}

pub fn ts() -> Timestamp {
    Timestamp::new(1_700_000_000_000, 7, 1)
}

pub fn batch() -> Batch {
    Batch {
        partition: 2,
        seq: 41,
        txns: vec![
            BatchTxn { id: RequestId { client: u64::MAX, seq: u64::MAX }, ..BatchTxn::whole(ts(), worst_new_order()) },
            BatchTxn::whole(ts(), payment()),
        ],
        digest_after: true,
        answerer: Some(u16::MAX),
    }
}

pub fn results() -> Results {
    Results {
        partition: 2,
        seq: 41,
        results: vec![
            TxnResult {
                ts: ts(),
                outcome: TxnOutcome::Committed(TxnOutput::NewOrder(NewOrderOutput {
                    o_id: 3001,
                    total: 123_456,
                    c_discount: 12,
                    w_tax: 3,
                    d_tax: 4,
                    brand_lines: 2,
                })),
                digest: 77,
            },
            TxnResult { ts: ts(), outcome: TxnOutcome::Aborted { reason: "rolled back".into() }, digest: 5 },
        ],
    }
}

pub fn status() -> ProcessStatus {
    ProcessStatus {
        role: PeerKind::Node,
        id: 3,
        pid: 77,
        uptime_ms: 9,
        partitions: vec![PartitionReport {
            latency_buckets: vec![u64::MAX; crate::metrics::LATENCY_BUCKETS + 1],
            partition: 1,
            phase: PartitionPhase::Ready,
            load: Some(LoadState::Ready { digest: StateDigest(5) }),
            replicas: vec![3],
            seq: 8,
            txns: 100,
            cpu_ms: 4,
            replication: ReplicationReport {
                role: Some(ReplicationRole::Backup),
                applied_bytes: 9,
                ..Default::default()
            },
        }],
        leader: Some(0),
    }
}

pub fn chunk() -> SnapshotChunk {
    SnapshotChunk {
        request_id: 4,
        partition: 1,
        seq: 8,
        index: 0,
        table: 2,
        rows: 1,
        rows_bytes: vec![1, 2, 3],
        checksum: SnapshotChunk::checksum_of(&[1, 2, 3]),
        end: Some(SnapshotEnd::Complete { chunks: 1, rows: 1, digest: StateDigest(6) }),
    }
}

pub fn handshakes() -> Vec<Handshake> {
    vec![
        Handshake::Hello(Hello {
            protocol_version: PROTOCOL_VERSION,
            role: PeerKind::Node,
            id: 2,
            config_fingerprint: 9,
        }),
        Handshake::HelloRefused { reason: "wrong cluster".into() },
    ]
}

pub fn client_requests() -> Vec<ClientToCoordinator> {
    vec![
        ClientToCoordinator::ClientRequests(vec![
            ClientRequest::new(u64::MAX, 3, ts(), payment()),
            ClientRequest { retry: true, ..ClientRequest::new(7, u64::MAX, Timestamp(u64::MAX), payment()) },
        ]),
        ClientToCoordinator::DigestRequest { request_id: 8, partition: 1 },
        ClientToCoordinator::StatusRequest { request_id: 1 },
        ClientToCoordinator::Shutdown { reason: "done".into() },
    ]
}

pub fn client_replies() -> Vec<CoordinatorToClient> {
    vec![
        CoordinatorToClient::ClientReplies(vec![
            ClientReply { request_id: 3, result: ClientResult::Busy { partition: 1 } },
            ClientReply { request_id: 4, result: ClientResult::Rejected(Rejection::NotReady { partition: 2 }) },
            ClientReply {
                request_id: 5,
                result: ClientResult::Rejected(Rejection::OutcomeForgotten {
                    id: RequestId { client: 9, seq: 5 },
                    partition: 1,
                    not_before: ts(),
                    remembered_after: Timestamp(u64::MAX),
                }),
            },
        ]),
        CoordinatorToClient::DigestReply {
            request_id: 8,
            partition: 1,
            outcome: DigestOutcome::Digests { seq: 9, digests: vec![(1, StateDigest(1)), (2, StateDigest(1))] },
        },
        CoordinatorToClient::StatusReply { request_id: 1, status: status() },
        CoordinatorToClient::Shutdown { reason: "done".into() },
    ]
}

pub fn to_nodes() -> Vec<CoordinatorToNode> {
    let reads = PieceReads { home: 1, from: 2, ts: ts(), outcome: PieceOutcome::Aborted { reason: "no".into() } };
    vec![
        CoordinatorToNode::Batch(batch()),
        CoordinatorToNode::Heartbeat { now_ms: 123 },
        CoordinatorToNode::Membership { partition: 1, epoch: 2, live: vec![1] },
        CoordinatorToNode::PartitionStopped { partition: 1, reason: "diverged".into() },
        CoordinatorToNode::Shutdown { reason: "done".into() },
        CoordinatorToNode::RejoinPlan { partition: 1, source: 2, from_seq: 5 },
        CoordinatorToNode::RejoinRefused { partition: 1, reason: "no".into() },
        CoordinatorToNode::ResumeFromLog { partition: 1, from_seq: 5 },
        CoordinatorToNode::Promote { partition: 1, first_unanswered: 4 },
        CoordinatorToNode::ShipTo { partition: 1, backup: 3 },
        CoordinatorToNode::PieceReads(reads),
        CoordinatorToNode::RederivePiece { partition: 2, home: 1, seq: 3, ts: ts(), input: payment() },
        CoordinatorToNode::TakeOver { epoch: 7 },
        CoordinatorToNode::SendBatches { partition: 1, after: 4, whole_after: 6 },
        CoordinatorToNode::RecallOutcomes {
            partition: 1,
            recall: 2,
            through: 9,
            ids: vec![RequestId { client: 3, seq: 4 }, RequestId { client: u64::MAX, seq: u64::MAX }],
        },
        CoordinatorToNode::SendResults { partition: 1, seqs: vec![1, u64::MAX] },
    ]
}

pub fn from_coordinator() -> Vec<FromCoordinator> {
    vec![FromCoordinator::Epoched(Epoched { epoch: u64::MAX, msg: CoordinatorToNode::Batch(batch()) })]
}

pub fn from_nodes() -> Vec<NodeToCoordinator> {
    vec![
        NodeToCoordinator::LoadStatus { partition: 1, state: LoadState::Loading { rows_loaded: 5, rows_total: 10 } },
        NodeToCoordinator::LoadStatus { partition: 1, state: LoadState::Ready { digest: StateDigest(u128::MAX - 3) } },
        NodeToCoordinator::Results(results()),
        NodeToCoordinator::Heartbeat { now_ms: 1 },
        NodeToCoordinator::RejoinRequest { partition: 1 },
        NodeToCoordinator::BackupApplied { partition: 1, seq: 3 },
        NodeToCoordinator::Rejoined { partition: 1, snapshot_seq: 3 },
        NodeToCoordinator::Promoted { partition: 1, applied_seq: 3, next_seq: 4 },
        NodeToCoordinator::PieceReads(PieceReads {
            home: 1,
            from: 2,
            ts: ts(),
            outcome: PieceOutcome::Reads(engine::distributed::RemoteReads::Stock(Vec::new())),
        }),
        NodeToCoordinator::Standing {
            epoch: 7,
            partition: 1,
            standing: ReplicaStanding {
                role: ReplicationRole::Replica,
                executed_seq: 3,
                held_seq: 5,
                kept_from: 1,
                last_ts: Some(ts()),
                stopped: false,
                held_reads: Vec::new(),
                pieces: vec![batch()],
            },
        },
        NodeToCoordinator::HeldBatches {
            partition: 1,
            batches: vec![batch()],
            reads: vec![PieceReads {
                home: 1,
                from: 2,
                ts: ts(),
                outcome: PieceOutcome::Aborted { reason: "no".into() },
            }],
        },
        NodeToCoordinator::Fenced { epoch: 8 },
        NodeToCoordinator::ShippingBehind { partition: 1, backup: 2, queued: u32::MAX },
        NodeToCoordinator::StateDigest { partition: 1, seq: 9, digest: Ok(StateDigest(42)) },
        NodeToCoordinator::StateDigest { partition: 1, seq: 10, digest: Err("stopped".into()) },
        NodeToCoordinator::Recalled {
            partition: 1,
            recall: 2,
            executed_seq: 9,
            remembered_after: ts(),
            found: vec![RecalledOutcome {
                id: RequestId { client: 3, seq: 4 },
                ts: ts(),
                outcome: Some(results().results[0].outcome.clone()),
            }],
        },
        NodeToCoordinator::ResultsDigest(results().digest()),
        NodeToCoordinator::ResultsForgotten { partition: 1, seq: u64::MAX },
    ]
}

pub fn peer_requests() -> Vec<PeerRequest> {
    vec![
        PeerRequest::Ship(Shipment {
            partition: 1,
            primary: 3,
            seq: 2,
            last_ts: Some(ts()),
            pieces: batch().txns,
            log: ShippedLog::Wal(vec![1, 2, 3]),
            answers: vec![RecalledOutcome {
                id: RequestId { client: 3, seq: 4 },
                ts: ts(),
                outcome: Some(results().results[0].outcome.clone()),
            }],
        }),
        PeerRequest::SnapshotRequest { request_id: 1, partition: 1, after_seq: 2 },
        PeerRequest::LogBaseRequest { request_id: 1, partition: 1, after_seq: 2, checkpoint: true },
    ]
}

pub fn peer_replies() -> Vec<PeerReply> {
    let base = LogBaseChunk {
        request_id: 1,
        partition: 1,
        seq: 2,
        fork_lsn: Some(7),
        checkpoint_bytes: 4,
        index: 0,
        records: vec![9; 10],
        last: true,
        refused: None,
    };
    vec![PeerReply::ShipAck { partition: 1, seq: 2 }, PeerReply::SnapshotChunk(chunk()), PeerReply::LogBaseChunk(base)]
}

pub fn tool_requests() -> Vec<ToolRequest> {
    vec![
        ToolRequest::StatusRequest { request_id: 1 },
        ToolRequest::DigestRequest { request_id: 2, partition: 1 },
        ToolRequest::SnapshotRequest { request_id: 3, partition: 1, after_seq: 0 },
        ToolRequest::ReplicaRead { request_id: 4, partition: 1, input: payment() },
        ToolRequest::Shutdown { reason: "down".into() },
    ]
}

pub fn tool_replies() -> Vec<ToolReply> {
    vec![
        ToolReply::StatusReply { request_id: 1, status: status() },
        ToolReply::DigestReply { request_id: 2, partition: 1, outcome: DigestOutcome::Busy },
        ToolReply::SnapshotChunk(chunk()),
        ToolReply::ReplicaReadReply {
            request_id: 4,
            partition: 1,
            seq: 3,
            possibly_stale: true,
            outcome: TxnOutcome::PieceDone { reads_digest: 5 },
        },
    ]
}
