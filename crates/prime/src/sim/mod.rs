//! The membership simulator at scale (issue 29, step 4): one timeline per design, the same
//! seed and the same faults for both:
//!
//! 1. **bootstrap**: N nodes start at random times in the first `spread` (the thesis's
//!    prototype sleeps 0–20 s before joining), each joining through up to 10 nodes started
//!    before it (the tracker's list);
//! 2. **steady**: 30 s without change (the cost of keeping a view);
//! 3. **mass failure**: 10 % of the nodes crash at once;
//! 4. **churn**: one join or leave a second for `churn` (new nodes join; leaves alternate
//!    between a graceful leave and a crash);
//! 5. **partition**: 20 % of the nodes cut off for 30 s, then healed.
//!
//! After each phase the run waits for a **consistent view**: every live node that should be a
//! member holds the same view stamp, and that view's members are exactly those nodes. Every
//! 100 ms it samples the fraction of those nodes whose view differs from the most common one.

pub mod world;

use std::collections::{BTreeMap, BTreeSet};

use crate::{central, node, Core, NodeId, TimeUs, ViewStamp};
use synod_core::rng::CoreRng;
use world::{Net, Traffic, World};

/// Builds the cores of one design.
pub trait Design {
    type C: Core;
    fn name(&self) -> &'static str;
    /// The nodes present at time zero (a founder, or the group's servers).
    fn founders(&self) -> Vec<NodeId>;
    fn founder(&self, id: NodeId, seed: u64) -> Self::C;
    fn joiner(&self, id: NodeId, seeds: Vec<NodeId>, seed: u64) -> Self::C;
    /// Times each live node was removed while alive and rejoined.
    fn rejoins(&self, _world: &World<Self::C>) -> BTreeMap<NodeId, u64> {
        BTreeMap::new()
    }
    /// Nodes removed by mistake and rejoined, summed over the live nodes.
    fn wrong_removals(&self, world: &World<Self::C>) -> u64 {
        self.rejoins(world).values().sum()
    }
    /// EpTO holes and view repairs, summed over the live nodes (PRIME only).
    fn holes_and_repairs(&self, _world: &World<Self::C>) -> (u64, u64) {
        (0, 0)
    }
}

pub struct Prime(pub node::Options);

impl Design for Prime {
    type C = node::Node;
    fn name(&self) -> &'static str {
        "PRIME over EpTO over CYCLON"
    }
    fn founders(&self) -> Vec<NodeId> {
        vec![1]
    }
    fn founder(&self, id: NodeId, seed: u64) -> node::Node {
        node::Node::found(id, self.0, seed)
    }
    fn joiner(&self, id: NodeId, seeds: Vec<NodeId>, seed: u64) -> node::Node {
        node::Node::join(id, seeds, self.0, seed)
    }
    fn rejoins(&self, world: &World<node::Node>) -> BTreeMap<NodeId, u64> {
        world
            .alive()
            .map(|(id, n)| (id, n.stats().rejoins))
            .collect()
    }
    fn holes_and_repairs(&self, world: &World<node::Node>) -> (u64, u64) {
        world.alive().fold((0, 0), |(h, r), (_, n)| {
            (h + n.holes(), r + n.stats().repairs)
        })
    }
}

pub struct Central(pub central::Options);

impl Design for Central {
    type C = central::Node;
    fn name(&self) -> &'static str {
        "one replicated group (ZooKeeper/etcd style)"
    }
    fn founders(&self) -> Vec<NodeId> {
        (1..=self.0.group as NodeId).collect()
    }
    fn founder(&self, id: NodeId, _seed: u64) -> central::Node {
        central::Node::server(id, self.0)
    }
    fn joiner(&self, id: NodeId, _seeds: Vec<NodeId>, _seed: u64) -> central::Node {
        central::Node::joiner(id, self.0)
    }
    fn rejoins(&self, world: &World<central::Node>) -> BTreeMap<NodeId, u64> {
        world.alive().map(|(id, n)| (id, n.rejoins())).collect()
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub nodes: usize,
    pub seed: u64,
    pub net: Net,
    pub spread_us: TimeUs,
    pub churn_us: TimeUs,
    /// The longest a phase may take to reach a consistent view.
    pub patience_us: TimeUs,
}

impl Plan {
    pub fn new(nodes: usize, seed: u64) -> Plan {
        Plan {
            nodes,
            seed,
            net: Net::LAN,
            spread_us: 20_000_000,
            churn_us: 60_000_000,
            patience_us: 300_000_000,
        }
    }
}

