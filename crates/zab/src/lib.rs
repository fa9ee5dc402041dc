//! Zab, ZooKeeper's atomic broadcast, as a sans-IO core (zab.md §1–2 and the Zab paper).
//!
//! Phases, one file each (docs/protocols/zab.md maps every step to the papers):
//!
//! * **Election** ([`election`], fast leader election): [`Zab::become_looking`],
//!   [`Zab::on_notification`], [`Zab::decide`]. Votes are ⟨current epoch, last zxid, id⟩.
//! * **Discovery** ([`discovery`]): [`Zab::on_follower_info`] (leader collects FOLLOWERINFO and
//!   picks the new epoch), [`Zab::on_new_epoch`] (follower accepts it durably, ACKEPOCH).
//! * **Synchronisation** ([`sync`]): [`Zab::on_ack_epoch`] → [`Zab::sync_follower`] /
//!   [`Zab::plan_sync`] (DIFF, TRUNC or SNAP), [`Zab::on_sync`], [`Zab::on_entries`],
//!   [`Zab::on_new_leader`] (follower makes current epoch durable, ACKNEWLEADER),
//!   [`Zab::on_ack_new_leader`] and [`Zab::establish`] (quorum: the history is committed),
//!   [`Zab::on_up_to_date`].
//! * **Broadcast** ([`broadcast`]): [`Zab::propose`] (L1, one proposal per batch),
//!   [`Zab::on_proposal`] + [`Zab::on_durable`] (F1: log, then ack), [`Zab::on_ack`] +
//!   [`Zab::advance_commit`] (L2: quorum → commit), [`Zab::on_commit`] (F2) and
//!   [`Zab::deliver`] (L3/F2: abdeliver in order).
//! * **Variants** ([`variants`]): the followers' acks to each other, their own commit rule, the
//!   coin and the switch to and from Zab (zab.md §3–6).
//! * **Timers** ([`timers`]): [`Zab::on_timeout`] (heartbeats, SC1 leader silence, SC2 lost
//!   quorum, election resends) and [`Zab::next_deadline`], which tells the driver when to wake
//!   the core next.
//! * **Recovery after lost state** ([`recovery`]): a replica restored with
//!   `DurableState::lost` marks itself recovering durably and neither votes, stands, promises
//!   nor counts until an established leader, vouched for by a quorum of others, has
//!   synchronised it.

pub mod broadcast;
pub mod codec;
pub mod coin;
pub mod discovery;
pub mod election;
pub mod log;
pub mod msg;
pub mod reconfig;
pub mod recovery;
pub mod sync;
pub mod timers;
pub mod variant;
pub mod variants;

use crate::log::{Log, Ops};
pub use crate::msg::{Entry, Hard, LogSummary, Msg, PeerState, Point, SyncMode, Vote, Zxid};
pub use crate::variant::Variant;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use synod_core::{
    rng::CoreRng, Actions, Cluster, Command, Config, Dest, DurableState, Envelope, Event, Input,
    Membership, NodeId, Protocol, Role, TimeUs, View,
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
    /// The leader takes a second configuration change while one is in flight.
    TwoChangesInFlight,
    /// Learners' acknowledgements count toward the commit quorum.
    LearnersCount,
    /// Quorums use the newest configuration alone, never the committed one beside it: a
    /// change takes effect on its own say-so.
    NewConfigAlone,
}

