//! The coordinator group: the coordinators of `cluster.toml` agree, through raft (the
//! `raft` crate, TiKV's raft-rs, driven by `tick`/`step`/`ready` and doing no I/O), on who
//! leads, the epoch, and the partitions' membership — which replicas are live, which one is
//! a passive partition's primary, which partition is unavailable or stopped
//! (docs/design.md §11). Batches and timestamps never enter this log: the replicas hold the
//! input, and a new leader learns where each partition stands from them.
//!
//! Guarantees:
//! - the epoch is the raft term of the leader that uses it; at most one coordinator leads an
//!   epoch, and [`Group::leading`] reports an epoch only once the leader's own first entry of
//!   that term is committed, so the leader has applied every decision any earlier leader had
//!   committed;
//! - a [`Decision`] takes effect in [`Group::membership`] only once committed by a majority:
//!   a coordinator cut off from the majority can propose but never decide;
//! - what must survive a crash — the raft term and vote and the log's entries — is handed out
//!   as a [`GroupState`] with every [`GroupReady`] that changed it; the caller stores it
//!   before it sends that ready's messages (raft's contract), and [`Group::restore`] rebuilds
//!   the group (its membership replayed from the log) from it. The commit index rides along
//!   with the next such store (a change of it alone asks for none: what is committed is
//!   durable on a majority, and a restarted member learns the index again);
//! - a malformed or misaddressed message, or one whose sender is not the authenticated peer
//!   it came from, is refused with a [`GroupError`] and changes nothing;
//! - no clock and no hidden randomness: time comes in as `now_us`, and each member's
//!   election timeout is fixed from its configuration (`election_ticks` plus a per-member
//!   offset the caller draws from its seed), so a simulation replays exactly. raft-rs draws
//!   the timeout from the range `[min, max)`; a range one tick wide makes the draw constant.

use std::collections::BTreeMap;

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, EntryType, HardState, Message, MessageType};
use raft::storage::MemStorage;
use raft::{RawNode, StateRole};
use serde::{Deserialize, Serialize};
use wire::messages::{CoordinatorId, NodeId, PartitionId};

/// A leader's epoch: its raft term.
pub type Epoch = u64;

/// A partition's membership as the group decided it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionView {
    pub partition: PartitionId,
    /// The live replicas; in the passive modes the primary first.
    pub replicas: Vec<NodeId>,
    pub state: ViewState,
}

/// Where a partition is in its lifecycle, as far as a new leader must know it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ViewState {
    /// Its replicas are loading the initial population.
    Loading,
    Serving,
    /// No live replica; in full-stack mode `last_primary`'s write-ahead log may bring it back.
    Unavailable {
        last_primary: Option<NodeId>,
    },
    /// Stopped for good (its replicas diverged, or did not load).
    Stopped {
        reason: String,
    },
}

/// An entry of the group's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    /// These partitions' membership is now as given (partitions not named are unchanged).
    Views(Vec<PartitionView>),
}

/// The committed membership: every partition's view, with the log index that last changed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    views: BTreeMap<PartitionId, PartitionView>,
    /// The index of the last entry applied.
    applied: u64,
}

impl Membership {
    /// Every partition loading on all its configured replicas.
    pub fn initial(views: impl IntoIterator<Item = PartitionView>) -> Membership {
        Membership { views: views.into_iter().map(|v| (v.partition, v)).collect(), applied: 0 }
    }

    pub fn view(&self, partition: PartitionId) -> Option<&PartitionView> {
        self.views.get(&partition)
    }

    pub fn views(&self) -> impl Iterator<Item = &PartitionView> {
        self.views.values()
    }

    /// The index of the last entry applied.
    pub fn applied(&self) -> u64 {
        self.applied
    }

    fn apply(&mut self, index: u64, decision: &Decision) {
        match decision {
            Decision::Views(views) => {
                for v in views {
                    self.views.insert(v.partition, v.clone());
                }
            }
        }
        self.applied = index;
    }
}

/// One entry as stored: raft's entry without its protobuf wrapping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredEntry {
    pub index: u64,
    pub term: u64,
    pub data: Vec<u8>,
}

/// What a coordinator must keep across a crash: raft's hard state and log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupState {
    pub term: u64,
    /// The raft id voted for in `term` (0: none).
    pub vote: u64,
    pub commit: u64,
    pub entries: Vec<StoredEntry>,
}

impl GroupState {
    fn hard_state(&self) -> HardState {
        HardState { term: self.term, vote: self.vote, commit: self.commit, ..Default::default() }
    }

