//! PFT's options adjusted by a closure (experiments fixing the batch size or the timers).

use crate::{configure, run_seeds_tuned, Defaults, Tunings, Tweak};
use synod_paxos::{Options, Paxos};
use synod_sim::{Report, SimConfig};

impl Tunings for Tweak<'_, Options> {
    fn paxos(&self, _name: &str, mut o: Options) -> Options {
        (self.0)(&mut o);
        o
    }
}

/// Whether `name` is a PFT protocol.
pub fn known(name: &str) -> bool {
    matches!(synod_registry::find(name, false), Some((_, "paxos")))
}

/// The options a named paxos runs with in the simulator.
pub fn options(name: &str, cfg: &SimConfig<()>) -> Options {
    configure::<Paxos>(name, cfg, &Defaults).options
}

/// Run seeds of the named paxos, its options adjusted by `tweak`.
pub fn run_seeds_with(
    name: &str,
    cfg: &SimConfig<()>,
    seeds: std::ops::Range<u64>,
    threads: usize,
    tweak: &dyn Fn(&mut Options),
) -> Result<Report, String> {
    if !known(name) {
        return Err(format!("'{name}' is not a paxos"));
    }
    run_seeds_tuned(name, cfg, seeds, threads, &Tweak(tweak))
}
