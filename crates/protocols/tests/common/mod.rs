//! Helpers shared by the simulated sweeps of the registry's protocols.
#![allow(dead_code)] // each test file uses its own subset

use synod_sim::{Checker, Report};

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
