//! Prometheus metrics of a node (text format on the admin port's `/metrics`): the host's
//! write-ahead log and transport, and every group's replica, labelled `group="<id>"`.

use crate::transport::TransportStats;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use synod_core::GroupId;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabel {
    pub group: String,
}

/// A protocol core's own gauge (`Protocol::gauges`): its group and the core's name for it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupNameLabel {
    pub group: String,
    pub name: &'static str,
}

/// A gauge of floating-point values.
pub type FloatGauge = Gauge<f64, AtomicU64>;

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
    core: Family<GroupNameLabel, FloatGauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabel {
    pub limit: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
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
    transport_gauges: Family<KindLabel, Gauge>,
    groups: GroupFamilies,
}

/// The metric handles of one group, resolved once (no label lookup on the hot path).
#[derive(Clone)]
pub struct GroupMetrics {
    label: String,
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
    core: HashMap<&'static str, FloatGauge>,
    core_family: Family<GroupNameLabel, FloatGauge>,
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
    /// Set the core's gauges (`Protocol::gauges`: names are the core's, static and few).
    pub fn set_core(&mut self, gauges: &[(&'static str, f64)]) {
        for &(name, v) in gauges {
            let (label, family) = (&self.label, &self.core_family);
            self.core
                .entry(name)
                .or_insert_with(|| {
                    family
                        .get_or_create(&GroupNameLabel {
                            group: label.clone(),
                            name,
                        })
                        .clone()
                })
                .set(v);
        }
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
            core: Family::default(),
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
            transport_gauges: Family::default(),
            groups,
        };
        let mut r = Registry::with_prefix("synod");
        r.register(
            "zk_limited",
            "ZooKeeper clients refused, closed, failed or slowed by a limit (label: the [zookeeper] key)",
            zk_front().limited.clone(),
        );
        r.register(
            "zk_sasl",
            "SASL DIGEST-MD5 exchanges on the ZooKeeper client port, by outcome",
            zk_front().sasl.clone(),
        );
        r.register(
            "fsync_latency_seconds",
            "Duration of one WAL batch write and fdatasync",
            m.fsync_latency.clone(),
        );
        r.register(
            "wal_fsyncs",
            "fdatasyncs of the write-ahead log (one per batch, whatever the groups in it)",
            m.fsyncs.clone(),
        );
        r.register(
            "wal_records_per_fsync",
            "Storage ops of every group made durable by one fdatasync (group commit)",
            m.records_per_fsync.clone(),
        );
        r.register(
            "wal_groups_per_fsync",
            "Groups with a storage op in one fdatasync",
            m.groups_per_fsync.clone(),
        );
        r.register(
            "log_bytes",
            "Bytes of write-ahead log on disk",
            m.log_bytes.clone(),
        );
        r.register(
            "log_segments",
            "Segment files of the write-ahead log",
            m.log_segments.clone(),
        );
        r.register(
            "log_segments_deleted",
            "Log segments unlinked because every group compacted past them",
            m.log_segments_deleted.clone(),
        );
        r.register(
            "peer_send_queue",
            "Messages queued for peers, all peers together",
            m.peer_send_queue.clone(),
        );
        r.register(
            "tls_certificate_expiry_timestamp_seconds",
            "When this node's TLS certificate expires, Unix seconds (0 without TLS)",
            m.tls_certificate_expiry.clone(),
        );
        r.register(
            "transport",
            "Peer transport counters",
            m.transport_gauges.clone(),
        );
        let g = &m.groups;
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
            "deliveries",
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
            "outbox_held",
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
            "group_messages",
            "Messages this group's state machine sent to other groups (from the leader)",
            g.group_messages.clone(),
        );
        r.register(
            "protocol",
            "The protocol core's own gauges and counters, by name (e.g. paxos_view_changes, \
             mencius_revocations)",
            g.core.clone(),
        );
        Metrics { registry: r, ..m }
    }

    /// The handles of group `id`.
    pub fn group(&self, id: GroupId) -> GroupMetrics {
        let g = &self.groups;
        let l = GroupLabel {
            group: id.to_string(),
        };
        GroupMetrics {
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
            core: HashMap::new(),
            core_family: g.core.clone(),
            label: l.group,
        }
    }

    pub fn render(&self) -> String {
        let t = &self.transport;
        for (kind, v) in [
            ("frames_in", &t.frames_in),
            ("frames_out", &t.frames_out),
            ("bytes_in", &t.bytes_in),
            ("bytes_out", &t.bytes_out),
            ("rejected_handshakes", &t.rejected_handshakes),
            ("bad_frames", &t.bad_frames),
            ("dropped_frames", &t.dropped_frames),
            ("slow_peer_resets", &t.slow_peer_resets),
        ] {
            self.transport_gauges
                .get_or_create(&KindLabel { kind })
                .set(v.load(Ordering::Relaxed) as i64);
        }
        let mut out = String::new();
        let _ = encode(&mut out, &self.registry);
        out
    }
}

pub fn seconds(us: u64) -> f64 {
    us as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_gauges_are_exported_by_group_and_name() {
        let m = Metrics::new(Default::default());
        let mut g = m.group(3);
        g.set_core(&[("mencius_revocations", 2.0), ("paxos_batch_size", 1.5)]);
        g.set_core(&[("mencius_revocations", 4.0)]);
        let text = m.render();
        assert!(
            text.contains("synod_protocol{group=\"3\",name=\"mencius_revocations\"} 4.0"),
            "{text}"
        );
        assert!(
            text.contains("synod_protocol{group=\"3\",name=\"paxos_batch_size\"} 1.5"),
            "{text}"
        );
    }

    #[test]
    fn zk_front_counters_are_exported() {
        let m = Metrics::new(Default::default());
        zk_front().limited("max_client_cnxns");
        zk_front().sasl(false);
        let text = m.render();
        assert!(
            text.contains("synod_zk_limited_total{limit=\"max_client_cnxns\"}"),
            "{text}"
        );
        assert!(
            text.contains("synod_zk_sasl_total{outcome=\"failed\"}"),
            "{text}"
        );
    }
}
