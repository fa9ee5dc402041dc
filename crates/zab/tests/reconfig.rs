//! Reconfiguration at the core (crates/zab/src/reconfig.rs): each refusal names its reason, a
//! removed voter and a learner never count, a configuration survives restarts, compaction and
//! state transfer, and the planted "learners count" bug is caught.

mod common;

use bytes::Bytes;
use common::Net;
use synod_core::{
    Change, Command, ConfigError, ConfigReject, Event, Input, NodeId, Reject, Snapshot,
};
use synod_zab::{Bug, Options, Variant};

fn change(expect: Option<u64>, voters: &[NodeId], learners: &[NodeId]) -> Change {
    Change {
        expect_version: expect,
        voters: voters.to_vec(),
        learners: learners.to_vec(),
    }
}

fn ask(net: &mut Net, at: NodeId, id: u64, c: Change) {
    let command = Command {
        id,
        payload: Bytes::from_static(b"reconfig"),
    };
    net.step(at, Input::Reconfigure { command, change: c });
}

fn refusal(net: &Net, node: NodeId, id: u64) -> Option<Reject> {
    net.node(node).events.iter().find_map(|e| match e {
        Event::Rejected { id: i, reason } if *i == id => Some(*reason),
        _ => None,
    })
}

fn delivered(net: &Net, node: NodeId, id: u64) -> bool {
    net.node(node).applied.iter().any(|&(_, c)| c == id)
}

/// A settled three-node cluster: (leader, its two followers).
fn settled(opts: Options) -> (Net, NodeId, NodeId, NodeId) {
    let mut net = Net::with_options(3, opts);
    net.run_for(3_000_000);
    let l = net.settled().expect("settled");
    let f: Vec<NodeId> = (1..=3).filter(|&i| i != l).collect();
    (net, l, f[0], f[1])
}

#[test]
fn every_refusal_names_its_reason() {
    let (mut net, l, f1, f2) = settled(Options::default());
    ask(&mut net, f1, 1, change(None, &[l, f1], &[]));
    assert_eq!(
        refusal(&net, f1, 1),
        Some(Reject::Config(ConfigReject::NotLeader))
    );
    ask(&mut net, l, 2, change(Some(7), &[l, f1], &[]));
    assert_eq!(
        refusal(&net, l, 2),
        Some(Reject::Config(ConfigReject::Stale { current: 0 }))
    );
    ask(&mut net, l, 3, change(Some(0), &[1, 2, 3], &[]));
    assert_eq!(
        refusal(&net, l, 3),
        Some(Reject::Config(ConfigReject::Unchanged))
    );
    ask(&mut net, l, 4, change(None, &[], &[1]));
    assert_eq!(
        refusal(&net, l, 4),
        Some(Reject::Config(ConfigReject::Invalid(ConfigError::NoVoters)))
    );
    // Two of the three new voters have never been heard of: no majority of them is current.
    ask(&mut net, l, 5, change(None, &[l, 8, 9], &[]));
    assert_eq!(
        refusal(&net, l, 5),
        Some(Reject::Config(ConfigReject::NoQuorum))
    );
    // A change in flight (its followers' disks stalled, so it cannot commit) holds the next.
    net.nodes[f1 as usize - 1].stalled = true;
    net.nodes[f2 as usize - 1].stalled = true;
    ask(&mut net, l, 6, change(Some(0), &[l, f1], &[f2]));
    ask(&mut net, l, 7, change(None, &[l, f1, f2], &[]));
    assert_eq!(refusal(&net, l, 6), None);
    assert_eq!(
        refusal(&net, l, 7),
        Some(Reject::Config(ConfigReject::InFlight))
    );
    let m = net.core(l).membership();
    assert_eq!(m.committed.version, 0);
    assert_eq!(m.pending.len(), 1, "the change is in force, pending");
    net.nodes[f1 as usize - 1].stalled = false;
    net.nodes[f2 as usize - 1].stalled = false;
    net.run_for(200_000);
    for n in [l, f1, f2] {
        assert!(delivered(&net, n, 6), "n{n} delivered the change");
        let m = net.core(n).membership();
        assert!(m.pending.is_empty(), "n{n}: {m:?}");
        assert_eq!(
            (m.committed.voters.clone(), m.committed.learners.clone()),
            (vec![l.min(f1), l.max(f1)], vec![f2])
        );
        assert!(m.committed.version > 0, "the version is the entry's zxid");
    }
    // The variants count against the group's size: they refuse.
    let (mut net, l, f1, _) = settled(Options {
        variant: Variant::Ct,
        ..Options::default()
    });
    ask(&mut net, l, 1, change(None, &[l, f1], &[]));
    assert_eq!(
        refusal(&net, l, 1),
        Some(Reject::Config(ConfigReject::Unsupported))
    );
}

