//! Recovery after lost state (docs/protocols/zab.md, "Recovery after lost state"): a replica
//! restored with `DurableState::lost` marks itself recovering durably before any message,
//! abstains in elections, follows only a leader that a fresh quorum of OTHER replicas vouches
//! for, never counts in a discovery quorum, and clears its mark in the durable write that
//! ACKNEWLEADER waits for.

mod common;

use common::{Net, Trace};
use synod_core::{
    Actions, Cluster, Dest, DurableState, Input, NodeId, Protocol, Role, StorageOp, TimeUs,
};
use synod_zab::{Entry, Hard, LogSummary, Msg, Options, PeerState, Point, Vote, Zab, Zxid};

type Out = Actions<Msg, Entry, Hard>;

fn restore(me: NodeId, n: u32, durable: DurableState<Entry, Hard>) -> Zab {
    Zab::restore(
        Cluster::new(me, (1..=n).collect()),
        Options::default(),
        durable,
        7,
    )
}

fn step(z: &mut Zab, now: TimeUs, input: Input<Msg>) -> Out {
    let mut out = Out::default();
    z.step(now, input, &mut out);
    out
}

/// The first steps of an incarnation, into one output: it boots (`Input::Start`, where a lost
/// disk's recovering mark is written) and its first timer fires.
fn boot(z: &mut Zab, now: TimeUs) -> Out {
    let mut out = Out::default();
    z.step(now, Input::Start, &mut out);
    z.step(now, Input::Timeout, &mut out);
    out
}

fn msg(from: NodeId, msg: Msg) -> Input<Msg> {
    Input::Message { from, msg }
}

fn looking(round: u64, vote: Vote) -> Msg {
    Msg::Notification {
        round,
        vote,
        state: PeerState::Looking,
        accepted: 0,
        configs: vec![],
    }
}

fn settled(leader: NodeId, state: PeerState, accepted: u32) -> Msg {
    Msg::Notification {
        round: 1,
        vote: Vote {
            epoch: 1,
            zxid: Zxid::new(1, 3),
            leader,
        },
        state,
        accepted,
        configs: vec![],
    }
}

fn lost_disk(hard: Hard) -> DurableState<Entry, Hard> {
    DurableState {
        hard,
        lost: true,
        ..DurableState::default()
    }
}

fn sent_follower_info(out: &Out) -> bool {
    out.send
        .iter()
        .any(|e| matches!(e.msg, Msg::FollowerInfo { .. }))
}

// ------------------------------------------------------------------------------ (a)

/// (a) Restored with `lost`, the replica's first output is the durable write of
/// `recovering = true`; every message of that step waits for it; and it abstains: its votes name
/// no one, and however many votes for itself or others it receives, it never decides.
#[test]
fn a_lost_disk_marks_recovering_durably_before_any_message_and_abstains() {
    let hard = Hard {
        accepted_epoch: 4,
        accepted_leader: 2,
        current_epoch: 3,
        led_epoch: 0,
        recovering: false,
        config: None,
    };
    let mut z = restore(1, 3, lost_disk(hard));
    assert!(z.recovering());
    let out = boot(&mut z, 0);
    let mark = match out.persist.first() {
        Some(p) => match &p.op {
            StorageOp::SetHard(h) => {
                assert!(h.recovering, "the first write marks the replica recovering");
                assert_eq!(
                    (h.accepted_epoch, h.current_epoch),
                    (4, 3),
                    "the mark keeps what survived"
                );
                p.seq
            }
            op => panic!("the first write is {op:?}, not the recovering mark"),
        },
        None => panic!("no durable recovering mark"),
    };
    assert!(!out.send.is_empty(), "it announces itself");
    for e in &out.send {
        assert!(
            e.after_durable >= mark,
            "{:?} may leave before the recovering mark is durable",
            e.msg
        );
        match &e.msg {
            Msg::Notification { vote, state, .. } => {
                assert_eq!(*state, PeerState::Looking);
                assert_eq!(*vote, Vote::default(), "a recovering replica abstains");
            }
            m => panic!("unexpected {m:?}"),
        }
    }
    // Once the mark is durable, messages no longer wait for it.
    step(&mut z, 1, Input::Durable { upto: mark });
    // Both others vote for it, then for node 2, in its round and in later rounds: it adopts
    // nothing, counts nothing, and never decides.
    let mut now = 10;
    for (round, leader) in [(1, 1), (1, 2), (5, 2), (6, 1)] {
        let vote = Vote {
            epoch: 3,
            zxid: Zxid::new(3, 9),
            leader,
        };
        for from in [2, 3] {
            let out = step(&mut z, now, msg(from, looking(round, vote)));
            assert!(out.persist.is_empty() && !sent_follower_info(&out));
            now += 1;
        }
    }
    for _ in 0..50 {
        now += 100_000;
        let out = step(&mut z, now, Input::Timeout);
        for e in &out.send {
            assert_eq!(e.after_durable, 0, "the mark is durable: {:?}", e.msg);
            match &e.msg {
                Msg::Notification { vote, .. } => assert_eq!(*vote, Vote::default()),
                m => panic!("a recovering replica sent {m:?} while electing"),
            }
        }
        assert_eq!(z.role(), Role::Electing);
    }
}

