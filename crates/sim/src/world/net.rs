//! The simulated network: one FIFO link per ordered pair of replicas, with latency, one
//! network interface per node whose bandwidth all its links share, partitions (messages dropped silently) and broken connections (what is in flight is lost).
//! On a WAN with `Wan::send_buffer_bytes`, a link between sites holds a bounded send queue and
//! a send that finds it full blocks the sender (back-pressure, wan.rs).

use super::{Ev, World};
use crate::faults::FaultKind;
use crate::WanLink;
use bytes::Bytes;
use rand_core::RngCore;
use synod_host::{Hosted, PeerKind};

/// A directed link. A break bumps the generation: whatever was in flight is lost.
#[derive(Clone, Default)]
pub(super) struct Link {
    pub(super) generation: u64,
    pub(super) blocked: u32,
    /// A replaying reconnect: messages of this (old) generation still in flight arrive late
    /// instead of being lost. Cleared by any later break (a crash kills the connection's data).
    replay: Option<u64>,
    /// Arrival time of the last message (FIFO).
    last_arrival: u64,
    /// When the link's own bandwidth (a WAN pipe) is free again.
    pipe_free_at: u64,
}

impl<P: Hosted> World<P> {
    /// Send a frame of `group` from node `from` to node `to`: it arrives after the link's
    /// latency, behind the sender's interface and the link's FIFO order, unless the link breaks.
    pub(super) fn send_one(
        &mut self,
        from: usize,
        to: usize,
        group: usize,
        kind: PeerKind,
        data: Bytes,
    ) {
        let n = self.nodes.len();
        let size = data.len() as u64;
        // The CPU cost of sending: the message leaves once the step has spent it.
        if !self.cfg.cost.is_free() {
            self.step_cost_ns += self.cfg.cost.send_ns(size as usize);
        }
        let ready = self.now + self.step_cost_ns.div_ceil(1_000);
        let slow = self.nodes[from].slow_net.max(self.nodes[to].slow_net) as u64;
        if self.links[from * n + to].blocked > 0 {
            return;
        }
        let wan = self.wan_link(from, to);
        let send_buffer = self.cfg.net.wan.as_ref().and_then(|w| w.send_buffer_bytes);
        let lat = match wan {
            Some(w) => w.latency_us + self.rand_between(0, w.jitter_us),
            None => self.rand_between(self.cfg.net.latency_min_us, self.cfg.net.latency_max_us),
        } * slow;
        // One network interface per node: everything it sends shares its bandwidth.
        let tx = size * 1_000_000 / self.cfg.net.bandwidth_bytes_per_s.max(1);
        let nic = &mut self.nodes[from].nic_free_at;
        *nic = (*nic).max(ready) + tx;
        let mut sent = *nic;
        let link = &mut self.links[from * n + to];
        if let Some(w) = wan {
            // Then the WAN pipe between the two sites.
            let pipe_tx = size * 1_000_000 / w.bandwidth_bytes_per_s.max(1);
            link.pipe_free_at = link.pipe_free_at.max(sent) + pipe_tx;
            sent = link.pipe_free_at;
        }
        let arrival = (sent + lat).max(link.last_arrival);
        link.last_arrival = arrival;
        let generation = link.generation;
        if let (Some(w), Some(buffer)) = (wan, send_buffer) {
            // Back-pressure (wan.rs): a full send queue blocks the sender until it has drained
            // to the bound; meanwhile the node handles nothing and sends nothing else.
            let writable = w.writable_at(link.pipe_free_at, buffer);
            let node = &mut self.nodes[from];
            if writable > ready {
                node.busy_until = node.busy_until.max(writable);
                node.nic_free_at = node.nic_free_at.max(writable);
                *self.report.faults.entry("blocked-send").or_default() += 1;
            }
        }
        self.at(
            arrival,
            Ev::Message {
                from,
                to,
                group,
                generation,
                late: false,
                kind,
                data,
            },
        );
    }

