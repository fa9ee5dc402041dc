//! The normal case (pft.md §1.4) with batching (§3.1) and duplicate detection (§1.5).
//!
//! REQUEST → the primary assigns `n` and multicasts ACCEPT(v, n, S) while it logs the A record;
//! a backup logs A and answers ACCEPTACK(v, n) once the record is durable; with `f + 1`
//! acknowledgements of view `v` (its own counted once durable) the primary knows `n` is chosen
//! and multicasts COMMIT(v, upto); every replica executes in `n` order, a hole blocking.

use crate::msg::{tag, MAX_BATCH};
use crate::{Batching, Bug, Msg, Order, Paxos, PaxosActions, Status};
use synod_core::{Apply, Command, Dest, Event, NodeId, Position, Reject};

impl Paxos {
    /// Commands submitted at this replica: the primary queues them for ordering, a backup
    /// forwards them to the primary (REQUEST), and during a view change they wait.
    pub fn on_submit(&mut self, commands: Vec<Command>, out: &mut PaxosActions) {
        match self.status {
            Status::Normal if self.is_primary() => {
                self.enqueue(commands, false, out);
                self.propose(out);
            }
            Status::Normal => {
                let to = self.primary_of(self.hard.installed);
                self.forward(to, commands, out);
            }
            Status::ViewChange | Status::Recovering => {
                for c in commands {
                    if self.held.len() >= self.opt.max_queued {
                        out.events.push(Event::Rejected {
                            id: c.id,
                            reason: Reject::Busy,
                        });
                    } else {
                        self.held.push_back(c);
                    }
                }
            }
        }
    }

    pub(crate) fn forward(&mut self, to: NodeId, commands: Vec<Command>, out: &mut PaxosActions) {
        for chunk in commands.chunks(MAX_BATCH) {
            let (nonce, seq) = self.forwarding.number();
            let msg = Msg::Forward {
                view: self.hard.installed,
                nonce,
                seq,
                commands: chunk.to_vec(),
            };
            self.send(Dest::One(to), msg, 0, out);
        }
    }

    /// Queue commands at the primary, dropping those already ordered, executed or queued
    /// (a retransmitted request is never ordered twice), refusing beyond the bound.
    /// `forwarded`: they came from a backup (REQUEST), not from this replica's clients.
    pub(crate) fn enqueue(
        &mut self,
        commands: Vec<Command>,
        forwarded: bool,
        out: &mut PaxosActions,
    ) {
        for c in commands {
            if self.duplicate(c.id) {
                continue;
            }
            if self.queue.len() >= self.opt.max_queued {
                out.events.push(Event::Rejected {
                    id: c.id,
                    reason: Reject::Busy,
                });
                continue;
            }
            if self.batch_since.is_none() {
                self.batch_since = Some(self.now);
            }
            self.queued_ids.insert(c.id, forwarded);
            self.queue.push_back(c);
        }
    }

    /// REQUEST forwarded by a backup: ordered only by the primary of the view it names, and
    /// only once (a forward replayed or duplicated by the network is dropped, so a session's
    /// commands keep their order).
    pub fn on_forward(
        &mut self,
        from: NodeId,
        view: u64,
        (nonce, seq): (u64, u64),
        commands: Vec<Command>,
        out: &mut PaxosActions,
    ) {
        if !self.is_primary() || view != self.hard.installed {
            return;
        }
        if !self.forwards.fresh(from, (nonce, seq)) {
            return;
        }
        self.enqueue(commands, true, out);
        self.propose(out);
    }

    /// Batches proposed and not yet known chosen.
    fn inflight(&self) -> u64 {
        (self.next_n - 1).saturating_sub(self.commit_upto)
    }

    /// Take the next batch from the queue: in order, at most `limit` commands, at most one per
    /// client (§3.1) when the state machine names clients.
    fn take_batch(&mut self, limit: usize) -> Vec<Command> {
        let limit = limit.clamp(1, MAX_BATCH);
        let mut batch: Vec<Command> = Vec::new();
        let mut clients: Vec<u64> = Vec::new();
        while let Some(c) = self.queue.front() {
            if batch.len() >= limit {
                break;
            }
            if let Some(client) = self.opt.client_of.and_then(|f| f(c)) {
                if clients.contains(&client) {
                    break; // this client's next request goes in the next batch
                }
                clients.push(client);
            }
            let c = self.queue.pop_front().expect("front");
            self.queued_ids.remove(&c.id);
            batch.push(c);
        }
        batch
    }