/// Whether command `id`, submitted at the leader while `slow`'s disk is stalled, commits within
/// 100 ms (before the leader could give up on its quorum).
fn commits_without(net: &mut Net, l: NodeId, slow: NodeId, id: u64) -> bool {
    net.nodes[slow as usize - 1].stalled = true;
    net.submit_at_leader(l, id, 1);
    net.run_for(100_000);
    let done = delivered(net, l, id);
    net.nodes[slow as usize - 1].stalled = false;
    net.run_for(100_000);
    assert!(
        delivered(net, l, id),
        "command {id} commits once {slow} writes again"
    );
    done
}

#[test]
fn a_removed_voter_and_a_learner_never_count() {
    let (mut net, l, f1, f2) = settled(Options::default());
    // Before any change, either follower's ack makes a majority with the leader's.
    assert!(commits_without(&mut net, l, f2, 100));
    // f2 becomes a learner: f1 is now needed, and f2's acks never stand in for it.
    ask(&mut net, l, 1, change(None, &[l, f1], &[f2]));
    net.run_for(100_000);
    assert!(delivered(&net, f2, 1), "a learner receives the log");
    assert!(!commits_without(&mut net, l, f1, 101));
    assert!(commits_without(&mut net, l, f2, 102));
    // f2 removed altogether: the leader stops sending to it.
    ask(&mut net, l, 2, change(None, &[l, f1], &[]));
    net.run_for(100_000);
    assert!(!commits_without(&mut net, l, f1, 103));
    net.submit_at_leader(l, 104, 1);
    net.run_for(100_000);
    assert!(delivered(&net, f1, 104));
    assert!(
        !delivered(&net, f2, 104),
        "a removed replica no longer receives the log"
    );
}

#[test]
fn the_planted_learners_count_bug_commits_on_a_learner() {
    let (mut net, l, f1, f2) = settled(Options {
        bug: Some(Bug::LearnersCount),
        ..Options::default()
    });
    ask(&mut net, l, 1, change(None, &[l, f1], &[f2]));
    net.run_for(100_000);
    assert!(
        commits_without(&mut net, l, f1, 101),
        "with the bug, the learner's ack stands in for the voter's"
    );
}

#[test]
fn a_configuration_survives_restart_compaction_and_state_transfer() {
    let (mut net, l, f1, f2) = settled(Options {
        log_retain: 0,
        ..Options::default()
    });
    ask(&mut net, l, 1, change(None, &[l, f1, f2], &[4]));
    net.run_for(100_000);
    let want = net.core(l).membership();
    assert!(want.committed.is_learner(4));
    // f2 goes down; the others move on and compact past the change.
    net.crash(f2);
    net.submit_at_leader(l, 10, 20);
    net.run_for(200_000);
    for n in [l, f1] {
        let at = net.core(n).last().position();
        let slot = net.core(n).applied();
        assert_eq!(at.slot, slot);
        net.step(
            n,
            Input::Compact(Snapshot {
                at,
                data: Bytes::new(),
            }),
        );
    }
    net.run_for(50_000);
    for n in [l, f1] {
        assert!(
            net.node(n).durable.records.is_empty(),
            "n{n} compacted everything"
        );
        let hard = net.node(n).durable.hard.config.clone();
        assert_eq!(
            hard.as_deref(),
            Some(&*want.committed),
            "n{n}'s hard state keeps it"
        );
        // Restarted from that disk alone, it knows the configuration.
        net.crash(n);
        net.start(n, false);
        assert_eq!(net.core(n).membership(), want, "n{n} after a restart");
    }
    // f2 comes back behind the compacted log: a snapshot with the configuration brings it in.
    net.start(f2, false);
    net.run_for(3_000_000);
    assert!(net.settled().is_some());
    assert_eq!(net.core(f2).membership(), want);
    assert_eq!(
        net.node(f2).durable.hard.config.as_deref(),
        Some(&*want.committed)
    );
}
