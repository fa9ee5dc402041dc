//! The protocol cores' own readings (`Protocol::gauges`: a name and a number each), exported
//! as `synod_protocol_<name>{group}`. A core names its readings without saying which are
//! counters, so [`KNOWN`] says it for the readings of the cores in this tree, with the unit in
//! the name (`paxos_catch_up_us` becomes `synod_protocol_paxos_catch_up_seconds_total`). A
//! reading not in the table is exported as a gauge of its own name, so a new core's readings
//! show up at once; add them to the table (the convention test in `tests.rs` lists every name).
//!
//! The host samples the readings at housekeeping (every 100 ms) into a small map; the scrape
//! encodes the map. Nothing here runs per command.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::collections::BTreeMap;
use std::sync::Mutex;
use synod_core::GroupId;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// How one reading is exported.
#[derive(Clone, Copy, Debug)]
pub struct Reading {
    /// The core's name for it.
    pub core: &'static str,
    /// The metric's name after `synod_protocol_` (a counter's without its `_total`).
    pub name: &'static str,
    pub kind: Kind,
    /// Multiplies the core's number into the metric's unit (µs and ms into seconds).
    pub scale: f64,
    pub help: &'static str,
}

const fn counter(core: &'static str, name: &'static str, help: &'static str) -> Reading {
    Reading {
        core,
        name,
        kind: Kind::Counter,
        scale: 1.0,
        help,
    }
}

const fn gauge(core: &'static str, name: &'static str, help: &'static str) -> Reading {
    Reading {
        core,
        name,
        kind: Kind::Gauge,
        scale: 1.0,
        help,
    }
}

/// The readings of the cores in this tree (crates/paxos, crates/mencius, crates/zab
/// `fn gauges`).
pub const KNOWN: &[Reading] = &[
    counter(
        "paxos_view_changes",
        "paxos_view_changes",
        "PFT Paxos view changes",
    ),
    counter(
        "paxos_catch_ups",
        "paxos_catch_ups",
        "PFT Paxos catch-ups started",
    ),
    counter(
        "paxos_catch_up_orders",
        "paxos_catch_up_orders",
        "PFT Paxos orders fetched by catch-ups",
    ),
    Reading {
        core: "paxos_catch_up_us",
        name: "paxos_catch_up_seconds",
        kind: Kind::Counter,
        scale: 1e-6,
        help: "Time spent catching up, PFT Paxos",
    },
    counter(
        "paxos_state_transfers",
        "paxos_state_transfers",
        "PFT Paxos state transfers",
    ),
    gauge(
        "paxos_batch_size",
        "paxos_batch_commands_mean",
        "Mean commands per PFT Paxos batch since start",
    ),
    Reading {
        core: "paxos_vc_timeout_ms",
        name: "paxos_view_change_timeout_seconds",
        kind: Kind::Gauge,
        scale: 1e-3,
        help: "PFT Paxos's current view-change timeout",
    },
    gauge(
        "mencius_index",
        "mencius_index",
        "Mencius: the next own instance to suggest to",
    ),
    gauge(
        "mencius_expected",
        "mencius_expected",
        "Mencius: the next instance to deliver",
    ),
    gauge(
        "mencius_inflight",
        "mencius_inflight_instances",
        "Mencius: instances suggested and not yet learned",
    ),
    gauge(
        "mencius_queued",
        "mencius_queued_commands",
        "Mencius: commands waiting for an instance",
    ),
    counter(
        "mencius_suggested",
        "mencius_suggested",
        "Mencius: values suggested",
    ),
    counter(
        "mencius_skips_sent",
        "mencius_skips_sent",
        "Mencius: skips sent",
    ),
    counter(
        "mencius_skips_inferred",
        "mencius_skips_inferred",
        "Mencius: skips inferred from a later instance",
    ),
    counter(
        "mencius_revocations",
        "mencius_revocations",
        "Mencius: revocations started",
    ),
    counter(
        "mencius_revoked_instances",
        "mencius_revoked_instances",
        "Mencius: instances revoked",
    ),
    counter(
        "mencius_resuggested",
        "mencius_resuggested",
        "Mencius: commands suggested again after a revocation",
    ),
    counter(
        "mencius_rejected",
        "mencius_rejected",
        "Mencius: suggestions rejected",
    ),
    counter(
        "mencius_out_of_order",
        "mencius_out_of_order",
        "Mencius: messages received out of order",
    ),
    counter("mencius_syncs", "mencius_syncs", "Mencius: syncs"),
    counter(
        "mencius_catch_up",
        "mencius_catch_ups",
        "Mencius: catch-ups",
    ),
    counter(
        "mencius_duplicates",
        "mencius_duplicates",
        "Mencius: duplicate messages",
    ),
    gauge(
        "coin_lambda",
        "zab_coin_lambda",
        "ZabCT follower: the coin's measured lambda",
    ),
    Reading {
        core: "coin_d_ms",
        name: "zab_coin_d_seconds",
        kind: Kind::Gauge,
        scale: 1e-3,
        help: "ZabCT follower: the coin's measured d",
    },
    gauge(
        "coin_p",
        "zab_coin_p",
        "ZabCT follower: the coin's probability",
    ),
    gauge(
        "zab_mode",
        "zab_mode",
        "ZabCT follower: 1 while the epoch runs plain Zab",
    ),
];

/// How the core's reading `core` is exported.
pub fn reading(core: &'static str) -> Reading {
    KNOWN
        .iter()
        .find(|r| r.core == core)
        .copied()
        .unwrap_or(Reading {
            core,
            name: core,
            kind: Kind::Gauge,
            scale: 1.0,
            help: "A protocol core's reading (not in synod's table: exported as a gauge)",
        })
}

/// The last readings of every group's core: (core's name, group) → value.
#[derive(Debug, Default)]
pub struct Readings(Mutex<BTreeMap<(&'static str, GroupId), f64>>);

impl Readings {
    /// The group's readings now, replacing its earlier ones (a reading the core no longer
    /// reports, e.g. ZabCT's coin outside a synced follower, is no longer exported).
    pub fn set(&self, group: GroupId, values: &[(&'static str, f64)]) {
        let mut m = self.0.lock().expect("readings");
        m.retain(|&(_, g), _| g != group);
        for &(name, v) in values {
            m.insert((name, group), v);
        }
    }
}

#[derive(Debug)]
pub struct Collector(pub std::sync::Arc<Readings>);

impl prometheus_client::collector::Collector for Collector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let m = self.0.lock_values();
        let mut i = 0;
        let entries: Vec<_> = m.iter().map(|(&(n, g), &v)| (n, g, v)).collect();
        drop(m);
        while i < entries.len() {
            let core = entries[i].0;
            let r = reading(core);
            let kind = match r.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
            };
            let mut e = encoder.encode_descriptor(r.name, r.help, None, kind)?;
            while i < entries.len() && entries[i].0 == core {
                let (_, group, v) = entries[i];
                let label = super::GroupLabel {
                    group: group.to_string(),
                };
                let v = v * r.scale;
                let f = e.encode_family(&label)?;
                match r.kind {
                    Kind::Counter => ConstCounter::new(v).encode(f)?,
                    Kind::Gauge => ConstGauge::new(v).encode(f)?,
                }
                i += 1;
            }
        }
        Ok(())
    }
}

impl Readings {
    fn lock_values(&self) -> std::sync::MutexGuard<'_, BTreeMap<(&'static str, GroupId), f64>> {
        self.0.lock().expect("readings")
    }
}
