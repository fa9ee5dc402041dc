//! The replica's view of its log: entries after a base point, the latest snapshot, and which
//! prefix of the log is durable. Every mutation emits the storage op that makes it durable.

use crate::msg::{Entry, Hard, LogSummary, Point, Zxid};
use std::collections::VecDeque;
use std::sync::Arc;
use synod_core::{Config, DurableState, Membership, Persist, Snapshot, StorageOp};

pub type Ops = Vec<Persist<Entry, Hard>>;

#[derive(Debug)]
pub struct Log {
    /// The point just before `entries[0]`; everything up to it is committed and in a snapshot.
    base: Point,
    entries: VecDeque<Entry>,
    snapshot: Option<Snapshot>,
    hard: Hard,
    /// Storage sequence numbers (synod_core::kit::issuer).
    issuer: synod_core::kit::issuer::Issuer,
    /// Sequence number of the last hard-state write.
    hard_seq: u64,
    /// For every op not yet durable: its seq and the log's last point once it is applied.
    pending: VecDeque<(u64, Point)>,
    /// The longest prefix of the in-memory log known to be durable.
    durable: Point,
    durable_seq: u64,
    /// The newest configuration known committed, durable in the hard state (else `initial`):
    /// written when a change is delivered, when compaction drops one, and before a snapshot
    /// from the leader replaces the log, so that a restart never forgets that a change was
    /// committed (sim seed 1807 at N = 3).
    committed_config: Arc<Config>,
    /// The reconfiguration entries of `entries`, by slot.
    configs: VecDeque<(u64, Arc<Config>)>,
}

impl Log {
    pub fn restore(durable: DurableState<Entry, Hard>, initial: Arc<Config>) -> Self {
        let entries: VecDeque<Entry> = durable.records.into_values().collect();
        let configs = entries
            .iter()
            .filter_map(|e| e.config.clone().map(|c| (e.slot, c)))
            .collect();
        let committed_config = durable.hard.config.clone().unwrap_or(initial);
        let base = Point::from_position(durable.log_base);
        assert!(
            entries
                .iter()
                .enumerate()
                .all(|(i, e)| e.slot == base.slot + 1 + i as u64),
            "Zab's durable log is dense after its base"
        );
        let last = entries.back().map_or(base, Entry::point);
        Self {
            base,
            entries,
            snapshot: durable.snapshot,
            hard: durable.hard,
            issuer: Default::default(),
            hard_seq: 0,
            pending: VecDeque::new(),
            durable: last,
            durable_seq: 0,
            committed_config,
            configs,
        }
    }

    pub fn hard(&self) -> Hard {
        self.hard.clone()
    }

    /// The configurations in force for a replica that has delivered up to `applied`: the
    /// newest configuration logged at or before it (or the base's) is committed; those logged
    /// after it are pending. A configuration the hard state knows as committed is never
    /// overruled by an older one still in the log.
    pub fn membership(&self, applied: u64) -> Membership {
        let mut committed = &self.committed_config;
        for (slot, c) in &self.configs {
            if *slot <= applied && c.version > committed.version {
                committed = c;
            }
        }
        let mut pending: Vec<Arc<Config>> = Vec::new();
        for (slot, c) in &self.configs {
            let newest = pending.last().map_or(committed.version, |p| p.version);
            if *slot > applied && c.version > newest {
                pending.push(c.clone());
            }
        }
        Membership {
            committed: committed.clone(),
            pending,
        }
    }

    /// The configuration in force at `slot` (which is the base or in the log), or a later one
    /// known committed.
    pub fn config_at(&self, slot: u64) -> Arc<Config> {
        self.membership(slot).committed
    }

    /// `config` is known committed: make it durable in the hard state if it is newer than the
    /// one there.
    pub fn config_committed(&mut self, config: &Arc<Config>, ops: &mut Ops) {
        if config.version <= self.committed_config.version {
            return;
        }
        self.committed_config = config.clone();
        let hard = Hard {
            config: Some(config.clone()),
            ..self.hard.clone()
        };
        self.set_hard(hard, ops);
    }

    /// The slot of the reconfiguration entry of the log whose configuration has `version`.
    pub fn config_slot(&self, version: u64) -> Option<u64> {
        self.configs
            .iter()
            .find(|(_, c)| c.version == version)
            .map(|(s, _)| *s)
    }

    /// The slot of the last reconfiguration entry of the log, if any.
    pub fn last_config_slot(&self) -> Option<u64> {
        self.configs.back().map(|(s, _)| *s)
    }
    pub fn base(&self) -> Point {
        self.base
    }
    pub fn snapshot(&self) -> Option<&Snapshot> {
        self.snapshot.as_ref()
    }
    pub fn last(&self) -> Point {
        self.entries.back().map_or(self.base, Entry::point)
    }
    /// The longest durable prefix of the in-memory log.
    pub fn durable(&self) -> Point {
        self.durable
    }
    pub fn durable_seq(&self) -> u64 {
        self.durable_seq
    }
    pub fn hard_seq(&self) -> u64 {
        self.hard_seq
    }
    /// Sequence number of the last storage op issued.
    pub fn last_seq(&self) -> u64 {
        self.issuer.last()
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, slot: u64) -> Option<&Entry> {
        if slot <= self.base.slot {
            return None;
        }
        self.entries.get((slot - self.base.slot - 1) as usize)
    }

