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