/// What one phase measured.
#[derive(Clone, Debug, Default)]
pub struct Phase {
    pub name: &'static str,
    /// From the phase's last fault (or start) to a consistent view; `None`: not within patience.
    pub settled_us: Option<TimeUs>,
    pub duration_us: TimeUs,
    /// Mean and largest fraction of the expected members whose view differs from the most
    /// common one, sampled every 100 ms during the phase.
    pub mean_diverged: f64,
    pub max_diverged: f64,
    /// Messages and bytes sent per live node per second (mean), and by the busiest node.
    pub msgs_per_node_s: f64,
    pub max_msgs_per_node_s: f64,
    pub bytes_per_node_s: f64,
    pub max_bytes_per_node_s: f64,
    /// Members at the end of the phase, and consistent views seen along it (view changes a
    /// layer above would act on).
    pub members: usize,
    pub views: u64,
    /// Live nodes removed during the phase that rejoined (PRIME: removed while alive), and of
    /// them, nodes on the cut-off side of a partition.
    pub rejoins: u64,
    pub rejoins_cut_off: u64,
}

/// A whole run of one design.
#[derive(Clone, Debug, Default)]
pub struct Run {
    pub design: &'static str,
    pub nodes: usize,
    pub phases: Vec<Phase>,
    pub wrong_removals: u64,
    pub holes: u64,
    pub repairs: u64,
    /// Each consistent view's member list, in order.
    pub view_sequence: Vec<Vec<NodeId>>,
    /// The member lists node 1 (never failed) held, sampled every 100 ms: what a KV layer on
    /// that node would place buckets by (bucket moves per change are counted over it).
    pub watched: Vec<Vec<NodeId>>,
}

struct Observer {
    expected: BTreeSet<NodeId>,
    last_view: Option<ViewStamp>,
    views: Vec<Vec<NodeId>>,
    watched: Vec<Vec<NodeId>>,
}

const SAMPLE_US: TimeUs = 100_000;

impl Observer {
    /// The fraction of expected nodes off the most common view, and whether the view is
    /// consistent (everyone on it, and it names exactly the expected nodes).
    fn sample<C: Core>(&mut self, world: &World<C>) -> (f64, bool) {
        if let Some(m) = world.core(1).map(|c| c.members()) {
            if !m.is_empty() && self.watched.last() != Some(&m) {
                self.watched.push(m);
            }
        }
        let mut counts: BTreeMap<ViewStamp, (usize, NodeId)> = BTreeMap::new();
        for &id in &self.expected {
            if let Some(stamp) = world.core(id).and_then(|c| c.view()) {
                counts.entry(stamp).or_insert((0, id)).0 += 1;
            }
        }
        let Some((&stamp, &(count, rep))) = counts.iter().max_by_key(|(_, (c, _))| *c) else {
            return (1.0, false);
        };
        let n = self.expected.len().max(1);
        let diverged = (n - count) as f64 / n as f64;
        let consistent = count == self.expected.len()
            && world.core(rep).is_some_and(|c| {
                let m = c.members();
                m.len() == self.expected.len() && m.iter().all(|x| self.expected.contains(x))
            });
        if consistent && self.last_view != Some(stamp) {
            self.last_view = Some(stamp);
            self.views
                .push(world.core(rep).map(|c| c.members()).unwrap_or_default());
        }
        (diverged, consistent)
    }
}

fn traffic_delta(
    before: &BTreeMap<NodeId, Traffic>,
    after: &BTreeMap<NodeId, Traffic>,
) -> Vec<Traffic> {
    after
        .iter()
        .map(|(id, t)| {
            let b = before.get(id).copied().unwrap_or_default();
            Traffic {
                messages: t.messages - b.messages,
                bytes: t.bytes - b.bytes,
            }
        })
        .collect()
}

struct Runner<'d, D: Design> {
    design: &'d D,
    plan: Plan,
    world: World<D::C>,
    obs: Observer,
    next_id: NodeId,
    started: Vec<NodeId>,
    /// The faults' own random source, apart from the world's (which the network draws from):
    /// both designs get the same joins, victims, churn and partition sides for a seed.
    frng: CoreRng,
}

/// Node ids never failed, left or cut off by the faults: the replicated group's servers (and
/// PRIME's founder among them), so that both designs lose the same nodes.
const KEPT: NodeId = 5;

