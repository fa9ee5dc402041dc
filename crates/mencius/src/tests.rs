//! Unit tests: the encodings (malformed input is an error, never a panic), the round-robin
//! arithmetic, and a hand-driven cluster (every message delivered in order, storage durable
//! at once) for Rules 1 and 2, Accelerator 1, revocation of a silent replica and out-of-order
//! commit.

use super::*;
use crate::msg::{Accepted, Block, Range};
use bytes::Bytes;
use std::collections::VecDeque;
use synod_core::replica::{Env, Replica};
use synod_core::wire::Wire;
use synod_core::Persist;
use synod_core::{Apply, MessageKind, Position};

fn cmd(id: u64, reg: u8) -> Command {
    Command {
        id,
        payload: Bytes::from(vec![reg]),
    }
}

#[derive(Default)]
struct Out {
    persist: Vec<Persist<Rec, Hard>>,
    applied: Vec<u64>,
    sent: Vec<Envelope<Msg>>,
}

impl Env<Mencius> for Out {
    fn persist(&mut self, ops: &mut Vec<Persist<Rec, Hard>>) {
        self.persist.append(ops);
    }
    fn apply(&mut self, a: Apply) {
        if let Apply::Command { command, .. } = a {
            self.applied.push(command.id);
        }
    }
    fn event(&mut self, _: Event) {}
    fn transmit(&mut self, e: Envelope<Msg>) {
        self.sent.push(e);
    }
}

struct Node {
    replica: Replica<Mencius>,
    disk: DurableState<Rec, Hard>,
    delivered: Vec<u64>,
    up: bool,
}

struct Cluster3 {
    nodes: Vec<Node>,
    queue: VecDeque<(NodeId, NodeId, Msg)>,
    now: TimeUs,
}

impl Cluster3 {
    fn new(n: usize, opt: Options) -> Self {
        let members: Vec<NodeId> = (1..=n as NodeId).collect();
        let nodes = members
            .iter()
            .map(|&id| {
                let core = Mencius::restore(
                    synod_core::Cluster::new(id, members.clone()),
                    opt.clone(),
                    DurableState::default(),
                    id as u64,
                );
                Node {
                    replica: Replica::new(core, 1 << 16),
                    disk: DurableState::default(),
                    delivered: Vec::new(),
                    up: true,
                }
            })
            .collect();
        Cluster3 {
            nodes,
            queue: VecDeque::new(),
            now: 1,
        }
    }

    /// Carry out what one step produced: storage durable at once, messages queued.
    fn settle(&mut self, i: usize, mut out: Out) {
        loop {
            let from = i as NodeId + 1;
            for e in out.sent.drain(..) {
                match e.to {
                    Dest::One(to) => self.queue.push_back((from, to, e.msg)),
                    Dest::All => {
                        for to in 1..=self.nodes.len() as NodeId {
                            if to != from {
                                self.queue.push_back((from, to, e.msg.clone()));
                            }
                        }
                    }
                }
            }
            let node = &mut self.nodes[i];
            node.delivered.append(&mut out.applied);
            let Some(upto) = out.persist.last().map(|p| p.seq) else {
                return;
            };
            for p in out.persist.drain(..) {
                node.disk.apply(&p.op);
            }
            node.replica.durable(self.now, upto, &mut out);
        }
    }

    fn submit(&mut self, i: usize, cs: Vec<Command>) {
        let mut out = Out::default();
        self.nodes[i].replica.submit(self.now, cs, &mut out);
        self.settle(i, out);
    }

    /// Deliver every queued message (in order) until none is left.
    fn run(&mut self) {
        let mut budget = 100_000;
        while let Some((from, to, msg)) = self.queue.pop_front() {
            budget -= 1;
            assert!(budget > 0, "messages never stop");
            let i = to as usize - 1;
            if !self.nodes[i].up || !self.nodes[from as usize - 1].up {
                continue;
            }
            let mut out = Out::default();
            self.nodes[i]
                .replica
                .step(self.now, Input::Message { from, msg }, &mut out);
            self.settle(i, out);
        }
    }

