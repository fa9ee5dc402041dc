//! A routing view: the server's [`proto::View`] with the lookups the client needs, key → bucket
//! (`synod_kv::route::bucket_of`, FNV-1a then jump consistent hash) and bucket → master address.

use crate::error::{Error, Result};
use crate::proto;
use std::collections::HashMap;

/// One version of the cluster's routing, as `GetView` returned it.
#[derive(Clone, Debug)]
pub struct Routing {
    view: proto::View,
    /// Node id → `host:port` of its KV listener.
    addresses: HashMap<u32, String>,
}

impl Routing {
    /// Checks that `view` can route: at least one bucket, and the buckets numbered `0..n`
    /// (they are sorted by index here).
    pub fn new(mut view: proto::View) -> Result<Routing> {
        if view.buckets.is_empty() {
            return Err(Error::Unavailable(format!(
                "view {} has no buckets yet",
                view.version
            )));
        }
        view.buckets.sort_by_key(|b| b.index);
        if let Some((i, b)) = view
            .buckets
            .iter()
            .enumerate()
            .find(|(i, b)| b.index as usize != *i)
        {
            return Err(Error::Unavailable(format!(
                "view {} numbers bucket {i} as {}",
                view.version, b.index
            )));
        }
        let addresses = view
            .nodes
            .iter()
            .map(|n| (n.id, n.address.clone()))
            .collect();
        Ok(Routing { view, addresses })
    }

    /// What to keep after learning `view` (from a refusal or `GetView`), `None` if it teaches
    /// nothing. A newer version replaces this one. The same version may still know fresher
    /// masters: a bucket's master can change without a new view version (the server's views
    /// describe membership, and each node fills in the masters it knows, 0 for buckets it does
    /// not hold), so its non-zero masters are taken bucket by bucket. An older view is ignored.
    pub fn merge(&self, view: proto::View) -> Option<Routing> {
        if view.version > self.version() {
            return Routing::new(view).ok();
        }
        if view.version < self.version() {
            return None;
        }
        let mut merged = self.clone();
        let mut changed = false;
        for b in view.buckets {
            if let Some(mine) = merged.view.buckets.get_mut(b.index as usize) {
                if b.master != 0
                    && b.master != mine.master
                    && self.addresses.contains_key(&b.master)
                {
                    mine.master = b.master;
                    changed = true;
                }
            }
        }
        changed.then_some(merged)
    }

    /// The view's version; every request carries it.
    pub fn version(&self) -> u64 {
        self.view.version
    }

    /// The number of buckets.
    pub fn buckets(&self) -> u32 {
        self.view.buckets.len() as u32
    }

    /// The bucket index of `key`.
    pub fn bucket_of(&self, key: &[u8]) -> u32 {
        synod_kv::route::bucket_of(key, self.buckets())
    }

    /// The address of `bucket`'s master, `None` if it has none (or the view does not list it).
    pub fn master_address(&self, bucket: u32) -> Option<&str> {
        let b = self.view.buckets.get(bucket as usize)?;
        if b.master == 0 {
            return None;
        }
        self.addresses.get(&b.master).map(String::as_str)
    }

    /// The addresses of `bucket`'s replicas (its master included).
    pub fn replica_addresses(&self, bucket: u32) -> Vec<&str> {
        self.view
            .buckets
            .get(bucket as usize)
            .map(|b| {
                b.members
                    .iter()
                    .filter_map(|m| self.addresses.get(m).map(String::as_str))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every node's address, in the view's order.
    pub fn node_addresses(&self) -> Vec<&str> {
        self.view.nodes.iter().map(|n| n.address.as_str()).collect()
    }

    /// The view itself.
    pub fn view(&self) -> &proto::View {
        &self.view
    }
}
