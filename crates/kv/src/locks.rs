//! The lock table of a bucket (sconekv.md Algorithm 11, with the read-write locks of §8.7):
//! one lock per key, shared by readers or held by one writer, and a queue of waiting
//! transactions ordered by id (the oldest first), not by arrival.
//!
//! A transaction takes all of its locks at once or none ([`Locks::blockers`] is empty, then
//! [`Locks::acquire`]); otherwise it waits on every one of its keys. A waiter never overtakes an
//! older waiter that wants a conflicting mode on one of its keys: without that, a transaction
//! whose vote was withdrawn in favour of an older one would take its locks back at once and the
//! revert would repeat until the older one got through. Only a waiter that claimed priority (it
//! asked to revert a holder) holds younger ones back: an ordinary waiter does not, or one waiter
//! stuck on a hot key would queue every younger transaction on all its other keys (a convoy).

use crate::txn::{Op, TxnId};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug, Default)]
struct KeyLock {
    writer: Option<TxnId>,
    readers: BTreeSet<TxnId>,
    /// Waiting transactions: whether each wants to write this key, and whether it claimed
    /// priority (asked to revert a holder).
    waiters: BTreeMap<TxnId, (bool, bool)>,
}

impl KeyLock {
    fn is_free(&self) -> bool {
        self.writer.is_none() && self.readers.is_empty() && self.waiters.is_empty()
    }
}

#[derive(Clone, Debug, Default)]
pub struct Locks {
    keys: BTreeMap<Bytes, KeyLock>,
}

/// Why a transaction cannot take its locks now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Blockers {
    /// Transactions holding a conflicting lock.
    pub holders: BTreeSet<TxnId>,
    /// Whether an older transaction waits for a conflicting lock on one of the keys.
    pub older_waiter: bool,
}

impl Blockers {
    pub fn is_empty(&self) -> bool {
        self.holders.is_empty() && !self.older_waiter
    }
}

impl Locks {
    /// What stands between `id` and the locks of `ops`.
    pub fn blockers(&self, id: TxnId, ops: &[Op]) -> Blockers {
        let mut b = Blockers::default();
        for op in ops {
            let Some(k) = self.keys.get(&op.key) else {
                continue;
            };
            let write = op.writes();
            if let Some(w) = k.writer.filter(|w| *w != id) {
                b.holders.insert(w);
            }
            if write {
                b.holders.extend(k.readers.iter().filter(|r| **r != id));
            }
            if k.waiters
                .range(..id)
                .any(|(_, (w, claim))| *claim && (*w || write))
            {
                b.older_waiter = true;
            }
        }
        b
    }

    /// Take every lock of `ops` for `id` (the caller checked [`Locks::blockers`]), leaving the
    /// queues.
    pub fn acquire(&mut self, id: TxnId, ops: &[Op]) {
        for op in ops {
            let k = self.keys.entry(op.key.clone()).or_default();
            k.waiters.remove(&id);
            if op.writes() {
                assert!(
                    k.writer.is_none_or(|w| w == id),
                    "a second writer lock on a key"
                );
                assert!(
                    k.readers.iter().all(|r| *r == id),
                    "a writer lock over readers"
                );
                k.readers.remove(&id);
                k.writer = Some(id);
            } else {
                assert!(
                    k.writer.is_none_or(|w| w == id),
                    "a reader lock over a writer"
                );
                k.readers.insert(id);
            }
        }
    }

    /// Wait on every key of `ops`; `claim`: the transaction asked to revert a holder, so no
    /// younger one may take these keys before it.
    pub fn enqueue(&mut self, id: TxnId, ops: &[Op], claim: bool) {
        for op in ops {
            let w = self
                .keys
                .entry(op.key.clone())
                .or_default()
                .waiters
                .entry(id)
                .or_insert((op.writes(), false));
            w.1 |= claim;
        }
    }

    /// Stop waiting; returns the transactions waiting on those keys (they may now proceed).
    pub fn dequeue(&mut self, id: TxnId, ops: &[Op], wake: &mut BTreeSet<TxnId>) {
        for op in ops {
            if let Some(k) = self.keys.get_mut(&op.key) {
                k.waiters.remove(&id);
                wake.extend(k.waiters.keys().copied());
                if k.is_free() {
                    self.keys.remove(&op.key);
                }
            }
        }
    }

    /// Release `id`'s locks on `ops`; the waiters of those keys go to `wake`.
    pub fn release(&mut self, id: TxnId, ops: &[Op], wake: &mut BTreeSet<TxnId>) {
        for op in ops {
            if let Some(k) = self.keys.get_mut(&op.key) {
                if k.writer == Some(id) {
                    k.writer = None;
                }
                k.readers.remove(&id);
                wake.extend(k.waiters.keys().copied());
                if k.is_free() {
                    self.keys.remove(&op.key);
                }
            }
        }
    }

    /// Keys with a lock or a waiter (for gauges and for the quiescence check).
    pub fn busy_keys(&self) -> usize {
        self.keys.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::OpKind;

    fn id(t: u64) -> TxnId {
        TxnId { time: t, node: 1 }
    }
    fn op(k: &str, kind: OpKind) -> Op {
        Op {
            key: Bytes::copy_from_slice(k.as_bytes()),
            kind,
            version: 0,
            value: Bytes::new(),
            blind: false,
        }
    }

    #[test]
    fn readers_share_and_writers_exclude() {
        let mut l = Locks::default();
        let r = [op("x", OpKind::Read)];
        let w = [op("x", OpKind::Write)];
        assert!(l.blockers(id(1), &r).is_empty());
        l.acquire(id(1), &r);
        assert!(l.blockers(id(2), &r).is_empty(), "readers share");
        l.acquire(id(2), &r);
        assert_eq!(l.blockers(id(3), &w).holders, [id(1), id(2)].into());
        let mut wake = BTreeSet::new();
        l.enqueue(id(3), &w, false);
        l.release(id(1), &r, &mut wake);
        l.release(id(2), &r, &mut wake);
        assert_eq!(wake, [id(3)].into());
        assert!(l.blockers(id(3), &w).is_empty());
        l.acquire(id(3), &w);
        assert_eq!(l.blockers(id(4), &r).holders, [id(3)].into());
    }

    #[test]
    fn a_younger_waiter_does_not_overtake_an_older_one_that_claimed_priority() {
        let mut l = Locks::default();
        let w = [op("x", OpKind::Write)];
        l.enqueue(id(1), &w, false);
        assert!(
            l.blockers(id(2), &w).is_empty(),
            "an ordinary waiter blocks no one"
        );
        l.enqueue(id(1), &w, true);
        let b = l.blockers(id(2), &w);
        assert!(b.holders.is_empty() && b.older_waiter);
        assert!(
            l.blockers(id(1), &w).is_empty(),
            "the oldest waiter itself may go"
        );
        let mut wake = BTreeSet::new();
        l.dequeue(id(1), &w, &mut wake);
        assert!(l.blockers(id(2), &w).is_empty());
        assert_eq!(l.busy_keys(), 0);
    }
}
