//! What the servers spent during a measured interval: peer-transport frames and bytes and the
//! commands delivered from each synod node's `/metrics` and CPU time from /proc/<pid>/stat, snapshotted exactly when the
//! measured window opens and closes. `synod bench protocols` reports them per operation; the
//! simulator's CPU cost model (per message, per byte) is calibrated from them.

use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};

use crate::procs::{admin_http, clock_ticks_per_second, cpu_ticks, Cluster, Kind};

/// The peer-transport counters of one node (or their sum over nodes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Transport {
    pub frames_in: u64,
    pub frames_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

impl Transport {
    fn add(self, o: Transport) -> Transport {
        Transport {
            frames_in: self.frames_in + o.frames_in,
            frames_out: self.frames_out + o.frames_out,
            bytes_in: self.bytes_in + o.bytes_in,
            bytes_out: self.bytes_out + o.bytes_out,
        }
    }

    /// `self - earlier`; None if a counter went backwards (a node restarted in between).
    fn since(self, earlier: Transport) -> Option<Transport> {
        Some(Transport {
            frames_in: self.frames_in.checked_sub(earlier.frames_in)?,
            frames_out: self.frames_out.checked_sub(earlier.frames_out)?,
            bytes_in: self.bytes_in.checked_sub(earlier.bytes_in)?,
            bytes_out: self.bytes_out.checked_sub(earlier.bytes_out)?,
        })
    }
}

/// The value of the sample `name` (with its labels, exactly as written) in a Prometheus text
/// exposition, as a non-negative integer. An error if it is missing or its value is not one.
pub(super) fn prom_counter(text: &str, name: &str) -> Result<u64> {
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        // `name value [timestamp]`; a longer name that merely starts with `name` is another
        // sample.
        if !rest.starts_with([' ', '\t']) {
            continue;
        }
        let v = rest
            .split_whitespace()
            .next()
            .ok_or_else(|| anyhow!("{name}: no value"))?;
        if let Ok(n) = v.parse::<u64>() {
            return Ok(n);
        }
        return match v.parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x < 2f64.powi(63) => {
                Ok(x as u64)
            }
            _ => Err(anyhow!("{name}: '{v}' is not a counter value")),
        };
    }
    bail!("{name}: not in the metrics")
}

/// The transport counters of a synod node's `/metrics` text
/// (`synod_peer_frames_received_total` and so on, crates/server/src/metrics/scraped.rs).
pub(super) fn parse_transport(text: &str) -> Result<Transport> {
    let c = |name: &str| prom_counter(text, &format!("synod_peer_{name}_total"));
    Ok(Transport {
        frames_in: c("frames_received")?,
        frames_out: c("frames_sent")?,
        bytes_in: c("received_bytes")?,
        bytes_out: c("sent_bytes")?,
    })
}

/// Commands delivered in the ZooKeeper group (group 0) at a synod node: its writes (reads are
/// served locally), sessions' commands included.
pub(super) fn parse_deliveries(text: &str) -> Result<u64> {
    prom_counter(text, "synod_group_delivered_total{group=\"0\"}")
}

/// The servers of a cluster, as the blocking snapshot needs them (it runs off the async
/// workers, on tokio's blocking pool).
#[derive(Clone, Debug)]
pub(super) struct ServerProbe {
    pids: Vec<Option<u32>>,
    /// Admin addresses whose `/metrics` to scrape (synod only; empty for other systems).
    admin: Vec<String>,
}

/// The counters of all servers together at one instant; None where they could not be read
/// (a warning was printed).
#[derive(Clone, Copy, Debug)]
pub(super) struct Snapshot {
    pub cpu_ticks: Option<u64>,
    pub transport: Option<Transport>,
    /// The most commands any node has delivered in group 0: the committed writes.
    pub committed: Option<u64>,
}

impl ServerProbe {
    pub(super) fn of(cl: &Cluster) -> ServerProbe {
        let nodes = 1..=cl.n;
        ServerProbe {
            pids: nodes.clone().map(|i| cl.pid(i)).collect(),
            admin: match cl.kind {
                Kind::Synod { .. } => nodes.map(|i| cl.admin_addr(i)).collect(),
                _ => vec![],
            },
        }
    }