/// (a') A replica that lost nothing writes nothing at restore and votes for itself.
#[test]
fn a_replica_that_lost_nothing_is_not_recovering() {
    let mut z = restore(1, 3, DurableState::default());
    let out = step(&mut z, 0, Input::Timeout);
    assert!(!z.recovering() && out.persist.is_empty());
    assert!(out.send.iter().all(|e| e.after_durable == 0
        && matches!(e.msg, Msg::Notification { vote, .. } if vote.leader == 1)));
}

// ------------------------------------------------------------------------------ (e)

/// (e) The join rule: a recovering replica follows leader L only when a quorum of replicas
/// OTHER than itself report that they accepted L's epoch, L's own LEADING report among them.
/// L's word alone is not enough at N = 3 (it would be, counting the recovering replica itself),
/// nor is a follower that has not accepted the epoch yet.
#[test]
fn a_recovering_replica_follows_only_a_leader_a_quorum_of_others_vouches_for() {
    let mut z = restore(3, 3, lost_disk(Hard::default()));
    let out = boot(&mut z, 0);
    step(
        &mut z,
        1,
        Input::Durable {
            upto: out.persist[0].seq,
        },
    );
    let out = step(&mut z, 2, msg(1, settled(1, PeerState::Leading, 5)));
    assert!(
        !sent_follower_info(&out),
        "joined on the leader's word alone (the replica counted itself)"
    );
    // A follower of L that has not accepted L's epoch yet vouches for nothing.
    let out = step(&mut z, 3, msg(2, settled(1, PeerState::Following, 0)));
    assert!(
        !sent_follower_info(&out),
        "joined on a follower still in discovery"
    );
    // A follower that accepted another epoch from L does not vouch for epoch 5.
    let out = step(&mut z, 4, msg(2, settled(1, PeerState::Following, 4)));
    assert!(
        !sent_follower_info(&out),
        "joined on reports of different epochs"
    );
    let out = step(&mut z, 5, msg(2, settled(1, PeerState::Following, 5)));
    let info = out
        .send
        .iter()
        .find_map(|e| match (&e.to, &e.msg) {
            (Dest::One(1), Msg::FollowerInfo { recovering, .. }) => Some(*recovering),
            _ => None,
        })
        .expect("a quorum of others vouches for leader 1 in epoch 5: follow it");
    assert!(info, "its FOLLOWERINFO says it is recovering");
    // A NEWEPOCH below the vouched epoch is refused (back to LOOKING).
    let out = step(&mut z, 6, msg(1, Msg::NewEpoch { epoch: 4 }));
    assert!(!out
        .send
        .iter()
        .any(|e| matches!(e.msg, Msg::AckEpoch { .. })));
    assert_eq!(z.role(), Role::Electing);
}

