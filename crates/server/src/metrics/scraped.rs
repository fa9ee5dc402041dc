//! Metrics read at scrape time from numbers kept elsewhere: the build, the peer transport's
//! atomics ([`TransportStats`]) and the ZooKeeper client port ([`ZkSource`], the numbers
//! `mntr` shows). Each is a Prometheus counter or gauge of its own (frames apart from bytes).

use crate::transport::TransportStats;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    ConstCounter::new(v).encode(e.encode_descriptor(name, help, None, MetricType::Counter)?)
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, v: i64) -> std::fmt::Result {
    ConstGauge::new(v).encode(e.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    commit: &'static str,
}

/// `synod_build_info{version, commit} 1`, as Prometheus' own `prometheus_build_info`.
#[derive(Debug)]
pub struct BuildInfo;

impl prometheus_client::collector::Collector for BuildInfo {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let labels = BuildLabels {
            version: crate::version::VERSION,
            commit: crate::version::COMMIT,
        };
        let mut m = e.encode_descriptor(
            "build_info",
            "The synod binary: its version and git commit (value 1)",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(1i64).encode(m.encode_family(&labels)?)
    }
}

/// The peer transport's counters (`synod_peer_*_total`), read from its atomics.
#[derive(Debug)]
pub struct Transport(pub Arc<TransportStats>);

impl prometheus_client::collector::Collector for Transport {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let t = &self.0;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for (name, help, v) in [
            (
                "frames_received",
                "Frames received from peers",
                &t.frames_in,
            ),
            ("frames_sent", "Frames sent to peers", &t.frames_out),
            ("received_bytes", "Bytes received from peers", &t.bytes_in),
            ("sent_bytes", "Bytes sent to peers", &t.bytes_out),
            (
                "handshakes_rejected",
                "Peer handshakes refused (wrong cluster, unknown node, bad certificate)",
                &t.rejected_handshakes,
            ),
            (
                "bad_frames",
                "Malformed or oversized frames from peers (the connection is dropped)",
                &t.bad_frames,
            ),
            (
                "dropped_frames",
                "Frames of a group this node does not run: dropped, the shared connection kept",
                &t.dropped_frames,
            ),
            (
                "slow_resets",
                "Peer connections reset because the peer did not drain its send queue",
                &t.slow_peer_resets,
            ),
        ] {
            counter(&mut e, name, help, get(v))?;
        }
        Ok(())
    }
}

/// Latency buckets: 50 µs doubling to ~3.3 s, then +Inf (as the group's commit latency).
const BUCKETS: usize = 17;

/// A latency histogram of atomics: one `fetch_add` per bucket, sum and count per observation,
/// no lock (the ZooKeeper port records every request from many connection tasks). It keeps
/// the min and max too, for `mntr`.
#[derive(Debug)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; BUCKETS + 1],
    sum_us: AtomicU64,
    count: AtomicU64,
    min_us: AtomicU64,
    max_us: AtomicU64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            buckets: Default::default(),
            sum_us: AtomicU64::new(0),
            count: AtomicU64::new(0),
            min_us: AtomicU64::new(u64::MAX),
            max_us: AtomicU64::new(0),
        }
    }
}

impl LatencyHistogram {
    /// The upper bound of bucket `i`, µs.
    fn bound_us(i: usize) -> u64 {
        50 << i
    }

