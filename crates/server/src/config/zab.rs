//! `[zab]`: the timers and windows of every group running Zab or a Zab variant (defaults:
//! mostly ZooKeeper's; see `synod_zab::Options`).

use anyhow::{bail, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `[zab]`: timers and flow control of the Zab family.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ZabTuning {
    /// Once an election vote has a quorum, how long to wait for a better one before deciding,
    /// in milliseconds.
    pub tick_ms: u64,
    /// Leader → follower heartbeat interval, in milliseconds; also the first resend interval
    /// of election notifications (doubling up to `follower_timeout_ms`). At least `tick_ms`.
    pub heartbeat_ms: u64,
    /// A follower that hears nothing from its leader for this long starts an election, in
    /// milliseconds. At least twice `heartbeat_ms`.
    pub follower_timeout_ms: u64,
    /// A leader that has not heard from a quorum for this long steps down, in milliseconds.
    pub leader_timeout_ms: u64,
    /// A leader that is not established after this long gives up and elects again, in
    /// milliseconds.
    pub discovery_timeout_ms: u64,
    /// Log entries kept behind a snapshot, so that slightly lagging followers get a diff
    /// rather than the whole snapshot, a count of entries.
    pub log_retain: u64,
    /// Proposals an established leader keeps in flight (logged, not yet committed), a count;
    /// beyond it new commands are refused as busy, so a slow quorum pushes back on clients.
    pub max_inflight: u64,
    /// Batches the leader keeps proposed and not yet committed, a count; commands arriving
    /// while the window is full leave together in the next batch.
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

impl ZabTuning {
    /// Checks the section on its own.
    pub(super) fn validate(&self) -> Result<()> {
        if self.tick_ms == 0 || self.heartbeat_ms < self.tick_ms {
            bail!("config key zab.heartbeat_ms: must be at least zab.tick_ms (> 0)");
        }
        if self.follower_timeout_ms < 2 * self.heartbeat_ms {
            bail!("config key zab.follower_timeout_ms: must be at least twice zab.heartbeat_ms");
        }
        if self.window == 0 {
            bail!("config key zab.window: must be at least 1");
        }
        Ok(())
    }
}