// ------------------------------------------------------------------------------ (c)

/// Drive a fresh replica `me` of an `n`-replica cluster to LEADING (discovery) on the votes of
/// `voters`.
fn elected_leader(me: NodeId, n: u32, voters: &[NodeId]) -> Zab {
    let mut z = restore(me, n, DurableState::default());
    step(&mut z, 0, Input::Timeout);
    let vote = Vote {
        epoch: 0,
        zxid: Zxid::ZERO,
        leader: me,
    };
    for &v in voters {
        step(&mut z, 1, msg(v, looking(1, vote)));
    }
    step(&mut z, 1_000_000, Input::Timeout);
    z
}

fn info(recovering: bool) -> Msg {
    Msg::FollowerInfo {
        accepted_epoch: 0,
        accepted_leader: 0,
        recovering,
    }
}

fn new_epoch_sent(out: &Out) -> Option<u32> {
    out.send.iter().find_map(|e| match e.msg {
        Msg::NewEpoch { epoch } => Some(epoch),
        _ => None,
    })
}

fn syncs_sent(out: &Out) -> Vec<NodeId> {
    out.send
        .iter()
        .filter_map(|e| match (&e.to, &e.msg) {
            (Dest::One(p), Msg::Sync { .. }) => Some(*p),
            _ => None,
        })
        .collect()
}

/// (c) N = 3: the leader and a recovering follower would be a quorum. Neither its FOLLOWERINFO
/// nor its ACKEPOCH counts, and its history (here far ahead of the leader's) never makes the
/// leader abdicate; with the normal follower the leader proceeds and synchronises both.
#[test]
fn a_recovering_follower_does_not_count_toward_discovery_at_three() {
    let mut l = elected_leader(1, 3, &[2]);
    let out = step(&mut l, 2_000_000, msg(3, info(true)));
    assert_eq!(
        new_epoch_sent(&out),
        None,
        "the recovering follower's FOLLOWERINFO completed the discovery quorum"
    );
    let out = step(&mut l, 2_000_001, msg(2, info(false)));
    let epoch = new_epoch_sent(&out).expect("the leader and a normal follower are a quorum");
    // The recovering follower claims a longer, later history: it must not weigh.
    let ahead = LogSummary {
        base: Point::default(),
        epochs: vec![(9, 40)],
        overflow: false,
    };
    let out = step(
        &mut l,
        2_000_002,
        msg(
            3,
            Msg::AckEpoch {
                epoch,
                current_epoch: 9,
                summary: ahead,
            },
        ),
    );
    assert!(
        !out.send
            .iter()
            .any(|e| matches!(e.msg, Msg::Notification { .. })),
        "the leader abdicated to a recovering follower's history"
    );
    assert!(
        syncs_sent(&out).is_empty(),
        "the recovering follower's ACKEPOCH completed the quorum"
    );
    let out = step(
        &mut l,
        2_000_003,
        msg(
            2,
            Msg::AckEpoch {
                epoch,
                current_epoch: 0,
                summary: LogSummary::default(),
            },
        ),
    );
    assert_eq!(
        syncs_sent(&out),
        vec![2, 3],
        "a normal quorum: both followers are synchronised, the recovering one too"
    );
}

/// (c') N = 5: the leader, one normal and one recovering follower are not a quorum.
#[test]
fn a_recovering_follower_does_not_count_toward_discovery_at_five() {
    let mut l = elected_leader(1, 5, &[2, 3]);
    step(&mut l, 2_000_000, msg(2, info(false)));
    let out = step(&mut l, 2_000_001, msg(4, info(true)));
    assert_eq!(new_epoch_sent(&out), None);
    let out = step(&mut l, 2_000_002, msg(3, info(false)));
    let epoch = new_epoch_sent(&out).expect("three normal replicas are a quorum");
    let ack = |current_epoch| Msg::AckEpoch {
        epoch,
        current_epoch,
        summary: LogSummary::default(),
    };
    step(&mut l, 2_000_003, msg(2, ack(0)));
    let out = step(&mut l, 2_000_004, msg(4, ack(0)));
    assert!(syncs_sent(&out).is_empty());
    let out = step(&mut l, 2_000_005, msg(3, ack(0)));
    assert_eq!(syncs_sent(&out), vec![2, 3, 4]);
}

