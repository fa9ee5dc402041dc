//! The simulated world: N replicas of one protocol core, a network, disks, clients and a fault
//! schedule, all on virtual time in one thread, driven by one seeded RNG.
//!
//! Every replica runs through [`synod_core::replica::Replica`], the same carry-out the server
//! uses; this module supplies its environment ([`SimEnv`]): a simulated disk, network, state
//! machine and the checkers. A replica is woken at the deadline its core names, never on a
//! fixed tick.
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | the event loop, replicas, their environment, final checks |
//! | `net.rs` | links: latency, bandwidth, FIFO, partitions, broken connections |
//! | `disk.rs` | group commit and fsync latency |
//! | `clients.rs` | closed-loop clients and the per-replica submit queue |
//! | `nemesis.rs` | injecting and healing faults, and settling after the last one |

mod clients;
mod disk;
mod nemesis;
mod net;

use crate::check::{Checker, History};
use crate::faults::{FaultKind, Schedule};
use crate::{Report, SimConfig};
use bytes::Bytes;
use clients::Client;
use hdrhistogram::Histogram;
use net::Link;
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt::Write as _;
use synod_core::replica::{Env, Replica};
use synod_core::{
    Apply, Cluster, Command, DurableState, Envelope, Event, Input, MessageKind, NodeId, Persist,
    Protocol, Role, Snapshot, TimeUs,
};

type Durable<P> = DurableState<<P as Protocol>::Record, <P as Protocol>::Hard>;
type Op<P> = Persist<<P as Protocol>::Record, <P as Protocol>::Hard>;

enum Ev<M> {
    Message {
        from: usize,
        to: usize,
        generation: u64,
        msg: M,
    },
    /// A replica's deadline.
    Timer {
        node: usize,
        incarnation: u64,
        at: TimeUs,
    },
    /// Hand the commands waiting at a replica to its core (one batch).
    Flush {
        node: usize,
        incarnation: u64,
    },
    DiskDone {
        node: usize,
        incarnation: u64,
        upto: u64,
    },
    Client {
        client: usize,
        attempt: u64,
    },
    /// After healing: is the cluster settled?
    Monitor,
    Fault(usize),
    Heal(usize),
    HealAll,
    Restart(usize),
}

