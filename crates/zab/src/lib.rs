//! Zab, ZooKeeper's atomic broadcast, as a sans-IO core (zab.md §1–2 and the Zab paper).
//!
//! Phases, each in one named function (docs/protocols/zab.md maps them to the papers):
//!
//! * **Election** (fast leader election): [`Zab::become_looking`], [`Zab::on_notification`],
//!   [`Zab::decide`]. Votes are ⟨current epoch, last zxid, id⟩.
//! * **Discovery**: [`Zab::on_follower_info`] (leader collects FOLLOWERINFO and picks the new
//!   epoch), [`Zab::on_new_epoch`] (follower accepts it durably, ACKEPOCH).
//! * **Synchronisation**: [`Zab::on_ack_epoch`] → [`Zab::sync_follower`] / [`Zab::plan_sync`]
//!   (DIFF, TRUNC or SNAP), [`Zab::on_sync`], [`Zab::on_entries`], [`Zab::on_new_leader`]
//!   (follower makes current epoch durable, ACKNEWLEADER), [`Zab::on_ack_new_leader`] and
//!   [`Zab::establish`] (quorum: the history is committed), [`Zab::on_up_to_date`].
//! * **Broadcast**: [`Zab::propose`] (L1), [`Zab::on_proposal`] + [`Zab::on_durable`] (F1: log,
//!   then ack), [`Zab::on_ack`] + [`Zab::advance_commit`] (L2: quorum → commit), [`Zab::on_commit`]
//!   (F2) and [`Zab::deliver`] (L3/F2: abdeliver in order).
//! * **Failure detection**: [`Zab::on_tick`] (heartbeats, SC1 leader silence, SC2 lost quorum).

pub mod codec;
pub mod coin;
pub mod log;
pub mod msg;
pub mod variant;

use crate::log::Log;
pub use crate::msg::{Entry, Hard, LogSummary, Msg, PeerState, Point, SyncMode, Vote, Zxid};
pub use crate::variant::Variant;
use std::collections::{BTreeMap, VecDeque};
use synod_core::{
    quorum, rng::CoreRng, Actions, Apply, Cluster, Command, Dest, DurableState, Envelope, Event,
    Input, NodeId, Protocol, Reject, Role, Snapshot, TimeUs,
};

pub type ZabActions = Actions<Msg, Entry, Hard>;

/// Deliberately broken behaviours, used only by tests to prove that the simulator's checkers
/// catch unsafe protocols. Never set in production.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// The leader commits on its own ack alone.
    CommitOnOwnAck,
    /// Followers ack a proposal as soon as it arrives, before it is durable.
    AckBeforeDurable,
    /// Elections ignore the log (votes compare ids only) and the leader never abdicates to a
    /// follower with a longer history: a new leader may lack committed proposals.
    ElectAnyone,
    /// Followers forward every client command twice.
    ForwardTwice,
}

#[derive(Clone, Debug)]
pub struct Options {
    /// How often the driver must tick.
    pub tick_us: TimeUs,
    /// Leader → follower heartbeat interval.
    pub heartbeat_us: TimeUs,
    /// A follower that hears nothing from its leader for this long starts an election (SC1).
    pub follower_timeout_us: TimeUs,
    /// A leader that has not heard from a quorum for this long steps down (SC2).
    pub leader_timeout_us: TimeUs,
    /// A leader that is not established after this long gives up and elects again.
    pub discovery_timeout_us: TimeUs,
    /// First resend interval of election notifications (doubles up to the max).
    pub election_resend_us: TimeUs,
    pub election_resend_max_us: TimeUs,
    /// Once a vote has a quorum, wait this long for a better vote before deciding.
    pub finalize_wait_us: TimeUs,
    /// Log entries kept behind a snapshot, so that slightly lagging followers get a diff.
    pub log_retain: u64,
    /// Commands queued at a leader that is not yet established.
    pub max_queued: usize,
    /// Proposals an established leader keeps in flight (logged, not yet committed); beyond it
    /// new commands are refused (`Reject::Busy`), so a slow quorum pushes back on clients.
    pub max_inflight: u64,
    /// Entries per synchronisation message.
    pub sync_batch: usize,
    /// Epochs a log summary may carry before the leader must send a snapshot instead.
    pub max_summary_epochs: usize,
    /// The broadcast-phase variant (see [`variant`]).
    pub variant: Variant,
    /// Enforce A1.1 for the restricted variants (a recovered leader stays out until its
    /// successor is installed). Only the simulator's demonstration of the hazard turns it off.
    pub enforce_a11: bool,
    /// Enforced coin tossing (F4, timer D): a follower with unacknowledged proposals tosses
    /// again after this long.
    pub enforced_toss_us: TimeUs,
    /// A follower whose logged proposals stay uncommitted this long acks them explicitly to
    /// everyone (the deterministic fallback of zab.md §10 item 8, in place of timer(C_m)).
    pub ack_timeout_us: TimeUs,
    /// Switching variants (zab.md §6), timer C_m: a follower whose logged proposals stay
    /// uncommitted this long votes for Zab.
    pub switch_after_us: TimeUs,
    /// A follower running Zab votes to return to the variant once every follower has been
    /// present this long.
    pub switch_back_after_us: TimeUs,
    /// ZabCT (`Variant::Ct`): compute p every second from the measured λ and d with
    /// Algorithm 1 (ZabCT_u: p = P₂ when feasible; infeasible → vote Zab). Off: p = 1/n − δ.
    pub adaptive_coin: bool,
    pub bug: Option<Bug>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            tick_us: 10_000,
            heartbeat_us: 50_000,
            follower_timeout_us: 400_000,
            leader_timeout_us: 400_000,
            discovery_timeout_us: 1_000_000,
            election_resend_us: 50_000,
            election_resend_max_us: 800_000,
            finalize_wait_us: 20_000,
            log_retain: 1_000,
            max_queued: 10_000,
            max_inflight: 50_000,
            sync_batch: 256,
            max_summary_epochs: 4_096,
            variant: Variant::Zab,
            enforce_a11: true,
            enforced_toss_us: 20_000,
            ack_timeout_us: 100_000,
            switch_after_us: 300_000,
            switch_back_after_us: 1_000_000,
            adaptive_coin: true,
            bug: None,
        }
    }
}