#[derive(Clone, Debug)]
pub struct Options {
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
    /// Commands per proposal when the leader proposes what waited in its queue.
    pub max_batch: usize,
    /// Batches an established leader keeps proposed but uncommitted. While the window is full,
    /// new commands wait and leave together as one batch when a commit frees a slot, so batches
    /// grow with load; with nothing in flight a command is proposed at once.
    pub window: usize,
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
    /// How a ZabCT follower (`Variant::Ct`) chooses p: fixed ([T] Ch. 3), or every second from
    /// the measured λ and d with Algorithm 1 and a policy inside [P₁, P₂] (ZabCT_u by default;
    /// infeasible → vote Zab).
    pub coin: coin::Choice,
    /// Among candidates with the same epoch and last zxid, elect this one (else the highest
    /// id, as ZooKeeper does). Only the tie-break changes, so the elected leader still holds
    /// the most recent history; a host running many groups names a different replica for each
    /// so that their leaders spread over the nodes.
    pub preferred_leader: Option<NodeId>,
    /// How long an election that has a quorum for another replica waits for a preferred
    /// leader never heard from since this replica started (replicas of a cluster start at
    /// slightly different times; ZooKeeper's finalize wait plays this part). Once the preferred
    /// replica was heard from, its absence delays no election: a failover is not slowed.
    pub preferred_wait_us: TimeUs,
    pub bug: Option<Bug>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
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
            max_batch: 512,
            window: 1,
            sync_batch: 256,
            max_summary_epochs: 4_096,
            variant: Variant::Zab,
            enforce_a11: true,
            enforced_toss_us: 20_000,
            ack_timeout_us: 250_000,
            switch_after_us: 1_000_000,
            switch_back_after_us: 1_000_000,
            coin: coin::Choice::default(),
            preferred_leader: None,
            preferred_wait_us: 1_000_000,
            bug: None,
        }
    }
}

#[derive(Debug)]
struct Election {
    vote: Vote,
    /// Votes of LOOKING peers in our round (ourselves included).
    recv: BTreeMap<NodeId, Vote>,
    /// What FOLLOWING/LEADING peers report, received in this round (so in this incarnation).
    settled: BTreeMap<NodeId, Settled>,
    next_send: TimeUs,
    resend_us: TimeUs,
    decide_at: Option<TimeUs>,
}

/// What a settled (FOLLOWING or LEADING) peer told us in a notification.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Settled {
    /// The leader it names.
    leader: NodeId,
    /// The sender is that leader (LEADING).
    leading: bool,
    /// The epoch it accepted from (or proposed as) that leader; 0 if none yet.
    accepted: u32,
    /// The sender's configurations in force, if it reported any (reconfig.rs).
    membership: Option<Membership>,
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
    /// A recovering follower: the epoch a quorum of other replicas vouched for when it chose
    /// this leader. It refuses a NEWEPOCH below it (0 when not recovering).
    vouched: u32,
    stage: FStage,
    last_heard: TimeUs,
    next_info: TimeUs,
    commit: Point,
    acked: Zxid,
    /// Variants: the highest zxid each other follower acked in this epoch (cumulative).
    peer_acks: BTreeMap<NodeId, Zxid>,
    /// Variants, timer C_m per proposal (zab.md §6.2): every proposal received and not yet
    /// committed here, as (its last zxid, when it arrived), oldest first.
    uncommitted: VecDeque<(Zxid, TimeUs)>,
    /// Variants, F1: proposals logged here whose coin is still to be tossed (each gets one toss
    /// once it is durable), by last zxid.
    untossed: VecDeque<Zxid>,
    /// Timer D (enforced coin tossing, zab.md §5.2): reset by every proposal and every expiry.
    timer_d: TimeUs,
    /// The highest commit point the leader told us of (what it has committed, at least).
    leader_commit: Zxid,
    /// Switching: the leader runs Zab (we wait for its commits and ack it alone).
    zab_mode: bool,
    /// Our vote, carried by every ack (the prot field).
    wants_zab: bool,
    /// The followers the leader's last heartbeat reports present (A3's view of the
    /// membership; `None` before the first heartbeat), and since when all N − 1 have been.
    live: Option<usize>,
    full_since: Option<TimeUs>,
    /// When the deterministic fallback last acked (rate limit).
    last_forced: TimeUs,
    /// ZabCT's adaptive coin: the current p and its measured inputs.
    coin: Coin,
}

impl Follower {
    /// The commit point moved (the leader's commit, our own threshold, a heartbeat): the
    /// proposals it covers stop their timers C_m.
    fn advance_commit(&mut self, at: Point) {
        self.commit = self.commit.max(at);
        while self
            .uncommitted
            .front()
            .is_some_and(|(z, _)| *z <= self.commit.zxid)
        {
            self.uncommitted.pop_front();
        }
    }

    /// The leader's commit point reached us (a commit, a heartbeat, UPTODATE).
    fn leader_committed(&mut self, at: Point) {
        self.leader_commit = self.leader_commit.max(at.zxid);
        self.advance_commit(at);
    }

