//! PFT: the Paxos-based fault tolerance framework of Chai's thesis (pft.md), a view-based
//! Multi-Paxos, as a sans-IO core on synod's contract.
//!
//! One file per mechanism (docs/protocols/paxos.md maps every step of the thesis here):
//!
//! * **Normal case** ([`normal`], pft.md §1.4): [`Paxos::on_submit`] / [`Paxos::on_forward`]
//!   (REQUEST), [`Paxos::propose`] (ACCEPT, with batching §3.1), [`Paxos::on_accept`] (log A,
//!   then ACCEPTACK), [`Paxos::on_accept_ack`] + [`Paxos::advance_commit`] (certificate, COMMIT),
//!   [`Paxos::on_commit`] and [`Paxos::execute`] (the Inorder Invoker: strictly in order, holes
//!   block).
//! * **Checkpoints** ([`checkpoint`], §3.2): [`Paxos::on_compact`] (CHECKPOINT),
//!   [`Paxos::on_checkpoint`] (stable at f + 1, garbage collection), and state transfer (§3.5):
//!   [`Paxos::on_snap_request`], [`Paxos::on_snap_chunk`], [`Paxos::install`].
//! * **Catch-up** ([`catchup`], §3.3): MBQ ([`Paxos::mbq_tick`]) and PBQ
//!   ([`Paxos::pbq_query`]), [`Paxos::on_query`], [`Paxos::on_response_order`].
//! * **View change** ([`view_change`], §3.4 with the errata of §6.1):
//!   [`Paxos::start_view_change`] (VIEWCHANGE = the phase-1 promise), [`Paxos::on_view_change`],
//!   [`Paxos::try_new_view`] + [`Paxos::reissue`] (NEWVIEW up to the highest accepted `n`,
//!   highest view wins, nulls for holes), [`Paxos::on_new_view`].
//! * **Recovery** ([`recovery`]): a replica that lost its disk asks a quorum of others before it
//!   acknowledges anything again.
//! * **Timers** ([`timers`]): heartbeat, batch timer, the adaptive view-change timer, MBQ,
//!   retries — exact deadlines.

pub mod catchup;
pub mod checkpoint;
pub mod msg;
pub mod normal;
pub mod recovery;
pub mod timers;
pub mod view_change;

pub use msg::{Accepted, Hard, Msg, Order};
use std::collections::{BTreeMap, HashMap, VecDeque};
use synod_core::{
    rng::CoreRng, Actions, Cluster, Command, Dest, DurableState, Envelope, Event, Input, NodeId,
    Protocol, Role, Snapshot, StorageOp, TimeUs, View,
};

pub type PaxosActions = Actions<Msg, Accepted, Hard>;

/// Deliberately broken behaviours, used only by tests to prove that the simulator's checkers
/// catch unsafe protocols (the errata of pft.md §6.1). Never set in production.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// The primary counts an ACCEPTACK whatever view it names (the thesis's `<ACCEPTACK, n, i>`).
    AckWithoutView,
    /// NEWVIEW stops at the highest *committed* sequence number reported (erratum a).
    NewViewToCommitted,
    /// NEWVIEW takes the accept from the lowest view (erratum b).
    LowerViewWins,
    /// A replica keeps accepting in its old view after sending VIEWCHANGE (§6.1.4).
    AcceptAfterViewChange,
    /// An A record learned by catch-up is executed as if committed (§6.1.14).
    ExecuteCatchUpAccept,
}

/// How the primary forms batches (pft.md §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batching {
    /// No tuning: at most `window` batches proposed and uncommitted; whatever waits when a slot
    /// frees leaves as one batch (up to `max_batch`), so batches grow with load.
    Adaptive { window: usize },
    /// The thesis's rule: a batch leaves when it holds `size` commands or `timer_us` after its
    /// first command arrived, whichever comes first; the timer restarts at each flush.
    Fixed { size: usize, timer_us: TimeUs },
}

/// How a lagging replica catches up (pft.md §3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CatchUp {
    /// Multicasting-based query: every replica reports its state periodically.
    Mbq,
    /// Primary-based query: a replica that sees a hole asks the primary.
    Pbq,
    /// Neither: a lagging replica waits for a stable checkpoint and asks for a state transfer.
    None,
}

impl CatchUp {
    pub fn name(self) -> &'static str {
        match self {
            CatchUp::Mbq => "mbq",
            CatchUp::Pbq => "pbq",
            CatchUp::None => "none",
        }
    }
}