    /// The primary orders what waits, as the batching mode allows (ACCEPT).
    pub fn propose(&mut self, out: &mut PaxosActions) {
        if !self.is_primary() {
            return;
        }
        // Everything that waited when the batch timer expired leaves now, in as many batches
        // as the size and the one-per-client rule need.
        let timer_due = match self.opt.batching {
            Batching::Fixed { timer_us, .. } => self
                .batch_since
                .is_some_and(|t| self.now >= t.saturating_add(timer_us)),
            Batching::Adaptive { .. } => false,
        };
        loop {
            if self.queue.is_empty() {
                self.batch_since = None;
                return;
            }
            let limit = match self.opt.batching {
                Batching::Adaptive { window } => {
                    if self.inflight() >= window.max(1) as u64 {
                        return;
                    }
                    self.opt.max_batch
                }
                Batching::Fixed { size, .. } => {
                    if self.inflight() >= self.opt.max_inflight
                        || (self.queue.len() < size.max(1) && !timer_due)
                    {
                        return;
                    }
                    size
                }
            };
            let batch = self.take_batch(limit);
            // The batch timer restarts at each flush.
            self.batch_since = (!self.queue.is_empty()).then_some(self.now);
            self.propose_batch(batch, out);
        }
    }

    fn propose_batch(&mut self, commands: Vec<Command>, out: &mut PaxosActions) {
        let n = self.next_n;
        self.next_n += 1;
        let view = self.hard.installed;
        self.counters.batches += 1;
        self.counters.batched_commands += commands.len() as u64;
        let order = Order {
            n,
            view,
            chosen: false,
            commands: commands.clone(),
        };
        self.log_orders(vec![order], out);
        self.acks.insert(n, Vec::new());
        self.proposed_at.insert(n, self.now);
        // ACCEPT leaves at once, in parallel with the primary's own write; its own ack counts
        // once the write is durable (`own_acks`).
        self.send(Dest::All, Msg::Accept { view, n, commands }, 0, out);
    }

    /// ACCEPT(v, n, S) at a backup: accepted only in the installed view, from its primary, and
    /// never after this replica promised a later view (VIEWCHANGE, erratum §6.1.4). The A record
    /// is logged and ACCEPTACK leaves once it is durable.
    pub fn on_accept(
        &mut self,
        from: NodeId,
        view: u64,
        n: u64,
        commands: Vec<Command>,
        out: &mut PaxosActions,
    ) {
        if from != self.primary_of(view) {
            return;
        }
        let accepting = match self.status {
            Status::Normal => view == self.hard.installed,
            Status::ViewChange => {
                self.opt.bug == Some(Bug::AcceptAfterViewChange) && view == self.hard.installed
            }
            Status::Recovering => false,
        };
        if !accepting {
            if view > self.hard.installed {
                self.need_view(from, view, out);
            }
            return;
        }
        if self.status == Status::Normal {
            self.last_heard_primary = self.now;
        }
        if n <= self.exec_n || n <= self.base {
            // Already executed here (a reissue after a view change): the value is the chosen
            // one, held by the snapshot or the log.
            let s = self.issuer.last();
            self.send(Dest::One(from), Msg::AcceptAck { view, n }, s, out);
            return;
        }
        if let Some(old) = self.log.get(&n) {
            if old.chosen {
                assert!(
                    same_ids(&old.commands, &commands),
                    "n{} view {view}: ACCEPT at {n} differs from the order known chosen there",
                    self.me()
                );
            }
            if old.view == view && same_ids(&old.commands, &commands) {
                // A duplicate: acknowledge once the record is durable.
                let s = old.seq;
                self.send(Dest::One(from), Msg::AcceptAck { view, n }, s, out);
                return;
            }
        }
        let chosen = self.log.get(&n).is_some_and(|o| o.chosen)
            || (self.commit_heard.0 == view && n <= self.commit_heard.1);
        let order = Order {
            n,
            view,
            chosen,
            commands,
        };
        let s = self.log_orders(vec![order], out);
        self.waiting_since.entry(n).or_insert(self.now);
        let ack = Msg::AcceptAck { view, n };
        self.send(Dest::One(from), ack, s, out);
        self.check_hole(n, out);
        self.execute(out);
    }

    /// ACCEPTACK at the primary: counted only for its installed view (erratum §6.1.2).
    pub fn on_accept_ack(&mut self, from: NodeId, view: u64, n: u64, out: &mut PaxosActions) {
        if !self.is_primary() {
            return;
        }
        if view != self.hard.installed && self.opt.bug != Some(Bug::AckWithoutView) {
            return;
        }
        if let Some(a) = self.acks.get_mut(&n) {
            if !a.contains(&from) {
                a.push(from);
            }
        }
        self.advance_commit(out);
    }

    /// The primary's own acknowledgements: every order of its view whose A record is durable.
    pub(crate) fn own_acks(&mut self, out: &mut PaxosActions) {
        let me = self.me();
        let view = self.hard.installed;
        let mut any = false;
        for (n, a) in self.acks.iter_mut() {
            let durable = self
                .log
                .get(n)
                .is_some_and(|s| s.view == view && s.seq <= self.durable_upto);
            if durable && !a.contains(&me) {
                a.push(me);
                any = true;
            }
        }
        if any {
            self.advance_commit(out);
        }
    }