    /// The point of `zxid` if it is the base or an entry of the log.
    pub fn point_of(&self, zxid: Zxid) -> Option<Point> {
        if zxid == self.base.zxid {
            return Some(self.base);
        }
        let i = self.entries.partition_point(|e| e.zxid < zxid);
        self.entries
            .get(i)
            .filter(|e| e.zxid == zxid)
            .map(Entry::point)
    }

    /// The entry right after `p` (which must be the base or in the log).
    pub fn next_after(&self, p: Point) -> Option<&Entry> {
        self.get(p.slot + 1)
    }

    /// The last counter of `epoch` in the log, if the log has entries of that epoch.
    pub fn last_counter_in_epoch(&self, epoch: u32) -> Option<u32> {
        let i = self.entries.partition_point(|e| e.zxid.epoch <= epoch);
        (i > 0)
            .then(|| self.entries[i - 1].zxid)
            .filter(|z| z.epoch == epoch)
            .map(|z| z.counter)
    }

    /// Entries with slot in `(from, to]`.
    pub fn range(&self, from: u64, to: u64) -> impl Iterator<Item = &Entry> {
        let lo = from.max(self.base.slot) - self.base.slot;
        let hi = to.min(self.last().slot).saturating_sub(self.base.slot);
        self.entries.range(lo as usize..hi.max(lo) as usize)
    }

    pub fn summary(&self, max_epochs: usize) -> LogSummary {
        let mut epochs: Vec<(u32, u32)> = Vec::new();
        let mut overflow = false;
        for e in &self.entries {
            match epochs.last_mut() {
                Some((ep, c)) if *ep == e.zxid.epoch => *c = e.zxid.counter,
                _ => {
                    if epochs.len() == max_epochs {
                        overflow = true;
                        break;
                    }
                    epochs.push((e.zxid.epoch, e.zxid.counter));
                }
            }
        }
        LogSummary {
            base: self.base,
            epochs,
            overflow,
        }
    }

    fn issue(&mut self, op: StorageOp<Entry, Hard>, ops: &mut Ops) -> u64 {
        let seq = self.issuer.issue(op, ops);
        self.pending.push_back((seq, self.last()));
        seq
    }

    pub fn set_hard(&mut self, hard: Hard, ops: &mut Ops) -> u64 {
        self.hard = hard.clone();
        self.hard_seq = self.issue(StorageOp::SetHard(hard), ops);
        self.hard_seq
    }

    /// Append entries that continue the log (dense slots, increasing zxids).
    pub fn append(&mut self, entries: Vec<Entry>, ops: &mut Ops) -> u64 {
        for e in &entries {
            let last = self.last();
            assert_eq!(e.slot, last.slot + 1, "log slots are dense");
            assert!(e.zxid > last.zxid, "log zxids increase");
            if let Some(c) = &e.config {
                assert_eq!(
                    c.version,
                    e.zxid.as_u64(),
                    "a configuration's version is its zxid"
                );
                self.configs.push_back((e.slot, c.clone()));
            }
            self.entries.push_back(e.clone());
        }
        self.issue(StorageOp::Append(entries), ops)
    }

    /// Drop every entry after `to` (which is the base or in the log).
    pub fn truncate_after(&mut self, to: Point, ops: &mut Ops) -> u64 {
        assert!(to.slot >= self.base.slot);
        self.entries.truncate((to.slot - self.base.slot) as usize);
        while self.configs.back().is_some_and(|(s, _)| *s > to.slot) {
            self.configs.pop_back();
        }
        // Whatever was durable beyond `to` no longer belongs to the in-memory log.
        for p in self.pending.iter_mut() {
            p.1 = p.1.min(to);
        }
        self.durable = self.durable.min(to);
        self.issue(StorageOp::Truncate { after_key: to.slot }, ops)
    }

    /// Replace the whole log with a snapshot received from the leader, with the configuration in
    /// force at its point (`None`: the one the group was born with), which the hard state takes
    /// first: the configuration never goes missing, whatever a crash interrupts.
    pub fn install_snapshot(
        &mut self,
        snapshot: Snapshot,
        config: Option<Arc<Config>>,
        ops: &mut Ops,
    ) -> u64 {
        let at = Point::from_position(snapshot.at);
        if let Some(c) = &config {
            self.config_committed(c, ops);
        }
        self.configs.clear();
        self.entries.clear();
        self.base = at;
        for p in self.pending.iter_mut() {
            p.1 = p.1.min(at);
        }
        self.durable = self.durable.min(at);
        self.snapshot = Some(snapshot.clone());
        self.issue(
            StorageOp::Snapshot {
                snapshot,
                drop_through: at.position(),
                replace_log: true,
            },
            ops,
        )
    }