struct Scheduled<M> {
    at: TimeUs,
    seq: u64,
    ev: Ev<M>,
}
impl<M> PartialEq for Scheduled<M> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<M> Eq for Scheduled<M> {}
impl<M> PartialOrd for Scheduled<M> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<M> Ord for Scheduled<M> {
    fn cmp(&self, o: &Self) -> Ordering {
        // BinaryHeap is a max-heap: reverse for earliest first; seq breaks ties (FIFO).
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// The replicated state machine of the simulation: the sequence of command ids it applied.
#[derive(Clone, Default)]
struct Machine {
    ids: Vec<u64>,
    last_tag: u64,
    last_snapshot: u64,
}

impl Machine {
    fn snapshot(&self) -> Snapshot {
        let mut data = Vec::with_capacity(self.ids.len() * 8);
        for id in &self.ids {
            data.extend_from_slice(&id.to_le_bytes());
        }
        Snapshot {
            at: synod_core::Position {
                slot: self.ids.len() as u64,
                tag: self.last_tag,
            },
            data: Bytes::from(data),
        }
    }
    fn restore(s: &Snapshot) -> Self {
        let ids: Vec<u64> = s
            .data
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        Machine {
            last_snapshot: ids.len() as u64,
            ids,
            last_tag: s.at.tag,
        }
    }
}

struct Node<P: Protocol> {
    id: NodeId,
    replica: Option<Replica<P>>,
    incarnation: u64,
    durable: Durable<P>,
    /// Ops waiting for the next fsync, and the ops of the fsync in progress.
    disk_queue: Vec<Op<P>>,
    disk_busy: Vec<Op<P>>,
    /// Commands submitted here and not yet handed to the core.
    submits: VecDeque<Command>,
    flush_pending: bool,
    /// The time of the timer event scheduled for this replica, if any.
    timer_at: Option<TimeUs>,
    machine: Machine,
    role: Role,
    leader: Option<NodeId>,
    epoch: u64,
    slow_net: u32,
    slow_disk: u32,
    /// Crashed for good when the faults heal (to test a cluster that lost replicas).
    stays_down: bool,
}

impl<P: Protocol> Node<P> {
    /// A crash or a start: everything not durable is gone, and events of the previous
    /// incarnation (disk completions, timers, flushes) no longer apply.
    fn new_incarnation(&mut self) {
        self.incarnation += 1;
        self.disk_queue.clear();
        self.disk_busy.clear();
        self.submits.clear();
        self.flush_pending = false;
        self.timer_at = None;
        self.role = Role::Electing;
    }
}

pub struct World<P: Protocol> {
    cfg: SimConfig<P::Options>,
    rng: Xoshiro256PlusPlus,
    now: TimeUs,
    seq: u64,
    queue: BinaryHeap<Scheduled<P::Message>>,
    nodes: Vec<Node<P>>,
    links: Vec<Link>,
    clients: Vec<Client>,
    schedule: Schedule,
    history: History,
    next_command: u64,
    payload: Bytes,
    healed_at: Option<TimeUs>,
    stable_at: Option<TimeUs>,
    tracked_left: u64,
    workload_end: TimeUs,
    /// The (leader, epoch) every live replica agrees on, and since when.
    settling: Option<((Option<NodeId>, u64), TimeUs)>,
    tracked_sent: u64,
    trace: Option<String>,
    report: Report,
    latency: Histogram<u64>,
    latency_leader: Histogram<u64>,
    latency_follower: Histogram<u64>,
    events: u64,
}

const MAX_EVENTS: u64 = 50_000_000;
const OUTBOX_LIMIT: usize = 1_000_000;
/// How often the settling of the cluster is checked after the faults heal.
const MONITOR_US: TimeUs = 5_000;

fn mix(a: u64, b: u64) -> u64 {
    // splitmix64 of a combination: independent seeds per node incarnation.
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl<P: Protocol> World<P> {
    pub fn new(cfg: SimConfig<P::Options>) -> Self {
        let n = cfg.nodes;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(cfg.seed);
        let schedule = Schedule::generate(&mut rng, &cfg);
        let nodes = (0..n)
            .map(|i| Node {
                id: i as NodeId + 1,
                replica: None,
                incarnation: 0,
                durable: DurableState::default(),
                disk_queue: Vec::new(),
                disk_busy: Vec::new(),
                submits: VecDeque::new(),
                flush_pending: false,
                timer_at: None,
                machine: Machine::default(),
                role: Role::Electing,
                leader: None,
                epoch: 0,
                slow_net: 1,
                slow_disk: 1,
                stays_down: i < cfg.stay_down,
            })
            .collect();
        let clients = (0..cfg.workload.clients)
            .map(|c| Client::new(c % n))
            .collect();
        let payload = Bytes::from(vec![0xA5u8; cfg.workload.payload_bytes]);
        let trace = cfg.trace.then(String::new);
        World {
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            nodes,
            links: vec![Link::default(); n * n],
            clients,
            schedule,
            history: History::with_disabled(cfg.disabled.clone()),
            next_command: 1,
            payload,
            healed_at: None,
            stable_at: None,
            tracked_left: cfg.workload.liveness_commands,
            workload_end: TimeUs::MAX,
            settling: None,
            tracked_sent: 0,
            trace,
            report: Report::default(),
            latency: Histogram::new(3).expect("histogram"),
            latency_leader: Histogram::new(3).expect("histogram"),
            latency_follower: Histogram::new(3).expect("histogram"),
            events: 0,
            cfg,
        }
    }

    fn at(&mut self, at: TimeUs, ev: Ev<P::Message>) {
        self.seq += 1;
        self.queue.push(Scheduled {
            at,
            seq: self.seq,
            ev,
        });
    }

    fn rand_between(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.rng.next_u64() % (hi - lo + 1)
    }

    fn tracef(&mut self, f: impl FnOnce() -> String) {
        if let Some(t) = &mut self.trace {
            let line = f();
            let _ = writeln!(t, "{:>12}us {}", self.now, line);
        }
    }

    /// Run to completion and return the report (with violations, if any).
    pub fn run(mut self) -> (Report, Option<String>) {
        for i in 0..self.nodes.len() {
            self.start_node(i);
        }
        for c in 0..self.clients.len() {
            let jitter = self.rand_between(0, 1_000);
            self.at(
                jitter,
                Ev::Client {
                    client: c,
                    attempt: 0,
                },
            );
        }
        for (i, f) in self.schedule.faults.clone().iter().enumerate() {
            self.at(f.start_us, Ev::Fault(i));
            if f.kind != FaultKind::LinkReset {
                self.at(f.end_us, Ev::Heal(i));
            }
        }
        let heal_at = self.cfg.fault_window_us;
        if self.cfg.run_for_us.is_none() {
            self.at(heal_at, Ev::HealAll);
        }
        // After healing: settle, run the tracked workload, then drain. The run's length does not
        // depend on the liveness bound, so a tight bound fails liveness and nothing else.
        let phase = self.cfg.liveness_bound_us.max(2_000_000);
        self.workload_end = heal_at + 3 * phase;
        let deadline = self.workload_end + phase;

        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            while let Some(s) = self.queue.pop() {
                self.now = s.at;
                self.events += 1;
                if self.now > deadline
                    || self.events > MAX_EVENTS
                    || self.cfg.run_for_us.is_some_and(|t| self.now >= t)
                {
                    break;
                }
                self.handle(s.ev);
                if self.finished() {
                    break;
                }
            }
        }));
        if let Err(p) = result {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            let now = self.now;
            self.history.violate(Checker::Panic, now, msg);
        } else if self.cfg.run_for_us.is_none() {
            self.final_checks();
        }
        for n in &self.nodes {
            if let Some(r) = &n.replica {
                for (k, v) in r.core().gauges() {
                    let e = self.report.gauges.entry(k).or_default();
                    e.0 += v;
                    e.1 += 1;
                }
            }
        }
        self.report.violations = self.history.violations.clone();
        self.report.runs = 1;
        self.report.virtual_us = self.now;
        self.report.committed = self.history.max_slot();
        self.report.latency = Some(self.latency.clone());
        self.report.latency_leader = Some(self.latency_leader.clone());
        self.report.latency_follower = Some(self.latency_follower.clone());
        for f in &self.schedule.faults {
            *self.report.faults.entry(f.kind.name()).or_default() += 1;
            if matches!(f.kind, FaultKind::Crash | FaultKind::CrashPair) {
                *self.report.faults.entry("restart").or_default() += 1;
            }
        }
        (self.report, self.trace)
    }

