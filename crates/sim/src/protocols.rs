//! The protocols the simulator (and the `synod sim` command) can run, by name.

use crate::{run_one, run_seeds, Report, SimConfig};
use synod_zab::{Bug, Options as ZabOptions, Zab};

/// Protocols that can be selected by name. The `zab-bug-*` entries are deliberately broken and
/// exist to prove that the checkers catch unsafe protocols.
pub const NAMES: &[&str] = &[
    "zab",
    "zab-bug-commit-own-ack",
    "zab-bug-ack-before-durable",
    "zab-bug-elect-anyone",
    "zab-bug-forward-twice",
];

fn zab_options(name: &str) -> Option<ZabOptions> {
    let bug = match name {
        "zab" => None,
        "zab-bug-commit-own-ack" => Some(Bug::CommitOnOwnAck),
        "zab-bug-ack-before-durable" => Some(Bug::AckBeforeDurable),
        "zab-bug-elect-anyone" => Some(Bug::ElectAnyone),
        "zab-bug-forward-twice" => Some(Bug::ForwardTwice),
        _ => return None,
    };
    Some(ZabOptions {
        bug,
        ..ZabOptions::default()
    })
}

pub fn check_name(name: &str) -> Result<(), String> {
    if NAMES.contains(&name) {
        Ok(())
    } else {
        Err(format!(
            "unknown protocol '{name}' (known: {})",
            NAMES.join(", ")
        ))
    }
}

/// Run a set of seeds of the named protocol, with `cfg` giving everything but the options.
pub fn run_named_seeds(
    name: &str,
    cfg: &SimConfig<()>,
    seeds: std::ops::Range<u64>,
    threads: usize,
) -> Result<Report, String> {
    check_name(name)?;
    let opts = zab_options(name).expect("checked");
    Ok(run_seeds::<Zab>(&with_options(cfg, opts), seeds, threads))
}

/// Run one seed of the named protocol, returning its trace when `cfg.trace` is set.
pub fn run_named_one(name: &str, cfg: &SimConfig<()>) -> Result<(Report, Option<String>), String> {
    check_name(name)?;
    let opts = zab_options(name).expect("checked");
    Ok(run_one::<Zab>(with_options(cfg, opts)))
}

pub fn with_options<O, P: Clone>(cfg: &SimConfig<O>, options: P) -> SimConfig<P> {
    SimConfig {
        nodes: cfg.nodes,
        seed: cfg.seed,
        options,
        net: cfg.net.clone(),
        disk: cfg.disk.clone(),
        workload: cfg.workload.clone(),
        faults: cfg.faults.clone(),
        fault_window_us: cfg.fault_window_us,
        max_faults: cfg.max_faults,
        max_fault_us: cfg.max_fault_us,
        liveness_bound_us: cfg.liveness_bound_us,
        settle_window_us: cfg.settle_window_us,
        snapshot_every: cfg.snapshot_every,
        stay_down: cfg.stay_down,
        disabled: cfg.disabled.clone(),
        trace: cfg.trace,
    }
}
