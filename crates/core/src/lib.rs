//! The protocol contract shared by every replication protocol of synod.
//!
//! A protocol core is a deterministic state machine. The driver (the simulator or the server)
//! feeds it [`Input`]s one at a time and carries out the [`Actions`] it returns:
//!
//! * **persist** each [`StorageOp`] in the order given; when the storage reports that every op up
//!   to sequence number `s` is durable, feed back [`Input::Durable`] with `upto = s`;
//! * **send** each [`Envelope`], but only once every storage op with sequence number
//!   `<= envelope.after_durable` is durable (0 means "no requirement"). This is the durability
//!   rule: a message that depends on a log write never leaves before that write is durable;
//! * **apply** each [`Apply`] to the replicated state machine, in order;
//! * observe the [`Event`]s (role changes, rejected submissions).
//!
//! The core never touches sockets, files, threads or clocks; time arrives in [`Input::Tick`] and
//! randomness from a seed handed to [`Protocol::restore`]. The same core therefore runs unchanged
//! in the simulator and in the server, and the same seed replays the same run.
//!
//! See `docs/contract.md` for how Zab, PFT (view-based Multi-Paxos) and Mencius map onto it.

use bytes::Bytes;
use std::fmt::Debug;

pub mod outbox;
pub mod quorum;
pub mod rng;
pub mod wire;

/// A replica's identity within a cluster. Ids are small positive integers (1-based).
pub type NodeId = u32;

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

/// A position in the total order. `slot` is dense (1, 2, 3, …) over the whole history; `tag` is
/// the protocol's own name for the position (a Zab zxid, a Paxos instance, a Mencius instance).
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

/// A record of the durable log. Every protocol's records name the slot they belong to, so that
/// snapshots can drop the records they cover and the checkers can ask what a node has logged.
pub trait LogRecord: Clone + Debug {
    fn slot(&self) -> u64;
    /// The command this record carries, if any (a Mencius skip or a Paxos no-op carries none).
    fn command_id(&self) -> Option<u64>;
}

/// One write to stable storage. Ops are applied in the order issued.
#[derive(Clone, Debug)]
pub enum StorageOp<R, H> {
    /// Replace the protocol's hard state (epochs, promises, votes) atomically.
    SetHard(H),
    /// Append records at the end of the log.
    Append(Vec<R>),
    /// Remove every record whose slot is greater than `after_slot`.
    Truncate { after_slot: u64 },
    /// Store `snapshot` and drop every record with slot `<= drop_through.slot`;
    /// `drop_through.slot <= snapshot.at.slot`. When `replace_log` is set, every record is
    /// dropped and the log restarts right after the snapshot (state transfer).
    Snapshot {
        snapshot: Snapshot,
        drop_through: Position,
        replace_log: bool,
    },
}

/// A storage op with its sequence number (strictly increasing per replica incarnation).
#[derive(Clone, Debug)]
pub struct Persist<R, H> {
    pub seq: u64,
    pub op: StorageOp<R, H>,
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

/// Why a submission was refused on the spot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// No established leader is known; retry later or elsewhere.
    NoLeader,
    /// A bounded queue is full.
    Busy,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The replica's role, leader or epoch/view changed.
    Role {
        role: Role,
        leader: Option<NodeId>,
        epoch: u64,
    },
    /// A submitted command was refused and will not be broadcast from here.
    Rejected { id: u64, reason: Reject },
    /// The leader switched the broadcast mode: a variant fell back to its base protocol
    /// (`fallback: true`, e.g. ZabCT → Zab) or returned to the variant.
    Mode { fallback: bool },
}

