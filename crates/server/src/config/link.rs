//! `[link_emulation]`: the emulated delay, jitter and bandwidth of this node's peer links, and
//! the per-destination overrides (`[link_emulation.peers.<id>]`), checked and turned into the
//! transport's settings.

use anyhow::{bail, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use synod_core::NodeId;

use super::{MenciusTuning, PaxosTuning, ZabTuning};

/// `[link_emulation]`: what every message this node sends to a peer goes through, as on a
/// slower network (crates/server/src/transport/link.rs). All zero (the default) is off.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LinkEmulationConfig {
    /// One-way delay added to every peer message, in milliseconds (fractions allowed; the
    /// transport's timer has millisecond resolution and rounds up).
    pub delay_ms: f64,
    /// Extra delay, uniform in [0, jitter_ms], per message, in milliseconds; a link never
    /// reorders.
    pub jitter_ms: f64,
    /// This node's outgoing bandwidth in Mbit/s (10^6 bits), shared by all its peer links, as
    /// one network interface; 0 is unlimited.
    pub bandwidth_mbit: f64,
    /// Per-destination overrides, for asymmetric links: `[link_emulation.peers.3]` sets the
    /// link from this node to node 3 (its id among `peers`; this node's own id is ignored, so
    /// every node may share one table).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub peers: BTreeMap<String, PeerLinkConfig>,
}

/// `[link_emulation.peers.<id>]`: the link from this node to one peer. Unset keys take the
/// node's `[link_emulation]` values.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PeerLinkConfig {
    /// One-way delay of this link, in milliseconds.
    pub delay_ms: Option<f64>,
    /// Extra delay, uniform in [0, jitter_ms], per message of this link, in milliseconds.
    pub jitter_ms: Option<f64>,
    /// This link's own bandwidth in Mbit/s, on top of the node's interface (both must carry a
    /// message before it leaves); 0 or unset is no limit of its own.
    pub bandwidth_mbit: Option<f64>,
}

fn ms(v: f64) -> std::time::Duration {
    std::time::Duration::from_secs_f64(v / 1_000.0)
}

fn bits(mbit: f64) -> u64 {
    (mbit * 1e6).round() as u64
}

/// Largest emulated delay or jitter: beyond this a cluster could not keep a leader anyway.
const LINK_DELAY_MS_MAX: f64 = 10_000.0;
/// Emulated bandwidth bounds, in Mbit/s: 1 kbit/s to 1 Tbit/s.
const LINK_MBIT_MIN: f64 = 0.001;
const LINK_MBIT_MAX: f64 = 1_000_000.0;

impl LinkEmulationConfig {
    /// The transport's form of every link but overridden ones.
    pub fn emulation(&self) -> crate::transport::LinkEmulation {
        crate::transport::LinkEmulation {
            delay: ms(self.delay_ms),
            jitter: ms(self.jitter_ms),
            bits_per_s: bits(self.bandwidth_mbit),
            link_bits_per_s: 0,
        }
    }

    /// The transport's form of every link of node `me` (validated: ids are members).
    pub fn emulations(&self, me: NodeId) -> crate::transport::LinkEmulations {
        let all = self.emulation();
        let peers = self
            .peers
            .iter()
            .filter_map(|(id, p)| {
                let id: NodeId = id.parse().ok()?;
                (id != me).then(|| {
                    let link = crate::transport::LinkEmulation {
                        delay: p.delay_ms.map_or(all.delay, ms),
                        jitter: p.jitter_ms.map_or(all.jitter, ms),
                        bits_per_s: all.bits_per_s,
                        link_bits_per_s: p.bandwidth_mbit.map_or(0, bits),
                    };
                    (id, link)
                })
            })
            .collect();
        crate::transport::LinkEmulations { all, peers }
    }

    /// The longest one-way delay of any link (with its whole jitter), in milliseconds.
    fn delay_ms_max(&self) -> f64 {
        self.peers
            .values()
            .map(|p| p.delay_ms.unwrap_or(self.delay_ms) + p.jitter_ms.unwrap_or(self.jitter_ms))
            .fold(self.delay_ms + self.jitter_ms, f64::max)
    }

    /// `paxos`, `mencius`: the PFT and Mencius timers when a group runs them.
    pub(super) fn validate(
        &self,
        members: &BTreeMap<NodeId, super::PeerAddr>,
        zab: &ZabTuning,
        paxos: Option<&PaxosTuning>,
        mencius: Option<&MenciusTuning>,
    ) -> Result<()> {
        let check = |key: &str, delay: Option<f64>, jitter: Option<f64>, mbit: Option<f64>| {
            for (k, v) in [("delay_ms", delay), ("jitter_ms", jitter)] {
                if let Some(v) = v {
                    if !v.is_finite() || !(0.0..=LINK_DELAY_MS_MAX).contains(&v) {
                        bail!("config key {key}.{k}: {v} is outside 0..={LINK_DELAY_MS_MAX}");
                    }
                }
            }
            if let Some(mbit) = mbit {
                if !mbit.is_finite()
                    || (mbit != 0.0 && !(LINK_MBIT_MIN..=LINK_MBIT_MAX).contains(&mbit))
                {
                    bail!(
                        "config key {key}.bandwidth_mbit: {mbit} is neither 0 (unlimited) nor \
                         within {LINK_MBIT_MIN}..={LINK_MBIT_MAX}"
                    );
                }
            }
            Ok(())
        };
        check(
            "link_emulation",
            Some(self.delay_ms),
            Some(self.jitter_ms),
            Some(self.bandwidth_mbit),
        )?;
        for (id, p) in &self.peers {
            let key = format!("link_emulation.peers.{id}");
            if !id.parse::<NodeId>().is_ok_and(|i| members.contains_key(&i)) {
                bail!(
                    "config key {key}: '{id}' is not one of the peers ({:?})",
                    members.keys().collect::<Vec<_>>()
                );
            }
            check(&key, p.delay_ms, p.jitter_ms, p.bandwidth_mbit)?;
        }
        // A heartbeat and its answer must come back well within the failure detector's
        // timeouts, or the cluster elects forever.
        let round_trip_ms = 2.0 * self.delay_ms_max();
        let timeout_ms = zab.follower_timeout_ms.min(zab.leader_timeout_ms) as f64;
        if round_trip_ms >= timeout_ms / 2.0 {
            bail!(
                "config key link_emulation.delay_ms: a round trip of 2 × (delay_ms + jitter_ms) \
                 = {round_trip_ms} ms must be under half of zab.follower_timeout_ms and \
                 zab.leader_timeout_ms ({timeout_ms} ms); raise those timeouts (and \
                 zab.discovery_timeout_ms) for large delays"
            );
        }
        if let Some(p) = paxos {
            let timeout_ms = p.view_change_timeout_ms as f64;
            if round_trip_ms >= timeout_ms / 2.0 {
                bail!(
                    "config key link_emulation.delay_ms: a round trip of 2 × (delay_ms + \
                     jitter_ms) = {round_trip_ms} ms must be under half of \
                     paxos.view_change_timeout_ms ({timeout_ms} ms); raise it for large delays"
                );
            }
        }
        if let Some(m) = mencius {
            let timeout_ms = m.suspect_timeout_ms as f64;
            if round_trip_ms >= timeout_ms / 2.0 {
                bail!(
                    "config key link_emulation.delay_ms: a round trip of 2 × (delay_ms + \
                     jitter_ms) = {round_trip_ms} ms must be under half of \
                     mencius.suspect_timeout_ms ({timeout_ms} ms); raise it for large delays"
                );
            }
        }
        Ok(())
    }
}
