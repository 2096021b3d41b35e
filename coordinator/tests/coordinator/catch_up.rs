//! The catch-up policy (docs/design.md §10, "Catching up under load"), driven on the
//! coordinator state machine like the rest of this test crate: while a replica rejoins, its
//! partition admits only the kept share of its recent rate — the rest answered `Busy`,
//! nothing kept — then the smaller share past the deadline, and everything again once the
//! joiner rejoined, gave up or failed; a joiner is given more patience than a serving node
//! before it is counted failed by silence.

use super::*;
/// A coordinator of cluster.toml (partition 1 — warehouses 1 and 2 — and partition 2 —
/// warehouses 3 and 4 — on nodes 1 and 2), loaded, under the catch-up policy `share` /
/// `deadline_ms` / `after` (docs/design.md §10, "Catching up under load"). Batches of 16;
/// room in flight for everything the tests offer; the test's replicas never answer nor
/// heartbeat, so nothing fails by silence.
fn catch_up_cluster(share: u32, deadline_ms: u64, after: u32) -> Coordinator {
    let mut cfg = config(16, 1 << 20);
    cfg.limits.catch_up_share_pct = share;
    cfg.limits.catch_up_deadline_ms = deadline_ms;
    cfg.limits.catch_up_share_after_deadline_pct = after;
    cfg.timeouts.failure_timeout_ms = 3_600_000;
    loaded(&cfg, &[1, 2])
}

/// What [`offer`] saw.
#[derive(Debug, Default)]
struct Offered {
    admitted: u64,
    busy: u64,
    events: Vec<Event>,
}

/// Offers one transaction `input(id)` every `every_us` from `from_us` to `to_us` (excluded),
/// ticking every 10 ms; a single-partition request is admitted when nothing answers it at
/// once, refused when answered `Busy` (anything else fails the test).
fn offer(
    c: &mut Coordinator,
    next_id: &mut u64,
    (from_us, to_us, every_us): (u64, u64, u64),
    input: impl Fn(u64) -> TxnInput,
) -> Offered {
    let mut seen = Offered::default();
    let mut now = from_us;
    while now < to_us {
        if now % (10 * MS) < every_us {
            seen.events.extend(events(&c.tick(now)));
        }
        *next_id += 1;
        let out = c.on_client_request(1, request(*next_id, input(*next_id)), now);
        seen.events.extend(events(&out));
        match &replies(&out)[..] {
            [] => seen.admitted += 1,
            [(1, ClientReply { result: ClientResult::Busy { .. }, .. })] => seen.busy += 1,
            other => panic!("{other:?}"),
        }
        now += every_us;
    }
    seen
}

/// Whether `x` is within `pct` percent of `expected`.
fn near(x: u64, expected: u64, pct: u64) -> bool {
    x.abs_diff(expected) * 100 <= expected * pct
}

/// Partition 1's replica on node 2 fails and asks to rejoin at `now_us`: returns the plan's
/// batch and the events.
fn fail_and_rejoin(c: &mut Coordinator, now_us: u64) -> (Seq, Vec<Event>) {
    let mut seen = events(&c.on_node_lost(2, link_lost(), now_us));
    let out = c.on_node_message(2, NodeToCoordinator::RejoinRequest { partition: 1 }, now_us);
    seen.extend(events(&out));
    let from_seq = out
        .iter()
        .find_map(|o| match o {
            Output::ToNodes { msg: CoordinatorToNode::RejoinPlan { from_seq, .. }, .. } => Some(*from_seq),
            _ => None,
        })
        .expect("a rejoin plan");
    (from_seq, seen)
}

fn catch_up_events(events: &[Event]) -> Vec<Event> {
    events
        .iter()
        .filter(|e| matches!(e, Event::CatchUpBegan { .. } | Event::CatchUpHarder { .. } | Event::CatchUpEnded { .. }))
        .cloned()
        .collect()
}

/// The catch-up cluster (share 25, then 60 past 2 s) offered `r` Payments a second on
/// partition 1 for its first second: the cluster, the next request id, what was offered.
fn a_second_at(r: u64) -> (Coordinator, u64, Offered) {
    let mut c = catch_up_cluster(25, 2_000, 60);
    let mut id = 0;
    let before = offer(&mut c, &mut id, (START_US, START_US + 1_000 * MS, 1_000_000 / r), payment_on_1);
    (c, id, before)
}

