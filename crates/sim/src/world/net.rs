//! The simulated network: one FIFO link per ordered pair of replicas, with latency, bandwidth,
//! partitions (messages dropped silently) and broken connections (what is in flight is lost).

use super::{Ev, World};
use crate::faults::FaultKind;
use synod_core::{Dest, Envelope, Protocol, WireSize};

/// A directed link. A break bumps the generation: whatever was in flight is lost.
#[derive(Clone, Default)]
pub(super) struct Link {
    pub(super) generation: u64,
    pub(super) blocked: u32,
    /// When the sender's NIC is free again (bandwidth model).
    busy_until: u64,
    /// Arrival time of the last message (FIFO).
    last_arrival: u64,
}

impl<P: Protocol> World<P> {
    pub(super) fn transmit(&mut self, from: usize, env: Envelope<P::Message>) {
        let role = self.nodes[from].role;
        match env.to {
            Dest::One(to) => {
                self.report.count_out(role);
                self.send_one(from, to as usize - 1, env.msg);
            }
            Dest::All => {
                for to in 0..self.nodes.len() {
                    if to != from {
                        self.report.count_out(role);
                        self.send_one(from, to, env.msg.clone());
                    }
                }
            }
        }
    }

    fn send_one(&mut self, from: usize, to: usize, msg: P::Message) {
        let n = self.nodes.len();
        let size = msg.wire_size() as u64;
        let slow = self.nodes[from].slow_net.max(self.nodes[to].slow_net) as u64;
        let lat =
            self.rand_between(self.cfg.net.latency_min_us, self.cfg.net.latency_max_us) * slow;
        let tx = size * 1_000_000 / self.cfg.net.bandwidth_bytes_per_s.max(1);
        let now = self.now;
        let link = &mut self.links[from * n + to];
        if link.blocked > 0 {
            return;
        }
        link.busy_until = link.busy_until.max(now) + tx;
        let arrival = (link.busy_until + lat).max(link.last_arrival);
        link.last_arrival = arrival;
        let generation = link.generation;
        self.at(
            arrival,
            Ev::Message {
                from,
                to,
                generation,
                msg,
            },
        );
    }

    /// Was a message sent on link `from → to` in `generation` still deliverable?
    pub(super) fn delivered_on_link(&self, from: usize, to: usize, generation: u64) -> bool {
        self.links[from * self.nodes.len() + to].generation == generation
    }

    pub(super) fn break_link(&mut self, a: usize, b: usize) {
        let n = self.nodes.len();
        self.links[a * n + b].generation += 1;
    }

    pub(super) fn block(&mut self, kind: FaultKind, side: &[usize], on: bool) {
        let n = self.nodes.len();
        for (a, b) in cut_links(kind, side, n) {
            if on {
                self.links[a * n + b].blocked += 1;
                self.break_link(a, b);
            } else {
                self.links[a * n + b].blocked -= 1;
            }
        }
    }
}

/// The directed links a partition cuts: across the split both ways, or from the `side` to the
/// rest only (one-way: the side can hear the others but not reach them).
fn cut_links(kind: FaultKind, side: &[usize], n: usize) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    for a in 0..n {
        for b in 0..n {
            let (ia, ib) = (side.contains(&a), side.contains(&b));
            let cut = match kind {
                FaultKind::Partition => ia != ib,
                _ => ia && !ib,
            };
            if cut {
                v.push((a, b));
            }
        }
    }
    v
}