// ------------------------------------------------------------------------------ (b), (d)

/// Where in the trace `node`'s incarnation `inc` made `recovering = false` durable, and where
/// it sent its first ack of any kind (ACKNEWLEADER or a proposal ack).
fn clear_and_first_ack(net: &Net, node: NodeId, inc: u32) -> (usize, usize) {
    let t = net.trace_of(node, inc);
    let clear_seq = t
        .iter()
        .find_map(|(_, e)| match e {
            Trace::Persist {
                seq,
                op: StorageOp::SetHard(h),
                ..
            } if !h.recovering => Some(*seq),
            _ => None,
        })
        .expect("the recovering mark is cleared");
    let durable_at = t
        .iter()
        .find_map(|(i, e)| match e {
            Trace::Durable { upto, .. } if *upto >= clear_seq => Some(*i),
            _ => None,
        })
        .expect("the clearing write becomes durable");
    let first_ack = t
        .iter()
        .find_map(|(i, e)| match e {
            Trace::Send {
                msg: Msg::AckNewLeader { .. } | Msg::Ack { .. },
                ..
            } => Some(*i),
            _ => None,
        })
        .expect("the recovered replica acks");
    (durable_at, first_ack)
}

/// Every vote `node` sent in incarnation `inc` before its first ACKNEWLEADER abstains, and
/// every FOLLOWERINFO says it is recovering.
fn abstained_until_synced(net: &Net, node: NodeId, inc: u32) {
    for (_, e) in net.trace_of(node, inc) {
        match e {
            Trace::Send {
                msg: Msg::AckNewLeader { .. },
                ..
            } => return,
            Trace::Send {
                msg: Msg::Notification { vote, state, .. },
                ..
            } if *state == PeerState::Looking => {
                assert_eq!(*vote, Vote::default(), "a recovering replica voted")
            }
            Trace::Send {
                msg: Msg::FollowerInfo { recovering, .. },
                ..
            } => assert!(recovering, "a recovering replica's FOLLOWERINFO"),
            _ => {}
        }
    }
}

fn settle(net: &mut Net) -> NodeId {
    for _ in 0..40 {
        net.run_for(100_000);
        if let Some(l) = net.settled() {
            return l;
        }
    }
    panic!("the cluster never settled");
}

/// (b) N = 3: a follower's disk comes back empty. It marks itself recovering before it sends
/// anything, abstains, joins the leader the two others follow, is synchronised (its log and
/// deliveries equal the leader's again), and its mark is cleared durably before its first ack.
#[test]
fn a_wiped_follower_rejoins_the_leader_the_others_follow() {
    let mut net = Net::new(3);
    let leader = settle(&mut net);
    net.submit_at_leader(leader, 1, 20);
    net.run_for(200_000);
    let r = (1..=3).find(|&p| p != leader).unwrap();
    assert_eq!(net.node(r).applied.len(), 20);
    net.crash(r);
    net.nodes[r as usize - 1].durable = DurableState::default();
    net.start(r, true);
    let inc = net.node(r).inc;
    let back = settle(&mut net);
    assert_eq!(back, leader, "the others kept their leader");
    let z = net.core(r);
    assert!(!z.recovering(), "synchronised: no longer recovering");
    assert!(!net.node(r).durable.hard.recovering, "and durably so");
    assert_eq!(z.last(), net.core(leader).last());
    assert_eq!(net.node(r).applied, net.node(leader).applied);
    // The mark came first, and nothing left before it was durable.
    let t = net.trace_of(r, inc);
    let first_write = t.iter().find_map(|(_, e)| match e {
        Trace::Persist { seq, op, .. } => Some((*seq, op.clone())),
        _ => None,
    });
    assert!(matches!(first_write, Some((1, StorageOp::SetHard(h))) if h.recovering));
    let mark_durable = t
        .iter()
        .position(|(_, e)| matches!(e, Trace::Durable { upto, .. } if *upto >= 1))
        .expect("the mark becomes durable");
    let first_send = t
        .iter()
        .position(|(_, e)| matches!(e, Trace::Send { .. }))
        .expect("it sends");
    assert!(mark_durable < first_send, "a message left before the mark");
    abstained_until_synced(&net, r, inc);
    let (cleared, first_ack) = clear_and_first_ack(&net, r, inc);
    assert!(
        cleared < first_ack,
        "the first ack left before recovering = false was durable"
    );
    // Still a working cluster: the recovered follower acks and delivers new commands.
    net.submit_at_leader(leader, 100, 5);
    net.run_for(200_000);
    assert_eq!(net.node(r).applied, net.node(leader).applied);
}