#[derive(Debug)]
struct Election {
    vote: Vote,
    /// Votes of LOOKING peers in our round (ourselves included).
    recv: BTreeMap<NodeId, Vote>,
    /// Which leader FOLLOWING/LEADING peers report, and whether the sender is that leader.
    settled: BTreeMap<NodeId, (NodeId, bool)>,
    next_send: TimeUs,
    resend_us: TimeUs,
    decide_at: Option<TimeUs>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum FStage {
    /// FOLLOWERINFO sent, waiting for NEWEPOCH.
    Info,
    /// ACKEPOCH sent, waiting for the sync.
    AwaitSync,
    /// Receiving the leader's log.
    Syncing,
    /// ACKNEWLEADER sent; logs equal the leader's; acks and commits flow.
    Synced,
    /// UPTODATE received: serving.
    Broadcast,
}

#[derive(Debug)]
struct Follower {
    leader: NodeId,
    epoch: u32,
    stage: FStage,
    last_heard: TimeUs,
    next_info: TimeUs,
    commit: Point,
    acked: Zxid,
    /// Variants: the highest zxid each other follower acked in this epoch (cumulative).
    peer_acks: BTreeMap<NodeId, Zxid>,
    /// Variants: when the oldest logged but uncommitted proposal became durable here, and when
    /// the coin was last tossed for it.
    uncommitted_since: Option<TimeUs>,
    last_toss: TimeUs,
    /// Switching: the leader runs Zab (we wait for its commits and ack it alone).
    zab_mode: bool,
    /// Our vote, carried by every ack (the prot field).
    wants_zab: bool,
    /// Since when the leader's heartbeats say every follower is present.
    full_since: Option<TimeUs>,
    /// When the deterministic fallback last acked (rate limit).
    last_forced: TimeUs,
    /// ZabCT's adaptive coin: the current p, the proposals counted in the current one-second
    /// window (λ), the smoothed one-way delay d, and how many computations in a row succeeded.
    coin: Coin,
}

#[derive(Debug)]
struct Coin {
    p: f64,
    window_start: TimeUs,
    proposals: u64,
    d_us: f64,
    feasible_streak: u32,
    infeasible: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LStage {
    /// Collecting FOLLOWERINFO from a quorum.
    Discovery,
    /// NEWEPOCH sent, collecting ACKEPOCH from a quorum.
    AwaitAckEpoch,
    /// Followers synchronised, collecting ACKNEWLEADER from a quorum.
    AwaitNewLeaderAcks,
    /// Established: broadcasting.
    Broadcast,
}

#[derive(Debug)]
struct Peer {
    /// ACKNEWLEADER received.
    synced: bool,
    /// Highest zxid of this epoch the follower has durably logged (cumulative).
    ack: Zxid,
    /// The leader's last point when the sync was sent (ACKNEWLEADER acknowledges it).
    sync_last: Point,
    last_heard: TimeUs,
    /// The peer's last vote on the broadcast mode (true = Zab).
    zab_vote: bool,
    /// The last ack stamp from the peer and when it arrived, echoed in the next proposal.
    echo: (u64, TimeUs),
}

#[derive(Debug)]
struct Leader {
    epoch: u32,
    stage: LStage,
    started: TimeUs,
    infos: BTreeMap<NodeId, u32>,
    ack_epochs: BTreeMap<NodeId, LogSummary>,
    peers: BTreeMap<NodeId, Peer>,
    /// Seq of the hard-state write of `accepted_epoch = epoch`; NEWEPOCH waits for it.
    epoch_seq: u64,
    /// Seq of the hard-state write of `current_epoch = epoch`; our own ack counts after it.
    ready_seq: u64,
    commit: Point,
    next_counter: u32,
    next_ping: TimeUs,
    queued: VecDeque<Command>,
    /// ⟨current epoch, last zxid⟩ when elected.
    elected_with: (u32, Zxid),
    /// Switching variants: the epoch currently runs Zab (commit messages, unicast acks).
    zab_mode: bool,
}

#[derive(Debug)]
enum Phase {
    Looking(Election),
    Following(Follower),
    Leading(Leader),
}

pub struct Zab {
    cluster: Cluster,
    opts: Options,
    rng: CoreRng,
    now: TimeUs,
    log: Log,
    /// Highest slot handed to the state machine.
    applied: u64,
    round: u64,
    phase: Phase,
    /// A1.1 (restricted variants): this replica led epoch e, crashed and restarted; it stays out
    /// of elections until a leader of a later epoch exists.
    suspended_until_above: Option<u32>,
}

impl Protocol for Zab {
    type Options = Options;
    type Message = Msg;
    type Record = Entry;
    type Hard = Hard;

    fn restore(
        cluster: Cluster,
        options: Options,
        durable: DurableState<Entry, Hard>,
        seed: u64,
    ) -> Self {
        let applied = durable.snapshot.as_ref().map_or(0, |s| s.at.slot);
        let hard = durable.hard;
        let suspended_until_above = (options.variant.restricted()
            && options.enforce_a11
            && hard.led_epoch > 0
            && hard.led_epoch >= hard.current_epoch)
            .then_some(hard.led_epoch);
        let log = Log::restore(durable);
        assert!(
            log.base().slot <= applied,
            "the log base is never past the snapshot"
        );
        let mut zab = Zab {
            cluster,
            opts: options,
            rng: CoreRng::new(seed),
            now: 0,
            log,
            applied,
            round: 0,
            suspended_until_above,
            phase: Phase::Looking(Election {
                vote: Vote::default(),
                recv: BTreeMap::new(),
                settled: BTreeMap::new(),
                next_send: 0,
                resend_us: 0,
                decide_at: None,
            }),
        };
        zab.reset_election();
        zab
    }

    fn step(&mut self, input: Input<Msg>, out: &mut ZabActions) {
        match input {
            Input::Submit(c) => self.on_submit(c, out),
            Input::Message { from, msg } => self.on_message(from, msg, out),
            Input::Tick { now_us } => {
                self.now = self.now.max(now_us);
                self.on_tick(out);
            }
            Input::Durable { upto } => self.on_durable(upto, out),
            Input::Disconnected { peer } => self.on_disconnected(peer, out),
            Input::Compact(s) => self.on_compact(s, out),
        }
    }

    fn role(&self) -> Role {
        match &self.phase {
            Phase::Leading(l) if l.stage == LStage::Broadcast => Role::Leading,
            Phase::Following(f) if f.stage == FStage::Broadcast => Role::Following,
            _ => Role::Electing,
        }
    }

    fn tick_us(&self) -> TimeUs {
        self.opts.tick_us
    }

    /// A ZabCT follower reports its coin probability, or that the epoch runs Zab.
    fn gauges(&self) -> Vec<(&'static str, f64)> {
        match &self.phase {
            Phase::Following(f)
                if self.opts.variant.coin(self.cluster.size()).is_some()
                    && f.stage >= FStage::Synced =>
            {
                if f.zab_mode {
                    vec![("zab_mode", 1.0)]
                } else {
                    vec![("coin_p", f.coin.p)]
                }
            }
            _ => Vec::new(),
        }
    }
}

impl Zab {
    pub fn id(&self) -> NodeId {
        self.cluster.me
    }
    pub fn last(&self) -> Point {
        self.log.last()
    }
    pub fn applied(&self) -> u64 {
        self.applied
    }
    pub fn hard(&self) -> Hard {
        self.log.hard()
    }
    /// The established leader this replica serves with, if any.
    pub fn leader(&self) -> Option<NodeId> {
        match &self.phase {
            Phase::Leading(l) if l.stage == LStage::Broadcast => Some(self.cluster.me),
            Phase::Following(f) if f.stage == FStage::Broadcast => Some(f.leader),
            _ => None,
        }
    }

    fn send(&self, out: &mut ZabActions, to: NodeId, msg: Msg) {
        self.send_after(out, to, msg, 0);
    }
    fn send_after(&self, out: &mut ZabActions, to: NodeId, msg: Msg, after_durable: u64) {
        debug_assert_ne!(to, self.cluster.me);
        out.send.push(Envelope {
            to: Dest::One(to),
            msg,
            after_durable,
        });
    }

    fn quorum(&self) -> usize {
        self.cluster.quorum()
    }

    // ---------------------------------------------------------------- election (FLE)

    fn my_vote(&self) -> Vote {
        if self.opts.bug == Some(Bug::ElectAnyone) {
            return Vote {
                epoch: 0,
                zxid: Zxid::ZERO,
                leader: self.cluster.me,
            };
        }
        Vote {
            epoch: self.log.hard().current_epoch,
            zxid: self.log.last().zxid,
            leader: self.cluster.me,
        }
    }