    /// Record a snapshot of the applied state and drop the log behind it, keeping `retain`
    /// entries before the snapshot point so that slightly lagging followers still get a diff.
    /// A reconfiguration entry dropped hands its configuration to the hard state first.
    pub fn compact(&mut self, snapshot: Snapshot, retain: u64, ops: &mut Ops) -> Option<u64> {
        let at = snapshot.at.slot;
        if at > self.last().slot || self.snapshot.as_ref().is_some_and(|s| s.at.slot >= at) {
            return None;
        }
        let through = at.saturating_sub(retain).max(self.base.slot);
        let drop_through = if through == self.base.slot {
            self.base
        } else {
            self.get(through).expect("slot within the log").point()
        };
        let mut dropped = None;
        while self
            .configs
            .front()
            .is_some_and(|(s, _)| *s <= drop_through.slot)
        {
            dropped = self.configs.pop_front().map(|(_, c)| c);
        }
        if let Some(c) = dropped {
            self.config_committed(&c, ops);
        }
        self.entries
            .drain(..(drop_through.slot - self.base.slot) as usize);
        self.base = drop_through;
        self.snapshot = Some(snapshot.clone());
        Some(self.issue(
            StorageOp::Snapshot {
                snapshot,
                drop_through: drop_through.position(),
                replace_log: false,
            },
            ops,
        ))
    }

    /// Storage reports every op up to `upto` durable. Returns true when the durable prefix grew.
    pub fn on_durable(&mut self, upto: u64) -> bool {
        if upto <= self.durable_seq {
            return false;
        }
        self.durable_seq = upto;
        let before = self.durable;
        while let Some(&(seq, p)) = self.pending.front() {
            if seq > upto {
                break;
            }
            self.durable = p;
            self.pending.pop_front();
        }
        self.durable > before
    }

    /// Test hook for the deliberately broken protocols: pretend the whole log is durable.
    pub fn pretend_durable(&mut self) {
        self.durable = self.last();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use synod_core::Command;

    fn entry(e: u32, c: u32, slot: u64) -> Entry {
        Entry {
            zxid: Zxid::new(e, c),
            slot,
            command: Command {
                id: slot,
                payload: Bytes::new(),
            },
            config: None,
        }
    }

    fn initial() -> Arc<Config> {
        Arc::new(Config::initial(&[1, 2, 3]))
    }

    #[test]
    fn durable_prefix_follows_truncation() {
        let mut log = Log::restore(DurableState::default(), initial());
        let mut ops = Vec::new();
        let s1 = log.append((1..=5).map(|i| entry(1, i as u32, i)).collect(), &mut ops);
        let p3 = log.point_of(Zxid::new(1, 3)).unwrap();
        let s2 = log.truncate_after(p3, &mut ops);
        let s3 = log.append(vec![entry(2, 1, 4), entry(2, 2, 5)], &mut ops);
        assert!(log.on_durable(s1));
        assert_eq!(
            log.durable(),
            p3,
            "entries 4 and 5 of epoch 1 are no longer ours"
        );
        assert!(!log.on_durable(s2));
        assert!(log.on_durable(s3));
        assert_eq!(log.durable().zxid, Zxid::new(2, 2));
    }

    #[test]
    fn summary_and_lookup() {
        let mut log = Log::restore(DurableState::default(), initial());
        let mut ops = Vec::new();
        log.append(
            vec![
                entry(1, 1, 1),
                entry(1, 2, 2),
                entry(3, 1, 3),
                entry(3, 2, 4),
            ],
            &mut ops,
        );
        let s = log.summary(10);
        assert_eq!(s.epochs, vec![(1, 2), (3, 2)]);
        assert_eq!(s.last(), Zxid::new(3, 2));
        assert!(log.summary(1).overflow);
        assert_eq!(log.last_counter_in_epoch(1), Some(2));
        assert_eq!(log.last_counter_in_epoch(2), None);
        assert_eq!(log.point_of(Zxid::new(3, 1)).unwrap().slot, 3);
        assert!(log.point_of(Zxid::new(2, 1)).is_none());
        assert_eq!(log.range(1, 3).count(), 2);
    }

    #[test]
    fn compaction_keeps_retained_entries() {
        let mut log = Log::restore(DurableState::default(), initial());
        let mut ops = Vec::new();
        log.append((1..=10).map(|i| entry(1, i as u32, i)).collect(), &mut ops);
        let snap = Snapshot {
            at: log.get(8).unwrap().point().position(),
            data: Bytes::from_static(b"x"),
        };
        log.compact(snap, 3, &mut ops).unwrap();
        assert_eq!(log.base().slot, 5);
        assert_eq!(log.len(), 5);
        let mut d: DurableState<Entry, Hard> = DurableState::default();
        for p in &ops {
            d.apply(&p.op);
        }
        assert_eq!(d.log_base.slot, 5);
        assert_eq!(d.records.len(), 5);
        let again = Log::restore(d, initial());
        assert_eq!(again.last(), log.last());
    }
}
