//! The ZooKeeper data tree as a replication group's state machine ([`ZooKeeper`]), and how the
//! group's positions become the zxids its clients see ([`Zxids`]). The server's front end and
//! the simulator's ZooKeeper app both run it.

use crate::machine::ZkMachine;
use bytes::Bytes;
use synod_core::wire::WireError;
use synod_core::{Command, GroupMessage, Position, Snapshot, StateMachine};

/// How a group's delivered positions map to ZooKeeper zxids. Clients compare zxids (a session
/// never accepts a server behind the last zxid it saw), so the zxid must grow with every
/// delivery, and the map must be a bijection (a snapshot stores the zxid, the log its
/// position's tag).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Zxids {
    /// The tag is the zxid (Zab: each command has its own zxid).
    #[default]
    Tag,
    /// PFT's tag `n << 16 | left` counts the commands left in batch `n` after this one, so it
    /// falls within a batch; the zxid `n << 16 | (0xFFFF - left)` grows, and carries the same
    /// information. Nothing delivered (tag 0) is zxid 0. Mencius's tag is the same with its
    /// instance for `n`, delivered in instance order.
    PaxosBatch,
}

impl Zxids {
    pub fn zxid(self, tag: u64) -> i64 {
        match self {
            Zxids::Tag => tag as i64,
            Zxids::PaxosBatch => synod_core::kit::tag::ordinal(tag) as i64,
        }
    }

    /// The inverse of [`Zxids::zxid`].
    pub fn tag(self, zxid: i64) -> u64 {
        match self {
            Zxids::Tag => zxid as u64,
            Zxids::PaxosBatch => synod_core::kit::tag::from_ordinal(zxid as u64),
        }
    }
}

/// The ZooKeeper data tree as a group runs it: the machine, and how the group's positions
/// become the zxids its clients see (the tag itself for Zab; see [`Zxids`]). The front end and
/// the admin port reach the tree through it (`Deref`).
pub struct ZooKeeper {
    machine: ZkMachine,
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
    type Target = ZkMachine;
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