    pub fn observe_us(&self, us: u64) {
        let i = (0..BUCKETS)
            .find(|&i| us <= Self::bound_us(i))
            .unwrap_or(BUCKETS);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.min_us.fetch_min(us, Ordering::Relaxed);
        self.max_us.fetch_max(us, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
    pub fn sum_us(&self) -> u64 {
        self.sum_us.load(Ordering::Relaxed)
    }
    /// The smallest latency seen (0 before the first).
    pub fn min_us(&self) -> u64 {
        match self.min_us.load(Ordering::Relaxed) {
            u64::MAX => 0,
            v => v,
        }
    }
    pub fn max_us(&self) -> u64 {
        self.max_us.load(Ordering::Relaxed)
    }

    pub(super) fn encode(
        &self,
        e: &mut DescriptorEncoder,
        name: &str,
        help: &str,
    ) -> std::fmt::Result {
        let buckets: Vec<(f64, u64)> = (0..=BUCKETS)
            .map(|i| {
                let le = if i == BUCKETS {
                    f64::MAX
                } else {
                    Self::bound_us(i) as f64 / 1e6
                };
                (le, self.buckets[i].load(Ordering::Relaxed))
            })
            .collect();
        // Count from the buckets, so that `_count` equals the `+Inf` bucket in one scrape.
        let count = buckets.iter().map(|b| b.1).sum();
        let mut m = e.encode_descriptor(name, help, None, MetricType::Histogram)?;
        m.encode_histogram::<()>(self.sum_us() as f64 / 1e6, count, &buckets, None)
    }
}

/// The numbers of a ZooKeeper client port, as its `mntr` shows them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZkSample {
    /// Open client connections with a session (`zk_num_alive_connections`).
    pub connections: u64,
    /// Sessions of the whole ensemble (replicated; `zk_global_sessions`).
    pub sessions: u64,
    /// Znodes in the tree (`zk_znode_count`).
    pub znodes: u64,
    /// Watches registered at this server (`zk_watch_count`).
    pub watches: u64,
    /// Ephemeral znodes (`zk_ephemerals_count`).
    pub ephemerals: u64,
    /// Requests read from clients and not yet answered (`zk_outstanding_requests`).
    pub outstanding: u64,
    /// Requests read (`zk_packets_received`) and answered (`zk_packets_sent`).
    pub received: u64,
    pub sent: u64,
    /// The zxid last applied here.
    pub last_zxid: i64,
}

/// A ZooKeeper client port, sampled at scrape time.
pub trait ZkSource: Send + Sync {
    /// Its numbers now. Must be cheap: counters and sizes already maintained, no walk of
    /// the data tree.
    fn sample(&self) -> ZkSample;
    /// Its request latencies (read to reply).
    fn latency(&self) -> &LatencyHistogram;
}

/// The ZooKeeper gauges and counters, from the source attached (none without a client port).
pub struct ZooKeeper(pub Arc<Mutex<Option<Weak<dyn ZkSource>>>>);

impl std::fmt::Debug for ZooKeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ZooKeeper")
    }
}

impl prometheus_client::collector::Collector for ZooKeeper {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let source = self
            .0
            .lock()
            .expect("zk source")
            .as_ref()
            .and_then(Weak::upgrade);
        let Some(source) = source else {
            return Ok(());
        };
        let s = source.sample();
        let n = |v: u64| v as i64;
        gauge(
            &mut e,
            "connections",
            "Open ZooKeeper client connections (zk_num_alive_connections)",
            n(s.connections),
        )?;
        gauge(
            &mut e,
            "sessions",
            "ZooKeeper sessions of the ensemble (zk_global_sessions)",
            n(s.sessions),
        )?;
        gauge(
            &mut e,
            "znodes",
            "Znodes in the data tree (zk_znode_count)",
            n(s.znodes),
        )?;
        gauge(
            &mut e,
            "watches",
            "Watches registered at this server (zk_watch_count)",
            n(s.watches),
        )?;
        gauge(
            &mut e,
            "ephemerals",
            "Ephemeral znodes (zk_ephemerals_count)",
            n(s.ephemerals),
        )?;
        gauge(
            &mut e,
            "outstanding_requests",
            "Client requests read and not yet answered (zk_outstanding_requests)",
            n(s.outstanding),
        )?;
        gauge(
            &mut e,
            "last_zxid",
            "The zxid last applied at this server",
            s.last_zxid,
        )?;
        counter(
            &mut e,
            "packets_received",
            "Client requests read (zk_packets_received)",
            s.received,
        )?;
        counter(
            &mut e,
            "packets_sent",
            "Client requests answered (zk_packets_sent)",
            s.sent,
        )?;
        let l = source.latency();
        l.encode(
            &mut e,
            "request_latency_seconds",
            "From reading a client request to encoding its reply (zk_avg/min/max_latency)",
        )?;
        let max = ConstGauge::new(l.max_us() as f64 / 1e6);
        max.encode(e.encode_descriptor(
            "request_latency_max_seconds",
            "The slowest client request since start (zk_max_latency)",
            None,
            MetricType::Gauge,
        )?)
    }
}
