//! Synchronisation (zab.md §2.5): the leader brings each follower's log in line with its own
//! (DIFF, TRUNC or SNAP, then the entries), NEWLEADER / ACKNEWLEADER make the new epoch current,
//! and once a quorum holds the leader's history it is committed and the epoch established.

use crate::{
    Bug, Entry, FStage, Follower, Hard, LStage, LogSummary, Msg, Peer, Phase, Point, SyncMode, Zab,
    ZabActions, Zxid,
};
use synod_core::{Apply, Event, NodeId, Role, View};

impl Zab {
    /// Leader: ACKEPOCH. Abdicate if the follower is ahead of us; otherwise synchronise it once
    /// a quorum has acknowledged the epoch.
    pub fn on_ack_epoch(
        &mut self,
        from: NodeId,
        epoch: u32,
        current_epoch: u32,
        summary: LogSummary,
        out: &mut ZabActions,
    ) {
        let bug = self.opts.bug;
        // Only a voter's history weighs: a learner may hold an uncommitted tail and cannot lead.
        let voter = self.membership().is_voter(from);
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        if epoch != l.epoch || !l.infos.contains_key(&from) {
            return;
        }
        // Discovery only (as ZooKeeper does): a follower of the electing quorum that is ahead of
        // the state we were elected with means the election went wrong; let it lead instead.
        // A late joiner may legitimately carry an uncommitted tail, which the sync truncates.
        // A recovering follower's history never weighs (recovery.rs): what it kept of its log
        // is no evidence, and it cannot lead anyway; the sync replaces it.
        if l.stage == LStage::AwaitAckEpoch
            && !l.recovering.contains(&from)
            && voter
            && (current_epoch, summary.last()) > l.elected_with
            && bug != Some(Bug::ElectAnyone)
        {
            // The election should have preferred that follower; let it lead.
            self.become_looking(out);
            return;
        }
        match l.stage {
            LStage::Discovery => {}
            LStage::AwaitAckEpoch => {
                l.ack_epochs.insert(from, summary);
                self.try_start_sync(out);
            }
            LStage::AwaitNewLeaderAcks | LStage::Broadcast => {
                self.sync_follower(from, &summary, out)
            }
        }
    }

