//! The replicated state machine interface, implemented by the ZooKeeper data tree (and later by
//! the transactional KV store).

use bytes::Bytes;
use synod_core::wire::WireError;
use synod_core::{Command, Position, Snapshot};

/// A deterministic state machine fed with delivered commands.
///
/// * `apply` must depend only on the state and the command (no clock, no randomness), so that
///   every replica computes the same state.
/// * `snapshot_view` returns, quickly and under the caller's lock, a closure that serialises the
///   state as of now; the caller runs it on a background thread while writes continue. A
///   copy-on-write structure makes the view O(1).
/// * `restore` replaces the whole state with a snapshot (from disk, or from the leader).
pub trait StateMachine: Send + 'static {
    fn apply(&mut self, at: Position, command: &Command) -> Bytes;
    fn snapshot_view(&self) -> Box<dyn FnOnce() -> Bytes + Send>;
    fn restore(&mut self, snapshot: &Snapshot) -> Result<(), WireError>;
    /// Position of the last applied command (or restored snapshot).
    fn applied(&self) -> Position;
    /// A digest of the whole state, equal on replicas that applied the same commands.
    fn digest(&self) -> u64;
}

impl StateMachine for synod_zk::machine::ZkMachine {
    fn apply(&mut self, at: Position, command: &Command) -> Bytes {
        synod_zk::machine::ZkMachine::apply(self, at.slot, at.tag as i64, &command.payload)
    }

    fn snapshot_view(&self) -> Box<dyn FnOnce() -> Bytes + Send> {
        Box::new(synod_zk::machine::ZkMachine::snapshot_view(self))
    }

    fn restore(&mut self, snapshot: &Snapshot) -> Result<(), WireError> {
        synod_zk::machine::ZkMachine::restore(self, snapshot.at.slot, snapshot.data.clone())
            .map_err(|e| WireError::Invalid(e.0))?;
        if self.applied_zxid as u64 != snapshot.at.tag {
            return Err(WireError::Invalid("snapshot zxid"));
        }
        Ok(())
    }

    fn applied(&self) -> Position {
        Position {
            slot: self.applied_slot,
            tag: self.applied_zxid as u64,
        }
    }

    fn digest(&self) -> u64 {
        self.digest
    }
}
