//! The simulated world: N whole nodes, each running the node's host (crates/host, the code the
//! server runs) with a replica of every group (one protocol core and its state machine per
//! group), a network, disks, clients and a fault schedule, all on virtual time in one thread,
//! driven by one seeded RNG. The groups of a node share its disk, network interface and CPU.
//!
//! What crosses between nodes is bytes: every message is encoded by the sending host and
//! decoded by the receiving one, and every storage op reaches the simulated disk as the log
//! encodes it (a codec bug is a finding). A host is woken at the deadline it names, never on a
//! fixed tick.
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | the event loop, the run, final checks |
//! | `node.rs` | a node: its host, its replica of each group, disk, clock, interface, CPU |
//! | `replicas.rs` | starting and crashing nodes, driving their hosts, what comes out of them |
//! | `net.rs` | links: latency, bandwidth, FIFO, partitions, broken connections |
//! | `disk.rs` | group commit and fsync latency |
//! | `clients.rs` | closed-loop clients and the per-replica submit queue |
//! | `nemesis.rs` | injecting and healing faults, and settling after the last one |
//! | `restart.rs` | the end of every run: every replica restarted from its disk alone |

mod app;
mod clients;
mod disk;
mod etcd;
mod kv;
mod nemesis;
mod net;
mod node;
mod reconfig;
mod replicas;
mod restart;
mod telemetry;
mod zk;

use crate::check::{Checker, History};
use crate::faults::{between, FaultKind, Schedule};
use crate::{grow, Report, SimConfig};
use bytes::Bytes;
use clients::Client;
use hdrhistogram::Histogram;
use net::Link;
use node::{Clock, Node};
use rand_core::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt::Write as _;
use synod_core::{DurableState, NodeId, Protocol, TimeUs, View};
use synod_host::{Hosted, PeerKind};

type Durable<P> = DurableState<<P as Protocol>::Record, <P as Protocol>::Hard>;

/// What a simulated client hands the host with a command.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Token {
    /// A protocol client: itself and its connection (a reply to an abandoned connection is
    /// ignored).
    Client(usize, u64),
    /// A SconeKV client's command to a bucket: who waits for the reply, and the bucket.
    Kv(Option<synod_kv::sim::world::ReplyTo>, u32),
    /// A configuration change the nemesis asked of a group (group, the ask's number).
    Reconfig(usize, u64),
}

