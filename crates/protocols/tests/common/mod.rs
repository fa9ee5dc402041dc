//! Helpers shared by the simulated sweeps of the registry's protocols.
#![allow(dead_code)] // each test file uses its own subset

use synod_sim::{Checker, FaultSet, Report, SimConfig};

pub fn threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// No checker fired in any run; otherwise the first violation and its seed.
pub fn assert_clean(r: &Report) {
    assert!(
        r.failures.is_empty(),
        "{} violations, first: seed {} {}",
        r.failures.len(),
        r.failures[0].0,
        r.failures[0].1
    );
}

/// The checkers that fired, each once, in order.
pub fn fired(r: &Report) -> Vec<Checker> {
    let mut c: Vec<Checker> = r.failures.iter().map(|(_, v)| v.checker.clone()).collect();
    c.sort();
    c.dedup();
    c
}

/// Every fault kind, with a fault window shorter than the command line's default so that the
/// suites stay within minutes.
pub fn config(nodes: usize) -> SimConfig<()> {
    let mut cfg = SimConfig::new(nodes, 0, ());
    cfg.faults = FaultSet::all();
    cfg.fault_window_us = 3_000_000;
    cfg
}

/// Run `seeds` of the named protocol.
pub fn sweep(name: &str, cfg: &SimConfig<()>, seeds: std::ops::Range<u64>) -> Report {
    synod_protocols::run_named_seeds(name, cfg, seeds, threads()).expect("known protocol")
}

/// Each seed of the named protocol, with the command line's defaults and every fault kind,
/// changed by `shape`, runs without a violation (regression seeds).
pub fn assert_seeds_clean(name: &str, seeds: &[u64], shape: impl Fn(&mut SimConfig<()>)) {
    for &seed in seeds {
        let mut cfg = SimConfig::new(3, seed, ());
        cfg.faults = FaultSet::all();
        shape(&mut cfg);
        let (r, _) = synod_protocols::run_named_one(name, &cfg).expect("known protocol");
        assert!(
            r.violations.is_empty(),
            "{name} seed {seed}: {:?}",
            r.violations
        );
    }
}
