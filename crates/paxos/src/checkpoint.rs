//! Checkpoints and garbage collection (pft.md §3.2) and state transfer (§3.5).
//!
//! The state machine offers a snapshot (`Compact`); the replica multicasts CHECKPOINT with the
//! number of whole batches it covers and a digest of its bytes. The highest point that `f + 1`
//! replicas have reached is *stable*; a replica drops its log through the stable point or its
//! own snapshot, whichever is lower, so the orders above it stay available to catch-up.
//!
//! State transfer is pulled by the replica that needs it, in chunks it asks for one at a time
//! by offset: it resumes where it stopped, from the same replica or from any other holding the
//! same checkpoint (snapshots at one point are identical, as the digests check).

use crate::msg::{digest, tag_left, tag_n};
use crate::{CatchUp, Msg, Paxos, PaxosActions, Status, Transfer};
use bytes::Bytes;
use synod_core::{quorum, Apply, Dest, NodeId, Position, Snapshot, StorageOp};

/// The point a snapshot covers: whole batches, and the commands left of the next one when it
/// ends inside a batch.
pub fn point_of(at: Position) -> (u64, Option<usize>) {
    let (n, left) = (tag_n(at.tag), tag_left(at.tag));
    if at.slot == 0 || left == 0 {
        (n, None)
    } else {
        (n - 1, Some(left))
    }
}

/// The key a log is dropped through to leave batch `n` and everything before it behind.
fn through(slot: u64, n: u64) -> Position {
    Position {
        slot,
        tag: synod_core::kit::tag::through(n),
    }
}

/// Snapshot bytes accepted from a state transfer.
const MAX_SNAPSHOT_BYTES: u64 = 1 << 34;

impl Paxos {
    /// The state machine took a snapshot: keep it to serve state transfers, store it, and
    /// announce the checkpoint (CHECKPOINT).
    pub fn on_compact(&mut self, s: Snapshot, out: &mut PaxosActions) {
        if self.status == Status::Recovering || s.at.slot > self.slot {
            return;
        }
        let (n, _) = point_of(s.at);
        let d = digest(&s);
        self.note_digest(s.at.slot, d, self.me());
        let msg = Msg::Checkpoint {
            n,
            slot: s.at.slot,
            digest: d,
        };
        self.snaps.push_back(s);
        while self.snaps.len() > 2 {
            self.snaps.pop_front();
        }
        self.send(Dest::All, msg, 0, out);
        self.update_stable();
        self.collect_garbage(true, out);
    }

    /// The newest snapshot this replica holds and the whole batches it covers.
    fn own_point(&self) -> u64 {
        self.snaps.back().map_or(0, |s| point_of(s.at).0)
    }

    pub fn on_checkpoint(
        &mut self,
        from: NodeId,
        n: u64,
        slot: u64,
        d: u64,
        out: &mut PaxosActions,
    ) {
        let p = self.peer_points.entry(from).or_insert(0);
        *p = (*p).max(n);
        self.note_digest(slot, d, from);
        self.update_stable();
        self.collect_garbage(false, out);
        // Without catch-up, a checkpoint beyond this replica is its only way forward.
        if self.opt.catch_up == CatchUp::None && n > self.exec_n && self.transfer.is_none() {
            self.request_transfer(from, n, out);
        }
    }

    fn note_digest(&mut self, slot: u64, d: u64, from: NodeId) {
        match self.digests.get(&slot) {
            Some(&(known, by)) if known != d => {
                assert!(
                    !self.opt.check_digests,
                    "n{}: the state at slot {slot} differs between n{by} and n{from}",
                    self.me()
                );
            }
            Some(_) => {}
            None => {
                self.digests.insert(slot, (d, from));
                while self.digests.len() > 64 {
                    self.digests.pop_first();
                }
            }
        }
    }

    /// Stable: the highest point `f + 1` replicas have reached.
    fn update_stable(&mut self) {
        let mut points: Vec<u64> = self.peer_points.values().copied().collect();
        points.push(self.own_point());
        if let Some(s) = quorum::kth_largest(&mut points, self.cluster.quorum()) {
            self.stable = self.stable.max(s);
        }
    }

    /// Drop the log through min(stable, own snapshot). `store` also stores a snapshot that
    /// drops nothing (a new one, so that a restart starts from it).
    fn collect_garbage(&mut self, store: bool, out: &mut PaxosActions) {
        let Some(s) = self.snaps.back().cloned() else {
            return;
        };
        let target = self.stable.min(point_of(s.at).0).min(self.exec_n);
        if target <= self.base && !store {
            return;
        }
        let target = target.max(self.base);
        self.persist(
            StorageOp::Snapshot {
                drop_through: through(s.at.slot, target),
                snapshot: s,
                replace_log: false,
            },
            out,
        );
        self.drop_log_through(target);
    }