fn payment_on_1(id: u64) -> TxnInput {
    payment(1, 1, 1 + (id % 3_000) as u32)
}

/// docs/design.md §10, "Catching up under load": a partition admitting R transactions a
/// second when a replica of it starts rejoining admits about 0.75 R (share 25) while the
/// replica catches up — the rest answered `Busy`, nothing kept — then 0.4 R past the
/// deadline (share 60), and R again once the replica reported `Rejoined`; the figures of
/// the catch-up are reported.
#[test]
fn a_rejoin_throttles_admission_to_the_kept_share_until_the_joiner_rejoined() {
    const R: u64 = 20_000;
    let (every, s, t0) = (1_000_000 / R, 1_000 * MS, START_US);
    let (mut c, mut id, before) = a_second_at(R);
    assert_eq!((before.admitted, before.busy), (R, 0));

    let (from_seq, seen) = fail_and_rejoin(&mut c, t0 + s);
    assert_eq!(
        catch_up_events(&seen),
        vec![Event::CatchUpBegan { partition: 1, node: 2, base_txn_per_s: R, share_pct: 25 }]
    );
    let mut refused = 0;
    for second in 1..3 {
        let inflight = c.status()[0].inflight_txns as u64;
        let during = offer(&mut c, &mut id, (t0 + second * s, t0 + (second + 1) * s, every), payment_on_1);
        assert!(near(during.admitted, R * 3 / 4, 2), "second {second}: {during:?}");
        assert_eq!(during.admitted + during.busy, R);
        assert_eq!(c.status()[0].inflight_txns as u64, inflight + during.admitted, "a refusal keeps nothing");
        assert!(catch_up_events(&during.events).is_empty(), "{:?}", during.events);
        refused += during.busy;
    }
    assert!(c.next_deadline_us().unwrap() <= t0 + 3 * s, "the deadline is a tick's");

    // Past the deadline (2 s after the plan) the partition gives up 60 %.
    let past = offer(&mut c, &mut id, (t0 + 3 * s, t0 + 4 * s, every), payment_on_1);
    assert_eq!(catch_up_events(&past.events), vec![Event::CatchUpHarder { partition: 1, share_pct: 60 }]);
    assert!(near(past.admitted, R * 2 / 5, 2), "{past:?}");
    refused += past.busy;
    // The other partition is not throttled.
    let other = offer(&mut c, &mut id, (t0 + 4 * s - 10 * MS, t0 + 4 * s, 1), |_| payment(3, 3, 1));
    assert_eq!(other.busy, 0);

    // The joiner rejoins: the catch-up ends, and its figures are reported.
    let snapshot_seq = from_seq - 1;
    let rejoined = NodeToCoordinator::Rejoined { partition: 1, snapshot_seq };
    let out = c.on_node_message(2, rejoined, t0 + 4 * s);
    let sent = c.status()[0].batches_sent;
    assert_eq!(
        events(&out),
        vec![
            Event::Rejoined { partition: 1, node: 2, snapshot_seq, replayed_batches: sent - snapshot_seq },
            Event::CatchUpEnded { partition: 1, elapsed_ms: 3_000, refused_txns: refused },
        ]
    );
    assert!(sent - snapshot_seq > 1_000, "{sent} {snapshot_seq}");
    let after = offer(&mut c, &mut id, (t0 + 4 * s, t0 + 5 * s, every), payment_on_1);
    assert_eq!((after.admitted, after.busy), (R, 0), "unthrottled again");
    assert!(catch_up_events(&after.events).is_empty());
}

/// `catch_up_share_pct = 0` turns the policy off: a rejoin throttles nothing and reports no
/// catch-up.
#[test]
fn with_the_policy_off_a_rejoin_throttles_nothing() {
    let mut c = catch_up_cluster(0, 2_000, 60);
    let mut id = 0;
    let s = 1_000 * MS;
    offer(&mut c, &mut id, (START_US, START_US + s, 50), payment_on_1);
    let (from_seq, mut seen) = fail_and_rejoin(&mut c, START_US + s);
    let during = offer(&mut c, &mut id, (START_US + s, START_US + 4 * s, 50), payment_on_1);
    assert_eq!((during.admitted, during.busy), (60_000, 0));
    seen.extend(during.events);
    let rejoined = NodeToCoordinator::Rejoined { partition: 1, snapshot_seq: from_seq - 1 };
    seen.extend(events(&c.on_node_message(2, rejoined, START_US + 4 * s)));
    assert!(seen.iter().any(|e| matches!(e, Event::Rejoined { partition: 1, node: 2, .. })), "{seen:?}");
    assert!(catch_up_events(&seen).is_empty(), "{seen:?}");
}

