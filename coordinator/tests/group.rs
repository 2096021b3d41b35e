//! The coordinator group (docs/design.md §11) driven in-process: three members, a seeded
//! message bus that can cut links (both directions, or one way), lose messages and crash
//! members, which restart from what they stored. Checks raft's safety as the group relies on
//! it (Raft paper §5.2 election safety: one leader per epoch; §5.4 leader completeness: a
//! decision committed stays committed, so every member's decisions form one history) and the
//! group's own promises: a member cut off from the majority decides nothing, and bad
//! messages change nothing.

use std::collections::{BTreeMap, BTreeSet};

use coordinator::group::{
    Decision, Group, GroupError, GroupState, GroupTiming, Leadership, Membership, PartitionView, ViewState,
};
use engine::rng::Rng;
use wire::messages::CoordinatorId;

const MEMBERS: [CoordinatorId; 3] = [0, 1, 2];
const TICK_US: u64 = 1_000;

fn initial() -> Membership {
    Membership::initial((1..=2).map(|p| PartitionView {
        partition: p,
        replicas: vec![1, 2],
        state: ViewState::Loading,
    }))
}

fn timing(me: CoordinatorId) -> GroupTiming {
    GroupTiming { tick_us: TICK_US, election_ticks: 10, election_offset_ticks: 3 * usize::from(me) }
}

fn serving(p: u16, replicas: &[u16]) -> Decision {
    Decision::Views(vec![PartitionView { partition: p, replicas: replicas.to_vec(), state: ViewState::Serving }])
}

/// Three members on a bus: what each stored, what each decided, and which links are cut.
struct Bus {
    now_us: u64,
    members: BTreeMap<CoordinatorId, Option<Group>>,
    stored: BTreeMap<CoordinatorId, GroupState>,
    decided: BTreeMap<CoordinatorId, Vec<(u64, Decision)>>,
    in_flight: Vec<(CoordinatorId, CoordinatorId, Vec<u8>)>,
    /// Directed links that lose everything sent on them.
    cut: BTreeSet<(CoordinatorId, CoordinatorId)>,
    /// Leaders seen, by epoch.
    leaders: BTreeMap<u64, BTreeSet<CoordinatorId>>,
    rng: Rng,
    loss_per_1000: u64,
}

impl Bus {
    fn new(seed: u64) -> Bus {
        let members = MEMBERS.iter().map(|&m| (m, Some(Group::new(m, &MEMBERS, initial(), timing(m), 0).unwrap())));
        Bus {
            now_us: 0,
            members: members.collect(),
            stored: BTreeMap::new(),
            decided: BTreeMap::new(),
            in_flight: Vec::new(),
            cut: BTreeSet::new(),
            leaders: BTreeMap::new(),
            rng: Rng::new(seed),
            loss_per_1000: 0,
        }
    }

    fn collect(&mut self, m: CoordinatorId) {
        let Some(g) = self.members.get_mut(&m).and_then(Option::as_mut) else { return };
        let ready = g.ready();
        if let Some(state) = ready.persist {
            // Stored before the messages leave (raft's contract).
            self.stored.insert(m, state);
        }
        for (to, bytes) in ready.messages {
            self.in_flight.push((m, to, bytes));
        }
        self.decided.entry(m).or_default().extend(ready.decided);
        if let Some(Leadership::Leading { epoch }) = ready.leadership {
            self.leaders.entry(epoch).or_default().insert(m);
        }
    }

    /// Delivers what is in flight (in a seeded order) and lets `us` pass.
    fn step(&mut self, us: u64) {
        self.now_us += us;
        for m in MEMBERS {
            if let Some(g) = self.members.get_mut(&m).and_then(Option::as_mut) {
                g.on_tick(self.now_us);
            }
            self.collect(m);
        }
        let mut batch = std::mem::take(&mut self.in_flight);
        // A seeded shuffle: messages between different pairs may overtake each other.
        for i in (1..batch.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            batch.swap(i, j);
        }
        for (from, to, bytes) in batch {
            if self.cut.contains(&(from, to)) || self.rng.below(1000) < self.loss_per_1000 {
                continue;
            }
            if let Some(g) = self.members.get_mut(&to).and_then(Option::as_mut) {
                g.on_message(from, &bytes).expect("members exchange well-formed messages");
            }
            self.collect(to);
        }
    }

    fn run(&mut self, steps: usize) {
        for _ in 0..steps {
            self.step(TICK_US);
        }
    }

    fn group(&mut self, m: CoordinatorId) -> &mut Group {
        self.members.get_mut(&m).and_then(Option::as_mut).expect("member up")
    }

    fn leader(&self) -> Option<CoordinatorId> {
        let leading: Vec<_> = self.members.iter().filter_map(|(m, g)| g.as_ref()?.leading().map(|e| (e, *m))).collect();
        leading.iter().max().map(|(_, m)| *m)
    }

