//! What a replica writes to stable storage, and the reference semantics of those writes.
//!
//! Records are **keyed by position**: each protocol names the key of its records (Zab the dense
//! slot, PFT the sequence number, Mencius the instance). Records may be written in any key
//! order and leave holes, and a record written at a key that already holds one replaces it (a
//! Paxos acceptor's accept in a later view supersedes its earlier accept of the same instance).
//! Truncation and compaction remove records by key.

use crate::{Position, Snapshot};
use std::collections::BTreeMap;
use std::fmt::Debug;

/// A record of the durable log.
pub trait LogRecord: Clone + Debug {
    /// The record's key: where it sits in the protocol's log. Keys order the log; they need not
    /// be dense, and the record at a key may be replaced.
    fn key(&self) -> u64;
    /// Whether this record carries the command `id` (a Mencius skip or a Paxos no-op carries
    /// none; a PFT batch record carries many).
    fn carries(&self, id: u64) -> bool;
    /// The key of the record that holds the command delivered at `at` (and the key storage
    /// compacts through for a snapshot's `drop_through`). Zab keys records by dense slot, the
    /// default; PFT and Mencius derive the key from the position's tag.
    fn key_of(at: Position) -> u64 {
        at.slot
    }
    /// Whether a snapshot taken at `snapshot_at` holds the command delivered at `at`. By
    /// default positions compare by slot (every replica delivers the same slots); a protocol
    /// whose replicas may deliver commuting commands in different slot orders (Mencius with
    /// out-of-order commit) compares its own instance order instead.
    fn snapshot_covers(snapshot_at: Position, at: Position) -> bool {
        snapshot_at.slot >= at.slot
    }
}

/// One write to stable storage. Ops are applied in the order issued.
#[derive(Clone, Debug)]
pub enum StorageOp<R, H> {
    /// Replace the protocol's hard state (epochs, promises, votes) atomically.
    SetHard(H),
    /// Put each record at its key, replacing the record there if any. Keys may come in any
    /// order and leave holes.
    Append(Vec<R>),
    /// Remove every record whose key is greater than `after_key`.
    Truncate { after_key: u64 },
    /// Store `snapshot` and remove every record whose key is at most `key_of(drop_through)`;
    /// `log_base` becomes `drop_through` if that is higher. When `replace_log` is set, every
    /// record is removed and the log restarts after the snapshot (Zab's state transfer).
    Snapshot {
        snapshot: Snapshot,
        drop_through: Position,
        replace_log: bool,
    },
}

/// A storage op with its sequence number (strictly increasing per replica incarnation).
#[derive(Clone, Debug)]
pub struct Persist<R, H> {
    pub seq: u64,
    pub op: StorageOp<R, H>,
}

/// The durable state of one replica: what survives a crash. The simulator's disk and the
/// server's write-ahead log both reduce to this, and a core restarts from it.
#[derive(Clone, Debug)]
pub struct DurableState<R, H> {
    pub hard: H,
    pub snapshot: Option<Snapshot>,
    /// What the core last compacted through: the position whose key bounds the removed records.
    /// It means only what the core wrote into it.
    pub log_base: Position,
    /// The records, by key.
    pub records: BTreeMap<u64, R>,
    /// Set by the driver, never by a core's ops: the disk lost something this replica may have
    /// acknowledged (a record failed its checksum and the log was cut there, or the disk came
    /// back empty). A core restored with `lost` must not vote, promise or acknowledge with the
    /// state it lost: it recovers from its peers first (docs/contract.md §1.3) and records that
    /// it is recovering in its own hard state, so that a crash during recovery does not forget.
    pub lost: bool,
}

impl<R: LogRecord, H: Default> Default for DurableState<R, H> {
    fn default() -> Self {
        Self {
            hard: H::default(),
            snapshot: None,
            log_base: Position::default(),
            records: BTreeMap::new(),
            lost: false,
        }
    }
}

impl<R: LogRecord, H: Clone> DurableState<R, H> {
    /// Apply one op, exactly as stable storage must.
    pub fn apply(&mut self, op: &StorageOp<R, H>) {
        match op {
            StorageOp::SetHard(h) => self.hard = h.clone(),
            StorageOp::Append(rs) => {
                for r in rs {
                    self.records.insert(r.key(), r.clone());
                }
            }
            StorageOp::Truncate { after_key } => {
                if let Some(first) = after_key.checked_add(1) {
                    self.records.split_off(&first);
                }
            }
            StorageOp::Snapshot {
                snapshot,
                drop_through,
                replace_log,
            } => {
                if *replace_log {
                    self.records.clear();
                    self.log_base = snapshot.at;
                } else {
                    self.drop_through(R::key_of(*drop_through));
                    if drop_through.slot > self.log_base.slot {
                        self.log_base = *drop_through;
                    }
                }
                self.snapshot = Some(snapshot.clone());
            }
        }
    }

