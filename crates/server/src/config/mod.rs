//! Server configuration: a TOML file, every key of which can be overridden on the command line
//! (`--set key=value`, dotted keys for sections). Unknown keys and bad values are errors that
//! name the key.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use synod_core::NodeId;

use crate::protocol::check_protocol;
pub use crate::protocol::{MenciusTuning, PaxosBatch, PaxosTuning};

mod etcd;
mod kv;
mod link;
mod members;
mod peer_addr;
mod tls;
mod zookeeper;
pub use etcd::EtcdConfig;
pub use kv::KvConfig;
pub use link::{LinkEmulationConfig, PeerLinkConfig};
pub use peer_addr::PeerAddr;
pub use tls::{ClientAuth, TlsConfig};
pub use zookeeper::{SaslUsers, ZkTuning};

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Name of the cluster; a data directory or a peer of another cluster is refused.
    pub cluster_id: String,
    /// This replica's id (a key of `peers`).
    pub node_id: NodeId,
    /// Replication protocol of the ZooKeeper group (group 0), and the default of `[[groups]]`:
    /// `zab`, a Zab variant, PFT Multi-Paxos (`paxos`, `paxos-mbq`, `paxos-none`) or
    /// `mencius`; see crate::protocol.
    #[serde(default = "default_protocol")]
    pub protocol: String,
    /// Peer address of every member, this one included: `{ "1" = "127.0.0.1:2881", … }`. A
    /// host may be a DNS name, resolved at each connection attempt.
    pub peers: BTreeMap<String, PeerAddr>,
    /// Peers that follow the ZooKeeper group (group 0) as observers (learners): they receive
    /// every change and serve clients, and never vote (docs/membership.md). `synod member
    /// promote` makes one a voter. Only with `protocol = "zab"`.
    #[serde(default)]
    pub observers: Vec<NodeId>,
    /// Where this replica listens for peers (defaults to its entry in `peers`).
    #[serde(default)]
    pub peer_addr: Option<SocketAddr>,
    /// ZooKeeper client port (served from the ZooKeeper front end).
    #[serde(default)]
    pub client_addr: Option<SocketAddr>,
    /// ZooKeeper client port over TLS (ZooKeeper's `secureClientPort`); needs `[tls]`.
    #[serde(default)]
    pub secure_client_addr: Option<SocketAddr>,
    /// Certificates: mutual TLS between peers, TLS on the client ports (crate::tls).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Run without `[tls]`: peers talk in plain text and accept any process that names the
    /// cluster. Must be said explicitly; for loopback tests and trusted networks only.
    #[serde(default)]
    pub insecure: bool,
    /// Admin HTTP: /metrics, /health, /v1/status, /v1/kv.
    pub admin_addr: SocketAddr,
    pub data_dir: PathBuf,
    /// `always` (fdatasync every batch) or `never` (benchmarks only: unsafe).
    #[serde(default = "default_fsync")]
    pub fsync: String,
    /// Deliveries between two snapshots of the state machine.
    #[serde(default = "default_snapshot_every")]
    pub snapshot_every: u64,
    /// Async worker threads: 1 runs every task on one thread (fewest wake-ups and context
    /// switches, best when replicas share a small machine); the WAL has its own thread anyway.
    #[serde(default = "default_threads")]
    pub threads: usize,
    /// Fault injection for the chaos harness (`synod chaos`): enables `POST /v1/fault/cut` on
    /// the admin port and `debug_bug`. Never turn it on in production.
    #[serde(default)]
    pub fault_injection: bool,
    /// A deliberately planted bug, to prove the chaos harness catches one (needs
    /// fault_injection): `stale-sync` answers `sync` locally instead of ordering it through the
    /// leader and keeps serving without a leader, so a partitioned server serves stale reads
    /// after a sync; `kv-skip-read-validation` commits SconeKV transactions without validating
    /// what they read; `kv-reset-on-delete` resets a key's version on delete (the thesis
    /// prototype's ABA).
    #[serde(default)]
    pub debug_bug: String,
    /// tracing filter, e.g. `info` or `synod_server=debug,info`.
    #[serde(default = "default_log_level")]
    pub log_level: String,
    #[serde(default)]
    pub limits: Limits,
    /// How many commands, and how many bytes of them, a replica hands its protocol core at once.
    #[serde(default)]
    pub batch: BatchTuning,
    /// Groups besides the ZooKeeper group (group 0), each with its own protocol, members and
    /// state machine, all sharing this process, its peer connections and its log.
    #[serde(default)]
    pub groups: Vec<GroupConfig>,
    #[serde(default)]
    pub zab: ZabTuning,
    #[serde(default)]
    pub paxos: PaxosTuning,
    #[serde(default)]
    pub mencius: MenciusTuning,
    #[serde(default)]
    pub zookeeper: ZkTuning,
    /// Delay and bandwidth emulated on every peer link (benchmarks on one machine); off by
    /// default.
    #[serde(default)]
    pub link_emulation: LinkEmulationConfig,
    /// SconeKV: buckets of the transactional store and the KV gRPC listener.
    #[serde(default)]
    pub kv: KvConfig,
    /// etcd's v3 API: the store's group and this node's etcd gRPC listener.
    #[serde(default)]
    pub etcd: EtcdConfig,
}