    fn isolate(&mut self, m: CoordinatorId) {
        for o in MEMBERS.iter().copied().filter(|&o| o != m) {
            self.cut.insert((m, o));
            self.cut.insert((o, m));
        }
    }

    fn crash(&mut self, m: CoordinatorId) {
        self.members.insert(m, None);
        self.in_flight.retain(|(from, to, _)| *from != m && *to != m);
    }

    fn restart(&mut self, m: CoordinatorId) {
        let state = self.stored.get(&m).cloned().unwrap_or_default();
        // Through the bytes a process would read back from its file.
        let state = GroupState::decode(&state.encode()).unwrap();
        let g = Group::restore(m, &MEMBERS, initial(), timing(m), state, self.now_us).unwrap();
        self.members.insert(m, Some(g));
        // Its replayed decisions are reported again; what it decided before is replaced.
        self.decided.remove(&m);
    }

    /// Raft §5.2 and §5.4 as the group relies on them.
    fn check_one_history(&self) {
        for (epoch, leaders) in &self.leaders {
            assert!(leaders.len() <= 1, "epoch {epoch} had leaders {leaders:?}");
        }
        let histories: Vec<&Vec<(u64, Decision)>> = self.decided.values().collect();
        for a in &histories {
            for b in &histories {
                let n = a.len().min(b.len());
                assert_eq!(a[..n], b[..n], "two members decided differently");
            }
        }
        let memberships: Vec<&Membership> =
            self.members.values().flatten().filter(|g| g.membership().applied() > 0).map(|g| g.membership()).collect();
        for m in &memberships {
            for v in m.views() {
                // A member further along may have changed it since; equal histories checked above.
                assert!(v.replicas.iter().all(|r| [1, 2].contains(r)));
            }
        }
    }
}

#[test]
fn elects_one_leader_and_commits_a_decision_on_every_member() {
    let mut bus = Bus::new(1);
    bus.run(60);
    let leader = bus.leader().expect("a leader within 60 ticks");
    let epoch = bus.group(leader).leading().unwrap();
    let index = bus.group(leader).propose(&serving(1, &[1, 2])).unwrap();
    bus.run(5);
    for m in MEMBERS {
        let g = bus.group(m);
        assert!(g.membership().applied() >= index, "member {m} applied the decision");
        assert_eq!(g.membership().view(1).unwrap().state, ViewState::Serving);
        assert_eq!(g.term(), epoch);
    }
    bus.check_one_history();
}

#[test]
fn a_follower_cannot_propose() {
    let mut bus = Bus::new(2);
    bus.run(60);
    let leader = bus.leader().unwrap();
    let follower = MEMBERS.into_iter().find(|&m| m != leader).unwrap();
    let err = bus.group(follower).propose(&serving(1, &[1])).unwrap_err();
    assert_eq!(err, GroupError::NotLeader { me: follower });
}

/// A leader cut off from the others decides nothing more; the majority elects a leader of a
/// later epoch, and once the link heals the old leader's proposal is gone: one history.
#[test]
fn an_isolated_leader_decides_nothing_and_the_majority_moves_on() {
    let mut bus = Bus::new(3);
    bus.run(60);
    let old = bus.leader().unwrap();
    let old_epoch = bus.group(old).leading().unwrap();
    bus.isolate(old);
    let lost = bus.group(old).propose(&serving(1, &[2])).unwrap();
    bus.run(60);
    assert!(bus.group(old).membership().applied() < lost, "the isolated leader decided without a majority");
    // Check-quorum: the old leader stepped down, so it no longer claims to lead.
    assert_eq!(bus.group(old).leading(), None);
    let new = bus.leader().expect("the majority elects a leader");
    assert_ne!(new, old);
    let new_epoch = bus.group(new).leading().unwrap();
    assert!(new_epoch > old_epoch);
    bus.group(new).propose(&serving(1, &[1])).unwrap();
    bus.run(10);
    bus.cut.clear();
    bus.run(60);
    for m in MEMBERS {
        assert_eq!(bus.group(m).membership().view(1).unwrap().replicas, vec![1], "member {m}");
    }
    bus.check_one_history();
}

/// One-way cut: the leader's messages reach no one, but it hears them. The others elect a new
/// leader; the old one must not go on deciding.
#[test]
fn a_leader_that_cannot_send_is_replaced() {
    let mut bus = Bus::new(4);
    bus.run(60);
    let old = bus.leader().unwrap();
    for o in MEMBERS.iter().copied().filter(|&o| o != old) {
        bus.cut.insert((old, o));
    }
    bus.run(80);
    let new = bus.leader().expect("a new leader");
    assert_ne!(new, old);
    bus.cut.clear();
    bus.run(40);
    bus.check_one_history();
}