    fn reset_election(&mut self) {
        self.round += 1;
        let vote = self.my_vote();
        let mut recv = BTreeMap::new();
        recv.insert(self.cluster.me, vote);
        self.phase = Phase::Looking(Election {
            vote,
            recv,
            settled: BTreeMap::new(),
            next_send: self.now,
            resend_us: self.opts.election_resend_us,
            decide_at: None,
        });
    }

    /// SC1/SC2, a failed discovery or an inconsistency: go back to election (LOOKING).
    fn become_looking(&mut self, out: &mut ZabActions) {
        self.reset_election();
        out.events.push(Event::Role {
            role: Role::Electing,
            leader: None,
            epoch: self.log.hard().current_epoch as u64,
        });
        self.broadcast_vote(out);
    }

    fn broadcast_vote(&mut self, out: &mut ZabActions) {
        let suspended = self.suspended_until_above.is_some();
        let Phase::Looking(el) = &mut self.phase else {
            return;
        };
        let vote = if suspended {
            // A1.1: a recovered leader neither votes nor stands. It still announces itself with
            // an abstaining vote (for no one, lower than any real vote) so that settled peers
            // tell it who leads, and it joins a leader of a later epoch.
            Vote::default()
        } else {
            el.vote
        };
        el.next_send = self.now + el.resend_us;
        el.resend_us = (el.resend_us * 2).min(self.opts.election_resend_max_us);
        let msg = Msg::Notification {
            round: self.round,
            vote,
            state: PeerState::Looking,
        };
        out.send.push(Envelope {
            to: Dest::All,
            msg,
            after_durable: 0,
        });
    }

    /// The vote a settled (following or leading) replica reports to a LOOKING peer.
    fn settled_notification(&self) -> Option<Msg> {
        let (leader, state) = match &self.phase {
            Phase::Following(f) => (f.leader, PeerState::Following),
            Phase::Leading(_) => (self.cluster.me, PeerState::Leading),
            Phase::Looking(_) => return None,
        };
        Some(Msg::Notification {
            round: self.round,
            vote: Vote {
                epoch: self.log.hard().current_epoch,
                zxid: self.log.last().zxid,
                leader,
            },
            state,
        })
    }

    fn on_notification(
        &mut self,
        from: NodeId,
        round: u64,
        vote: Vote,
        state: PeerState,
        out: &mut ZabActions,
    ) {
        if !matches!(self.phase, Phase::Looking(_)) {
            // Tell a LOOKING peer whom we follow, so it can join without a new election.
            if state == PeerState::Looking {
                if let Some(n) = self.settled_notification() {
                    self.send(out, from, n);
                }
            }
            return;
        }
        if self.suspended_until_above.is_some_and(|e| vote.epoch > e) {
            // A1.1: a vote naming a later epoch proves our successor was installed; rejoin.
            self.suspended_until_above = None;
            if let Phase::Looking(el) = &mut self.phase {
                el.vote = Vote {
                    epoch: self.log.hard().current_epoch,
                    zxid: self.log.last().zxid,
                    leader: self.cluster.me,
                };
                el.recv.insert(self.cluster.me, el.vote);
            }
        }
        let me = self.cluster.me;
        let quorum = self.quorum();
        let my_initial = self.my_vote();
        let mut rebroadcast = false;
        let mut reply = false;
        let mut join = None;
        {
            let Phase::Looking(el) = &mut self.phase else {
                unreachable!()
            };
            match state {
                PeerState::Looking if self.suspended_until_above.is_some() => {}
                // An abstaining vote (a suspended replica, A1.1) is neither adopted nor counted.
                PeerState::Looking if vote.leader == 0 => {}
                PeerState::Looking => {
                    if round > self.round {
                        self.round = round;
                        el.recv.clear();
                        el.vote = my_initial.max(vote);
                        el.recv.insert(me, el.vote);
                        el.decide_at = None;
                        rebroadcast = true;
                    } else if round < self.round {
                        reply = true;
                    } else if vote > el.vote {
                        el.vote = vote;
                        el.recv.insert(me, vote);
                        el.decide_at = None;
                        rebroadcast = true;
                    }
                    if round == self.round {
                        el.recv.insert(from, vote);
                        let agree = el.recv.values().filter(|v| **v == el.vote).count();
                        if agree >= quorum {
                            if el.decide_at.is_none() {
                                el.decide_at = Some(self.now + self.opts.finalize_wait_us);
                            }
                        } else {
                            el.decide_at = None;
                        }
                    }
                }
                PeerState::Following | PeerState::Leading => {
                    el.settled
                        .insert(from, (vote.leader, state == PeerState::Leading));
                    let leader = vote.leader;
                    let leader_says_so = el.settled.get(&leader) == Some(&(leader, true));
                    let support = el.settled.values().filter(|(l, _)| *l == leader).count() + 1;
                    let late_enough = self.suspended_until_above.is_none_or(|e| vote.epoch > e);
                    if leader != me && leader_says_so && support >= quorum && late_enough {
                        join = Some(leader);
                    }
                }
            }
        }
        if let Some(leader) = join {
            self.suspended_until_above = None;
            self.start_following(leader, out);
            return;
        }
        if rebroadcast {
            if let Phase::Looking(el) = &mut self.phase {
                el.resend_us = self.opts.election_resend_us;
            }
            self.broadcast_vote(out);
        } else if reply {
            if let Phase::Looking(el) = &self.phase {
                let msg = Msg::Notification {
                    round: self.round,
                    vote: el.vote,
                    state: PeerState::Looking,
                };
                self.send(out, from, msg);
            }
        }
    }

    /// The vote has held a quorum for the finalize wait: follow or lead.
    fn decide(&mut self, out: &mut ZabActions) {
        let Phase::Looking(el) = &self.phase else {
            return;
        };
        let leader = el.vote.leader;
        if leader == self.cluster.me {
            self.start_leading(out);
        } else {
            self.start_following(leader, out);
        }
    }

    // ---------------------------------------------------------------- discovery

    fn start_following(&mut self, leader: NodeId, out: &mut ZabActions) {
        self.phase = Phase::Following(Follower {
            leader,
            epoch: 0,
            stage: FStage::Info,
            last_heard: self.now,
            next_info: self.now + self.opts.heartbeat_us,
            commit: Point::default(),
            acked: Zxid::ZERO,
            peer_acks: BTreeMap::new(),
            uncommitted_since: None,
            last_toss: self.now,
            zab_mode: false,
            wants_zab: false,
            full_since: None,
            last_forced: self.now,
            coin: Coin {
                p: self.opts.variant.coin(self.cluster.size()).unwrap_or(1.0),
                window_start: self.now,
                proposals: 0,
                d_us: 0.0,
                feasible_streak: 0,
                infeasible: false,
            },
        });
        self.send_follower_info(leader, out);
    }

    fn send_follower_info(&self, leader: NodeId, out: &mut ZabActions) {
        let hard = self.log.hard();
        let msg = Msg::FollowerInfo {
            accepted_epoch: hard.accepted_epoch,
            accepted_leader: hard.accepted_leader,
        };
        self.send(out, leader, msg);
    }