enum Ev {
    Message {
        from: usize,
        to: usize,
        group: usize,
        generation: u64,
        /// Held back by a replaying reconnect (delivered now if the receiver still runs).
        late: bool,
        kind: PeerKind,
        data: Bytes,
    },
    /// A host's deadline.
    Timer {
        node: usize,
        incarnation: u64,
        at: TimeUs,
    },
    /// Hand the commands waiting at a host to its cores (one batch per group).
    Flush {
        node: usize,
        incarnation: u64,
    },
    /// The fsync in progress on a node's disk is done.
    DiskDone {
        node: usize,
        incarnation: u64,
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
    /// A busy node's CPU is free: run the oldest event waiting for it.
    Wake(usize),
    /// The warm-up is over: the measurement starts.
    Warm,
    /// A SconeKV client's timer or reply (boxed: events are moved often, keep them small).
    Kv(Box<synod_kv::sim::world::ClientEvent>),
    /// A SconeKV client's command reaches a node.
    KvArrive(Box<kv::Arrival>),
}

struct Scheduled {
    at: TimeUs,
    seq: u64,
    ev: Ev,
}
impl PartialEq for Scheduled {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, o: &Self) -> Ordering {
        // BinaryHeap is a max-heap: reverse for earliest first; seq breaks ties (FIFO).
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

pub struct World<P: Protocol> {
    cfg: SimConfig<P::Options>,
    rng: Xoshiro256PlusPlus,
    now: TimeUs,
    seq: u64,
    queue: BinaryHeap<Scheduled>,
    nodes: Vec<Node<P>>,
    links: Vec<Link>,
    clients: Vec<Client>,
    schedule: Schedule,
    /// The checkers' history of each group.
    histories: Vec<History>,
    /// The checker across groups, if the configuration has one.
    cross: Option<Box<dyn crate::check::CrossCheck>>,
    payload: Bytes,
    healed_at: Option<TimeUs>,
    stable_at: Option<TimeUs>,
    tracked_left: u64,
    workload_end: TimeUs,
    /// The views of the live replicas of every group once they satisfy the settled rule,
    /// and since when.
    settling: Option<(Vec<Vec<View>>, TimeUs)>,
    tracked_sent: u64,
    trace: Option<String>,
    report: Report,
    latency: Histogram<u64>,
    events: u64,
    /// CPU time (ns) spent by the replica stepping now, under the cost model: its messages
    /// leave, and its next event starts, after it.
    step_cost_ns: u64,
    /// Per-event counters by role (indexed by `role_index`), folded into the report by name
    /// at the end: string-keyed maps cost too much per message. Shared with every node's host,
    /// which counts its messages there ([`telemetry`]).
    counts: std::sync::Arc<std::sync::Mutex<RoleCounts>>,
    /// When the measurement started and the slots committed by then (`SimConfig::warmup_us`).
    warm: (TimeUs, u64),
    /// Outstanding command id → the client waiting for it (lookups only: no iteration, so
    /// the hasher's randomness cannot reach the run).
    waiting: std::collections::HashMap<u64, usize>,
    /// Commands a client was told were delivered, by group: each must be in the history at
    /// the end.
    acknowledged: Vec<(usize, u64)>,
    /// The register app's relays, in submission order: (command id, from group, to group,
    /// key, value).
    relays: Vec<(u64, usize, usize, String, Bytes)>,
    /// The SconeKV app's clients and what its checkers need.
    kv: Option<kv::KvWorld>,
    /// The ZooKeeper app's sessions, as its checker sees them.
    zk: Option<zk::ZkWorld>,
    /// The etcd app's clients, replies, reads and watch streams.
    etcd: Option<etcd::EtcdWorld>,
    /// Each group's configurations, as the checkers know them.
    ledgers: Vec<reconfig::Ledger>,
    /// Output buffers swapped with a host's (their capacity reused).
    spare: synod_host::Outputs<Token>,
}

/// Messages and latencies by role, kept in arrays while the run goes.
#[derive(Default)]
pub(super) struct RoleCounts {
    pub(super) msgs_in: [u64; 4],
    pub(super) msgs_out: [u64; 4],
    /// (role, message kind, count): a handful of entries, found by pointer.
    pub(super) in_kinds: Vec<(usize, &'static str, u64)>,
    pub(super) latency: [Option<Histogram<u64>>; 4],
    /// Batches handed to the cores.
    pub(super) batches: u64,
}

const ROLES: [synod_core::Role; 4] = [
    synod_core::Role::Electing,
    synod_core::Role::Following,
    synod_core::Role::Leading,
    synod_core::Role::Proposer,
];

/// The position of `r` in [`ROLES`].
pub(super) fn role_index(r: synod_core::Role) -> usize {
    use synod_core::Role;
    match r {
        Role::Electing => 0,
        Role::Following => 1,
        Role::Leading => 2,
        Role::Proposer => 3,
    }
}

impl RoleCounts {
    pub(super) fn kind_in(&mut self, role: usize, kind: &'static str) {
        match self
            .in_kinds
            .iter_mut()
            .find(|(r, k, _)| *r == role && std::ptr::eq(*k, kind))
        {
            Some(e) => e.2 += 1,
            None => self.in_kinds.push((role, kind, 1)),
        }
    }

