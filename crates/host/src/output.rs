//! What comes out of the host, for its driver to carry out: frames for peers, storage ops for
//! the write-ahead log, replies to clients, snapshots to take, views to publish, and (when the
//! driver asks to observe) every delivery, for the simulator's checkers.

use bytes::Bytes;
use synod_core::{GroupId, NodeId, Position, Snapshot, View};
use synod_log::WalOp;

/// What a peer frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerKind {
    /// A protocol message of the group, encoded by its core's codec.
    Message,
    /// A command for the group, from a state machine of another group (routed by a host).
    Submit,
}

/// One frame for one peer, encoded once (a message to every member shares its bytes).
#[derive(Clone, Debug)]
pub struct Transmit {
    pub to: NodeId,
    pub group: GroupId,
    pub kind: PeerKind,
    pub data: Bytes,
}

/// A delivered command, as its submitter sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The command id the host gave the submission.
    pub id: u64,
    pub at: Position,
    /// What the state machine answered.
    pub result: Bytes,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubmitError {
    NoLeader,
    Busy,
    Timeout,
    ShuttingDown,
    NoSuchGroup,
    /// A configuration change was refused ([`synod_core::ConfigReject`]).
    Config(synod_core::ConfigReject),
}

pub type SubmitResult = Result<Applied, SubmitError>;

/// A snapshot the driver must take: run `make` (off the host's thread in the server), store the
/// bytes durably, then hand them back with [`crate::Host::snapshot_done`] (or report
/// [`crate::Host::snapshot_failed`]).
pub struct SnapshotJob {
    pub group: GroupId,
    pub at: Position,
    pub make: Box<dyn FnOnce() -> Bytes + Send>,
}

impl std::fmt::Debug for SnapshotJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SnapshotJob(group {}, slot {})",
            self.group, self.at.slot
        )
    }
}

/// What happened inside the host, in order, for a driver that observes (the simulator's
/// checkers). A driver that does not observe pays nothing for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    /// A command was queued for the group's core: a client's, or a state machine's message
    /// from another group.
    Submitted { group: GroupId, id: u64 },
    /// A command was applied to the group's state machine here.
    Applied {
        group: GroupId,
        at: Position,
        id: u64,
    },
    /// The group's state machine was replaced by this snapshot from a peer.
    Restored { group: GroupId, snapshot: Snapshot },
    /// The group's replica changed role, leader or epoch.
    View { group: GroupId, view: View },
    /// The leader switched the broadcast mode (a variant fell back to its base, or back).
    Mode { group: GroupId, fallback: bool },
    /// The group's configurations in force changed here.
    Membership {
        group: GroupId,
        membership: synod_core::Membership,
    },
}

/// Everything a host produced since the driver last took it. `T` is the driver's token for a
/// waiting client: every token handed to [`crate::Host::submit`] comes back exactly once, in
/// `replies`.
pub struct Outputs<T> {
    /// Frames for peers, in the order they must leave (FIFO per peer).
    pub transmit: Vec<Transmit>,
    /// Storage ops with their group's sequence number, in order; the driver writes them and
    /// reports with [`crate::Host::durable`] how far each group's ops are durable.
    pub wal: Vec<(u64, WalOp)>,
    pub replies: Vec<(T, SubmitResult)>,
    pub snapshots: Vec<SnapshotJob>,
    /// Views that changed, to publish to front ends.
    pub views: Vec<(GroupId, View)>,
    /// Peers that sent something undecodable: the driver resets their connection.
    pub resets: Vec<(NodeId, String)>,
    pub observed: Vec<Observed>,
    /// The node must stop (fail-stop): a group cannot go on without diverging.
    pub fatal: Option<String>,
}

impl<T> Default for Outputs<T> {
    fn default() -> Self {
        Outputs {
            transmit: Vec::new(),
            wal: Vec::new(),
            replies: Vec::new(),
            snapshots: Vec::new(),
            views: Vec::new(),
            resets: Vec::new(),
            observed: Vec::new(),
            fatal: None,
        }
    }
}

impl<T> Outputs<T> {
    /// Nothing to carry out.
    pub fn is_empty(&self) -> bool {
        self.transmit.is_empty()
            && self.wal.is_empty()
            && self.replies.is_empty()
            && self.snapshots.is_empty()
            && self.views.is_empty()
            && self.resets.is_empty()
            && self.observed.is_empty()
            && self.fatal.is_none()
    }
}
