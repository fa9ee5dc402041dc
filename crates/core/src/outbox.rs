//! The durability rule for sending, shared by every driver (the simulator and the server).
//!
//! Envelopes leave in the order the core emitted them. An envelope whose `after_durable` barrier
//! is not yet met holds back itself and everything emitted after it, so a message never
//! overtakes one that the core sent before it, and nothing that depends on a log write leaves
//! before the write is durable.

use crate::Envelope;
use std::collections::VecDeque;

#[derive(Debug)]
pub struct Outbox<M> {
    held: VecDeque<Envelope<M>>,
    durable_seq: u64,
    /// Envelopes held at most (a bound on memory; a core that needs more is broken).
    limit: usize,
}

impl<M> Outbox<M> {
    pub fn new(limit: usize) -> Self {
        Self {
            held: VecDeque::new(),
            durable_seq: 0,
            limit,
        }
    }

    /// Forget everything (a crash or restart: the storage sequence starts again).
    pub fn reset(&mut self) {
        self.held.clear();
        self.durable_seq = 0;
    }

    pub fn durable_seq(&self) -> u64 {
        self.durable_seq
    }

    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Offer an envelope: it is passed to `send` now if nothing is held and its barrier is met,
    /// otherwise held. Returns false if the outbox is full (the envelope is dropped).
    pub fn push(&mut self, env: Envelope<M>, mut send: impl FnMut(Envelope<M>)) -> bool {
        if self.held.is_empty() && env.after_durable <= self.durable_seq {
            send(env);
            return true;
        }
        if self.held.len() >= self.limit {
            return false;
        }
        self.held.push_back(env);
        true
    }

    /// Storage reports every op up to `upto` durable: release what waited for it, in order.
    pub fn durable(&mut self, upto: u64, mut send: impl FnMut(Envelope<M>)) {
        self.durable_seq = self.durable_seq.max(upto);
        while self
            .held
            .front()
            .is_some_and(|e| e.after_durable <= self.durable_seq)
        {
            send(self.held.pop_front().expect("front"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Dest;

    fn env(msg: u32, after_durable: u64) -> Envelope<u32> {
        Envelope {
            to: Dest::All,
            msg,
            after_durable,
        }
    }

    #[test]
    fn holds_back_in_order_until_durable() {
        let mut o = Outbox::new(10);
        let mut sent = Vec::new();
        o.push(env(1, 0), |e| sent.push(e.msg));
        o.push(env(2, 3), |e| sent.push(e.msg));
        o.push(env(3, 0), |e| sent.push(e.msg)); // behind 2: held although it needs nothing
        o.push(env(4, 5), |e| sent.push(e.msg));
        assert_eq!(sent, vec![1]);
        o.durable(2, |e| sent.push(e.msg));
        assert_eq!(sent, vec![1]);
        o.durable(3, |e| sent.push(e.msg));
        assert_eq!(sent, vec![1, 2, 3]);
        o.durable(9, |e| sent.push(e.msg));
        assert_eq!(sent, vec![1, 2, 3, 4]);
        o.push(env(5, 9), |e| sent.push(e.msg));
        assert_eq!(sent, vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn bounded() {
        let mut o = Outbox::new(1);
        assert!(o.push(env(1, 1), |_| {}));
        assert!(!o.push(env(2, 1), |_| {}));
        o.reset();
        assert_eq!(o.held(), 0);
        assert_eq!(o.durable_seq(), 0);
    }
}
