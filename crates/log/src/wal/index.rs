//! What the log knows of each group without decoding its records: its hard state, snapshot and
//! log base (for the checkpoints at the head of every segment), and where every live record is
//! (segment, offset, length, CRC32C). It follows every op exactly as
//! `DurableState::apply` does, so a segment holds a live record if and only if the index says
//! so: such a segment is kept, any other unlinked.

use super::ops::{Replayed, SnapRef};
use std::collections::BTreeMap;
use synod_core::{GroupId, Position};

/// Where a live record's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    pub segment: u64,
    pub offset: u64,
    pub len: u32,
    pub crc: u32,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct GroupIndex {
    pub hard: Option<bytes::Bytes>,
    pub snap: Option<SnapRef>,
    pub log_base: Position,
    pub records: BTreeMap<u64, Loc>,
    /// Bytes of the live records.
    pub bytes: u64,
}

#[derive(Default)]
pub(crate) struct Index {
    pub groups: BTreeMap<GroupId, GroupIndex>,
    /// For every segment, how many live records of each group it holds.
    refs: BTreeMap<u64, BTreeMap<GroupId, u64>>,
}

impl Index {
    fn unref(refs: &mut BTreeMap<u64, BTreeMap<GroupId, u64>>, group: GroupId, loc: &Loc) {
        if let Some(groups) = refs.get_mut(&loc.segment) {
            if let Some(n) = groups.get_mut(&group) {
                *n -= 1;
                if *n == 0 {
                    groups.remove(&group);
                }
            }
        }
    }

    /// Records of `group` now live at these places (replacing any at the same keys).
    pub(crate) fn put(&mut self, group: GroupId, placed: impl IntoIterator<Item = (u64, Loc)>) {
        let g = self.groups.entry(group).or_default();
        for (key, loc) in placed {
            *self
                .refs
                .entry(loc.segment)
                .or_default()
                .entry(group)
                .or_default() += 1;
            g.bytes += loc.len as u64;
            if let Some(old) = g.records.insert(key, loc) {
                g.bytes -= old.len as u64;
                Self::unref(&mut self.refs, group, &old);
            }
        }
    }

    fn remove_where(&mut self, group: GroupId, dead: impl Fn(u64) -> bool) {
        let Some(g) = self.groups.get_mut(&group) else {
            return;
        };
        let keys: Vec<u64> = g.records.keys().copied().filter(|&k| dead(k)).collect();
        for k in keys {
            let loc = g.records.remove(&k).expect("listed");
            g.bytes -= loc.len as u64;
            Self::unref(&mut self.refs, group, &loc);
        }
    }

    /// Follow an op other than an append (appends come with their places: [`Index::put`]).
    pub(crate) fn apply(&mut self, group: GroupId, op: &Replayed) {
        match op {
            Replayed::Hard(h) => self.groups.entry(group).or_default().hard = Some(h.clone()),
            Replayed::Append { .. } => {}
            Replayed::Truncate { after_key } => {
                let after = *after_key;
                self.remove_where(group, |k| k > after);
            }
            Replayed::Snapshot {
                snap,
                drop_through,
                drop_key,
                replace_log,
            } => {
                if *replace_log {
                    self.remove_where(group, |_| true);
                } else {
                    let through = *drop_key;
                    self.remove_where(group, |k| k <= through);
                }
                let g = self.groups.entry(group).or_default();
                if *replace_log {
                    g.log_base = snap.at;
                } else if drop_through.slot > g.log_base.slot {
                    g.log_base = *drop_through;
                }
                g.snap = Some(snap.clone());
            }
            Replayed::Checkpoint {
                hard,
                snap,
                log_base,
            } => {
                let g = self.groups.entry(group).or_default();
                g.hard = hard.clone();
                g.snap = snap.clone();
                g.log_base = *log_base;
            }
        }
    }

    /// Does any group have a live record in `segment`?
    pub(crate) fn pinned(&self, segment: u64) -> bool {
        self.refs.get(&segment).is_some_and(|g| !g.is_empty())
    }

    /// The groups with live records in `segment`.
    pub(crate) fn pinning(&self, segment: u64) -> Vec<GroupId> {
        self.refs
            .get(&segment)
            .map(|g| g.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Forget a segment that was unlinked (it holds no live record).
    pub(crate) fn forget(&mut self, segment: u64) {
        debug_assert!(!self.pinned(segment));
        self.refs.remove(&segment);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(segment: u64, offset: u64) -> Loc {
        Loc {
            segment,
            offset,
            len: 10,
            crc: 0,
        }
    }

    #[test]
    fn segments_are_pinned_exactly_by_live_records() {
        let mut ix = Index::default();
        ix.put(1, [(5, loc(1, 0)), (6, loc(1, 10))]);
        ix.put(2, [(1, loc(1, 20))]);
        ix.put(1, [(5, loc(2, 0))]); // key 5 replaced in segment 2
        assert_eq!(ix.pinning(1), vec![1, 2]);
        ix.apply(
            1,
            &Replayed::Truncate { after_key: 5 }, // drops key 6: group 1 leaves segment 1
        );
        assert_eq!(ix.pinning(1), vec![2]);
        ix.apply(
            2,
            &Replayed::Snapshot {
                snap: SnapRef {
                    at: Position { slot: 1, tag: 1 },
                    len: 0,
                    crc: 0,
                },
                drop_through: Position { slot: 1, tag: 1 },
                drop_key: 1,
                replace_log: false,
            },
        );
        assert!(!ix.pinned(1));
        assert!(ix.pinned(2));
        assert_eq!(ix.groups[&1].bytes, 10);
        assert_eq!(ix.groups[&2].log_base.slot, 1);
    }
}
