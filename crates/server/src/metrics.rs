//! Prometheus metrics of a replica (text format on the admin port's `/metrics`).

use crate::transport::TransportStats;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    pub queue: &'static str,
}

pub struct Metrics {
    registry: Registry,
    pub commit_latency: Histogram,
    pub fsync_latency: Histogram,
    pub fsync_batch_ops: Histogram,
    pub proposals: Counter,
    pub deliveries: Counter,
    pub rejected: Counter,
    pub messages_sent: Family<KindLabel, Counter>,
    pub messages_received: Family<KindLabel, Counter>,
    pub role: Gauge,
    pub epoch: Gauge,
    pub applied_slot: Gauge,
    pub log_bytes: Gauge,
    pub snapshot_slot: Gauge,
    pub snapshot_age_seconds: Gauge,
    pub snapshots_taken: Counter,
    pub snapshots_installed: Counter,
    pub queue_depth: Family<QueueLabel, Gauge>,
    pub transport: Arc<TransportStats>,
    transport_gauges: Family<KindLabel, Gauge>,
}

fn latency_buckets() -> impl Iterator<Item = f64> {
    // 50 µs … ~3.3 s, doubling.
    prometheus_client::metrics::histogram::exponential_buckets(50e-6, 2.0, 17)
}

impl Metrics {
    pub fn new(transport: Arc<TransportStats>) -> Self {
        let m = Metrics {
            registry: Registry::with_prefix("synod"),
            commit_latency: Histogram::new(latency_buckets()),
            fsync_latency: Histogram::new(latency_buckets()),
            fsync_batch_ops: Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(1.0, 2.0, 14),
            ),
            proposals: Counter::default(),
            deliveries: Counter::default(),
            rejected: Counter::default(),
            messages_sent: Family::default(),
            messages_received: Family::default(),
            role: Gauge::default(),
            epoch: Gauge::default(),
            applied_slot: Gauge::default(),
            log_bytes: Gauge::default(),
            snapshot_slot: Gauge::default(),
            snapshot_age_seconds: Gauge::default(),
            snapshots_taken: Counter::default(),
            snapshots_installed: Counter::default(),
            queue_depth: Family::default(),
            transport,
            transport_gauges: Family::default(),
        };
        let mut r = Registry::with_prefix("synod");
        r.register(
            "commit_latency_seconds",
            "Time from a client's submission at this replica to its delivery here",
            m.commit_latency.clone(),
        );
        r.register(
            "fsync_latency_seconds",
            "Duration of one WAL batch write and fdatasync",
            m.fsync_latency.clone(),
        );
        r.register(
            "fsync_batch_ops",
            "Storage ops made durable by one fdatasync (group commit)",
            m.fsync_batch_ops.clone(),
        );
        r.register(
            "submitted",
            "Commands submitted at this replica",
            m.proposals.clone(),
        );
        r.register(
            "deliveries",
            "Commands delivered (applied) at this replica",
            m.deliveries.clone(),
        );
        r.register(
            "rejected",
            "Submissions refused (no leader, busy)",
            m.rejected.clone(),
        );
        r.register(
            "messages_sent",
            "Peer messages sent, by type",
            m.messages_sent.clone(),
        );
        r.register(
            "messages_received",
            "Peer messages received, by type",
            m.messages_received.clone(),
        );
        r.register("role", "0 electing, 1 following, 2 leading", m.role.clone());
        r.register("epoch", "Current epoch", m.epoch.clone());
        r.register(
            "applied_slot",
            "Last slot applied to the state machine",
            m.applied_slot.clone(),
        );
        r.register(
            "log_bytes",
            "Bytes of write-ahead log on disk",
            m.log_bytes.clone(),
        );
        r.register(
            "snapshot_slot",
            "Slot of the latest snapshot",
            m.snapshot_slot.clone(),
        );
        r.register(
            "snapshot_age_seconds",
            "Seconds since the latest snapshot",
            m.snapshot_age_seconds.clone(),
        );
        r.register(
            "snapshots_taken",
            "Snapshots taken by this replica",
            m.snapshots_taken.clone(),
        );
        r.register(
            "snapshots_installed",
            "Snapshots received from a leader and installed",
            m.snapshots_installed.clone(),
        );
        r.register(
            "queue_depth",
            "Depth of internal queues",
            m.queue_depth.clone(),
        );
        r.register(
            "transport",
            "Peer transport counters",
            m.transport_gauges.clone(),
        );
        Metrics { registry: r, ..m }
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