    /// Appends `entries`, replacing any stored entry at or after the first one's index (raft
    /// overwrites a conflicting suffix).
    fn append(&mut self, entries: &[Entry]) {
        let Some(first) = entries.first() else { return };
        self.entries.retain(|e| e.index < first.index);
        self.entries.extend(entries.iter().map(|e| StoredEntry {
            index: e.index,
            term: e.term,
            data: e.data.to_vec(),
        }));
    }

    /// The state's bytes, for a file.
    pub fn encode(&self) -> Vec<u8> {
        bincode::serde::encode_to_vec(self, bincode::config::standard()).expect("a group state always encodes")
    }

    /// A state from [`GroupState::encode`]'s bytes.
    pub fn decode(bytes: &[u8]) -> Result<GroupState, GroupError> {
        let (state, used) = bincode::serde::decode_from_slice(bytes, bincode::config::standard())
            .map_err(|e| GroupError::BadState(e.to_string()))?;
        if used != bytes.len() {
            return Err(GroupError::BadState(format!("{} bytes after the state", bytes.len() - used)));
        }
        let state: GroupState = state;
        for e in &state.entries {
            decode_entry(&e.data).map_err(|problem| GroupError::BadEntry { index: e.index, problem })?;
        }
        if state.entries.windows(2).any(|w| w[1].index != w[0].index + 1) {
            return Err(GroupError::BadState("the stored entries' indexes are not consecutive".into()));
        }
        Ok(state)
    }
}

/// Who leads, as this member sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leadership {
    /// This member leads `epoch`, and every earlier decision is applied here.
    Leading { epoch: Epoch },
    /// Another member leads (or none is known yet) in `epoch`.
    Following { epoch: Epoch, leader: Option<CoordinatorId> },
}

/// What the group asks of its caller after a call.
#[derive(Debug, Default)]
pub struct GroupReady {
    /// Store this (replacing what was stored) before sending `messages`.
    pub persist: Option<GroupState>,
    /// Raft messages to send, encoded.
    pub messages: Vec<(CoordinatorId, Vec<u8>)>,
    /// Decisions newly committed, in log order, with their index.
    pub decided: Vec<(u64, Decision)>,
    /// The leadership as it now stands, if it changed.
    pub leadership: Option<Leadership>,
}

impl GroupReady {
    pub fn is_empty(&self) -> bool {
        self.persist.is_none() && self.messages.is_empty() && self.decided.is_empty() && self.leadership.is_none()
    }
}

/// Why the group refused something.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    #[error("a malformed raft message from coordinator {from}: {problem}")]
    Malformed { from: CoordinatorId, problem: String },
    #[error("coordinator {from} sent a raft message claiming to come from raft id {claimed}")]
    WrongSender { from: CoordinatorId, claimed: u64 },
    #[error("a raft message for raft id {to} reached coordinator {me}")]
    WrongRecipient { me: CoordinatorId, to: u64 },
    #[error("coordinator {from} is not a member of the coordinator group")]
    NotMember { from: CoordinatorId },
    #[error("a raft message from coordinator {from} was refused: {problem}")]
    Refused { from: CoordinatorId, problem: String },
    #[error("coordinator {me} does not lead: it cannot propose")]
    NotLeader { me: CoordinatorId },
    #[error("a stored coordinator-group state does not decode: {0}")]
    BadState(String),
    #[error("a committed entry of the coordinator group's log does not decode at index {index}: {problem}")]
    BadEntry { index: u64, problem: String },
    #[error("the coordinator group cannot start: {0}")]
    Start(String),
}

/// How a member paces raft.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupTiming {
    /// One raft tick, in microseconds; the leader sends heartbeats every tick.
    pub tick_us: u64,
    /// Ticks without hearing a leader before this member stands for election (at least 3).
    pub election_ticks: usize,
    /// This member's extra ticks on top, so members' timeouts differ (drawn by the caller from
    /// its seed, or from the member's position): equal timeouts split votes again and again.
    pub election_offset_ticks: usize,
}

/// One coordinator's member of the group.
pub struct Group {
    me: CoordinatorId,
    members: Vec<CoordinatorId>,
    raw: RawNode<MemStorage>,
    timing: GroupTiming,
    next_tick_us: u64,
    state: GroupState,
    membership: Membership,
    /// Set when the state changed since the last [`Group::ready`].
    state_dirty: bool,
    /// What [`Group::leadership`] last reported through a ready.
    reported: Option<Leadership>,
    /// The term whose first own entry this member, leading, has applied.
    led_epoch: Option<Epoch>,
    decided: Vec<(u64, Decision)>,
    messages: Vec<(CoordinatorId, Vec<u8>)>,
    /// An election this member stands in because the leader's process was seen to end
    /// ([`Group::on_peer_died`]): when, and whose death.
    death_election: Option<DeathElection>,
}