/// Inputs a protocol core accepts.
#[derive(Clone, Debug)]
pub enum Input<M> {
    /// A client command submitted at this replica.
    Submit(Command),
    /// A message from a peer. Channels are FIFO per connection; a broken connection may lose
    /// messages in flight (the core learns of it by [`Input::Disconnected`] or by its own timeouts).
    Message { from: NodeId, msg: M },
    /// The passage of time. Drivers tick at least every `tick_us` of the protocol's options.
    Tick { now_us: TimeUs },
    /// Every storage op with `seq <= upto` is durable.
    Durable { upto: u64 },
    /// The connection with `peer` broke; messages in flight may be lost.
    Disconnected { peer: NodeId },
    /// The state machine took this snapshot (covering only delivered commands); the core may
    /// drop its log behind it and serve it to lagging peers.
    Compact(Snapshot),
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

/// The durable state of one replica: what survives a crash. The simulator's disk and the
/// server's write-ahead log both reduce to this, and a core restarts from it.
#[derive(Clone, Debug)]
pub struct DurableState<R, H> {
    pub hard: H,
    pub snapshot: Option<Snapshot>,
    /// The position just before the first record (records are dense in slot after it).
    pub log_base: Position,
    pub records: Vec<R>,
}

impl<R: LogRecord, H: Default> Default for DurableState<R, H> {
    fn default() -> Self {
        Self {
            hard: H::default(),
            snapshot: None,
            log_base: Position::default(),
            records: Vec::new(),
        }
    }
}

impl<R: LogRecord, H: Clone> DurableState<R, H> {
    /// Apply one op, exactly as stable storage must.
    pub fn apply(&mut self, op: &StorageOp<R, H>) {
        match op {
            StorageOp::SetHard(h) => self.hard = h.clone(),
            StorageOp::Append(rs) => self.records.extend(rs.iter().cloned()),
            StorageOp::Truncate { after_slot } => {
                let keep = self.records.partition_point(|r| r.slot() <= *after_slot);
                self.records.truncate(keep);
            }
            StorageOp::Snapshot {
                snapshot,
                drop_through,
                replace_log,
            } => {
                if *replace_log {
                    self.records.clear();
                    self.log_base = snapshot.at;
                } else {
                    let cut = self
                        .records
                        .partition_point(|r| r.slot() <= drop_through.slot);
                    self.records.drain(..cut);
                    if drop_through.slot > self.log_base.slot {
                        self.log_base = *drop_through;
                    }
                }
                self.snapshot = Some(snapshot.clone());
            }
        }
    }

    /// The slot of the last record, or of the log base when the log is empty.
    pub fn last_slot(&self) -> u64 {
        self.records.last().map_or(self.log_base.slot, |r| r.slot())
    }

    /// Does this durable state hold the command `command_id` at `slot`, either as a log record
    /// or inside a snapshot that covers the slot? (The snapshot's content is checked separately
    /// by the simulator, which compares every restored snapshot with the global history.)
    pub fn holds(&self, slot: u64, command_id: u64) -> bool {
        if self.snapshot.as_ref().is_some_and(|s| s.at.slot >= slot) {
            return true;
        }
        if slot <= self.log_base.slot {
            return false;
        }
        let idx = (slot - self.log_base.slot - 1) as usize;
        match self.records.get(idx) {
            Some(r) if r.slot() == slot => r.command_id() == Some(command_id),
            // Records are dense in the common case; fall back to a search otherwise.
            _ => self
                .records
                .iter()
                .any(|r| r.slot() == slot && r.command_id() == Some(command_id)),
        }
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

/// Membership of the cluster as seen by one replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    pub me: NodeId,
    /// Every member, `me` included, sorted.
    pub members: Vec<NodeId>,
}

impl Cluster {
    pub fn new(me: NodeId, mut members: Vec<NodeId>) -> Self {
        members.sort_unstable();
        members.dedup();
        assert!(
            members.contains(&me),
            "a replica must be a member of its cluster"
        );
        Self { me, members }
    }
    pub fn size(&self) -> usize {
        self.members.len()
    }
    /// The size of a strict majority.
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

    /// Process one input.
    fn step(
        &mut self,
        input: Input<Self::Message>,
        out: &mut Actions<Self::Message, Self::Record, Self::Hard>,
    );

    /// The role as last reported.
    fn role(&self) -> Role;

    /// The smallest tick interval this core needs.
    fn tick_us(&self) -> TimeUs;

    /// Protocol-specific readings for observers (e.g. ZabCT's coin probability). Drivers may
    /// sample them; they never influence the protocol.
    fn gauges(&self) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
}
