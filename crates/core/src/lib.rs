//! The protocol contract shared by every replication protocol of synod.
//!
//! A protocol core is a deterministic state machine. The driver (the simulator or the server)
//! feeds it [`Input`]s one at a time, each with the current time, and carries out the
//! [`Actions`] it returns:
//!
//! * **persist** each [`StorageOp`] in the order given; when the storage reports that every op up
//!   to sequence number `s` is durable, feed back [`Input::Durable`] with `upto = s`;
//! * **send** each [`Envelope`], but only once every storage op with sequence number
//!   `<= envelope.after_durable` is durable (0 means "no requirement"). This is the durability
//!   rule: a message that depends on a log write never leaves before that write is durable;
//! * **apply** each [`Apply`] to the replicated state machine, in order;
//! * observe the [`Event`]s (view changes, rejected submissions);
//! * **wake** the core with [`Input::Timeout`] once the time it names in
//!   [`Protocol::deadline`] has come.
//!
//! [`replica::Replica`] is that carry-out, written once: the simulator and the server both run
//! every core through it, so "one contract, two drivers" holds by construction.
//!
//! The core never touches sockets, files, threads or clocks; time arrives with every input and
//! randomness from a seed handed to [`Protocol::restore`]. The same core therefore runs
//! unchanged in the simulator and in the server, and the same seed replays the same run.
//!
//! See `docs/contract.md` for how Zab, PFT (view-based Multi-Paxos), Mencius and SconeKV's
//! buckets map onto it.

use bytes::Bytes;
use std::fmt::Debug;

pub mod batch;
pub mod config;
pub mod durable;
pub mod kit;
pub mod machine;
pub mod outbox;
pub mod quorum;
pub mod replica;
pub mod rng;
pub mod wire;

pub use batch::BatchLimits;
pub use config::{Change, Config, ConfigError, ConfigReject, Membership};
pub use durable::{DurableState, LogRecord, Persist, StorageOp};
pub use machine::{GroupMessage, StateMachine};

/// A replica's identity within a cluster. Ids are small positive integers (1-based).
pub type NodeId = u32;

/// A replication group's identity within a host: one process runs many groups, each a
/// (protocol core, members, state machine) triple.
pub type GroupId = u32;

/// Time in microseconds since an arbitrary origin chosen by the driver. Virtual in the
/// simulator, monotonic in the server.
pub type TimeUs = u64;

/// A command submitted for atomic broadcast. `id` is unique per cluster for the lifetime of the
/// log: the state machine above uses it to recognise its own submissions and the checkers use it
/// for integrity (each command delivered at most once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    pub id: u64,
    pub payload: Bytes,
}

/// A position in the total order. `slot` is dense (1, 2, 3, …) over the commands delivered, in
/// every protocol; `tag` is the protocol's own name for the position (a Zab zxid, a Paxos
/// sequence number with the index in its batch, a Mencius instance).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub slot: u64,
    pub tag: u64,
}

/// An opaque state-machine snapshot covering every delivered command up to `at`.
#[derive(Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub at: Position,
    pub data: Bytes,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Snapshot(slot {}, tag {:#x}, {} bytes)",
            self.at.slot,
            self.at.tag,
            self.data.len()
        )
    }
}

/// Where a message goes. `All` means every other member of the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    One(NodeId),
    All,
}

/// A message to send, with its durability barrier.
#[derive(Clone, Debug)]
pub struct Envelope<M> {
    pub to: Dest,
    pub msg: M,
    /// The message may leave only after every storage op with `seq <= after_durable` is durable.
    /// 0: no requirement.
    pub after_durable: u64,
}

/// What the state machine must do, in order.
#[derive(Clone, Debug)]
pub enum Apply {
    /// Apply the command delivered at `at`. Slots arrive strictly in order, without gaps.
    Command { at: Position, command: Command },
    /// Replace the whole state with this snapshot (state transfer from a peer).
    Restore(Snapshot),
}

/// The role a replica plays, as the protocol reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Electing or discovering (Zab LOOKING), or changing view.
    Electing,
    /// Following an established leader.
    Following,
    /// Leading an established epoch or view.
    Leading,
    /// Every replica proposes (Mencius).
    Proposer,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Electing => "electing",
            Role::Following => "following",
            Role::Leading => "leading",
            Role::Proposer => "proposer",
        }
    }
}

