//! Zab's identifiers, log entries and messages.

use bytes::Bytes;
use std::fmt;
use std::sync::Arc;
use synod_core::{Command, Config, LogRecord, NodeId, Position, Snapshot, WireSize};

/// ⟨epoch, counter⟩, ordered lexicographically (zab.md §1.1, §2.3). The counter restarts at 1 in
/// every epoch; ⟨0, 0⟩ is "nothing".
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Zxid {
    pub epoch: u32,
    pub counter: u32,
}

impl Zxid {
    pub const ZERO: Zxid = Zxid {
        epoch: 0,
        counter: 0,
    };
    pub const fn new(epoch: u32, counter: u32) -> Self {
        Self { epoch, counter }
    }
    /// The 64-bit form ZooKeeper uses: epoch in the high half.
    pub const fn as_u64(self) -> u64 {
        ((self.epoch as u64) << 32) | self.counter as u64
    }
    pub const fn from_u64(v: u64) -> Self {
        Self {
            epoch: (v >> 32) as u32,
            counter: v as u32,
        }
    }
}

impl fmt::Debug for Zxid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.epoch, self.counter)
    }
}

/// A point in the log: a zxid and its dense slot.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Point {
    pub zxid: Zxid,
    pub slot: u64,
}

impl Point {
    pub fn position(self) -> Position {
        Position {
            slot: self.slot,
            tag: self.zxid.as_u64(),
        }
    }
    pub fn from_position(p: Position) -> Self {
        Self {
            zxid: Zxid::from_u64(p.tag),
            slot: p.slot,
        }
    }
}

impl fmt::Debug for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}@{}", self.zxid, self.slot)
    }
}

/// A proposal as logged: the durable record of Zab.
#[derive(Clone, PartialEq, Eq)]
pub struct Entry {
    pub zxid: Zxid,
    pub slot: u64,
    pub command: Command,
    /// A reconfiguration entry (ZooKeeper's reconfig transaction): the configuration it
    /// installs, whose version is this entry's zxid (docs/protocols/zab.md, "Reconfiguration").
    pub config: Option<Arc<Config>>,
}

impl Entry {
    pub fn point(&self) -> Point {
        Point {
            zxid: self.zxid,
            slot: self.slot,
        }
    }
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}@{}#{}", self.zxid, self.slot, self.command.id)?;
        if let Some(c) = &self.config {
            write!(f, "={c:?}")?;
        }
        Ok(())
    }
}

impl LogRecord for Entry {
    /// Zab keys its log by the dense slot: one entry per command, in slot order.
    fn key(&self) -> u64 {
        self.slot
    }
    fn carries(&self, id: u64) -> bool {
        self.command.id == id
    }
}

/// Zab's hard state (the Zab paper's f.p and f.a), written before the messages that depend on it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hard {
    /// The last epoch this replica accepted in a NEWEPOCH (acceptedEpoch, f.p).
    pub accepted_epoch: u32,
    /// The leader that proposed `accepted_epoch`: at most one leader per epoch gets our ack.
    pub accepted_leader: NodeId,
    /// The epoch of the last NEWLEADER this replica acknowledged (currentEpoch, f.a).
    pub current_epoch: u32,
    /// The last epoch this replica led (A1.1 for the restricted variants).
    pub led_epoch: u32,
    /// This replica restarted having lost durable state it may have acknowledged
    /// (`DurableState::lost`) and has not yet been synchronised by an established leader: it
    /// neither votes, stands, promises nor counts (docs/protocols/zab.md, "Recovery after lost
    /// state"). Cleared in the write that makes the leader's history and epoch current.
    pub recovering: bool,
    /// The configuration in force at the log's base, once it is not the one the group was born
    /// with: written before compaction drops a reconfiguration entry and before a snapshot from
    /// the leader replaces the log, so that the configuration survives its entry.
    pub config: Option<Arc<Config>>,
}

/// A fast-leader-election vote, ordered by ⟨current epoch, last zxid, id⟩.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Vote {
    pub epoch: u32,
    pub zxid: Zxid,
    pub leader: NodeId,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerState {
    Looking,
    Following,
    Leading,
}

/// A compact description of a log after its base: for every epoch present, the last counter.
/// Entries of one epoch in any log are a prefix of what that epoch's leader proposed, so this is
/// enough for the leader to find the exact point where a follower's log diverges from its own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogSummary {
    /// The point just before the first entry (everything up to it is committed and snapshotted).
    pub base: Point,
    /// `(epoch, last counter)` for every epoch with entries after `base`, in increasing order.
    pub epochs: Vec<(u32, u32)>,
    /// Set when the log had more epochs than a summary carries: the leader must send a snapshot.
    pub overflow: bool,
}

impl LogSummary {
    pub fn last(&self) -> Zxid {
        self.epochs
            .last()
            .map_or(self.base.zxid, |&(e, c)| Zxid::new(e, c))
    }