    /// When the oldest proposal still uncommitted here arrived (timer C_m's start).
    fn oldest_uncommitted(&self) -> Option<TimeUs> {
        self.uncommitted.front().map(|&(_, t)| t)
    }
}

/// A ZabCT follower's coin (zab.md §5.9): p, and the inputs measured over the current window.
#[derive(Debug)]
struct Coin {
    p: f64,
    window_start: TimeUs,
    /// Proposals received in the window (λ).
    proposals: u64,
    /// Samples of d in the window (µs), summed, and how many.
    d_sum_us: f64,
    d_samples: u64,
    /// The last window's mean d (µs), once any sample was taken.
    d_us: Option<f64>,
    /// The last window's λ (abcasts per second).
    lambda: f64,
    /// Computations of p in a row that succeeded.
    feasible_streak: u32,
    /// The last computation found ZabCT infeasible (P₁ > P₂).
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
    /// The peer's last vote on the broadcast mode (true = Zab); `None` until it has cast one
    /// since it was synchronised.
    vote: Option<bool>,
    /// The mode the peer last said it runs (true = Zab): a decision is re-sent until the peer
    /// reports it.
    mode: bool,
    /// The last ack stamp from the peer and when it arrived, echoed in the next proposal.
    echo: (u64, TimeUs),
}

#[derive(Debug)]
struct Leader {
    epoch: u32,
    stage: LStage,
    /// When the current stage began: discovery's start, then the epoch's establishment.
    started: TimeUs,
    infos: BTreeMap<NodeId, u32>,
    /// The last forward taken from each follower: replayed or reordered forwards are dropped.
    forwards: synod_core::kit::forward::Taken,
    /// Followers whose last FOLLOWERINFO said they are recovering from lost state: they count
    /// toward neither discovery quorum, and their history never weighs (still synchronised).
    recovering: BTreeSet<NodeId>,
    ack_epochs: BTreeMap<NodeId, LogSummary>,
    peers: BTreeMap<NodeId, Peer>,
    /// Seq of the hard-state write of `accepted_epoch = epoch`; NEWEPOCH waits for it.
    epoch_seq: u64,
    /// Seq of the hard-state write of `current_epoch = epoch`; our own ack counts after it.
    ready_seq: u64,
    commit: Point,
    next_counter: u32,
    next_ping: TimeUs,
    /// Commands waiting to be proposed: the epoch is not established yet, or the window is full.
    queued: VecDeque<Command>,
    /// The last zxid of every batch proposed and not yet committed (the window).
    inflight: VecDeque<Zxid>,
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
    /// Storage ops issued by `restore` (the recovering mark), handed to the driver at the
    /// start of the first step.
    deferred: Ops,
    /// The seq of the durable recovering mark written at restore (0 if none): every message
    /// waits for it (`Zab::gate_on_mark`, recovery.rs).
    mark_seq: u64,
    /// This incarnation's forwards to its leader, numbered (synod_core::kit::forward).
    forwarding: synod_core::kit::forward::Numbering,
    /// Whether the preferred leader (`Options::preferred_leader`) was heard from since this
    /// incarnation started: until it is, an election that agrees on another waits for it up
    /// to `Options::preferred_wait_us` (election.rs).
    heard_preferred: bool,
    /// The versions of the configurations in force as last reported (`Event::Membership`).
    reported: Vec<u64>,
    /// The slot of the newest reconfiguration entry of our log that a peer reported committed
    /// (reconfig.rs): our configurations count it committed even before we deliver it.
    config_floor: u64,
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
        let hard = durable.hard.clone();
        let suspended_until_above = (options.variant.restricted()
            && options.enforce_a11
            && hard.led_epoch > 0
            && hard.led_epoch >= hard.current_epoch)
            .then_some(hard.led_epoch);
        let lost = durable.lost;
        let initial = Arc::new(
            Config::new(0, cluster.members.clone(), cluster.learners.clone())
                .expect("a cluster's members and learners"),
        );
        let mut log = Log::restore(durable, initial);
        let (deferred, mark_seq) = recovery::mark_if_lost(&mut log, lost);
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
            deferred,
            mark_seq,
            // The seed differs per incarnation (drivers draw it at every start).
            forwarding: synod_core::kit::forward::Numbering::new(seed),
            heard_preferred: false,
            reported: vec![0],
            config_floor: 0,
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