    /// [`DurableState::apply`], taking the op: its records move in instead of being cloned.
    pub fn apply_owned(&mut self, op: StorageOp<R, H>) {
        match op {
            StorageOp::Append(rs) => {
                for r in rs {
                    self.records.insert(r.key(), r);
                }
            }
            StorageOp::SetHard(h) => self.hard = h,
            op => self.apply(&op),
        }
    }

    fn drop_through(&mut self, key: u64) {
        match key.checked_add(1) {
            Some(first) => self.records = self.records.split_off(&first),
            None => self.records.clear(),
        }
    }

    /// The key of the last record, if any.
    pub fn last_key(&self) -> Option<u64> {
        self.records.keys().next_back().copied()
    }

    /// Does this durable state hold the command `command_id` delivered at `at`, either as a log
    /// record or inside a snapshot that covers its slot? (The snapshot's content is checked
    /// separately by the simulator, which compares every restored snapshot with the history.)
    pub fn holds(&self, at: Position, command_id: u64) -> bool {
        if self
            .snapshot
            .as_ref()
            .is_some_and(|s| R::snapshot_covers(s.at, at))
        {
            return true;
        }
        self.records
            .get(&R::key_of(at))
            .is_some_and(|r| r.carries(command_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    /// A record keyed by an instance number, carrying a batch of command ids.
    #[derive(Clone, Debug, PartialEq)]
    struct Rec {
        key: u64,
        ids: Vec<u64>,
    }

    impl LogRecord for Rec {
        fn key(&self) -> u64 {
            self.key
        }
        fn carries(&self, id: u64) -> bool {
            self.ids.contains(&id)
        }
        fn key_of(at: Position) -> u64 {
            at.tag
        }
    }

    fn rec(key: u64, ids: &[u64]) -> Rec {
        Rec {
            key,
            ids: ids.to_vec(),
        }
    }

    fn snap(slot: u64, tag: u64) -> Snapshot {
        Snapshot {
            at: Position { slot, tag },
            data: Bytes::new(),
        }
    }

    #[test]
    fn out_of_order_records_with_holes_and_replacement() {
        let mut d: DurableState<Rec, u8> = DurableState::default();
        d.apply(&StorageOp::Append(vec![rec(5, &[50]), rec(2, &[20])]));
        d.apply(&StorageOp::Append(vec![rec(9, &[90])]));
        assert_eq!(d.records.keys().copied().collect::<Vec<_>>(), vec![2, 5, 9]);
        // A later record at key 5 (a higher view) replaces the first.
        d.apply(&StorageOp::Append(vec![rec(5, &[51, 52])]));
        assert!(d.holds(Position { slot: 3, tag: 5 }, 52));
        assert!(!d.holds(Position { slot: 3, tag: 5 }, 50));
        // A hole (key 3) holds nothing.
        assert!(!d.holds(Position { slot: 2, tag: 3 }, 20));
        d.apply(&StorageOp::Truncate { after_key: 5 });
        assert_eq!(d.last_key(), Some(5));
        d.apply(&StorageOp::Snapshot {
            snapshot: snap(2, 2),
            drop_through: Position { slot: 2, tag: 2 },
            replace_log: false,
        });
        assert_eq!(d.records.keys().copied().collect::<Vec<_>>(), vec![5]);
        // The snapshot covers slots up to 2, whatever the records.
        assert!(d.holds(Position { slot: 1, tag: 2 }, 20));
        assert_eq!(d.log_base, Position { slot: 2, tag: 2 });
    }

    #[test]
    fn replace_log_clears_everything() {
        let mut d: DurableState<Rec, u8> = DurableState::default();
        d.apply(&StorageOp::Append(vec![rec(1, &[1]), rec(7, &[7])]));
        d.apply(&StorageOp::SetHard(3));
        d.apply(&StorageOp::Snapshot {
            snapshot: snap(4, 4),
            drop_through: Position { slot: 4, tag: 4 },
            replace_log: true,
        });
        assert!(d.records.is_empty());
        assert_eq!(d.hard, 3);
        assert_eq!(d.log_base.slot, 4);
        d.apply(&StorageOp::Truncate {
            after_key: u64::MAX,
        });
        d.apply(&StorageOp::Snapshot {
            snapshot: snap(9, u64::MAX),
            drop_through: Position {
                slot: 9,
                tag: u64::MAX,
            },
            replace_log: false,
        });
        assert!(d.records.is_empty());
    }
}
