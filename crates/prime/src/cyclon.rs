//! CYCLON's peer sampling (Voulgaris, Gavidia and van Steen, 2005; sconekv.md §2.2): each node
//! keeps a cache of at most `capacity` neighbours, each with an **age** (cycles since the entry
//! was made). Every cycle a node
//!
//! 1. ages every entry ([`Cyclon::start_shuffle`]),
//! 2. picks the **oldest** neighbour Q and `shuffle_len - 1` other random ones,
//! 3. removes Q's entry and sends Q the others with a fresh entry for itself (age 0),
//! 4. Q answers with up to `shuffle_len` random entries of its own ([`Cyclon::on_shuffle`]),
//! 5. both keep what they received: entries for themselves or already known are discarded,
//!    empty slots are filled first, then the entries just sent away are replaced
//!    ([`Cyclon::merge`]).
//!
//! A live node keeps re-inserting fresh references to itself; a failed one stops, so its entries
//! grow old, are picked as the oldest and are dropped when it does not answer. SconeKV uses the
//! cache only to pick EpTO's gossip targets ([`Cyclon::sample`]).

use synod_core::rng::CoreRng;
use synod_core::NodeId;

/// A cache entry: a neighbour and the number of cycles since this reference was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub peer: NodeId,
    pub age: u32,
}

#[derive(Clone, Debug)]
pub struct Cyclon {
    me: NodeId,
    capacity: usize,
    shuffle_len: usize,
    cache: Vec<Entry>,
    /// The entries sent in the shuffle in flight: the slots a reply may take over.
    sent: Vec<NodeId>,
}

impl Cyclon {
    pub fn new(me: NodeId, capacity: usize, shuffle_len: usize) -> Self {
        assert!(capacity >= 1 && shuffle_len >= 1 && shuffle_len <= capacity);
        Cyclon {
            me,
            capacity,
            shuffle_len,
            cache: Vec::with_capacity(capacity),
            sent: Vec::new(),
        }
    }

    /// Bootstrap: fill free slots with these peers (the tracker's list, a view copy), age 0.
    pub fn seed(&mut self, peers: &[NodeId], rng: &mut CoreRng) {
        let mut candidates: Vec<NodeId> = peers
            .iter()
            .copied()
            .filter(|&p| p != self.me && !self.contains(p))
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        while self.cache.len() < self.capacity && !candidates.is_empty() {
            let i = rng.below(candidates.len() as u64) as usize;
            let peer = candidates.swap_remove(i);
            self.cache.push(Entry { peer, age: 0 });
        }
    }

    pub fn contains(&self, peer: NodeId) -> bool {
        self.cache.iter().any(|e| e.peer == peer)
    }