    /// Advance time by `us` in ticks, waking every live replica, and deliver what they send.
    fn advance(&mut self, us: TimeUs) {
        let end = self.now + us;
        while self.now < end {
            self.now += 10_000;
            for i in 0..self.nodes.len() {
                if !self.nodes[i].up {
                    continue;
                }
                let mut out = Out::default();
                self.nodes[i].replica.wake(self.now, &mut out);
                self.settle(i, out);
            }
            self.run();
        }
    }

    fn core(&self, i: usize) -> &Mencius {
        self.nodes[i].replica.core()
    }
}

#[test]
fn every_message_and_the_hard_state_round_trip_and_garbage_is_refused() {
    let r = Range { from: 4, to: 13 };
    let cs = vec![cmd(1, 0), cmd(2, 1)];
    let bodies = vec![
        Body::Suggest {
            instance: 7,
            commands: cs.clone(),
        },
        Body::Accept { instance: 7 },
        Body::Learn { instance: 7 },
        Body::Skip { upto: 10 },
        Body::Prepare {
            ballot: 5,
            range: r,
        },
        Body::Ack {
            ballot: 5,
            range: r,
            values: vec![Accepted {
                instance: 4,
                ballot: 0,
                commands: cs.clone(),
            }],
            noops: vec![Block {
                range: r,
                ballot: 2,
            }],
        },
        Body::Nack {
            ballot: 5,
            range: r,
            promised: 8,
        },
        Body::Propose {
            ballot: 5,
            range: r,
            values: vec![(4, cs.clone())],
        },
        Body::Accepted {
            ballot: 5,
            range: r,
        },
        Body::Decide {
            range: r,
            values: vec![(7, cs.clone())],
        },
        Body::Need { from: 3 },
        Body::Learned {
            from: 3,
            to: 9,
            values: vec![(4, cs.clone())],
        },
        Body::SyncRequest { from: 3 },
        Body::Sync {
            from: 3,
            upto: 12,
            more: true,
            suggested: vec![(4, Some(cs.clone())), (7, None)],
        },
        Body::SnapRequest { from: 3, offset: 9 },
        Body::SnapChunk {
            at: Position { slot: 3, tag: 9 },
            total: 4,
            offset: 0,
            data: Bytes::from_static(b"abcd"),
        },
    ];
    for body in bodies {
        let m = Msg {
            epoch: 2,
            seq: 9,
            body,
        };
        let b = m.to_bytes();
        let back = Msg::from_bytes(b.clone()).expect("decodes");
        assert_eq!(back.to_bytes(), b, "{}", m.kind());
        // Every truncation is an error, never a panic.
        for cut in 0..b.len() {
            assert!(
                Msg::from_bytes(b.slice(..cut)).is_err(),
                "{} cut at {cut}",
                m.kind()
            );
        }
    }
    let h = Hard {
        incarnation: 3,
        index: 17,
        round: 2,
        promises: vec![Block {
            range: r,
            ballot: 5,
        }],
        noops: vec![Block {
            range: r,
            ballot: 5,
        }],
        decided: vec![r],
    };
    assert_eq!(Hard::from_bytes(h.to_bytes()).unwrap(), h);
    // A range ending before it starts, an unknown type, garbage: errors.
    let mut bad = Msg {
        epoch: 1,
        seq: 1,
        body: Body::Prepare {
            ballot: 5,
            range: Range { from: 9, to: 3 },
        },
    }
    .to_bytes()
    .to_vec();
    assert!(Msg::from_bytes(Bytes::from(bad.clone())).is_err());
    bad[16] = 200;
    assert!(Msg::from_bytes(Bytes::from(bad)).is_err());
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for len in 0..400 {
        let junk: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let _ = Msg::from_bytes(Bytes::from(junk));
    }
}

#[test]
fn round_robin_arithmetic() {
    let c = Cluster3::new(3, Options::default());
    let m = c.core(1); // position 1 owns 1, 4, 7, …
    assert_eq!(m.owner(7), 1);
    assert_eq!(m.own_at_or_after(1, 7), 7);
    assert_eq!(m.own_at_or_after(1, 8), 10);
    assert_eq!(m.own_after(1, 7), 10);
    assert_eq!(m.own_at_or_after(0, 7), 9);
    // Instances start at n: the first own instance of position p is n + p.
    assert_eq!(m.index, 4);
}

