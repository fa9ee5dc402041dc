//! The settled predicates the simulator's liveness checker relies on: each accepts its settled
//! state and refuses every near miss.

use synod_core::{every_replica_proposes, one_leader_followed_by_all, Role, View};

fn v(role: Role, leader: Option<u64>, epoch: u64) -> View {
    View {
        role,
        leader: leader.map(|l| l as synod_core::NodeId),
        epoch,
    }
}

#[test]
fn one_leader_followed_by_all_accepts_only_a_settled_group() {
    let settled = [
        v(Role::Leading, Some(1), 4),
        v(Role::Following, Some(1), 4),
        v(Role::Following, Some(1), 4),
    ];
    assert!(one_leader_followed_by_all(&settled));
    let near_misses: [&[View]; 6] = [
        &[],
        // two leaders
        &[v(Role::Leading, Some(1), 4), v(Role::Leading, Some(1), 4)],
        // no leader
        &[
            v(Role::Following, Some(1), 4),
            v(Role::Following, Some(1), 4),
        ],
        // a follower of another epoch
        &[v(Role::Leading, Some(1), 4), v(Role::Following, Some(1), 3)],
        // a follower of another leader
        &[v(Role::Leading, Some(1), 4), v(Role::Following, Some(2), 4)],
        // someone still electing
        &[v(Role::Leading, Some(1), 4), v(Role::Electing, None, 4)],
    ];
    for views in near_misses {
        assert!(!one_leader_followed_by_all(views), "{views:?}");
    }
}

#[test]
fn every_replica_proposes_accepts_only_proposers() {
    let all = [v(Role::Proposer, None, 1), v(Role::Proposer, Some(2), 1)];
    assert!(every_replica_proposes(&all));
    assert!(!every_replica_proposes(&[]));
    assert!(!every_replica_proposes(&[
        v(Role::Proposer, None, 1),
        v(Role::Electing, None, 1)
    ]));
    // A leader-based group is not settled by the multi-leader rule, nor the reverse.
    let led = [v(Role::Leading, Some(1), 1), v(Role::Following, Some(1), 1)];
    assert!(!every_replica_proposes(&led));
    assert!(!one_leader_followed_by_all(&all));
}
