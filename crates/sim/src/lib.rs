//! synod's deterministic simulator: N whole nodes (each the node's host, crates/host, with its
//! groups' protocol cores and state machines) on virtual time, with a network (latency, bandwidth, FIFO per connection, broken connections lose what is in
//! flight), disks (fsync latency, group commit, a crash loses what was not durable), closed-loop
//! clients, a seeded fault schedule, and checkers over every history.
//!
//! The same seed replays the same run exactly: all randomness comes from one seeded generator
//! and the cores get seeds derived from it.

pub mod check;
pub mod faults;
pub mod registers;
pub mod wan;
mod world;

pub use check::{Checker, CrossCheck, History, Violation};
pub use faults::{FaultKind, FaultSet};
use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use synod_core::Role;
use synod_host::Hosted;
pub use wan::{Wan, WanLink};
pub use world::World;

#[derive(Clone, Debug)]
pub struct NetModel {
    /// One-way latency, uniform in [min, max] (without a WAN; with one, between nodes of one
    /// site).
    pub latency_min_us: u64,
    pub latency_max_us: u64,
    /// Of each node's network interface: everything a node sends shares it.
    pub bandwidth_bytes_per_s: u64,
    /// Sites, and latency and bandwidth per directed pair of sites.
    pub wan: Option<Wan>,
}

impl NetModel {
    /// A LAN in one rack: 50–150 µs, 10 Gbit/s.
    pub fn lan() -> Self {
        Self {
            latency_min_us: 50,
            latency_max_us: 150,
            bandwidth_bytes_per_s: 1_250_000_000,
            wan: None,
        }
    }

    /// Nodes spread over the sites of `wan`, each with a 1 Gbit/s interface.
    pub fn wan(wan: Wan) -> Self {
        Self {
            bandwidth_bytes_per_s: 125_000_000,
            wan: Some(wan),
            ..Self::lan()
        }
    }
}

/// CPU time a node spends per message, under the cost model: what a message costs a real
/// process (system calls, copies, wake-ups), which the simulator otherwise treats as free. A
/// node processes one thing at a time; its messages leave, and its next event starts, after
/// the CPU time of the step that produced them. All zero (the default): messages are free.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CostModel {
    /// Per message received.
    pub receive_ns: u64,
    /// Per message sent (per destination).
    pub send_ns: u64,
    /// Per byte received or sent.
    pub byte_ns: u64,
}

impl CostModel {
    /// No CPU cost at all (the simulator's model before the cost model).
    pub fn free() -> Self {
        Self::default()
    }

    /// Calibrated on real processes on the workplace machine (docs/results/simulator.md,
    /// "Cost model"): `synod bench protocols` measures, for zab at N = 3 under 32 clients,
    /// about 15 µs of server CPU per message end (each peer message at its sender and at its
    /// receiver, each client request and reply; fsync and the state machine included, which
    /// the simulator does not otherwise charge). The measurements do not separate a per-byte
    /// cost (every message there carries about 1 KiB), so it is left at zero.
    pub fn calibrated() -> Self {
        Self {
            receive_ns: 15_000,
            send_ns: 15_000,
            byte_ns: 0,
        }
    }

    /// Messages cost nothing: the simulator skips the accounting (and sizing messages).
    pub(crate) fn is_free(&self) -> bool {
        self.receive_ns == 0 && self.send_ns == 0 && self.byte_ns == 0
    }

    pub(crate) fn receive_ns(&self, bytes: usize) -> u64 {
        self.receive_ns + self.byte_ns * bytes as u64
    }

    pub(crate) fn send_ns(&self, bytes: usize) -> u64 {
        self.send_ns + self.byte_ns * bytes as u64
    }
}

/// Every node's clock is offset from true time by up to `max_offset_us` (skew) and runs at a
/// rate off by up to `max_drift_ppm` (drift), both drawn per node from the seed. The cores
/// read only their own node's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClockModel {
    pub max_offset_us: u64,
    pub max_drift_ppm: u64,
}

impl Default for ClockModel {
    fn default() -> Self {
        // A few seconds of skew and the drift of a poor crystal (NTP's tolerance is 500 ppm).
        Self {
            max_offset_us: 5_000_000,
            max_drift_ppm: 500,
        }
    }
}

