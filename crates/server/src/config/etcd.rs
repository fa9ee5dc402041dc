//! The `[etcd]` section: etcd's v3 API (docs/etcd.md), served from one group that holds the
//! etcd store, on every node, with a gRPC listener per node.

use anyhow::{bail, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use synod_core::NodeId;

/// `[etcd]`: etcd's v3 API, served from one group holding the etcd store.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EtcdConfig {
    /// Run the etcd store (every node of the cluster must agree).
    pub enabled: bool,
    /// The store's group id (apart from `[[groups]]` ids and the KV buckets').
    pub group: u32,
    /// Its replication protocol (default: the top-level `protocol`).
    pub protocol: Option<String>,
    /// Where this node serves etcd's gRPC API, `ip:port` (unset: it serves no etcd clients, but still
    /// holds a replica of the store).
    pub listen: Option<SocketAddr>,
    /// Every node's etcd client URL, for MemberList (`{ "1" = "https://127.0.0.1:2379", … }`).
    pub addrs: BTreeMap<String, String>,
    /// How long a request waits for the log before answering etcd's "request timed out", in
    /// milliseconds.
    pub request_timeout_ms: u64,
    /// Most requests served at once by this node's etcd listener, a count (more get etcd's
    /// "too many requests").
    pub max_inflight: usize,
    /// Most watches on one watch stream, a count.
    pub max_watches_per_stream: usize,
    /// Most watch streams open at this node, a count.
    pub max_streams: usize,
}

impl Default for EtcdConfig {
    fn default() -> Self {
        EtcdConfig {
            enabled: false,
            group: 900,
            protocol: None,
            listen: None,
            addrs: BTreeMap::new(),
            request_timeout_ms: 7_000,
            max_inflight: 10_000,
            max_watches_per_stream: 10_000,
            max_streams: 10_000,
        }
    }
}

impl EtcdConfig {
    /// Node id → client URL.
    pub fn addresses(&self) -> BTreeMap<NodeId, String> {
        self.addrs
            .iter()
            .filter_map(|(k, v)| Some((k.parse().ok()?, v.clone())))
            .collect()
    }

    pub fn validate(
        &self,
        nodes: &BTreeSet<NodeId>,
        group_ids: &BTreeSet<u32>,
        kv_groups: std::ops::Range<u64>,
    ) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        if self.group == 0 {
            bail!("config key etcd.group: 0 is the ZooKeeper group");
        }
        if group_ids.contains(&self.group) || kv_groups.contains(&(self.group as u64)) {
            bail!(
                "config key etcd.group: group {} is already a [[groups]] entry or a KV bucket",
                self.group
            );
        }
        if let Some(p) = &self.protocol {
            if synod_registry::facts(p).is_none() {
                bail!("config key etcd.protocol: '{p}' is not a protocol of this server");
            }
        }
        for k in self.addrs.keys() {
            match k.parse::<NodeId>() {
                Ok(id) if nodes.contains(&id) => {}
                _ => bail!("config key etcd.addrs.{k}: not one of the peers"),
            }
        }
        if self.request_timeout_ms == 0
            || self.max_inflight == 0
            || self.max_watches_per_stream == 0
            || self.max_streams == 0
        {
            bail!("config keys etcd.request_timeout_ms / max_inflight / max_watches_per_stream / max_streams: must be positive");
        }
        Ok(())
    }
}