#[test]
fn concurrent_suggestions_are_delivered_in_one_order_everywhere() {
    let mut c = Cluster3::new(3, Options::default());
    for round in 0..20u64 {
        for i in 0..3 {
            c.submit(i, vec![cmd(round * 3 + i as u64 + 1, 0)]);
        }
        if round % 3 == 0 {
            c.run();
        }
    }
    c.run();
    c.advance(200_000);
    let d = &c.nodes[0].delivered;
    assert_eq!(d.len(), 60, "{d:?}");
    for n in &c.nodes {
        assert_eq!(&n.delivered, d);
    }
}

#[test]
fn an_idle_replica_sends_its_skips_after_tau_and_the_index_never_goes_back() {
    let mut c = Cluster3::new(3, Options::default());
    // Only position 0 suggests: 3, 6, 9, …; the others skip by Rule 2.
    for k in 0..5 {
        c.submit(0, vec![cmd(k + 1, 0)]);
        c.run();
    }
    let i1 = c.core(1).index;
    assert!(i1 > 15, "Rule 2 moved the index of an idle replica: {i1}");
    // A SUGGEST for a lower instance (a resend) never lowers the index (H1).
    let mut out = Out::default();
    let stale = Msg {
        epoch: 1,
        seq: 999,
        body: Body::Suggest {
            instance: 3,
            commands: vec![cmd(1, 0)],
        },
    };
    c.nodes[1].replica.step(
        c.now,
        Input::Message {
            from: 1,
            msg: stale,
        },
        &mut out,
    );
    c.settle(1, out);
    assert_eq!(c.core(1).index, i1);
    // Positions 1 and 2 learn each other's skips only from Accelerator 1 (idle pair).
    c.advance(100_000);
    for n in &c.nodes {
        assert_eq!(n.delivered, vec![1, 2, 3, 4, 5]);
    }
    assert!(c.core(1).counters.skips_sent > 0);
}

#[test]
fn a_silent_replica_is_revoked_and_the_others_go_on() {
    let opt = Options {
        beta: 50,
        ..Options::default()
    };
    let mut c = Cluster3::new(3, opt);
    c.submit(2, vec![cmd(1, 0)]);
    c.run();
    c.nodes[2].up = false;
    // Position 2's instances block the commit point until it is revoked.
    c.submit(0, vec![cmd(2, 0)]);
    c.submit(1, vec![cmd(3, 0)]);
    c.run();
    c.advance(2_000_000);
    for i in 0..2 {
        assert_eq!(c.nodes[i].delivered, vec![1, 2, 3], "node {i}");
    }
    assert!(
        c.core(0).counters.revocations > 0,
        "position 0 is the elected revoker"
    );
    assert_eq!(c.core(1).counters.revocations, 0, "one revoker only");
}

#[test]
fn commuting_commands_commit_out_of_order_and_conflicting_ones_wait() {
    fn same_register(a: &Command, b: &Command) -> bool {
        a.payload != b.payload
    }
    let opt = Options {
        commute: Some(same_register),
        ..Options::default()
    };
    let mut c = Cluster3::new(3, opt);
    // Position 0 suggests x (register 0) at 3 but its LEARN is held back; position 1
    // suggests y (register 1) at 4, which commutes with x: position 2 delivers y first.
    c.submit(0, vec![cmd(10, 0)]);
    // Deliver only the SUGGESTs of instance 3; their ACCEPTs to position 0 are lost, so x
    // stays undecided (a candidate) while y is decided.
    let held: Vec<_> = c.queue.drain(..).collect();
    for (from, to, msg) in held {
        if matches!(msg.body, Body::Suggest { .. }) {
            let i = to as usize - 1;
            let mut out = Out::default();
            c.nodes[i]
                .replica
                .step(c.now, Input::Message { from, msg }, &mut out);
            c.settle(i, out);
        }
    }
    c.queue
        .retain(|(_, _, m)| !matches!(m.body, Body::Accept { instance: 3 }));
    c.submit(1, vec![cmd(11, 1)]);
    c.run();
    assert_eq!(c.nodes[2].delivered, vec![11], "y went ahead of x");
    assert!(c.core(2).counters.out_of_order > 0);
    // z on register 0 (conflicts with x) at position 1's next instance must wait for x.
    c.submit(1, vec![cmd(12, 0)]);
    c.run();
    assert!(!c.nodes[2].delivered.contains(&12), "z waited for x");
}

