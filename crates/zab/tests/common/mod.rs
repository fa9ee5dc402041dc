//! A small deterministic cluster of Zab cores for the recovery tests: every core runs through
//! `synod_core::replica::Replica` (the one driver loop, so durability barriers hold exactly as
//! in the simulator and the server), messages arrive in global FIFO order with no latency,
//! disks complete their writes between deliveries unless stalled, and time advances only to the
//! next deadline when nothing else is pending. A trace records every storage op, every durable
//! report and every transmitted message, in the order they happened, so tests can check what
//! left before what became durable.

#![allow(dead_code)]

use std::collections::{BTreeSet, VecDeque};
use synod_core::replica::{Env, Replica};
use synod_core::{
    Apply, Cluster, Command, Dest, DurableState, Envelope, Event, Input, NodeId, Persist, Protocol,
    Role, StorageOp, TimeUs, View,
};
use synod_zab::{Entry, Hard, Msg, Options, Zab};

pub type Durable = DurableState<Entry, Hard>;

#[derive(Clone, Debug)]
pub enum Trace {
    /// A storage op issued by `node` (incarnation `inc`).
    Persist {
        node: NodeId,
        inc: u32,
        seq: u64,
        op: StorageOp<Entry, Hard>,
    },
    /// Every op of `node` up to `upto` is durable.
    Durable {
        node: NodeId,
        inc: u32,
        upto: u64,
    },
    /// A message left `from` (it passed its durability barrier).
    Send {
        from: NodeId,
        inc: u32,
        to: NodeId,
        msg: Msg,
    },
    Restart {
        node: NodeId,
        inc: u32,
    },
}

pub struct Node {
    pub id: NodeId,
    pub replica: Option<Replica<Zab>>,
    pub durable: Durable,
    /// Ops issued but not yet durable.
    pub disk: Vec<Persist<Entry, Hard>>,
    /// Writes wait while set.
    pub stalled: bool,
    pub inc: u32,
    /// Commands delivered in this incarnation (slot, id), and restores.
    pub applied: Vec<(u64, u64)>,
    /// The events of this incarnation.
    pub events: Vec<Event>,
}

struct Packet {
    from: NodeId,
    to: NodeId,
    msg: Msg,
}

pub struct Net {
    pub now: TimeUs,
    pub nodes: Vec<Node>,
    queue: VecDeque<Packet>,
    /// Directed links that drop everything.
    pub blocked: BTreeSet<(NodeId, NodeId)>,
    pub trace: Vec<Trace>,
    pub opts: Options,
}

struct Io<'a> {
    me: NodeId,
    inc: u32,
    members: Vec<NodeId>,
    disk: &'a mut Vec<Persist<Entry, Hard>>,
    applied: &'a mut Vec<(u64, u64)>,
    events: &'a mut Vec<Event>,
    queue: &'a mut VecDeque<Packet>,
    trace: &'a mut Vec<Trace>,
}

impl Env<Zab> for Io<'_> {
    fn persist(&mut self, ops: &mut Vec<Persist<Entry, Hard>>) {
        for p in ops.drain(..) {
            self.trace.push(Trace::Persist {
                node: self.me,
                inc: self.inc,
                seq: p.seq,
                op: p.op.clone(),
            });
            self.disk.push(p);
        }
    }
    fn apply(&mut self, apply: Apply) {
        match apply {
            Apply::Command { at, command } => self.applied.push((at.slot, command.id)),
            Apply::Restore(s) => self.applied.push((s.at.slot, 0)),
        }
    }
    fn event(&mut self, e: Event) {
        self.events.push(e);
    }
    fn transmit(&mut self, e: Envelope<Msg>) {
        let to: Vec<NodeId> = match e.to {
            Dest::One(p) => vec![p],
            Dest::All => self
                .members
                .iter()
                .copied()
                .filter(|&p| p != self.me)
                .collect(),
        };
        for to in to {
            self.trace.push(Trace::Send {
                from: self.me,
                inc: self.inc,
                to,
                msg: e.msg.clone(),
            });
            self.queue.push_back(Packet {
                from: self.me,
                to,
                msg: e.msg.clone(),
            });
        }
    }
}

impl Net {
    /// `n` replicas with ids 1..=n, all started from empty disks.
    pub fn new(n: u32) -> Self {
        Self::with_options(n, Options::default())
    }

    /// The same, with these options for every replica.
    pub fn with_options(n: u32, opts: Options) -> Self {
        let mut net = Net {
            now: 0,
            nodes: (1..=n)
                .map(|id| Node {
                    id,
                    replica: None,
                    durable: Durable::default(),
                    disk: Vec::new(),
                    stalled: false,
                    inc: 0,
                    applied: Vec::new(),
                    events: Vec::new(),
                })
                .collect(),
            queue: VecDeque::new(),
            blocked: BTreeSet::new(),
            trace: Vec::new(),
            opts,
        };
        for id in 1..=n {
            net.start(id, false);
        }
        net
    }

    fn members(&self) -> Vec<NodeId> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    fn idx(id: NodeId) -> usize {
        id as usize - 1
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[Self::idx(id)]
    }

    pub fn core(&self, id: NodeId) -> &Zab {
        self.node(id).replica.as_ref().expect("node is up").core()
    }

    pub fn view(&self, id: NodeId) -> View {
        self.core(id).view()
    }