#[derive(Clone, Debug)]
pub struct DiskModel {
    /// fsync latency, uniform in [min, max].
    pub fsync_min_us: u64,
    pub fsync_max_us: u64,
    /// A crash during an fsync makes a random prefix of its writes durable (a group commit
    /// that landed partly; the log's checksums cut it at the first incomplete record).
    pub torn_writes: bool,
}

impl DiskModel {
    /// A datacentre SSD: 100–400 µs per fsync; a crash during an fsync lands part of it.
    pub fn ssd() -> Self {
        Self {
            fsync_min_us: 100,
            fsync_max_us: 400,
            torn_writes: true,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Workload {
    /// Closed-loop clients; client c starts at replica c mod N.
    pub clients: usize,
    pub payload_bytes: usize,
    /// Pause between a reply and the next command: `think_us`, or uniform in
    /// [`think_us`, `think_max_us`] when the latter is larger (the thesis's wait-time).
    pub think_us: u64,
    pub think_max_us: u64,
    /// Each request goes to the next replica in turn (the thesis's clients, zab.md §8.3)
    /// instead of staying on one until it fails. Needs `pipeline` 1: a move is a new connection.
    pub round_robin: bool,
    /// A client that gets no delivery within this time gives up and moves to another replica.
    pub client_timeout_us: u64,
    /// Pause after a refusal before trying another replica.
    pub backoff_us: u64,
    /// Commands submitted after the cluster settles, each of which must be delivered in time.
    pub liveness_commands: u64,
    /// Probability that a client request is a write; reads are served by the replica from its
    /// local state (no broadcast) in `read_service_us`.
    pub write_ratio: f64,
    pub read_service_us: u64,
    /// Commands a client keeps outstanding at once, in order (ZooKeeper sessions pipeline);
    /// the client-order checker requires them delivered in that order.
    pub pipeline: usize,
    /// The register workload (`registers.rs`), κ: each command writes one of `κ` registers
    /// drawn by the seeded generator, or (a `barrier_ratio` of them) is a barrier conflicting
    /// with everything; its payload names the register and the client session (padded to
    /// `payload_bytes`, at least 16). It turns on the checkers up to commutation
    /// ([`History::up_to_commutation`]), for protocols that deliver commuting commands out of
    /// order; hand them [`registers::commute`]. `None` (the default): opaque payloads, total
    /// order.
    pub registers: Option<u32>,
    /// With `registers`: the fraction of commands that are barriers (a ZooKeeper multi or
    /// session operation).
    pub barrier_ratio: f64,
    /// With [`App::Registers`]: the fraction of commands that relay a put to another group.
    pub relay_ratio: f64,
}

impl Default for Workload {
    fn default() -> Self {
        Self {
            clients: 6,
            payload_bytes: 64,
            think_us: 5_000,
            think_max_us: 0,
            round_robin: false,
            client_timeout_us: 1_000_000,
            backoff_us: 20_000,
            liveness_commands: 30,
            write_ratio: 1.0,
            read_service_us: 20,
            pipeline: 1,
            registers: None,
            barrier_ratio: 0.02,
            relay_ratio: 0.3,
        }
    }
}

/// What the groups' state machines are, and what the clients ask of them.
#[derive(Clone, Debug, Default)]
pub enum App {
    /// Opaque payloads, and a machine that keeps nothing but the ids it applied: the
    /// protocols' own properties.
    #[default]
    Opaque,
    /// The register machine (synod_host::register) in every group: clients put keys of their
    /// own and relay puts to other groups, which crosses the hosts' routing between groups and
    /// their resending. At the end every relay delivered must be applied in its target group,
    /// and no replica may hold an unacknowledged one.
    Registers,
    /// SconeKV: group `b` is bucket `b` (synod_kv::KvMachine), transactional clients
    /// (synod_kv::sim::clients) read from the buckets' leaders and commit through two-phase
    /// commit between bucket groups, and SconeKV's checkers (serializability, atomicity,
    /// agreement of outcomes, liveness) run on every seed.
    Kv(KvApp),
    /// The ZooKeeper data tree (synod_zk::group::ZooKeeper) in every group; every client is a
    /// session that writes keys, reads them at its replica and sometimes syncs first; the
    /// session checker: reads never go back, sync + read sees every acknowledged write.
    ZooKeeper(ZkApp),
    /// etcd's store (synod_etcd::EtcdMachine) in every group; clients put, run Txns that
    /// compare a mod revision, delete, grant and revoke leases, compact, read after a barrier
    /// and keep a watch open. Checked against a model of etcd written apart (check::etcd_model):
    /// every reply's revision exact, writes and reads linearizable, every watch stream complete
    /// and in order.
    Etcd(EtcdApp),
}

impl App {
    pub fn named(name: &str) -> Option<App> {
        match name {
            "opaque" => Some(App::Opaque),
            "registers" => Some(App::Registers),
            "kv" => Some(App::Kv(KvApp::default())),
            "zookeeper" => Some(App::ZooKeeper(ZkApp::default())),
            "etcd" => Some(App::Etcd(EtcdApp::default())),
            _ => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            App::Opaque => "opaque",
            App::Registers => "registers",
            App::Kv(_) => "kv",
            App::ZooKeeper(_) => "zookeeper",
            App::Etcd(_) => "etcd",
        }
    }
}

/// The ZooKeeper app's sessions.
#[derive(Clone, Debug)]
pub struct ZkApp {
    /// Keys `/k0..`: few, so that sessions read each other's writes.
    pub keys: u32,
    /// The fraction of a session's requests that are reads (served at its replica).
    pub read_ratio: f64,
    /// The fraction of reads that a `sync` precedes.
    pub sync_ratio: f64,
    /// How the group's positions become zxids (the family's: the registry sets it).
    pub zxids: synod_zk::group::Zxids,
    /// A bug planted in the sessions' front end (to see the session checker catch it).
    pub plant: Option<ZkPlant>,
}

/// Bugs of a ZooKeeper front end, planted in the simulated sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZkPlant {
    /// A session reads at a replica behind what it saw (the server does not refuse it).
    StaleReads,
    /// `sync` is answered at once from the replica's state, unordered (the server's
    /// `stale-sync` bug).
    LocalSync,
}

impl Default for ZkApp {
    fn default() -> Self {
        ZkApp {
            keys: 8,
            read_ratio: 0.5,
            sync_ratio: 0.3,
            zxids: Default::default(),
            plant: None,
        }
    }
}

/// The etcd app's clients.
#[derive(Clone, Debug)]
pub struct EtcdApp {
    /// Keys `k0..`: few, so that clients' Txns and watches meet each other's writes.
    pub keys: u32,
    /// A bug planted in the store or the watchers (to see the checkers catch it).
    pub plant: Option<EtcdPlant>,
}

impl Default for EtcdApp {
    fn default() -> Self {
        EtcdApp {
            keys: 8,
            plant: None,
        }
    }
}

/// Bugs planted in the etcd app.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtcdPlant {
    /// Every fifth change skips a revision (synod_etcd::store::Store::plant_gap).
    RevisionGap,
    /// Watchers send two revisions in the wrong order (synod_etcd::watch::Plant).
    WatchOutOfOrder,
    /// A linearizable read served at once from the replica's state, without its barrier (the
    /// server's `serializable` read given to a client that asked for a linearizable one).
    LocalRead,
}

/// The SconeKV app's clients and buckets.
#[derive(Clone, Debug)]
pub struct KvApp {
    pub workload: synod_kv::sim::clients::Workload,
    /// A bug planted in every bucket (to see the checkers catch it).
    pub plant: synod_kv::sim::Plant,
    /// How long a bucket keeps a decision.
    pub retain_us: u64,
}

impl Default for KvApp {
    fn default() -> Self {
        KvApp {
            workload: Default::default(),
            plant: Default::default(),
            retain_us: 10_000_000,
        }
    }
}

#[derive(Clone, Debug)]
pub struct SimConfig<O> {
    pub nodes: usize,
    pub seed: u64,
    pub options: O,
    /// The groups' state machines and the clients' commands.
    pub app: App,
    pub net: NetModel,
    pub disk: DiskModel,
    pub cost: CostModel,
    pub clock: ClockModel,
    pub workload: Workload,
    pub faults: FaultSet,
    /// Faults happen in [0, window); everything heals at its end.
    pub fault_window_us: u64,
    pub max_faults: usize,
    pub max_fault_us: u64,
    /// After healing, the cluster must settle, and each command be delivered, within this bound.
    pub liveness_bound_us: u64,
    /// The cluster counts as settled once the same leader has been followed by every live
    /// replica for this long (long enough for a stale timeout from the fault phase to fire).
    pub settle_window_us: u64,
    /// The state machine snapshots every this many deliveries (0: never).
    pub snapshot_every: u64,
    /// Most commands a replica hands its core in one batch (the commands waiting at one
    /// instant form a batch; 1 turns batching off).
    pub batch_commands: usize,
    /// Replicas (the first `stay_down`) that crash when the faults heal and never come back.
    pub stay_down: usize,
    /// A1.2 of the restricted Zab variants: a crash is injected only while more than a quorum
    /// of replicas is up.
    pub a12_crashes: bool,
    /// The crash-tolerance checker's rule for deliveries at followers: `None` requires a quorum
    /// in stable storage (zab.md §1.5); `Some(k)` requires k followers, the leader not counted
    /// (the follower invariant of the restricted variants, zab.md §3.5).
    pub follower_invariant: Option<usize>,
    /// Measure for this long (virtual) and stop: no healing phase, no liveness or final checks
    /// (the safety checkers still run on every delivery). For performance experiments.
    pub run_for_us: Option<u64>,
    /// With `run_for_us`: the measurement starts here. Message counts, latencies, reads,
    /// submitted, batched, completed, delivered and committed commands cover only [warm-up,
    /// end] (mode switches and faults the whole run), and `Report::virtual_us` is that span
    /// (the thesis measured after a warm-up; ZabCT's first p comes after one second).
    pub warmup_us: u64,
    /// Groups: every node runs one replica of each, sharing its disk, network interface and
    /// CPU; clients are spread over the groups.
    pub groups: usize,
    /// A checker across groups, built for each run.
    pub cross_check: Option<fn() -> Box<dyn check::CrossCheck>>,
    /// At the end of the run, restart every replica from its disk image alone, with the
    /// network healed and no clients, and check that together they recover every slot ever
    /// delivered (durability whether or not a majority was up at the end).
    pub restart_check: bool,
    /// A fixed fault schedule replacing the drawn one (for demonstrations and regressions).
    pub script: Vec<faults::Scripted>,
    /// Record [`Report::timeline`] in buckets of this length (0: not at all).
    pub timeline_us: u64,
    /// Checkers switched off (only to show that the others catch a bug on their own).
    pub disabled: Vec<Checker>,
    /// A bug planted in every node's host (to show the checkers catch it).
    pub host_bug: synod_host::HostBug,
    pub trace: bool,
}

impl<O> SimConfig<O> {
    pub fn new(nodes: usize, seed: u64, options: O) -> Self {
        Self {
            nodes,
            seed,
            options,
            app: App::Opaque,
            net: NetModel::lan(),
            disk: DiskModel::ssd(),
            cost: CostModel::free(),
            clock: ClockModel::default(),
            workload: Workload::default(),
            faults: FaultSet::all(),
            fault_window_us: 4_000_000,
            max_faults: 8,
            max_fault_us: 1_500_000,
            liveness_bound_us: 5_000_000,
            settle_window_us: 1_000_000,
            snapshot_every: 200,
            batch_commands: 512,
            stay_down: 0,
            a12_crashes: false,
            follower_invariant: None,
            run_for_us: None,
            warmup_us: 0,
            restart_check: true,
            groups: 1,
            cross_check: None,
            script: Vec::new(),
            timeline_us: 0,
            disabled: Vec::new(),
            host_bug: synod_host::HostBug::None,
            trace: false,
        }
    }
}

impl<O> SimConfig<O> {
    /// The same configuration with other protocol options.
    pub fn with_options<Q>(&self, options: Q) -> SimConfig<Q> {
        SimConfig {
            nodes: self.nodes,
            seed: self.seed,
            options,
            app: self.app.clone(),
            net: self.net.clone(),
            disk: self.disk.clone(),
            cost: self.cost.clone(),
            clock: self.clock.clone(),
            workload: self.workload.clone(),
            faults: self.faults.clone(),
            fault_window_us: self.fault_window_us,
            max_faults: self.max_faults,
            max_fault_us: self.max_fault_us,
            liveness_bound_us: self.liveness_bound_us,
            settle_window_us: self.settle_window_us,
            snapshot_every: self.snapshot_every,
            batch_commands: self.batch_commands,
            stay_down: self.stay_down,
            a12_crashes: self.a12_crashes,
            follower_invariant: self.follower_invariant,
            run_for_us: self.run_for_us,
            warmup_us: self.warmup_us,
            restart_check: self.restart_check,
            groups: self.groups,
            cross_check: self.cross_check,
            script: self.script.clone(),
            timeline_us: self.timeline_us,
            disabled: self.disabled.clone(),
            host_bug: self.host_bug,
            trace: self.trace,
        }
    }
}

/// What one run (or, merged, a set of runs) measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub runs: u64,
    pub violations: Vec<Violation>,
    /// Violations with the seed that reproduces each (filled when merging).
    pub failures: Vec<(u64, Violation)>,
    pub faults: BTreeMap<&'static str, u64>,
    pub submitted: u64,
    /// Batches handed to the cores (`submitted / batches` is the mean batch size).
    pub batches: u64,
    /// Commands delivered at the replica they were submitted to (client replies).
    pub completed: u64,
    /// Apply events at all replicas.
    pub deliveries: u64,
    /// Distinct slots delivered (summed over runs).
    pub committed: u64,
    pub virtual_us: u64,
    pub latency: Option<Histogram<u64>>,
    /// Latency of writes by the role (its name) of the replica they were submitted at, when
    /// they completed ([T]'s server-side latency at the leader and at followers).
    pub latency_by_role: BTreeMap<&'static str, Histogram<u64>>,
    /// Reads served locally.
    pub reads: u64,
    /// Messages received, by the role (its name) of the receiver at that moment and the
    /// message's kind.
    pub in_kinds: BTreeMap<(&'static str, &'static str), u64>,
    /// The cores' gauges sampled at the end of each run: name → (sum, samples).
    pub gauges: BTreeMap<&'static str, (f64, u64)>,
    /// Messages received / sent, by the role (its name) of the replica at that moment.
    pub msgs_in: BTreeMap<&'static str, u64>,
    pub msgs_out: BTreeMap<&'static str, u64>,
    /// Time from healing to a settled cluster, per run.
    pub settle_us: Vec<u64>,
    /// With the SconeKV app: its transactions (summed) and the runs that failed its checks.
    pub kv: Option<synod_kv::sim::KvSweep>,
    /// Broadcast-mode switches of switching variants: "to-base" (e.g. ZabCT → Zab) and
    /// "back-to-variant".
    pub switches: BTreeMap<&'static str, u64>,
    pub nodes: usize,
    /// Commands completed (client replies) by the replica they were submitted at, by node
    /// index, and their latency (per-site throughput and latency on a WAN).
    pub completed_by_node: Vec<u64>,
    pub latency_by_node: Vec<Option<Histogram<u64>>>,
    /// With `SimConfig::timeline_us`: per bucket of that length from the run's start (warm-up
    /// included), per node, (commands completed for clients submitted there, commands the
    /// node delivered).
    pub timeline: Vec<Vec<(u64, u64)>>,
}