    /// Find where the follower's log leaves ours and choose DIFF, TRUNC or SNAP (zab.md §2.5).
    ///
    /// Log matching: an entry's zxid names the leader that proposed it, and that leader's log
    /// before it, so two logs with the same zxid at the same slot are identical up to it. The
    /// longest common prefix is found by binary search over slots both logs still hold.
    pub fn plan_sync(&self, s: &LogSummary) -> SyncMode {
        let snap = || match self.log.snapshot() {
            Some(snap) => {
                let config = self.log.config_at(snap.at.slot);
                SyncMode::Snap(snap.clone(), (config.version > 0).then_some(config))
            }
            // Nothing was ever compacted: a full diff from the start works.
            None => SyncMode::Trunc {
                to: Point::default(),
            },
        };
        if s.overflow {
            return snap();
        }
        let ours = |slot: u64| -> Option<Zxid> {
            if slot == self.log.base().slot {
                Some(self.log.base().zxid)
            } else {
                self.log.get(slot).map(|e| e.zxid)
            }
        };
        let matches = |slot: u64| ours(slot).is_some() && ours(slot) == s.zxid_at(slot);
        let lo = s.base.slot.max(self.log.base().slot);
        let hi = s.last_slot().min(self.log.last().slot);
        if lo > hi || !matches(lo) {
            // The follower is behind our log's start, or differs from it there.
            return snap();
        }
        // Invariant: matches(lo); find the largest matching slot in [lo, hi].
        let (mut lo, mut hi) = (lo, hi);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if matches(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let c = Point {
            zxid: ours(lo).expect("matched"),
            slot: lo,
        };
        if s.last_slot() == c.slot {
            SyncMode::Diff { from: c }
        } else {
            SyncMode::Trunc { to: c }
        }
    }

    /// Leader: send the follower what it needs to hold our log, then NEWLEADER. From here on the
    /// follower receives every new proposal and commit, in order after its sync.
    pub fn sync_follower(&mut self, to: NodeId, summary: &LogSummary, out: &mut ZabActions) {
        let Phase::Leading(l) = &self.phase else {
            return;
        };
        let epoch = l.epoch;
        let mode = self.plan_sync(summary);
        let from = match &mode {
            SyncMode::Diff { from } => from.slot,
            SyncMode::Trunc { to } => to.slot,
            SyncMode::Snap(s, _) => s.at.slot,
        };
        let last = self.log.last();
        self.send(out, to, Msg::Sync { epoch, mode });
        let mut batch = Vec::new();
        for e in self.log.range(from, last.slot) {
            batch.push(e.clone());
            if batch.len() == self.opts.sync_batch {
                let entries = std::mem::take(&mut batch);
                self.send(out, to, Msg::Entries { epoch, entries });
            }
        }
        if !batch.is_empty() {
            self.send(
                out,
                to,
                Msg::Entries {
                    epoch,
                    entries: batch,
                },
            );
        }
        // NEWLEADER leaves once our own copy of the history is durable: a variant's follower may
        // count the leader as a logger of what it synchronised.
        let barrier = self.log.last_seq();
        self.send_after(out, to, Msg::NewLeader { epoch, last }, barrier);
        let now = self.now;
        if let Phase::Leading(l) = &mut self.phase {
            l.peers.insert(
                to,
                Peer {
                    synced: false,
                    ack: Zxid::ZERO,
                    sync_last: last,
                    last_heard: now,
                    vote: None,
                    mode: false,
                    echo: (0, 0),
                },
            );
        }
    }

    /// The follower state, if `from` is the leader we follow in `epoch` (and note that we heard
    /// from it).
    pub(crate) fn following_leader(&mut self, from: NodeId, epoch: u32) -> Option<&mut Follower> {
        let now = self.now;
        match &mut self.phase {
            Phase::Following(f) if f.leader == from && f.epoch == epoch && epoch != 0 => {
                f.last_heard = now;
                Some(f)
            }
            _ => None,
        }
    }

    pub fn on_sync(&mut self, from: NodeId, epoch: u32, mode: SyncMode, out: &mut ZabActions) {
        let applied = self.applied;
        let Some(f) = self.following_leader(from, epoch) else {
            return;
        };
        if f.stage != FStage::AwaitSync {
            self.become_looking(out);
            return;
        }
        f.stage = FStage::Syncing;
        match mode {
            SyncMode::Diff { from } => {
                if self.log.last() != from {
                    self.become_looking(out);
                }
            }
            SyncMode::Trunc { to } => {
                // Never drop what was delivered: a leader asking that is not to be followed.
                if self.log.point_of(to.zxid) != Some(to) || to.slot < applied {
                    self.become_looking(out);
                    return;
                }
                if self.log.last() != to {
                    self.log.truncate_after(to, &mut out.persist);
                }
            }
            SyncMode::Snap(snapshot, config) => {
                if snapshot.at.slot < applied {
                    self.become_looking(out);
                    return;
                }
                self.log
                    .install_snapshot(snapshot.clone(), config, &mut out.persist);
                self.applied = snapshot.at.slot;
                out.apply.push(Apply::Restore(snapshot));
            }
        }
    }

    pub fn on_entries(
        &mut self,
        from: NodeId,
        epoch: u32,
        entries: Vec<Entry>,
        out: &mut ZabActions,
    ) {
        let Some(f) = self.following_leader(from, epoch) else {
            return;
        };
        if f.stage != FStage::Syncing {
            self.become_looking(out);
            return;
        }
        let mut last = self.log.last();
        for e in &entries {
            if e.slot != last.slot + 1 || e.zxid <= last.zxid {
                self.become_looking(out);
                return;
            }
            last = e.point();
        }
        self.log.append(entries, &mut out.persist);
    }

    /// Follower: our log equals the leader's; make the new epoch current, durably, then ack.
    /// A recovering follower clears its mark in that same write (recovery.rs): once durable, its
    /// log is the leader's initial history, chosen by a quorum that excluded it, and its acks
    /// count from ACKNEWLEADER on.
    pub fn on_new_leader(&mut self, from: NodeId, epoch: u32, last: Point, out: &mut ZabActions) {
        let mine = self.log.last();
        let Some(f) = self.following_leader(from, epoch) else {
            return;
        };
        if f.stage != FStage::Syncing || mine != last {
            self.become_looking(out);
            return;
        }
        f.stage = FStage::Synced;
        f.acked = last.zxid;
        let hard = Hard {
            current_epoch: epoch,
            recovering: false,
            ..self.log.hard().clone()
        };
        let seq = self.log.set_hard(hard, &mut out.persist);
        self.send_after(out, from, Msg::AckNewLeader { epoch, last }, seq);
    }

    pub fn on_ack_new_leader(
        &mut self,
        from: NodeId,
        epoch: u32,
        last: Point,
        out: &mut ZabActions,
    ) {
        let now = self.now;
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        if epoch != l.epoch {
            return;
        }
        let Some(p) = l.peers.get_mut(&from) else {
            return;
        };
        // Only the answer to this synchronisation counts: a late one from an earlier round of
        // the same epoch (a replayed connection; sim seed 160 at N = 5 on the WAN model) would
        // credit the follower with a log it may not hold.
        if p.synced || last != p.sync_last {
            return;
        }
        p.synced = true;
        p.ack = p.ack.max(p.sync_last.zxid);
        p.last_heard = now;
        if l.stage == LStage::Broadcast {
            let commit = l.commit;
            self.send(out, from, Msg::UpToDate { epoch, commit });
            self.advance_commit(out);
        } else {
            self.try_establish(out);
        }
    }

    /// A quorum (ourselves included, once our current epoch is durable) holds our history: it
    /// is committed, and the epoch is established.
    pub(crate) fn try_establish(&mut self, out: &mut ZabActions) {
        let me = self.cluster.me;
        let m = self.membership();
        let durable_seq = self.log.durable_seq();
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        if l.stage != LStage::AwaitNewLeaderAcks || durable_seq < l.ready_seq {
            return;
        }
        if !m.is_quorum(|p| p == me || l.peers.get(&p).is_some_and(|x| x.synced)) {
            return;
        }
        self.establish(out);
    }

    pub fn establish(&mut self, out: &mut ZabActions) {
        let me = self.cluster.me;
        let history = self.log.last();
        let Phase::Leading(l) = &mut self.phase else {
            return;
        };
        l.stage = LStage::Broadcast;
        l.started = self.now;
        l.commit = history;
        let epoch = l.epoch;
        let synced: Vec<NodeId> = l
            .peers
            .iter()
            .filter(|(_, p)| p.synced)
            .map(|(&id, _)| id)
            .collect();
        out.events.push(Event::View(View {
            role: Role::Leading,
            leader: Some(me),
            epoch: epoch as u64,
        }));
        for p in synced {
            self.send(
                out,
                p,
                Msg::UpToDate {
                    epoch,
                    commit: history,
                },
            );
        }
        self.deliver(history, out);
        // Establishment may commit a configuration change (one of the history): act on it as
        // a commit by L2 would (reconfig.rs; sim seed 1542 at N = 3, a leader left leading a
        // group that no longer named it a voter).
        self.after_commit_config(out);
        if !matches!(self.phase, Phase::Leading(_)) {
            return;
        }
        self.propose_queued(out);
        self.advance_commit(out);
    }

    pub fn on_up_to_date(&mut self, from: NodeId, epoch: u32, commit: Point, out: &mut ZabActions) {
        let Some(f) = self.following_leader(from, epoch) else {
            return;
        };
        match f.stage {
            FStage::Synced => self.start_serving(from, epoch, commit, out),
            // Already serving: a heartbeat stood in for this UPTODATE (see `on_ping`).
            FStage::Broadcast => {
                f.leader_committed(commit);
                let commit = f.commit;
                self.deliver(commit, out);
            }
            _ => self.become_looking(out),
        }
    }

    /// Follower, synchronised: the leader is established (its UPTODATE, or a heartbeat of its
    /// epoch, which only an established leader sends); serve, and deliver what it committed.
    pub(crate) fn start_serving(
        &mut self,
        from: NodeId,
        epoch: u32,
        commit: Point,
        out: &mut ZabActions,
    ) {
        let Phase::Following(f) = &mut self.phase else {
            return;
        };
        f.stage = FStage::Broadcast;
        f.leader_committed(commit);
        let commit = f.commit;
        out.events.push(Event::View(View {
            role: Role::Following,
            leader: Some(from),
            epoch: epoch as u64,
        }));
        self.deliver(commit, out);
    }
}