/// (b') N = 3: the recovering replica's own word never completes a quorum. With the other
/// follower down, the leader's LEADING report alone does not make it follow; with neither of
/// them serving, no election ends; once the other follower is back, it joins the leader the
/// two others elect.
#[test]
fn a_wiped_replica_waits_for_a_quorum_of_others() {
    let mut net = Net::new(3);
    let leader = settle(&mut net);
    net.submit_at_leader(leader, 1, 10);
    net.run_for(200_000);
    let mut others = (1..=3).filter(|&p| p != leader);
    let (r, x) = (others.next().unwrap(), others.next().unwrap());
    net.crash(x);
    net.crash(r);
    net.nodes[r as usize - 1].durable = DurableState::default();
    net.start(r, true);
    let inc = net.node(r).inc;
    net.run_for(2_000_000);
    assert!(
        !net.trace_of(r, inc).iter().any(|(_, e)| matches!(
            e,
            Trace::Send {
                msg: Msg::FollowerInfo { .. },
                ..
            }
        )),
        "followed a leader on its own word and its own vote"
    );
    assert!(net.view(leader).role != Role::Leading && net.view(r).role == Role::Electing);
    net.start(x, false);
    settle(&mut net);
    assert!(!net.core(r).recovering());
    abstained_until_synced(&net, r, inc);
    let (cleared, first_ack) = clear_and_first_ack(&net, r, inc);
    assert!(cleared < first_ack);
    // Nothing committed was lost: 10 commands everywhere.
    for p in 1..=3 {
        assert_eq!(net.core(p).last().slot, 10, "node {p}");
    }
}

/// (d) A crash during recovery: the durable mark survives, so a restart from a disk that
/// reports nothing lost (`lost = false`, `hard.recovering = true`) still recovers: it abstains,
/// follows only the leader the others vouch for, and clears the mark before its first ack.
#[test]
fn a_crash_while_recovering_still_recovers() {
    let mut net = Net::new(3);
    let leader = settle(&mut net);
    net.submit_at_leader(leader, 1, 10);
    net.run_for(200_000);
    let r = (1..=3).find(|&p| p != leader).unwrap();
    net.crash(r);
    net.nodes[r as usize - 1].durable = DurableState::default();
    // It restarts cut off from everyone, so it stays recovering, then crashes again.
    net.isolate(r, true);
    net.start(r, true);
    net.run_for(500_000);
    assert!(net.core(r).recovering());
    net.crash(r);
    assert!(
        net.node(r).durable.hard.recovering,
        "the mark is durable before the second crash"
    );
    net.isolate(r, false);
    net.start(r, false);
    let inc = net.node(r).inc;
    assert!(
        net.core(r).recovering(),
        "a durable mark keeps it recovering"
    );
    settle(&mut net);
    abstained_until_synced(&net, r, inc);
    let (cleared, first_ack) = clear_and_first_ack(&net, r, inc);
    assert!(cleared < first_ack);
    assert!(!net.node(r).durable.hard.recovering);
    assert_eq!(net.node(r).applied, net.node(leader).applied);
}
