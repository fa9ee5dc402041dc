//! The register workload end to end: a protocol that delivers in total order (zab) delivers
//! orders that are trivially equivalent up to commutation, so the checkers up to commutation
//! must pass it under every fault, exactly as the total-order checkers do.

use synod_sim::{run_seeds, FaultSet, SimConfig};
use synod_zab::{Options, Zab};

#[test]
fn zab_under_the_register_workload_passes_the_checkers_up_to_commutation() {
    let mut cfg = SimConfig::new(3, 0, Options::default());
    cfg.faults = FaultSet::all();
    cfg.fault_window_us = 2_000_000;
    cfg.workload.registers = Some(4);
    cfg.workload.barrier_ratio = 0.05;
    cfg.workload.pipeline = 2;
    cfg.snapshot_every = 50;
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let r = run_seeds::<Zab>(&cfg, 0..24, threads);
    assert!(
        r.failures.is_empty(),
        "{} violations, first: seed {} {}",
        r.failures.len(),
        r.failures[0].0,
        r.failures[0].1
    );
    assert!(r.committed > 24 * 100, "committed {}", r.committed);
}
