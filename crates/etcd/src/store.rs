//! The multi-version store: etcd's mvcc, as one deterministic structure.
//!
//! The store has one revision, 1 when empty, raised by exactly one by every request that
//! changes something; the changes of one request share it and are told apart by a sub-revision.
//! Every key keeps its history: versions (value, create revision, version, lease) and
//! deletions, in revision order. A range at revision `r` sees, for each key, its last change at
//! or below `r`. Compaction at `c` forgets what no read at `c` or above can see. A second index
//! by revision gives a watcher every change since a revision in order.
//!
//! Both maps are persistent (imbl), so a snapshot is a clone, taken in O(1) under the lock.

use crate::errors::{self, Failure};
use crate::mvccpb::{event::EventType, Event, KeyValue};
use bytes::Bytes;
use imbl::OrdMap;
use std::ops::Bound;
use std::sync::Arc;

/// A version of a key, written at some revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub value: Bytes,
    /// The revision of the change that created the key (this generation).
    pub create: i64,
    /// 1 at creation, +1 on every change; a deletion ends the generation.
    pub version: i64,
    pub lease: i64,
}

/// One change of a key: a version, or a deletion (`kv` is `None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub main: i64,
    pub sub: i64,
    pub kv: Option<Version>,
}

type History = Arc<Vec<Entry>>;

/// Which keys a request names: etcd's key and range_end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Span {
    /// `range_end` empty: one key.
    Key(Bytes),
    /// `range_end` "\0": every key at or after `key`.
    From(Bytes),
    /// `[key, range_end)`.
    Range(Bytes, Bytes),
}

impl Span {
    pub fn new(key: &Bytes, range_end: &Bytes) -> Span {
        if range_end.is_empty() {
            Span::Key(key.clone())
        } else if range_end.as_ref() == [0] {
            Span::From(key.clone())
        } else {
            Span::Range(key.clone(), range_end.clone())
        }
    }

    pub fn contains(&self, k: &[u8]) -> bool {
        match self {
            Span::Key(key) => k == key.as_ref(),
            Span::From(key) => k >= key.as_ref(),
            Span::Range(a, b) => k >= a.as_ref() && k < b.as_ref(),
        }
    }