    fn step(&mut self, now_us: TimeUs, input: Input<Msg>, out: &mut ZabActions) {
        self.now = self.now.max(now_us);
        let first_send = out.send.len();
        match input {
            // What restore found it must write (a recovery mark) is issued first.
            Input::Start => out.persist.append(&mut self.deferred),
            Input::Submit(commands) => self.on_submit(commands, out),
            Input::Message { from, msg } => self.on_message(from, msg, out),
            Input::Timeout => self.on_timeout(out),
            Input::Durable { upto } => self.on_durable(upto, out),
            Input::Disconnected { peer } => self.on_disconnected(peer, out),
            Input::Compact(s) => self.on_compact(s, out),
            Input::Reconfigure { command, change } => self.on_reconfigure(command, change, out),
        }
        self.report_membership(out);
        self.gate_on_mark(out, first_send);
        self.check_recovering_sends(out, first_send);
        self.check_invariants();
    }

    fn deadline(&self) -> Option<TimeUs> {
        Some(self.next_deadline())
    }

    fn view(&self) -> View {
        match &self.phase {
            Phase::Leading(l) if l.stage == LStage::Broadcast => View {
                role: Role::Leading,
                leader: Some(self.cluster.me),
                epoch: l.epoch as u64,
            },
            Phase::Following(f) if f.stage == FStage::Broadcast => View {
                role: Role::Following,
                leader: Some(f.leader),
                epoch: f.epoch as u64,
            },
            _ => View::electing(self.log.hard().current_epoch as u64),
        }
    }

    fn membership(&self) -> Option<Membership> {
        Some(self.membership())
    }