    /// The slot of the last entry.
    pub fn last_slot(&self) -> u64 {
        let mut slot = self.base.slot;
        let mut prev = self.base.zxid;
        for &(e, c) in &self.epochs {
            let first = if prev.epoch == e { prev.counter + 1 } else { 1 };
            slot += (c + 1).saturating_sub(first) as u64;
            prev = Zxid::new(e, c);
        }
        slot
    }

    /// The zxid of the entry at `slot` (or of the base), if the summarised log has it. Entries of
    /// one epoch are dense, so each run covers a known range of slots.
    pub fn zxid_at(&self, slot: u64) -> Option<Zxid> {
        if slot == self.base.slot {
            return Some(self.base.zxid);
        }
        if slot < self.base.slot {
            return None;
        }
        let mut end = self.base.slot;
        let mut prev = self.base.zxid;
        for &(e, c) in &self.epochs {
            let first = if prev.epoch == e { prev.counter + 1 } else { 1 };
            let start = end + 1;
            end += (c + 1).saturating_sub(first) as u64;
            if slot <= end {
                return Some(Zxid::new(e, first + (slot - start) as u32));
            }
            prev = Zxid::new(e, c);
        }
        None
    }
}

/// How the leader brings a follower's log in line with its own (zab.md §2.5; ZooKeeper's
/// DIFF / TRUNC / SNAP).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// The follower's log is a prefix of ours after `from`: entries follow.
    Diff { from: Point },
    /// Drop every entry after `to`, then entries follow.
    Trunc { to: Point },
    /// Replace everything with this snapshot, then entries follow. The configuration in force
    /// at the snapshot's point travels with it (`None`: the one the group was born with).
    Snap(Snapshot, Option<Arc<Config>>),
}

#[derive(Clone, Debug)]
pub enum Msg {
    /// Fast leader election.
    Notification {
        round: u64,
        vote: Vote,
        state: PeerState,
        /// A settled sender (FOLLOWING or LEADING): the epoch it accepted from the leader it
        /// names (a follower past NEWEPOCH) or proposed as that leader (past discovery); 0
        /// before that, and always 0 when LOOKING. A recovering replica joins a leader only on
        /// these (docs/protocols/zab.md, "Recovery after lost state").
        accepted: u32,
        /// A settled sender's configurations in force, committed first (reconfig.rs): a replica
        /// that knows an older configuration (a wiped disk, a node joining) learns whose
        /// majority to trust. Empty while the group keeps the configuration it was born with,
        /// and when LOOKING.
        configs: Vec<Arc<Config>>,
    },
    /// Discovery: follower → prospective leader (FOLLOWERINFO), with the epoch it last accepted
    /// and from whom, and whether it is recovering from lost state (then the leader neither
    /// counts it toward discovery nor lets its history weigh; it still synchronises it).
    FollowerInfo {
        accepted_epoch: u32,
        accepted_leader: NodeId,
        recovering: bool,
    },
    /// Discovery: leader → follower, the new epoch (LEADERINFO / NEWEPOCH).
    NewEpoch { epoch: u32 },
    /// Discovery: follower → leader, the follower accepted `epoch` (ACKEPOCH).
    AckEpoch {
        epoch: u32,
        current_epoch: u32,
        summary: LogSummary,
    },
    /// Synchronisation: how to align the log; entries follow as `Entries`, then `NewLeader`.
    Sync { epoch: u32, mode: SyncMode },
    /// Synchronisation: a run of the leader's log (history or in-flight proposals).
    Entries { epoch: u32, entries: Vec<Entry> },
    /// Synchronisation done for the follower; its log equals the leader's up to `last`.
    NewLeader { epoch: u32, last: Point },
    /// Follower → leader: history logged up to `last` (the NEWLEADER it answers) and current
    /// epoch durable (ACKNEWLEADER). `last` tells a late answer to an earlier synchronisation
    /// of the same epoch (a replayed connection) from the answer to the current one.
    AckNewLeader { epoch: u32, last: Point },
    /// Leader → follower: start serving; everything up to `commit` is committed (UPTODATE).
    UpToDate { epoch: u32, commit: Point },
    /// Broadcast L1: one proposal carrying a batch of commands, with consecutive zxids and
    /// slots from `first` (each command keeps its own zxid, as ZooKeeper's transactions do).
    Proposal {
        epoch: u32,
        first: Point,
        commands: Vec<Command>,
        /// ZabCT's d measurement: the last ack stamp received from this follower and how long
        /// the leader held it (µs); (0, 0) when none.
        echo: (u64, u64),
    },
    /// Broadcast F1: cumulative ack — every entry up to `zxid` of this epoch is durably logged.
    Ack {
        epoch: u32,
        zxid: Zxid,
        /// The sender's vote on the broadcast mode (the thesis's prot field): true = Zab.
        zab: bool,
        /// The mode the sender runs (true = Zab): it acknowledges the leader's last decision.
        mode: bool,
        /// The sender's clock when it sent this ack (µs; its own clock, never compared with
        /// another's), echoed back to measure d.
        stamp: u64,
    },
    /// Broadcast L2: everything up to `at` is committed.
    Commit {
        epoch: u32,
        at: Point,
        /// The leader's decision on the broadcast mode: true = Zab (followers wait for commits).
        zab: bool,
    },
    /// Leader heartbeat (also carries the commit point and the last proposal, so a follower that
    /// lost a message notices the gap and a lost commit is repaired).
    Ping {
        epoch: u32,
        commit: Point,
        last: Zxid,
        /// Followers synchronised with the leader and heard from (A3's membership view: fewer
        /// than N − 1 means a follower is suspected).
        live: u16,
    },
    /// Broadcast L1 for a reconfiguration: one entry carrying the new configuration (its
    /// version is the entry's zxid), proposed alone.
    ProposeConfig { epoch: u32, entry: Entry },
    /// A follower forwards its clients' waiting commands to the leader, in submission order.
    /// `epoch` is the leader's epoch it forwards to, `(nonce, seq)` number its forwards (a
    /// random nonce per incarnation, then 1, 2, 3, …): the leader takes each forward once and
    /// in order, whatever a reconnecting transport replays (broadcast.rs, `on_forward`).
    Forward {
        epoch: u32,
        nonce: u64,
        seq: u64,
        commands: Vec<Command>,
    },
}

