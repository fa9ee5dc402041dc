//! The host with a toy core: a leader that logs each batch, tells its peers, and delivers once
//! the write is durable. What the host does around it (batching, waiters, routing between
//! groups, undecodable input, the planted bugs) is what is checked here; the real cores run
//! under the host in the simulator.

use super::*;
use bytes::{BufMut, Bytes, BytesMut};
use std::sync::{Arc, Mutex};
use synod_core::wire::{get_u64, Wire, WireResult};
use synod_core::{
    Actions, Apply, Cluster, Command, Dest, DurableState, Envelope, GroupId, GroupMessage, Input,
    LogRecord, MessageKind, NodeId, Persist, Position, Protocol, Role, Snapshot, StateMachine,
    StorageOp, TimeUs, View, WireSize,
};

#[derive(Clone, Debug, PartialEq)]
struct Rec(u64, Vec<Command>);
impl LogRecord for Rec {
    fn key(&self) -> u64 {
        self.0
    }
    fn carries(&self, id: u64) -> bool {
        self.1.iter().any(|c| c.id == id)
    }
}
impl Wire for Rec {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u64(self.0);
        self.1.encode(b);
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(Rec(get_u64(b)?, Vec::<Command>::decode(b)?))
    }
}

/// A message: the slot just logged.
#[derive(Clone, Debug, PartialEq)]
struct Logged(u64);
impl Wire for Logged {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u64(self.0);
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(Logged(get_u64(b)?))
    }
}
impl WireSize for Logged {
    fn wire_size(&self) -> usize {
        8
    }
}
impl MessageKind for Logged {
    fn kind(&self) -> &'static str {
        "logged"
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Hard;
impl Wire for Hard {
    fn encode(&self, _: &mut BytesMut) {}
    fn decode(_: &mut Bytes) -> WireResult<Self> {
        Ok(Hard)
    }
}

/// Leads alone (or follows `leader` when it is another node): logs each batch as one record,
/// tells every peer, delivers once the record is durable.
struct Toy {
    me: NodeId,
    leader: NodeId,
    seq: u64,
    slot: u64,
    waiting: Vec<(u64, Vec<Command>)>,
    received: Vec<u64>,
}

impl Protocol for Toy {
    type Options = NodeId;
    type Message = Logged;
    type Record = Rec;
    type Hard = Hard;
    fn restore(c: Cluster, leader: NodeId, _: DurableState<Rec, Hard>, _: u64) -> Self {
        Toy {
            me: c.me,
            leader,
            seq: 0,
            slot: 0,
            waiting: Vec::new(),
            received: Vec::new(),
        }
    }
    fn step(&mut self, _: TimeUs, input: Input<Logged>, out: &mut Actions<Logged, Rec, Hard>) {
        match input {
            Input::Submit(cs) => {
                self.seq += 1;
                out.persist.push(Persist {
                    seq: self.seq,
                    op: StorageOp::Append(vec![Rec(self.seq, cs.clone())]),
                });
                out.send.push(Envelope {
                    to: Dest::All,
                    msg: Logged(self.seq),
                    after_durable: self.seq,
                });
                self.waiting.push((self.seq, cs));
            }
            Input::Durable { upto } => {
                let (done, rest): (Vec<_>, Vec<_>) =
                    self.waiting.drain(..).partition(|(s, _)| *s <= upto);
                self.waiting = rest;
                for (_, cs) in done {
                    for c in cs {
                        self.slot += 1;
                        out.apply.push(Apply::Command {
                            at: Position {
                                slot: self.slot,
                                tag: self.slot,
                            },
                            command: c,
                        });
                    }
                }
            }
            Input::Message { msg, .. } => self.received.push(msg.0),
            _ => {}
        }
    }
    fn deadline(&self) -> Option<TimeUs> {
        None
    }
    fn view(&self) -> View {
        View {
            role: if self.leader == self.me {
                Role::Leading
            } else {
                Role::Following
            },
            leader: Some(self.leader),
            epoch: 1,
        }
    }
}

/// Counts applied commands; relays every command whose payload starts with `>` to group 1.
#[derive(Default)]
struct Counter {
    applied: Position,
    n: u64,
    relays: Vec<GroupMessage>,
}
impl StateMachine for Counter {
    fn apply(&mut self, at: Position, c: &Command, out: &mut Vec<GroupMessage>) -> Bytes {
        self.applied = at;
        self.n += 1;
        if c.payload.first() == Some(&b'>') {
            let m = GroupMessage {
                to: 1,
                payload: c.payload.slice(1..),
            };
            self.relays.push(m.clone());
            out.push(m);
        }
        Bytes::from(self.n.to_string())
    }
    fn snapshot_view(&self) -> Box<dyn FnOnce() -> Bytes + Send> {
        let n = self.n;
        Box::new(move || Bytes::from(n.to_string()))
    }
    fn restore(&mut self, s: &Snapshot) -> Result<(), synod_core::wire::WireError> {
        self.applied = s.at;
        Ok(())
    }
    fn applied(&self) -> Position {
        self.applied
    }
    fn digest(&self) -> u64 {
        self.n
    }
    fn pending(&self, out: &mut Vec<GroupMessage>) {
        out.extend(self.relays.iter().cloned());
    }
}

fn group(id: GroupId, me: NodeId, leader: NodeId, members: &[NodeId]) -> Box<dyn GroupRunner> {
    let core = Toy::restore(
        Cluster::new(me, members.to_vec()),
        leader,
        DurableState::default(),
        0,
    );
    let machine: SharedMachine = Arc::new(Mutex::new(Counter::default()));
    Box::new(Group::new(GroupParts {
        id,
        me,
        protocol: "toy".into(),
        machine_kind: "counter".into(),
        members: members.to_vec(),
        core,
        machine,
        snapshot_every: 0,
        outbox_limit: 100,
    }))
}

fn host(bug: HostBug, groups: Vec<Box<dyn GroupRunner>>) -> Host<&'static str> {
    let mut cfg = HostConfig::new(1);
    cfg.routes.insert(0, vec![1, 2, 3]);
    cfg.routes.insert(1, vec![2, 3]);
    cfg.routes.insert(2, vec![1, 2, 3]);
    cfg.observe = true;
    cfg.bug = bug;
    cfg.request_timeout_us = 1_000;
    Host::new(cfg, groups, Box::new(NoTelemetry), 0)
}