impl<D: Design> Runner<'_, D> {
    fn spawn(&mut self, id: NodeId) {
        let seed = self
            .plan
            .seed
            .wrapping_mul(1_000_003)
            .wrapping_add(id as u64);
        // The tracker's answer: up to 10 nodes that contacted it before (BOOTSTRAP_PEER_NUMBER).
        let live: Vec<NodeId> = self
            .started
            .iter()
            .copied()
            .filter(|s| self.obs.expected.contains(s))
            .collect();
        let mut seeds = Vec::new();
        for _ in 0..10.min(live.len()) {
            let i = self.frng.below(live.len() as u64) as usize;
            seeds.push(live[i]);
        }
        if seeds.is_empty() {
            seeds.push(1);
        }
        let core = self.design.joiner(id, seeds, seed);
        self.world.start(id, core);
        self.started.push(id);
        self.obs.expected.insert(id);
    }

    /// Run a phase: `faults` (at offsets from the phase start) then wait for consistency.
    fn phase(&mut self, name: &'static str, faults: Vec<(TimeUs, Fault)>) -> Phase {
        let start = self.world.now();
        let traffic0 = self.world.traffic().clone();
        let views0 = self.obs.views.len();
        let last_fault = faults.iter().map(|f| f.0).max().unwrap_or(0);
        let mut faults = faults.into_iter().peekable();
        let (mut sum, mut max, mut samples) = (0.0, 0.0f64, 0u64);
        let mut settled = None;
        let mut t = start;
        loop {
            while let Some((at, _)) = faults.peek() {
                if start + at > t {
                    break;
                }
                let (_, f) = faults.next().expect("peeked");
                self.fault(f);
            }
            t += SAMPLE_US;
            self.world.run_until(t);
            let (d, ok) = self.obs.sample(&self.world);
            sum += d;
            max = max.max(d);
            samples += 1;
            let faults_done = faults.peek().is_none() && t >= start + last_fault;
            if faults_done && ok && t >= start + last_fault + SAMPLE_US {
                settled = Some(t - start - last_fault);
                break;
            }
            if t >= start + last_fault + self.plan.patience_us {
                break;
            }
        }
        let duration = self.world.now() - start;
        let delta = traffic_delta(&traffic0, self.world.traffic());
        let secs = duration as f64 / 1e6;
        let live = self.obs.expected.len().max(1) as f64;
        let total_m: u64 = delta.iter().map(|t| t.messages).sum();
        let total_b: u64 = delta.iter().map(|t| t.bytes).sum();
        Phase {
            name,
            settled_us: settled,
            duration_us: duration,
            mean_diverged: sum / samples.max(1) as f64,
            max_diverged: max,
            msgs_per_node_s: total_m as f64 / live / secs,
            max_msgs_per_node_s: delta.iter().map(|t| t.messages).max().unwrap_or(0) as f64 / secs,
            bytes_per_node_s: total_b as f64 / live / secs,
            max_bytes_per_node_s: delta.iter().map(|t| t.bytes).max().unwrap_or(0) as f64 / secs,
            members: self.obs.expected.len(),
            views: (self.obs.views.len() - views0) as u64,
            rejoins: 0,
            rejoins_cut_off: 0,
        }
    }

    fn fault(&mut self, f: Fault) {
        match f {
            Fault::Join(id) => {
                self.next_id = self.next_id.max(id + 1);
                self.spawn(id);
            }
            Fault::JoinNew => {
                let id = self.next_id;
                self.next_id += 1;
                self.spawn(id);
            }
            Fault::CrashAny => {
                if let Some(id) = self.pick(1).first().copied() {
                    self.fault(Fault::Crash(id));
                }
            }
            Fault::LeaveAny => {
                if let Some(id) = self.pick(1).first().copied() {
                    self.fault(Fault::Leave(id));
                }
            }
            Fault::Crash(id) => {
                self.world.crash(id);
                self.obs.expected.remove(&id);
            }
            Fault::Leave(id) => {
                self.world.leave(id);
                self.obs.expected.remove(&id);
            }
            Fault::Partition(side) => self.world.partition(side),
            Fault::Heal => self.world.heal(),
        }
    }

    /// `count` distinct random expected nodes, never one of the first [`KEPT`].
    fn pick(&mut self, count: usize) -> Vec<NodeId> {
        let mut pool: Vec<NodeId> = self
            .obs
            .expected
            .iter()
            .copied()
            .filter(|&n| n > KEPT)
            .collect();
        let mut out = Vec::new();
        while out.len() < count && !pool.is_empty() {
            let i = self.frng.below(pool.len() as u64) as usize;
            out.push(pool.swap_remove(i));
        }
        out
    }
}