    fn drop_log_through(&mut self, n: u64) {
        self.base = self.base.max(n);
        let keep = self.log.split_off(&(n + 1));
        for (_, s) in std::mem::replace(&mut self.log, keep) {
            for c in s.commands {
                self.ordered.remove(&c.id);
            }
        }
    }

    // ---- state transfer ----

    /// Ask `from` for a checkpoint covering at least `n` whole batches.
    pub(crate) fn request_transfer(&mut self, from: NodeId, n: u64, out: &mut PaxosActions) {
        if let Some(t) = &mut self.transfer {
            t.need_n = t.need_n.max(n);
            return;
        }
        self.transfer = Some(Transfer {
            from,
            need_n: n,
            at: None,
            total: 0,
            buf: bytes::BytesMut::new(),
            asked_at: self.now,
        });
        self.send(
            Dest::One(from),
            Msg::SnapRequest {
                n,
                at: None,
                offset: 0,
            },
            0,
            out,
        );
    }

    /// Resume a state transfer that stalled, from the next replica.
    pub(crate) fn retry_transfer(&mut self, out: &mut PaxosActions) {
        let peers: Vec<NodeId> = self.cluster.peers().collect();
        let Some(t) = &mut self.transfer else { return };
        if peers.is_empty() {
            return;
        }
        let i = peers.iter().position(|&p| p == t.from).map_or(0, |i| i + 1);
        t.from = peers[i % peers.len()];
        t.asked_at = self.now;
        let msg = Msg::SnapRequest {
            n: t.need_n,
            at: t.at,
            offset: t.buf.len() as u64,
        };
        let to = t.from;
        self.send(Dest::One(to), msg, 0, out);
    }

    pub fn on_snap_request(
        &mut self,
        from: NodeId,
        n: u64,
        at: Option<Position>,
        offset: u64,
        out: &mut PaxosActions,
    ) {
        let wanted = at.and_then(|a| self.snaps.iter().find(|s| s.at == a));
        let (snap, offset) = match wanted {
            Some(s) => (s, offset),
            None => match self.snaps.back() {
                Some(s) if point_of(s.at).0 >= n => (s, 0),
                _ => return, // nothing that covers it: the requester tries another replica
            },
        };
        let total = snap.data.len() as u64;
        let start = offset.min(total) as usize;
        let end = (start + self.opt.snap_chunk_bytes.max(1)).min(total as usize);
        let msg = Msg::SnapChunk {
            at: snap.at,
            total,
            offset: start as u64,
            data: snap.data.slice(start..end),
        };
        self.send(Dest::One(from), msg, 0, out);
    }

    pub fn on_snap_chunk(
        &mut self,
        from: NodeId,
        at: Position,
        total: u64,
        offset: u64,
        data: Bytes,
        out: &mut PaxosActions,
    ) {
        let Some(t) = &mut self.transfer else { return };
        if total > MAX_SNAPSHOT_BYTES {
            return;
        }
        if t.at != Some(at) {
            if offset != 0 {
                return;
            }
            t.at = Some(at);
            t.total = total;
            t.buf.clear();
        }
        if offset != t.buf.len() as u64 || t.total != total {
            return;
        }
        t.buf.extend_from_slice(&data);
        t.from = from;
        t.asked_at = self.now;
        if (t.buf.len() as u64) < total {
            if data.is_empty() {
                return;
            }
            let msg = Msg::SnapRequest {
                n: t.need_n,
                at: Some(at),
                offset: t.buf.len() as u64,
            };
            self.send(Dest::One(from), msg, 0, out);
            return;
        }
        let t = self.transfer.take().expect("transfer");
        let s = Snapshot {
            at,
            data: t.buf.freeze(),
        };
        self.install(s, out);
    }

    /// Install a checkpoint from a peer: the state machine restores it, storage keeps it, the
    /// log drops what it covers, and execution continues from the next order.
    pub fn install(&mut self, s: Snapshot, out: &mut PaxosActions) {
        if s.at.slot <= self.slot {
            return;
        }
        let (n, left) = point_of(s.at);
        self.counters.state_transfers += 1;
        out.apply.push(Apply::Restore(s.clone()));
        self.persist(
            StorageOp::Snapshot {
                drop_through: through(s.at.slot, n),
                snapshot: s.clone(),
                replace_log: false,
            },
            out,
        );
        self.slot = s.at.slot;
        self.exec_n = n;
        self.resume_left = left;
        self.drop_log_through(n);
        self.commit_upto = self.commit_upto.max(n);
        self.waiting_since = self.waiting_since.split_off(&(n + 1));
        self.snaps.push_back(s);
        while self.snaps.len() > 2 {
            self.snaps.pop_front();
        }
        self.update_stable();
        if self.status == Status::Recovering {
            self.try_finish_recovery(out);
        } else {
            self.execute(out);
            self.collecting_progress(out);
        }
    }
}