    /// Start node `id` from its disk; `lost` is what the driver says about that disk.
    pub fn start(&mut self, id: NodeId, lost: bool) {
        let members = self.members();
        let opts = self.opts.clone();
        let n = &mut self.nodes[Self::idx(id)];
        assert!(n.replica.is_none());
        n.inc += 1;
        n.applied.clear();
        n.events.clear();
        let mut durable = n.durable.clone();
        durable.lost = lost;
        let seed = (id as u64) << 32 | n.inc as u64;
        let core = Zab::restore(Cluster::new(id, members), opts, durable, seed);
        n.replica = Some(Replica::new(core, 100_000));
        self.trace.push(Trace::Restart {
            node: id,
            inc: n.inc,
        });
    }

    /// Crash node `id`: what is not durable is gone, its connections break and peers see it.
    pub fn crash(&mut self, id: NodeId) {
        let n = &mut self.nodes[Self::idx(id)];
        n.replica = None;
        n.disk.clear();
        self.queue.retain(|p| p.from != id && p.to != id);
        for peer in self.members() {
            if peer != id && self.node(peer).replica.is_some() {
                self.step(peer, Input::Disconnected { peer: id });
            }
        }
    }

    /// Block (or unblock) every link to and from `id`.
    pub fn isolate(&mut self, id: NodeId, on: bool) {
        for p in self.members() {
            if p != id {
                for link in [(id, p), (p, id)] {
                    if on {
                        self.blocked.insert(link);
                    } else {
                        self.blocked.remove(&link);
                    }
                }
            }
        }
    }

    pub fn step(&mut self, id: NodeId, input: Input<Msg>) {
        self.with(id, |r, now, io| r.step(now, input, io));
    }

    pub fn submit(&mut self, id: NodeId, commands: Vec<Command>) {
        self.with(id, |r, now, io| r.submit(now, commands, io));
    }

    fn with(&mut self, id: NodeId, f: impl FnOnce(&mut Replica<Zab>, TimeUs, &mut Io<'_>)) {
        let members = self.members();
        let now = self.now;
        let n = &mut self.nodes[Self::idx(id)];
        let Some(mut r) = n.replica.take() else {
            return;
        };
        let mut io = Io {
            me: id,
            inc: n.inc,
            members,
            disk: &mut n.disk,
            applied: &mut n.applied,
            events: &mut n.events,
            queue: &mut self.queue,
            trace: &mut self.trace,
        };
        f(&mut r, now, &mut io);
        self.nodes[Self::idx(id)].replica = Some(r);
    }

    /// Make every pending write of the nodes whose disk is not stalled durable. Returns whether
    /// anything was written.
    fn flush_disks(&mut self) -> bool {
        let mut any = false;
        for i in 0..self.nodes.len() {
            let n = &mut self.nodes[i];
            if n.stalled || n.disk.is_empty() || n.replica.is_none() {
                continue;
            }
            let ops = std::mem::take(&mut n.disk);
            let upto = ops.last().map_or(0, |p| p.seq);
            for p in &ops {
                n.durable.apply(&p.op);
            }
            let (id, inc) = (n.id, n.inc);
            self.trace.push(Trace::Durable {
                node: id,
                inc,
                upto,
            });
            let now = self.now;
            self.with(id, |r, _, io| r.durable(now, upto, io));
            any = true;
        }
        any
    }

    /// Run until virtual time `until`: deliver messages and complete writes, then move time to
    /// the next deadline.
    pub fn run_until(&mut self, until: TimeUs) {
        for _ in 0..10_000_000 {
            if self.flush_disks() {
                continue;
            }
            if let Some(p) = self.queue.pop_front() {
                let up = self.node(p.to).replica.is_some();
                if up && !self.blocked.contains(&(p.from, p.to)) {
                    self.step(
                        p.to,
                        Input::Message {
                            from: p.from,
                            msg: p.msg,
                        },
                    );
                }
                continue;
            }
            let next = self
                .nodes
                .iter()
                .filter_map(|n| n.replica.as_ref().and_then(|r| r.deadline()))
                .min();
            match next {
                Some(t) if t <= until => {
                    self.now = self.now.max(t);
                    let now = self.now;
                    for id in self.members() {
                        self.with(id, |r, _, io| {
                            r.wake(now, io);
                        });
                    }
                }
                _ => {
                    self.now = self.now.max(until);
                    return;
                }
            }
        }
        panic!("the cluster never went quiet");
    }

    pub fn run_for(&mut self, us: TimeUs) {
        let until = self.now + us;
        self.run_until(until);
    }

    /// The established leader every live node follows, if the cluster is settled that way.
    pub fn settled(&self) -> Option<NodeId> {
        let views: Vec<View> = self
            .nodes
            .iter()
            .filter_map(|n| n.replica.as_ref().map(|r| r.view()))
            .collect();
        let leader = views.iter().find(|v| v.role == Role::Leading)?.leader?;
        views
            .iter()
            .all(|v| v.serving() && v.leader == Some(leader))
            .then_some(leader)
    }

    /// Submit `n` commands (ids from `first_id`) at the leader.
    pub fn submit_at_leader(&mut self, leader: NodeId, first_id: u64, n: u64) {
        let commands = (first_id..first_id + n)
            .map(|id| Command {
                id,
                payload: bytes::Bytes::from_static(b"x"),
            })
            .collect();
        self.submit(leader, commands);
    }

    /// The trace entries of `node` in incarnation `inc`, with their index in the whole trace.
    pub fn trace_of(&self, node: NodeId, inc: u32) -> Vec<(usize, &Trace)> {
        self.trace
            .iter()
            .enumerate()
            .filter(|(_, t)| match t {
                Trace::Persist {
                    node: n, inc: i, ..
                }
                | Trace::Durable {
                    node: n, inc: i, ..
                }
                | Trace::Send {
                    from: n, inc: i, ..
                }
                | Trace::Restart { node: n, inc: i } => *n == node && *i == inc,
            })
            .collect()
    }
}
