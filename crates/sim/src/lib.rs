//! synod's deterministic simulator: N replicas of any protocol core on virtual time, with a
//! network (latency, bandwidth, FIFO per connection, broken connections lose what is in
//! flight), disks (fsync latency, group commit, a crash loses what was not durable), closed-loop
//! clients, a seeded fault schedule, and checkers over every history.
//!
//! The same seed replays the same run exactly: all randomness comes from one seeded generator
//! and the cores get seeds derived from it.

pub mod check;
pub mod faults;
mod world;

pub use check::{Checker, History, Violation};
pub use faults::{FaultKind, FaultSet};
use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use synod_core::{Protocol, Role};
pub use world::World;

#[derive(Clone, Debug)]
pub struct NetModel {
    /// One-way latency, uniform in [min, max].
    pub latency_min_us: u64,
    pub latency_max_us: u64,
    pub bandwidth_bytes_per_s: u64,
}

impl NetModel {
    /// A LAN in one rack: 50–150 µs, 10 Gbit/s.
    pub fn lan() -> Self {
        Self {
            latency_min_us: 50,
            latency_max_us: 150,
            bandwidth_bytes_per_s: 1_250_000_000,
        }
    }
}

#[derive(Clone, Debug)]
pub struct DiskModel {
    /// fsync latency, uniform in [min, max].
    pub fsync_min_us: u64,
    pub fsync_max_us: u64,
}

impl DiskModel {
    /// A datacentre SSD: 100–400 µs per fsync.
    pub fn ssd() -> Self {
        Self {
            fsync_min_us: 100,
            fsync_max_us: 400,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Workload {
    /// Closed-loop clients; client c starts at replica c mod N.
    pub clients: usize,
    pub payload_bytes: usize,
    /// Pause between a reply and the next command.
    pub think_us: u64,
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
}

impl Default for Workload {
    fn default() -> Self {
        Self {
            clients: 6,
            payload_bytes: 64,
            think_us: 5_000,
            client_timeout_us: 1_000_000,
            backoff_us: 20_000,
            liveness_commands: 30,
            write_ratio: 1.0,
            read_service_us: 20,
        }
    }
}

#[derive(Clone, Debug)]
pub struct SimConfig<O> {
    pub nodes: usize,
    pub seed: u64,
    pub options: O,
    pub net: NetModel,
    pub disk: DiskModel,
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
    /// A fixed fault schedule replacing the drawn one (for demonstrations and regressions).
    pub script: Vec<faults::Scripted>,
    /// Checkers switched off (only to show that the others catch a bug on their own).
    pub disabled: Vec<Checker>,
    pub trace: bool,
}

impl<O> SimConfig<O> {
    pub fn new(nodes: usize, seed: u64, options: O) -> Self {
        Self {
            nodes,
            seed,
            options,
            net: NetModel::lan(),
            disk: DiskModel::ssd(),
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
            script: Vec::new(),
            disabled: Vec::new(),
            trace: false,
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
    /// Latency of writes submitted at the leader, and at followers ([T]'s server-side latency).
    pub latency_leader: Option<Histogram<u64>>,
    pub latency_follower: Option<Histogram<u64>>,
    /// Reads served locally.
    pub reads: u64,
    /// Messages received by the leader, by type.
    pub leader_in_kinds: BTreeMap<&'static str, u64>,
    /// The cores' gauges sampled at the end of each run: name → (sum, samples).
    pub gauges: BTreeMap<&'static str, (f64, u64)>,
    /// Messages received / sent, by the role of the replica at that moment
    /// (0 leader, 1 follower, 2 electing).
    pub msgs_in: [u64; 3],
    pub msgs_out: [u64; 3],
    /// Time from healing to a settled cluster, per run.
    pub settle_us: Vec<u64>,
    /// Broadcast-mode switches of switching variants: "to-base" (e.g. ZabCT → Zab) and
    /// "back-to-variant".
    pub switches: BTreeMap<&'static str, u64>,
    pub nodes: usize,
}

impl Report {
    pub(crate) fn count_in(&mut self, r: Role) {
        self.msgs_in[world::role_index(r)] += 1;
    }
    pub(crate) fn count_out(&mut self, r: Role) {
        self.msgs_out[world::role_index(r)] += 1;
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
        for (mine, theirs) in [
            (&mut self.latency, r.latency),
            (&mut self.latency_leader, r.latency_leader),
            (&mut self.latency_follower, r.latency_follower),
        ] {
            if let Some(h) = theirs {
                match mine {
                    Some(l) => l.add(&h).expect("same histogram bounds"),
                    None => *mine = Some(h),
                }
            }
        }
        self.reads += r.reads;
        for (k, v) in r.leader_in_kinds {
            *self.leader_in_kinds.entry(k).or_default() += v;
        }
        for (k, (sum, n)) in r.gauges {
            let e = self.gauges.entry(k).or_default();
            e.0 += sum;
            e.1 += n;
        }
        for i in 0..3 {
            self.msgs_in[i] += r.msgs_in[i];
            self.msgs_out[i] += r.msgs_out[i];
        }
        self.settle_us.extend(r.settle_us);
        for (k, v) in r.switches {
            *self.switches.entry(k).or_default() += v;
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

/// Run one seed of protocol `P`.
pub fn run_one<P: Protocol>(cfg: SimConfig<P::Options>) -> (Report, Option<String>) {
    let nodes = cfg.nodes;
    let (mut r, t) = World::<P>::new(cfg).run();
    r.nodes = nodes;
    (r, t)
}

/// Run every seed in `seeds` on `threads` worker threads and merge the reports (in seed order,
/// so the result does not depend on scheduling).
pub fn run_seeds<P: Protocol>(
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

pub mod protocols;
