//! Mencius in the registry: `mencius`, and the deliberately broken `mencius-bug-*`, one per
//! hazard of mencius.md §6.3 that the report's literal pseudo-code (or a careless
//! implementation) would commit.

use synod_mencius::{Bug, Mencius, Options};
use synod_sim::{faults::FaultKind, run_one as sim_one, run_seeds, Report, SimConfig};

/// Registers of the workload under which out-of-order commit runs (κ of mencius.md §7.2:
/// 16 is the report's high-contention setting).
pub const OOO_REGISTERS: u32 = 16;

const NAMES: &[(&str, Option<Bug>)] = &[
    ("mencius", None),
    ("mencius-ooo", None),
    (
        "mencius-bug-commit-non-commuting",
        Some(Bug::CommitNonCommuting),
    ),
    ("mencius-bug-stale-skip", Some(Bug::StaleSkip)),
    ("mencius-bug-overwrite-learned", Some(Bug::OverwriteLearned)),
    ("mencius-bug-dueling-revokers", Some(Bug::DuelingRevokers)),
];

pub(crate) fn names() -> Vec<&'static str> {
    NAMES.iter().map(|(n, _)| *n).collect()
}

pub fn known(name: &str) -> bool {
    NAMES.iter().any(|(n, _)| *n == name)
}

/// The options a named mencius runs with in the simulator.
pub fn options(name: &str, cfg: &SimConfig<()>) -> Options {
    let &(_, bug) = NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .expect("a known name");
    let mut o = Options {
        bug,
        // Simulated runs last seconds: a block of β instances is revoked at a time, so β is
        // scaled to the simulated load (the report's 100,000 suits ~10,000 ops/s over WAN).
        beta: 1_000,
        ..Options::default()
    };
    o.max_batch = o.max_batch.min(cfg.batch_commands.max(1));
    if out_of_order(name) {
        o.commute = Some(synod_sim::registers::commute);
    }
    o
}

/// Whether the named mencius commits commuting commands out of order (M13): it then runs
/// the register workload, whose checkers compare histories up to commutation.
pub fn out_of_order(name: &str) -> bool {
    name == "mencius-ooo" || name == "mencius-bug-commit-non-commuting"
}

/// The simulator configuration of a named mencius: its options, and the faults it is built
/// for. A disk that comes back empty or cut (`wipe`, `corrupt`) is left out: a Mencius replica
/// that lost what it suggested cannot tell which of its instances it used, and one restored
/// with a lost disk stays out of the protocol (docs/protocols/mencius.md §10).
pub fn configure(name: &str, cfg: &SimConfig<()>) -> SimConfig<Options> {
    let mut c = crate::zxids(
        cfg.with_options(options(name, cfg)),
        synod_zk::group::Zxids::PaxosBatch,
    );
    if out_of_order(name) && c.workload.registers.is_none() {
        c.workload.registers = Some(OOO_REGISTERS);
    }
    c.faults.0.retain(|k| {
        !matches!(
            k,
            FaultKind::Corrupt | FaultKind::Wipe | FaultKind::WipeMajority
        )
    });
    c
}

/// Run seeds of the named mencius, its options adjusted by `tweak`.
pub fn run_seeds_with(
    name: &str,
    cfg: &SimConfig<()>,
    seeds: std::ops::Range<u64>,
    threads: usize,
    tweak: &dyn Fn(&mut Options),
) -> Result<Report, String> {
    crate::check_name(name)?;
    let mut c = configure(name, cfg);
    tweak(&mut c.options);
    Ok(run_seeds::<Mencius>(&c, seeds, threads))
}

pub(crate) fn run_one(name: &str, cfg: &SimConfig<()>) -> (Report, Option<String>) {
    sim_one::<Mencius>(configure(name, cfg))
}