/// An election planned after the leader's death was observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DeathElection {
    dead: CoordinatorId,
    at_us: u64,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("me", &self.me)
            .field("members", &self.members)
            .field("term", &self.raw.raft.term)
            .field("role", &self.raw.raft.state)
            .field("membership", &self.membership)
            .finish()
    }
}

/// An entry's decision (`None`: a leader's empty first entry of its term).
fn decode_entry(data: &[u8]) -> Result<Option<Decision>, String> {
    if data.is_empty() {
        return Ok(None);
    }
    let (decision, used) = bincode::serde::decode_from_slice::<Decision, _>(data, bincode::config::standard())
        .map_err(|e| e.to_string())?;
    if used != data.len() {
        return Err(format!("{} bytes after the decision", data.len() - used));
    }
    Ok(Some(decision))
}

fn raft_id(c: CoordinatorId) -> u64 {
    u64::from(c) + 1
}

impl Group {
    /// A member that has stored nothing yet (the cluster's first start).
    pub fn new(
        me: CoordinatorId,
        members: &[CoordinatorId],
        initial: Membership,
        timing: GroupTiming,
        now_us: u64,
    ) -> Result<Group, GroupError> {
        Group::restore(me, members, initial, timing, GroupState::default(), now_us)
    }

    /// A member restarted with the state it stored: its membership is replayed from the
    /// committed entries of its log (and from the leader's, as they arrive).
    pub fn restore(
        me: CoordinatorId,
        members: &[CoordinatorId],
        initial: Membership,
        timing: GroupTiming,
        state: GroupState,
        now_us: u64,
    ) -> Result<Group, GroupError> {
        if !members.contains(&me) {
            return Err(GroupError::Start(format!("coordinator {me} is not among the members {members:?}")));
        }
        let election = timing.election_ticks.max(3) + timing.election_offset_ticks;
        let config = raft::Config {
            id: raft_id(me),
            election_tick: timing.election_ticks.max(3),
            heartbeat_tick: 1,
            min_election_tick: election,
            max_election_tick: election + 1,
            check_quorum: true,
            pre_vote: true,
            applied: 0,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            ..Default::default()
        };
        config.validate().map_err(|e| GroupError::Start(e.to_string()))?;
        let voters: Vec<u64> = members.iter().map(|m| raft_id(*m)).collect();
        let storage = MemStorage::new_with_conf_state(ConfState::from((voters, Vec::<u64>::new())));
        {
            let mut w = storage.wl();
            let entries: Vec<Entry> = state
                .entries
                .iter()
                .map(|e| {
                    let mut entry = Entry::default();
                    entry.set_entry_type(EntryType::EntryNormal);
                    entry.index = e.index;
                    entry.term = e.term;
                    entry.data = e.data.clone().into();
                    entry
                })
                .collect();
            w.append(&entries).map_err(|e| GroupError::Start(format!("the stored log does not append: {e}")))?;
            w.set_hardstate(state.hard_state());
        }
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let mut raw = RawNode::new(&config, storage, &logger).map_err(|e| GroupError::Start(e.to_string()))?;
        // A group of one needs no election timeout to find it has a majority.
        if members.len() == 1 {
            raw.campaign().map_err(|e| GroupError::Start(e.to_string()))?;
        }
        let mut group = Group {
            me,
            members: members.to_vec(),
            raw,
            timing,
            next_tick_us: now_us.saturating_add(timing.tick_us),
            state,
            membership: initial,
            state_dirty: false,
            reported: None,
            led_epoch: None,
            decided: Vec::new(),
            messages: Vec::new(),
            death_election: None,
        };
        group.drive();
        Ok(group)
    }

    /// When [`Group::on_tick`] next has a tick to make (or an election to stand in).
    pub fn next_tick_us(&self) -> u64 {
        self.death_election.map_or(self.next_tick_us, |d| d.at_us.min(self.next_tick_us))
    }

    pub fn me(&self) -> CoordinatorId {
        self.me
    }

    /// The committed membership.
    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    /// The current raft term.
    pub fn term(&self) -> Epoch {
        self.raw.raft.term
    }

    /// The epoch this member leads, once it may act as leader (its first entry of the term
    /// committed and applied).
    pub fn leading(&self) -> Option<Epoch> {
        // The term's own first entry must be applied: an entry of an earlier term this
        // member led does not make it leader of this one. (Found by `glass sim --mode
        // active-passive --coordinator-faults --seed 882`: a leader deposed in term 1 and
        // elected in term 3 acted as leader of term 1 again until its new entry applied.)
        let term = self.raw.raft.term;
        (self.raw.raft.state == StateRole::Leader && self.led_epoch == Some(term)).then_some(term)
    }

