//! The ZooKeeper data tree as a group's state machine (the interface itself is the contract's:
//! [`synod_core::StateMachine`]).

use crate::protocol::Zxids;
use bytes::Bytes;
use synod_core::wire::WireError;
use synod_core::{Command, Position, Snapshot};

pub use synod_core::{GroupMessage, StateMachine};

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
