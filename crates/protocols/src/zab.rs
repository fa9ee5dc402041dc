//! Zab's options adjusted by a closure (experiments: App. D's θ, JGroups' timeouts).

use crate::{run_seeds_tuned, Tunings, Tweak};
use synod_sim::{Report, SimConfig};
use synod_zab::Options;

impl Tunings for Tweak<'_, Options> {
    fn zab(&self, _name: &str, mut o: Options) -> Options {
        (self.0)(&mut o);
        o
    }
}

/// [`crate::run_named_seeds`], with a Zab's options adjusted by `tweak`.
pub fn run_named_seeds_with(
    name: &str,
    cfg: &SimConfig<()>,
    seeds: std::ops::Range<u64>,
    threads: usize,
    tweak: &dyn Fn(&mut Options),
) -> Result<Report, String> {
    run_seeds_tuned(name, cfg, seeds, threads, &Tweak(tweak))
}
