//! Unit tests of the core: encodings, NEWVIEW's reissue rule (the errata), and small clusters
//! driven by hand (no simulator) for the rules a sweep finds only by luck.

use crate::msg::{tag, ViewReport};
use crate::view_change::reissue;
use crate::*;
use bytes::Bytes;
use synod_core::wire::Wire;
use synod_core::{Apply, Position};

fn cmd(id: u64) -> Command {
    Command {
        id,
        payload: Bytes::from(vec![id as u8; 3]),
    }
}

fn order(n: u64, view: u64, chosen: bool, ids: &[u64]) -> Order {
    Order {
        n,
        view,
        chosen,
        commands: ids.iter().map(|&i| cmd(i)).collect(),
    }
}

fn ids(o: &Order) -> Vec<u64> {
    o.commands.iter().map(|c| c.id).collect()
}

#[test]
fn every_message_round_trips_and_truncation_is_an_error() {
    let msgs = vec![
        Msg::Forward {
            view: 3,
            nonce: 9,
            seq: 2,
            commands: vec![cmd(1), cmd(2)],
        },
        Msg::Accept {
            view: 1,
            n: 5,
            commands: vec![cmd(7)],
        },
        Msg::AcceptAck { view: 1, n: 5 },
        Msg::Commit { view: 1, upto: 5 },
        Msg::Checkpoint {
            n: 4,
            slot: 9,
            digest: 77,
        },
        Msg::QueryMulticast {
            lower: None,
            upper: 8,
            executed: 3,
        },
        Msg::QueryMulticast {
            lower: Some(4),
            upper: 8,
            executed: 3,
        },
        Msg::QueryPrimary {
            expected: 4,
            received: 9,
        },
        Msg::ResponseOrder {
            base: 2,
            orders: vec![order(3, 1, true, &[1]), order(4, 1, false, &[])],
        },
        Msg::ViewChange {
            view: 2,
            executed: 3,
            stable: 1,
            orders: vec![order(4, 1, false, &[5, 6])],
        },
        Msg::NewView {
            view: 2,
            base: 1,
            orders: vec![order(2, 2, false, &[])],
        },
        Msg::NeedView { view: 4 },
        Msg::Collecting {
            view: 4,
            have: vec![1, 3],
        },
        Msg::SnapRequest {
            n: 3,
            at: Some(Position { slot: 4, tag: 5 }),
            offset: 10,
        },
        Msg::SnapRequest {
            n: 3,
            at: None,
            offset: 0,
        },
        Msg::SnapChunk {
            at: Position { slot: 4, tag: 5 },
            total: 3,
            offset: 0,
            data: Bytes::from_static(b"abc"),
        },
        Msg::Recover { nonce: 1 },
        Msg::RecoverReply {
            nonce: 1,
            promised: 2,
            stable: 0,
            orders: vec![order(1, 1, false, &[9])],
        },
    ];
    for m in msgs {
        let b = m.to_bytes();
        assert_eq!(Msg::from_bytes(b.clone()).unwrap(), m);
        for cut in 0..b.len() {
            assert!(
                Msg::from_bytes(b.slice(..cut)).is_err(),
                "{m:?} cut at {cut}"
            );
        }
    }
    assert!(Msg::from_bytes(Bytes::from_static(&[99])).is_err());
    let h = Hard {
        promised: 4,
        installed: 3,
        recovering: true,
    };
    assert_eq!(Hard::from_bytes(h.to_bytes()).unwrap(), h);
    let bad = Hard {
        promised: 1,
        installed: 2,
        recovering: false,
    };
    assert!(
        Hard::from_bytes(bad.to_bytes()).is_err(),
        "installed above the promise"
    );
    let r = Accepted {
        n: 7,
        view: 2,
        commands: vec![cmd(3)],
    };
    assert_eq!(Accepted::from_bytes(r.to_bytes()).unwrap(), r);
}