    /// Certificates with `f + 1` acknowledgements make their orders chosen; the COMMIT point
    /// advances over the chosen prefix and is multicast.
    pub fn advance_commit(&mut self, out: &mut PaxosActions) {
        let q = self.cluster.quorum();
        let view = self.hard.installed;
        let full: Vec<u64> = self
            .acks
            .iter()
            .filter(|(_, a)| a.len() >= q)
            .map(|(&n, _)| n)
            .collect();
        for n in full {
            self.acks.remove(&n);
            if let Some(at) = self.proposed_at.remove(&n) {
                self.sample_latency(self.now.saturating_sub(at));
            }
            if let Some(s) = self.log.get_mut(&n) {
                debug_assert_eq!(s.view, view);
                s.chosen = true;
            }
        }
        let before = self.commit_upto;
        while self
            .log
            .get(&(self.commit_upto + 1))
            .is_some_and(|s| s.chosen)
            || self.commit_upto < self.exec_n
        {
            self.commit_upto += 1;
        }
        if self.commit_upto > before {
            let msg = Msg::Commit {
                view,
                upto: self.commit_upto,
            };
            self.send(Dest::All, msg, 0, out);
            self.next_heartbeat = self.now + self.opt.heartbeat_us;
            self.execute(out);
            self.propose(out);
        }
    }

    /// COMMIT(v, upto) at a backup (also the primary's heartbeat): every order of view `v` up
    /// to `upto` is chosen. An order held from another view is not: it waits for catch-up.
    pub fn on_commit(&mut self, from: NodeId, view: u64, upto: u64, out: &mut PaxosActions) {
        if from != self.primary_of(view) {
            return;
        }
        if view > self.hard.installed {
            self.need_view(from, view, out);
            return;
        }
        if view < self.hard.installed {
            return;
        }
        if self.status == Status::Normal {
            self.last_heard_primary = self.now;
        }
        if self.commit_heard.0 != view || upto > self.commit_heard.1 {
            self.commit_heard = (view, upto);
        }
        let upto = self.commit_heard.1;
        let from_n = self.exec_n + 1;
        let mut hole = None;
        for n in from_n..=upto {
            match self.log.get_mut(&n) {
                Some(s) if s.view == view => {
                    if !s.chosen {
                        s.chosen = true;
                        if let Some(t) = self.waiting_since.remove(&n) {
                            let d = self.now.saturating_sub(t);
                            self.sample_latency(d);
                        }
                    }
                }
                Some(s) if s.chosen => {}
                _ => {
                    hole.get_or_insert(n);
                }
            }
        }
        self.execute(out);
        if let Some(n) = hole {
            self.pbq_query(n.max(self.exec_n + 1), upto, out);
        }
    }

    /// The Inorder Invoker: deliver chosen, durable orders in `n` order; a hole blocks.
    pub fn execute(&mut self, out: &mut PaxosActions) {
        if self.status == Status::Recovering {
            return;
        }
        loop {
            let n = self.exec_n + 1;
            let Some(s) = self.log.get(&n) else { break };
            if !s.chosen || s.seq > self.durable_upto {
                break;
            }
            let commands = s.commands.clone();
            let len = commands.len();
            let start = match self.resume_left.take() {
                Some(left) => len.saturating_sub(left),
                None => 0,
            };
            for (i, c) in commands.into_iter().enumerate().skip(start) {
                self.slot += 1;
                let at = Position {
                    slot: self.slot,
                    tag: tag(n, i, len),
                };
                self.remember_done(c.id);
                out.apply.push(Apply::Command { at, command: c });
            }
            self.exec_n = n;
            self.waiting_since.remove(&n);
        }
        if self.exec_n > self.commit_upto {
            self.commit_upto = self.exec_n;
        }
        self.waiting_since = self.waiting_since.split_off(&(self.exec_n + 1));
        if let Some(t) = self.catch_up_since {
            if !self.has_hole_below(self.commit_heard.1) {
                self.counters.catch_up_us += self.now.saturating_sub(t);
                self.catch_up_since = None;
            }
        }
    }

    /// Whether an order this replica knows to be needed is missing at or below `upto`.
    pub(crate) fn has_hole_below(&self, upto: u64) -> bool {
        (self.exec_n + 1..=upto).any(|n| !self.log.get(&n).is_some_and(|s| s.chosen))
    }

    /// An ordering message named `n`: if an earlier order is missing, ask for it (PBQ).
    pub(crate) fn check_hole(&mut self, n: u64, out: &mut PaxosActions) {
        let expected = self.exec_n + 1;
        if n > expected && (expected..n).any(|k| !self.log.contains_key(&k)) {
            self.pbq_query(expected, n, out);
        }
    }

    /// Fold one ordering latency into the adaptive view-change timer (§5.6.1).
    pub(crate) fn sample_latency(&mut self, d: u64) {
        let l = match self.latency_us {
            Some(l) => (l * 7 + d) / 8,
            None => d,
        };
        self.latency_us = Some(l);
    }
}

pub(crate) fn same_ids(a: &[Command], b: &[Command]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.id == y.id)
}
