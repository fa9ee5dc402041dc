//! A cluster of one (ZooKeeper's standalone mode) elects itself and commits: no vote ever
//! arrives from a peer, so its own vote must decide the election.

use synod_sim::{run_seeds, FaultSet, SimConfig};
use synod_zab::{Options, Zab};

#[test]
fn a_single_zab_replica_leads_and_commits() {
    for faults in [FaultSet::none(), FaultSet::all()] {
        let mut cfg = SimConfig::new(1, 0, Options::default());
        cfg.faults = faults;
        let r = run_seeds::<Zab>(&cfg, 0..8, 2);
        assert!(r.failures.is_empty(), "{:?}", r.failures.first());
        assert!(r.committed > 8 * 100, "committed {}", r.committed);
    }
}
