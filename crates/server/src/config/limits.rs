//! `[limits]` and `[batch]`: the sizes, queues and timeouts that bound what one replica holds
//! or waits for, and how many commands go to the protocol core at once.

use anyhow::{bail, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `[batch]`: how many commands, and how many bytes of them, a replica hands its protocol core
/// at once.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BatchTuning {
    /// Most commands in one batch (one proposal, one log record, one acknowledgement), a
    /// count.
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

/// `[limits]`: message, queue and WAL sizes, and connection caps.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest message between peers, in bytes (reassembled from chunks).
    pub max_message_bytes: u64,
    /// Chunk size for large messages (snapshots) on the peer transport, in bytes (1 byte to
    /// 64 MiB).
    pub chunk_bytes: u64,
    /// Messages queued for one peer before it counts as too slow and is disconnected, a count.
    pub peer_queue: usize,
    /// Client requests waiting for their delivery at this replica, a count.
    pub max_pending_requests: usize,
    /// Largest value accepted by the KV API, in bytes.
    pub max_value_bytes: usize,
    /// Largest key accepted by the KV API, in bytes.
    pub max_key_bytes: usize,
    /// Size of one WAL segment file, in bytes.
    pub segment_bytes: u64,
    /// Zero-filled space written ahead of the WAL so that syncs do not change the file size,
    /// in bytes (0 turns it off).
    pub wal_preallocate_bytes: u64,
    /// Milliseconds a client request waits for its delivery.
    pub request_timeout_ms: u64,
    /// Inbound peer connections that have not completed their hello (5 s at most) at the same
    /// time, a count; more are closed as soon as they are accepted.
    pub max_peer_handshakes: usize,
    /// Open admin HTTP connections, a count; more are closed as soon as they are accepted.
    pub max_admin_connections: usize,
    /// An admin HTTP connection is closed when a request's headers take longer than this to
    /// arrive, or when it stays idle this long between requests, in milliseconds.
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

impl Limits {
    /// Checks the section on its own.
    pub(super) fn validate(&self) -> Result<()> {
        if self.max_peer_handshakes == 0
            || self.max_admin_connections == 0
            || self.admin_idle_timeout_ms == 0
        {
            bail!("config key limits.max_peer_handshakes / max_admin_connections / admin_idle_timeout_ms: must be positive");
        }
        if self.chunk_bytes == 0 || self.chunk_bytes > 64 << 20 {
            bail!("config key limits.chunk_bytes: must be between 1 and 64 MiB");
        }
        Ok(())
    }
}
