//! Configuration changes among the faults (`reconfig`: add, remove, promote, demote, replace,
//! and now and then a second change right behind the first), on whole nodes with the register
//! app: Zab stays safe and live, and each planted membership bug is caught. The full sweep
//! (10,000 seeds at N = 3 and 5) is a command: docs/membership.md.

mod common;

use common::{assert_clean, fired, sweep, threads};
use synod_sim::{App, Checker, SimConfig};

fn config(nodes: usize) -> SimConfig<()> {
    let mut cfg = SimConfig::new(nodes, 0, ());
    cfg.faults = "all,reconfig".parse().expect("fault names");
    cfg.app = App::Registers;
    cfg.max_faults = 16;
    cfg
}

#[test]
fn zab_with_configuration_changes_is_clean() {
    let _ = threads();
    for (nodes, seeds) in [(5, 0..40), (3, 0..30)] {
        let r = sweep("zab", &config(nodes), seeds);
        assert_clean(&r);
        let asked = r.faults.get("reconfig-done").copied().unwrap_or(0);
        assert!(asked > 5, "N = {nodes}: only {asked} changes delivered");
    }
}

/// At N = 5. Seed 270: a node whose disk was wiped knows only the configuration the group was
/// born with (five voters) while the group runs on three; it recovers because settled peers
/// report their configurations in their notifications (before that, it waited forever for a
/// majority of five to vouch for the leader). Seed 693: a voter restarted behind its log counts
/// two committed changes as pending and waits for majorities of configurations whose removed
/// voters no longer vote; a peer that reports a configuration committed now makes it so.
/// At N = 3, seed 642: that report left the restarted replica the only voter in the middle of
/// an election, and no vote would come to make it decide (the election now checks its votes
/// again when the configurations change).
/// At N = 3, seed 1542: a leader whose establishment committed the change that removed it
/// went on leading a group that no longer named it (establishment now acts on a committed
/// change as L2 does). Seed 1807: a replica restarted from a snapshot older than a committed
/// change counted it pending again, and the only peers that knew better had lost their disks
/// (a delivered change is now written into the hard state).
/// At N = 5, seed 1729: a replica recovering from a corrupt log knew only the configuration
/// before a change that added a voter back; it needed a quorum of the new configuration to
/// vouch for the leader, but never heard from the added voter, which its configuration did not
/// name and so its notifications never reached (a looking replica now asks each member of a
/// leader's newer configuration it has not heard from).
#[test]
fn regression_seeds() {
    for (nodes, seed) in [
        (5, 270),
        (5, 693),
        (3, 642),
        (3, 1542),
        (3, 1807),
        (5, 1729),
    ] {
        let r = sweep("zab", &config(nodes), seed..seed + 1);
        assert_clean(&r);
    }
}

#[test]
fn a_learner_counted_in_a_quorum_is_caught() {
    let r = sweep("zab-bug-learners-count", &config(5), 0..4);
    assert!(
        fired(&r).contains(&Checker::CrashTolerance),
        "{:?}",
        fired(&r)
    );
}

#[test]
fn a_change_in_force_on_its_own_say_so_is_caught() {
    // Quorums of the newest configuration alone: seed 78 delivers a change acknowledged by a
    // majority of the new voters but not of the old (crash-tolerance fires on seeds 78, 190,
    // 236, 270, 319 and 323 of 0..400; liveness or durability on 122, 179, 219, 332).
    let r = sweep("zab-bug-new-config-alone", &config(5), 78..79);
    assert!(
        fired(&r).contains(&Checker::CrashTolerance),
        "{:?}",
        fired(&r)
    );
}

#[test]
fn two_changes_in_flight_are_caught() {
    let r = sweep("zab-bug-two-changes", &config(5), 0..2);
    assert!(fired(&r).contains(&Checker::Config), "{:?}", fired(&r));
}
