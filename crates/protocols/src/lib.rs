//! The simulator's side of the protocol registry (crates/registry): `synod sim --protocol`
//! runs any registered name, with the simulator's settings laid over its options and only
//! the faults its assumptions allow. Nothing here is per family but the typed helpers that
//! experiments use to adjust one family's options ([`zab`], [`paxos`], [`mencius`]).

pub mod mencius;
pub mod paxos;
pub mod thesis;
pub mod zab;

pub use synod_registry::{Defaults, Tunings};
use synod_registry::{Family, Visit};
use synod_sim::{run_one, run_seeds, App, FaultKind, Report, SimConfig};

/// Registers of the workload under which out-of-order commit runs (κ of mencius.md §7.2:
/// 16 is the report's high-contention setting).
pub const OOO_REGISTERS: u32 = 16;

/// Every protocol that can be selected by name (the deliberately broken ones included).
pub fn names() -> Vec<&'static str> {
    synod_registry::names()
}

pub fn check_name(name: &str) -> Result<(), String> {
    match synod_registry::find(name, false) {
        Some(_) => Ok(()),
        None => Err(format!(
            "unknown protocol '{name}' (known: {})",
            names().join(", ")
        )),
    }
}

/// Check that the protocol supports `nodes` replicas.
pub fn check_size(name: &str, nodes: usize) -> Result<(), String> {
    synod_registry::check(name, nodes, false)
}

/// The simulator's settings over a name's options (then the caller's): batching bounded end
/// to end by `batch_commands` (at 1, one command per proposal, pipelined without a window of
/// batches: the thesis's protocols), equal states checked by digest, Mencius's revocation
/// block scaled to simulated load, and the register workload's commutation for M13.
struct Simulated<'a> {
    batch_commands: usize,
    commuting: bool,
    then: &'a dyn Tunings,
}

impl Tunings for Simulated<'_> {
    fn zab(&self, name: &str, mut o: synod_zab::Options) -> synod_zab::Options {
        o.max_batch = o.max_batch.min(self.batch_commands.max(1));
        if o.max_batch == 1 {
            o.window = usize::MAX;
        }
        self.then.zab(name, o)
    }

    fn paxos(&self, name: &str, mut o: synod_paxos::Options) -> synod_paxos::Options {
        // The simulator's state machine snapshots its history: equal states, equal bytes.
        o.check_digests = true;
        o.max_batch = o.max_batch.min(self.batch_commands.max(1));
        if o.max_batch == 1 {
            o.batching = synod_paxos::Batching::Adaptive {
                window: o.max_inflight as usize,
            };
        }
        self.then.paxos(name, o)
    }

    fn mencius(&self, name: &str, mut o: synod_mencius::Options) -> synod_mencius::Options {
        // Simulated runs last seconds: a block of β instances is revoked at a time, so β is
        // scaled to the simulated load (the report's 100,000 suits ~10,000 ops/s over WAN).
        o.beta = 1_000;
        o.max_batch = o.max_batch.min(self.batch_commands.max(1));
        if self.commuting {
            o.commute = Some(synod_sim::registers::commute);
        }
        self.then.mencius(name, o)
    }
}

/// The configuration protocol `name` of family `F` runs under: its options (the
/// simulator's settings, then `tunings`), the faults its assumptions allow, the invariant it
/// promises, and the zxids of its ZooKeeper groups.
pub fn configure<F: Family>(
    name: &str,
    cfg: &SimConfig<()>,
    tunings: &dyn Tunings,
) -> SimConfig<F::Options> {
    let a = F::assumptions(name, cfg.nodes);
    let sim = Simulated {
        batch_commands: cfg.batch_commands,
        commuting: a.commuting,
        then: tunings,
    };
    let mut c = cfg.with_options(F::options(name, &sim));
    if let App::ZooKeeper(app) = &mut c.app {
        app.zxids = F::ZXIDS;
    }
    if a.restricted {
        c.faults.0.retain(|k| {
            matches!(
                k,
                FaultKind::Crash | FaultKind::SlowNode | FaultKind::SlowDisk
            )
        });
        c.a12_crashes = true;
    }
    if a.follower_threshold.is_some() {
        c.follower_invariant = a.follower_threshold;
    }
    if a.needs_its_disk {
        c.faults.0.retain(|k| {
            !matches!(
                k,
                FaultKind::Corrupt | FaultKind::Wipe | FaultKind::WipeMajority
            )
        });
    }
    if a.commuting && c.workload.registers.is_none() {
        c.workload.registers = Some(OOO_REGISTERS);
    }
    c
}

struct Seeds<'a> {
    cfg: &'a SimConfig<()>,
    seeds: std::ops::Range<u64>,
    threads: usize,
    tunings: &'a dyn Tunings,
}

impl Visit for Seeds<'_> {
    type Out = Report;
    fn visit<F: Family>(self, name: &'static str) -> Report {
        let c = configure::<F>(name, self.cfg, self.tunings);
        run_seeds::<F>(&c, self.seeds, self.threads)
    }
}

/// Run a set of seeds of the named protocol, its options laid over by `tunings` (an
/// experiment fixing a parameter the name does not carry).
pub fn run_seeds_tuned(
    name: &str,
    cfg: &SimConfig<()>,
    seeds: std::ops::Range<u64>,
    threads: usize,
    tunings: &dyn Tunings,
) -> Result<Report, String> {
    check_name(name)?;
    check_size(name, cfg.nodes)?;
    let run = Seeds {
        cfg,
        seeds,
        threads,
        tunings,
    };
    Ok(synod_registry::visit(name, run).expect("checked"))
}

/// Run a set of seeds of the named protocol, with `cfg` giving everything but the options.
pub fn run_named_seeds(
    name: &str,
    cfg: &SimConfig<()>,
    seeds: std::ops::Range<u64>,
    threads: usize,
) -> Result<Report, String> {
    run_seeds_tuned(name, cfg, seeds, threads, &Defaults)
}

pub use zab::run_named_seeds_with;

struct One<'a>(&'a SimConfig<()>);

impl Visit for One<'_> {
    type Out = (Report, Option<String>);
    fn visit<F: Family>(self, name: &'static str) -> Self::Out {
        run_one::<F>(configure::<F>(name, self.0, &Defaults))
    }
}

/// Run one seed of the named protocol, returning its trace when `cfg.trace` is set.
pub fn run_named_one(name: &str, cfg: &SimConfig<()>) -> Result<(Report, Option<String>), String> {
    check_name(name)?;
    check_size(name, cfg.nodes)?;
    Ok(synod_registry::visit(name, One(cfg)).expect("checked"))
}

/// Options as a family's tweak: experiments adjust one family's options with a closure.
pub(crate) struct Tweak<'a, O>(pub(crate) &'a dyn Fn(&mut O));