/// Reads the client of a command from its payload (the state machine supplies it), for the
/// rule "at most one request per client per batch".
pub type ClientOf = fn(&Command) -> Option<u64>;

#[derive(Clone, Debug)]
pub struct Options {
    /// Primary → backups heartbeat (a repeated COMMIT).
    pub heartbeat_us: TimeUs,
    /// The view-change timer's first value; it then adapts to the measured ordering latency
    /// (never below three heartbeats) and doubles for each view that fails to install.
    pub view_change_timeout_us: TimeUs,
    pub view_change_timeout_max_us: TimeUs,
    /// Adapt the view-change timer to the ordering latency (§5.6.1); off: the fixed value.
    pub adaptive_timeout: bool,
    pub batching: Batching,
    /// Commands per batch in adaptive mode (bounded by `msg::MAX_BATCH`).
    pub max_batch: usize,
    /// One request per client per batch (§3.1), when the state machine names clients.
    pub client_of: Option<ClientOf>,
    pub catch_up: CatchUp,
    /// MBQ's reporting period (100 ms in the thesis).
    pub mbq_period_us: TimeUs,
    /// MBQ: a status report is answered when the reporter is this many orders behind.
    pub mbq_threshold: u64,
    /// Orders per RESPONSEORDER.
    pub catch_up_max_orders: usize,
    /// Snapshot bytes per state-transfer chunk.
    pub snap_chunk_bytes: usize,
    /// Commands waiting at one replica (queued at the primary, held by a backup during a view
    /// change); beyond it submissions are refused (`Busy`).
    pub max_queued: usize,
    /// Batches the primary keeps proposed and uncommitted (fixed batching); beyond it
    /// commands wait.
    pub max_inflight: u64,
    /// Executed command ids the primary remembers to drop duplicates.
    pub dedup_memory: usize,
    /// Crash a replica whose checkpoint digest differs from a peer's at the same point
    /// (divergent state: only for state machines whose snapshots are byte-deterministic).
    pub check_digests: bool,
    pub bug: Option<Bug>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            heartbeat_us: 50_000,
            view_change_timeout_us: 400_000,
            view_change_timeout_max_us: 5_000_000,
            adaptive_timeout: true,
            batching: Batching::Adaptive { window: 8 },
            max_batch: 512,
            client_of: None,
            catch_up: CatchUp::Pbq,
            mbq_period_us: 100_000,
            mbq_threshold: 1,
            catch_up_max_orders: 256,
            snap_chunk_bytes: 256 << 10,
            max_queued: 10_000,
            max_inflight: 4_096,
            dedup_memory: 1 << 18,
            check_digests: false,
            bug: None,
        }
    }
}

/// Where a replica stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// In the installed view (`promised == installed`): primary or backup.
    Normal,
    /// Promised `hard.promised > hard.installed`: only VIEWCHANGE, NEWVIEW, CHECKPOINT and
    /// catch-up are processed (§3.4).
    ViewChange,
    /// Lost its disk: acknowledges nothing until a quorum of others has answered.
    Recovering,
}

/// One sequence number's order as this replica holds it.
#[derive(Clone, Debug)]
pub(crate) struct Slot {
    pub view: u64,
    pub commands: Vec<Command>,
    pub chosen: bool,
    /// The storage op that wrote it (0: restored from disk, durable).
    pub seq: u64,
}

/// A pre-vote under way: the view proposed, when the question was last sent, and who agreed
/// (with the view each would move to).
pub(crate) type PreVote = (u64, TimeUs, Vec<(NodeId, u64)>);

/// A state transfer under way: the snapshot being assembled.
#[derive(Debug)]
pub(crate) struct Transfer {
    pub from: NodeId,
    /// At least this many whole batches must be covered.
    pub need_n: u64,
    pub at: Option<synod_core::Position>,
    pub total: u64,
    pub buf: bytes::BytesMut,
    pub asked_at: TimeUs,
}