/// What a replica knows of its group's order, as front ends see it: whether it serves, who
/// leads, in which epoch. Protocol-neutral: Zab reports its epoch and leader, PFT its view and
/// primary, Mencius `Proposer` everywhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct View {
    pub role: Role,
    /// The replica the protocol names to lead. In leader-based protocols it orders commands; in
    /// every protocol it is the one that runs the state machine's singleton duties (session
    /// expiry, reaping), so a front end runs them where `leader == Some(me)`. `None` while the
    /// protocol names nobody (electing, or a multi-leader protocol without a duty holder).
    pub leader: Option<NodeId>,
    /// The protocol's epoch, view or term. Two views of one epoch never name two leaders.
    pub epoch: u64,
}

impl View {
    /// A replica that is electing and knows no leader.
    pub const fn electing(epoch: u64) -> Self {
        View {
            role: Role::Electing,
            leader: None,
            epoch,
        }
    }

    /// The replica is part of an established order and can serve clients: it leads or follows
    /// a named leader, or (multi-leader) proposes.
    pub fn serving(&self) -> bool {
        match self.role {
            Role::Leading | Role::Following => self.leader.is_some(),
            Role::Proposer => true,
            Role::Electing => false,
        }
    }
}

impl Default for View {
    fn default() -> Self {
        View::electing(0)
    }
}

/// Why a submission was refused on the spot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// No established leader is known; retry later or elsewhere.
    NoLeader,
    /// A bounded queue is full.
    Busy,
    /// A configuration change ([`Input::Reconfigure`]) was refused.
    Config(ConfigReject),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The replica's role, leader or epoch changed.
    View(View),
    /// A submitted command was refused and will not be broadcast from here.
    Rejected { id: u64, reason: Reject },
    /// The leader switched the broadcast mode: a variant fell back to its base protocol
    /// (`fallback: true`, e.g. ZabCT → Zab) or returned to the variant.
    Mode { fallback: bool },
    /// The configurations in force changed (a change logged, committed, or undone by a
    /// truncation): the driver talks to `members()` from now on. A replica that is a member of
    /// none has been removed.
    Membership(Membership),
}

/// Inputs a protocol core accepts. Every input comes with the current time
/// ([`Protocol::step`]'s `now_us`).
#[derive(Clone, Debug)]
pub enum Input<M> {
    /// The first input of every incarnation, before any other, at the driver's start time: a
    /// core issues here what its restore found it must (a recovery mark, its incarnation's
    /// hard state, the view change it was in) and starts its timers. `restore` cannot emit;
    /// this is where a core boots. [`replica::Replica`] sends it (on its own before the first
    /// other input, if the driver did not call [`replica::Replica::start`]).
    Start,
    /// Client commands submitted at this replica, in submission order: every command that was
    /// waiting when the driver was ready, bounded by [`BatchLimits`]. The core orders them as
    /// one batch (or, where it must, as several), never reordering them. One command alone is
    /// handed over at once: the driver never waits for company.
    Submit(Vec<Command>),
    /// A message from a peer. Channels are FIFO per connection; a broken connection may lose
    /// messages in flight (the core learns of it by [`Input::Disconnected`] or by its own timeouts).
    Message { from: NodeId, msg: M },
    /// The deadline the core last named ([`Protocol::deadline`]) has come. Drivers may wake a
    /// core early or more than once; a core checks its timers against the time it is given.
    Timeout,
    /// Every storage op with `seq <= upto` is durable.
    Durable { upto: u64 },
    /// The connection with `peer` broke; messages in flight may be lost.
    Disconnected { peer: NodeId },
    /// The state machine took this snapshot (covering only delivered commands); the core may
    /// drop its log behind it and serve it to lagging peers.
    Compact(Snapshot),
    /// Change the group's configuration (docs/membership.md). The core logs the new
    /// configuration with `command`, which the state machine receives like any other when it
    /// is delivered (ZooKeeper's reconfig transaction), and emits [`Event::Membership`] as the
    /// change takes effect; or it refuses with [`Event::Rejected`] and [`Reject::Config`].
    Reconfigure { command: Command, change: Change },
}

/// The output buffer of one step. Drivers reuse it: call [`Actions::clear`] between steps.
#[derive(Debug)]
pub struct Actions<M, R, H> {
    pub send: Vec<Envelope<M>>,
    pub persist: Vec<Persist<R, H>>,
    pub apply: Vec<Apply>,
    pub events: Vec<Event>,
}

impl<M, R, H> Default for Actions<M, R, H> {
    fn default() -> Self {
        Self {
            send: Vec::new(),
            persist: Vec::new(),
            apply: Vec::new(),
            events: Vec::new(),
        }
    }
}

impl<M, R, H> Actions<M, R, H> {
    pub fn clear(&mut self) {
        self.send.clear();
        self.persist.clear();
        self.apply.clear();
        self.events.clear();
    }
    pub fn is_empty(&self) -> bool {
        self.send.is_empty()
            && self.persist.is_empty()
            && self.apply.is_empty()
            && self.events.is_empty()
    }
}

