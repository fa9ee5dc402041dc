//! Commit (mencius.md §3.4 CheckCommit, §4): an instance is delivered once it and every
//! instance before it is decided; skips and revoked instances deliver nothing. With a
//! commutativity test, a decided instance may go before undecided earlier ones whose only
//! possible values commute with it (M13). Also: duplicates, snapshots (compaction) and state
//! transfer from a peer.

use crate::msg::{self, tag, Body};
use crate::{Bug, Mencius, MenciusActions, Transfer};
use bytes::Bytes;
use synod_core::{Apply, Command, Position, Snapshot, StorageOp};

/// What an instance holds as this replica knows it.
pub(crate) enum Known<'a> {
    /// Decided: the value (empty: no-op).
    Decided(&'a [Command]),
    /// Undecided, but only this value (or a no-op) can be chosen: the owner's suggestion.
    Candidate(&'a [Command]),
    Unknown,
}

const NOOP: &[Command] = &[];

impl Mencius {
    /// Whether instance `i` is decided here, and with what.
    pub(crate) fn decided(&self, i: u64) -> Option<&[Command]> {
        match self.known(i) {
            Known::Decided(v) => Some(v),
            _ => None,
        }
    }

    pub(crate) fn known(&self, i: u64) -> Known<'_> {
        if i < self.n {
            return Known::Decided(NOOP);
        }
        let x = self.insts.get(&i);
        if let Some(v) = x.and_then(|x| x.learned.as_deref()) {
            return Known::Decided(v);
        }
        if i < self.expected {
            // Delivered: its value is kept until compaction; without one it was a no-op
            // (a skip or a revoked block forgotten since).
            return Known::Decided(NOOP);
        }
        if self.decided_blocks.iter().any(|r| r.covers(i, self.n)) {
            // A revoked block: no-op, but for the values its DECIDE listed (kept as records
            // with the DECIDED ballot).
            return match x.and_then(|x| x.accepted.as_ref()) {
                Some((b, v)) if *b == crate::msg::DECIDED => Known::Decided(v),
                _ => Known::Decided(NOOP),
            };
        }
        let q = self.owner(i);
        let suggested = x.is_some_and(|x| x.suggested || x.own);
        if q == self.me {
            // Own: below the index and never suggested, it is a skip, decided once the index
            // is durable (`skips_durable`): a restart must not suggest there.
            if i < self.skips_durable && !suggested {
                return Known::Decided(NOOP);
            }
        } else if i < self.est[q] && !suggested {
            // Opt. 1 / Opt. 2: the owner said it skipped it.
            return Known::Decided(NOOP);
        }
        match x.and_then(|x| x.accepted.as_ref()) {
            Some((_, v)) if suggested => Known::Candidate(v),
            _ => Known::Unknown,
        }
    }

    /// Deliver every instance from the commit point on that is decided, in order; then, with
    /// a commutativity test, what may go early.
    pub(crate) fn commit(&mut self, out: &mut MenciusActions) {
        self.note_durable_floor();
        let before = self.expected;
        let mut budget = 1_000_000u64;
        while budget > 0 {
            budget -= 1;
            let i = self.expected;
            let Some(v) = self.decided(i).map(|v| v.to_vec()) else {
                break;
            };
            if !v.is_empty() {
                // Kept (until compaction) to answer catch-up: below the commit point an
                // instance without a learned value is a no-op.
                if let Some(x) = self.insts.get_mut(&i) {
                    if x.learned.is_none() {
                        x.learned = Some(v.clone());
                    }
                }
            }
            if !self.ooo.remove(&i) {
                self.deliver(i, &v, out);
            }
            self.expected += 1;
        }
        if self.expected != before {
            self.stuck = (self.expected, self.now);
            self.collect_decided();
        }
        if self.opt.commute.is_some() {
            self.commit_out_of_order(out);
        }
    }

    fn deliver(&mut self, i: u64, v: &[Command], out: &mut MenciusActions) {
        let len = v.len();
        let skip_first = match self.resume_left {
            Some((ri, left)) if ri == i => {
                self.resume_left = None;
                len.saturating_sub(left)
            }
            _ => 0,
        };
        for (k, c) in v.iter().enumerate().skip(skip_first) {
            if !self.recent.insert(c.id) {
                self.counters.duplicates += 1;
                continue;
            }
            self.slot += 1;
            if self.ooo.range(i..).next().is_some() {
                self.mark_dirty(self.slot);
            }
            out.apply.push(Apply::Command {
                at: Position {
                    slot: self.slot,
                    tag: tag(i, k, len),
                },
                command: c.clone(),
            });
        }
    }

    /// M13: deliver a decided instance `i` above the commit point now if, for every earlier
    /// instance not yet delivered, the only values it can take commute with `i`'s commands:
    /// decided ones (waiting behind a hole) and candidates (the owner's suggestion, or a no-op
    /// by simple consensus) must commute; an instance whose candidate is unknown stops it.
    pub(crate) fn commit_out_of_order(&mut self, out: &mut MenciusActions) {
        let Some(commute) = self.opt.commute else {
            return;
        };
        let ignore = self.opt.bug == Some(Bug::CommitNonCommuting);
        let end = self.expected.saturating_add(self.opt.ooo_window);
        let ready: Vec<u64> = self
            .insts
            .range(self.expected + 1..end)
            .filter(|(i, x)| {
                x.learned.as_ref().is_some_and(|v| !v.is_empty()) && !self.ooo.contains(i)
            })
            .map(|(&i, _)| i)
            .collect();
        for i in ready {
            let v = self.insts[&i].learned.clone().expect("decided");
            let mut ok = true;
            let mut j = self.expected;
            while ok && j < i {
                if !self.ooo.contains(&j) {
                    let others: &[Command] = match self.known(j) {
                        Known::Decided(w) | Known::Candidate(w) => w,
                        Known::Unknown => {
                            ok = false;
                            NOOP
                        }
                    };
                    ok = ok && (ignore || others.iter().all(|a| v.iter().all(|b| commute(a, b))));
                }
                j += 1;
            }
            if ok {
                self.counters.out_of_order += 1;
                self.ooo.insert(i);
                self.deliver(i, &v, out);
            }
        }
    }

    /// The state right after delivery `slot` was not an instance prefix (something above was
    /// delivered out of order): a snapshot taken there must not be kept.
    fn mark_dirty(&mut self, slot: u64) {
        match self.dirty.last_mut() {
            Some((_, b)) if *b + 1 == slot => *b = slot,
            _ => self.dirty.push((slot, slot)),
        }
        if self.dirty.len() > 4_096 {
            // Merge the two oldest: conservative (marks clean points dirty), bounded.
            let (a, _) = self.dirty.remove(0);
            self.dirty[0].0 = a;
        }
    }

    /// Forget decided no-op blocks wholly below the commit point.
    fn collect_decided(&mut self) {
        let e = self.expected;
        self.decided_blocks.retain(|r| r.to >= e);
    }

    /// The state machine took a snapshot: store it and drop the log through it, unless
    /// something above the commit point was delivered out of order (the snapshot then holds
    /// more than an instance prefix, docs/contract.md §7).
    pub(crate) fn on_compact(&mut self, s: Snapshot, out: &mut MenciusActions) {
        let slot = s.at.slot;
        if slot > self.slot || slot == 0 || self.dirty.iter().any(|&(a, b)| a <= slot && slot <= b)
        {
            return;
        }
        self.dirty.retain(|&(_, b)| b > slot);
        let through = self.persist_snapshot(&s, out);
        self.base = self.base.max(through + 1);
        let keep = self.insts.split_off(&self.base);
        self.insts = keep;
        self.snap = Some(s);
    }

    /// Catch-up: a peer's first undecided instance is `from`. Answer with every instance from
    /// there that is decided here (or a snapshot when the log no longer holds them).
    pub(crate) fn on_need(&mut self, q: usize, from: u64, out: &mut MenciusActions) {
        if from < self.base {
            if self.snap.is_some() {
                self.send_chunk(q, 0, out);
            }
            return;
        }
        let mut values = Vec::new();
        let mut to = from;
        while to < from + self.opt.catch_up_max {
            match self.decided(to) {
                Some(v) => {
                    if !v.is_empty() {
                        values.push((to, v.to_vec()));
                    }
                    to += 1;
                }
                None => break,
            }
        }
        if to > from {
            self.send(q, Body::Learned { from, to, values }, 0, out);
        }
        // The owner of the first undecided instance also resends its suggestion.
        if self.owner(to) == self.me && self.inflight.contains(&to) {
            if let Some(x) = self.insts.get_mut(&to) {
                x.suggested_at = 0;
            }
        }
    }

    pub(crate) fn on_learned(
        &mut self,
        from: u64,
        to: u64,
        values: Vec<(u64, Vec<Command>)>,
        out: &mut MenciusActions,
    ) {
        let to = to.min(from.saturating_add(self.opt.catch_up_max));
        let mut vals = values.into_iter().peekable();
        for i in from.max(self.expected)..to {
            while vals.peek().is_some_and(|(k, _)| *k < i) {
                vals.next();
            }
            let v = match vals.peek() {
                Some((k, _)) if *k == i => vals.next().map(|(_, v)| v).unwrap_or_default(),
                _ => Vec::new(),
            };
            self.learn(i, v, out);
        }
        // A revocation whose first instance turned out decided is behind: drop it; the next
        // tick starts one from the new first undecided instance.
        let stale: Vec<usize> = self
            .revocations
            .iter()
            .filter(|(_, r)| self.decided(r.range.from).is_some())
            .map(|(&q, _)| q)
            .collect();
        for q in stale {
            self.revocations.remove(&q);
        }
    }

    /// Catch-up timer: the commit point has not moved; ask every peer what it knows.
    pub(crate) fn catch_up(&mut self, out: &mut MenciusActions) {
        if self.stuck.0 != self.expected {
            self.stuck = (self.expected, self.now);
            return;
        }
        let waited = self.now.saturating_sub(self.stuck.1);
        let pending = self.insts.range(self.expected..).next().is_some()
            || self
                .est
                .iter()
                .enumerate()
                .any(|(p, &e)| p != self.me && e > self.expected);
        if waited < self.opt.catch_up_us
            || self.now < self.need_sent_at + self.opt.catch_up_us
            || !pending
        {
            return;
        }
        self.need_sent_at = self.now;
        self.counters.catch_up += 1;
        let from = self.expected;
        self.broadcast(Body::Need { from }, 0, out);
        if let Some(t) = &self.transfer {
            if self.now >= t.asked_at + self.opt.catch_up_us {
                self.transfer = None;
            }
        }
    }

    fn send_chunk(&mut self, q: usize, offset: u64, out: &mut MenciusActions) {
        let Some(s) = &self.snap else {
            return;
        };
        let total = s.data.len() as u64;
        if offset > total {
            return;
        }
        let end = (offset + self.opt.snap_chunk_bytes as u64).min(total);
        let body = Body::SnapChunk {
            at: s.at,
            total,
            offset,
            data: s.data.slice(offset as usize..end as usize),
        };
        self.send(q, body, 0, out);
    }

    pub(crate) fn on_snap_request(
        &mut self,
        q: usize,
        from: u64,
        offset: u64,
        out: &mut MenciusActions,
    ) {
        if self
            .snap
            .as_ref()
            .is_some_and(|s| msg::snapshot_instance(s) >= from)
        {
            self.send_chunk(q, offset, out);
        }
    }

    /// A chunk of a peer's snapshot: assemble it (one transfer at a time, resumed by offset)
    /// and install it when whole.
    pub(crate) fn on_snap_chunk(
        &mut self,
        q: usize,
        at: Position,
        total: u64,
        offset: u64,
        data: Bytes,
        out: &mut MenciusActions,
    ) {
        let inst = msg::tag_instance(at.tag);
        let left = msg::tag_left(at.tag);
        // New only if it covers the first undecided instance (instances, not slots: with
        // out-of-order commit this replica's slots run ahead of its prefix).
        let covers = if left == 0 {
            inst >= self.expected
        } else {
            inst > self.expected
                || (inst == self.expected
                    && self
                        .resume_left
                        .is_none_or(|(ri, l)| ri == inst && left < l))
        };
        if !covers {
            return;
        }
        let t = self.transfer.get_or_insert_with(|| Transfer {
            from: q,
            at: None,
            total,
            buf: bytes::BytesMut::new(),
            asked_at: 0,
        });
        if t.at != Some(at) {
            if offset != 0 {
                return;
            }
            *t = Transfer {
                from: q,
                at: Some(at),
                total,
                buf: bytes::BytesMut::new(),
                asked_at: 0,
            };
        }
        if t.from != q || offset != t.buf.len() as u64 || total != t.total {
            return;
        }
        t.buf.extend_from_slice(&data);
        t.asked_at = self.now;
        if (t.buf.len() as u64) < t.total {
            let next = t.buf.len() as u64;
            self.send(
                q,
                Body::SnapRequest {
                    from: inst,
                    offset: next,
                },
                0,
                out,
            );
            return;
        }
        let t = self.transfer.take().expect("a transfer");
        let snapshot = Snapshot {
            at,
            data: t.buf.freeze(),
        };
        self.install(snapshot, out);
    }

    /// Store snapshot `s` and drop the log through the last whole instance it covers (the one
    /// before its instance when it ends inside a batch); returns that instance.
    fn persist_snapshot(&mut self, s: &Snapshot, out: &mut MenciusActions) -> u64 {
        let (i, left) = (msg::tag_instance(s.at.tag), msg::tag_left(s.at.tag));
        let through = if left == 0 { i } else { i - 1 };
        self.persist(
            StorageOp::Snapshot {
                snapshot: s.clone(),
                drop_through: Position {
                    slot: s.at.slot,
                    tag: synod_core::kit::tag::through(through),
                },
                replace_log: false,
            },
            out,
        );
        through
    }

    /// Replace the state with a peer's snapshot: everything up to its instance is delivered.
    fn install(&mut self, s: Snapshot, out: &mut MenciusActions) {
        let (i, left) = (msg::tag_instance(s.at.tag), msg::tag_left(s.at.tag));
        let through = self.persist_snapshot(&s, out);
        out.apply.push(Apply::Restore(s.clone()));
        self.slot = s.at.slot;
        self.expected = through + 1;
        self.resume_left = if left == 0 { None } else { Some((i, left)) };
        self.base = self.expected;
        self.ooo.clear();
        self.dirty.clear();
        // The state was replaced: what was delivered out of order above the snapshot is gone
        // from it and is delivered again, so it must not count as a duplicate.
        self.recent.clear();
        let keep = self.insts.split_off(&self.base);
        self.insts = keep;
        self.inflight.retain(|&k| k >= self.expected);
        let me = self.me;
        let floor = self.own_at_or_after(me, self.expected);
        if floor > self.index {
            self.raise_index(floor, None, out);
        }
        for p in 0..self.n as usize {
            if p != me {
                self.est[p] = self.est[p].max(self.own_at_or_after(p, self.expected));
            }
        }
        self.snap = Some(s);
        self.stuck = (self.expected, self.now);
    }
}