    /// The leader this member knows of in the current term.
    pub fn leader(&self) -> Option<CoordinatorId> {
        match self.raw.raft.leader_id {
            0 => None,
            id => CoordinatorId::try_from(id - 1).ok(),
        }
    }

    fn leadership(&self) -> Leadership {
        match self.leading() {
            Some(epoch) => Leadership::Leading { epoch },
            None => Leadership::Following { epoch: self.term(), leader: self.leader() },
        }
    }

    /// Lets time pass: one raft tick per `tick_us` elapsed.
    pub fn on_tick(&mut self, now_us: u64) {
        while now_us >= self.next_tick_us {
            self.raw.tick();
            self.next_tick_us += self.timing.tick_us;
        }
        self.stand_if_due(now_us);
        self.drive();
    }

    /// Coordinator `peer`'s process ended: its liveness tether's end said so, which a network
    /// cut never does (a cut stalls a TCP connection; only the end of a process, or of its
    /// host, closes it). If `peer` is the leader this member follows, the member stands for
    /// election without waiting for the election timeout: the surviving member of the lowest
    /// id at once, each next one half a tick later if no leader has appeared by then. The
    /// election is raft's leader transfer (a `MsgTimeoutNow` as if from the dead leader): it
    /// skips the pre-vote, and voters grant it although the dead leader's lease has not run
    /// out — the lease protects a leader that is alive, and this one is not. Raft's own
    /// rules still hold: one leader per term, and only a member with every committed entry
    /// is elected. Two leaders can never both acknowledge for another reason too: the nodes
    /// refuse an older epoch once a newer leader has fenced them (docs/design.md §11).
    pub fn on_peer_died(&mut self, peer: CoordinatorId, now_us: u64) {
        let leads = self.leader() == Some(peer) && self.raw.raft.state != StateRole::Leader;
        if peer == self.me || !self.members.contains(&peer) || !leads {
            return;
        }
        let rank = self.members.iter().filter(|&&m| m != peer && m < self.me).count() as u64;
        let at_us = now_us.saturating_add(rank * (self.timing.tick_us / 2));
        self.death_election = Some(DeathElection { dead: peer, at_us });
        self.stand_if_due(now_us);
        self.drive();
    }

    /// Stands in the election [`Group::on_peer_died`] planned, if its time came and no other
    /// leader appeared, nor did this member vote for another, meanwhile.
    fn stand_if_due(&mut self, now_us: u64) {
        let Some(d) = self.death_election.filter(|d| d.at_us <= now_us) else { return };
        self.death_election = None;
        let leaderless = self.leader().is_none_or(|l| l == d.dead);
        let raft = &self.raw.raft;
        let vote_free = [0, raft_id(self.me), raft_id(d.dead)].contains(&raft.vote);
        if raft.state != StateRole::Follower || !leaderless || !vote_free {
            return;
        }
        let mut notice = Message::default();
        notice.set_msg_type(MessageType::MsgTimeoutNow);
        notice.from = raft_id(d.dead);
        notice.to = raft_id(self.me);
        notice.term = raft.term;
        // Refused only by a member that cannot be elected, which every member here can.
        let _ = self.raw.step(notice);
    }

    /// A raft message from coordinator `from` (the network code authenticated it).
    pub fn on_message(&mut self, from: CoordinatorId, bytes: &[u8]) -> Result<(), GroupError> {
        if !self.members.contains(&from) || from == self.me {
            return Err(GroupError::NotMember { from });
        }
        let msg =
            Message::parse_from_bytes(bytes).map_err(|e| GroupError::Malformed { from, problem: e.to_string() })?;
        if msg.from != raft_id(from) {
            return Err(GroupError::WrongSender { from, claimed: msg.from });
        }
        if msg.to != raft_id(self.me) {
            return Err(GroupError::WrongRecipient { me: self.me, to: msg.to });
        }
        // Only the messages members exchange; proposals are made by the leader itself, and
        // snapshots are never sent (the log is never compacted).
        let allowed = matches!(
            msg.get_msg_type(),
            MessageType::MsgAppend
                | MessageType::MsgAppendResponse
                | MessageType::MsgRequestVote
                | MessageType::MsgRequestVoteResponse
                | MessageType::MsgRequestPreVote
                | MessageType::MsgRequestPreVoteResponse
                | MessageType::MsgHeartbeat
                | MessageType::MsgHeartbeatResponse
                | MessageType::MsgTimeoutNow
        );
        if !allowed {
            return Err(GroupError::Refused { from, problem: format!("message type {:?}", msg.get_msg_type()) });
        }
        for e in msg.get_entries() {
            if e.get_entry_type() != EntryType::EntryNormal {
                return Err(GroupError::Refused { from, problem: "a configuration-change entry".into() });
            }
            if let Err(problem) = decode_entry(&e.data) {
                return Err(GroupError::Refused { from, problem: format!("entry {}: {problem}", e.index) });
            }
        }
        self.raw.step(msg).map_err(|e| GroupError::Refused { from, problem: e.to_string() })?;
        self.drive();
        Ok(())
    }