    /// A ZabCT follower reports its coin probability, or that the epoch runs Zab.
    fn gauges(&self) -> Vec<(&'static str, f64)> {
        match &self.phase {
            Phase::Following(f)
                if self.opts.variant.coin(self.cluster.size()).is_some()
                    && f.stage >= FStage::Synced =>
            {
                // The coin's measured inputs (zab.md §5.9), for comparison with [T] App. F.
                let mut g = vec![
                    ("coin_lambda", f.coin.lambda),
                    ("coin_d_ms", f.coin.d_us.unwrap_or(0.0) / 1000.0),
                ];
                if f.zab_mode {
                    g.push(("zab_mode", 1.0));
                } else {
                    g.push(("coin_p", f.coin.p));
                }
                g
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
    pub fn role(&self) -> Role {
        self.view().role
    }
    /// The established leader this replica serves with, if any.
    pub fn leader(&self) -> Option<NodeId> {
        self.view().leader
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

    /// The configurations in force here (docs/protocols/zab.md, "Reconfiguration").
    pub fn membership(&self) -> Membership {
        let mut m = self.log.membership(self.applied.max(self.config_floor));
        if self.opts.bug == Some(Bug::NewConfigAlone) {
            m = Membership::stable(m.latest().clone());
        }
        m
    }

    /// Does `has` hold for a quorum of the configurations in force?
    fn is_quorum(&self, has: impl Fn(NodeId) -> bool) -> bool {
        self.membership().is_quorum(has)
    }

    /// Does this replica vote in any configuration in force?
    fn is_voter(&self) -> bool {
        self.membership().is_voter(self.cluster.me)
    }

    /// Tell the driver when the configurations in force changed.
    fn report_membership(&mut self, out: &mut ZabActions) {
        // Every step: compare without allocating, report only a change.
        let m = self.membership();
        if !m
            .configs()
            .map(|c| c.version)
            .eq(self.reported.iter().copied())
        {
            self.reported = m.versions();
            out.events.push(Event::Membership(m));
        }
    }

    /// Invariants the simulator's checkers rely on, asserted after every step so that a broken
    /// core crashes the replica (and the simulator reports the panic with its seed) instead of
    /// corrupting a history.
    fn check_invariants(&self) {
        let last = self.log.last();
        assert!(
            self.applied <= last.slot
                || self
                    .log
                    .snapshot()
                    .is_some_and(|s| s.at.slot >= self.applied),
            "delivered slot {} beyond the log ({:?}) and the snapshot",
            self.applied,
            last
        );
        assert!(
            self.log.durable() <= last,
            "the durable prefix {:?} runs past the log's end {:?}",
            self.log.durable(),
            last
        );
        // A replica that lost state it may have acknowledged never leads before it has been
        // synchronised (recovery.rs): its own history may lack a committed entry.
        assert!(
            !(self.recovering() && matches!(self.phase, Phase::Leading(_))),
            "a replica recovering from lost state leads"
        );
        match &self.phase {
            Phase::Leading(l) if l.stage == LStage::Broadcast => {
                assert!(
                    l.commit <= last,
                    "the leader's commit point {:?} is past its log {:?}",
                    l.commit,
                    last
                );
                assert!(
                    self.applied == l.commit.slot || self.opts.bug.is_some(),
                    "an established leader delivers exactly its commit point ({} vs {:?})",
                    self.applied,
                    l.commit
                );
            }
            Phase::Following(f) if f.stage >= FStage::Synced => {
                // The write that clears the mark precedes ACKNEWLEADER (`on_new_leader`).
                assert!(
                    !self.recovering(),
                    "a synchronised follower is still marked recovering"
                );
                // ACKNEWLEADER acknowledges the synchronised log behind a barrier, and acks
                // after it only what `on_durable` found durable: never beyond the log.
                assert!(
                    f.acked <= last.zxid,
                    "a follower acked {:?} beyond its log {:?}",
                    f.acked,
                    last
                );
            }
            _ => {}
        }
    }

    // ---------------------------------------------------------------- plumbing

    fn on_message(&mut self, from: NodeId, msg: Msg, out: &mut ZabActions) {
        // Any node the transport authenticated may talk to us: a replica not (yet) in our
        // configuration follows as a non-voting learner until a change names it, and only
        // voters of the configurations in force ever count (reconfig.rs).
        if from == self.cluster.me || from == 0 {
            return;
        }
        if Some(from) == self.opts.preferred_leader {
            self.heard_preferred = true;
        }
        match msg {
            Msg::Notification {
                round,
                vote,
                state,
                accepted,
                configs,
            } => self.on_notification(from, round, vote, state, accepted, configs, out),
            Msg::FollowerInfo {
                accepted_epoch,
                accepted_leader,
                recovering,
            } => self.on_follower_info(from, accepted_epoch, accepted_leader, recovering, out),
            Msg::NewEpoch { epoch } => self.on_new_epoch(from, epoch, out),
            Msg::AckEpoch {
                epoch,
                current_epoch,
                summary,
            } => self.on_ack_epoch(from, epoch, current_epoch, summary, out),
            Msg::Sync { epoch, mode } => self.on_sync(from, epoch, mode, out),
            Msg::Entries { epoch, entries } => self.on_entries(from, epoch, entries, out),
            Msg::NewLeader { epoch, last } => self.on_new_leader(from, epoch, last, out),
            Msg::AckNewLeader { epoch, last } => self.on_ack_new_leader(from, epoch, last, out),
            Msg::UpToDate { epoch, commit } => self.on_up_to_date(from, epoch, commit, out),
            Msg::Proposal {
                epoch,
                first,
                commands,
                echo,
            } => self.on_proposal(from, epoch, first, commands, echo, out),
            Msg::Ack {
                epoch,
                zxid,
                zab,
                mode,
                stamp,
            } => self.on_ack(from, epoch, zxid, (zab, mode), stamp, out),
            Msg::Commit { epoch, at, zab } => self.on_commit(from, epoch, at, zab, out),
            Msg::Ping {
                epoch,
                commit,
                last,
                live,
            } => self.on_ping(from, epoch, commit, last, live, out),
            Msg::Forward {
                epoch,
                nonce,
                seq,
                commands,
            } => self.on_forward(from, (epoch, nonce, seq), commands, out),
            Msg::ProposeConfig { epoch, entry } => self.on_propose_config(from, epoch, entry, out),
        }
    }
}
