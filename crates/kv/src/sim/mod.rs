//! A deterministic fault simulator for the transaction layer, with the serializability checker
//! on every run.
//!
//! Each bucket is a replicated group whose log is linearizable (Zab or Paxos, checked in their
//! own simulator), so here a bucket is one [`Bucket`](crate::Bucket) — the committed state of
//! its log — behind a master that fails over ([`world`], [`master`]). Closed-loop clients run
//! transactions over a dozen keys ([`clients`]) while, during a fault window, masters fail
//! (a random prefix of what was being replicated survives, what the old master sent is lost
//! or, sometimes, still delivered), replicas restored from snapshots take over, and messages
//! are lost, duplicated, delayed and reordered; then the faults heal, the clients finish, the
//! world goes quiet, and every key is read from every bucket's master.
//!
//! What a run checks:
//!
//! * the history ([`history`]: every transaction with the outcome its client heard or, if it
//!   heard nothing, the one its coordinator decided, plus the final reads) has no anomaly for
//!   [`synod_history::txn::check`];
//! * agreement: every outcome a client heard is the one its coordinator decided, each
//!   transaction is decided once, and a decision's versions match what the client observed;
//! * atomicity and exactly-once installs: each key's committed writes and deletes carry the
//!   versions 1, 2, … up to its final version, once each, and the last one's value is the
//!   final value ([`check::atomicity`]);
//! * liveness: once quiet, no bucket has a transaction in progress, a busy key or an
//!   unacknowledged message, and no transaction begun after the faults healed (and every
//!   master came back) ended without its client learning the outcome;
//! * snapshots: a restored state has the same digests and the same whole state (lock table
//!   included), and keeps answering and emitting exactly what the state it was restored from
//!   does, command after command, until the end of the run;
//! * a panic inside a bucket (an assertion) is a violation of its seed (`catch_unwind`).
//!
//! Virtual time, one seeded RNG, no threads inside a run: a seed replays exactly
//! (`synod sim --kv --seed N --trace` prints every command applied).

pub mod check;
pub mod clients;
pub mod cost;
pub mod elastic;
pub mod env;
pub mod history;
pub mod master;
pub mod scaling;
pub mod world;

use clients::{Clients, Workload};
use std::panic::{catch_unwind, AssertUnwindSafe};
use world::{Fault, NetCfg, World};

/// A bug planted in every bucket, to show the checker catches it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Plant {
    #[default]
    None,
    /// [`Bucket::plant_reset_on_delete`](crate::Bucket::plant_reset_on_delete).
    ResetOnDelete,
    /// [`Bucket::plant_skip_read_validation`](crate::Bucket::plant_skip_read_validation).
    SkipReadValidation,
}

#[derive(Clone, Debug)]
pub struct KvSimConfig {
    pub seed: u64,
    pub buckets: u32,
    pub workload: Workload,
    pub net: NetCfg,
    /// Inject faults (failovers, snapshot restores, loss) during the window.
    pub faults: bool,
    /// Length of the fault window, from the start (virtual microseconds).
    pub window_us: u64,
    /// Most faults drawn per run (1..=max_faults).
    pub max_faults: usize,
    /// Fraction of faults that restore a bucket from its snapshot (the rest are failovers, a
    /// third of them with a restored replica taking over).
    pub restore_ratio: f64,
    pub plant: Plant,
    /// How long the world may take to settle after the clients finished.
    pub drain_us: u64,
    /// Longest run (a liveness violation beyond it).
    pub max_us: u64,
    /// Keep the trace of every command applied (in [`KvReport::trace`]).
    pub trace: bool,
    /// The CPU cost model ([`cost`]): off (`None`) by default.
    pub cost: Option<cost::CostCfg>,
}