/// Regression (`synod chaos --protocol mencius --faults kill --seed 32` on real processes): a
/// replica restarted without a snapshot asks a peer for its whole history; the SYNC answer is
/// cut at `SYNC_MAX` suggestions, yet the receiver followed the stream in sync from there, so
/// the peer's next SUGGEST made every unlisted instance above the cut a skip, among them
/// suggestions sent to the receiver's previous incarnation and decided elsewhere with a value.
#[test]
fn a_sync_cut_short_keeps_the_stream_out_of_sync_until_the_rest_is_listed() {
    let members: Vec<NodeId> = vec![1, 2, 3];
    let own = crate::stream::SYNC_MAX as u64 + 3;
    let at = |k: u64| 3 + 3 * k; // position 0's instances
    let mut disk: DurableState<Rec, Hard> = DurableState::default();
    disk.hard.incarnation = 1;
    for k in 0..own {
        disk.records.insert(
            at(k),
            Rec {
                instance: at(k),
                ballot: 0,
                own: true,
                commands: vec![cmd(k + 1, 0)],
            },
        );
    }
    let cluster = |me| synod_core::Cluster::new(me, members.clone());
    let mut sender = Mencius::restore(cluster(1), Options::default(), disk, 1);
    // The receiver restarted (not fresh) and knows none of them.
    let mut rdisk: DurableState<Rec, Hard> = DurableState::default();
    rdisk.hard.incarnation = 1;
    let mut receiver = Mencius::restore(cluster(3), Options::default(), rdisk, 3);
    let sync = |sender: &mut Mencius, from: u64| {
        let mut out = MenciusActions::default();
        sender.on_sync_request(2, from, &mut out);
        match out.send.pop().map(|e| e.msg.body) {
            Some(Body::Sync {
                from,
                upto,
                more,
                suggested,
            }) => (from, upto, more, suggested),
            other => panic!("expected a SYNC, got {other:?}"),
        }
    };
    let mut out = MenciusActions::default();
    assert_eq!(receiver.follow(0, 2, 7, &mut out), Some(false));
    let (from, upto, more, suggested) = sync(&mut sender, 3);
    assert!(more, "the list is cut");
    assert_eq!(suggested.len(), crate::stream::SYNC_MAX);
    assert_eq!(upto, at(crate::stream::SYNC_MAX as u64));
    let mut out = MenciusActions::default();
    receiver.on_sync(0, from, upto, more, suggested, &mut out);
    assert!(!receiver.streams_in[0].synced, "not in sync past the cut");
    assert!(
        out.send
            .iter()
            .any(|e| matches!(e.msg.body, Body::SyncRequest { from } if from == upto)),
        "asks again from the cut"
    );
    // The sender's next SUGGEST on the stream says nothing about the instances above the cut.
    let top = at(own);
    let mut out = MenciusActions::default();
    let in_sync = receiver
        .follow(0, 2, 8, &mut out)
        .expect("same incarnation");
    assert!(!in_sync);
    receiver.handle(
        0,
        Body::Suggest {
            instance: top,
            commands: vec![cmd(own + 1, 0)],
        },
        in_sync,
        &mut out,
    );
    for k in crate::stream::SYNC_MAX as u64..own {
        assert!(
            receiver.decided(at(k)).is_none(),
            "instance {} is not a skip",
            at(k)
        );
    }
    // The second round lists the rest and brings the stream in sync.
    let (from, upto, more, suggested) = sync(&mut sender, upto);
    assert!(!more);
    assert_eq!(suggested.len(), 3);
    let mut out = MenciusActions::default();
    receiver.on_sync(0, from, upto, more, suggested, &mut out);
    assert!(receiver.streams_in[0].synced);
    for k in crate::stream::SYNC_MAX as u64..own {
        let x = &receiver.insts[&at(k)];
        assert!(x.suggested && x.accepted.is_some(), "instance {}", at(k));
    }
}
