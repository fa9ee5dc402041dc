//! Prometheus metrics of a node (text format on the admin port's `/metrics`), named by
//! Prometheus' conventions: a counter is a counter and ends in `_total`, a gauge is a gauge,
//! units are in the name (`_seconds`, `_bytes`), and every name starts with its subsystem:
//!
//! | prefix | what |
//! |---|---|
//! | `synod_build_info` | version and commit of the binary (value 1) |
//! | `synod_wal_` | the shared write-ahead log: fdatasyncs, group commit, size on disk |
//! | `synod_peer_` | the peer transport: frames and bytes (apart), refused and dropped input |
//! | `synod_tls_` | the node's certificate |
//! | `synod_group_` | every group's replica, labelled `group="<id>"`: commands, view, snapshots |
//! | `synod_protocol_` | the protocol core's own readings ([`readings`]), labelled `group` |
//! | `synod_zk_` | the ZooKeeper client port (`mntr`'s numbers, limits, SASL) |
//! | `synod_kv_` | SconeKV transactions decided at this node |
//! | `synod_etcd_` | the etcd API: requests by method |
//!
//! Costs: the write path only touches atomics and pre-resolved handles (a group's handles are
//! looked up once); numbers kept elsewhere (the transport's atomics, the ZooKeeper tree's sizes,
//! the cores' readings) are read at scrape time by collectors ([`scraped`]), and nothing walks
//! the data tree.

mod readings;
mod scraped;
#[cfg(test)]
mod tests;

pub use scraped::{LatencyHistogram, ZkSample, ZkSource};

use crate::transport::TransportStats;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use synod_core::GroupId;

/// The subsystems a metric name may start with (after `synod_`).
pub const SUBSYSTEMS: &[&str] = &[
    "build", "wal", "peer", "tls", "group", "protocol", "zk", "kv", "etcd",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabel {
    pub group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupKindLabel {
    pub group: String,
    pub kind: &'static str,
}

fn latency_buckets() -> impl Iterator<Item = f64> {
    // 50 µs … ~3.3 s, doubling.
    exponential_buckets(50e-6, 2.0, 17)
}

fn count_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(1.0, 2.0, 14)
}

fn latency_histogram() -> Histogram {
    Histogram::new(latency_buckets())
}

fn count_histogram() -> Histogram {
    Histogram::new(count_buckets())
}

/// Metric families shared by all groups.
struct GroupFamilies {
    commit_latency: Family<GroupLabel, Histogram, fn() -> Histogram>,
    batch_commands: Family<GroupLabel, Histogram, fn() -> Histogram>,
    submitted: Family<GroupLabel, Counter>,
    deliveries: Family<GroupLabel, Counter>,
    rejected: Family<GroupLabel, Counter>,
    role: Family<GroupLabel, Gauge>,
    epoch: Family<GroupLabel, Gauge>,
    applied_slot: Family<GroupLabel, Gauge>,
    snapshot_slot: Family<GroupLabel, Gauge>,
    snapshot_age_seconds: Family<GroupLabel, Gauge>,
    snapshots_taken: Family<GroupLabel, Counter>,
    snapshots_installed: Family<GroupLabel, Counter>,
    pending_requests: Family<GroupLabel, Gauge>,
    outbox_held: Family<GroupLabel, Gauge>,
    messages_sent: Family<GroupKindLabel, Counter>,
    messages_received: Family<GroupKindLabel, Counter>,
    group_messages: Family<GroupLabel, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabel {
    pub limit: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

/// Counters of the ZooKeeper client port's defences: limits that refused or slowed a client
/// (`synod_zk_limited_total{limit=...}`, the label being the config key under `[zookeeper]`
/// or `sasl`), and SASL exchanges (`synod_zk_sasl_total{outcome="ok"|"failed"}`). One set per
/// process (a server runs one client port).
#[derive(Clone, Default)]
pub struct ZkFrontCounters {
    limited: Family<LimitLabel, Counter>,
    sasl: Family<OutcomeLabel, Counter>,
}

impl ZkFrontCounters {
    pub fn limited(&self, limit: &'static str) {
        self.limited.get_or_create(&LimitLabel { limit }).inc();
    }
    pub fn sasl(&self, ok: bool) {
        let outcome = if ok { "ok" } else { "failed" };
        self.sasl.get_or_create(&OutcomeLabel { outcome }).inc();
    }
}

/// The process's ZooKeeper client-port counters.
pub fn zk_front() -> &'static ZkFrontCounters {
    static C: std::sync::OnceLock<ZkFrontCounters> = std::sync::OnceLock::new();
    C.get_or_init(ZkFrontCounters::default)
}

/// Why a SconeKV transaction aborted, as a bounded label: the decision's free-text reason
/// (crates/kv/src/twopc.rs) mapped onto a few values.
pub fn kv_abort_reason(reason: &str) -> &'static str {
    if reason.starts_with("the version of") {
        // Validation failed: a key changed since the transaction read it.
        "conflict"
    } else if reason == "aborted by the client" {
        "client"
    } else if reason.starts_with("malformed") {
        "malformed"
    } else {
        "other"
    }
}

/// SconeKV transactions decided at this node (the node the client called, which submits the
/// commit to the coordinator bucket): `synod_kv_commits_total`,
/// `synod_kv_aborts_total{reason}` ([`kv_abort_reason`]), and `synod_kv_undecided_total`
/// (no decision came back: refused, busy, unavailable or timed out; the outcome is unknown to
/// the client). One set per process.
#[derive(Clone, Default)]
pub struct KvCounters {
    commits: Counter,
    aborts: Family<ReasonLabel, Counter>,
    undecided: Counter,
}

impl KvCounters {
    pub fn committed(&self) {
        self.commits.inc();
    }
    pub fn aborted(&self, reason: &str) {
        let reason = kv_abort_reason(reason);
        self.aborts.get_or_create(&ReasonLabel { reason }).inc();
    }
    pub fn undecided(&self) {
        self.undecided.inc();
    }
}

/// The process's SconeKV counters.
pub fn kv() -> &'static KvCounters {
    static C: std::sync::OnceLock<KvCounters> = std::sync::OnceLock::new();
    C.get_or_init(KvCounters::default)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabel {
    pub method: &'static str,
}

/// Requests to this node's etcd API, by gRPC method (`synod_etcd_requests_total{method}`,
/// e.g. `Range`, `Put`, `Txn`; a `Watch` or `LeaseKeepAlive` stream counts once, when opened).
/// One set per process.
#[derive(Clone, Default)]
pub struct EtcdCounters {
    requests: Family<MethodLabel, Counter>,
}

impl EtcdCounters {
    pub fn request(&self, method: &'static str) {
        self.requests.get_or_create(&MethodLabel { method }).inc();
    }
}

/// The process's etcd counters.
pub fn etcd() -> &'static EtcdCounters {
    static C: std::sync::OnceLock<EtcdCounters> = std::sync::OnceLock::new();
    C.get_or_init(EtcdCounters::default)
}

