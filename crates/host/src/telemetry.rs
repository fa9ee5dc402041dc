//! What the host counts, reported to its driver as it happens: the server turns it into
//! Prometheus metrics, the simulator into its reports (messages by role and kind). Every method
//! has an empty default, so a driver implements only what it reads.

use synod_core::{GroupId, NodeId, Role};

pub trait Telemetry: Send {
    /// Commands queued for the group (clients' and other groups').
    fn submitted(&mut self, _group: GroupId) {}
    /// A batch of `commands` handed to the group's core.
    fn batch(&mut self, _group: GroupId, _commands: usize) {}
    /// A message of `kind` received by the group's replica while in `role`.
    fn received(&mut self, _group: GroupId, _role: Role, _kind: &'static str, _bytes: usize) {}
    /// A message of `kind` sent to `copies` peers by the group's replica while in `role`.
    fn sent(
        &mut self,
        _group: GroupId,
        _role: Role,
        _kind: &'static str,
        _copies: usize,
        _bytes: usize,
    ) {
    }
    /// A command applied to the group's state machine here.
    fn delivered(&mut self, _group: GroupId) {}
    /// A client's command answered, `latency_us` after it was submitted here.
    fn committed(&mut self, _group: GroupId, _latency_us: u64) {}
    /// A submission refused (busy, no leader).
    fn rejected(&mut self, _group: GroupId) {}
    /// A message of the group's state machine sent to another group.
    fn group_message(&mut self, _group: GroupId) {}
    /// A snapshot of the group's state machine taken here (at `slot`).
    fn snapshot_taken(&mut self, _group: GroupId, _slot: u64) {}
    /// A snapshot from a peer installed.
    fn snapshot_installed(&mut self, _group: GroupId, _slot: u64) {}
    /// A message from `from` that the group's codec refused.
    fn undecodable(&mut self, _group: GroupId, _from: NodeId) {}
}

/// Counts nothing.
pub struct NoTelemetry;

impl Telemetry for NoTelemetry {}