/// A multi-partition transaction touching a partition whose throttle has no token left is
/// refused whole — nothing admitted on the other partition — whichever is its home; once a
/// token is back it is admitted on both.
#[test]
fn a_multi_partition_transaction_touching_a_throttled_partition_is_refused_whole() {
    let mut c = catch_up_cluster(25, 20_000, 60);
    let mut id = 0;
    let s = 1_000 * MS;
    let t1 = START_US + s;
    offer(&mut c, &mut id, (START_US, t1, 100), payment_on_1);
    fail_and_rejoin(&mut c, t1);
    // The bucket (10 ms at 7 500 a second: 75) drains at once.
    let burst = offer(&mut c, &mut id, (t1, t1 + 1, 1), payment_on_1);
    assert_eq!(burst.admitted, 1);
    let mut drained = burst.admitted;
    while offer(&mut c, &mut id, (t1, t1 + 1, 1), payment_on_1).admitted == 1 {
        drained += 1;
    }
    assert_eq!(drained, 75);
    let inflight = |c: &Coordinator| c.status().iter().map(|p| p.inflight_txns).collect::<Vec<_>>();
    let held = inflight(&c);
    for (n, input) in [payment(3, 1, 1), payment(1, 3, 1), new_order(3, &[3, 1, 3, 3, 3])].into_iter().enumerate() {
        let out = c.on_client_request(2, request(n as u64, input), t1);
        assert_eq!(
            replies(&out),
            vec![(2, ClientReply { request_id: n as u64, result: ClientResult::Busy { partition: 1 } })]
        );
        assert!(batches(&out).is_empty());
        assert_eq!(inflight(&c), held, "nothing kept on either partition");
    }
    // 1 ms later, 7.5 tokens: admitted on both partitions.
    let out = c.on_client_request(2, request(10, payment(3, 1, 1)), t1 + MS);
    assert!(replies(&out).is_empty(), "{out:?}");
    assert_eq!(inflight(&c), vec![held[0] + 1, held[1] + 1]);
    let out = c.on_node_message(2, NodeToCoordinator::Rejoined { partition: 1, snapshot_seq: 0 }, t1 + MS);
    let ended = catch_up_events(&events(&out));
    assert!(matches!(ended[..], [Event::CatchUpEnded { partition: 1, elapsed_ms: 1, refused_txns: 4 }]), "{ended:?}");
}

/// A catch-up ends when its joiner fails again (it left `joining`): admission is unthrottled
/// at once; a new rejoin starts a new catch-up.
#[test]
fn a_catch_up_ends_when_the_joiner_fails_again() {
    let mut c = catch_up_cluster(50, 20_000, 60);
    let mut id = 0;
    let s = 1_000 * MS;
    offer(&mut c, &mut id, (START_US, START_US + s, 100), payment_on_1);
    let (_, seen) = fail_and_rejoin(&mut c, START_US + s);
    assert!(matches!(catch_up_events(&seen)[..], [Event::CatchUpBegan { base_txn_per_s: 10_000, share_pct: 50, .. }]));
    let during = offer(&mut c, &mut id, (START_US + s, START_US + 2 * s, 100), payment_on_1);
    assert!(near(during.admitted, 5_000, 2), "{during:?}");
    let out = c.on_node_lost(2, link_lost(), START_US + 2 * s);
    let ended = catch_up_events(&events(&out));
    assert_eq!(ended, vec![Event::CatchUpEnded { partition: 1, elapsed_ms: 1_000, refused_txns: during.busy }]);
    let after = offer(&mut c, &mut id, (START_US + 2 * s, START_US + 3 * s, 100), payment_on_1);
    assert_eq!((after.admitted, after.busy), (10_000, 0));
    let (_, seen) = fail_and_rejoin(&mut c, START_US + 3 * s);
    assert!(matches!(catch_up_events(&seen)[..], [Event::CatchUpBegan { base_txn_per_s: 10_000, .. }]), "{seen:?}");
}