    fn finished(&self) -> bool {
        if self.healed_at.is_none() || self.tracked_left > 0 {
            return false;
        }
        let max = self.history.max_slot();
        self.nodes
            .iter()
            .filter(|n| !n.stays_down)
            .all(|n| n.replica.is_some() && n.machine.ids.len() as u64 == max)
            && self.clients.iter().all(|c| !c.waiting_tracked())
    }

    fn final_checks(&mut self) {
        let now = self.now;
        match (self.healed_at, self.stable_at) {
            (Some(h), None) => self.history.violate(
                Checker::Liveness,
                now,
                format!(
                    "no leader was followed by every replica within {}us after the faults healed at {h}us",
                    now - h
                ),
            ),
            (Some(_), Some(_)) if self.tracked_left > 0 => {
                let left = self.tracked_left;
                self.history.violate(
                    Checker::Liveness,
                    now,
                    format!("{left} commands submitted after the cluster settled were never delivered"),
                )
            }
            _ => {}
        }
        // Durability and convergence: every live replica ends with the whole history (promised
        // only while a quorum recovers).
        let live = self.nodes.iter().filter(|n| !n.stays_down).count();
        if live < synod_core::quorum::majority(self.nodes.len()) {
            return;
        }
        for i in 0..self.nodes.len() {
            if self.nodes[i].stays_down {
                continue;
            }
            let ids = std::mem::take(&mut self.nodes[i].machine.ids);
            let id = self.nodes[i].id;
            self.history.final_state(now, id, &ids);
            self.nodes[i].machine.ids = ids;
        }
    }

