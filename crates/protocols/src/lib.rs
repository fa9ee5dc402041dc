//! The protocols the simulator (and the `synod sim` command) can run, by name, with the faults
//! each one's assumptions allow. It lives outside the simulator so that the simulator depends
//! on the contract (`synod-core`) only; a new protocol family registers here.
//!
//! Families: [`zab`] (Zab and the thesis's variants) [`paxos`] (PFT Multi-Paxos) and [`mencius`], each
//! with deliberately broken versions that exist to prove the checkers catch unsafe protocols.

pub mod mencius;
pub mod paxos;
pub mod thesis;
pub mod zab;

use synod_sim::{Report, SimConfig};
pub use zab::run_named_seeds_with;

/// The ZooKeeper app's zxids follow the family's positions (as the server's groups do).
pub(crate) fn zxids<O>(mut c: SimConfig<O>, zxids: synod_zk::group::Zxids) -> SimConfig<O> {
    if let synod_sim::App::ZooKeeper(app) = &mut c.app {
        app.zxids = zxids;
    }
    c
}

/// Every protocol that can be selected by name.
pub fn names() -> Vec<&'static str> {
    let mut v = zab::names();
    v.extend(paxos::names());
    v.extend(mencius::names());
    v
}

pub fn check_name(name: &str) -> Result<(), String> {
    if zab::known(name) || paxos::known(name) || mencius::known(name) {
        Ok(())
    } else {
        Err(format!(
            "unknown protocol '{name}' (known: {})",
            names().join(", ")
        ))
    }
}

/// Check that the protocol supports `nodes` replicas.
pub fn check_size(name: &str, nodes: usize) -> Result<(), String> {
    if paxos::known(name) || mencius::known(name) {
        Ok(())
    } else {
        zab::check_size(name, nodes)
    }
}

/// Run a set of seeds of the named protocol, with `cfg` giving everything but the options.
pub fn run_named_seeds(
    name: &str,
    cfg: &SimConfig<()>,
    seeds: std::ops::Range<u64>,
    threads: usize,
) -> Result<Report, String> {
    if paxos::known(name) {
        paxos::run_seeds_with(name, cfg, seeds, threads, &|_| {})
    } else if mencius::known(name) {
        mencius::run_seeds_with(name, cfg, seeds, threads, &|_| {})
    } else {
        run_named_seeds_with(name, cfg, seeds, threads, &|_| {})
    }
}

/// Run one seed of the named protocol, returning its trace when `cfg.trace` is set.
pub fn run_named_one(name: &str, cfg: &SimConfig<()>) -> Result<(Report, Option<String>), String> {
    check_name(name)?;
    if paxos::known(name) {
        Ok(paxos::run_one(name, cfg))
    } else if mencius::known(name) {
        Ok(mencius::run_one(name, cfg))
    } else {
        zab::run_named_one(name, cfg)
    }
}
