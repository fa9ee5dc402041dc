//! The election's tie-break: with equal histories the preferred replica is elected (a host
//! spreads the leaders of its many groups this way), and without a preference the highest id.

mod common;

use common::Net;
use synod_core::Role;
use synod_zab::Options;

fn leader_after_start(preferred: Option<u32>) -> u32 {
    let mut net = Net::with_options(
        5,
        Options {
            preferred_leader: preferred,
            ..Options::default()
        },
    );
    net.run_for(3_000_000);
    let leaders: Vec<u32> = (1..=5)
        .filter(|&i| net.view(i).role == Role::Leading)
        .collect();
    assert_eq!(leaders.len(), 1, "one leader: {leaders:?}");
    for i in 1..=5 {
        assert_eq!(
            net.view(i).leader,
            Some(leaders[0]),
            "replica {i} follows the leader"
        );
    }
    leaders[0]
}

#[test]
fn equal_histories_elect_the_preferred_replica() {
    assert_eq!(
        leader_after_start(None),
        5,
        "ZooKeeper's rule: the highest id"
    );
    for p in 1..=5 {
        assert_eq!(leader_after_start(Some(p)), p);
    }
}

/// Replicas start at different times: a preferred replica that comes up after the others have
/// agreed on another still leads, if it comes within `preferred_wait_us` (the buckets of a
/// SconeKV cluster spread their masters this way). Once it was heard from, its absence does
/// not hold up an election.
#[test]
fn a_preferred_replica_that_starts_late_is_waited_for() {
    // Without the wait (0), the replicas up first elect among themselves.
    for (late_ms, wait_us, expect_preferred) in [
        (300, 1_000_000, true),
        (1_500, 1_000_000, false),
        (300, 0, false),
    ] {
        let mut net = Net::with_options(
            3,
            Options {
                preferred_leader: Some(1),
                preferred_wait_us: wait_us,
                ..Options::default()
            },
        );
        net.isolate(1, true);
        net.run_for(late_ms * 1_000);
        net.isolate(1, false);
        net.run_for(3_000_000);
        let leader = net.settled().expect("one leader followed by all");
        assert_eq!(
            leader == 1,
            expect_preferred,
            "late by {late_ms} ms, wait {wait_us} µs: led by {leader}"
        );
    }
    // After the preferred leader was heard from and crashed, the others elect at once.
    let mut net = Net::with_options(
        3,
        Options {
            preferred_leader: Some(1),
            ..Options::default()
        },
    );
    net.run_for(1_000_000);
    assert_eq!(net.settled(), Some(1));
    net.crash(1);
    net.run_for(900_000);
    assert!(
        matches!(net.settled(), Some(l) if l != 1),
        "failover not slowed by the preferred wait: {:?}",
        net.settled()
    );
}
