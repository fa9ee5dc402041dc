//! The simulated world: N replicas of one protocol core, a network, disks, clients and a fault
//! schedule, all on virtual time in one thread, driven by one seeded RNG.

use crate::check::{Checker, History};
use crate::faults::{Fault, FaultKind, Schedule};
use crate::{Report, SimConfig};
use bytes::Bytes;
use hdrhistogram::Histogram;
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt::Write as _;
use synod_core::outbox::Outbox;
use synod_core::{
    Actions, Apply, Cluster, Command, Dest, DurableState, Envelope, Event, Input, MessageKind,
    NodeId, Persist, Protocol, Role, Snapshot, TimeUs, WireSize,
};

type Out<P> = Actions<<P as Protocol>::Message, <P as Protocol>::Record, <P as Protocol>::Hard>;
type Durable<P> = DurableState<<P as Protocol>::Record, <P as Protocol>::Hard>;
type Op<P> = Persist<<P as Protocol>::Record, <P as Protocol>::Hard>;

enum Ev<M> {
    Message {
        from: usize,
        to: usize,
        generation: u64,
        msg: M,
    },
    Tick {
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

/// A directed link. A break bumps the generation: whatever was in flight is lost.
#[derive(Clone, Default)]
struct Link {
    generation: u64,
    blocked: u32,
    /// When the sender's NIC is free again (bandwidth model).
    busy_until: TimeUs,
    /// Arrival time of the last message (FIFO).
    last_arrival: TimeUs,
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
    core: Option<P>,
    incarnation: u64,
    durable: Durable<P>,
    /// Ops waiting for the next fsync, and the ops of the fsync in progress.
    disk_queue: Vec<Op<P>>,
    disk_busy: Vec<Op<P>>,
    /// Envelopes held back by a durability barrier (and everything sent after them).
    outbox: Outbox<P::Message>,
    machine: Machine,
    role: Role,
    leader: Option<NodeId>,
    epoch: u64,
    slow_net: u32,
    slow_disk: u32,
    /// Crashed for good when the faults heal (to test a cluster that lost replicas).
    stays_down: bool,
}

struct Client {
    node: usize,
    outstanding: Option<(u64, TimeUs)>,
    attempt: u64,
    tracked: bool,
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
    scratch: Out<P>,
    ready: Vec<Envelope<P::Message>>,
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
                core: None,
                incarnation: 0,
                durable: DurableState::default(),
                disk_queue: Vec::new(),
                disk_busy: Vec::new(),
                outbox: Outbox::new(OUTBOX_LIMIT),
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
            .map(|c| Client {
                node: c % n,
                outstanding: None,
                attempt: 0,
                tracked: false,
            })
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
            scratch: Actions::default(),
            ready: Vec::new(),
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
            if let Some(core) = &n.core {
                for (k, v) in core.gauges() {
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
            .all(|n| n.core.is_some() && n.machine.ids.len() as u64 == max)
            && self
                .clients
                .iter()
                .all(|c| c.outstanding.is_none() || !c.tracked)
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
                if self.links[from * self.nodes.len() + to].generation != generation
                    || self.nodes[to].core.is_none()
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
            Ev::Tick { node, incarnation } => {
                if self.nodes[node].incarnation != incarnation || self.nodes[node].core.is_none() {
                    return;
                }
                let now = self.now;
                self.step(node, Input::Tick { now_us: now });
                let tick = self.nodes[node]
                    .core
                    .as_ref()
                    .map_or(10_000, |c| c.tick_us());
                self.at(now + tick, Ev::Tick { node, incarnation });
                self.check_stable();
            }
            Ev::DiskDone {
                node,
                incarnation,
                upto,
            } => {
                if self.nodes[node].incarnation != incarnation || self.nodes[node].core.is_none() {
                    return;
                }
                self.disk_done(node, upto);
            }
            Ev::Client { client, attempt } => self.client_turn(client, attempt),
            Ev::Fault(i) => self.inject(i),
            Ev::Heal(i) => self.heal(i),
            Ev::HealAll => self.heal_all(),
            Ev::Restart(i) => {
                if self.nodes[i].core.is_none() && !self.nodes[i].stays_down {
                    self.start_node(i);
                }
            }
        }
    }

    // ------------------------------------------------------------------ replicas

    fn start_node(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        n.incarnation += 1;
        n.disk_queue.clear();
        n.disk_busy.clear();
        n.outbox.reset();
        n.role = Role::Electing;
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
        let tick = core.tick_us();
        n.core = Some(core);
        let (id, inc, base) = (n.id, n.incarnation, n.machine.ids.len() as u64);
        if base > 0 {
            let ids = n.machine.ids.clone();
            let now = self.now;
            self.history.restored(now, id, inc, &ids);
        } else {
            self.history.started(id, inc, 0);
        }
        self.tracef(|| format!("n{id} starts (incarnation {inc}, snapshot slot {base})"));
        let offset = self.rand_between(0, tick);
        self.at(
            self.now + offset,
            Ev::Tick {
                node: i,
                incarnation: inc,
            },
        );
    }

    fn crash_node(&mut self, i: usize) {
        if self.nodes[i].core.is_none() {
            return;
        }
        let id = self.nodes[i].id;
        self.tracef(|| format!("n{id} CRASHES"));
        let n = &mut self.nodes[i];
        n.core = None;
        n.incarnation += 1;
        n.disk_queue.clear();
        n.disk_busy.clear();
        n.outbox.reset();
        n.role = Role::Electing;
        // The process died: its connections break, and peers see them close.
        for j in 0..self.nodes.len() {
            if j != i {
                self.break_link(i, j);
                self.break_link(j, i);
                self.step(j, Input::Disconnected { peer: id });
            }
        }
    }

    fn break_link(&mut self, a: usize, b: usize) {
        let n = self.nodes.len();
        self.links[a * n + b].generation += 1;
    }

    /// Feed one input to a replica and carry out what it asks for.
    fn step(&mut self, i: usize, input: Input<P::Message>) {
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        let Some(core) = self.nodes[i].core.as_mut() else {
            self.scratch = out;
            return;
        };
        core.step(input, &mut out);
        let role = core.role();
        self.nodes[i].role = role;
        let compact = self.handle_actions(i, &mut out);
        self.scratch = out;
        if let Some(snap) = compact {
            self.step(i, Input::Compact(snap));
        }
    }

    fn handle_actions(&mut self, i: usize, out: &mut Out<P>) -> Option<Snapshot> {
        let id = self.nodes[i].id;
        let now = self.now;
        if !out.persist.is_empty() {
            self.nodes[i].disk_queue.append(&mut out.persist);
            self.kick_disk(i);
        }
        for a in out.apply.drain(..) {
            match a {
                Apply::Command { at, command } => {
                    let durable_quorum = self.durable_quorum(i, at.slot, command.id);
                    let inc = self.nodes[i].incarnation;
                    self.history.delivered(
                        now,
                        id,
                        inc,
                        at.slot,
                        at.tag,
                        command.id,
                        durable_quorum,
                    );
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
        for e in out.events.drain(..) {
            match e {
                Event::Role {
                    role,
                    leader,
                    epoch,
                } => {
                    let n = &mut self.nodes[i];
                    n.leader = leader;
                    n.epoch = epoch;
                    if role == Role::Leading {
                        self.history.leading(now, id, epoch);
                    }
                    self.tracef(|| format!("n{id} is {role:?} (leader {leader:?}, epoch {epoch})"));
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
        let mut ready = std::mem::take(&mut self.ready);
        for env in out.send.drain(..) {
            let ok = self.nodes[i].outbox.push(env, |e| ready.push(e));
            assert!(ok, "n{id}: more than {OUTBOX_LIMIT} envelopes held back");
        }
        for env in ready.drain(..) {
            self.transmit(i, env);
        }
        self.ready = ready;
        let every = self.cfg.snapshot_every;
        let m = &mut self.nodes[i].machine;
        let applied = m.ids.len() as u64;
        (every > 0 && applied >= m.last_snapshot + every).then(|| {
            m.last_snapshot = applied;
            m.snapshot()
        })
    }

    /// The crash-tolerance invariant for a delivery at replica `i`.
    fn durable_quorum(&self, i: usize, slot: u64, id: u64) -> bool {
        let me = &self.nodes[i];
        // Any replica that is not leading delivers as a follower (also while synchronising).
        if let (Some(k), false) = (self.cfg.follower_invariant, me.role == Role::Leading) {
            let leader = me.leader;
            let holders = self
                .nodes
                .iter()
                .filter(|n| Some(n.id) != leader && n.durable.holds(slot, id))
                .count();
            return holders >= k;
        }
        let holders = self
            .nodes
            .iter()
            .filter(|n| n.durable.holds(slot, id))
            .count();
        holders >= synod_core::quorum::majority(self.nodes.len())
    }

    fn transmit(&mut self, from: usize, env: Envelope<P::Message>) {
        let role = self.nodes[from].role;
        match env.to {
            Dest::One(to) => {
                self.report.count_out(role);
                self.send_one(from, to as usize - 1, env.msg);
            }
            Dest::All => {
                for to in 0..self.nodes.len() {
                    if to != from {
                        self.report.count_out(role);
                        self.send_one(from, to, env.msg.clone());
                    }
                }
            }
        }
    }

    fn send_one(&mut self, from: usize, to: usize, msg: P::Message) {
        let n = self.nodes.len();
        let size = msg.wire_size() as u64;
        let slow = self.nodes[from].slow_net.max(self.nodes[to].slow_net) as u64;
        let lat =
            self.rand_between(self.cfg.net.latency_min_us, self.cfg.net.latency_max_us) * slow;
        let tx = size * 1_000_000 / self.cfg.net.bandwidth_bytes_per_s.max(1);
        let now = self.now;
        let link = &mut self.links[from * n + to];
        if link.blocked > 0 {
            return;
        }
        link.busy_until = link.busy_until.max(now) + tx;
        let arrival = (link.busy_until + lat).max(link.last_arrival);
        link.last_arrival = arrival;
        let generation = link.generation;
        self.at(
            arrival,
            Ev::Message {
                from,
                to,
                generation,
                msg,
            },
        );
    }

    // ------------------------------------------------------------------ disks

    fn kick_disk(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        if !n.disk_busy.is_empty() || n.disk_queue.is_empty() {
            return;
        }
        // Group commit: one fsync covers every op queued while the previous one ran.
        std::mem::swap(&mut n.disk_busy, &mut n.disk_queue);
        let upto = n.disk_busy.last().expect("non-empty").seq;
        let slow = n.slow_disk as u64;
        let inc = n.incarnation;
        let lat = self.rand_between(self.cfg.disk.fsync_min_us, self.cfg.disk.fsync_max_us) * slow;
        let now = self.now;
        self.at(
            now + lat,
            Ev::DiskDone {
                node: i,
                incarnation: inc,
                upto,
            },
        );
    }

    fn disk_done(&mut self, i: usize, upto: u64) {
        let n = &mut self.nodes[i];
        for p in n.disk_busy.drain(..) {
            n.durable.apply(&p.op);
        }
        // Release what was waiting for this write, in order.
        let mut ready = std::mem::take(&mut self.ready);
        n.outbox.durable(upto, |e| ready.push(e));
        for env in ready.drain(..) {
            self.transmit(i, env);
        }
        self.ready = ready;
        self.step(i, Input::Durable { upto });
        self.kick_disk(i);
    }

    // ------------------------------------------------------------------ clients

    fn client_turn(&mut self, c: usize, attempt: u64) {
        if self.clients[c].attempt != attempt {
            return;
        }
        if let Some((id, _)) = self.clients[c].outstanding.take() {
            // Timed out: try another replica with a new command.
            self.tracef(|| format!("client {c} gives up on command {id}"));
            self.retarget(c);
        }
        if self.now >= self.workload_end {
            return;
        }
        let w = &self.cfg.workload;
        let in_fault_phase = self.healed_at.is_none();
        let tracked = self.stable_at.is_some() && self.tracked_sent < w.liveness_commands;
        if !in_fault_phase && !tracked && self.stable_at.is_some() {
            return; // the liveness workload is done
        }
        if !in_fault_phase && self.stable_at.is_none() {
            // Wait for the cluster to settle after healing.
            let t = self.now + 10_000;
            self.at(t, Ev::Client { client: c, attempt });
            return;
        }
        let node = self.clients[c].node;
        let wr = self.cfg.workload.write_ratio;
        if wr < 1.0 && !tracked && (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 >= wr {
            // A read: served from this replica's state, no broadcast.
            self.report.reads += 1;
            self.clients[c].attempt += 1;
            let attempt = self.clients[c].attempt;
            let t = self.now + self.cfg.workload.read_service_us + self.cfg.workload.think_us;
            self.at(t, Ev::Client { client: c, attempt });
            return;
        }
        let id = self.next_command;
        self.next_command += 1;
        self.history.submitted(id);
        self.clients[c].outstanding = Some((id, self.now));
        self.clients[c].tracked = tracked;
        if tracked {
            self.tracked_sent += 1;
        }
        self.clients[c].attempt += 1;
        let attempt = self.clients[c].attempt;
        let timeout = self.now + self.cfg.workload.client_timeout_us;
        self.at(timeout, Ev::Client { client: c, attempt });
        let command = Command {
            id,
            payload: self.payload.clone(),
        };
        self.report.submitted += 1;
        if self.nodes[node].core.is_none() {
            self.client_rejected(node, id);
            return;
        }
        self.step(node, Input::Submit(command));
    }

    fn retarget(&mut self, c: usize) {
        let n = self.nodes.len();
        let next = (self.clients[c].node + 1 + (self.rng.next_u64() as usize % (n - 1).max(1))) % n;
        self.clients[c].node = next;
    }

    /// The client waiting at replica `node` for command `id`.
    fn client_waiting_for(&self, node: usize, id: u64) -> Option<usize> {
        self.clients
            .iter()
            .position(|c| c.node == node && c.outstanding.is_some_and(|(o, _)| o == id))
    }

    fn client_rejected(&mut self, node: usize, id: u64) {
        let Some(c) = self.client_waiting_for(node, id) else {
            return;
        };
        let cl = &mut self.clients[c];
        cl.outstanding = None;
        if cl.tracked {
            // A refusal is an answer; the client will submit another tracked command.
            self.tracked_sent -= 1;
        }
        cl.attempt += 1;
        let attempt = cl.attempt;
        self.retarget(c);
        let backoff = self.now + self.cfg.workload.backoff_us;
        self.at(backoff, Ev::Client { client: c, attempt });
    }

    fn client_delivered(&mut self, node: usize, id: u64) {
        let Some(c) = self.client_waiting_for(node, id) else {
            return;
        };
        let (_, since) = self.clients[c].outstanding.take().expect("outstanding");
        let lat = self.now - since;
        let _ = self.latency.record(lat.max(1));
        if self.nodes[node].role == Role::Leading {
            let _ = self.latency_leader.record(lat.max(1));
        } else {
            let _ = self.latency_follower.record(lat.max(1));
        }
        self.report.completed += 1;
        if self.clients[c].tracked {
            self.tracked_left = self.tracked_left.saturating_sub(1);
            if lat > self.cfg.liveness_bound_us {
                let now = self.now;
                self.history.violate(
                    Checker::Liveness,
                    now,
                    format!("command {id} took {lat}us after the cluster settled"),
                );
            }
        }
        self.clients[c].attempt += 1;
        let attempt = self.clients[c].attempt;
        let think = self.cfg.workload.think_us;
        let t = self.now + think;
        self.at(t, Ev::Client { client: c, attempt });
    }

    // ------------------------------------------------------------------ faults

    fn inject(&mut self, i: usize) {
        let f: Fault = self.schedule.faults[i].clone();
        let target = if f.resolved.is_empty() {
            self.resolve_target(&f)
        } else {
            f.resolved.clone()
        };
        self.schedule.faults[i].resolved = target.clone();
        self.tracef(|| format!("FAULT {} on {:?}", f.kind.name(), target));
        match f.kind {
            FaultKind::CrashPair => {
                for &t in &target {
                    self.crash_node(t);
                }
            }
            FaultKind::Crash => {
                for &t in &target {
                    // Processes executing the protocol: up and serving with a leader.
                    let executing = self
                        .nodes
                        .iter()
                        .filter(|n| {
                            n.core.is_some() && matches!(n.role, Role::Leading | Role::Following)
                        })
                        .count();
                    let quorum = synod_core::quorum::majority(self.nodes.len());
                    if self.cfg.a12_crashes && executing <= quorum {
                        // A1.2: no crash while only a quorum executes.
                        self.tracef(|| format!("crash of n{} skipped (A1.2)", t + 1));
                        continue;
                    }
                    self.crash_node(t);
                }
            }
            FaultKind::Partition | FaultKind::OneWay => {
                let n = self.nodes.len();
                for (a, b) in cut_links(f.kind, &target, n) {
                    self.links[a * n + b].blocked += 1;
                    self.break_link(a, b);
                }
            }
            FaultKind::SlowNode => {
                for &t in &target {
                    self.nodes[t].slow_net = f.factor;
                }
            }
            FaultKind::SlowDisk => {
                for &t in &target {
                    self.nodes[t].slow_disk = f.factor;
                }
            }
            FaultKind::LinkReset => {
                let (a, b) = (target[0], target[1]);
                self.break_link(a, b);
                self.break_link(b, a);
                let (ida, idb) = (self.nodes[a].id, self.nodes[b].id);
                self.step(a, Input::Disconnected { peer: idb });
                self.step(b, Input::Disconnected { peer: ida });
            }
        }
    }

    fn resolve_target(&mut self, f: &Fault) -> Vec<usize> {
        let n = self.nodes.len();
        let leader = self.nodes.iter().position(|x| x.role == Role::Leading);
        let pick = |rng: &mut Xoshiro256PlusPlus| rng.next_u64() as usize % n;
        match f.kind {
            FaultKind::Crash | FaultKind::SlowNode | FaultKind::SlowDisk => {
                let t = match leader {
                    Some(l) if f.at_leader => l,
                    _ => pick(&mut self.rng),
                };
                vec![t]
            }
            FaultKind::Partition | FaultKind::OneWay => {
                // A random non-empty proper subset, often isolating the leader.
                let mut side: Vec<usize> =
                    (0..n).filter(|_| self.rng.next_u64() & 1 == 1).collect();
                if f.at_leader {
                    if let Some(l) = leader {
                        if !side.contains(&l) {
                            side.push(l);
                        }
                    }
                }
                if side.is_empty() || side.len() == n {
                    side = vec![pick(&mut self.rng)];
                }
                side
            }
            FaultKind::CrashPair => {
                let l = leader.unwrap_or_else(|| pick(&mut self.rng));
                // The follower holding the most: the one whose loss hurts.
                let f = (0..n)
                    .filter(|&i| i != l)
                    .max_by_key(|&i| (self.nodes[i].durable.last_slot(), i))
                    .unwrap_or(l);
                vec![l, f]
            }
            FaultKind::LinkReset => {
                let a = leader.unwrap_or_else(|| pick(&mut self.rng));
                let mut b = pick(&mut self.rng);
                if b == a {
                    b = (a + 1) % n;
                }
                vec![a, b]
            }
        }
    }

    fn heal(&mut self, i: usize) {
        let f = self.schedule.faults[i].clone();
        if self.schedule.faults[i].healed {
            return;
        }
        self.schedule.faults[i].healed = true;
        let target = f.resolved.clone();
        self.tracef(|| format!("HEAL {} on {:?}", f.kind.name(), target));
        match f.kind {
            FaultKind::Crash => {
                for &t in &target {
                    if self.nodes[t].core.is_none()
                        && !(self.nodes[t].stays_down && self.healed_at.is_some())
                    {
                        self.start_node(t);
                    }
                }
            }
            FaultKind::Partition | FaultKind::OneWay => {
                let n = self.nodes.len();
                for (a, b) in cut_links(f.kind, &target, n) {
                    self.links[a * n + b].blocked -= 1;
                }
            }
            FaultKind::SlowNode => {
                for &t in &target {
                    self.nodes[t].slow_net = 1;
                }
            }
            FaultKind::SlowDisk => {
                for &t in &target {
                    self.nodes[t].slow_disk = 1;
                }
            }
            FaultKind::CrashPair => {
                if let Some(&l) = target.first() {
                    if self.nodes[l].core.is_none() {
                        self.start_node(l);
                    }
                }
                if let Some(&f) = target.get(1) {
                    let at = self.now + 500_000;
                    self.at(at, Ev::Restart(f));
                }
            }
            FaultKind::LinkReset => {}
        }
    }

    fn heal_all(&mut self) {
        for i in 0..self.schedule.faults.len() {
            if self.schedule.faults[i].start_us <= self.now
                && self.schedule.faults[i].kind != FaultKind::LinkReset
            {
                self.heal(i);
            }
        }
        // Faults scheduled after the window never start.
        self.schedule
            .faults
            .retain(|f| f.start_us <= self.cfg.fault_window_us);
        for i in 0..self.nodes.len() {
            if self.nodes[i].stays_down {
                self.crash_node(i);
            } else if self.nodes[i].core.is_none() {
                self.start_node(i);
            }
        }
        self.healed_at = Some(self.now);
        self.tracef(|| "ALL FAULTS HEALED".to_string());
    }

    /// After healing: has the cluster settled on one leader followed by every live replica,
    /// without change for the settle window?
    fn check_stable(&mut self) {
        let Some(h) = self.healed_at else {
            return;
        };
        if self.stable_at.is_some() {
            return;
        }
        let mut live = self.nodes.iter().filter(|n| !n.stays_down);
        let Some(first) = live.next() else {
            return;
        };
        let agreed = std::iter::once(first).chain(live).all(|n| {
            n.core.is_some()
                && matches!(n.role, Role::Leading | Role::Following)
                && n.leader.is_some()
                && n.leader == first.leader
                && n.epoch == first.epoch
        }) && self
            .nodes
            .iter()
            .filter(|n| n.core.is_some() && n.role == Role::Leading)
            .count()
            == 1;
        let now = self.now;
        if !agreed {
            self.settling = None;
            return;
        }
        let view = (first.leader, first.epoch);
        match self.settling {
            Some((v, _)) if v == view => {}
            _ => self.settling = Some((view, now)),
        }
        let since = self.settling.expect("set").1;
        if now - since < self.cfg.settle_window_us {
            return;
        }
        self.stable_at = Some(now);
        self.report.settle_us.push(since - h);
        self.tracef(|| "CLUSTER SETTLED".to_string());
        if since - h > self.cfg.liveness_bound_us {
            self.history.violate(
                Checker::Liveness,
                now,
                format!(
                    "the cluster took {}us to settle after the faults healed",
                    since - h
                ),
            );
        }
    }
}

/// The directed links a partition cuts: across the split both ways, or from the `side` to the
/// rest only (one-way: the side can hear the others but not reach them).
fn cut_links(kind: FaultKind, side: &[usize], n: usize) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    for a in 0..n {
        for b in 0..n {
            let (ia, ib) = (side.contains(&a), side.contains(&b));
            let cut = match kind {
                FaultKind::Partition => ia != ib,
                _ => ia && !ib,
            };
            if cut {
                v.push((a, b));
            }
        }
    }
    v
}

/// Per-run message counters, keyed by the role at the time of the message.
pub(crate) fn role_index(r: Role) -> usize {
    match r {
        Role::Leading => 0,
        Role::Following | Role::Proposer => 1,
        Role::Electing => 2,
    }
}