#[test]
fn tags_say_whether_a_snapshot_ends_on_a_whole_batch() {
    use crate::checkpoint::point_of;
    let at = |i, len| Position {
        slot: 10,
        tag: tag(7, i, len),
    };
    assert_eq!(point_of(at(2, 3)), (7, None));
    assert_eq!(point_of(at(0, 3)), (6, Some(2)));
    assert_eq!(point_of(Position::default()), (0, None));
}

fn report(view: u64, stable: u64, orders: Vec<Order>) -> ViewReport {
    ViewReport {
        view,
        executed: stable,
        stable,
        orders,
    }
}

#[test]
fn newview_reaches_the_highest_accept_and_the_highest_view_wins() {
    // Replica A accepted 6 in view 1 (never known committed); B committed up to 5 and holds
    // order 4 from view 1 and from view 2 (view 2 wins); nobody holds 3 (null).
    let a = report(
        3,
        2,
        vec![order(4, 1, false, &[41]), order(6, 1, false, &[61])],
    );
    let b = report(
        3,
        2,
        vec![order(4, 2, false, &[42]), order(5, 2, true, &[51])],
    );
    let o = reissue(3, 2, &[&a, &b], None);
    assert_eq!(o.iter().map(|o| o.n).collect::<Vec<_>>(), vec![3, 4, 5, 6]);
    assert!(o.iter().all(|o| o.view == 3 && !o.chosen));
    assert_eq!(ids(&o[0]), Vec::<u64>::new(), "a hole becomes a null");
    assert_eq!(
        ids(&o[1]),
        vec![42],
        "the accept from the highest view wins"
    );
    assert_eq!(ids(&o[2]), vec![51]);
    assert_eq!(
        ids(&o[3]),
        vec![61],
        "an accept above the highest commit is kept"
    );
    // The literal thesis rules lose 6 (erratum a) and pick view 1's order at 4 (erratum b).
    let lit = reissue(3, 2, &[&a, &b], Some(Bug::NewViewToCommitted));
    assert_eq!(lit.last().map(|o| o.n), Some(5));
    let low = reissue(3, 2, &[&a, &b], Some(Bug::LowerViewWins));
    assert_eq!(ids(&low[1]), vec![41]);
    // A chosen order wins over any accept.
    let c = report(3, 2, vec![order(4, 1, true, &[41])]);
    let o = reissue(3, 2, &[&b, &c], None);
    assert_eq!(ids(&o[1]), vec![41]);
}

/// A hand-driven cluster: messages delivered in order, storage durable at once unless held.
struct Net {
    cores: Vec<Paxos>,
    queue: std::collections::VecDeque<(NodeId, NodeId, Msg)>,
    delivered: Vec<Vec<u64>>,
    /// Messages to these replicas are dropped.
    cut: Vec<NodeId>,
    now: TimeUs,
}

impl Net {
    fn new(n: u32, opt: Options) -> Net {
        let members: Vec<NodeId> = (1..=n).collect();
        let cores = members
            .iter()
            .map(|&me| {
                Paxos::restore(
                    Cluster::new(me, members.clone()),
                    opt.clone(),
                    DurableState::default(),
                    me as u64,
                )
            })
            .collect();
        let mut net = Net {
            cores,
            queue: Default::default(),
            delivered: vec![Vec::new(); n as usize],
            cut: Vec::new(),
            now: 1,
        };
        for i in 0..n as usize {
            net.step(i, Input::Start);
        }
        net.run();
        net
    }

    fn step(&mut self, i: usize, input: Input<Msg>) {
        let mut out = PaxosActions::default();
        self.cores[i].step(self.now, input, &mut out);
        let me = self.cores[i].me();
        let n = self.cores.len() as u32;
        for a in out.apply.drain(..) {
            if let Apply::Command { command, .. } = a {
                self.delivered[i].push(command.id);
            }
        }
        for e in out.send.drain(..) {
            let to: Vec<NodeId> = match e.to {
                Dest::One(p) => vec![p],
                Dest::All => (1..=n).filter(|&p| p != me).collect(),
            };
            for p in to {
                self.queue.push_back((me, p, e.msg.clone()));
            }
        }
        if let Some(last) = out.persist.last() {
            let upto = last.seq;
            self.step(i, Input::Durable { upto });
        }
    }