    /// Read every server's CPU time, then scrape every synod node's transport counters
    /// (blocking: a few milliseconds on loopback).
    pub(super) fn snapshot(&self) -> Snapshot {
        let mut cpu = Some(0u64);
        for (i, pid) in self.pids.iter().enumerate() {
            match pid.and_then(cpu_ticks) {
                Some(t) => cpu = cpu.map(|c| c + t),
                None => {
                    eprintln!("  warning: no CPU time for node {} (not running?)", i + 1);
                    cpu = None;
                }
            }
        }
        let mut transport = (!self.admin.is_empty()).then(Transport::default);
        let mut committed = (!self.admin.is_empty()).then_some(0u64);
        for a in &self.admin {
            let scraped = admin_http(a, "GET", "/metrics")
                .and_then(|t| Ok((parse_transport(&t)?, parse_deliveries(&t)?)));
            match scraped {
                Ok((t, d)) => {
                    transport = transport.map(|s| s.add(t));
                    committed = committed.map(|c| c.max(d));
                }
                Err(e) => {
                    eprintln!("  warning: metrics of {a}: {e:#}");
                    transport = None;
                    committed = None;
                }
            }
        }
        Snapshot {
            cpu_ticks: cpu,
            transport,
            committed,
        }
    }
}

/// What all servers together spent during a measured interval, and per completed operation.
/// Peer figures count each message at both ends: sent by one replica, received by another.
/// None where a counter could not be read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerCost {
    pub peer_frames_in: Option<u64>,
    pub peer_frames_out: Option<u64>,
    pub peer_bytes_in: Option<u64>,
    pub peer_bytes_out: Option<u64>,
    pub cpu_seconds: Option<f64>,
    /// Commands committed in group 0 (the writes) during the interval.
    #[serde(default)]
    pub committed: Option<u64>,
    /// Peer frames received plus sent, per operation.
    pub msgs_per_op: Option<f64>,
    /// Peer frames received plus sent, per committed write.
    #[serde(default)]
    pub msgs_per_write: Option<f64>,
    /// Peer bytes received plus sent, per operation.
    pub peer_bytes_per_op: Option<f64>,
    pub cpu_us_per_op: Option<f64>,
    /// CPU per operation over its messages: peer frames in and out, and the client's request
    /// and reply (2).
    pub cpu_us_per_msg: Option<f64>,
}

impl ServerCost {
    /// The cost between two snapshots over `ops` completed operations.
    pub(super) fn between(a: &Snapshot, b: &Snapshot, ops: u64) -> ServerCost {
        let t = match (a.transport, b.transport) {
            (Some(a), Some(b)) => {
                let d = b.since(a);
                if d.is_none() {
                    eprintln!("  warning: transport counters went backwards (a node restarted?)");
                }
                d
            }
            _ => None,
        };
        let cpu_seconds = match (a.cpu_ticks, b.cpu_ticks) {
            (Some(a), Some(b)) if b >= a => Some((b - a) as f64 / clock_ticks_per_second() as f64),
            _ => None,
        };
        let per_op = |v: f64| (ops > 0).then(|| v / ops as f64);
        let msgs_per_op = t.and_then(|t| per_op((t.frames_in + t.frames_out) as f64));
        let cpu_us_per_op = cpu_seconds.and_then(|c| per_op(c * 1e6));
        let committed = match (a.committed, b.committed) {
            (Some(a), Some(b)) => b.checked_sub(a),
            _ => None,
        };
        ServerCost {
            committed,
            msgs_per_write: match (t, committed) {
                (Some(t), Some(w)) if w > 0 => Some((t.frames_in + t.frames_out) as f64 / w as f64),
                _ => None,
            },
            peer_frames_in: t.map(|t| t.frames_in),
            peer_frames_out: t.map(|t| t.frames_out),
            peer_bytes_in: t.map(|t| t.bytes_in),
            peer_bytes_out: t.map(|t| t.bytes_out),
            cpu_seconds,
            msgs_per_op,
            peer_bytes_per_op: t.and_then(|t| per_op((t.bytes_in + t.bytes_out) as f64)),
            cpu_us_per_op,
            cpu_us_per_msg: match (cpu_us_per_op, msgs_per_op) {
                (Some(c), Some(m)) => Some(c / (m + 2.0)),
                _ => None,
            },
        }
    }

    /// The table columns ([`COST_HEADER`]), "—" where a figure is missing.
    pub(super) fn cells(cost: Option<&ServerCost>) -> Vec<String> {
        let f = |v: Option<f64>, prec: usize| match v {
            Some(v) => format!("{v:.prec$}"),
            None => "—".into(),
        };
        let c = cost.cloned().unwrap_or_default();
        vec![
            f(c.msgs_per_op, 2),
            f(c.msgs_per_write, 2),
            f(c.peer_bytes_per_op, 0),
            f(c.cpu_us_per_op, 1),
            f(c.cpu_us_per_msg, 2),
        ]
    }
}

pub(super) const COST_HEADER: [&str; 5] = [
    "msgs/op",
    "msgs/write",
    "peer bytes/op",
    "CPU µs/op",
    "CPU µs/msg",
];