/// Report every storage op issued so far durable.
fn sync_all(h: &mut Host<&'static str>, now: TimeUs) {
    let ops = std::mem::take(&mut h.outputs().wal);
    let mut upto: Vec<(GroupId, u64)> = Vec::new();
    for (seq, op) in ops {
        match upto.iter_mut().find(|(g, _)| *g == op.group) {
            Some(e) => e.1 = e.1.max(seq),
            None => upto.push((op.group, seq)),
        }
    }
    h.durable(now, &upto);
}

#[test]
fn commands_waiting_together_form_one_batch_and_are_answered_once_durable() {
    let mut h = host(HostBug::None, vec![group(0, 1, 1, &[1, 2, 3])]);
    let a = h.submit(10, 0, Bytes::from_static(b"a"), "a").unwrap();
    let b = h.submit(10, 0, Bytes::from_static(b"b"), "b").unwrap();
    assert_ne!(a, b);
    assert!(
        h.outputs().wal.is_empty(),
        "nothing reaches the core before a flush"
    );
    h.flush(11);
    let out = h.outputs();
    assert_eq!(out.wal.len(), 1, "one batch, one record");
    assert!(out.transmit.is_empty(), "held behind the write");
    assert!(out.replies.is_empty());
    sync_all(&mut h, 12);
    let out = h.outputs();
    let to: Vec<NodeId> = out.transmit.iter().map(|t| t.to).collect();
    assert_eq!(to, vec![2, 3]);
    assert!(out.transmit.iter().all(|t| t.kind == PeerKind::Message));
    let replies: Vec<(&str, u64)> = out
        .replies
        .iter()
        .map(|(t, r)| (*t, r.as_ref().unwrap().at.slot))
        .collect();
    assert_eq!(replies, vec![("a", 1), ("b", 2)]);
    let applied = out
        .observed
        .iter()
        .filter(|o| matches!(o, Observed::Applied { .. }))
        .count();
    assert_eq!(applied, 2);
}

#[test]
fn a_waiting_client_times_out_and_unknown_groups_are_refused() {
    let mut h = host(HostBug::None, vec![group(0, 1, 1, &[1, 2, 3])]);
    h.submit(0, 0, Bytes::from_static(b"a"), "a").unwrap();
    assert_eq!(
        h.submit(0, 9, Bytes::new(), "nine"),
        Err(SubmitError::NoSuchGroup)
    );
    h.flush(1);
    assert_eq!(h.deadline(), Some(1_000), "the client's expiry");
    h.timeout(1_000);
    let replies: Vec<_> = h.outputs().replies.drain(..).collect();
    assert_eq!(
        replies,
        vec![
            ("nine", Err(SubmitError::NoSuchGroup)),
            ("a", Err(SubmitError::Timeout))
        ]
    );
    // Delivered after its client gave up: nobody is answered twice.
    sync_all(&mut h, 2_000);
    assert!(h.outputs().replies.is_empty());
}