#[test]
fn a_restarted_member_replays_what_was_decided() {
    let mut bus = Bus::new(5);
    bus.run(60);
    let leader = bus.leader().unwrap();
    bus.group(leader).propose(&serving(2, &[2, 1])).unwrap();
    bus.run(5);
    let follower = MEMBERS.into_iter().find(|&m| m != leader).unwrap();
    bus.crash(follower);
    bus.run(5);
    bus.restart(follower);
    bus.run(1);
    assert_eq!(bus.group(follower).membership().view(2).unwrap().replicas, vec![2, 1]);
    // The leader itself crashes and comes back: a new leader is elected, and the decision holds.
    bus.crash(leader);
    bus.run(60);
    bus.restart(leader);
    bus.run(60);
    for m in MEMBERS {
        assert_eq!(bus.group(m).membership().view(2).unwrap().state, ViewState::Serving, "member {m}");
    }
    bus.check_one_history();
}

#[test]
fn bad_messages_are_refused_and_change_nothing() {
    let mut g = Group::new(0, &MEMBERS, initial(), timing(0), 0).unwrap();
    let before = g.term();
    assert!(matches!(g.on_message(1, b"\xff\xff\xff garbage"), Err(GroupError::Malformed { from: 1, .. })));
    assert!(matches!(g.on_message(7, b""), Err(GroupError::NotMember { from: 7 })));
    assert!(matches!(g.on_message(0, b""), Err(GroupError::NotMember { from: 0 })));
    // A real message, replayed as if another member had sent it.
    let mut other = Group::new(1, &MEMBERS, initial(), timing(1), 0).unwrap();
    other.on_tick(100 * TICK_US);
    let sent = other.ready().messages;
    let (to, bytes) = sent.iter().find(|(to, _)| *to == 0).expect("member 1 campaigns");
    assert_eq!(*to, 0);
    assert!(matches!(g.on_message(2, bytes), Err(GroupError::WrongSender { from: 2, claimed: 2 })));
    let (_, for_two) = sent.iter().find(|(to, _)| *to == 2).unwrap();
    assert!(matches!(g.on_message(1, for_two), Err(GroupError::WrongRecipient { me: 0, to: 3 })));
    assert_eq!(g.term(), before);
    assert!(g.ready().messages.is_empty());
    // A stored state with a flipped byte does not restore silently.
    let mut state = GroupState { term: 3, vote: 1, commit: 1, entries: Vec::new() };
    state.entries.push(coordinator::group::StoredEntry { index: 1, term: 3, data: b"\x07\x07".to_vec() });
    assert!(GroupState::decode(&state.encode()).is_err());
}

/// Seeded runs with lost messages, cuts both ways and one way, crashes and restarts, and a
/// leader that keeps proposing: whatever happens, one leader per epoch and one history.
#[test]
fn seeded_faults_never_split_the_history() {
    let (mut epochs, mut decisions) = (0, 0);
    for seed in 0..40 {
        let mut bus = Bus::new(1000 + seed);
        bus.loss_per_1000 = 50;
        let mut down: Option<CoordinatorId> = None;
        for step in 0..1500u64 {
            bus.step(TICK_US);
            match bus.rng.below(100) {
                0 => {
                    let a = MEMBERS[bus.rng.below(3) as usize];
                    let b = MEMBERS[bus.rng.below(3) as usize];
                    if a != b {
                        bus.cut.insert((a, b));
                        if bus.rng.below(2) == 0 {
                            bus.cut.insert((b, a));
                        }
                    }
                }
                1 | 2 => bus.cut.clear(),
                3 if down.is_none() => {
                    let m = MEMBERS[bus.rng.below(3) as usize];
                    bus.crash(m);
                    down = Some(m);
                }
                4 | 5 => {
                    if let Some(m) = down.take() {
                        bus.restart(m);
                    }
                }
                _ => {}
            }
            if let Some(l) = bus.leader() {
                if step % 7 == 0 {
                    let r = if bus.rng.below(2) == 0 { vec![1, 2] } else { vec![2] };
                    let _ = bus.group(l).propose(&serving(1 + (step % 2) as u16, &r));
                }
            }
            bus.check_one_history();
        }
        // Heal everything: the group converges on one leader and one membership.
        bus.cut.clear();
        bus.loss_per_1000 = 0;
        if let Some(m) = down.take() {
            bus.restart(m);
        }
        bus.run(200);
        let leader = bus.leader().unwrap_or_else(|| panic!("seed {seed}: no leader after healing"));
        bus.group(leader).propose(&serving(1, &[1, 2])).unwrap();
        bus.run(20);
        let views: Vec<_> = MEMBERS.iter().map(|&m| bus.group(m).membership().view(1).cloned()).collect();
        assert!(views.windows(2).all(|w| w[0] == w[1]), "seed {seed}: memberships differ: {views:?}");
        bus.check_one_history();
        epochs += bus.leaders.len();
        decisions += bus.decided.values().map(Vec::len).max().unwrap_or(0);
    }
    // The faults did their work: leaders changed and decisions were made throughout.
    eprintln!("{epochs} epochs led, {decisions} decisions over 40 seeds");
    assert!(epochs > 80 && decisions > 40 * 50, "{epochs} epochs, {decisions} decisions");
}

