//! The ZooKeeper data tree as a group's state machine: [`synod_zk::group::ZooKeeper`] (the
//! interface itself is the contract's: [`synod_core::StateMachine`]).

pub use synod_core::{GroupMessage, StateMachine};
pub use synod_zk::group::{ZooKeeper, Zxids};