    fn run(&mut self) {
        let mut steps = 0;
        while let Some((from, to, msg)) = self.queue.pop_front() {
            steps += 1;
            assert!(steps < 100_000, "the cluster does not quiesce");
            if self.cut.contains(&to) || self.cut.contains(&from) {
                continue;
            }
            self.step(to as usize - 1, Input::Message { from, msg });
        }
    }

    fn primary(&self) -> usize {
        self.cores
            .iter()
            .position(|c| c.is_primary())
            .expect("a primary")
    }
}

#[test]
fn a_three_replica_cluster_orders_batches_and_every_replica_executes_them() {
    let mut net = Net::new(3, Options::default());
    let p = net.primary();
    assert_eq!(
        net.cores[p].hard().installed,
        1,
        "view 1 installed at start"
    );
    net.step(p, Input::Submit(vec![cmd(1), cmd(2)]));
    let b = (p + 1) % 3;
    net.step(b, Input::Submit(vec![cmd(3)]));
    net.run();
    // The commit reaches the backups with the next COMMIT (or heartbeat).
    net.now += 60_000;
    net.step(p, Input::Timeout);
    net.run();
    for d in &net.delivered {
        assert_eq!(d, &vec![1, 2, 3]);
    }
    // A duplicate of an executed command is not ordered again.
    net.step(p, Input::Submit(vec![cmd(2), cmd(4)]));
    net.run();
    net.now += 60_000;
    net.step(p, Input::Timeout);
    net.run();
    assert_eq!(net.delivered[b], vec![1, 2, 3, 4]);
}

#[test]
fn one_request_per_client_per_batch() {
    let opt = Options {
        client_of: Some(|c: &Command| Some(c.id % 2)),
        batching: Batching::Fixed {
            size: 10,
            timer_us: 1,
        },
        ..Options::default()
    };
    let mut net = Net::new(3, opt);
    let p = net.primary();
    net.step(p, Input::Submit((1..=5).map(cmd).collect()));
    net.now += 10;
    net.step(p, Input::Timeout);
    net.run();
    let c = net.cores[p].counters();
    // Clients 1, 0, 1, 0, 1: batches [1, 2], [3, 4], [5].
    assert_eq!((c.batches, c.batched_commands), (3, 5));
}

#[test]
fn after_viewchange_a_replica_accepts_nothing_in_its_old_view() {
    let mut net = Net::new(3, Options::default());
    let p = net.primary();
    let b = (p + 1) % 3;
    // The backup promises the next view; the primary does not hear of it.
    net.cut.push(net.cores[p].me());
    let v = net.cores[b].hard().promised + 1;
    let mut out = PaxosActions::default();
    net.cores[b].start_view_change(v, &mut out);
    net.queue.clear();
    net.cut.clear();
    let view = net.cores[p].hard().installed;
    let pid = net.cores[p].me();
    net.step(
        b,
        Input::Message {
            from: pid,
            msg: Msg::Accept {
                view,
                n: 1,
                commands: vec![cmd(9)],
            },
        },
    );
    assert!(
        !net.queue
            .iter()
            .any(|(_, _, m)| matches!(m, Msg::AcceptAck { .. })),
        "an ACCEPTACK after VIEWCHANGE"
    );
}

