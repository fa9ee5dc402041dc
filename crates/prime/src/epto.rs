//! EpTO's epidemic total order (Matos, Mercier, Felber, Oliveira and Pereira, Middleware 2015;
//! sconekv.md §2.3), with logical clocks.
//!
//! **Dissemination.** To broadcast, a node stamps the event with its logical clock, sets
//! `ttl = 0` and adds it to `next_ball` ([`Epto::broadcast`]). Every round (δ) it increments the
//! ttl of the events in `next_ball`, sends the ball to K peers ([`Epto::round`]) and hands it to
//! its ordering component. A received ball's events with `ttl < TTL` join `next_ball` (the
//! larger ttl kept when already there), and the clock moves past their stamps
//! ([`Epto::on_ball`]).
//!
//! **Ordering.** Every round the received events age by one; the ball's events not yet
//! delivered join them; an event is **deliverable** once its ttl passed TTL, and it is
//! delivered only if no event still waiting orders before it; deliverable events go out sorted
//! by (timestamp, origin, sequence).
//!
//! Two corrections to the paper's pseudo-code, both about ties (the paper compares timestamps
//! only, while it orders by (timestamp, id)): an event still waiting with the **same** timestamp
//! and a smaller id must hold back a deliverable one, and an event arriving after a delivered one
//! with the same timestamp and a smaller id must be dropped. Comparing whole order keys does both.
//!
//! Agreement is probabilistic: an event that reaches a node after a later one was delivered
//! there is dropped, a **hole**, counted in [`Epto::holes`]. PRIME repairs holes above
//! (crate::node, by view state exchange).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::Member;

/// An event's position in the total order: (timestamp, origin, origin's sequence number).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OrderKey {
    pub ts: u64,
    pub origin: Member,
    pub seq: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event<P> {
    pub key: OrderKey,
    pub ttl: u32,
    pub payload: P,
}

/// EpTO's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// K: peers a ball goes to each round.
    pub fanout: usize,
    /// TTL: rounds an event is gossiped, and rounds before it may be delivered.
    pub ttl: u32,
    /// At most this many events in one ball (a limit on every queue): events arriving when it
    /// is full are not relayed (they may become holes; counted in `dropped_full`).
    pub max_ball: usize,
}

impl Params {
    /// The thesis's prototype (sconekv.md §2.4): FANOUT = 10, PUSH_TTL = 5.
    pub const THESIS: Params = Params {
        fanout: 10,
        ttl: 5,
        max_ball: 4096,
    };