/// One `[[groups]]` entry.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    /// The group's id: 1 or more (0 is the ZooKeeper group), unique in the cluster.
    pub id: u32,
    /// Its replication protocol (default: the top-level `protocol`).
    #[serde(default)]
    pub protocol: Option<String>,
    /// Its state machine: `register` (a replicated key-value map served on the admin port at
    /// `/v1/groups/<id>/kv/<key>`).
    #[serde(default = "default_machine")]
    pub machine: String,
    /// Its members, ids of `peers` (default: every node).
    #[serde(default)]
    pub members: Option<Vec<u32>>,
}

fn default_machine() -> String {
    "register".into()
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BatchTuning {
    /// Most commands in one batch (one proposal, one log record, one acknowledgement).
    pub max_commands: usize,
    /// Most payload bytes in one batch (a single larger command still goes alone).
    pub max_bytes: usize,
}

impl Default for BatchTuning {
    fn default() -> Self {
        let d = synod_core::BatchLimits::default();
        Self {
            max_commands: d.max_commands,
            max_bytes: d.max_bytes,
        }
    }
}

impl BatchTuning {
    pub fn limits(&self) -> synod_core::BatchLimits {
        synod_core::BatchLimits {
            max_commands: self.max_commands,
            max_bytes: self.max_bytes,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest message between peers (reassembled from chunks).
    pub max_message_bytes: u64,
    /// Chunk size for large messages (snapshots) on the peer transport.
    pub chunk_bytes: u64,
    /// Messages queued for one peer before it counts as too slow and is disconnected.
    pub peer_queue: usize,
    /// Client requests waiting for their delivery at this replica.
    pub max_pending_requests: usize,
    /// Largest value accepted by the KV API.
    pub max_value_bytes: usize,
    /// Largest key accepted by the KV API.
    pub max_key_bytes: usize,
    /// WAL segment size.
    pub segment_bytes: u64,
    /// Zero-filled space written ahead of the WAL so that syncs do not change the file size
    /// (0 turns it off).
    pub wal_preallocate_bytes: u64,
    /// Seconds a client request waits for its delivery.
    pub request_timeout_ms: u64,
    /// Inbound peer connections that have not completed their hello (5 s at most) at the same
    /// time; more are closed as soon as they are accepted.
    pub max_peer_handshakes: usize,
    /// Open admin HTTP connections; more are closed as soon as they are accepted.
    pub max_admin_connections: usize,
    /// An admin HTTP connection is closed when a request's headers take longer than this to
    /// arrive, or when it stays idle this long between requests.
    pub admin_idle_timeout_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_message_bytes: 1 << 30,
            chunk_bytes: 1 << 20,
            peer_queue: 100_000,
            max_pending_requests: 50_000,
            max_value_bytes: 1 << 20,
            max_key_bytes: 1024,
            segment_bytes: 64 << 20,
            wal_preallocate_bytes: 16 << 20,
            request_timeout_ms: 10_000,
            max_peer_handshakes: 64,
            max_admin_connections: 256,
            admin_idle_timeout_ms: 30_000,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ZabTuning {
    /// Once an election vote has a quorum, how long to wait for a better one before deciding.
    pub tick_ms: u64,
    pub heartbeat_ms: u64,
    pub follower_timeout_ms: u64,
    pub leader_timeout_ms: u64,
    pub discovery_timeout_ms: u64,
    pub log_retain: u64,
    pub max_inflight: u64,
    /// Batches the leader keeps proposed and not yet committed; commands arriving while the
    /// window is full leave together in the next batch.
    pub window: usize,
}

impl Default for ZabTuning {
    fn default() -> Self {
        Self {
            tick_ms: 20,
            heartbeat_ms: 100,
            follower_timeout_ms: 1_000,
            leader_timeout_ms: 1_000,
            discovery_timeout_ms: 2_000,
            log_retain: 10_000,
            max_inflight: 20_000,
            window: synod_zab::Options::default().window,
        }
    }
}

fn default_threads() -> usize {
    1
}

fn default_protocol() -> String {
    "zab".into()
}
fn default_fsync() -> String {
    "always".into()
}
fn default_snapshot_every() -> u64 {
    100_000
}
fn default_log_level() -> String {
    "info".into()
}

impl Config {
    /// Load `path` (if any), apply `key=value` overrides, deserialize and validate.
    pub fn load(path: Option<&std::path::Path>, overrides: &[String]) -> Result<Config> {
        let mut doc: toml::Table = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("cannot read config file {}", p.display()))?;
                text.parse()
                    .with_context(|| format!("config file {} is not valid TOML", p.display()))?
            }
            None => toml::Table::new(),
        };
        for o in overrides {
            let (key, value) = o
                .split_once('=')
                .with_context(|| format!("--set {o}: expected key=value"))?;
            set_path(&mut doc, key.trim(), parse_value(value.trim()))
                .with_context(|| format!("--set {o}"))?;
        }
        let cfg: Config =
            serde_path_to_error::deserialize(toml::Value::Table(doc)).map_err(|e| {
                let path = e.path().to_string();
                let inner = e.into_inner();
                anyhow::anyhow!("config key {path}: {}", inner.message().trim())
            })?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<()> {
        if self.cluster_id.is_empty() {
            bail!("config key cluster_id: must not be empty");
        }
        match (&self.tls, self.insecure) {
            (None, false) => bail!(
                "config key tls: no [tls] section, so peers would talk in plain text and accept \
                 any process that names the cluster. Give the node certificates (`synod certs`, \
                 then [tls] ca_file, cert_file, key_file) or set insecure = true to run without \
                 them (loopback tests, trusted networks)"
            ),
            (Some(_), true) => {
                bail!("config key insecure: true, but a [tls] section is given; choose one")
            }
            _ => {}
        }
        if self.secure_client_addr.is_some() && self.tls.is_none() {
            bail!("config key secure_client_addr: needs a [tls] section");
        }
        self.check_observers()?;
        check_protocol("protocol", &self.protocol, self.zookeeper_voters()?.len())?;
        if !matches!(
            self.debug_bug.as_str(),
            "" | "stale-sync" | "kv-skip-read-validation" | "kv-reset-on-delete"
        ) {
            bail!(
                "config key debug_bug: '{}' (expected stale-sync, kv-skip-read-validation, kv-reset-on-delete or nothing)",
                self.debug_bug
            );
        }
        if !self.debug_bug.is_empty() && !self.fault_injection {
            bail!("config key debug_bug: needs fault_injection = true");
        }
        if !matches!(self.fsync.as_str(), "always" | "never") {
            bail!(
                "config key fsync: '{}' (expected always or never)",
                self.fsync
            );
        }
        let members = self.members()?;
        if !(1..=254).contains(&self.node_id) {
            bail!(
                "config key node_id: {} is outside 1..=254 (the top byte of session ids)",
                self.node_id
            );
        }
        if !members.contains_key(&self.node_id) {
            bail!(
                "config key node_id: {} is not one of the peers ({:?})",
                self.node_id,
                members.keys().collect::<Vec<_>>()
            );
        }
        if self.zookeeper.min_session_timeout_ms <= 0
            || self.zookeeper.max_session_timeout_ms < self.zookeeper.min_session_timeout_ms
        {
            bail!("config key zookeeper.max_session_timeout_ms: must be at least min_session_timeout_ms (> 0)");
        }
        if let Some(d) = &self.zookeeper.super_digest {
            let valid = d
                .split_once(':')
                .is_some_and(|(user, hash)| !user.is_empty() && hash.len() == 28);
            if !valid {
                bail!("config key zookeeper.super_digest: must be user:base64(sha1(user:password)), as `synod digest user:password` prints it");
            }
        }
        let rate = self.zookeeper.max_read_bytes_per_second;
        let within =
            rate.saturating_mul(self.zookeeper.min_session_timeout_ms.max(0) as u64) / 1000;
        if rate != 0 && within < self.zookeeper.max_buffer as u64 {
            bail!(
                "config key zookeeper.max_read_bytes_per_second: {rate} bytes/s cannot read a \
                 request of max_buffer ({} bytes) within min_session_timeout_ms, so throttled \
                 clients would be closed for a slow request; raise it (or 0 for no limit)",
                self.zookeeper.max_buffer
            );
        }
        if self.zookeeper.handshake_timeout_ms == 0 || self.zookeeper.write_timeout_ms == 0 {
            bail!("config key zookeeper.handshake_timeout_ms / write_timeout_ms: must be positive");
        }
        self.zookeeper.validate()?;
        if self.zookeeper.max_connections == 0 {
            bail!("config key zookeeper.max_connections: must be at least 1");
        }
        if self.limits.max_peer_handshakes == 0
            || self.limits.max_admin_connections == 0
            || self.limits.admin_idle_timeout_ms == 0
        {
            bail!("config key limits.max_peer_handshakes / max_admin_connections / admin_idle_timeout_ms: must be positive");
        }
        if self.snapshot_every == 0 {
            bail!("config key snapshot_every: must be at least 1");
        }
        if self.limits.chunk_bytes == 0 || self.limits.chunk_bytes > 64 << 20 {
            bail!("config key limits.chunk_bytes: must be between 1 and 64 MiB");
        }
        if self.zab.tick_ms == 0 || self.zab.heartbeat_ms < self.zab.tick_ms {
            bail!("config key zab.heartbeat_ms: must be at least zab.tick_ms (> 0)");
        }
        if self.zab.follower_timeout_ms < 2 * self.zab.heartbeat_ms {
            bail!("config key zab.follower_timeout_ms: must be at least twice zab.heartbeat_ms");
        }
        if self.zab.window == 0 {
            bail!("config key zab.window: must be at least 1");
        }
        if self.batch.max_commands == 0 || self.batch.max_bytes == 0 {
            bail!("config key batch.max_commands / batch.max_bytes: must be at least 1");
        }
        if self.batch.max_commands as u64 > self.zab.max_inflight {
            bail!("config key batch.max_commands: must not exceed zab.max_inflight");
        }
        self.paxos
            .validate(self.batch.max_commands, self.protocols())?;
        self.mencius.validate()?;
        self.link_emulation.validate(
            &members,
            &self.zab,
            self.runs("paxos").then_some(&self.paxos),
            self.runs("mencius").then_some(&self.mencius),
        )?;
        let mut seen = std::collections::BTreeSet::new();
        for (i, g) in self.groups.iter().enumerate() {
            let key = format!("groups[{i}]");
            if g.id == 0 {
                bail!("config key {key}.id: 0 is the ZooKeeper group; use 1 or more");
            }
            if !seen.insert(g.id) {
                bail!("config key {key}.id: group {} is listed twice", g.id);
            }
            if g.machine != "register" {
                bail!(
                    "config key {key}.machine: '{}' (expected register)",
                    g.machine
                );
            }
            let members = self.group_members(g);
            if members.is_empty() {
                bail!("config key {key}.members: a group needs at least one member");
            }
            for m in &members {
                if !self.members()?.contains_key(m) {
                    bail!("config key {key}.members: {m} is not one of the peers");
                }
            }
            check_protocol(
                &format!("{key}.protocol"),
                g.protocol.as_deref().unwrap_or(&self.protocol),
                members.len(),
            )?;
        }
        let nodes = members.keys().copied().collect();
        self.kv.validate(&nodes, &seen)?;
        let kv_groups =
            self.kv.group_base as u64..self.kv.group_base as u64 + self.kv.buckets as u64;
        self.etcd.validate(&nodes, &seen, kv_groups)?;
        if self.kv.enabled() {
            let p = self.kv.protocol.as_deref().unwrap_or(&self.protocol);
            if synod_registry::facts(p).is_some_and(|f| !f.single_leader) {
                bail!("config key kv.protocol: '{p}' names no master; buckets run zab, a Zab variant or paxos");
            }
            check_protocol("kv.protocol", p, self.kv.replicas.min(members.len()))?;
        }
        if self.etcd.enabled {
            let p = self.etcd.protocol.as_deref().unwrap_or(&self.protocol);
            check_protocol("etcd.protocol", p, members.len())?;
        }
        Ok(())
    }

    /// The members of a configured group (every node when it lists none).
    pub fn group_members(&self, g: &GroupConfig) -> Vec<NodeId> {
        let mut m = match &g.members {
            Some(m) => m.clone(),
            None => self
                .members()
                .map(|m| m.keys().copied().collect())
                .unwrap_or_default(),
        };
        m.sort_unstable();
        m.dedup();
        m
    }

    /// Members by id.
    pub fn members(&self) -> Result<BTreeMap<NodeId, PeerAddr>> {
        let mut m = BTreeMap::new();
        for (k, v) in &self.peers {
            let id: NodeId = k
                .parse()
                .ok()
                .filter(|&i| i > 0)
                .with_context(|| format!("config key peers.{k}: ids are positive integers"))?;
            m.insert(id, v.clone());
        }
        if m.is_empty() {
            bail!("config key peers: at least one member is required");
        }
        Ok(m)
    }

    /// Where to listen for peers: `peer_addr`, else this node's entry in `peers` (all
    /// interfaces at its port when that entry is a DNS name).
    pub fn peer_listen_addr(&self) -> SocketAddr {
        self.peer_addr.unwrap_or_else(|| {
            let mine = &self.members().expect("validated")[&self.node_id];
            mine.socket_addr().unwrap_or_else(|| {
                SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), mine.port())
            })
        })
    }
}