/// docs/design.md §10, "Catching up under load": a joiner that gives its rejoin up while
/// its node stays connected says so (a failed load); it no longer counts as rejoining, and
/// the partition's catch-up throttle ends at once instead of holding admission back until
/// the node is declared failed.
#[test]
fn a_rejoin_given_up_ends_the_catch_up() {
    const R: u64 = 20_000;
    let (every, s, t0) = (1_000_000 / R, 1_000 * MS, START_US);
    let (mut c, mut id, _) = a_second_at(R);
    let (_, seen) = fail_and_rejoin(&mut c, t0 + s);
    assert!(matches!(catch_up_events(&seen)[..], [Event::CatchUpBegan { .. }]), "{seen:?}");
    let gave_up = NodeToCoordinator::LoadStatus {
        partition: 1,
        state: LoadState::Failed { reason: "more than 65536 batches held while rejoining".into() },
    };
    let seen = events(&c.on_node_message(2, gave_up, t0 + 2 * s));
    assert!(seen.iter().any(|e| matches!(e, Event::RejoinGivenUp { partition: 1, node: 2, .. })), "{seen:?}");
    assert!(matches!(catch_up_events(&seen)[..], [Event::CatchUpEnded { partition: 1, .. }]), "{seen:?}");
    let after = offer(&mut c, &mut id, (t0 + 2 * s, t0 + 3 * s, every), payment_on_1);
    assert_eq!((after.admitted, after.busy), (R, 0), "unthrottled again");
}

/// docs/design.md §10, "Catching up under load": a joiner counted failed mid-rejoin (its
/// heartbeats starved at saturation) that comes back and finishes the old plan's copy reports
/// `Rejoined` for a rejoin the coordinator no longer holds. It is not counted live, and it is
/// told the membership it is left out of, so that it rejoins afresh rather than serving a
/// state nobody counts. (Found on real processes: `glass failover` with the catch-up policy
/// off left the node out for the rest of the run.)
#[test]
fn a_rejoined_the_coordinator_gave_up_on_is_told_it_is_left_out() {
    let (mut c, _, _) = a_second_at(20_000);
    let (from_seq, _) = fail_and_rejoin(&mut c, START_US + 1_000 * MS);
    // Counted failed mid-rejoin, then back.
    let _ = c.on_node_lost(2, link_lost(), START_US + 2_000 * MS);
    let rejoined = NodeToCoordinator::Rejoined { partition: 1, snapshot_seq: from_seq - 1 };
    let out = c.on_node_message(2, rejoined, START_US + 3_000 * MS);
    assert!(events(&out).iter().any(|e| matches!(e, Event::Ignored { node: 2, .. })), "{out:?}");
    assert!(!events(&out).iter().any(|e| matches!(e, Event::Rejoined { .. })), "not counted live: {out:?}");
    let told = crate::common::memberships(&out, 1);
    assert_eq!(told, vec![(vec![2], vec![1])], "node 2 is told partition 1's membership, without it");
}

/// docs/design.md §10, "A joiner is not failed for being busy joining": a node that only
/// rejoins (it serves no partition) and goes silent — starved of CPU at saturation — is given
/// `JOINER_PATIENCE_TIMEOUTS` failure timeouts before it is counted failed; a serving node
/// one. (Its death is still seen at once, by its tether or its link.)
#[test]
fn a_silent_joiner_is_given_more_patience_than_a_serving_node() {
    let (mut c, _, _) = a_second_at(20_000);
    let t = START_US + 1_000 * MS;
    let _ = fail_and_rejoin(&mut c, t);
    let timeout = 3_600_000 * MS; // catch_up_cluster's failure timeout
    let down = |c: &mut Coordinator, at: u64| {
        let _ = c.on_node_message(1, NodeToCoordinator::Heartbeat { now_ms: at / 1_000 }, at);
        events(&c.tick(at)).into_iter().any(|e| matches!(e, Event::NodeDown { node: 2, .. }))
    };
    assert!(!down(&mut c, t + timeout + timeout / 2), "one failure timeout of silence: still rejoining");
    assert!(
        !down(&mut c, t + (coordinator::leader::JOINER_PATIENCE_TIMEOUTS * timeout) - 1),
        "just short of the joiner's patience"
    );
    assert!(down(&mut c, t + coordinator::leader::JOINER_PATIENCE_TIMEOUTS * timeout + 1), "past it: failed");
}
