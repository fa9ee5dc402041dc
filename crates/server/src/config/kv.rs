//! The `[kv]` section: SconeKV's buckets on this cluster, and this node's KV gRPC listener.

use anyhow::{bail, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use synod_core::NodeId;

/// `[kv]`: SconeKV's buckets and this node's KV gRPC listener.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct KvConfig {
    /// Buckets of the store, a count (at most 4096); 0 runs no store. Every node of the cluster must agree.
    pub buckets: u32,
    /// Replicas of each bucket, a count (at most the number of nodes). Buckets are placed on the nodes
    /// by `synod_kv::route::place`, which every node computes alike.
    pub replicas: usize,
    /// Bucket `b` is the group `group_base + b` (apart from `[[groups]]` ids).
    pub group_base: u32,
    /// Replication protocol of the buckets (default: the top-level `protocol`): zab, a Zab
    /// variant, or paxos. Mencius names no master, which buckets need.
    pub protocol: Option<String>,
    /// Where this node serves the KV gRPC API, `ip:port` (unset: it serves no clients, but still holds
    /// its buckets' replicas).
    pub listen: Option<SocketAddr>,
    /// Every node's KV gRPC address, for the routing view clients receive:
    /// `{ "1" = "127.0.0.1:2479", … }`.
    pub addrs: BTreeMap<String, String>,
    /// How long a commit waits for its decision before answering UNAVAILABLE (the client
    /// retries: commits are idempotent), in milliseconds.
    pub commit_timeout_ms: u64,
    /// How long a bucket keeps a decision for a retried commit; a commit begun longer ago is
    /// refused rather than risk deciding it twice. In milliseconds, at least ten
    /// `commit_timeout_ms`.
    pub retain_ms: u64,
    /// Most requests served at once by this node's KV listener, a count (more get BUSY).
    pub max_inflight: usize,
}

impl Default for KvConfig {
    fn default() -> Self {
        KvConfig {
            buckets: 0,
            replicas: 3,
            group_base: 1000,
            protocol: None,
            listen: None,
            addrs: BTreeMap::new(),
            commit_timeout_ms: 10_000,
            retain_ms: 600_000,
            max_inflight: 10_000,
        }
    }
}

impl KvConfig {
    pub fn enabled(&self) -> bool {
        self.buckets > 0
    }

    /// The placement of the buckets on `nodes`.
    pub fn placement(&self, nodes: &BTreeSet<NodeId>) -> synod_kv::route::Placement {
        synod_kv::route::place(&Vec::new(), self.buckets as usize, self.replicas, nodes)
    }

    /// Node id → KV address.
    pub fn addresses(&self) -> BTreeMap<NodeId, String> {
        self.addrs
            .iter()
            .filter_map(|(k, v)| Some((k.parse().ok()?, v.clone())))
            .collect()
    }

    pub fn validate(&self, nodes: &BTreeSet<NodeId>, group_ids: &BTreeSet<u32>) -> Result<()> {
        if !self.enabled() {
            return Ok(());
        }
        if self.buckets > 4096 {
            bail!("config key kv.buckets: at most 4096");
        }
        if self.replicas == 0 {
            bail!("config key kv.replicas: at least 1");
        }
        if self.group_base == 0 {
            bail!("config key kv.group_base: 0 is the ZooKeeper group");
        }
        let last = self.group_base as u64 + self.buckets as u64 - 1;
        if last > u32::MAX as u64 {
            bail!("config key kv.group_base: the bucket groups' ids overflow");
        }
        if let Some(g) = group_ids
            .iter()
            .find(|g| (self.group_base as u64..=last).contains(&(**g as u64)))
        {
            bail!(
                "config key kv.group_base: bucket groups {}..={last} include [[groups]] id {g}",
                self.group_base
            );
        }
        if let Some(p) = &self.protocol {
            if synod_registry::facts(p).is_some_and(|f| !f.single_leader) {
                bail!("config key kv.protocol: '{p}' names no master; buckets run zab, a Zab variant or paxos");
            }
        }
        for (k, a) in &self.addrs {
            match k.parse::<NodeId>() {
                Ok(id) if nodes.contains(&id) => {}
                _ => bail!("config key kv.addrs.{k}: not one of the peers"),
            }
            if a.is_empty() {
                bail!("config key kv.addrs.{k}: empty address");
            }
        }
        if self.commit_timeout_ms == 0 || self.retain_ms == 0 || self.max_inflight == 0 {
            bail!("config key kv.commit_timeout_ms / retain_ms / max_inflight: must be positive");
        }
        if self.retain_ms < 10 * self.commit_timeout_ms {
            bail!("config key kv.retain_ms: keep decisions at least ten commit timeouts, so a retrying client is answered");
        }
        Ok(())
    }
}