pub struct Paxos {
    pub(crate) cluster: Cluster,
    pub(crate) opt: Options,
    pub(crate) rng: CoreRng,
    pub(crate) now: TimeUs,
    pub(crate) hard: Hard,
    pub(crate) status: Status,
    pub(crate) reported: View,
    /// Storage ops issued (synod_core::kit::issuer) and reported durable.
    pub(crate) issuer: synod_core::kit::issuer::Issuer,
    pub(crate) durable_upto: u64,
    /// Ops to issue at the first step (restore cannot emit).
    pub(crate) boot: Vec<StorageOp<Accepted, Hard>>,
    /// The log above `base`: orders by sequence number.
    pub(crate) log: BTreeMap<u64, Slot>,
    /// No order at or below `base` is held (covered by this replica's snapshot).
    pub(crate) base: u64,
    /// Execution: every batch up to `exec_n` delivered, and `left` commands of batch
    /// `exec_n + 1` still to deliver when a snapshot ended inside it (0: from its start).
    pub(crate) exec_n: u64,
    pub(crate) resume_left: Option<usize>,
    /// The dense slot of the last delivered command.
    pub(crate) slot: u64,
    /// The primary's COMMIT point as last heard: (view, upto).
    pub(crate) commit_heard: (u64, u64),
    // ---- primary ----
    pub(crate) next_n: u64,
    /// Certificates: who acknowledged each order proposed in the installed view.
    pub(crate) acks: BTreeMap<u64, Vec<NodeId>>,
    /// When each in-flight order was proposed (for the adaptive timer and the stuck check).
    pub(crate) proposed_at: BTreeMap<u64, TimeUs>,
    /// Every order up to here is chosen (as the primary knows).
    pub(crate) commit_upto: u64,
    pub(crate) queue: VecDeque<Command>,
    pub(crate) batch_since: Option<TimeUs>,
    pub(crate) next_heartbeat: TimeUs,
    /// Forwards accepted per backup in this view (synod_core::kit::forward).
    pub(crate) forwards: synod_core::kit::forward::Taken,
    /// The NEWVIEW this primary sent, for replicas that ask.
    pub(crate) new_view_msg: Option<Msg>,
    // ---- duplicates ----
    /// Ids in the log above the execution point → their sequence number.
    pub(crate) ordered: HashMap<u64, u64>,
    /// Ids executed recently (synod_core::kit::dedup).
    pub(crate) done: synod_core::kit::dedup::Window,
    /// Ids queued at the primary → whether a backup forwarded them (else submitted here).
    pub(crate) queued_ids: HashMap<u64, bool>,
    // ---- backup ----
    /// This incarnation's forwards to its primary, numbered.
    pub(crate) forwarding: synod_core::kit::forward::Numbering,
    /// Commands submitted here while no primary could take them (a view change).
    pub(crate) held: VecDeque<Command>,
    pub(crate) last_heard_primary: TimeUs,
    /// Accepted, not yet known chosen: since when (the oldest bounds the view-change timer).
    pub(crate) waiting_since: BTreeMap<u64, TimeUs>,
    pub(crate) need_view_sent: (u64, TimeUs),
    pub(crate) suspect: Option<PreVote>,
    // ---- view change ----
    /// The last VIEWCHANGE with orders sent for a view led by another replica: (view, when,
    /// the wait before a beacon that lacks it gets it sent again; doubled at each resend).
    pub(crate) report_sent: (u64, TimeUs, TimeUs),
    pub(crate) vc_since: TimeUs,
    pub(crate) vc_timeout: TimeUs,
    pub(crate) reports: BTreeMap<NodeId, msg::ViewReport>,
    /// Smoothed ordering latency (µs) for the adaptive timer.
    pub(crate) latency_us: Option<u64>,
    // ---- catch-up ----
    pub(crate) catch_up_since: Option<TimeUs>,
    pub(crate) next_query: TimeUs,
    pub(crate) next_mbq: TimeUs,
    // ---- checkpoints ----
    /// This replica's latest snapshots (at most two: the one being served and the newest).
    pub(crate) snaps: VecDeque<Snapshot>,
    pub(crate) peer_points: BTreeMap<NodeId, u64>,
    pub(crate) digests: BTreeMap<u64, (u64, NodeId)>,
    pub(crate) stable: u64,
    pub(crate) transfer: Option<Transfer>,
    // ---- recovery ----
    pub(crate) recovery: Option<recovery::Recovery>,
    /// Counters for observers.
    pub(crate) counters: Counters,
}

/// What the experiments read (gauges).
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub view_changes: u64,
    pub catch_ups: u64,
    pub catch_up_orders: u64,
    /// Time spent in catch-up episodes that closed their hole (µs, summed).
    pub catch_up_us: u64,
    pub state_transfers: u64,
    pub batches: u64,
    pub batched_commands: u64,
}

