//! The whole node in the simulator: every node runs the server's host with three groups of the
//! register machine, whose relays cross the hosts' routing between groups and their resending.
//! Clean on every family, and each bug planted in the host is caught by a checker.

mod common;

use common::{config, fired, sweep};
use synod_host::HostBug;
use synod_sim::{App, Checker, SimConfig};

fn registers(bug: HostBug) -> SimConfig<()> {
    let mut cfg = config(3);
    cfg.groups = 3;
    cfg.app = App::Registers;
    cfg.host_bug = bug;
    cfg
}

#[test]
fn three_register_groups_per_node_are_clean_on_every_family() {
    for p in ["zab", "paxos", "mencius"] {
        let r = sweep(p, &registers(HostBug::None), 0..20);
        common::assert_clean(&r);
        assert!(r.committed > 0, "{p}");
    }
}

#[test]
fn a_routed_command_dropped_at_a_follower_is_caught() {
    // Relays wait in their sender's outbox for good when the target group's leader is on
    // another node: nothing ever reaches it.
    let r = sweep("paxos", &registers(HostBug::DropRoutedAtFollower), 0..30);
    assert!(
        fired(&r).contains(&Checker::GroupMessages),
        "{:?}",
        fired(&r)
    );
}

#[test]
fn a_host_that_never_resends_is_caught() {
    // A relay lost with a failed leader (or a forward lost in a view change) is never sent
    // again.
    let r = sweep("zab", &registers(HostBug::NoResend), 0..30);
    assert!(
        fired(&r).contains(&Checker::GroupMessages),
        "{:?}",
        fired(&r)
    );
}

#[test]
fn a_write_reported_durable_before_it_is_written_is_caught() {
    let r = sweep("zab", &registers(HostBug::DurableBeforeWrite), 0..5);
    assert!(
        fired(&r).contains(&Checker::CrashTolerance),
        "{:?}",
        fired(&r)
    );
}

#[test]
fn a_reply_sent_before_the_command_is_durable_is_caught() {
    let mut cfg = registers(HostBug::ReplyBeforeDurable);
    cfg.app = App::Opaque;
    let r = sweep("paxos", &cfg, 0..5);
    assert!(
        fired(&r).contains(&Checker::Acknowledged),
        "{:?}",
        fired(&r)
    );
}