/// The survivors' view of the time: the election timeout is 10 ticks (plus 3 per id), so a
/// leader elected within a tick of the death notice was not elected by the timeout.
fn survivors(dead: CoordinatorId) -> Vec<CoordinatorId> {
    MEMBERS.iter().copied().filter(|&m| m != dead).collect()
}

/// docs/design.md §11, "A leader's death": the survivors learn of the leader's death from its
/// liveness tether and elect another at once — within a tick, not raft's election timeout —
/// although the dead leader's lease has not run out.
#[test]
fn a_dead_leader_is_replaced_at_once_when_its_death_is_seen() {
    let mut bus = Bus::new(11);
    bus.run(60);
    let old = bus.leader().unwrap();
    let old_epoch = bus.group(old).leading().unwrap();
    bus.group(old).propose(&serving(1, &[2])).unwrap();
    bus.run(3);
    bus.crash(old);
    let now = bus.now_us;
    for m in survivors(old) {
        bus.group(m).on_peer_died(old, now);
        bus.collect(m);
    }
    // Messages delivered without a tick passing: the election is not the timeout's.
    for _ in 0..4 {
        bus.step(0);
    }
    let new = bus.leader().expect("a survivor leads before a single tick passed");
    assert_eq!(new, survivors(old)[0], "the survivor of the lowest id stands first");
    assert!(bus.group(new).leading().unwrap() > old_epoch);
    assert_eq!(bus.group(new).membership().view(1).unwrap().replicas, vec![2], "committed decisions survive");
    bus.group(new).propose(&serving(2, &[1])).unwrap();
    bus.run(3);
    bus.restart(old);
    bus.run(40);
    bus.check_one_history();
    assert_eq!(bus.leader(), Some(new), "the dead leader comes back as a follower");
}

/// If the survivor of the lowest id does not stand (its notice never came, or it cannot win),
/// the next one stands half a tick later; one that sees a leader by then does not.
#[test]
fn the_next_survivor_stands_if_the_first_does_not() {
    let mut bus = Bus::new(12);
    bus.run(60);
    let old = bus.leader().unwrap();
    let second = *survivors(old).last().unwrap();
    bus.crash(old);
    let now = bus.now_us;
    bus.group(second).on_peer_died(old, now);
    bus.collect(second);
    bus.step(0);
    assert_eq!(bus.leader(), None, "the second survivor waits its turn");
    bus.step(TICK_US / 2);
    for _ in 0..3 {
        bus.step(0);
    }
    assert_eq!(bus.leader(), Some(second));
    bus.check_one_history();

    // With a leader elected, a late notice of the dead one changes nothing.
    let first = survivors(old)[0];
    let term = bus.group(first).term();
    let now = bus.now_us;
    bus.group(first).on_peer_died(old, now);
    bus.run(2);
    assert_eq!((bus.leader(), bus.group(first).term()), (Some(second), term));
}

/// The lease still holds for a leader that is alive: a death notice of a follower, or a
/// follower's own cut from a live leader, never starts an election before the timeout, and
/// a member's notice about itself or a stranger is ignored.
#[test]
fn only_the_leaders_death_starts_an_election_early() {
    let mut bus = Bus::new(13);
    bus.run(60);
    let leader = bus.leader().unwrap();
    let epoch = bus.group(leader).leading().unwrap();
    let [a, b] = survivors(leader)[..] else { unreachable!() };
    let now = bus.now_us;
    bus.group(a).on_peer_died(b, now);
    bus.group(b).on_peer_died(b, now);
    bus.group(b).on_peer_died(9, now);
    bus.group(leader).on_peer_died(a, now);
    bus.run(5);
    assert_eq!((bus.leader(), bus.group(leader).leading()), (Some(leader), Some(epoch)));

    // A cut, not a death: the followers wait out the election timeout (10 ticks and more).
    bus.isolate(leader);
    bus.run(5);
    assert!(survivors(leader).iter().all(|&m| bus.group(m).leading().is_none()));
    assert_eq!(bus.group(a).term(), epoch, "no election within the lease");
    bus.run(60);
    assert_ne!(bus.leader(), Some(leader));
    bus.check_one_history();
}