impl Paxos {
    /// The primary of view `v`: `v mod N` (pft.md §3.4), over the sorted members.
    pub fn primary_of(&self, v: u64) -> NodeId {
        let m = &self.cluster.members;
        m[(v % m.len() as u64) as usize]
    }

    pub fn me(&self) -> NodeId {
        self.cluster.me
    }

    pub fn is_primary(&self) -> bool {
        self.status == Status::Normal && self.primary_of(self.hard.installed) == self.me()
    }

    pub fn hard(&self) -> Hard {
        self.hard
    }

    pub fn status(&self) -> Status {
        self.status
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The highest sequence number of every batch delivered here.
    pub fn executed(&self) -> u64 {
        self.exec_n
    }

    pub(crate) fn persist(&mut self, op: StorageOp<Accepted, Hard>, out: &mut PaxosActions) -> u64 {
        self.issuer.issue(op, &mut out.persist)
    }

    pub(crate) fn set_hard(&mut self, out: &mut PaxosActions) -> u64 {
        let h = self.hard;
        self.persist(StorageOp::SetHard(h), out)
    }

    pub(crate) fn send(&self, to: Dest, msg: Msg, after: u64, out: &mut PaxosActions) {
        out.send.push(Envelope {
            to,
            msg,
            after_durable: after,
        });
    }

    /// Report the view if it changed.
    pub(crate) fn report_view(&mut self, out: &mut PaxosActions) {
        let v = self.compute_view();
        if v != self.reported {
            self.reported = v;
            out.events.push(Event::View(v));
        }
    }

    fn compute_view(&self) -> View {
        match self.status {
            // A backup whose primary has gone silent (a pre-vote is running) is not part of an
            // established order until it hears its primary or a new view installs: its clients
            // should go elsewhere (or, cut off, to read-only mode) rather than wait on writes
            // that cannot be ordered. Only the view reported changes, not the protocol state.
            Status::Normal if self.suspect.is_some() && !self.is_primary() => {
                View::electing(self.hard.promised)
            }
            Status::Normal => {
                let p = self.primary_of(self.hard.installed);
                View {
                    role: if p == self.me() {
                        Role::Leading
                    } else {
                        Role::Following
                    },
                    leader: Some(p),
                    epoch: self.hard.installed,
                }
            }
            Status::ViewChange | Status::Recovering => View::electing(self.hard.promised),
        }
    }

    /// Put an order in the log at `n` (replacing what is there), keeping the duplicate index.
    pub(crate) fn put_slot(&mut self, n: u64, slot: Slot) {
        if let Some(old) = self.log.get(&n) {
            for c in &old.commands {
                if self.ordered.get(&c.id) == Some(&n) {
                    self.ordered.remove(&c.id);
                }
            }
        }
        if n > self.exec_n {
            for c in &slot.commands {
                self.ordered.insert(c.id, n);
            }
        }
        self.log.insert(n, slot);
    }

    /// Log orders with one `Append` (A records: view and batch; the chosen mark stays in
    /// memory) and hold them in the log. Returns the storage op's sequence number (0 when
    /// there is nothing to log).
    pub(crate) fn log_orders(&mut self, orders: Vec<Order>, out: &mut PaxosActions) -> u64 {
        if orders.is_empty() {
            return 0;
        }
        let records = orders
            .iter()
            .map(|o| Accepted {
                n: o.n,
                view: o.view,
                commands: o.commands.clone(),
            })
            .collect();
        let s = self.persist(StorageOp::Append(records), out);
        for o in orders {
            self.put_slot(
                o.n,
                Slot {
                    view: o.view,
                    commands: o.commands,
                    chosen: o.chosen,
                    seq: s,
                },
            );
        }
        s
    }

    /// Whether the primary must not order `id`: it is in the log, executed recently, or queued.
    pub(crate) fn duplicate(&self, id: u64) -> bool {
        self.ordered.contains_key(&id)
            || self.done.contains(id)
            || self.queued_ids.contains_key(&id)
    }

    pub(crate) fn remember_done(&mut self, id: u64) {
        self.ordered.remove(&id);
        self.done.insert(id);
    }

    /// The orders this replica holds above its base, as state records.
    pub(crate) fn orders_above(&self, from: u64, limit: usize) -> Vec<Order> {
        self.log
            .range(from.max(self.base + 1)..)
            .take(limit)
            .map(|(&n, s)| Order {
                n,
                view: s.view,
                chosen: s.chosen,
                commands: s.commands.clone(),
            })
            .collect()
    }

    /// The first step of an incarnation ([`Input::Start`]).
    fn boot(&mut self, out: &mut PaxosActions) {
        let ops = std::mem::take(&mut self.boot);
        for op in ops {
            self.persist(op, out);
        }
        match self.status {
            Status::Recovering => self.start_recovery(out),
            Status::ViewChange => {
                // Keep the promise made before the crash, and repeat the VIEWCHANGE.
                self.vc_since = self.now;
                self.send_view_change(out);
            }
            Status::Normal => {
                if self.hard.installed == 0 {
                    // View 0 names no primary: the first view is installed by a view change.
                    self.start_view_change(1, out);
                } else if self.primary_of(self.hard.installed) == self.me() {
                    // A restarted primary cannot know which ACCEPTs of its view left before
                    // the crash (it sends them in parallel with its own write): it never leads
                    // that view again.
                    let v = self.hard.promised + 1;
                    self.start_view_change(v, out);
                } else {
                    self.last_heard_primary = self.now;
                }
            }
        }
        self.report_view(out);
    }
}

impl Protocol for Paxos {
    type Options = Options;
    type Message = Msg;
    type Record = Accepted;
    type Hard = Hard;