impl Default for KvSimConfig {
    fn default() -> Self {
        KvSimConfig {
            seed: 0,
            buckets: 3,
            workload: Workload::default(),
            net: NetCfg::default(),
            faults: true,
            window_us: 3_000_000,
            max_faults: 6,
            restore_ratio: 0.25,
            plant: Plant::None,
            drain_us: 10_000_000,
            max_us: 300_000_000,
            trace: false,
            cost: None,
        }
    }
}

impl KvSimConfig {
    /// No faults at all.
    pub fn quiet() -> Self {
        KvSimConfig {
            faults: false,
            ..KvSimConfig::default()
        }
    }
}

/// What one run (or a sweep: the sums) found.
#[derive(Clone, Debug, Default)]
pub struct KvReport {
    pub seed: u64,
    pub runs: u64,
    pub txns: u64,
    pub committed: u64,
    /// Committed transactions that touched more than one bucket.
    pub committed_multi: u64,
    pub aborted: u64,
    /// Transactions whose client never learnt the outcome (the history uses the coordinator's
    /// decision for them).
    pub unknown: u64,
    pub reverts: u64,
    pub fast_aborts: u64,
    pub failovers: u64,
    pub restores: u64,
    pub lost: u64,
    pub duplicated: u64,
    /// Operations of all transactions, and of committed ones.
    pub ops: u64,
    pub committed_ops: u64,
    /// Virtual time until the last client finished.
    pub virtual_us: u64,
    /// Found by the history checker.
    pub anomalies: Vec<String>,
    /// Found by the direct checks (liveness, atomicity, agreement, snapshots, panics).
    pub violations: Vec<String>,
    /// With [`KvSimConfig::trace`]: every command applied and every fault (up to a panic).
    pub trace: Vec<String>,
}

impl KvReport {
    pub fn ok(&self) -> bool {
        self.anomalies.is_empty() && self.violations.is_empty()
    }

    /// Operations per second of virtual time: all, and those of committed transactions.
    pub fn throughput(&self) -> (f64, f64) {
        let s = self.virtual_us.max(1) as f64 / 1e6;
        (self.ops as f64 / s, self.committed_ops as f64 / s)
    }

    /// One line: the counts and the first problem.
    pub fn summary(&self) -> String {
        let (tput, good) = self.throughput();
        let mut s = format!(
            "txns {} committed {} ({} multi-bucket) aborted {} unknown {} reverts {} \
             fast-aborts {} failovers {} restores {}; {:.0} ops/s, goodput {:.0} ops/s",
            self.txns,
            self.committed,
            self.committed_multi,
            self.aborted,
            self.unknown,
            self.reverts,
            self.fast_aborts,
            self.failovers,
            self.restores,
            tput,
            good
        );
        if let Some(a) = self.anomalies.first() {
            s += &format!("; anomaly: {a}");
        }
        if let Some(v) = self.violations.first() {
            s += &format!("; violation: {v}");
        }
        s
    }

    /// Add another run's counts (the problems stay with the run: see [`KvSweep`]).
    pub fn add(&mut self, r: &KvReport) {
        self.runs += r.runs;
        self.txns += r.txns;
        self.committed += r.committed;
        self.committed_multi += r.committed_multi;
        self.aborted += r.aborted;
        self.unknown += r.unknown;
        self.reverts += r.reverts;
        self.fast_aborts += r.fast_aborts;
        self.failovers += r.failovers;
        self.restores += r.restores;
        self.lost += r.lost;
        self.duplicated += r.duplicated;
        self.ops += r.ops;
        self.committed_ops += r.committed_ops;
        self.virtual_us += r.virtual_us;
    }
}

/// Run one seed; a panic inside is a violation of the report, not a panic of the caller.
pub fn run(cfg: &KvSimConfig) -> KvReport {
    let mut w = world_for(cfg);
    let result = catch_unwind(AssertUnwindSafe(|| run_world(cfg, &mut w)));
    let trace = std::mem::take(&mut w.log);
    match result {
        Ok(r) => KvReport { trace, ..r },
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            KvReport {
                seed: cfg.seed,
                runs: 1,
                violations: vec![format!("panic: {msg}")],
                trace,
                ..KvReport::default()
            }
        }
    }
}