pub struct Metrics {
    registry: Registry,
    /// One WAL batch: its write and fdatasync.
    pub fsync_latency: Histogram,
    pub fsyncs: Counter,
    /// Storage ops (of every group) made durable by one fdatasync: group commit.
    pub records_per_fsync: Histogram,
    /// Groups with something in one fdatasync: one sync serves them all.
    pub groups_per_fsync: Histogram,
    pub log_bytes: Gauge,
    pub log_segments: Gauge,
    pub log_segments_deleted: Counter,
    pub peer_send_queue: Gauge,
    /// When this node's TLS certificate expires (Unix seconds; 0 without TLS), set at start
    /// and at each reload.
    pub tls_certificate_expiry: Gauge,
    pub transport: Arc<TransportStats>,
    /// The ZooKeeper client port, read at scrape time (none until [`Metrics::zookeeper`]).
    zk: Arc<Mutex<Option<Weak<dyn ZkSource>>>>,
    /// The cores' readings, by group, as last sampled.
    readings: Arc<readings::Readings>,
    groups: GroupFamilies,
}

/// The metric handles of one group, resolved once (no label lookup on the hot path).
#[derive(Clone)]
pub struct GroupMetrics {
    label: String,
    id: GroupId,
    pub commit_latency: Histogram,
    pub batch_commands: Histogram,
    pub submitted: Counter,
    pub deliveries: Counter,
    pub rejected: Counter,
    pub role: Gauge,
    pub epoch: Gauge,
    pub applied_slot: Gauge,
    pub snapshot_slot: Gauge,
    pub snapshot_age_seconds: Gauge,
    pub snapshots_taken: Counter,
    pub snapshots_installed: Counter,
    pub pending_requests: Gauge,
    pub outbox_held: Gauge,
    /// Messages this group's state machine sent to other groups.
    pub group_messages: Counter,
    sent: HashMap<&'static str, Counter>,
    received: HashMap<&'static str, Counter>,
    sent_family: Family<GroupKindLabel, Counter>,
    received_family: Family<GroupKindLabel, Counter>,
    readings: Arc<readings::Readings>,
}