    fn start_leading(&mut self, out: &mut ZabActions) {
        let mut infos = BTreeMap::new();
        infos.insert(self.cluster.me, self.log.hard().accepted_epoch);
        self.phase = Phase::Leading(Leader {
            epoch: 0,
            stage: LStage::Discovery,
            started: self.now,
            infos,
            ack_epochs: BTreeMap::new(),
            peers: BTreeMap::new(),
            epoch_seq: 0,
            ready_seq: 0,
            commit: Point::default(),
            next_counter: 1,
            next_ping: self.now,
            queued: VecDeque::new(),
            elected_with: (self.log.hard().current_epoch, self.log.last().zxid),
            zab_mode: false,
        });
        self.try_new_epoch(out);
    }

    /// Leader, discovery: FOLLOWERINFO from a prospective follower.
    fn on_follower_info(
        &mut self,
        from: NodeId,
        accepted_epoch: u32,
        accepted_leader: NodeId,
        out: &mut ZabActions,
    ) {
        let me = self.cluster.me;
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        if l.stage != LStage::Discovery
            && (accepted_epoch > l.epoch || (accepted_epoch == l.epoch && accepted_leader != me))
        {
            // It accepted our epoch number from another candidate, so it will (rightly) never
            // ack ours: a replica acks one leader per epoch. Step down so that the next
            // election picks an epoch above it, rather than leave it out for good.
            self.become_looking(out);
            return;
        }
        // A follower that reconnects starts over.
        l.peers.remove(&from);
        l.ack_epochs.remove(&from);
        l.infos.insert(from, accepted_epoch);
        if l.stage == LStage::Discovery {
            self.try_new_epoch(out);
        } else {
            let (epoch, seq) = (l.epoch, l.epoch_seq);
            self.send_after(out, from, Msg::NewEpoch { epoch }, seq);
        }
    }

    /// With FOLLOWERINFO from a quorum, pick an epoch above every accepted epoch and propose it.
    fn try_new_epoch(&mut self, out: &mut ZabActions) {
        let quorum = self.quorum();
        let me = self.cluster.me;
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        if l.stage != LStage::Discovery || l.infos.len() < quorum {
            return;
        }
        let epoch = l.infos.values().copied().max().unwrap_or(0) + 1;
        l.epoch = epoch;
        l.stage = LStage::AwaitAckEpoch;
        let followers: Vec<NodeId> = l.infos.keys().copied().filter(|&p| p != me).collect();
        let hard = Hard {
            accepted_epoch: epoch,
            accepted_leader: me,
            ..self.log.hard()
        };
        let seq = self.log.set_hard(hard, &mut out.persist);
        if let Phase::Leading(l) = &mut self.phase {
            l.epoch_seq = seq;
        }
        for p in followers {
            self.send_after(out, p, Msg::NewEpoch { epoch }, seq);
        }
        self.try_start_sync(out);
    }

    /// Follower, discovery: accept the new epoch durably, then ACKEPOCH with our log summary.
    fn on_new_epoch(&mut self, from: NodeId, epoch: u32, out: &mut ZabActions) {
        let Phase::Following(f) = &mut self.phase else {
            return;
        };
        if from != f.leader || f.stage != FStage::Info {
            return;
        }
        let hard = self.log.hard();
        let ok = epoch > hard.accepted_epoch
            || (epoch == hard.accepted_epoch && hard.accepted_leader == from);
        if !ok {
            self.become_looking(out);
            return;
        }
        f.epoch = epoch;
        f.stage = FStage::AwaitSync;
        f.last_heard = self.now;
        let seq = if epoch > hard.accepted_epoch {
            let h = Hard {
                accepted_epoch: epoch,
                accepted_leader: from,
                ..hard
            };
            self.log.set_hard(h, &mut out.persist)
        } else {
            self.log.hard_seq()
        };
        let msg = Msg::AckEpoch {
            epoch,
            current_epoch: hard.current_epoch,
            summary: self.log.summary(self.opts.max_summary_epochs),
        };
        self.send_after(out, from, msg, seq);
    }

    /// Leader: ACKEPOCH. Abdicate if the follower is ahead of us; otherwise synchronise it once
    /// a quorum has acknowledged the epoch.
    fn on_ack_epoch(
        &mut self,
        from: NodeId,
        epoch: u32,
        current_epoch: u32,
        summary: LogSummary,
        out: &mut ZabActions,
    ) {
        let bug = self.opts.bug;
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        if epoch != l.epoch || !l.infos.contains_key(&from) {
            return;
        }
        // Discovery only (as ZooKeeper does): a follower of the electing quorum that is ahead of
        // the state we were elected with means the election went wrong; let it lead instead.
        // A late joiner may legitimately carry an uncommitted tail, which the sync truncates.
        if l.stage == LStage::AwaitAckEpoch
            && (current_epoch, summary.last()) > l.elected_with
            && bug != Some(Bug::ElectAnyone)
        {
            // The election should have preferred that follower; let it lead.
            self.become_looking(out);
            return;
        }
        match l.stage {
            LStage::Discovery => {}
            LStage::AwaitAckEpoch => {
                l.ack_epochs.insert(from, summary);
                self.try_start_sync(out);
            }
            LStage::AwaitNewLeaderAcks | LStage::Broadcast => {
                self.sync_follower(from, &summary, out)
            }
        }
    }

    fn try_start_sync(&mut self, out: &mut ZabActions) {
        let quorum = self.quorum();
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        if l.stage != LStage::AwaitAckEpoch || l.ack_epochs.len() + 1 < quorum {
            return;
        }
        l.stage = LStage::AwaitNewLeaderAcks;
        let epoch = l.epoch;
        let acked = std::mem::take(&mut l.ack_epochs);
        let hard = Hard {
            current_epoch: epoch,
            led_epoch: epoch,
            ..self.log.hard()
        };
        let seq = self.log.set_hard(hard, &mut out.persist);
        if let Phase::Leading(l) = &mut self.phase {
            l.ready_seq = seq;
        }
        for (p, summary) in acked {
            self.sync_follower(p, &summary, out);
        }
        self.try_establish(out);
    }

    // ---------------------------------------------------------------- synchronisation