fn parse_value(v: &str) -> toml::Value {
    // A TOML value if it parses as one (numbers, booleans, arrays, quoted strings), else a string.
    format!("x = {v}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("x"))
        .unwrap_or_else(|| toml::Value::String(v.to_string()))
}

fn set_path(doc: &mut toml::Table, key: &str, value: toml::Value) -> Result<()> {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().filter(|s| !s.is_empty()).context("empty key")?;
    let mut table = doc;
    for p in parts {
        table = table
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .with_context(|| format!("{p} is not a section"))?;
    }
    table.insert(last.to_string(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &[&str] = &[
        "cluster_id=test",
        "node_id=1",
        "peers.1=\"127.0.0.1:2881\"",
        "peers.2=\"127.0.0.1:2882\"",
        "admin_addr=\"127.0.0.1:9181\"",
        "data_dir=/tmp/x",
        "insecure=true",
    ];

    fn load(extra: &[&str]) -> Result<Config> {
        let o: Vec<String> = BASE.iter().chain(extra).map(|s| s.to_string()).collect();
        Config::load(None, &o)
    }

    #[test]
    fn sasl_users_from_a_jaas_file_and_inline() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("jaas.conf");
        std::fs::write(
            &good,
            "Server {\n org.apache.zookeeper.server.auth.DigestLoginModule required\n user_bob=\"b\";\n};\n",
        )
        .unwrap();
        let bad = dir.path().join("bad.conf");
        std::fs::write(&bad, "Server {\n org.apache.zookeeper.server.auth.DigestLoginModule required\n user_bob=\"b\"\n};\n").unwrap();
        let key = |p: &std::path::Path| format!("zookeeper.jaas_file=\"{}\"", p.display());
        let cfg = load(&[&key(&good), "zookeeper.sasl_users.alice=\"a\""]).unwrap();
        let users = cfg.zookeeper.sasl_users().unwrap().unwrap();
        assert_eq!(users.keys().collect::<Vec<_>>(), ["alice", "bob"]);
        // Passwords never show in the Debug form.
        assert!(!format!("{:?}", cfg.zookeeper).contains("\"a\""));
        let e = format!("{:#}", load(&[&key(&bad)]).unwrap_err());
        assert!(e.contains("bad.conf: line 4"), "{e}");
        let e = format!("{:#}", load(&[&key(&dir.path().join("none"))]).unwrap_err());
        assert!(e.contains("zookeeper.jaas_file: cannot read"), "{e}");
        let e = load(&["zookeeper.require_auth=[\"sasl\"]"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("sasl needs SASL users"), "{e}");
        let e = load(&["zookeeper.require_auth=[\"kerberos\"]"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown scheme"), "{e}");
        assert!(load(&["zookeeper.require_auth=[\"digest\"]"]).is_ok());
        assert_eq!(ZkTuning::default().max_client_cnxns, 60);
    }

    #[test]
    fn a_read_rate_too_slow_for_the_largest_request_is_refused() {
        let e = load(&["zookeeper.max_read_bytes_per_second=65536"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_read_bytes_per_second"), "{e}");
        load(&[
            "zookeeper.max_read_bytes_per_second=65536",
            "zookeeper.max_buffer=200000",
        ])
        .unwrap();
        load(&["zookeeper.max_read_bytes_per_second=0"]).unwrap();
    }

    #[test]
    fn a_node_without_certificates_must_say_insecure() {
        let o: Vec<String> = BASE[..BASE.len() - 1]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let e = Config::load(None, &o).unwrap_err().to_string();
        assert!(e.contains("insecure = true"), "{e}");
        let tls = [
            "tls.ca_file=\"ca.crt\"",
            "tls.cert_file=\"node-1.crt\"",
            "tls.key_file=\"node-1.key\"",
        ];
        let e = load(&tls).unwrap_err().to_string();
        assert!(e.contains("choose one"), "{e}");
        let mut secure = o.clone();
        secure.extend(tls.iter().map(|s| s.to_string()));
        let c = Config::load(None, &secure).unwrap();
        assert_eq!(c.tls.unwrap().client_auth, ClientAuth::Want);
        let e = load(&["secure_client_addr=\"127.0.0.1:2281\""])
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs a [tls] section"), "{e}");
        let e = load(&["peers.3=\"no such:1\""]).unwrap_err().to_string();
        assert!(e.contains("peers.3"), "{e}");
    }

    #[test]
    fn overrides_build_a_config() {
        let c = load(&["zab.tick_ms=5", "limits.peer_queue=7"]).unwrap();
        assert_eq!(c.zab.tick_ms, 5);
        assert_eq!(c.limits.peer_queue, 7);
        assert_eq!(c.peer_listen_addr().port(), 2881);
        assert_eq!(c.members().unwrap().len(), 2);
    }

    #[test]
    fn groups_are_checked_and_default_to_every_node() {
        let text =
            "cluster_id = 'c'\nnode_id = 1\ninsecure = true\nadmin_addr = '127.0.0.1:9181'\n\
                    data_dir = '/tmp/x'\n[peers]\n1 = '127.0.0.1:2881'\n2 = '127.0.0.1:2882'\n\
                    3 = '127.0.0.1:2883'\n[[groups]]\nid = 1\n[[groups]]\nid = 2\n\
                    protocol = 'zab-ct'\nmembers = [1, 3]\n";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, text).unwrap();
        let c = Config::load(Some(&path), &[]).unwrap();
        assert_eq!(c.group_members(&c.groups[0]), vec![1, 2, 3]);
        assert_eq!(c.group_members(&c.groups[1]), vec![1, 3]);
        // ZabCT with a named coin (the thesis's configurations) is a protocol too.
        let o = c.options::<synod_zab::Zab>("zab-ct-a");
        assert_eq!(o.variant, synod_zab::variant::Variant::Ct);
        assert!(matches!(
            o.coin,
            synod_zab::coin::Choice::Adaptive {
                policy: synod_zab::coin::Policy::Average,
                theta: None
            }
        ));
        assert!(check_protocol("protocol", "zab-ct-half", 3).is_ok());
        for (bad, key) in [
            ("[[groups]]\nid = 0\n", "groups[2].id"),
            ("[[groups]]\nid = 1\n", "groups[2].id"),
            ("[[groups]]\nid = 5\nmembers = [9]\n", "groups[2].members"),
            ("[[groups]]\nid = 5\nmachine = 'sql'\n", "groups[2].machine"),
            (
                "[[groups]]\nid = 5\nprotocol = 'raft'\n",
                "groups[2].protocol",
            ),
        ] {
            std::fs::write(&path, format!("{text}{bad}")).unwrap();
            let e = Config::load(Some(&path), &[]).unwrap_err().to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
    }

    #[test]
    fn errors_name_the_key() {
        let e = load(&["colour=blue"]).unwrap_err().to_string();
        assert!(e.contains("colour"), "{e}");
        let e = load(&["node_id=3"]).unwrap_err().to_string();
        assert!(e.contains("node_id"), "{e}");
        let e = load(&["fsync=sometimes"]).unwrap_err().to_string();
        assert!(e.contains("fsync"), "{e}");
        let e = load(&["zab.tick_ms=\"soon\""]).unwrap_err().to_string();
        assert!(e.contains("tick_ms"), "{e}");
        let e = load(&["protocol=raft"]).unwrap_err().to_string();
        assert!(e.contains("protocol"), "{e}");
        let e = load(&["batch.max_commands=0"]).unwrap_err().to_string();
        assert!(e.contains("batch.max_commands"), "{e}");
        let e = Config::load(None, &[]).unwrap_err().to_string();
        assert!(e.contains("cluster_id"), "{e}");
        let e = load(&["zookeeper.super_digest=\"super\""])
            .unwrap_err()
            .to_string();
        assert!(e.contains("zookeeper.super_digest"), "{e}");
        let ok = load(&["zookeeper.super_digest=\"super:D/InIHSb7yEEbrWz8b9l71RjZJU=\""]);
        assert!(ok.is_ok());
    }

    #[test]
    fn link_emulation_is_off_by_default_and_checked() {
        let c = load(&[]).unwrap();
        assert_eq!(c.link_emulation, LinkEmulationConfig::default());
        assert!(!c.link_emulation.emulation().is_on());
        let c = load(&[
            "link_emulation.delay_ms=2",
            "link_emulation.jitter_ms=0.5",
            "link_emulation.bandwidth_mbit=100",
        ])
        .unwrap();
        let e = c.link_emulation.emulation();
        assert_eq!(e.delay, std::time::Duration::from_millis(2));
        assert_eq!(e.jitter, std::time::Duration::from_micros(500));
        assert_eq!(e.bits_per_s, 100_000_000);
        for bad in [
            "link_emulation.delay_ms=-1",
            "link_emulation.delay_ms=nan",
            "link_emulation.jitter_ms=1e9",
            "link_emulation.bandwidth_mbit=-5",
            "link_emulation.bandwidth_mbit=inf",
            "link_emulation.bandwidth_mbit=1e12",
            // A round trip of 600 ms against the default 1 s timeouts.
            "link_emulation.delay_ms=300",
        ] {
            let e = load(&[bad]).unwrap_err().to_string();
            assert!(e.contains("link_emulation."), "{bad}: {e}");
        }
        let e = load(&["link_emulation.latency_ms=3"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("latency_ms"), "{e}");
        // Per-peer overrides: the link to node 2 differs; a missing key takes the node's value.
        let c = load(&[
            "link_emulation.delay_ms=5",
            "link_emulation.bandwidth_mbit=20",
            "link_emulation.peers.2.delay_ms=80",
            "link_emulation.peers.2.bandwidth_mbit=5",
            "link_emulation.peers.1.jitter_ms=3",
        ])
        .unwrap();
        let l = c.link_emulation.emulations(c.node_id);
        assert_eq!(l.all.delay, std::time::Duration::from_millis(5));
        let to2 = l.to(2);
        assert_eq!(to2.delay, std::time::Duration::from_millis(80));
        assert_eq!(to2.jitter, std::time::Duration::ZERO);
        assert_eq!(
            (to2.bits_per_s, to2.link_bits_per_s),
            (20_000_000, 5_000_000)
        );
        // This node's own entry is ignored (one table may serve every node).
        assert_eq!(l.peers.len(), 1);
        for (bad, key) in [
            (
                "link_emulation.peers.9.delay_ms=1",
                "link_emulation.peers.9",
            ),
            (
                "link_emulation.peers.x.delay_ms=1",
                "link_emulation.peers.x",
            ),
            (
                "link_emulation.peers.2.delay_ms=-1",
                "link_emulation.peers.2.delay_ms",
            ),
            (
                "link_emulation.peers.2.bandwidth_mbit=nan",
                "link_emulation.peers.2.bandwidth_mbit",
            ),
            ("link_emulation.peers.2.latency_ms=1", "latency_ms"),
            // The longest link counts against the failure detectors' timeouts.
            (
                "link_emulation.peers.2.delay_ms=300",
                "link_emulation.delay_ms",
            ),
        ] {
            let e = load(&[bad]).unwrap_err().to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
        // Larger delays are fine with larger timeouts.
        load(&[
            "link_emulation.delay_ms=300",
            "zab.follower_timeout_ms=5000",
            "zab.leader_timeout_ms=5000",
        ])
        .unwrap();
    }
}