impl Report {
    /// Messages received by replicas in role `r`.
    pub fn received_as(&self, r: Role) -> u64 {
        self.msgs_in.get(r.name()).copied().unwrap_or(0)
    }

    /// Messages sent by replicas in role `r`.
    pub fn sent_as(&self, r: Role) -> u64 {
        self.msgs_out.get(r.name()).copied().unwrap_or(0)
    }

    /// Messages of `kind` received by replicas in role `r`.
    pub fn received_kind_as(&self, r: Role, kind: &str) -> u64 {
        self.in_kinds
            .iter()
            .filter(|((role, k), _)| *role == r.name() && *k == kind)
            .map(|(_, n)| n)
            .sum()
    }

    /// Latency of the writes submitted at replicas in role `r`.
    pub fn latency_as(&self, r: Role) -> Option<&Histogram<u64>> {
        self.latency_by_role.get(r.name())
    }

    pub fn merge(&mut self, seed: u64, r: Report) {
        self.runs += r.runs;
        for v in r.violations {
            self.failures.push((seed, v));
        }
        for (k, v) in r.faults {
            *self.faults.entry(k).or_default() += v;
        }
        self.submitted += r.submitted;
        self.batches += r.batches;
        self.completed += r.completed;
        self.deliveries += r.deliveries;
        self.committed += r.committed;
        self.virtual_us += r.virtual_us;
        if let Some(h) = r.latency {
            match &mut self.latency {
                Some(l) => l.add(&h).expect("same histogram bounds"),
                None => self.latency = Some(h),
            }
        }
        for (role, h) in r.latency_by_role {
            match self.latency_by_role.get_mut(role) {
                Some(l) => l.add(&h).expect("same histogram bounds"),
                None => {
                    self.latency_by_role.insert(role, h);
                }
            }
        }
        self.reads += r.reads;
        for (k, v) in r.in_kinds {
            *self.in_kinds.entry(k).or_default() += v;
        }
        for (k, (sum, n)) in r.gauges {
            let e = self.gauges.entry(k).or_default();
            e.0 += sum;
            e.1 += n;
        }
        for (k, v) in r.msgs_in {
            *self.msgs_in.entry(k).or_default() += v;
        }
        for (k, v) in r.msgs_out {
            *self.msgs_out.entry(k).or_default() += v;
        }
        self.settle_us.extend(r.settle_us);
        if let Some(mut k) = r.kv {
            let mine = self.kv.get_or_insert_with(Default::default);
            for f in k.failures.iter_mut() {
                f.seed = seed;
            }
            mine.total.add(&k.total);
            mine.failures.append(&mut k.failures);
        }
        for (k, v) in r.switches {
            *self.switches.entry(k).or_default() += v;
        }
        grow(&mut self.completed_by_node, r.completed_by_node.len());
        for (a, b) in self.completed_by_node.iter_mut().zip(r.completed_by_node) {
            *a += b;
        }
        grow(&mut self.latency_by_node, r.latency_by_node.len());
        for (a, b) in self.latency_by_node.iter_mut().zip(r.latency_by_node) {
            match (a, b) {
                (Some(l), Some(h)) => l.add(&h).expect("same histogram bounds"),
                (a @ None, b) => *a = b,
                _ => {}
            }
        }
        grow(&mut self.timeline, r.timeline.len());
        for (a, b) in self.timeline.iter_mut().zip(r.timeline) {
            grow(a, b.len());
            for (x, y) in a.iter_mut().zip(b) {
                x.0 += y.0;
                x.1 += y.1;
            }
        }
    }

