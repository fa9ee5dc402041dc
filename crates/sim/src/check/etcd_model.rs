//! An etcd model, written apart from crates/etcd so that a bug there is not also the checker's:
//! every key's full history (never compacted away), one revision raised by exactly one per
//! request that changes something, and every change as an event in order. It covers the
//! requests the simulator's etcd clients send (Put, a one-compare Txn of Puts and Gets,
//! DeleteRange, lease grant and revoke, Compact, barriers) and answers what each must reply:
//! its revision, and what it found or changed.

use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use synod_etcd::etcdserverpb::{compare::TargetUnion, request_op::Request as Op};
use synod_etcd::synod::etcd::v1::command::Request as C;

/// A version of a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kv {
    pub value: Bytes,
    pub create: i64,
    pub modified: i64,
    pub version: i64,
    pub lease: i64,
}

/// What a request must answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The revision in the reply's header; for a Txn whether it succeeded, for a
    /// DeleteRange how many keys it deleted.
    Ok {
        revision: i64,
        succeeded: Option<bool>,
        deleted: Option<i64>,
    },
    /// etcd's error message.
    Fails(&'static str),
}

/// One change: the key and its new version (`None`: deleted).
pub type Change = (Bytes, Option<Kv>);

#[derive(Default)]
pub struct Model {
    revision: i64,
    compacted: i64,
    history: BTreeMap<Bytes, Vec<(i64, Option<Kv>)>>,
    leases: BTreeSet<i64>,
    /// Every change, in order, by revision.
    events: BTreeMap<i64, Vec<Change>>,
}

fn ok(revision: i64) -> Expect {
    Expect::Ok {
        revision,
        succeeded: None,
        deleted: None,
    }
}

impl Model {
    pub fn new() -> Self {
        Model {
            revision: 1,
            ..Model::default()
        }
    }

    pub fn revision(&self) -> i64 {
        self.revision
    }

    pub fn compacted(&self) -> i64 {
        self.compacted
    }

    fn latest(&self, key: &[u8]) -> Option<&Kv> {
        self.history.get(key)?.last()?.1.as_ref()
    }

    /// Every live key of `[from, to)` (`to` empty: the key alone) at revision `rev`.
    pub fn range_at(&self, from: &[u8], to: &[u8], rev: i64) -> Vec<(Bytes, Kv)> {
        self.history
            .iter()
            .filter(|(k, _)| {
                if to.is_empty() {
                    k.as_ref() == from
                } else {
                    k.as_ref() >= from && k.as_ref() < to
                }
            })
            .filter_map(|(k, h)| {
                let i = h.partition_point(|(r, _)| *r <= rev);
                let kv = h.get(i.checked_sub(1)?)?.1.clone()?;
                Some((k.clone(), kv))
            })
            .collect()
    }

    /// The changes at revision `rev` to keys in `[from, to)`, in the order they were made.
    pub fn events_at(&self, rev: i64, from: &[u8], to: &[u8]) -> Vec<Change> {
        self.events
            .get(&rev)
            .map(|evs| {
                evs.iter()
                    .filter(|(k, _)| k.as_ref() >= from && k.as_ref() < to)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Revisions in `[from, to]` with a change to a key of `[lo, hi)`.
    pub fn revisions_with_events(&self, from: i64, to: i64, lo: &[u8], hi: &[u8]) -> Vec<i64> {
        if from > to {
            return Vec::new();
        }
        self.events
            .range(from..=to)
            .filter(|(_, evs)| evs.iter().any(|(k, _)| k.as_ref() >= lo && k.as_ref() < hi))
            .map(|(r, _)| *r)
            .collect()
    }

    fn write(&mut self, changes: Vec<Change>) -> i64 {
        if changes.is_empty() {
            return self.revision;
        }
        self.revision += 1;
        let rev = self.revision;
        for (k, kv) in &changes {
            self.history
                .entry(k.clone())
                .or_default()
                .push((rev, kv.clone()));
        }
        self.events.insert(rev, changes);
        rev
    }

    /// A put within a request at the next revision, given the changes made before it.
    fn put(&self, key: &Bytes, value: &Bytes, lease: i64, before: &[Change]) -> Change {
        let prev = before
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, kv)| kv.clone())
            .unwrap_or_else(|| self.latest(key).cloned());
        let next = self.revision + 1;
        let (create, version) = match prev {
            Some(p) => (p.create, p.version + 1),
            None => (next, 1),
        };
        (
            key.clone(),
            Some(Kv {
                value: value.clone(),
                create,
                modified: next,
                version,
                lease,
            }),
        )
    }

    /// Apply one request; what it must answer.
    pub fn apply(&mut self, cmd: &C) -> Expect {
        match cmd {
            C::Put(p) => {
                if p.lease != 0 && !self.leases.contains(&p.lease) {
                    return Expect::Fails("etcdserver: requested lease not found");
                }
                let change = self.put(&p.key, &p.value, p.lease, &[]);
                ok(self.write(vec![change]))
            }
            C::DeleteRange(d) => {
                let gone: Vec<Change> = self
                    .range_at(&d.key, &d.range_end, self.revision)
                    .into_iter()
                    .map(|(k, _)| (k, None))
                    .collect();
                let n = gone.len() as i64;
                Expect::Ok {
                    revision: self.write(gone),
                    succeeded: None,
                    deleted: Some(n),
                }
            }
            C::Txn(t) => {
                // The clients' Txn: every compare is mod_revision(key) == value.
                let holds = t.compare.iter().all(|c| {
                    let want = match c.target_union {
                        Some(TargetUnion::ModRevision(m)) => m,
                        _ => 0,
                    };
                    self.latest(&c.key).map_or(0, |kv| kv.modified) == want
                });
                let ops = if holds { &t.success } else { &t.failure };
                let mut changes: Vec<Change> = Vec::new();
                for op in ops {
                    if let Some(Op::RequestPut(p)) = &op.request {
                        let change = self.put(&p.key, &p.value, p.lease, &changes);
                        changes.push(change);
                    }
                }
                Expect::Ok {
                    revision: self.write(changes),
                    succeeded: Some(holds),
                    deleted: None,
                }
            }
            C::Compaction(c) => {
                if c.revision <= self.compacted {
                    return Expect::Fails("etcdserver: mvcc: required revision has been compacted");
                }
                if c.revision > self.revision {
                    return Expect::Fails(
                        "etcdserver: mvcc: required revision is a future revision",
                    );
                }
                self.compacted = c.revision;
                ok(self.revision)
            }
            C::LeaseGrant(g) => {
                if !self.leases.insert(g.id) {
                    return Expect::Fails("etcdserver: lease already exists");
                }
                ok(self.revision)
            }
            C::LeaseRevoke(r) => {
                if !self.leases.remove(&r.id) {
                    return Expect::Fails("etcdserver: requested lease not found");
                }
                let gone: Vec<Change> = self
                    .history
                    .iter()
                    .filter(|(_, h)| {
                        h.last()
                            .and_then(|(_, kv)| kv.as_ref())
                            .is_some_and(|kv| kv.lease == r.id)
                    })
                    .map(|(k, _)| (k.clone(), None))
                    .collect();
                ok(self.write(gone))
            }
            C::LeaseRenew(_) | C::Barrier(_) => ok(self.revision),
        }
    }
}