impl synod_core::MessageKind for Msg {
    /// A short name, for per-type message counters.
    fn kind(&self) -> &'static str {
        match self {
            Msg::Notification { .. } => "notification",
            Msg::FollowerInfo { .. } => "followerinfo",
            Msg::NewEpoch { .. } => "newepoch",
            Msg::AckEpoch { .. } => "ackepoch",
            Msg::Sync { .. } => "sync",
            Msg::Entries { .. } => "entries",
            Msg::NewLeader { .. } => "newleader",
            Msg::AckNewLeader { .. } => "acknewleader",
            Msg::UpToDate { .. } => "uptodate",
            Msg::Proposal { .. } => "proposal",
            Msg::Ack { .. } => "ack",
            Msg::Commit { .. } => "commit",
            Msg::Ping { .. } => "ping",
            Msg::Forward { .. } => "forward",
            Msg::ProposeConfig { .. } => "proposeconfig",
        }
    }
}

const HEADER: usize = 16;

fn payload_len(b: &Bytes) -> usize {
    b.len() + 12
}

fn config_len(c: &Config) -> usize {
    16 + 4 * (c.voters.len() + c.learners.len())
}

fn entry_len(e: &Entry) -> usize {
    20 + payload_len(&e.command.payload) + e.config.as_ref().map_or(0, |c| config_len(c))
}

impl WireSize for Msg {
    fn wire_size(&self) -> usize {
        HEADER
            + match self {
                Msg::Notification { configs, .. } => {
                    36 + configs.iter().map(|c| config_len(c)).sum::<usize>()
                }
                Msg::FollowerInfo { .. } => 9,
                Msg::NewEpoch { .. } => 8,
                Msg::AckNewLeader { .. } => 28,
                Msg::AckEpoch { summary, .. } => 24 + summary.epochs.len() * 8,
                Msg::Sync { mode, .. } => match mode {
                    SyncMode::Snap(s, c) => {
                        24 + s.data.len() + c.as_ref().map_or(0, |c| config_len(c))
                    }
                    _ => 24,
                },
                Msg::Entries { entries, .. } => entries.iter().map(entry_len).sum(),
                Msg::ProposeConfig { entry, .. } => 4 + entry_len(entry),
                Msg::Proposal { commands, .. } => {
                    40 + commands
                        .iter()
                        .map(|c| payload_len(&c.payload))
                        .sum::<usize>()
                }
                Msg::NewLeader { .. } | Msg::UpToDate { .. } | Msg::Commit { .. } => 20,
                Msg::Ack { .. } => 21,
                Msg::Ping { .. } => 30,
                Msg::Forward { commands, .. } => {
                    24 + commands
                        .iter()
                        .map(|c| payload_len(&c.payload))
                        .sum::<usize>()
                }
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_maps_slots_to_zxids() {
        // base 2:5 at slot 10, then 2:6..2:8 (slots 11-13), 4:1..4:2 (slots 14-15)
        let s = LogSummary {
            base: Point {
                zxid: Zxid::new(2, 5),
                slot: 10,
            },
            epochs: vec![(2, 8), (4, 2)],
            overflow: false,
        };
        assert_eq!(s.last_slot(), 15);
        assert_eq!(s.zxid_at(9), None);
        assert_eq!(s.zxid_at(10), Some(Zxid::new(2, 5)));
        assert_eq!(s.zxid_at(11), Some(Zxid::new(2, 6)));
        assert_eq!(s.zxid_at(13), Some(Zxid::new(2, 8)));
        assert_eq!(s.zxid_at(14), Some(Zxid::new(4, 1)));
        assert_eq!(s.zxid_at(15), Some(Zxid::new(4, 2)));
        assert_eq!(s.zxid_at(16), None);
        let empty = LogSummary::default();
        assert_eq!(empty.last_slot(), 0);
        assert_eq!(empty.zxid_at(0), Some(Zxid::ZERO));
    }
}