    /// Proposes `decision`; it takes effect once committed (it may not be, if leadership is
    /// lost first). Returns the index it will have if committed.
    pub fn propose(&mut self, decision: &Decision) -> Result<u64, GroupError> {
        if self.leading().is_none() {
            return Err(GroupError::NotLeader { me: self.me });
        }
        let data =
            bincode::serde::encode_to_vec(decision, bincode::config::standard()).expect("a decision always encodes");
        self.raw.propose(Vec::new(), data).map_err(|_| GroupError::NotLeader { me: self.me })?;
        let index = self.raw.raft.raft_log.last_index();
        self.drive();
        Ok(index)
    }

    /// What the caller must do: store, send, apply. Drains it.
    pub fn ready(&mut self) -> GroupReady {
        let mut ready = GroupReady {
            persist: self.state_dirty.then(|| self.state.clone()),
            messages: std::mem::take(&mut self.messages),
            decided: std::mem::take(&mut self.decided),
            leadership: None,
        };
        self.state_dirty = false;
        let now = self.leadership();
        if self.reported != Some(now) {
            self.reported = Some(now);
            ready.leadership = Some(now);
        }
        ready
    }

    /// Runs raft's ready loop to quiescence: stores entries and hard state (in memory and in
    /// the [`GroupState`] handed out), queues messages, applies committed entries.
    fn drive(&mut self) {
        while self.raw.has_ready() {
            let mut rd = self.raw.ready();
            self.queue_messages(rd.take_messages());
            self.apply(rd.take_committed_entries());
            if !rd.entries().is_empty() {
                let entries = rd.entries().clone();
                self.raw.mut_store().wl().append(&entries).expect("raft appends in order");
                self.state.append(&entries);
                self.state_dirty = true;
            }
            if let Some(hs) = rd.hs() {
                self.raw.mut_store().wl().set_hardstate(hs.clone());
                // A new commit index alone is not worth a store before anything may go on: a
                // committed entry is durable on a majority already, and a member restarted
                // with an older commit index learns the newer one from the leader (or commits
                // its log with its own first entry, if it leads). Term and vote are stored
                // before any message that depends on them. The index goes out with the next
                // store.
                if (hs.term, hs.vote) != (self.state.term, self.state.vote) {
                    self.state_dirty = true;
                }
                self.state.term = hs.term;
                self.state.vote = hs.vote;
                self.state.commit = hs.commit;
            }
            self.queue_messages(rd.take_persisted_messages());
            let mut light = self.raw.advance(rd);
            if let Some(commit) = light.commit_index() {
                self.raw.mut_store().wl().mut_hard_state().set_commit(commit);
                self.state.commit = commit;
            }
            self.queue_messages(light.take_messages());
            self.apply(light.take_committed_entries());
            self.raw.advance_apply();
        }
    }

    fn queue_messages(&mut self, messages: Vec<Message>) {
        for m in messages {
            let Some(to) = m.to.checked_sub(1).and_then(|c| CoordinatorId::try_from(c).ok()) else { continue };
            let bytes = m.write_to_bytes().expect("a raft message always encodes");
            self.messages.push((to, bytes));
        }
    }

    fn apply(&mut self, entries: Vec<Entry>) {
        for e in entries {
            if e.data.is_empty() {
                // A leader's first entry of its term.
                if self.raw.raft.state == StateRole::Leader && e.term == self.raw.raft.term {
                    self.led_epoch = Some(e.term);
                }
                self.membership.applied = e.index;
                continue;
            }
            // Every entry was checked when it arrived (`on_message`) or was restored
            // (`GroupState::decode`), or was proposed here.
            let decision = decode_entry(&e.data).expect("entries are checked on arrival").expect("not empty");
            self.membership.apply(e.index, &decision);
            self.decided.push((e.index, decision));
        }
    }
}
