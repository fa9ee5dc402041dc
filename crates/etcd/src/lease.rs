//! Leases as the log knows them: each lease's TTL and the keys attached to it. When a lease
//! expires is not replicated state: the node that leads the group keeps a clock per lease and
//! asks the log to revoke the expired ones (crates/server/src/etcd/lessor.rs), as etcd's
//! leader does.

use bytes::Bytes;
use imbl::{OrdMap, OrdSet};

/// etcd's smallest TTL, in seconds: 1.5 election timeouts of its defaults (1 s), rounded up.
pub const MIN_TTL_S: i64 = 2;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lease {
    /// Granted TTL in seconds.
    pub ttl: i64,
    pub keys: OrdSet<Bytes>,
}

#[derive(Clone, Debug, Default)]
pub struct Leases {
    map: OrdMap<i64, Lease>,
}

impl Leases {
    pub fn get(&self, id: i64) -> Option<&Lease> {
        self.map.get(&id)
    }

    pub fn contains(&self, id: i64) -> bool {
        self.map.contains_key(&id)
    }

    pub fn insert(&mut self, id: i64, ttl: i64) {
        self.map.insert(
            id,
            Lease {
                ttl,
                keys: OrdSet::new(),
            },
        );
    }

    pub fn remove(&mut self, id: i64) -> Option<Lease> {
        self.map.remove(&id)
    }

    pub fn attach(&mut self, id: i64, key: &Bytes) {
        if let Some(l) = self.map.get_mut(&id) {
            l.keys.insert(key.clone());
        }
    }

    pub fn detach(&mut self, id: i64, key: &Bytes) {
        if let Some(l) = self.map.get_mut(&id) {
            l.keys.remove(key);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (i64, &Lease)> {
        self.map.iter().map(|(id, l)| (*id, l))
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
