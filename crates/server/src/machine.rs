//! The replicated state machine interface, implemented by the ZooKeeper data tree, the
//! register groups (crate::register) and later SconeKV's buckets.

use crate::protocol::Zxids;
use bytes::Bytes;
use synod_core::wire::WireError;
use synod_core::{Command, GroupId, Position, Snapshot};

/// A message from one group's state machine to another group: the host submits `payload` as a
/// command of group `to`. Machines emit these from `apply`, so every replica of the sending
/// group emits the same ones; the host sends them only from the replica its group's view names
/// leader. Delivery is best effort: FIFO per pair of groups while the sending leader stays, but
/// lost if it fails. A machine that needs every message delivered keeps them in its replicated
/// state until the receiving group acknowledges them (with a message back), emits them again
/// from [`StateMachine::pending`], and the receiver ignores duplicates. The register machine
/// (crate::register) does exactly that; SconeKV's two-phase commit will too.
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
///   state as of now; the caller runs it on a background thread while writes continue. A
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

/// The ZooKeeper data tree as a group runs it: the machine, and how the group's positions
/// become the zxids its clients see (the tag itself for Zab; see [`Zxids`]). The front end and
/// the admin port reach the tree through it (`Deref`).
pub struct ZooKeeper {
    machine: synod_zk::machine::ZkMachine,
    zxids: Zxids,
}

impl ZooKeeper {
    pub fn new(zxids: Zxids) -> Self {
        ZooKeeper {
            machine: Default::default(),
            zxids,
        }
    }

    pub fn zxids(&self) -> Zxids {
        self.zxids
    }
}

impl std::ops::Deref for ZooKeeper {
    type Target = synod_zk::machine::ZkMachine;
    fn deref(&self) -> &Self::Target {
        &self.machine
    }
}

impl std::ops::DerefMut for ZooKeeper {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.machine
    }
}

impl StateMachine for ZooKeeper {
    fn apply(&mut self, at: Position, command: &Command, _out: &mut Vec<GroupMessage>) -> Bytes {
        let zxid = self.zxids.zxid(at.tag);
        self.machine.apply(at.slot, zxid, &command.payload)
    }

    fn snapshot_view(&self) -> Box<dyn FnOnce() -> Bytes + Send> {
        Box::new(self.machine.snapshot_view())
    }

    fn restore(&mut self, snapshot: &Snapshot) -> Result<(), WireError> {
        self.machine
            .restore(snapshot.at.slot, snapshot.data.clone())
            .map_err(|e| WireError::Invalid(e.0))?;
        if self.machine.applied_zxid != self.zxids.zxid(snapshot.at.tag) {
            return Err(WireError::Invalid("snapshot zxid"));
        }
        Ok(())
    }

    fn applied(&self) -> Position {
        Position {
            slot: self.machine.applied_slot,
            tag: self.zxids.tag(self.machine.applied_zxid),
        }
    }

    fn digest(&self) -> u64 {
        self.machine.digest
    }
}