enum Fault {
    /// Node `id` starts and joins (the bootstrap's ids, the same for both designs).
    Join(NodeId),
    /// A node with a new id starts and joins.
    JoinNew,
    /// A random live node (drawn when the fault happens) crashes, or leaves.
    CrashAny,
    LeaveAny,
    Crash(NodeId),
    Leave(NodeId),
    Partition(BTreeSet<NodeId>),
    Heal,
}

/// Run every phase for one design.
pub fn run<D: Design>(design: &D, plan: Plan) -> Run {
    run_phases(design, plan, usize::MAX).0
}

/// Run the first `upto` phases; the world as they left it.
pub fn run_phases<D: Design>(design: &D, plan: Plan, upto: usize) -> (Run, World<D::C>) {
    let mut r = Runner {
        design,
        plan,
        world: World::new(plan.seed, plan.net),
        obs: Observer {
            expected: BTreeSet::new(),
            last_view: None,
            views: Vec::new(),
            watched: Vec::new(),
        },
        next_id: 1,
        started: Vec::new(),
        frng: CoreRng::new(plan.seed ^ 0x6661_756c_7473),
    };
    let founders = design.founders();
    for &f in &founders {
        let core = design.founder(f, plan.seed.wrapping_add(f as u64));
        r.world.start(f, core);
        r.started.push(f);
        r.obs.expected.insert(f);
        r.next_id = r.next_id.max(f + 1);
    }
    let mut phases = Vec::new();
    for step in 0..upto.min(5) {
        let before = design.rejoins(&r.world);
        let mut cut_off = BTreeSet::new();
        let mut phase = match step {
            0 => {
                // 1. Bootstrap.
                // A start time for every node but the first, drawn alike for both designs; the
                // group's servers are there from the start and skip theirs.
                let mut joins: Vec<(TimeUs, Fault)> = (2..=plan.nodes as NodeId)
                    .map(|id| (r.frng.below(plan.spread_us.max(1)), Fault::Join(id)))
                    .filter(|(_, f)| !matches!(f, Fault::Join(id) if founders.contains(id)))
                    .collect();
                joins.sort_by_key(|j| j.0);
                r.phase("bootstrap", joins)
            }
            // 2. Steady: nothing happens for 30 s (a heal is a no-op marking the end).
            1 => r.phase("steady (30 s)", vec![(30_000_000, Fault::Heal)]),
            2 => {
                // 3. 10 % fail at once.
                let victims = r.pick(plan.nodes / 10);
                let faults = victims.into_iter().map(|v| (0, Fault::Crash(v))).collect();
                r.phase("10 % crash at once", faults)
            }
            3 => {
                // 4. Churn: one change a second.
                let changes = (plan.churn_us / 1_000_000) as usize;
                let mut churn = Vec::new();
                for i in 0..changes {
                    let at = i as TimeUs * 1_000_000;
                    let f = match i % 4 {
                        0 | 2 => Fault::JoinNew,
                        1 => Fault::LeaveAny,
                        _ => Fault::CrashAny,
                    };
                    churn.push((at, f));
                }
                r.phase("churn (1 change/s)", churn)
            }
            _ => {
                // 5. A partition of 20 % for 30 s, then healed.
                let side: BTreeSet<NodeId> = r.pick(plan.nodes / 5).into_iter().collect();
                cut_off = side.clone();
                r.phase(
                    "20 % partitioned 30 s, healed",
                    vec![(0, Fault::Partition(side)), (30_000_000, Fault::Heal)],
                )
            }
        };
        for (id, n) in design.rejoins(&r.world) {
            let d = n.saturating_sub(before.get(&id).copied().unwrap_or(0));
            phase.rejoins += d;
            if cut_off.contains(&id) {
                phase.rejoins_cut_off += d;
            }
        }
        phases.push(phase);
    }
    let (holes, repairs) = design.holes_and_repairs(&r.world);
    let run = Run {
        design: design.name(),
        nodes: plan.nodes,
        wrong_removals: design.wrong_removals(&r.world),
        holes,
        repairs,
        phases,
        view_sequence: r.obs.views,
        watched: r.obs.watched,
    };
    (run, r.world)
}

#[cfg(test)]
mod tests;
