//! Mencius's options adjusted by a closure (experiments setting the report's timers).

use crate::{run_seeds_tuned, Tunings, Tweak};
use synod_mencius::Options;
use synod_sim::{Report, SimConfig};

impl Tunings for Tweak<'_, Options> {
    fn mencius(&self, _name: &str, mut o: Options) -> Options {
        (self.0)(&mut o);
        o
    }
}

/// Whether `name` is a Mencius protocol.
pub fn known(name: &str) -> bool {
    matches!(synod_registry::find(name, false), Some((_, "mencius")))
}

/// Run seeds of the named mencius, its options adjusted by `tweak`.
pub fn run_seeds_with(
    name: &str,
    cfg: &SimConfig<()>,
    seeds: std::ops::Range<u64>,
    threads: usize,
    tweak: &dyn Fn(&mut Options),
) -> Result<Report, String> {
    if !known(name) {
        return Err(format!("'{name}' is not a mencius"));
    }
    run_seeds_tuned(name, cfg, seeds, threads, &Tweak(tweak))
}