    fn restore(
        cluster: Cluster,
        opt: Options,
        durable: DurableState<Accepted, Hard>,
        seed: u64,
    ) -> Self {
        let mut rng = CoreRng::new(seed);
        let nonce = rng.next_u64();
        let mut p = Paxos {
            cluster,
            rng,
            now: 0,
            hard: durable.hard,
            status: Status::Normal,
            reported: View::default(),
            issuer: Default::default(),
            durable_upto: 0,
            boot: Vec::new(),
            log: BTreeMap::new(),
            base: 0,
            exec_n: 0,
            resume_left: None,
            slot: 0,
            commit_heard: (0, 0),
            next_n: 1,
            acks: BTreeMap::new(),
            proposed_at: BTreeMap::new(),
            commit_upto: 0,
            queue: VecDeque::new(),
            batch_since: None,
            next_heartbeat: 0,
            forwards: Default::default(),
            new_view_msg: None,
            ordered: HashMap::new(),
            done: synod_core::kit::dedup::Window::new(opt.dedup_memory),
            queued_ids: HashMap::new(),
            forwarding: synod_core::kit::forward::Numbering::new(nonce),
            held: VecDeque::new(),
            last_heard_primary: 0,
            waiting_since: BTreeMap::new(),
            need_view_sent: (0, 0),
            suspect: None,
            report_sent: (0, 0, 0),
            vc_since: 0,
            vc_timeout: opt.view_change_timeout_us,
            reports: BTreeMap::new(),
            latency_us: None,
            catch_up_since: None,
            next_query: 0,
            next_mbq: 0,
            snaps: VecDeque::new(),
            peer_points: BTreeMap::new(),
            digests: BTreeMap::new(),
            stable: 0,
            transfer: None,
            recovery: None,
            counters: Counters::default(),
            opt,
        };
        if let Some(s) = &durable.snapshot {
            let (n_done, left) = checkpoint::point_of(s.at);
            p.exec_n = n_done;
            p.resume_left = left;
            p.slot = s.at.slot;
            p.base = n_done;
            p.snaps.push_back(s.clone());
        }
        for (&n, r) in &durable.records {
            if n <= p.base {
                continue;
            }
            p.put_slot(
                n,
                Slot {
                    view: r.view,
                    commands: r.commands.clone(),
                    chosen: false,
                    seq: 0,
                },
            );
        }
        p.next_n = p.log.keys().next_back().map_or(p.exec_n, |&n| n) + 1;
        if durable.lost || p.hard.recovering {
            p.status = Status::Recovering;
            p.hard.recovering = true;
            p.boot.push(StorageOp::SetHard(p.hard));
        } else if p.hard.promised > p.hard.installed {
            p.status = Status::ViewChange;
        }
        p
    }

