//! The sans-IO node of synod: one process's groups, each a (protocol core, members, state
//! machine) triple, in the shape of quinn-proto's `Endpoint`.
//!
//! ```text
//!  in:  Host::receive (a peer's frame bytes)   Host::submit (a client's command)
//!       Host::durable (the WAL's fsync)        Host::snapshot_done / snapshot_failed
//!       Host::disconnected (a broken peer)     Host::timeout / Host::flush (the time)
//!  out: Outputs { transmit (frames per peer), wal (storage ops), replies, snapshots (jobs),
//!                 views, resets, observed, fatal }     Host::deadline (the next wake-up)
//! ```
//!
//! Groups share one node: one set of peer connections (frames tagged with the group), one
//! write-ahead log (one fsync serves every group with ops queued), one timer (the earliest
//! deadline of any core), and the host's loop. A state machine sends to other groups through
//! the host ([`synod_core::GroupMessage`]): only from its group's leader, to the local replica
//! of the receiving group if this node runs one, else to a member of it; a leader sends its
//! machine's unacknowledged messages again when it becomes leader and every
//! [`HostConfig::resend_every_us`].
//!
//! The same code runs in the server (crates/server drives it with tokio: sockets, the WAL
//! thread, snapshot files) and in the simulator (crates/sim drives it on virtual time with a
//! simulated network, disk and clock), so a bug in routing, batching, waiters or recovery is a
//! seed that replays.
//!
//! | file | job |
//! |---|---|
//! | `host.rs` | the host: inputs, routing between groups, batching, waiters, deadlines |
//! | `group.rs` | one group: its core through the contract's driver loop, its machine, snapshots |
//! | `output.rs` | what comes out for the driver |
//! | `telemetry.rs` | what the host counts, for metrics and simulator reports |
//! | `register.rs` | the register machine: a small map whose relays exercise messages between groups |

pub mod group;
mod host;
pub mod output;
pub mod register;
pub mod telemetry;

pub use group::{Group, GroupParts, GroupRunner, Hosted, SharedMachine};
pub use host::{ConfigStatus, GroupStatus, Host, HostBug, HostConfig};
pub use output::{
    Applied, Observed, Outputs, PeerKind, SnapshotJob, SubmitError, SubmitResult, Transmit,
};
pub use telemetry::{NoTelemetry, Telemetry};

#[cfg(test)]
mod tests;