impl GroupMetrics {
    pub fn sent(&mut self, kind: &'static str) -> &Counter {
        let (label, family) = (&self.label, &self.sent_family);
        self.sent.entry(kind).or_insert_with(|| {
            family
                .get_or_create(&GroupKindLabel {
                    group: label.clone(),
                    kind,
                })
                .clone()
        })
    }
    /// Record the core's readings (`Protocol::gauges`: names are the core's, static and few),
    /// exported as `synod_protocol_<name>` at the next scrape ([`readings`]).
    pub fn set_core(&mut self, gauges: &[(&'static str, f64)]) {
        self.readings.set(self.id, gauges);
    }
    pub fn received(&mut self, kind: &'static str) -> &Counter {
        let (label, family) = (&self.label, &self.received_family);
        self.received.entry(kind).or_insert_with(|| {
            family
                .get_or_create(&GroupKindLabel {
                    group: label.clone(),
                    kind,
                })
                .clone()
        })
    }
}

impl Metrics {
    pub fn new(transport: Arc<TransportStats>) -> Self {
        let groups = GroupFamilies {
            commit_latency: Family::new_with_constructor(latency_histogram),
            batch_commands: Family::new_with_constructor(count_histogram),
            submitted: Family::default(),
            deliveries: Family::default(),
            rejected: Family::default(),
            role: Family::default(),
            epoch: Family::default(),
            applied_slot: Family::default(),
            snapshot_slot: Family::default(),
            snapshot_age_seconds: Family::default(),
            snapshots_taken: Family::default(),
            snapshots_installed: Family::default(),
            pending_requests: Family::default(),
            outbox_held: Family::default(),
            messages_sent: Family::default(),
            messages_received: Family::default(),
            group_messages: Family::default(),
        };
        let m = Metrics {
            registry: Registry::default(),
            fsync_latency: latency_histogram(),
            fsyncs: Counter::default(),
            records_per_fsync: count_histogram(),
            groups_per_fsync: count_histogram(),
            log_bytes: Gauge::default(),
            log_segments: Gauge::default(),
            log_segments_deleted: Counter::default(),
            peer_send_queue: Gauge::default(),
            tls_certificate_expiry: Gauge::default(),
            transport,
            zk: Arc::new(Mutex::new(None)),
            readings: Arc::new(readings::Readings::default()),
            groups,
        };
        let mut root = Registry::with_prefix("synod");
        root.register_collector(Box::new(scraped::BuildInfo));

        let r = root.sub_registry_with_prefix("wal");
        r.register(
            "fsync_duration_seconds",
            "Duration of one WAL batch write and fdatasync",
            m.fsync_latency.clone(),
        );
        r.register(
            "fsyncs",
            "fdatasyncs of the write-ahead log (one per batch, whatever the groups in it)",
            m.fsyncs.clone(),
        );
        r.register(
            "records_per_fsync",
            "Storage ops of every group made durable by one fdatasync (group commit)",
            m.records_per_fsync.clone(),
        );
        r.register(
            "groups_per_fsync",
            "Groups with a storage op in one fdatasync",
            m.groups_per_fsync.clone(),
        );
        r.register(
            "size_bytes",
            "Bytes of write-ahead log on disk",
            m.log_bytes.clone(),
        );
        r.register(
            "segments",
            "Segment files of the write-ahead log",
            m.log_segments.clone(),
        );
        r.register(
            "segments_deleted",
            "Log segments unlinked because every group compacted past them",
            m.log_segments_deleted.clone(),
        );

        let r = root.sub_registry_with_prefix("peer");
        r.register(
            "send_queue_messages",
            "Messages queued for peers, all peers together",
            m.peer_send_queue.clone(),
        );
        r.register_collector(Box::new(scraped::Transport(m.transport.clone())));

        let r = root.sub_registry_with_prefix("tls");
        r.register(
            "certificate_expiry_timestamp_seconds",
            "When this node's TLS certificate expires, Unix seconds (0 without TLS)",
            m.tls_certificate_expiry.clone(),
        );

        let g = &m.groups;
        let r = root.sub_registry_with_prefix("group");
        r.register(
            "commit_latency_seconds",
            "Time from a client's submission at this replica to its delivery here",
            g.commit_latency.clone(),
        );
        r.register(
            "batch_commands",
            "Commands handed to the protocol core in one batch",
            g.batch_commands.clone(),
        );
        r.register(
            "submitted",
            "Commands submitted at this replica",
            g.submitted.clone(),
        );
        r.register(
            "delivered",
            "Commands delivered (applied) at this replica",
            g.deliveries.clone(),
        );
        r.register(
            "rejected",
            "Submissions refused (no leader, busy)",
            g.rejected.clone(),
        );
        r.register(
            "role",
            "0 electing, 1 following or proposing, 2 leading",
            g.role.clone(),
        );
        r.register("epoch", "Current epoch or view", g.epoch.clone());
        r.register(
            "applied_slot",
            "Last slot applied to the state machine",
            g.applied_slot.clone(),
        );
        r.register(
            "snapshot_slot",
            "Slot of the latest snapshot",
            g.snapshot_slot.clone(),
        );
        r.register(
            "snapshot_age_seconds",
            "Seconds since the latest snapshot",
            g.snapshot_age_seconds.clone(),
        );
        r.register(
            "snapshots_taken",
            "Snapshots taken by this replica",
            g.snapshots_taken.clone(),
        );
        r.register(
            "snapshots_installed",
            "Snapshots received from a peer and installed",
            g.snapshots_installed.clone(),
        );
        r.register(
            "pending_requests",
            "Client requests waiting for their delivery here",
            g.pending_requests.clone(),
        );
        r.register(
            "outbox_held_messages",
            "Messages held back until a log write is durable",
            g.outbox_held.clone(),
        );
        r.register(
            "messages_sent",
            "Peer messages sent, by type",
            g.messages_sent.clone(),
        );
        r.register(
            "messages_received",
            "Peer messages received, by type",
            g.messages_received.clone(),
        );
        r.register(
            "cross_group_messages",
            "Messages this group's state machine sent to other groups (from the leader)",
            g.group_messages.clone(),
        );

        let r = root.sub_registry_with_prefix("protocol");
        r.register_collector(Box::new(readings::Collector(m.readings.clone())));

        let r = root.sub_registry_with_prefix("zk");
        r.register(
            "limited",
            "ZooKeeper clients refused, closed, failed or slowed by a limit (label: the [zookeeper] key)",
            zk_front().limited.clone(),
        );
        r.register(
            "sasl",
            "SASL DIGEST-MD5 exchanges on the ZooKeeper client port, by outcome",
            zk_front().sasl.clone(),
        );
        r.register_collector(Box::new(scraped::ZooKeeper(m.zk.clone())));

        let r = root.sub_registry_with_prefix("kv");
        r.register(
            "commits",
            "SconeKV transactions (and single-key writes) committed, asked at this node",
            kv().commits.clone(),
        );
        r.register(
            "aborts",
            "SconeKV transactions aborted, asked at this node, by reason (conflict, client, malformed, other)",
            kv().aborts.clone(),
        );
        r.register(
            "undecided",
            "SconeKV commits and aborts asked at this node that got no decision (refused, busy, unavailable, timed out)",
            kv().undecided.clone(),
        );
        root.sub_registry_with_prefix("etcd").register(
            "requests",
            "Requests to this node's etcd API, by gRPC method (a Watch or LeaseKeepAlive stream counts once, when opened)",
            etcd().requests.clone(),
        );
        Metrics {
            registry: root,
            ..m
        }
    }

    /// Export the ZooKeeper client port's numbers (`mntr`'s) from `source`, read at each
    /// scrape; held weakly, so a stopped front end simply stops being reported.
    pub fn zookeeper(&self, source: Weak<dyn ZkSource>) {
        *self.zk.lock().expect("zk source") = Some(source);
    }

    /// The handles of group `id`.
    pub fn group(&self, id: GroupId) -> GroupMetrics {
        let g = &self.groups;
        let l = GroupLabel {
            group: id.to_string(),
        };
        GroupMetrics {
            id,
            commit_latency: g.commit_latency.get_or_create(&l).clone(),
            batch_commands: g.batch_commands.get_or_create(&l).clone(),
            submitted: g.submitted.get_or_create(&l).clone(),
            deliveries: g.deliveries.get_or_create(&l).clone(),
            rejected: g.rejected.get_or_create(&l).clone(),
            role: g.role.get_or_create(&l).clone(),
            epoch: g.epoch.get_or_create(&l).clone(),
            applied_slot: g.applied_slot.get_or_create(&l).clone(),
            snapshot_slot: g.snapshot_slot.get_or_create(&l).clone(),
            snapshot_age_seconds: g.snapshot_age_seconds.get_or_create(&l).clone(),
            snapshots_taken: g.snapshots_taken.get_or_create(&l).clone(),
            snapshots_installed: g.snapshots_installed.get_or_create(&l).clone(),
            pending_requests: g.pending_requests.get_or_create(&l).clone(),
            outbox_held: g.outbox_held.get_or_create(&l).clone(),
            group_messages: g.group_messages.get_or_create(&l).clone(),
            sent: HashMap::new(),
            received: HashMap::new(),
            sent_family: g.messages_sent.clone(),
            received_family: g.messages_received.clone(),
            readings: self.readings.clone(),
            label: l.group,
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = encode(&mut out, &self.registry);
        out
    }
}

pub fn seconds(us: u64) -> f64 {
    us as f64 / 1e6
}