    pub fn len(&self) -> usize {
        self.cache.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    pub fn neighbours(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.cache.iter().map(|e| e.peer)
    }

    /// Forget a peer (it left the view, or was removed).
    pub fn remove(&mut self, peer: NodeId) {
        self.cache.retain(|e| e.peer != peer);
    }

    /// Steps 1–3 of a cycle: the peer to shuffle with and the entries to send it (its own
    /// entry removed, a fresh one for this node added). `None` with an empty cache.
    pub fn start_shuffle(&mut self, rng: &mut CoreRng) -> Option<(NodeId, Vec<Entry>)> {
        for e in &mut self.cache {
            e.age = e.age.saturating_add(1);
        }
        let oldest =
            (0..self.cache.len()).max_by_key(|&i| (self.cache[i].age, self.cache[i].peer))?;
        let q = self.cache.swap_remove(oldest).peer;
        let mut send = self.pick(self.shuffle_len - 1, rng);
        self.sent = send.iter().map(|e| e.peer).collect();
        send.push(Entry {
            peer: self.me,
            age: 0,
        });
        Some((q, send))
    }

    /// Step 4 at Q: answer a shuffle from `from` with up to `shuffle_len` random entries, then
    /// keep the received ones (step 5).
    pub fn on_shuffle(&mut self, received: &[Entry], rng: &mut CoreRng) -> Vec<Entry> {
        let reply = self.pick(self.shuffle_len, rng);
        let sent: Vec<NodeId> = reply.iter().map(|e| e.peer).collect();
        self.merge(received, &sent);
        reply
    }

    /// Step 5 at P: keep the entries of Q's answer.
    pub fn on_shuffle_reply(&mut self, received: &[Entry]) {
        let sent = std::mem::take(&mut self.sent);
        self.merge(received, &sent);
    }

    /// Keep `received`: drop entries for this node or already cached, fill empty slots first,
    /// then take over the slots of the entries in `sent`.
    fn merge(&mut self, received: &[Entry], sent: &[NodeId]) {
        let mut replaceable: Vec<NodeId> = sent.to_vec();
        for e in received {
            if e.peer == self.me || self.contains(e.peer) {
                continue;
            }
            if self.cache.len() < self.capacity {
                self.cache.push(*e);
                continue;
            }
            while let Some(old) = replaceable.pop() {
                if let Some(slot) = self.cache.iter_mut().find(|c| c.peer == old) {
                    *slot = *e;
                    break;
                }
            }
        }
    }

    /// `k` distinct random entries of the cache (fewer when it holds fewer).
    fn pick(&self, k: usize, rng: &mut CoreRng) -> Vec<Entry> {
        let mut all = self.cache.clone();
        let mut out = Vec::with_capacity(k.min(all.len()));
        while out.len() < k && !all.is_empty() {
            let i = rng.below(all.len() as u64) as usize;
            out.push(all.swap_remove(i));
        }
        out
    }

    /// Up to `k` distinct random neighbours: EpTO's gossip targets.
    pub fn sample(&self, k: usize, rng: &mut CoreRng) -> Vec<NodeId> {
        self.pick(k, rng).into_iter().map(|e| e.peer).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    #[test]
    fn a_shuffle_removes_the_oldest_and_sends_a_fresh_self_entry() {
        let mut rng = CoreRng::new(1);
        let mut c = Cyclon::new(1, 4, 3);
        c.seed(&[2, 3, 4], &mut rng);
        c.cache.iter_mut().find(|e| e.peer == 3).unwrap().age = 9;
        let (q, sent) = c.start_shuffle(&mut rng).unwrap();
        assert_eq!(q, 3, "the oldest neighbour is the one shuffled with");
        assert!(
            !c.contains(3),
            "its entry leaves the cache (fresh ones come back through later shuffles)"
        );
        assert_eq!(sent.len(), 3);
        assert_eq!(*sent.last().unwrap(), Entry { peer: 1, age: 0 });
        assert!(sent.iter().all(|e| e.peer != 3));
    }

    #[test]
    fn merging_skips_self_and_known_entries_and_replaces_only_what_was_sent() {
        let mut rng = CoreRng::new(2);
        let mut c = Cyclon::new(1, 3, 2);
        c.seed(&[2, 3, 4], &mut rng);
        let (q, _sent) = c.start_shuffle(&mut rng).unwrap();
        let sent_away = c.sent.clone();
        let reply = [
            Entry { peer: 1, age: 0 },
            Entry { peer: 9, age: 0 },
            Entry { peer: 8, age: 0 },
        ];
        let before: BTreeSet<NodeId> = c.neighbours().collect();
        c.on_shuffle_reply(&reply);
        let after: BTreeSet<NodeId> = c.neighbours().collect();
        assert!(!after.contains(&1), "never a reference to oneself");
        assert!(c.len() <= 3);
        for gone in before.difference(&after) {
            assert!(
                sent_away.contains(gone),
                "only slots sent away are replaced"
            );
        }
        assert!(!after.contains(&q) || reply.iter().any(|e| e.peer == q));
    }

    /// A failed node's references disappear: nobody receives a fresh entry for it, each cache
    /// that holds it eventually picks it as the oldest and drops it.
    #[test]
    fn a_failed_node_leaves_every_cache() {
        let n = 60u32;
        let mut rng = CoreRng::new(3);
        let mut caches: BTreeMap<NodeId, Cyclon> = (1..=n)
            .map(|i| {
                let mut c = Cyclon::new(i, 8, 4);
                let peers: Vec<NodeId> = (1..=n).filter(|&p| p != i).collect();
                c.seed(&peers, &mut rng);
                (i, c)
            })
            .collect();
        let dead = 7;
        for _cycle in 0..40 {
            for i in 1..=n {
                if i == dead {
                    continue;
                }
                let Some((q, sent)) = caches.get_mut(&i).unwrap().start_shuffle(&mut rng) else {
                    continue;
                };
                if q == dead {
                    continue; // no answer: the entry stays dropped
                }
                let reply = caches.get_mut(&q).unwrap().on_shuffle(&sent, &mut rng);
                caches.get_mut(&i).unwrap().on_shuffle_reply(&reply);
            }
        }
        let holders = caches
            .iter()
            .filter(|(&i, c)| i != dead && c.contains(dead))
            .count();
        assert_eq!(holders, 0, "a failed node's entries age out of every cache");
        // ... while the live ones stay connected: every live node is in someone's cache.
        for i in (1..=n).filter(|&i| i != dead) {
            assert!(
                caches.values().any(|c| c.contains(i)),
                "node {i} is still known"
            );
        }
    }
}
