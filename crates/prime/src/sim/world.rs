//! A discrete-event world for membership cores: virtual time, a network with a latency range,
//! loss and partitions, crashes, and per-node message counts. Deterministic for a seed.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};

use crate::{Core, Input, NodeId, TimeUs};
use synod_core::rng::CoreRng;

/// The network between nodes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Net {
    pub min_latency_us: TimeUs,
    pub max_latency_us: TimeUs,
    /// Probability that a message is lost.
    pub loss: f64,
}

impl Net {
    /// A data centre: 0.2–2 ms one way, no loss.
    pub const LAN: Net = Net {
        min_latency_us: 200,
        max_latency_us: 2_000,
        loss: 0.0,
    };
}

/// Messages sent and bytes, per node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub messages: u64,
    pub bytes: u64,
}

struct Slot<C> {
    core: C,
    alive: bool,
    /// The earliest wake-up already queued for this node.
    queued: Option<TimeUs>,
}

enum Due {
    Wake(NodeId),
    Deliver(u64),
}

pub struct World<C: Core> {
    now: TimeUs,
    seq: u64,
    rng: CoreRng,
    net: Net,
    nodes: BTreeMap<NodeId, Slot<C>>,
    queue: BinaryHeap<Reverse<(TimeUs, u64)>>,
    due: HashMap<u64, Due>,
    in_flight: HashMap<u64, (NodeId, NodeId, C::Msg)>,
    /// While partitioned: one side; messages between the sides are lost.
    side: Option<BTreeSet<NodeId>>,
    traffic: BTreeMap<NodeId, Traffic>,
    out: Vec<(NodeId, C::Msg)>,
    /// The latest delivery time per link: channels are FIFO, as TCP connections are.
    link: HashMap<(NodeId, NodeId), TimeUs>,
}

impl<C: Core> World<C> {
    pub fn new(seed: u64, net: Net) -> Self {
        World {
            now: 0,
            seq: 0,
            rng: CoreRng::new(seed),
            net,
            nodes: BTreeMap::new(),
            queue: BinaryHeap::new(),
            due: HashMap::new(),
            in_flight: HashMap::new(),
            side: None,
            traffic: BTreeMap::new(),
            out: Vec::new(),
            link: HashMap::new(),
        }
    }

    pub fn now(&self) -> TimeUs {
        self.now
    }

    pub fn rng(&mut self) -> &mut CoreRng {
        &mut self.rng
    }

    fn push(&mut self, at: TimeUs, due: Due) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq)));
        self.due.insert(self.seq, due);
    }

    /// Start a node now.
    pub fn start(&mut self, id: NodeId, core: C) {
        assert!(
            !self.nodes.get(&id).is_some_and(|s| s.alive),
            "node {id} is running"
        );
        self.nodes.insert(
            id,
            Slot {
                core,
                alive: true,
                queued: None,
            },
        );
        self.step(id, Input::Start);
    }

    /// Crash a node: it stops, its messages in flight to it are lost.
    pub fn crash(&mut self, id: NodeId) {
        if let Some(s) = self.nodes.get_mut(&id) {
            s.alive = false;
        }
    }

    /// Ask a node to leave gracefully.
    pub fn leave(&mut self, id: NodeId) {
        self.step(id, Input::Leave);
    }

    /// Partition `side` from everyone else until [`World::heal`].
    pub fn partition(&mut self, side: BTreeSet<NodeId>) {
        self.side = Some(side);
    }

    pub fn heal(&mut self) {
        self.side = None;
    }

    pub fn alive(&self) -> impl Iterator<Item = (NodeId, &C)> + '_ {
        self.nodes
            .iter()
            .filter(|(_, s)| s.alive)
            .map(|(&id, s)| (id, &s.core))
    }

    /// Every node ever started, crashed ones included (for counters over the whole run).
    pub fn every(&self) -> impl Iterator<Item = (NodeId, &C)> + '_ {
        self.nodes.iter().map(|(&id, s)| (id, &s.core))
    }

    pub fn core(&self, id: NodeId) -> Option<&C> {
        self.nodes.get(&id).filter(|s| s.alive).map(|s| &s.core)
    }

    pub fn traffic(&self) -> &BTreeMap<NodeId, Traffic> {
        &self.traffic
    }

    fn step(&mut self, id: NodeId, input: Input<C::Msg>) {
        let now = self.now;
        let Some(slot) = self.nodes.get_mut(&id).filter(|s| s.alive) else {
            return;
        };
        let mut out = std::mem::take(&mut self.out);
        slot.core.step(now, input, &mut out);
        let deadline = slot.core.deadline();
        if let Some(d) = deadline {
            let d = d.max(now);
            if slot.queued.is_none_or(|q| d < q) {
                slot.queued = Some(d);
                self.push(d, Due::Wake(id));
            }
        }
        for (to, msg) in out.drain(..) {
            let t = self.traffic.entry(id).or_default();
            t.messages += 1;
            t.bytes += C::wire_size(&msg) as u64;
            let cut = self
                .side
                .as_ref()
                .is_some_and(|s| s.contains(&id) != s.contains(&to));
            if cut || (self.net.loss > 0.0 && self.rng.chance(self.net.loss)) {
                continue;
            }
            let span = self.net.max_latency_us - self.net.min_latency_us;
            let sampled = now + self.net.min_latency_us + self.rng.below(span.max(1));
            let last = self.link.entry((id, to)).or_insert(0);
            let at = sampled.max(*last);
            *last = at;
            self.seq += 1;
            let key = self.seq;
            self.in_flight.insert(key, (id, to, msg));
            self.push(at, Due::Deliver(key));
        }
        self.out = out;
    }

    /// Run until virtual time `until`.
    pub fn run_until(&mut self, until: TimeUs) {
        while let Some(&Reverse((at, key))) = self.queue.peek() {
            if at > until {
                break;
            }
            self.queue.pop();
            self.now = at;
            match self.due.remove(&key).expect("every queued key has its due") {
                Due::Wake(id) => {
                    let Some(slot) = self.nodes.get_mut(&id).filter(|s| s.alive) else {
                        continue;
                    };
                    if slot.queued == Some(at) {
                        slot.queued = None;
                    }
                    if slot.core.deadline().is_some_and(|d| d <= at) {
                        self.step(id, Input::Timeout);
                    } else if let Some(d) = slot.core.deadline() {
                        if slot.queued.is_none_or(|q| d < q) {
                            slot.queued = Some(d);
                            self.push(d, Due::Wake(id));
                        }
                    }
                }
                Due::Deliver(k) => {
                    let (from, to, msg) = self.in_flight.remove(&k).expect("in flight");
                    let cut = self
                        .side
                        .as_ref()
                        .is_some_and(|s| s.contains(&from) != s.contains(&to));
                    if !cut {
                        self.step(to, Input::Message { from, msg });
                    }
                }
            }
        }
        self.now = self.now.max(until);
    }
}