    fn step(&mut self, now_us: TimeUs, input: Input<Msg>, out: &mut PaxosActions) {
        self.now = self.now.max(now_us);
        match input {
            Input::Start => self.boot(out),
            Input::Submit(commands) => self.on_submit(commands, out),
            Input::Message { from, msg } => self.on_message(from, msg, out),
            Input::Timeout => self.on_timeout(out),
            Input::Durable { upto } => self.on_durable(upto, out),
            Input::Disconnected { peer } => self.on_disconnected(peer, out),
            Input::Compact(s) => self.on_compact(s, out),
            // Online configuration change is Zab's so far (docs/membership.md).
            Input::Reconfigure { command, .. } => out.events.push(synod_core::Event::Rejected {
                id: command.id,
                reason: synod_core::Reject::Config(synod_core::ConfigReject::Unsupported),
            }),
        }
        self.report_view(out);
    }

    fn deadline(&self) -> Option<TimeUs> {
        self.next_deadline()
    }

    fn view(&self) -> View {
        self.reported
    }

    fn gauges(&self) -> Vec<(&'static str, f64)> {
        let c = self.counters;
        vec![
            ("paxos_view_changes", c.view_changes as f64),
            ("paxos_catch_ups", c.catch_ups as f64),
            ("paxos_catch_up_orders", c.catch_up_orders as f64),
            ("paxos_catch_up_us", c.catch_up_us as f64),
            ("paxos_state_transfers", c.state_transfers as f64),
            (
                "paxos_batch_size",
                if c.batches == 0 {
                    0.0
                } else {
                    c.batched_commands as f64 / c.batches as f64
                },
            ),
            ("paxos_vc_timeout_ms", self.base_timeout() as f64 / 1000.0),
        ]
    }
}

impl Paxos {
    fn on_message(&mut self, from: NodeId, msg: Msg, out: &mut PaxosActions) {
        if from == self.me() || !self.cluster.members.contains(&from) {
            return;
        }
        if self.status == Status::Recovering {
            self.recovering_message(from, msg, out);
            return;
        }
        match msg {
            Msg::Forward {
                view,
                nonce,
                seq,
                commands,
            } => self.on_forward(from, view, (nonce, seq), commands, out),
            Msg::Accept { view, n, commands } => self.on_accept(from, view, n, commands, out),
            Msg::AcceptAck { view, n } => self.on_accept_ack(from, view, n, out),
            Msg::Commit { view, upto } => self.on_commit(from, view, upto, out),
            Msg::Checkpoint { n, slot, digest } => self.on_checkpoint(from, n, slot, digest, out),
            Msg::QueryMulticast {
                lower,
                upper,
                executed,
            } => self.on_query_multicast(from, lower, upper, executed, out),
            Msg::QueryPrimary { expected, received } => {
                self.on_query_primary(from, expected, received, out)
            }
            Msg::ResponseOrder { base, orders } => self.on_response_order(from, base, orders, out),
            Msg::ViewChange {
                view,
                executed,
                stable,
                orders,
            } => self.on_view_change(
                from,
                msg::ViewReport {
                    view,
                    executed,
                    stable,
                    orders,
                },
                out,
            ),
            Msg::NewView { view, base, orders } => self.on_new_view(from, view, base, orders, out),
            Msg::NeedView { view } => self.on_need_view(from, view, out),
            Msg::Collecting { view, have } => self.on_collecting(from, view, have, out),
            Msg::Suspect { view } => self.on_suspect(from, view, out),
            Msg::SuspectAck { view } => self.on_suspect_ack(from, view, out),
            Msg::SnapRequest { n, at, offset } => self.on_snap_request(from, n, at, offset, out),
            Msg::SnapChunk {
                at,
                total,
                offset,
                data,
            } => self.on_snap_chunk(from, at, total, offset, data, out),
            Msg::Recover { nonce } => self.on_recover(from, nonce, out),
            Msg::RecoverReply { .. } => {}
        }
    }

    fn on_durable(&mut self, upto: u64, out: &mut PaxosActions) {
        assert!(upto <= self.issuer.last(), "durable beyond what was issued");
        self.durable_upto = self.durable_upto.max(upto);
        if self.status == Status::Recovering {
            self.recovery_durable(out);
            return;
        }
        if self.is_primary() {
            self.own_acks(out);
        }
        self.execute(out);
    }

    fn on_disconnected(&mut self, peer: NodeId, out: &mut PaxosActions) {
        if self.transfer.as_ref().is_some_and(|t| t.from == peer) {
            // Resume at once from another replica, at the offset reached.
            self.retry_transfer(out);
        }
    }
}

#[cfg(test)]
mod tests;