/// The estimated size of a message on the wire, used by the simulator's bandwidth model.
pub trait WireSize {
    fn wire_size(&self) -> usize;
}

/// A short name of a message's type, for per-type counters and traces.
pub trait MessageKind {
    fn kind(&self) -> &'static str;
}

/// Membership of the cluster as seen by one replica, as the group was born: its voters
/// (`members`) and its learners (a family that changes its configuration online takes it as its
/// version-0 configuration and keeps the rest in its log: docs/membership.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    pub me: NodeId,
    /// Every voting member, `me` included unless it is a learner, sorted.
    pub members: Vec<NodeId>,
    /// Members that receive the log but never vote (ZooKeeper's observers), sorted; empty for
    /// the families that have none.
    pub learners: Vec<NodeId>,
}

impl Cluster {
    pub fn new(me: NodeId, members: Vec<NodeId>) -> Self {
        Self::with_learners(me, members, Vec::new())
    }
    pub fn with_learners(me: NodeId, mut members: Vec<NodeId>, mut learners: Vec<NodeId>) -> Self {
        members.sort_unstable();
        members.dedup();
        learners.sort_unstable();
        learners.dedup();
        learners.retain(|l| members.binary_search(l).is_err());
        assert!(
            members.contains(&me) || learners.contains(&me),
            "a replica must be a member of its cluster"
        );
        Self {
            me,
            members,
            learners,
        }
    }
    pub fn size(&self) -> usize {
        self.members.len()
    }
    /// The size of a strict majority of the voters.
    pub fn quorum(&self) -> usize {
        quorum::majority(self.members.len())
    }
    pub fn peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        let me = self.me;
        self.members.iter().copied().filter(move |&m| m != me)
    }
}

/// A replication protocol core.
pub trait Protocol: Sized {
    /// Protocol-specific tuning (timeouts, limits, variant switches).
    type Options: Clone + Debug;
    type Message: Clone + Debug + WireSize + MessageKind;
    type Record: LogRecord;
    type Hard: Clone + Debug + Default;

    /// Build a replica from its durable state (empty on first start). The state machine has
    /// already been restored from `durable.snapshot`; the core delivers from the slot after it.
    fn restore(
        cluster: Cluster,
        options: Self::Options,
        durable: DurableState<Self::Record, Self::Hard>,
        seed: u64,
    ) -> Self;

    /// Process one input at time `now_us` (never earlier than the time of the previous input).
    fn step(
        &mut self,
        now_us: TimeUs,
        input: Input<Self::Message>,
        out: &mut Actions<Self::Message, Self::Record, Self::Hard>,
    );

    /// When the core next needs [`Input::Timeout`] (quinn-proto's `poll_timeout`): `None` when
    /// no timer is running. Read after every step; a deadline in the past means "now".
    fn deadline(&self) -> Option<TimeUs>;

    /// The view as last reported (the latest [`Event::View`]).
    fn view(&self) -> View;

    /// The configurations in force, for a family that changes its configuration online
    /// (reported at [`Input::Start`] and on every change by [`Event::Membership`]); `None` for
    /// one whose members are fixed at birth (the [`Cluster`] it was restored with).
    fn membership(&self) -> Option<Membership> {
        None
    }

    /// Protocol-specific readings for observers (e.g. ZabCT's coin probability). Drivers may
    /// sample them; they never influence the protocol.
    fn gauges(&self) -> Vec<(&'static str, f64)> {
        Vec::new()
    }

    /// Whether the views of every live replica show a settled group: what the simulator's
    /// liveness checker waits for after the faults heal. The default is the leader-based rule
    /// ([`one_leader_followed_by_all`]); a multi-leader protocol says "every replica proposes".
    fn settled(views: &[View]) -> bool {
        one_leader_followed_by_all(views)
    }
}

/// The settled state of a leader-based protocol (Zab, Paxos): exactly one replica leads, every
/// other follows it, all in one epoch.
pub fn one_leader_followed_by_all(views: &[View]) -> bool {
    let Some(first) = views.first() else {
        return false;
    };
    views.iter().all(|v| {
        v.serving()
            && v.role != Role::Proposer
            && v.leader == first.leader
            && v.epoch == first.epoch
    }) && views.iter().filter(|v| v.role == Role::Leading).count() == 1
}

/// The settled state of a multi-leader protocol (Mencius): every replica proposes.
pub fn every_replica_proposes(views: &[View]) -> bool {
    !views.is_empty() && views.iter().all(|v| v.role == Role::Proposer)
}
