//! Server configuration: a TOML file, every key of which can be overridden on the command line
//! (`--set key=value`, dotted keys for sections). Unknown keys and bad values are errors that
//! name the key.

use anyhow::{bail, Context, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use synod_core::NodeId;

use crate::protocol::check_protocol;
pub use crate::protocol::{MenciusTuning, PaxosBatch, PaxosTuning};

mod etcd;
mod groups;
mod kv;
mod limits;
mod link;
mod load;
mod members;
mod peer_addr;
mod protocols;
pub mod reference;
mod tls;
mod zab;
mod zookeeper;
pub use etcd::EtcdConfig;
pub use groups::GroupConfig;
pub use kv::KvConfig;
pub use limits::{BatchTuning, Limits};
pub use link::{LinkEmulationConfig, PeerLinkConfig};
pub use peer_addr::PeerAddr;
pub use tls::{ClientAuth, TlsConfig};
pub use zab::ZabTuning;
pub use zookeeper::{SaslUsers, ZkTuning};

/// A replica's whole configuration: the top-level keys, and one field per section.
/// docs/configuration.md is generated from these doc comments and defaults
/// (`synod config reference`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Name of the cluster; a data directory or a peer of another cluster is refused.
    pub cluster_id: String,
    /// This replica's id (a key of `peers`), 1 to 254.
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
    /// Where this replica listens for peers, `ip:port` (default: its entry in `peers`).
    #[serde(default)]
    pub peer_addr: Option<SocketAddr>,
    /// ZooKeeper client port, `ip:port` (served from the ZooKeeper front end; unset: no
    /// plain-text client port).
    #[serde(default)]
    pub client_addr: Option<SocketAddr>,
    /// ZooKeeper client port over TLS, `ip:port` (ZooKeeper's `secureClientPort`); needs
    /// `[tls]`.
    #[serde(default)]
    pub secure_client_addr: Option<SocketAddr>,
    /// Certificates: mutual TLS between peers, TLS on the client ports (crate::tls). Absent:
    /// `insecure = true` must be said.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Run without `[tls]`: peers talk in plain text and accept any process that names the
    /// cluster. Must be said explicitly; for loopback tests and trusted networks only.
    #[serde(default)]
    pub insecure: bool,
    /// Admin HTTP address, `ip:port`: /metrics, /health, /v1/status, /v1/kv.
    pub admin_addr: SocketAddr,
    /// Directory of this replica's write-ahead log and snapshots (created if missing; it
    /// belongs to one cluster and one node id).
    pub data_dir: PathBuf,
    /// `always` (fdatasync every batch) or `never` (benchmarks only: unsafe).
    #[serde(default = "default_fsync")]
    #[schemars(extend("enum" = ["always", "never"]))]
    pub fsync: String,
    /// Deliveries between two snapshots of the state machine, a count of commands (at least
    /// 1).
    #[serde(default = "default_snapshot_every")]
    pub snapshot_every: u64,
    /// Async worker threads, a count (at most 64 are used): 1 runs every task on one thread (fewest wake-ups and context
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
    /// tracing filter, e.g. `info` or `synod_server=debug,info` (the `RUST_LOG` environment
    /// variable, when set, takes precedence).
    #[serde(default = "default_log_level")]
    pub log_level: String,
    /// Format of the log lines written to standard error: `text` (one human-readable line an
    /// event) or `json` (one JSON object a line, for log collectors).
    #[serde(default = "default_log_format")]
    #[schemars(extend("enum" = ["text", "json"]))]
    pub log_format: String,
    /// Message, queue and WAL sizes, and connection caps.
    #[serde(default)]
    pub limits: Limits,
    /// How many commands, and how many bytes of them, a replica hands its protocol core at once.
    #[serde(default)]
    pub batch: BatchTuning,
    /// Groups besides the ZooKeeper group (group 0), each with its own protocol, members and
    /// state machine, all sharing this process, its peer connections and its log.
    #[serde(default)]
    pub groups: Vec<GroupConfig>,
    /// Timers and flow control of every group running Zab or a Zab variant.
    #[serde(default)]
    pub zab: ZabTuning,
    /// Timers and batching of every group running PFT Multi-Paxos (`paxos`, `paxos-mbq`,
    /// `paxos-none`).
    #[serde(default)]
    pub paxos: PaxosTuning,
    /// Failure detector, skips, revocation and batching of every group running Mencius. Out of
    /// order commit is never on in the server: ZooKeeper's zxids must grow with every delivery.
    #[serde(default)]
    pub mencius: MenciusTuning,
    /// The ZooKeeper front end: client connections, sessions, four-letter words,
    /// authentication and quotas.
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
fn default_log_format() -> String {
    "text".into()
}

impl Config {
    /// Checks the values together (serde has checked their types).
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
        if !matches!(self.log_format.as_str(), "text" | "json") {
            bail!(
                "config key log_format: '{}' (expected text or json)",
                self.log_format
            );
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
        self.limits.validate()?;
        if self.snapshot_every == 0 {
            bail!("config key snapshot_every: must be at least 1");
        }
        self.zab.validate()?;
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
        let seen = self.check_groups()?;
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
    fn errors_name_the_key() {
        let e = load(&["colour=blue"]).unwrap_err().to_string();
        assert!(e.contains("colour"), "{e}");
        let e = load(&["node_id=3"]).unwrap_err().to_string();
        assert!(e.contains("node_id"), "{e}");
        let e = load(&["fsync=sometimes"]).unwrap_err().to_string();
        assert!(e.contains("fsync"), "{e}");
        let e = load(&["log_format=xml"]).unwrap_err().to_string();
        assert!(
            e.contains("config key log_format: 'xml' (expected text or json)"),
            "{e}"
        );
        assert_eq!(load(&[]).unwrap().log_format, "text");
        assert_eq!(load(&["log_format=json"]).unwrap().log_format, "json");
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