    fn handle(&mut self, ev: Ev<P::Message>) {
        match ev {
            Ev::Message {
                from,
                to,
                generation,
                msg,
            } => {
                if !self.delivered_on_link(from, to, generation) || self.nodes[to].replica.is_none()
                {
                    return;
                }
                let role = self.nodes[to].role;
                self.report.count_in(role);
                if role == Role::Leading {
                    *self.report.leader_in_kinds.entry(msg.kind()).or_default() += 1;
                }
                let from_id = self.nodes[from].id;
                if self.trace.is_some() {
                    let to_id = self.nodes[to].id;
                    self.tracef(|| format!("n{from_id} -> n{to_id} {msg:?}"));
                }
                self.step(to, Input::Message { from: from_id, msg });
            }
            Ev::Timer {
                node,
                incarnation,
                at,
            } => {
                let n = &mut self.nodes[node];
                if n.incarnation != incarnation || n.replica.is_none() || n.timer_at != Some(at) {
                    return; // superseded by an earlier deadline, or the replica crashed
                }
                n.timer_at = None;
                self.wake(node);
            }
            Ev::Flush { node, incarnation } => {
                if self.nodes[node].incarnation == incarnation {
                    self.flush(node);
                }
            }
            Ev::DiskDone {
                node,
                incarnation,
                upto,
            } => {
                if self.nodes[node].incarnation != incarnation || self.nodes[node].replica.is_none()
                {
                    return;
                }
                self.disk_done(node, upto);
            }
            Ev::Client { client, attempt } => self.client_turn(client, attempt),
            Ev::Monitor => {
                self.check_stable();
                if self.stable_at.is_none() {
                    let t = self.now + MONITOR_US;
                    self.at(t, Ev::Monitor);
                }
            }
            Ev::Fault(i) => self.inject(i),
            Ev::Heal(i) => self.heal(i),
            Ev::HealAll => {
                self.heal_all();
                self.at(self.now, Ev::Monitor);
            }
            Ev::Restart(i) => {
                if self.nodes[i].replica.is_none() && !self.nodes[i].stays_down {
                    self.start_node(i);
                }
            }
        }
    }

    // ------------------------------------------------------------------ replicas

    fn start_node(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        n.new_incarnation();
        n.leader = None;
        n.machine = n
            .durable
            .snapshot
            .as_ref()
            .map(Machine::restore)
            .unwrap_or_default();
        let members: Vec<NodeId> = (1..=self.cfg.nodes as NodeId).collect();
        let cluster = Cluster::new(n.id, members);
        let seed = mix(self.cfg.seed, (n.id as u64) << 32 | n.incarnation);
        let core = P::restore(cluster, self.cfg.options.clone(), n.durable.clone(), seed);
        n.replica = Some(Replica::new(core, OUTBOX_LIMIT));
        let (id, inc, base) = (n.id, n.incarnation, n.machine.ids.len() as u64);
        if base > 0 {
            let ids = n.machine.ids.clone();
            let now = self.now;
            self.history.restored(now, id, inc, &ids);
        } else {
            self.history.started(id, inc, 0);
        }
        self.tracef(|| format!("n{id} starts (incarnation {inc}, snapshot slot {base})"));
        self.schedule_timer(i);
    }

    fn crash_node(&mut self, i: usize) {
        if self.nodes[i].replica.is_none() {
            return;
        }
        let id = self.nodes[i].id;
        self.tracef(|| format!("n{id} CRASHES"));
        let n = &mut self.nodes[i];
        n.replica = None;
        n.new_incarnation();
        // The process died: its connections break, and peers see them close.
        for j in 0..self.nodes.len() {
            if j != i {
                self.break_link(i, j);
                self.break_link(j, i);
                self.step(j, Input::Disconnected { peer: id });
            }
        }
    }