    fn fold_into(self, report: &mut Report) {
        report.batches += self.batches;
        for (i, role) in ROLES.iter().enumerate() {
            if self.msgs_in[i] > 0 {
                *report.msgs_in.entry(role.name()).or_default() += self.msgs_in[i];
            }
            if self.msgs_out[i] > 0 {
                *report.msgs_out.entry(role.name()).or_default() += self.msgs_out[i];
            }
        }
        for (r, k, n) in self.in_kinds {
            *report.in_kinds.entry((ROLES[r].name(), k)).or_default() += n;
        }
        for (i, h) in self.latency.into_iter().enumerate() {
            if let Some(h) = h {
                report.latency_by_role.insert(ROLES[i].name(), h);
            }
        }
    }
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

impl<P: Hosted> World<P> {
    pub fn new(cfg: SimConfig<P::Options>) -> Self {
        let n = cfg.nodes;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(cfg.seed);
        let schedule = Schedule::generate(&mut rng, &cfg);
        let clock_model = cfg.clock.clone();
        // Clocks come from a generator of their own, so that they do not shift the run's draws.
        let mut clock_rng = Xoshiro256PlusPlus::seed_from_u64(mix(cfg.seed, 0xC10C));
        let groups = cfg.groups.max(1);
        let nodes = (0..n)
            .map(|i| {
                let rate_ppm = (1_000_000 - clock_model.max_drift_ppm as i64
                    + between(&mut clock_rng, 0, 2 * clock_model.max_drift_ppm) as i64)
                    .max(1) as u64;
                let offset = between(&mut clock_rng, 0, clock_model.max_offset_us);
                Node::new(
                    i as NodeId + 1,
                    (0..groups)
                        .map(|g| replicas::machine(&cfg.app, g, groups))
                        .collect(),
                    Clock::new(offset, rate_ppm),
                    i < cfg.stay_down,
                )
            })
            .collect();
        // Client c works in group c mod G; each group's clients start spread over the nodes.
        let clients = (0..cfg.workload.clients)
            .map(|c| Client::new(c % groups, (c / groups) % n))
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
            histories: (0..groups)
                .map(|_| match cfg.workload.registers {
                    Some(_) => History::up_to_commutation(cfg.disabled.clone()),
                    None => History::with_disabled(cfg.disabled.clone()),
                })
                .collect(),
            cross: cfg.cross_check.map(|make| make()),
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
            events: 0,
            step_cost_ns: 0,
            counts: Default::default(),
            warm: (0, 0),
            waiting: Default::default(),
            acknowledged: Vec::new(),
            relays: Vec::new(),
            kv: match &cfg.app {
                crate::App::Kv(app) => Some(kv::KvWorld::new(app, groups as u32)),
                _ => None,
            },
            spare: Default::default(),
            ledgers: (0..groups)
                .map(|_| reconfig::Ledger::new(&(1..=n as synod_core::NodeId).collect::<Vec<_>>()))
                .collect(),
            zk: matches!(cfg.app, crate::App::ZooKeeper(_))
                .then(|| zk::ZkWorld::new(cfg.workload.clients, groups)),
            etcd: match &cfg.app {
                crate::App::Etcd(app) => Some(etcd::EtcdWorld::new(app, cfg.workload.clients)),
                _ => None,
            },
            cfg,
        }
    }

    fn at(&mut self, at: TimeUs, ev: Ev) {
        self.seq += 1;
        self.queue.push(Scheduled {
            at,
            seq: self.seq,
            ev,
        });
    }

    /// Count `(completed, delivered)` at node `i` in the current bucket of the timeline.
    fn timeline(&mut self, i: usize, add: (u64, u64)) {
        let every = self.cfg.timeline_us;
        if every == 0 {
            return;
        }
        let b = (self.now / every) as usize;
        let t = &mut self.report.timeline;
        grow(t, b + 1);
        grow(&mut t[b], self.nodes.len());
        t[b][i].0 += add.0;
        t[b][i].1 += add.1;
    }

    fn rand_between(&mut self, lo: u64, hi: u64) -> u64 {
        between(&mut self.rng, lo, hi)
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
        self.kv_start();
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
            if f.kind.has_heal() {
                self.at(f.end_us, Ev::Heal(i));
            }
        }
        let heal_at = self.cfg.fault_window_us;
        if self.cfg.run_for_us.is_none() {
            self.at(heal_at, Ev::HealAll);
        } else if self.cfg.warmup_us > 0 {
            let t = self.cfg.warmup_us;
            self.at(t, Ev::Warm);
        }
        // After healing: settle, run the tracked workload, then drain. The run's length does not
        // depend on the liveness bound, so a tight bound fails liveness and nothing else.
        let phase = self.cfg.liveness_bound_us.max(2_000_000);
        self.workload_end = heal_at + 3 * phase;
        let deadline = self.workload_end + phase;