    /// Enough rounds for a ball of fanout K to reach all of `n` nodes with high probability:
    /// ⌈log_K n⌉ rounds reach about every node; the paper's balls-and-bins bound
    /// (TTL = 2⌈(c+1)·log2 n⌉ + 1 with logical clocks) is far more conservative. `slack` rounds
    /// are added on top; docs/results/membership-scale.md measures holes against it.
    pub fn for_size(n: usize, fanout: usize, slack: u32) -> Params {
        let n = n.max(2) as f64;
        let k = fanout.max(2) as f64;
        let rounds = (n.ln() / k.ln()).ceil() as u32;
        Params {
            fanout,
            ttl: rounds + slack,
            max_ball: 4096,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Epto<P> {
    me: Member,
    params: Params,
    clock: u64,
    seq: u64,
    next_ball: BTreeMap<OrderKey, Event<P>>,
    received: BTreeMap<OrderKey, Event<P>>,
    last_delivered: Option<OrderKey>,
    holes: u64,
    dropped_full: u64,
    recent: BTreeSet<OrderKey>,
    recent_order: VecDeque<OrderKey>,
}

impl<P: Clone> Epto<P> {
    pub fn new(me: Member, params: Params) -> Self {
        assert!(params.fanout >= 1 && params.ttl >= 1 && params.max_ball >= 1);
        Epto {
            me,
            params,
            clock: 0,
            seq: 0,
            next_ball: BTreeMap::new(),
            received: BTreeMap::new(),
            last_delivered: None,
            holes: 0,
            dropped_full: 0,
            recent: BTreeSet::new(),
            recent_order: VecDeque::new(),
        }
    }

    pub fn params(&self) -> Params {
        self.params
    }

    /// Retune K and TTL (the view grew or shrank); events in flight keep their ttl.
    pub fn set_params(&mut self, params: Params) {
        self.params = params;
    }

    /// Events dropped because a later one had been delivered here: EpTO's holes.
    pub fn holes(&self) -> u64 {
        self.holes
    }

    /// This node's logical clock.
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// Move the clock past `ts` (a peer's clock, learnt outside a ball: a view copy, a
    /// repair), so this node's next broadcast does not order before what others delivered.
    pub fn observe(&mut self, ts: u64) {
        self.clock = self.clock.max(ts);
    }

    /// Start again as another incarnation: nothing in flight, nothing delivered, the clock kept
    /// (a rejoining node's events must not order before what it delivered last time).
    pub fn reincarnate(&mut self, me: Member) -> Epto<P> {
        let mut e = Epto::new(me, self.params);
        e.clock = self.clock;
        e
    }

    /// Events not relayed because a ball was full.
    pub fn dropped_full(&self) -> u64 {
        self.dropped_full
    }

    /// Events being disseminated or waiting to be delivered.
    pub fn pending(&self) -> usize {
        self.next_ball.len() + self.received.len()
    }

    /// Broadcast `payload`: stamped with the next logical time, ttl 0, into the next ball.
    pub fn broadcast(&mut self, payload: P) -> OrderKey {
        self.clock += 1;
        self.seq += 1;
        let key = OrderKey {
            ts: self.clock,
            origin: self.me,
            seq: self.seq,
        };
        self.next_ball.insert(
            key,
            Event {
                key,
                ttl: 0,
                payload,
            },
        );
        key
    }

    /// A ball from a peer: events still young enough join the next ball; the clock moves on.
    pub fn on_ball(&mut self, ball: &[Event<P>]) {
        for e in ball {
            self.clock = self.clock.max(e.key.ts);
            if e.ttl >= self.params.ttl {
                continue;
            }
            match self.next_ball.get_mut(&e.key) {
                Some(mine) => mine.ttl = mine.ttl.max(e.ttl),
                None => {
                    if self.next_ball.len() >= self.params.max_ball {
                        self.dropped_full += 1;
                        continue;
                    }
                    self.next_ball.insert(e.key, e.clone());
                }
            }
        }
    }

    /// One round: the ball to send to K peers (empty: send nothing), and the events delivered
    /// in total order, appended to `deliver`.
    pub fn round(&mut self, deliver: &mut Vec<Event<P>>) -> Vec<Event<P>> {
        let mut ball: Vec<Event<P>> = std::mem::take(&mut self.next_ball).into_values().collect();
        for e in &mut ball {
            e.ttl += 1;
        }
        self.order(&ball, deliver);
        ball
    }

    /// The ordering component.
    fn order(&mut self, ball: &[Event<P>], deliver: &mut Vec<Event<P>>) {
        for e in self.received.values_mut() {
            e.ttl += 1;
        }
        for e in ball {
            if self.last_delivered.is_some_and(|last| e.key <= last) {
                // Delivered already (a late duplicate, the common case) or ordered before a
                // delivered event and never seen: a hole.
                if !self.seen_delivered(e.key) {
                    self.holes += 1;
                    self.remember_delivered(e.key); // each missed event counted once
                }
                continue;
            }
            match self.received.get_mut(&e.key) {
                Some(r) => r.ttl = r.ttl.max(e.ttl),
                None => {
                    self.received.insert(e.key, e.clone());
                }
            }
        }
        // The first event still waiting bounds what may go out.
        let first_waiting = self
            .received
            .values()
            .find(|e| e.ttl <= self.params.ttl)
            .map(|e| e.key);
        let ready: Vec<OrderKey> = self
            .received
            .values()
            .filter(|e| e.ttl > self.params.ttl && first_waiting.is_none_or(|w| e.key < w))
            .map(|e| e.key)
            .collect();
        for key in ready {
            let e = self
                .received
                .remove(&key)
                .expect("ready events are received");
            self.last_delivered = Some(key);
            self.remember_delivered(key);
            deliver.push(e);
        }
    }
}

/// Recently delivered keys remembered, to tell a late duplicate from a hole (bounded).
const REMEMBERED: usize = 8192;

impl<P> Epto<P> {
    fn seen_delivered(&self, key: OrderKey) -> bool {
        self.recent.contains(&key)
    }
    fn remember_delivered(&mut self, key: OrderKey) {
        if self.recent.insert(key) {
            self.recent_order.push_back(key);
            if self.recent_order.len() > REMEMBERED {
                if let Some(old) = self.recent_order.pop_front() {
                    self.recent.remove(&old);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use synod_core::rng::CoreRng;

    fn gossip(
        nodes: &mut [Epto<u32>],
        rounds: usize,
        rng: &mut CoreRng,
        drop_to: Option<usize>,
    ) -> Vec<Vec<u32>> {
        let n = nodes.len();
        let mut delivered = vec![Vec::new(); n];
        for _ in 0..rounds {
            let mut balls = Vec::new();
            for (i, node) in nodes.iter_mut().enumerate() {
                let mut out = Vec::new();
                let ball = node.round(&mut out);
                delivered[i].extend(out.into_iter().map(|e| e.payload));
                if !ball.is_empty() {
                    for _ in 0..node.params().fanout {
                        balls.push((rng.below(n as u64) as usize, ball.clone()));
                    }
                }
            }
            for (to, ball) in balls {
                if Some(to) == drop_to {
                    continue;
                }
                nodes[to].on_ball(&ball);
            }
        }
        delivered
    }

    #[test]
    fn every_node_delivers_every_event_in_one_order() {
        let mut rng = CoreRng::new(5);
        let n = 50;
        let params = Params::for_size(n, 6, 3);
        let mut nodes: Vec<Epto<u32>> = (0..n)
            .map(|i| Epto::new(Member::new(i as u32 + 1, 1), params))
            .collect();
        for (i, node) in nodes.iter_mut().enumerate().take(10) {
            node.broadcast(i as u32);
        }
        // Two concurrent broadcasts with equal timestamps: ordered by origin.
        let delivered = gossip(&mut nodes, 40, &mut rng, None);
        for d in &delivered {
            assert_eq!(d.len(), 10, "every event reaches every node");
            assert_eq!(d, &delivered[0], "in one order");
        }
        assert!(nodes.iter().all(|e| e.holes() == 0 && e.pending() == 0));
    }

    #[test]
    fn an_event_behind_a_delivered_one_is_a_hole_not_a_reordering() {
        let params = Params {
            fanout: 1,
            ttl: 2,
            max_ball: 16,
        };
        let mut a = Epto::new(Member::new(1, 1), params);
        let late = Event {
            key: OrderKey {
                ts: 1,
                origin: Member::new(2, 1),
                seq: 1,
            },
            ttl: 0,
            payload: 7u32,
        };
        a.broadcast(9u32); // ts 1, origin 1: orders before `late` (origin 2)
        let mut out = Vec::new();
        for _ in 0..4 {
            a.round(&mut out);
        }
        assert_eq!(out.iter().map(|e| e.payload).collect::<Vec<_>>(), vec![9]);
        // An event with the same timestamp and a larger origin orders after: still deliverable.
        a.on_ball(std::slice::from_ref(&late));
        for _ in 0..4 {
            a.round(&mut out);
        }
        assert_eq!(
            out.iter().map(|e| e.payload).collect::<Vec<_>>(),
            vec![9, 7]
        );
        // One with a smaller key than the last delivered is dropped and counted, once.
        let early = Event {
            key: OrderKey {
                ts: 1,
                origin: Member::new(1, 0),
                seq: 5,
            },
            ..late
        };
        a.on_ball(std::slice::from_ref(&early));
        a.round(&mut out);
        a.on_ball(&[early]);
        a.round(&mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(a.holes(), 1);
    }

    /// The tie rule: a deliverable event waits for a not-yet-deliverable one with the same
    /// timestamp and a smaller origin (the paper's timestamp-only comparison would not).
    #[test]
    fn a_waiting_event_with_an_equal_timestamp_holds_back_a_later_origin() {
        let params = Params {
            fanout: 1,
            ttl: 3,
            max_ball: 16,
        };
        let mut a: Epto<u32> = Epto::new(Member::new(5, 1), params);
        let mk = |origin: u32, ttl: u32, payload: u32| Event {
            key: OrderKey {
                ts: 4,
                origin: Member::new(origin, 1),
                seq: 1,
            },
            ttl,
            payload,
        };
        a.on_ball(&[mk(9, 2, 90)]);
        let mut out = Vec::new();
        a.round(&mut out);
        a.on_ball(&[mk(3, 0, 30)]);
        a.round(&mut out);
        a.round(&mut out);
        assert!(
            out.is_empty(),
            "origin 9 waits for origin 3, same timestamp: {out:?}"
        );
        for _ in 0..3 {
            a.round(&mut out);
        }
        assert_eq!(
            out.iter().map(|e| e.payload).collect::<Vec<_>>(),
            vec![30, 90]
        );
    }

    #[test]
    fn ttl_for_size_grows_with_the_system() {
        assert!(Params::for_size(20, 10, 2).ttl < Params::for_size(1000, 10, 2).ttl);
        assert_eq!(Params::for_size(1000, 10, 0).ttl, 3);
    }
}