    /// Run `f` on replica `i` with its environment, then note its view and deadline, and offer
    /// the state machine's snapshot when one is due.
    fn with_replica(&mut self, i: usize, f: impl FnOnce(&mut Replica<P>, &mut SimEnv<'_, P>)) {
        let Some(mut r) = self.nodes[i].replica.take() else {
            return;
        };
        f(&mut r, &mut SimEnv { w: self, i });
        self.nodes[i].role = r.view().role;
        self.nodes[i].replica = Some(r);
        self.schedule_timer(i);
        if let Some(snap) = self.snapshot_due(i) {
            self.step(i, Input::Compact(snap));
        }
    }

    /// Feed one input to a replica and carry out what it asks for.
    fn step(&mut self, i: usize, input: Input<P::Message>) {
        let now = self.now;
        self.with_replica(i, |r, env| r.step(now, input, env));
    }

    fn wake(&mut self, i: usize) {
        let now = self.now;
        self.with_replica(i, |r, env| {
            r.wake(now, env);
        });
    }

    /// Make sure a timer event is scheduled no later than the replica's deadline.
    fn schedule_timer(&mut self, i: usize) {
        let Some(d) = self.nodes[i].replica.as_ref().and_then(|r| r.deadline()) else {
            return;
        };
        let d = d.max(self.now);
        if self.nodes[i].timer_at.is_some_and(|t| t <= d) {
            return; // an earlier (or equal) wake is already scheduled
        }
        self.nodes[i].timer_at = Some(d);
        let incarnation = self.nodes[i].incarnation;
        self.at(
            d,
            Ev::Timer {
                node: i,
                incarnation,
                at: d,
            },
        );
    }

    fn snapshot_due(&mut self, i: usize) -> Option<Snapshot> {
        let every = self.cfg.snapshot_every;
        let m = &mut self.nodes[i].machine;
        let applied = m.ids.len() as u64;
        (every > 0 && applied >= m.last_snapshot + every).then(|| {
            m.last_snapshot = applied;
            m.snapshot()
        })
    }

    /// The crash-tolerance invariant for a delivery at replica `i`.
    fn durable_quorum(&self, i: usize, at: synod_core::Position, id: u64) -> bool {
        let me = &self.nodes[i];
        // Any replica that is not leading delivers as a follower (also while synchronising).
        if let (Some(k), false) = (self.cfg.follower_invariant, me.role == Role::Leading) {
            let leader = me.leader;
            let holders = self
                .nodes
                .iter()
                .filter(|n| Some(n.id) != leader && n.durable.holds(at, id))
                .count();
            return holders >= k;
        }
        let holders = self
            .nodes
            .iter()
            .filter(|n| n.durable.holds(at, id))
            .count();
        holders >= synod_core::quorum::majority(self.nodes.len())
    }

    fn on_apply(&mut self, i: usize, a: Apply) {
        let id = self.nodes[i].id;
        let now = self.now;
        match a {
            Apply::Command { at, command } => {
                let durable_quorum = self.durable_quorum(i, at, command.id);
                let inc = self.nodes[i].incarnation;
                self.history
                    .delivered(now, id, inc, at.slot, at.tag, command.id, durable_quorum);
                let m = &mut self.nodes[i].machine;
                if m.ids.len() as u64 + 1 == at.slot {
                    m.ids.push(command.id);
                    m.last_tag = at.tag;
                }
                self.report.deliveries += 1;
                if self.trace.is_some() {
                    let (slot, cid) = (at.slot, command.id);
                    self.tracef(|| format!("n{id} delivers slot {slot} (command {cid})"));
                }
                self.client_delivered(i, command.id);
            }
            Apply::Restore(s) => {
                let m = Machine::restore(&s);
                let inc = self.nodes[i].incarnation;
                self.history.restored(now, id, inc, &m.ids);
                self.tracef(|| format!("n{id} restores a snapshot at slot {}", s.at.slot));
                self.nodes[i].machine = m;
            }
        }
    }

    fn on_event(&mut self, i: usize, e: Event) {
        let id = self.nodes[i].id;
        let now = self.now;
        match e {
            Event::View(v) => {
                let n = &mut self.nodes[i];
                n.leader = v.leader;
                n.epoch = v.epoch;
                n.role = v.role;
                if v.role == Role::Leading {
                    self.history.leading(now, id, v.epoch);
                }
                self.tracef(|| {
                    format!(
                        "n{id} is {:?} (leader {:?}, epoch {})",
                        v.role, v.leader, v.epoch
                    )
                });
            }
            Event::Mode { fallback } => {
                let key = if fallback {
                    "to-base"
                } else {
                    "back-to-variant"
                };
                *self.report.switches.entry(key).or_default() += 1;
                self.tracef(|| format!("n{id} switches the broadcast mode ({key})"));
            }
            Event::Rejected { id: cmd, .. } => self.client_rejected(i, cmd),
        }
    }
}

/// The environment of replica `i` while it steps: the simulated disk, state machine, event
/// observers and network.
struct SimEnv<'a, P: Protocol> {
    w: &'a mut World<P>,
    i: usize,
}

impl<P: Protocol> Env<P> for SimEnv<'_, P> {
    fn persist(&mut self, ops: &mut Vec<Op<P>>) {
        self.w.nodes[self.i].disk_queue.append(ops);
        self.w.kick_disk(self.i);
    }
    fn apply(&mut self, apply: Apply) {
        self.w.on_apply(self.i, apply);
    }
    fn event(&mut self, event: Event) {
        self.w.on_event(self.i, event);
    }
    fn transmit(&mut self, envelope: Envelope<P::Message>) {
        self.w.transmit(self.i, envelope);
    }
}

/// Per-run message counters, keyed by the role at the time of the message.
pub(crate) fn role_index(r: Role) -> usize {
    match r {
        Role::Leading => 0,
        Role::Following | Role::Proposer => 1,
        Role::Electing => 2,
    }
}