        let until = match self.cfg.run_for_us {
            Some(t) => deadline.min(t.saturating_sub(1)),
            None => deadline,
        };
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.drive(until, Self::finished);
        }));
        let survived = self.survived(result);
        if survived && self.cfg.run_for_us.is_none() {
            self.final_checks();
        }
        for h in self.nodes.iter().filter_map(|n| n.host.as_ref()) {
            for (_, gauges) in h.gauges() {
                for (k, v) in gauges {
                    let e = self.report.gauges.entry(k).or_default();
                    e.0 += v;
                    e.1 += 1;
                }
            }
        }
        let end = self.now;
        if survived && self.cfg.restart_check {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.restart_from_disk();
            }));
            self.survived(result);
        }
        self.now = end;
        let many = self.histories.len() > 1;
        for (g, h) in self.histories.iter().enumerate() {
            for v in &h.violations {
                let mut v = v.clone();
                if many {
                    v.detail = format!("group {g}: {}", v.detail);
                }
                self.report.violations.push(v);
            }
        }
        std::mem::take(&mut *self.counts.lock().expect("counts")).fold_into(&mut self.report);
        self.report.runs = 1;
        self.report.virtual_us = self.now - self.warm.0;
        self.report.committed =
            self.histories.iter().map(|h| h.max_slot()).sum::<u64>() - self.warm.1;
        self.report.latency = Some(self.latency.clone());
        for f in &self.schedule.faults {
            *self.report.faults.entry(f.kind.name()).or_default() += 1;
            if matches!(f.kind, FaultKind::Crash | FaultKind::CrashPair) {
                *self.report.faults.entry("restart").or_default() += 1;
            }
        }
        (self.report, self.trace)
    }

    /// Run events in time order until `done` holds after one, the next is later than `until`
    /// (the clock still moves to it), the queue is empty, or the event budget is spent.
    pub(super) fn drive(&mut self, until: TimeUs, done: impl Fn(&Self) -> bool) {
        while let Some(s) = self.queue.pop() {
            self.now = s.at;
            self.events += 1;
            if self.now > until || self.events > MAX_EVENTS {
                break;
            }
            self.handle(s.ev);
            if done(self) {
                break;
            }
        }
    }

    /// Record a panic of the run (a failed assertion in a core is a found bug); true when
    /// there was none.
    fn survived(&mut self, result: std::thread::Result<()>) -> bool {
        let Err(p) = result else {
            return true;
        };
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into());
        let now = self.now;
        self.histories[0].violate(Checker::Panic, now, msg);
        false
    }

    fn finished(&self) -> bool {
        if self.healed_at.is_none() || self.stable_at.is_none() || self.tracked_left > 0 {
            return false;
        }
        self.histories.iter().enumerate().all(|(g, h)| {
            let max = h.max_slot();
            let members = self.final_members(g);
            self.nodes
                .iter()
                .filter(|n| !n.stays_down && members.contains(&n.id))
                .all(|n| {
                    n.up && n.groups[g].applied_count() == max && n.groups[g].unacknowledged() == 0
                })
        }) && self.clients.iter().all(|c| !c.waiting_tracked())
            && self.kv_quiet()
    }

    fn final_checks(&mut self) {
        let now = self.now;
        match (self.healed_at, self.stable_at) {
            (Some(h), None) => self.histories[0].violate(
                Checker::Liveness,
                now,
                format!(
                    "no leader was followed by every replica within {}us after the faults healed at {h}us",
                    now - h
                ),
            ),
            (Some(_), Some(_)) if self.tracked_left > 0 => {
                let left = self.tracked_left;
                self.histories[0].violate(
                    Checker::Liveness,
                    now,
                    format!("{left} commands submitted after the cluster settled were never delivered"),
                )
            }
            _ => {}
        }
        // Durability and convergence: every live member of a group's last configuration ends
        // with the whole history (promised only while a quorum recovers).
        let live = self.nodes.iter().filter(|n| !n.stays_down).count();
        if live < synod_core::quorum::majority(self.nodes.len()) {
            return;
        }
        for g in 0..self.histories.len() {
            let members = self.final_members(g);
            for i in 0..self.nodes.len() {
                let id = self.nodes[i].id;
                if self.nodes[i].stays_down || !members.contains(&id) {
                    continue;
                }
                let ids = self.nodes[i].groups[g].ids();
                self.histories[g].final_state(now, id, &ids);
            }
        }
        self.app_checks();
        self.kv_checks();
        self.etcd_checks();
    }

    /// The node an event runs on, when it runs on one (its CPU, its pause).
    fn runs_on(ev: &Ev) -> Option<usize> {
        match ev {
            Ev::Message { to, .. } => Some(*to),
            Ev::Timer { node, .. } | Ev::Flush { node, .. } | Ev::DiskDone { node, .. } => {
                Some(*node)
            }
            _ => None,
        }
    }

    fn handle(&mut self, ev: Ev) {
        if let Ev::Wake(i) = ev {
            self.run_backlog(i);
            return;
        }
        if let Some(i) = Self::runs_on(&ev) {
            let n = &mut self.nodes[i];
            if n.busy_until > self.now || !n.backlog.is_empty() {
                // Paused, or still busy with earlier work: the event waits in the node's own
                // queue, in arrival order (rescheduling it in the global queue would let an
                // event due at the same instant overtake it, and break a link's FIFO order).
                n.backlog.push_back(ev);
                self.arm_wake(i);
                return;
            }
        }
        self.dispatch(ev);
    }

    /// Make sure a wake-up is scheduled for node `i`'s backlog, when its CPU is free.
    fn arm_wake(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        if n.wake_pending || n.backlog.is_empty() {
            return;
        }
        n.wake_pending = true;
        let t = n.busy_until.max(self.now);
        self.at(t, Ev::Wake(i));
    }

    /// Node `i`'s CPU may be free: run the oldest waiting event, then wait for the next.
    fn run_backlog(&mut self, i: usize) {
        self.nodes[i].wake_pending = false;
        if self.nodes[i].busy_until <= self.now {
            if let Some(ev) = self.nodes[i].backlog.pop_front() {
                self.dispatch(ev);
            }
        }
        self.arm_wake(i);
    }

    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::Message {
                from,
                to,
                group,
                generation,
                late,
                kind,
                data,
            } => {
                if !self.nodes[to].up
                    || !self.delivered_on_link((from, to, group), generation, late, kind, &data)
                {
                    return;
                }
                let from_id = self.nodes[from].id;
                if !self.cfg.cost.is_free() {
                    self.step_cost_ns += self.cfg.cost.receive_ns(data.len());
                }
                if self.trace.is_some() {
                    let to_id = self.nodes[to].id;
                    let what = match kind {
                        PeerKind::Message => "message",
                        PeerKind::Submit => "routed command",
                    };
                    self.tracef(|| {
                        format!(
                            "n{from_id} -> n{to_id} g{group} {what} of {} bytes",
                            data.len()
                        )
                    });
                }
                let now = self.local_now(to);
                self.with_host(to, |h| {
                    h.receive(now, from_id, group as synod_core::GroupId, kind, data)
                });
            }
            Ev::Timer {
                node,
                incarnation,
                at,
            } => {
                let n = &mut self.nodes[node];
                if n.incarnation != incarnation || !n.up || n.timer_at != Some(at) {
                    return; // superseded by an earlier deadline, or the node crashed
                }
                n.timer_at = None;
                let now = self.local_now(node);
                self.with_host(node, |h| h.timeout(now));
            }
            Ev::Flush { node, incarnation } => {
                if self.nodes[node].incarnation == incarnation && self.nodes[node].up {
                    self.flush(node);
                }
            }
            Ev::DiskDone { node, incarnation } => {
                if self.nodes[node].incarnation != incarnation || !self.nodes[node].up {
                    return;
                }
                self.disk_done(node);
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
            Ev::Wake(i) => self.run_backlog(i),
            Ev::Warm => {
                // Forget what the warm-up measured; the slots committed so far are not counted.
                *self.counts.lock().expect("counts") = RoleCounts::default();
                self.latency.reset();
                self.report.completed = 0;
                self.report.reads = 0;
                self.report.submitted = 0;
                self.report.batches = 0;
                self.report.deliveries = 0;
                self.report.completed_by_node.clear();
                self.report.latency_by_node.clear();
                self.warm = (self.now, self.histories.iter().map(|h| h.max_slot()).sum());
            }
            Ev::Restart(i) => {
                if !self.nodes[i].up && !self.nodes[i].stays_down {
                    self.start_node(i);
                }
            }
            Ev::Kv(ev) => self.kv_client(*ev),
            Ev::KvArrive(a) => self.kv_arrive(*a),
        }
    }
}