    /// Find where the follower's log leaves ours and choose DIFF, TRUNC or SNAP (zab.md §2.5).
    ///
    /// Log matching: an entry's zxid names the leader that proposed it, and that leader's log
    /// before it, so two logs with the same zxid at the same slot are identical up to it. The
    /// longest common prefix is found by binary search over slots both logs still hold.
    pub fn plan_sync(&self, s: &LogSummary) -> SyncMode {
        let snap = || match self.log.snapshot() {
            Some(snap) => SyncMode::Snap(snap.clone()),
            // Nothing was ever compacted: a full diff from the start works.
            None => SyncMode::Trunc {
                to: Point::default(),
            },
        };
        if s.overflow {
            return snap();
        }
        let ours = |slot: u64| -> Option<Zxid> {
            if slot == self.log.base().slot {
                Some(self.log.base().zxid)
            } else {
                self.log.get(slot).map(|e| e.zxid)
            }
        };
        let matches = |slot: u64| ours(slot).is_some() && ours(slot) == s.zxid_at(slot);
        let lo = s.base.slot.max(self.log.base().slot);
        let hi = s.last_slot().min(self.log.last().slot);
        if lo > hi || !matches(lo) {
            // The follower is behind our log's start, or differs from it there.
            return snap();
        }
        // Invariant: matches(lo); find the largest matching slot in [lo, hi].
        let (mut lo, mut hi) = (lo, hi);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if matches(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let c = Point {
            zxid: ours(lo).expect("matched"),
            slot: lo,
        };
        if s.last_slot() == c.slot {
            SyncMode::Diff { from: c }
        } else {
            SyncMode::Trunc { to: c }
        }
    }

    /// Leader: send the follower what it needs to hold our log, then NEWLEADER. From here on the
    /// follower receives every new proposal and commit, in order after its sync.
    fn sync_follower(&mut self, to: NodeId, summary: &LogSummary, out: &mut ZabActions) {
        let Phase::Leading(l) = &self.phase else {
            return;
        };
        let epoch = l.epoch;
        let mode = self.plan_sync(summary);
        let from = match &mode {
            SyncMode::Diff { from } => from.slot,
            SyncMode::Trunc { to } => to.slot,
            SyncMode::Snap(s) => s.at.slot,
        };
        let last = self.log.last();
        self.send(out, to, Msg::Sync { epoch, mode });
        let mut batch = Vec::new();
        for e in self.log.range(from, last.slot) {
            batch.push(e.clone());
            if batch.len() == self.opts.sync_batch {
                let entries = std::mem::take(&mut batch);
                self.send(out, to, Msg::Entries { epoch, entries });
            }
        }
        if !batch.is_empty() {
            self.send(
                out,
                to,
                Msg::Entries {
                    epoch,
                    entries: batch,
                },
            );
        }
        // NEWLEADER leaves once our own copy of the history is durable: a variant's follower may
        // count the leader as a logger of what it synchronised.
        let barrier = self.log.last_seq();
        self.send_after(out, to, Msg::NewLeader { epoch, last }, barrier);
        let now = self.now;
        if let Phase::Leading(l) = &mut self.phase {
            l.peers.insert(
                to,
                Peer {
                    synced: false,
                    ack: Zxid::ZERO,
                    sync_last: last,
                    last_heard: now,
                    zab_vote: false,
                    echo: (0, 0),
                },
            );
        }
    }

    fn following_leader(&mut self, from: NodeId, epoch: u32) -> Option<&mut Follower> {
        let now = self.now;
        match &mut self.phase {
            Phase::Following(f) if f.leader == from && f.epoch == epoch && epoch != 0 => {
                f.last_heard = now;
                Some(f)
            }
            _ => None,
        }
    }

    fn on_sync(&mut self, from: NodeId, epoch: u32, mode: SyncMode, out: &mut ZabActions) {
        let applied = self.applied;
        let Some(f) = self.following_leader(from, epoch) else {
            return;
        };
        if f.stage != FStage::AwaitSync {
            self.become_looking(out);
            return;
        }
        f.stage = FStage::Syncing;
        match mode {
            SyncMode::Diff { from } => {
                if self.log.last() != from {
                    self.become_looking(out);
                }
            }
            SyncMode::Trunc { to } => {
                // Never drop what was delivered: a leader asking that is not to be followed.
                if self.log.point_of(to.zxid) != Some(to) || to.slot < applied {
                    self.become_looking(out);
                    return;
                }
                if self.log.last() != to {
                    self.log.truncate_after(to, &mut out.persist);
                }
            }
            SyncMode::Snap(snapshot) => {
                if snapshot.at.slot < applied {
                    self.become_looking(out);
                    return;
                }
                self.log
                    .install_snapshot(snapshot.clone(), &mut out.persist);
                self.applied = snapshot.at.slot;
                out.apply.push(Apply::Restore(snapshot));
            }
        }
    }

    fn on_entries(&mut self, from: NodeId, epoch: u32, entries: Vec<Entry>, out: &mut ZabActions) {
        let Some(f) = self.following_leader(from, epoch) else {
            return;
        };
        if f.stage != FStage::Syncing {
            self.become_looking(out);
            return;
        }
        let mut last = self.log.last();
        for e in &entries {
            if e.slot != last.slot + 1 || e.zxid <= last.zxid {
                self.become_looking(out);
                return;
            }
            last = e.point();
        }
        self.log.append(entries, &mut out.persist);
    }

    /// Follower: our log equals the leader's; make the new epoch current, durably, then ack.
    fn on_new_leader(&mut self, from: NodeId, epoch: u32, last: Point, out: &mut ZabActions) {
        let mine = self.log.last();
        let Some(f) = self.following_leader(from, epoch) else {
            return;
        };
        if f.stage != FStage::Syncing || mine != last {
            self.become_looking(out);
            return;
        }
        f.stage = FStage::Synced;
        f.acked = last.zxid;
        let hard = Hard {
            current_epoch: epoch,
            ..self.log.hard()
        };
        let seq = self.log.set_hard(hard, &mut out.persist);
        self.send_after(out, from, Msg::AckNewLeader { epoch }, seq);
    }

    fn on_ack_new_leader(&mut self, from: NodeId, epoch: u32, out: &mut ZabActions) {
        let now = self.now;
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        if epoch != l.epoch {
            return;
        }
        let Some(p) = l.peers.get_mut(&from) else {
            return;
        };
        if p.synced {
            return;
        }
        p.synced = true;
        p.ack = p.ack.max(p.sync_last.zxid);
        p.last_heard = now;
        if l.stage == LStage::Broadcast {
            let commit = l.commit;
            self.send(out, from, Msg::UpToDate { epoch, commit });
            self.advance_commit(out);
        } else {
            self.try_establish(out);
        }
    }

    /// A quorum (ourselves included, once our current epoch is durable) holds our history: it
    /// is committed, and the epoch is established.
    fn try_establish(&mut self, out: &mut ZabActions) {
        let quorum = self.quorum();
        let durable_seq = self.log.durable_seq();
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        if l.stage != LStage::AwaitNewLeaderAcks || durable_seq < l.ready_seq {
            return;
        }
        let synced = l.peers.values().filter(|p| p.synced).count();
        if synced + 1 < quorum {
            return;
        }
        self.establish(out);
    }

    fn establish(&mut self, out: &mut ZabActions) {
        let me = self.cluster.me;
        let history = self.log.last();
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        l.stage = LStage::Broadcast;
        l.commit = history;
        let epoch = l.epoch;
        let synced: Vec<NodeId> = l
            .peers
            .iter()
            .filter(|(_, p)| p.synced)
            .map(|(&id, _)| id)
            .collect();
        let queued = std::mem::take(&mut l.queued);
        out.events.push(Event::Role {
            role: Role::Leading,
            leader: Some(me),
            epoch: epoch as u64,
        });
        for p in synced {
            self.send(
                out,
                p,
                Msg::UpToDate {
                    epoch,
                    commit: history,
                },
            );
        }
        self.deliver(history, out);
        for c in queued {
            self.propose(c, out);
        }
        self.advance_commit(out);
    }

    fn on_up_to_date(&mut self, from: NodeId, epoch: u32, commit: Point, out: &mut ZabActions) {
        let Some(f) = self.following_leader(from, epoch) else {
            return;
        };
        if f.stage != FStage::Synced {
            self.become_looking(out);
            return;
        }
        f.stage = FStage::Broadcast;
        f.commit = f.commit.max(commit);
        let commit = f.commit;
        out.events.push(Event::Role {
            role: Role::Following,
            leader: Some(from),
            epoch: epoch as u64,
        });
        self.deliver(commit, out);
    }

    // ---------------------------------------------------------------- broadcast

    fn on_submit(&mut self, command: Command, out: &mut ZabActions) {
        let max_queued = self.opts.max_queued;
        let last = self.log.last().slot;
        let max_inflight = self.opts.max_inflight;
        match &mut self.phase {
            Phase::Leading(l) if l.stage == LStage::Broadcast => {
                if last - l.commit.slot >= max_inflight {
                    out.events.push(Event::Rejected {
                        id: command.id,
                        reason: Reject::Busy,
                    });
                } else {
                    self.propose(command, out);
                }
            }
            Phase::Leading(l) => {
                if l.queued.len() < max_queued {
                    l.queued.push_back(command);
                } else {
                    out.events.push(Event::Rejected {
                        id: command.id,
                        reason: Reject::Busy,
                    });
                }
            }
            Phase::Following(f) if f.stage == FStage::Broadcast => {
                let leader = f.leader;
                if self.opts.bug == Some(Bug::ForwardTwice) {
                    let again = Msg::Forward {
                        command: command.clone(),
                    };
                    self.send(out, leader, again);
                }
                self.send(out, leader, Msg::Forward { command });
            }
            _ => out.events.push(Event::Rejected {
                id: command.id,
                reason: Reject::NoLeader,
            }),
        }
    }

    /// L1: assign the next zxid, log the proposal and send it to every follower. The leader's
    /// own write runs in parallel with the sends; its own ack counts once the write is durable.
    fn propose(&mut self, command: Command, out: &mut ZabActions) {
        let Phase::Leading(l) = &mut self.phase else {
            unreachable!("only a leader proposes")
        };
        let zxid = Zxid::new(l.epoch, l.next_counter);
        l.next_counter += 1;
        let epoch = l.epoch;
        let now = self.now;
        // Each proposal echoes the peer's last ack stamp with how long we held it (ZabCT's d).
        let peers: Vec<(NodeId, (u64, u64))> = l
            .peers
            .iter_mut()
            .map(|(&id, p)| {
                let echo = match p.echo {
                    (0, _) => (0, 0),
                    (stamp, at) => (stamp, now.saturating_sub(at)),
                };
                p.echo = (0, 0);
                (id, echo)
            })
            .collect();
        let entry = Entry {
            zxid,
            slot: self.log.last().slot + 1,
            command,
        };
        if self.opts.variant.leader_first() {
            // [P]'s ZabAA: the proposal counts as the leader's ack, so it leaves only once the
            // leader's own write is durable.
            let seq = self.log.append(vec![entry.clone()], &mut out.persist);
            for (p, echo) in peers {
                let msg = Msg::Proposal {
                    epoch,
                    entry: entry.clone(),
                    echo,
                };
                self.send_after(out, p, msg, seq);
            }
        } else {
            // L1: the leader's write runs in parallel with the sends.
            for (p, echo) in peers {
                let msg = Msg::Proposal {
                    epoch,
                    entry: entry.clone(),
                    echo,
                };
                self.send(out, p, msg);
            }
            self.log.append(vec![entry], &mut out.persist);
        }
        if self.opts.bug == Some(Bug::CommitOnOwnAck) {
            self.advance_commit(out);
        }
    }

    /// F1: a proposal must be the next one in sequence; anything else means we missed
    /// something, and we resynchronise rather than deliver.
    fn on_proposal(
        &mut self,
        from: NodeId,
        epoch: u32,
        entry: Entry,
        echo: (u64, u64),
        out: &mut ZabActions,
    ) {
        let bug = self.opts.bug;
        let last = self.log.last();
        let now = self.now;
        let Some(f) = self.following_leader(from, epoch) else {
            return;
        };
        // ZabCT's inputs: λ (proposals per second) and d, half the round trip of an ack stamp
        // minus the leader's hold time — no clock is compared with another.
        f.coin.proposals += 1;
        if echo.0 > 0 {
            let rtt = now.saturating_sub(echo.0).saturating_sub(echo.1);
            let sample = rtt as f64 / 2.0;
            f.coin.d_us = if f.coin.d_us == 0.0 {
                sample
            } else {
                0.8 * f.coin.d_us + 0.2 * sample
            };
        }
        if f.stage < FStage::Syncing {
            self.become_looking(out);
            return;
        }
        let expected = if last.zxid.epoch == epoch {
            Zxid::new(epoch, last.zxid.counter + 1)
        } else {
            Zxid::new(epoch, 1)
        };
        if entry.zxid != expected || entry.slot != last.slot + 1 {
            self.become_looking(out);
            return;
        }
        let zxid = entry.zxid;
        let stage = f.stage;
        self.log.append(vec![entry], &mut out.persist);
        if bug == Some(Bug::AckBeforeDurable) && stage >= FStage::Synced {
            self.log.pretend_durable();
            let ack = self.ack(epoch, zxid, false);
            self.send(out, from, ack);
        }
    }

    fn on_durable(&mut self, upto: u64, out: &mut ZabActions) {
        if !self.log.on_durable(upto) && !matches!(self.phase, Phase::Leading(_)) {
            return;
        }
        let durable = self.log.durable().zxid;
        let variant = self.opts.variant;
        let now = self.now;
        match &mut self.phase {
            Phase::Following(f) if f.stage >= FStage::Synced && variant != Variant::Zab => {
                if durable > f.commit.zxid && f.uncommitted_since.is_none() {
                    f.uncommitted_since = Some(now);
                }
                self.variant_ack(false, out);
                self.follower_commit(out);
            }
            Phase::Following(f) if f.stage >= FStage::Synced && durable > f.acked => {
                f.acked = durable;
                let (leader, epoch) = (f.leader, f.epoch);
                let ack = self.ack(epoch, durable, false);
                self.send(out, leader, ack);
            }
            Phase::Leading(l) if l.stage == LStage::Broadcast => self.advance_commit(out),
            Phase::Leading(_) => self.try_establish(out),
            _ => {}
        }
    }

    fn on_ack(
        &mut self,
        from: NodeId,
        epoch: u32,
        zxid: Zxid,
        zab: bool,
        stamp: u64,
        out: &mut ZabActions,
    ) {
        let now = self.now;
        if let Phase::Following(f) = &mut self.phase {
            // Variants: another follower's (cumulative) ack.
            if f.epoch == epoch && from != f.leader && f.stage >= FStage::Synced {
                let a = f.peer_acks.entry(from).or_insert(Zxid::ZERO);
                if zxid > *a {
                    *a = zxid;
                    self.follower_commit(out);
                }
            }
            return;
        }
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        if epoch != l.epoch {
            return;
        }
        let Some(p) = l.peers.get_mut(&from) else {
            return;
        };
        p.last_heard = now;
        if stamp > 0 {
            p.echo = (stamp, now);
        }
        if p.synced {
            p.zab_vote = zab;
            if zab && !l.zab_mode && self.opts.variant.switches() && l.stage == LStage::Broadcast {
                // zab.md §6: one vote for Zab switches everyone (2PC-like).
                self.switch_mode(true, out);
            }
        }
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        let Some(p) = l.peers.get_mut(&from) else {
            return;
        };
        if !p.synced || zxid <= p.ack {
            return;
        }
        p.ack = zxid;
        if l.stage == LStage::Broadcast {
            self.advance_commit(out);
        }
    }

    /// L2: the highest zxid a quorum has durably logged (acks are cumulative) is committed.
    fn advance_commit(&mut self, out: &mut ZabActions) {
        let quorum = match self.opts.bug {
            Some(Bug::CommitOnOwnAck) => 1,
            _ => self.quorum(),
        };
        let own = if self.opts.bug == Some(Bug::CommitOnOwnAck) {
            self.log.last().zxid
        } else {
            self.log.durable().zxid
        };
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        if l.stage != LStage::Broadcast {
            return;
        }
        let mut acks: Vec<Zxid> = l
            .peers
            .values()
            .filter(|p| p.synced)
            .map(|p| p.ack)
            .collect();
        acks.push(own);
        let Some(z) = quorum::kth_largest(&mut acks, quorum) else {
            return;
        };
        if z <= l.commit.zxid {
            return;
        }
        let at = self
            .log
            .point_of(z)
            .expect("acked zxids are in the leader's log");
        l.commit = at;
        let epoch = l.epoch;
        let zab = l.zab_mode || self.opts.variant.leader_commits();
        if zab {
            let peers: Vec<NodeId> = l.peers.keys().copied().collect();
            for p in peers {
                self.send(out, p, Msg::Commit { epoch, at, zab });
            }
        }
        self.deliver(at, out);
    }

    fn on_commit(&mut self, from: NodeId, epoch: u32, at: Point, zab: bool, out: &mut ZabActions) {
        let switches = self.opts.variant.switches();
        let Some(f) = self.following_leader(from, epoch) else {
            return;
        };
        if switches && f.zab_mode != zab {
            // The leader's decision (prot of its commit): run Zab, or return to the variant.
            f.zab_mode = zab;
            if !zab {
                f.wants_zab = false;
                f.uncommitted_since = None;
            }
        }
        f.commit = f.commit.max(at);
        if f.stage >= FStage::Synced {
            let commit = f.commit;
            self.deliver(commit, out);
        }
    }

    /// abdeliver every logged entry up to `commit`, in slot order.
    fn deliver(&mut self, commit: Point, out: &mut ZabActions) {
        let upto = commit.slot.min(self.log.last().slot);
        if let Some(e) = self.log.get(commit.slot) {
            assert_eq!(e.zxid, commit.zxid, "a commit names an entry of our log");
        }
        while self.applied < upto {
            let e = self
                .log
                .get(self.applied + 1)
                .expect("committed entries above the snapshot are in the log");
            out.apply.push(Apply::Command {
                at: e.point().position(),
                command: e.command.clone(),
            });
            self.applied += 1;
        }
    }

    /// A follower's cumulative ack, stamped with our clock (echoed back for ZabCT's d).
    fn ack(&self, epoch: u32, zxid: Zxid, zab: bool) -> Msg {
        Msg::Ack {
            epoch,
            zxid,
            zab,
            stamp: self.now,
        }
    }

    /// Variants, F1–F3: send (or, with a coin, maybe send) a cumulative ack for everything durably
    /// logged here, to the leader and (ack-all variants) to every follower. `forced` skips the
    /// coin (the deterministic fallback).
    fn variant_ack(&mut self, forced: bool, out: &mut ZabActions) {
        let durable = self.log.durable().zxid;
        let n = self.cluster.size();
        let variant = self.opts.variant;
        let now = self.now;
        let (zab_mode, current_p) = match &self.phase {
            Phase::Following(f) => (f.zab_mode, f.coin.p),
            _ => (false, 1.0),
        };
        let heads = match variant.coin(n) {
            Some(_) if !forced && !zab_mode => self.rng.chance(current_p),
            _ => true,
        };
        let Phase::Following(f) = &mut self.phase else {
            return;
        };
        if durable <= f.acked {
            return;
        }
        let zab = f.wants_zab;
        f.last_toss = now;
        if !heads {
            return;
        }
        f.acked = durable;
        let (leader, epoch) = (f.leader, f.epoch);
        let msg = self.ack(epoch, durable, zab);
        if variant.broadcast_acks() && !zab_mode {
            out.send.push(Envelope {
                to: Dest::All,
                msg,
                after_durable: 0,
            });
        } else {
            self.send(out, leader, msg);
        }
    }

    /// Variants, F-commit: the highest zxid that `threshold` followers (this one included, for
    /// what is durable here) are known to have logged is committed; deliver up to it.
    fn follower_commit(&mut self, out: &mut ZabActions) {
        let Some(k) = self.opts.variant.follower_threshold(self.cluster.size()) else {
            return;
        };
        let own = self.log.durable().zxid;
        let last = self.log.last();
        let Phase::Following(f) = &mut self.phase else {
            return;
        };
        if f.stage < FStage::Synced {
            return;
        }
        let mut acks: Vec<Zxid> = f.peer_acks.values().copied().collect();
        acks.push(own);
        let Some(z) = quorum::kth_largest(&mut acks, k) else {
            return;
        };
        if z <= f.commit.zxid {
            return;
        }
        let at = if z >= last.zxid {
            Some(last)
        } else {
            self.log.point_of(z)
        };
        let Phase::Following(f) = &mut self.phase else {
            return;
        };
        if let Some(at) = at {
            f.commit = f.commit.max(at);
            if f.commit.zxid >= own {
                f.uncommitted_since = None;
            }
            let commit = f.commit;
            self.deliver(commit, out);
        }
    }

    /// Leader: switch the epoch's broadcast mode and tell every follower at once with a commit
    /// carrying the decision. Deliveries continue throughout: a follower delivers up to the larger
    /// of the leader's commit point and its own threshold commit point, and each is safe on its
    /// own, so proposals in flight need no fence in either direction.
    fn switch_mode(&mut self, zab: bool, out: &mut ZabActions) {
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        if l.zab_mode == zab {
            return;
        }
        l.zab_mode = zab;
        let (epoch, at) = (l.epoch, l.commit);
        let peers: Vec<NodeId> = l.peers.keys().copied().collect();
        out.events.push(Event::Mode { fallback: zab });
        for p in peers {
            self.send(out, p, Msg::Commit { epoch, at, zab });
        }
    }

    fn on_ping(
        &mut self,
        from: NodeId,
        epoch: u32,
        commit: Point,
        last: Zxid,
        full: bool,
        out: &mut ZabActions,
    ) {
        let now = self.now;
        let Some(f) = self.following_leader(from, epoch) else {
            return;
        };
        if f.stage < FStage::Synced {
            return;
        }
        if full {
            f.full_since.get_or_insert(now);
        } else {
            f.full_since = None;
        }
        let zab = f.wants_zab;
        f.commit = f.commit.max(commit);
        let commit = f.commit;
        if last > self.log.last().zxid {
            // FIFO: every proposal up to `last` was sent before this ping, so we lost one.
            self.become_looking(out);
            return;
        }
        // The heartbeat reply is a cumulative ack that also carries our vote.
        let ack = self.ack(epoch, self.log.durable().zxid, zab);
        self.send(out, from, ack);
        self.deliver(commit, out);
    }

    fn on_forward(&mut self, from: NodeId, command: Command, out: &mut ZabActions) {
        let max_queued = self.opts.max_queued;
        let now = self.now;
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        if let Some(p) = l.peers.get_mut(&from) {
            p.last_heard = now;
        }
        // Beyond the bounds the command is dropped: the forwarding replica's client sees no
        // delivery and retries, as after any lost connection.
        if l.stage == LStage::Broadcast {
            if self.log.last().slot - l.commit.slot < self.opts.max_inflight {
                self.propose(command, out);
            }
        } else if l.queued.len() < max_queued {
            l.queued.push_back(command);
        }
    }

    // ---------------------------------------------------------------- plumbing

    fn on_message(&mut self, from: NodeId, msg: Msg, out: &mut ZabActions) {
        if from == self.cluster.me || !self.cluster.members.contains(&from) {
            return;
        }
        match msg {
            Msg::Notification { round, vote, state } => {
                self.on_notification(from, round, vote, state, out)
            }
            Msg::FollowerInfo {
                accepted_epoch,
                accepted_leader,
            } => self.on_follower_info(from, accepted_epoch, accepted_leader, out),
            Msg::NewEpoch { epoch } => self.on_new_epoch(from, epoch, out),
            Msg::AckEpoch {
                epoch,
                current_epoch,
                summary,
            } => self.on_ack_epoch(from, epoch, current_epoch, summary, out),
            Msg::Sync { epoch, mode } => self.on_sync(from, epoch, mode, out),
            Msg::Entries { epoch, entries } => self.on_entries(from, epoch, entries, out),
            Msg::NewLeader { epoch, last } => self.on_new_leader(from, epoch, last, out),
            Msg::AckNewLeader { epoch } => self.on_ack_new_leader(from, epoch, out),
            Msg::UpToDate { epoch, commit } => self.on_up_to_date(from, epoch, commit, out),
            Msg::Proposal { epoch, entry, echo } => self.on_proposal(from, epoch, entry, echo, out),
            Msg::Ack {
                epoch,
                zxid,
                zab,
                stamp,
            } => self.on_ack(from, epoch, zxid, zab, stamp, out),
            Msg::Commit { epoch, at, zab } => self.on_commit(from, epoch, at, zab, out),
            Msg::Ping {
                epoch,
                commit,
                last,
                full,
            } => self.on_ping(from, epoch, commit, last, full, out),
            Msg::Forward { command } => self.on_forward(from, command, out),
        }
    }

    fn on_disconnected(&mut self, peer: NodeId, out: &mut ZabActions) {
        match &mut self.phase {
            Phase::Following(f) if f.leader == peer => self.become_looking(out),
            Phase::Leading(l) => {
                l.peers.remove(&peer);
                l.infos.remove(&peer);
                l.ack_epochs.remove(&peer);
            }
            _ => {}
        }
    }

    fn on_compact(&mut self, snapshot: Snapshot, out: &mut ZabActions) {
        if snapshot.at.slot > self.applied {
            return;
        }
        self.log
            .compact(snapshot, self.opts.log_retain, &mut out.persist);
    }

    fn on_tick(&mut self, out: &mut ZabActions) {
        let now = self.now;
        let quorum = self.quorum();
        match &mut self.phase {
            Phase::Looking(el) => {
                if el.decide_at.is_some_and(|t| now >= t) {
                    self.decide(out);
                } else if now >= el.next_send {
                    self.broadcast_vote(out);
                }
            }
            Phase::Following(f) => {
                if now.saturating_sub(f.last_heard) > self.opts.follower_timeout_us {
                    self.become_looking(out);
                } else if f.stage >= FStage::Synced && self.opts.variant != Variant::Zab {
                    if f.commit.zxid >= self.log.durable().zxid {
                        f.uncommitted_since = None;
                    }
                    let waited = f.uncommitted_since.map_or(0, |t| now.saturating_sub(t));
                    if self.opts.variant == Variant::Ct
                        && self.opts.adaptive_coin
                        && now.saturating_sub(f.coin.window_start) >= 1_000_000
                    {
                        let elapsed_s = now.saturating_sub(f.coin.window_start) as f64 / 1e6;
                        let lambda = f.coin.proposals as f64 / elapsed_s;
                        f.coin.window_start = now;
                        f.coin.proposals = 0;
                        if lambda > 0.0 && f.coin.d_us > 0.0 {
                            let n = self.cluster.size() as u32 - 1;
                            let inputs = coin::Inputs {
                                followers: n,
                                needed: n.div_ceil(2).max(1),
                                lambda,
                                theta: lambda,
                                d_s: f.coin.d_us / 1e6,
                                timer_d_s: self.opts.enforced_toss_us as f64 / 1e6,
                                delta: 0.001,
                                steps: 100,
                            };
                            match coin::choose_p(&inputs, coin::Policy::Upper) {
                                Some(p) => {
                                    f.coin.p = p;
                                    f.coin.infeasible = false;
                                    f.coin.feasible_streak += 1;
                                }
                                None => {
                                    // ZabCT cannot beat Zab here: vote Zab (zab.md §6.2 (i)).
                                    f.coin.infeasible = true;
                                    f.coin.feasible_streak = 0;
                                }
                            }
                        }
                    }
                    let p_ok = self.opts.variant != Variant::Ct
                        || !self.opts.adaptive_coin
                        || (!f.coin.infeasible && f.coin.feasible_streak >= 2);
                    if self.opts.variant.switches() {
                        f.wants_zab = if f.zab_mode {
                            // Back to the variant once every follower has been present long
                            // enough (a unanimous vote decides, at the leader).
                            !(p_ok
                                && f.full_since.is_some_and(|t| {
                                    now.saturating_sub(t) >= self.opts.switch_back_after_us
                                }))
                        } else {
                            // timer(C_m): a proposal stays uncommitted too long, or p cannot be
                            // computed — vote Zab.
                            f.wants_zab || waited >= self.opts.switch_after_us || f.coin.infeasible
                        };
                    }
                    // F4, enforced coin tossing; and the deterministic fallback for proposals
                    // that stay uncommitted.
                    let overdue = waited >= self.opts.ack_timeout_us
                        && now.saturating_sub(f.last_forced) >= self.opts.ack_timeout_us;
                    let toss = now.saturating_sub(f.last_toss) >= self.opts.enforced_toss_us;
                    if overdue {
                        f.last_forced = now;
                        self.variant_ack(true, out);
                    } else if toss {
                        self.variant_ack(false, out);
                    }
                } else if f.stage == FStage::Info && now >= f.next_info {
                    // The leader may still have been LOOKING when we first asked.
                    f.next_info = now + self.opts.heartbeat_us;
                    let leader = f.leader;
                    self.send_follower_info(leader, out);
                }
            }
            Phase::Leading(l) => {
                if l.stage != LStage::Broadcast {
                    if now.saturating_sub(l.started) > self.opts.discovery_timeout_us {
                        self.become_looking(out);
                    }
                    return;
                }
                let timeout = self.opts.leader_timeout_us;
                l.peers
                    .retain(|_, p| now.saturating_sub(p.last_heard) <= timeout);
                let heard = 1 + l.peers.values().filter(|p| p.synced).count();
                if heard < quorum {
                    // SC2: no quorum behind us any more.
                    self.become_looking(out);
                    return;
                }
                let synced = l.peers.values().filter(|p| p.synced).count();
                let full = synced + 1 == self.cluster.size();
                // Back to the variant on a unanimous vote of all N − 1 followers (zab.md §6).
                let back = l.zab_mode
                    && self.opts.variant.switches()
                    && full
                    && l.peers.values().all(|p| !p.zab_vote);
                if now >= l.next_ping {
                    l.next_ping = now + self.opts.heartbeat_us;
                    let (epoch, commit) = (l.epoch, l.commit);
                    let last = self.log.last().zxid;
                    let peers: Vec<NodeId> = l.peers.keys().copied().collect();
                    for p in peers {
                        self.send(
                            out,
                            p,
                            Msg::Ping {
                                epoch,
                                commit,
                                last,
                                full,
                            },
                        );
                    }
                }
                if back {
                    self.switch_mode(false, out);
                }
            }
        }
    }
}