#[test]
fn a_catch_up_accept_is_not_executed_but_a_commit_record_is() {
    let mut net = Net::new(3, Options::default());
    let p = net.primary();
    let b = (p + 1) % 3;
    let view = net.cores[p].hard().installed;
    let pid = net.cores[p].me();
    let accept = Msg::ResponseOrder {
        base: 0,
        orders: vec![order(1, view, false, &[5])],
    };
    net.step(
        b,
        Input::Message {
            from: pid,
            msg: accept,
        },
    );
    assert!(
        net.delivered[b].is_empty(),
        "an A record from catch-up executed"
    );
    let commit = Msg::ResponseOrder {
        base: 0,
        orders: vec![order(1, view, true, &[5])],
    };
    net.step(
        b,
        Input::Message {
            from: pid,
            msg: commit,
        },
    );
    assert_eq!(net.delivered[b], vec![5]);
}

#[test]
fn a_state_transfer_resumes_from_another_replica_at_its_offset() {
    let opt = Options {
        snap_chunk_bytes: 4,
        ..Options::default()
    };
    let members = vec![1, 2, 3];
    let mut c = Paxos::restore(Cluster::new(3, members), opt, DurableState::default(), 3);
    let mut out = PaxosActions::default();
    c.step(1, Input::Start, &mut out);
    out.clear();
    let at = Position {
        slot: 3,
        tag: tag(2, 1, 2),
    };
    let data = Bytes::from_static(b"0123456789");
    c.request_transfer(1, 2, &mut out);
    assert!(matches!(
        out.send[0].msg,
        Msg::SnapRequest {
            n: 2,
            at: None,
            offset: 0
        }
    ));
    out.clear();
    let chunk = |offset: usize| Msg::SnapChunk {
        at,
        total: 10,
        offset: offset as u64,
        data: data.slice(offset..(offset + 4).min(10)),
    };
    c.step(
        2,
        Input::Message {
            from: 1,
            msg: chunk(0),
        },
        &mut out,
    );
    out.clear();
    // n1 goes away after the first chunk; the retry asks n2 for the rest of the same snapshot.
    c.step(3, Input::Disconnected { peer: 1 }, &mut out);
    let asked: Vec<_> = out
        .send
        .iter()
        .filter_map(|e| match (&e.to, &e.msg) {
            (Dest::One(to), Msg::SnapRequest { at: a, offset, .. }) => Some((*to, *a, *offset)),
            _ => None,
        })
        .collect();
    assert_eq!(asked, vec![(2, Some(at), 4)]);
    out.clear();
    c.step(
        5,
        Input::Message {
            from: 2,
            msg: chunk(4),
        },
        &mut out,
    );
    c.step(
        6,
        Input::Message {
            from: 2,
            msg: chunk(8),
        },
        &mut out,
    );
    let restored: Vec<_> = out
        .apply
        .iter()
        .filter_map(|a| match a {
            Apply::Restore(s) => Some(s.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(restored.len(), 1);
    assert_eq!(restored[0].data, data);
    assert_eq!(restored[0].at, at);
    assert_eq!(c.executed(), 2, "the snapshot ends on a whole batch");
}

#[test]
fn a_replica_cut_off_alone_does_not_depose_a_primary_the_others_hear() {
    let mut net = Net::new(3, Options::default());
    let p = net.primary();
    let lone = (p + 1) % 3;
    let other = (p + 2) % 3;
    let view = net.cores[p].hard().installed;
    // The lone backup hears nothing for two seconds; the primary keeps the other one fed.
    net.cut.push(net.cores[lone].me());
    for _ in 0..40 {
        net.now += 50_000;
        net.step(p, Input::Timeout);
        net.step(other, Input::Timeout);
        net.step(lone, Input::Timeout);
        net.run();
    }
    assert_eq!(
        net.cores[lone].hard().promised,
        view,
        "no promise without f + 1 suspicions"
    );
    // Healed: the backup hears its primary again and stays in the view.
    net.cut.clear();
    net.step(p, Input::Submit(vec![cmd(1)]));
    net.run();
    net.now += 60_000;
    net.step(p, Input::Timeout);
    net.run();
    for c in &net.cores {
        assert_eq!(c.hard().installed, view);
    }
    assert_eq!(net.delivered[lone], vec![1]);
}
