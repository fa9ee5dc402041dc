//! The ZooKeeper state machine: replicated transactions applied to the data tree, local reads,
//! and the local watch registry.
//!
//! A client write is not turned into a ZooKeeper-style "txn" by the leader: the request itself is
//! replicated (`Txn::Op`, with the session, its identities and the proposer's clock) and every
//! replica executes it at the same position of the total order. Sequential names, version checks
//! and errors are therefore computed identically everywhere, and the replica that received the
//! request answers with the result computed at its own delivery.
//!
//! | File | Job |
//! |------|-----|
//! | `mod.rs` | [`ZkMachine`], its constructor and accessors, the [`Effects`] trait |
//! | `codec.rs` | [`Txn`] and [`Reply`] and their encoding |
//! | `writes.rs` | [`ZkMachine::apply`]: sessions, the write operations, multi, reaping |
//! | `reads.rs` | [`ZkMachine::read`]: reads and local watch operations |
//! | `snapshot.rs` | [`ZkMachine::snapshot_view`] and [`ZkMachine::restore`] |
//! | `tests.rs` | unit tests |

mod codec;
mod reads;
mod snapshot;
mod writes;

pub use codec::{write_stat, Reply, Txn};

use crate::jute::Acl;
use crate::tree::{self, Tree};
use crate::watch::Watches;
use std::sync::Arc;

/// What the server must do beyond answering the request.
pub trait Effects: Send {
    /// A watch fired for a session connected here (or elsewhere: the server filters). `acl`
    /// is the node's ACL (for a deletion, the ACL it had): ZooKeeper sends the event only to a
    /// connection that may READ the node, which only the connection knows.
    fn watch(&self, session: i64, event_type: i32, path: &str, acl: Option<&Arc<Vec<Acl>>>);
    /// The replicated session table changed.
    fn session_closed(&self, session: i64);
    /// Sessions were touched (the leader tracks their liveness).
    fn touched(&self, sessions: &[i64]);
}

pub struct ZkMachine {
    pub tree: Tree,
    /// Position (slot, zxid) of the last applied transaction.
    pub applied_slot: u64,
    pub applied_zxid: i64,
    pub digest: u64,
    /// The latest node time applied (see `node_time`): replicated state, kept in snapshots.
    pub clock_ms: i64,
    /// What reads show at `/zookeeper/config` (local, not replicated; see `set_config`).
    config_node: Option<tree::Node>,
    pub watches: Watches,
    /// ZooKeeper's `zookeeper.enforceQuota` for the write being applied: creates and setData
    /// past a hard quota fail with QUOTAEXCEEDED (crate::quota). Set from the transaction (the
    /// proposer's configuration), so every replica decides each write alike.
    pub enforce_quota: bool,
    effects: Option<Box<dyn Effects>>,
}

impl Default for ZkMachine {
    fn default() -> Self {
        ZkMachine {
            tree: Tree::default(),
            applied_slot: 0,
            applied_zxid: 0,
            digest: 0,
            clock_ms: 0,
            config_node: None,
            watches: Watches::new(100_000),
            enforce_quota: false,
            effects: None,
        }
    }
}

/// The system node that holds the ensemble's configuration.
pub const CONFIG_PATH: &str = "/zookeeper/config";

impl ZkMachine {
    /// Show `data` (ZooKeeper's dynamic-configuration text: `server.N=...` lines and
    /// `version=...`) at `/zookeeper/config`, with the Stat ZooKeeper gives that node when
    /// reconfiguration is disabled: version and aversion -1, mtime the time the server loaded
    /// it. Local to this server, as in ZooKeeper (every server holds its own copy of the
    /// static configuration); the replicated node keeps its place in the tree.
    pub fn set_config(&mut self, data: bytes::Bytes, loaded_ms: i64) {
        let Some(n) = self.tree.get(CONFIG_PATH) else {
            return;
        };
        let mut n = n.clone();
        n.data = Some(data);
        n.stat.version = -1;
        n.stat.aversion = -1;
        n.stat.mtime = loaded_ms;
        self.config_node = Some(n);
    }

    pub fn set_effects(&mut self, e: Box<dyn Effects>) {
        self.effects = Some(e);
    }

    /// Is `session` a live session of the replicated table?
    pub fn session(&self, session: i64) -> Option<&tree::Session> {
        self.tree.sessions.get(&session)
    }
}

#[cfg(test)]
mod tests;
