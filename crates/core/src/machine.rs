//! The replicated state machine, beside the contract: what a group applies its delivered
//! commands to. Implemented by the ZooKeeper data tree (crates/zk), SconeKV's buckets
//! (crates/kv) and the register machine; driven by the host (crates/host) in the server and in
//! the simulator alike.

use crate::wire::WireError;
use crate::{Command, GroupId, Position, Snapshot};
use bytes::Bytes;

/// A message from one group's state machine to another group: the host submits `payload` as a
/// command of group `to`. Machines emit these from `apply`, so every replica of the sending
/// group emits the same ones; the host sends them only from the replica its group's view names
/// leader. Delivery is best effort: FIFO per pair of groups while the sending leader stays, but
/// lost if it fails. A machine that needs every message delivered keeps them in its replicated
/// state until the receiving group acknowledges them (with a message back), emits them again
/// from [`StateMachine::pending`], and the receiver ignores duplicates (the register machine and
/// SconeKV's channels do exactly that).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMessage {
    pub to: GroupId,
    pub payload: Bytes,
}

/// A deterministic state machine fed with delivered commands.
///
/// * `apply` must depend only on the state and the command (no clock, no randomness), so that
///   every replica computes the same state (and emits the same messages to other groups).
/// * `snapshot_view` returns, quickly and under the caller's lock, a closure that serialises the
///   state as of now; the driver runs it off the host's thread while writes continue. A
///   copy-on-write structure makes the view O(1).
/// * `restore` replaces the whole state with a snapshot (from disk, or from a peer).
pub trait StateMachine: Send + 'static {
    fn apply(&mut self, at: Position, command: &Command, out: &mut Vec<GroupMessage>) -> Bytes;
    fn snapshot_view(&self) -> Box<dyn FnOnce() -> Bytes + Send>;
    fn restore(&mut self, snapshot: &Snapshot) -> Result<(), WireError>;
    /// Position of the last applied command (or restored snapshot).
    fn applied(&self) -> Position;
    /// A digest of the whole state, equal on replicas that applied the same commands.
    fn digest(&self) -> u64;
    /// Every message to another group that its receiver has not acknowledged yet. The host
    /// sends them again when this replica becomes its group's leader, and periodically while it
    /// leads.
    fn pending(&self, _out: &mut Vec<GroupMessage>) {}
}