/// The world of a configuration, with its bugs planted and its faults scheduled.
pub fn world_for(cfg: &KvSimConfig) -> World {
    let mut w = World::new(cfg.buckets, cfg.net.clone(), cfg.seed);
    w.trace = cfg.trace;
    w.set_cost(cfg.cost.clone());
    for n in &mut w.nodes {
        match cfg.plant {
            Plant::None => {}
            Plant::ResetOnDelete => n.bucket.plant_reset_on_delete(),
            Plant::SkipReadValidation => n.bucket.plant_skip_read_validation(),
        }
    }
    if cfg.faults {
        w.faulty_until = cfg.window_us;
        for _ in 0..w.between((1, cfg.max_faults.max(1) as u64)) {
            let at = w.between((0, cfg.window_us));
            let bucket = w.between((0, cfg.buckets as u64 - 1)) as u32;
            let fault = if w.chance(cfg.restore_ratio) {
                Fault::Restore { bucket }
            } else {
                Fault::Failover {
                    bucket,
                    down_us: w.between(cfg.net.failover_us),
                    restore: w.chance(1.0 / 3.0),
                }
            };
            w.inject(at, fault);
        }
    }
    w
}

fn run_world(cfg: &KvSimConfig, w: &mut World) -> KvReport {
    let mut clients = Clients::new(&cfg.workload, cfg.buckets);
    clients.start(w);
    let mut violations = Vec::new();
    let mut done_at = None;
    loop {
        if clients.done() {
            let since = *done_at.get_or_insert(w.now);
            if w.quiet() && w.settled() {
                break;
            }
            if w.now > since + cfg.drain_us {
                violations.push(check::unsettled(w));
                break;
            }
        } else if w.now > cfg.max_us {
            violations.push(format!(
                "the clients did not finish in {} s of virtual time",
                cfg.max_us / 1_000_000
            ));
            break;
        }
        let until = w.now + 10_000;
        if let Some(ev) = w.step(until) {
            clients.handle(ev, w);
        }
    }
    let stable_at = w.faulty_until.max(w.last_up);
    let mut report = check::check(w, &clients, stable_at);
    report.seed = cfg.seed;
    report.violations.splice(0..0, violations);
    report
}

/// The runs of a range of seeds: the sums, and the report of every failing seed.
#[derive(Clone, Debug, Default)]
pub struct KvSweep {
    pub total: KvReport,
    pub failures: Vec<KvReport>,
}

impl KvSweep {
    pub fn ok(&self) -> bool {
        self.failures.is_empty()
    }

    /// Count a run (kept if it failed).
    pub fn add(&mut self, r: KvReport) {
        self.total.add(&r);
        if !r.ok() {
            self.failures.push(r);
        }
    }
}

/// Run `seeds` of `cfg` (its own seed is ignored).
pub fn sweep(cfg: &KvSimConfig, seeds: std::ops::Range<u64>) -> KvSweep {
    sweep_threads(cfg, seeds, 1)
}

/// The same on `threads` threads (each seed still runs alone and replays exactly).
pub fn sweep_threads(cfg: &KvSimConfig, seeds: std::ops::Range<u64>, threads: usize) -> KvSweep {
    let next = std::sync::atomic::AtomicU64::new(seeds.start);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if seed >= seeds.end {
                    break;
                }
                let r = run(&KvSimConfig {
                    seed,
                    ..cfg.clone()
                });
                results.lock().expect("not poisoned").push(r);
            });
        }
    });
    let mut results = results.into_inner().expect("not poisoned");
    results.sort_by_key(|r| r.seed);
    let mut sweep = KvSweep::default();
    for r in results {
        sweep.add(r);
    }
    sweep
}