#[test]
fn an_undecodable_message_resets_its_peer_and_a_good_one_is_stepped() {
    let mut h = host(HostBug::None, vec![group(0, 1, 2, &[1, 2, 3])]);
    h.receive(5, 2, 0, PeerKind::Message, Logged(7).to_bytes());
    assert!(h.outputs().resets.is_empty());
    h.receive(6, 2, 0, PeerKind::Message, Bytes::from_static(b"\x01"));
    let resets = std::mem::take(&mut h.outputs().resets);
    assert_eq!(resets.len(), 1);
    assert_eq!(resets[0].0, 2);
    // Frames of groups this node does not run are dropped.
    h.receive(7, 2, 5, PeerKind::Message, Bytes::from_static(b"\x01"));
    assert!(h.outputs().resets.is_empty());
}

#[test]
fn a_leader_routes_its_machine_messages_locally_or_to_a_member_and_a_follower_does_not() {
    // Group 0 leads here and relays to group 1 (not run here): a Submit frame to a member.
    let mut h = host(HostBug::None, vec![group(0, 1, 1, &[1, 2, 3])]);
    h.submit(0, 0, Bytes::from_static(b">x"), "r").unwrap();
    h.flush(0);
    sync_all(&mut h, 1);
    let subs: Vec<_> = h
        .outputs()
        .transmit
        .iter()
        .filter(|t| t.kind == PeerKind::Submit)
        .map(|t| (t.group, t.to, t.data.clone()))
        .collect();
    assert_eq!(subs.len(), 1);
    assert_eq!(subs[0].0, 1);
    assert!([2, 3].contains(&subs[0].1));
    assert_eq!(&subs[0].2[..], b"x");
    // Sent again every resend period while unacknowledged (Counter never forgets).
    h.outputs().transmit.clear();
    h.timeout(1_000_000);
    assert_eq!(
        h.outputs()
            .transmit
            .iter()
            .filter(|t| t.kind == PeerKind::Submit)
            .count(),
        1
    );
    // Group 2 runs here, as a follower of node 2: its relays are not sent.
    let mut h = host(HostBug::None, vec![group(2, 1, 2, &[1, 2, 3])]);
    h.submit(0, 2, Bytes::from_static(b">y"), "r").unwrap();
    h.flush(0);
    sync_all(&mut h, 1);
    assert!(h
        .outputs()
        .transmit
        .iter()
        .all(|t| t.kind != PeerKind::Submit));
    // Group 1 runs here: a relay to it is queued for its core, no frame.
    let mut h = host(
        HostBug::None,
        vec![group(0, 1, 1, &[1, 2, 3]), group(1, 1, 1, &[1, 2, 3])],
    );
    h.submit(0, 0, Bytes::from_static(b">z"), "r").unwrap();
    h.flush(0);
    sync_all(&mut h, 1);
    assert!(h
        .outputs()
        .transmit
        .iter()
        .all(|t| t.kind != PeerKind::Submit));
    let submitted_to_1 = h
        .outputs()
        .observed
        .iter()
        .filter(|o| matches!(o, Observed::Submitted { group: 1, .. }))
        .count();
    assert_eq!(submitted_to_1, 1);
}

#[test]
fn planted_bugs_do_what_they_say() {
    // A reply before anything is written.
    let mut h = host(
        HostBug::ReplyBeforeDurable,
        vec![group(0, 1, 1, &[1, 2, 3])],
    );
    h.submit(0, 0, Bytes::from_static(b"a"), "a").unwrap();
    h.flush(0);
    assert_eq!(h.outputs().replies.len(), 1);
    // Durable before the driver wrote it: the core delivers at once.
    let mut h = host(
        HostBug::DurableBeforeWrite,
        vec![group(0, 1, 1, &[1, 2, 3])],
    );
    h.submit(0, 0, Bytes::from_static(b"a"), "a").unwrap();
    h.flush(0);
    assert_eq!(h.outputs().replies.len(), 1);
    assert_eq!(h.outputs().wal.len(), 1, "the write is still to be done");
    // A routed command at a follower is dropped.
    let mut h = host(
        HostBug::DropRoutedAtFollower,
        vec![group(0, 1, 2, &[1, 2, 3])],
    );
    h.receive(0, 2, 0, PeerKind::Submit, Bytes::from_static(b"c"));
    assert!(h.outputs().observed.is_empty());
    let mut h = host(HostBug::None, vec![group(0, 1, 2, &[1, 2, 3])]);
    h.receive(0, 2, 0, PeerKind::Submit, Bytes::from_static(b"c"));
    assert_eq!(h.outputs().observed.len(), 1);
    // No resend.
    let mut h = host(HostBug::NoResend, vec![group(0, 1, 1, &[1, 2, 3])]);
    h.submit(0, 0, Bytes::from_static(b">x"), "r").unwrap();
    h.flush(0);
    sync_all(&mut h, 1);
    h.outputs().transmit.clear();
    h.timeout(1_000_000);
    assert!(h.outputs().transmit.is_empty());
}