    /// The WAN link between two nodes' sites, after the changes due by now (nodes of one
    /// site use the LAN model).
    fn wan_link(&mut self, from: usize, to: usize) -> Option<WanLink> {
        let now = self.now;
        let w = self.cfg.net.wan.as_mut()?;
        if w.changes.first().is_some_and(|c| c.0 <= now) {
            w.advance(now);
        }
        (w.site_of[from] != w.site_of[to]).then(|| w.link(from, to))
    }

    /// Was a message sent on link `from → to` in `generation` still deliverable? A message of
    /// a replaying connection is instead put back in flight, late (after the new connection's
    /// messages), and one in four is delivered twice; it returns false for now.
    pub(super) fn delivered_on_link(
        &mut self,
        (from, to, group): (usize, usize, usize),
        generation: u64,
        late: bool,
        kind: PeerKind,
        data: &Bytes,
    ) -> bool {
        let n = self.nodes.len();
        let link = &self.links[from * n + to];
        if link.generation == generation {
            return true;
        }
        if link.replay != Some(generation) {
            return false;
        }
        if late {
            return true; // already held back once: it arrives now
        }
        let copies = if self.rng.next_u64().is_multiple_of(4) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let delay = self.rand_between(1_000, 50_000);
            *self.report.faults.entry("replayed-message").or_default() += 1;
            let at = self.now + delay;
            self.at(
                at,
                Ev::Message {
                    from,
                    to,
                    group,
                    generation,
                    late: true,
                    kind,
                    data: data.clone(),
                },
            );
        }
        false
    }

    pub(super) fn break_link(&mut self, a: usize, b: usize) {
        let n = self.nodes.len();
        let link = &mut self.links[a * n + b];
        link.generation += 1;
        link.replay = None;
    }

    /// Break the connection `a → b`, but let what was in flight on it arrive late.
    pub(super) fn replay_link(&mut self, a: usize, b: usize) {
        let n = self.nodes.len();
        let link = &mut self.links[a * n + b];
        link.replay = Some(link.generation);
        link.generation += 1;
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

#[cfg(test)]
mod tests {
    use super::World;
    use crate::{FaultSet, NetModel, SimConfig, Wan};
    use synod_core::wire::Wire;
    use synod_host::PeerKind;
    use synod_zab::{Msg, Options, Zab};

    /// Two sites, 8 kbit/s (1,000 B/s) from A to B; `count` messages sent from A to B at
    /// time 0; what the sender's node and interface are then busy until, and when the last
    /// message arrives.
    fn send(buffer: Option<u64>, count: u64) -> (u64, u64, u64, u64) {
        let mut wan = Wan::clique(2, 2, 10_000, 1_000);
        wan.send_buffer_bytes = buffer;
        let mut cfg = SimConfig::new(2, 1, Options::default());
        cfg.faults = FaultSet::none();
        cfg.net = NetModel::wan(wan);
        let mut w = World::<Zab>::new(cfg);
        let msg = Msg::NewEpoch { epoch: 1 }.to_bytes();
        let size = msg.len() as u64;
        for _ in 0..count {
            w.send_one(0, 1, 0, PeerKind::Message, msg.clone());
        }
        let last = w.links[1].last_arrival;
        (w.nodes[0].busy_until, w.nodes[0].nic_free_at, last, size)
    }

    #[test]
    fn a_full_send_queue_blocks_the_sender_until_it_drains_to_the_bound() {
        // Unbounded (the default): the link queues all ten and the sender never waits.
        let (busy, _, last_free, size) = send(None, 10);
        let tx = size * 1_000; // µs per message at 1,000 B/s
        assert_eq!(busy, 0);
        assert_eq!(last_free, 10 * tx + 10_000);
        // A queue of three messages: the fourth write returns when the first has left, and
        // after the tenth the sender is blocked until seven have: its node handles nothing
        // and its interface sends nothing before then. What arrives, and when, is unchanged.
        let (busy, nic, last, _) = send(Some(3 * size), 10);
        assert_eq!((busy, nic), (7 * tx, 7 * tx));
        assert_eq!(last, last_free);
        // Fewer than the bound: no block.
        assert_eq!(send(Some(3 * size), 3).0, 0);
    }
}