    fn bounds(&self) -> (Bound<Bytes>, Bound<Bytes>) {
        match self {
            Span::Key(k) => (Bound::Included(k.clone()), Bound::Included(k.clone())),
            Span::From(k) => (Bound::Included(k.clone()), Bound::Unbounded),
            Span::Range(a, b) if a < b => (Bound::Included(a.clone()), Bound::Excluded(b.clone())),
            // An empty range (etcd: end at or before key): nothing.
            Span::Range(a, _) => (Bound::Included(a.clone()), Bound::Excluded(a.clone())),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Store {
    keys: OrdMap<Bytes, History>,
    /// Every entry of `keys`, by (main, sub) revision.
    by_rev: OrdMap<(i64, i64), Bytes>,
    revision: i64,
    compacted: i64,
    /// A planted bug (the simulator proves its revision checker with it): every `n`th change
    /// skips a revision. 0: none.
    gap_every: u64,
    /// Changes since the last planted gap.
    changes: u64,
}

impl Default for Store {
    fn default() -> Self {
        Store::new()
    }
}

fn kv_of(key: &Bytes, e: &Entry) -> Option<KeyValue> {
    e.kv.as_ref().map(|v| KeyValue {
        key: key.clone(),
        create_revision: v.create,
        mod_revision: e.main,
        version: v.version,
        value: v.value.clone(),
        lease: v.lease,
    })
}

/// The key's last change at or below `rev`.
fn at(history: &[Entry], rev: i64) -> Option<&Entry> {
    let i = history.partition_point(|e| e.main <= rev);
    i.checked_sub(1).map(|i| &history[i])
}

impl Store {
    pub fn new() -> Store {
        Store {
            keys: OrdMap::new(),
            by_rev: OrdMap::new(),
            revision: 1,
            compacted: 0,
            gap_every: 0,
            changes: 0,
        }
    }

    /// Plant the revision-gap bug: every `n`th change raises the revision by two.
    pub fn plant_gap(&mut self, every: u64) {
        self.gap_every = every;
    }

    /// The current revision.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The compaction point: reads below it fail.
    pub fn compacted(&self) -> i64 {
        self.compacted
    }

    /// The revision a read asks for (`rev` ≤ 0: the current one), if it can be served.
    pub fn read_revision(&self, rev: i64) -> Result<i64, Failure> {
        if rev > self.revision {
            return Err(errors::FUTURE_REV);
        }
        let rev = if rev <= 0 { self.revision } else { rev };
        if rev < self.compacted {
            return Err(errors::COMPACTED);
        }
        Ok(rev)
    }

    /// The live keys of `span` at `rev` (already checked), in key order.
    pub fn range(&self, span: &Span, rev: i64) -> impl Iterator<Item = KeyValue> + '_ {
        self.keys
            .range(span.bounds())
            .filter_map(move |(k, h)| at(h, rev).and_then(|e| kv_of(k, e)))
    }

    /// The key's latest version.
    pub fn get(&self, key: &[u8]) -> Option<KeyValue> {
        let (k, h) = self.keys.get_key_value(key)?;
        h.last().and_then(|e| kv_of(k, e))
    }

    /// Record one change at revision (`main`, `sub`). `main` is the revision the current
    /// request will end at ([`Store::finish`]).
    pub fn record(&mut self, key: &Bytes, main: i64, sub: i64, kv: Option<Version>) {
        assert!(
            main == self.revision + 1,
            "a change is at the next revision"
        );
        let h = self.keys.entry(key.clone()).or_default();
        let h = Arc::make_mut(h);
        assert!(
            h.last().is_none_or(|e| (e.main, e.sub) < (main, sub)),
            "a key's changes are in revision order"
        );
        h.push(Entry { main, sub, kv });
        self.by_rev.insert((main, sub), key.clone());
    }

    /// End a request: if it changed anything, the store is at its revision.
    pub fn finish(&mut self, changed: bool) {
        if changed {
            self.revision += 1;
            self.changes += 1;
            if self.gap_every > 0 && self.changes >= self.gap_every {
                self.changes = 0;
                self.revision += 1;
            }
        }
    }

    /// Forget what no read at `rev` or later can see.
    pub fn compact(&mut self, rev: i64) -> Result<(), Failure> {
        if rev <= self.compacted {
            return Err(errors::COMPACTED);
        }
        if rev > self.revision {
            return Err(errors::FUTURE_REV);
        }
        let old: Vec<(i64, i64)> = self
            .by_rev
            .range(..=(rev, i64::MAX))
            .map(|(r, _)| *r)
            .collect();
        let mut touched: Vec<Bytes> = Vec::new();
        for r in old {
            let key = self.by_rev.get(&r).expect("indexed").clone();
            if touched.last() != Some(&key) {
                touched.push(key);
            }
        }
        touched.sort();
        touched.dedup();
        for key in touched {
            let h = self.keys.get_mut(&key).expect("indexed key");
            let keep_from = h.partition_point(|e| e.main <= rev);
            // The last change at or below `rev` stays if it is a version (a read at `rev` sees
            // it) or a deletion at `rev` itself: a watch from the compaction point owes it. (etcd
            // drops that deletion too, and a watch from there misses it; the next compaction
            // drops it here.)
            let mut cut = keep_from.saturating_sub(1);
            if h.get(cut).is_some_and(|e| e.main < rev && e.kv.is_none()) {
                cut += 1;
            }
            if cut == 0 {
                continue;
            }
            let hm = Arc::make_mut(h);
            for e in hm.drain(..cut) {
                self.by_rev.remove(&(e.main, e.sub));
            }
            if hm.is_empty() {
                self.keys.remove(&key);
            }
        }
        self.compacted = rev;
        Ok(())
    }

    /// The events from revision `from` (inclusive) through `to`, in revision order, for keys in
    /// `span`; each with the key's previous version when `prev_kv` asks. `from` must not be
    /// below the compaction point (the caller checks).
    pub fn events<'a>(
        &'a self,
        from: i64,
        to: i64,
        span: &'a Span,
        prev_kv: bool,
    ) -> impl Iterator<Item = (i64, Event)> + 'a {
        self.by_rev
            .range((from, 0)..=(to, i64::MAX))
            .filter(move |(_, k)| span.contains(k))
            .map(move |(&(main, sub), key)| {
                let h = self.keys.get(key).expect("indexed key");
                let i = h.partition_point(|e| (e.main, e.sub) < (main, sub));
                let e = &h[i];
                let prev = if prev_kv {
                    i.checked_sub(1).and_then(|p| kv_of(key, &h[p]))
                } else {
                    None
                };
                let (kind, kv) = match kv_of(key, e) {
                    Some(kv) => (EventType::Put, kv),
                    None => (
                        EventType::Delete,
                        KeyValue {
                            key: key.clone(),
                            mod_revision: main,
                            ..KeyValue::default()
                        },
                    ),
                };
                (
                    main,
                    Event {
                        r#type: kind as i32,
                        kv: Some(kv),
                        prev_kv: prev,
                    },
                )
            })
    }