    /// Seeds with at least one violation, in order.
    pub fn failing_seeds(&self) -> Vec<u64> {
        let mut s: Vec<u64> = self.failures.iter().map(|(s, _)| *s).collect();
        s.dedup();
        s
    }

    pub fn percentile_us(&self, q: f64) -> u64 {
        self.latency.as_ref().map_or(0, |h| h.value_at_quantile(q))
    }
}

fn grow<T: Default>(v: &mut Vec<T>, len: usize) {
    if v.len() < len {
        v.resize_with(len, T::default);
    }
}

/// Run one seed of protocol `P`.
pub fn run_one<P: Hosted>(cfg: SimConfig<P::Options>) -> (Report, Option<String>) {
    let nodes = cfg.nodes;
    let (mut r, t) = World::<P>::new(cfg).run();
    r.nodes = nodes;
    (r, t)
}

/// Run every seed in `seeds` on `threads` worker threads and merge the reports (in seed order,
/// so the result does not depend on scheduling).
pub fn run_seeds<P: Hosted>(
    base: &SimConfig<P::Options>,
    seeds: std::ops::Range<u64>,
    threads: usize,
) -> Report
where
    P::Options: Send + Sync,
{
    let seeds: Vec<u64> = seeds.collect();
    let threads = threads.max(1).min(seeds.len().max(1));
    let chunks: Vec<Vec<(u64, Report)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let seeds = &seeds;
                s.spawn(move || {
                    seeds
                        .iter()
                        .skip(t)
                        .step_by(threads)
                        .map(|&seed| {
                            let mut cfg = base.clone();
                            cfg.seed = seed;
                            cfg.trace = false;
                            (seed, run_one::<P>(cfg).0)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("simulation worker"))
            .collect()
    });
    let mut all: Vec<(u64, Report)> = chunks.into_iter().flatten().collect();
    all.sort_by_key(|(s, _)| *s);
    let mut total = Report {
        nodes: base.nodes,
        ..Report::default()
    };
    for (seed, r) in all {
        total.merge(seed, r);
    }
    total
}