    /// Every key's history, for a snapshot.
    pub fn histories(&self) -> impl Iterator<Item = (&Bytes, &[Entry])> {
        self.keys.iter().map(|(k, h)| (k, h.as_slice()))
    }

    /// A store rebuilt from a snapshot's parts; `None` if they do not make a store (entries out
    /// of order, or beyond the revision).
    pub fn from_parts(
        revision: i64,
        compacted: i64,
        histories: Vec<(Bytes, Vec<Entry>)>,
    ) -> Option<Store> {
        if revision < 1 || compacted < 0 || compacted > revision {
            return None;
        }
        let mut s = Store {
            keys: OrdMap::new(),
            by_rev: OrdMap::new(),
            revision,
            compacted,
            gap_every: 0,
            changes: 0,
        };
        for (k, h) in histories {
            let ordered = h
                .windows(2)
                .all(|w| (w[0].main, w[0].sub) < (w[1].main, w[1].sub));
            if h.is_empty() || !ordered || h.last().is_some_and(|e| e.main > revision) {
                return None;
            }
            for e in &h {
                if s.by_rev.insert((e.main, e.sub), k.clone()).is_some() {
                    return None;
                }
            }
            s.keys.insert(k, Arc::new(h));
        }
        Some(s)
    }

    /// etcd's HashKV: a hash of every change from the compaction point through `rev`, equal on
    /// replicas that applied the same requests.
    pub fn hash_kv(&self, rev: i64) -> u32 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        let mut eat = |bytes: &[u8]| {
            for b in bytes {
                h = (h ^ *b as u64).wrapping_mul(0x100_0000_01b3);
            }
        };
        for ((main, sub), key) in self.by_rev.range(..=(rev, i64::MAX)) {
            eat(&main.to_be_bytes());
            eat(&sub.to_be_bytes());
            eat(key);
            let hist = self.keys.get(key).expect("indexed key");
            let i = hist.partition_point(|e| (e.main, e.sub) < (*main, *sub));
            match &hist[i].kv {
                Some(v) => eat(&v.value),
                None => eat(b"\xff"),
            }
        }
        (h ^ (h >> 32)) as u32
    }

    /// Bytes of keys and values held (every version since the compaction point).
    pub fn size_bytes(&self) -> usize {
        self.keys
            .iter()
            .map(|(k, h)| {
                h.iter()
                    .map(|e| k.len() + 40 + e.kv.as_ref().map_or(0, |v| v.value.len()))
                    .sum::<usize>()
            })
            .sum()
    }

    /// Number of keys with a history (live or not).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}
