//! View change (pft.md §3.4) with the errata of §6.1 closed.
//!
//! * VIEWCHANGE is the Paxos phase-1 promise: the promise is durable before the message leaves,
//!   and from then on the replica accepts nothing in its old view (§6.1.4).
//! * The new primary (`v mod N`) needs `f + 1` VIEWCHANGEs, its own included; NEWVIEW reissues
//!   every sequence number from the highest reported log base up to the highest *accepted*
//!   `n` (erratum a), a chosen order first, else the accept from the highest view (erratum b),
//!   else a null. Reissued orders keep their numbers and go through a full round in the new
//!   view (§6.1.7): the new primary logs them before NEWVIEW leaves, backups log them and
//!   acknowledge each, and the primary commits them as any other order.
//! * Amplification: a replica that hears a VIEWCHANGE for a later view joins it.
//! * A replica that hears of a later view from its primary asks for the NEWVIEW (NEEDVIEW), so
//!   a replica left behind joins without a view change of its own.

use crate::msg::ViewReport;
use crate::normal::same_ids;
use crate::{Bug, Msg, Order, Paxos, PaxosActions, Status};
use std::collections::BTreeMap;
use synod_core::{Dest, NodeId, TimeUs};

impl Paxos {
    /// Promise view `v` (durably) and multicast VIEWCHANGE behind the promise.
    pub fn start_view_change(&mut self, v: u64, out: &mut PaxosActions) {
        assert!(
            v > self.hard.promised,
            "n{}: a view change to {v} after promising {}",
            self.me(),
            self.hard.promised
        );
        self.hard.promised = v;
        self.status = Status::ViewChange;
        self.vc_since = self.now;
        self.suspect = None;
        self.counters.view_changes += 1;
        self.reports.clear();
        self.step_down();
        self.next_heartbeat = self.now + self.opt.heartbeat_us;
        self.set_hard(out);
        self.send_view_change(out);
    }

    /// Leave the primary's duties: certificates are dropped (acknowledgements count only in
    /// their view). Commands of this replica's clients never ordered wait for the next primary;
    /// commands a backup forwarded are dropped, as if lost with a connection: handing them on
    /// from here would give them a second route, and a later command of the same session,
    /// forwarded by its own replica to the next primary, could overtake them.
    fn step_down(&mut self) {
        self.acks.clear();
        self.proposed_at.clear();
        self.forwards.clear();
        self.new_view_msg = None;
        self.batch_since = None;
        while let Some(c) = self.queue.pop_front() {
            if self.queued_ids.remove(&c.id) == Some(false) {
                self.held.push_back(c);
            }
        }
        self.queued_ids.clear();
    }

    /// `<VIEWCHANGE, v, n, l, P, i>` for the promised view, behind every op issued so far (the
    /// promise among them).
    pub(crate) fn send_view_change(&mut self, out: &mut PaxosActions) {
        // The new primary multicasts too (without orders: nobody else builds its NEWVIEW), so
        // the others learn of the view change and join.
        let leading = self.primary_of(self.hard.promised) == self.me();
        let msg = self.view_change_msg(!leading);
        let after = self.issuer.last();
        self.send(Dest::All, msg, after, out);
        if !leading {
            self.report_sent = (self.hard.promised, self.now, self.first_resend_wait());
        }
        self.try_new_view(out);
    }

    /// How long a report just sent is given to arrive before a beacon that lacks it has it
    /// sent again: a quarter of the view-change timer (set long where links are slow), at least
    /// two heartbeats.
    fn first_resend_wait(&self) -> TimeUs {
        (self.vc_timeout / 4).max(2 * self.opt.heartbeat_us)
    }

    /// `<VIEWCHANGE, v, n, l, P, i>` for the promised view, with its orders or without them.
    ///
    /// The orders are those held above the sender's execution point `n`, not above its log
    /// base `l` as in the thesis: an executed order is chosen, so it is no part of the phase-1
    /// answer the new primary must reconcile, and the new primary fetches any it lacks before
    /// it builds NEWVIEW (`Paxos::try_new_view`). The report stays as small as the orders in
    /// flight, where the whole log since the last checkpoint (megabytes of requests) could take
    /// longer than the view-change timer to cross a slow link.
    fn view_change_msg(&self, with_orders: bool) -> Msg {
        Msg::ViewChange {
            view: self.hard.promised,
            executed: self.exec_n,
            stable: self.base,
            orders: if with_orders {
                self.orders_above(self.exec_n.max(self.base) + 1, usize::MAX)
            } else {
                Vec::new()
            },
        }
    }

    fn own_report(&self) -> ViewReport {
        ViewReport {
            view: self.hard.promised,
            executed: self.exec_n,
            stable: self.base,
            orders: self.orders_above(self.base + 1, usize::MAX),
        }
    }

    /// VIEWCHANGE from a peer: join a later view, collect reports for a view this replica is
    /// to lead, or bring a replica that is behind up to date.
    pub fn on_view_change(&mut self, from: NodeId, report: ViewReport, out: &mut PaxosActions) {
        let v = report.view;
        if v > self.hard.promised {
            self.start_view_change(v, out);
        }
        if v == self.hard.promised && self.status == Status::ViewChange {
            if self.primary_of(v) == self.me() {
                // Reports still arriving are progress: the view is not given up meanwhile.
                self.vc_since = self.now;
                self.reports.insert(from, report);
                self.try_new_view(out);
            }
            return;
        }
        // A view this replica has moved past: its primary answers with its NEWVIEW.
        if self.is_primary() && v <= self.hard.installed {
            if let Some(nv) = self.new_view_msg.clone() {
                self.send(Dest::One(from), nv, 0, out);
            }
        }
    }

    /// The new primary, with `f + 1` reports (its own included), installs the view.
    pub fn try_new_view(&mut self, out: &mut PaxosActions) {
        let v = self.hard.promised;
        if self.status != Status::ViewChange || self.primary_of(v) != self.me() {
            return;
        }
        if self.reports.len() + 1 < self.cluster.quorum() {
            return;
        }
        let base = self
            .reports
            .values()
            .map(|r| r.stable)
            .max()
            .unwrap_or(0)
            .max(self.base);
        // Reports leave out what their senders executed: every order up to the highest
        // execution point reported is chosen, and this replica must hold it as chosen (its own
        // report is then the one `reissue` takes) before the others' accepts suffice for the
        // rest. What it lacks it fetches from the replica that executed furthest.
        let (ahead, furthest) = self
            .reports
            .iter()
            .map(|(&id, r)| (id, r.executed))
            .max_by_key(|&(_, e)| e)
            .unwrap_or((self.me(), 0));
        let lacking = (base.max(self.exec_n) + 1..=furthest)
            .find(|n| !self.log.get(n).is_some_and(|s| s.chosen));
        if let Some(n) = lacking {
            if self.now >= self.next_query {
                self.next_query = self.now + 2 * self.opt.heartbeat_us;
                let msg = Msg::QueryMulticast {
                    lower: Some(n),
                    upper: furthest,
                    executed: self.exec_n,
                };
                self.send(Dest::One(ahead), msg, 0, out);
            }
            return;
        }
        let own = self.own_report();
        let mut all: Vec<&ViewReport> = self.reports.values().collect();
        all.push(&own);
        let behind = all
            .iter()
            .zip(self.reports.keys().copied().chain([self.me()]))
            .filter(|(r, _)| r.stable == base)
            .map(|(_, id)| id)
            .next();
        // Orders every reporter (this replica included) executed need no new round: NEWVIEW
        // starts above them. A replica that executed less (outside the quorum) fetches them by
        // catch-up as chosen orders; one below `base` pulls a checkpoint.
        let start = all.iter().map(|r| r.executed).min().unwrap_or(0).max(base);
        let orders = reissue(v, start, &all, self.opt.bug);
        self.install_as_primary(v, base, orders, out);
        if base > self.exec_n {
            // Checkpoint reconciliation the other way round: the new primary itself is behind
            // the highest checkpoint reported.
            if let Some(src) = behind.filter(|&id| id != self.me()) {
                self.request_transfer(src, base, out);
            }
        }
    }

    fn install_as_primary(
        &mut self,
        v: u64,
        base: u64,
        orders: Vec<Order>,
        out: &mut PaxosActions,
    ) {
        let n_max = orders.last().map_or(base, |o| o.n);
        for (n, chosen) in self.log_reissued(v, &orders, out) {
            if !chosen {
                self.acks.insert(n, Vec::new());
                self.proposed_at.insert(n, self.now);
            }
        }
        self.hard.installed = v;
        let after = self.set_hard(out);
        self.status = Status::Normal;
        self.next_n = n_max.max(self.exec_n).max(base) + 1;
        self.commit_upto = self.exec_n;
        self.commit_heard = (v, self.exec_n);
        self.vc_timeout = self.base_timeout();
        self.reports.clear();
        self.forwards.clear();
        let nv = Msg::NewView {
            view: v,
            base,
            orders,
        };
        self.new_view_msg = Some(nv.clone());
        self.send(Dest::All, nv, after, out);
        self.next_heartbeat = self.now + self.opt.heartbeat_us;
        // Commands that waited during the view change are ordered now, after the reissued ones.
        let held: Vec<_> = self.held.drain(..).collect();
        self.enqueue(held, false, out);
        self.advance_commit(out);
        self.propose(out);
    }

    /// Log NEWVIEW's orders as accepts of view `v` (those this replica has not executed),
    /// replacing what the log holds at their numbers; returns each number logged and whether
    /// its order was already known chosen here.
    fn log_reissued(
        &mut self,
        v: u64,
        orders: &[Order],
        out: &mut PaxosActions,
    ) -> Vec<(u64, bool)> {
        let mut logged = Vec::new();
        let mut keep = Vec::new();
        for o in orders {
            if o.n <= self.exec_n || o.n <= self.base {
                continue;
            }
            let chosen = self.keep_chosen(o);
            logged.push((o.n, chosen));
            keep.push(Order {
                n: o.n,
                view: v,
                chosen,
                commands: o.commands.clone(),
            });
        }
        self.log_orders(keep, out);
        logged
    }

    /// Whether the order reissued at `o.n` was already known chosen here (then it must be the
    /// same order: Paxos's safety, asserted).
    fn keep_chosen(&self, o: &Order) -> bool {
        match self.log.get(&o.n) {
            Some(old) if old.chosen => {
                let same = same_ids(&old.commands, &o.commands);
                assert!(
                    same || self.opt.bug.is_some(),
                    "n{}: NEWVIEW reissues at {} an order other than the chosen one",
                    self.me(),
                    o.n
                );
                same
            }
            _ => false,
        }
    }

    /// NEWVIEW at a backup: install the view, log the reissued orders (replacing what is there:
    /// they come from the highest view) and acknowledge each once logged.
    pub fn on_new_view(
        &mut self,
        from: NodeId,
        v: u64,
        base: u64,
        orders: Vec<Order>,
        out: &mut PaxosActions,
    ) {
        if from != self.primary_of(v) || v < self.hard.promised {
            return;
        }
        if self.status == Status::Normal && v == self.hard.installed {
            // A duplicate (asked for, or replayed): acknowledge again what is logged.
            for o in &orders {
                let s = match self.log.get(&o.n) {
                    Some(sl) if sl.view == v => sl.seq,
                    _ if o.n <= self.exec_n => self.issuer.last(),
                    _ => continue,
                };
                self.send(Dest::One(from), Msg::AcceptAck { view: v, n: o.n }, s, out);
            }
            return;
        }
        self.hard.promised = v;
        self.hard.installed = v;
        self.status = Status::Normal;
        // The new view's orders are timed from now: an accept of an earlier view kept its
        // timestamp otherwise, and after a view change longer than the timeout the backup
        // found its first reissued order "stuck" and deposed the primary it had just installed.
        self.waiting_since.clear();
        for (n, _) in self.log_reissued(v, &orders, out) {
            self.waiting_since.insert(n, self.now);
        }
        let after = self.set_hard(out);
        for o in &orders {
            self.send(
                Dest::One(from),
                Msg::AcceptAck { view: v, n: o.n },
                after,
                out,
            );
        }
        self.step_down();
        self.commit_heard = (v, 0);
        self.last_heard_primary = self.now;
        self.vc_timeout = self.base_timeout();
        self.reports.clear();
        let held: Vec<_> = self.held.drain(..).collect();
        if !held.is_empty() {
            self.forward(from, held, out);
        }
        if base > self.exec_n {
            // Checkpoint reconciliation (§3.4): the orders below `base` are gone from the new
            // primary's log; its checkpoint brings this replica up to date.
            self.request_transfer(from, base, out);
        }
        self.execute(out);
    }

    /// This replica heard of view `view` from its primary without installing it: ask for the
    /// NEWVIEW (at most once per heartbeat).
    pub(crate) fn need_view(&mut self, from: NodeId, view: u64, out: &mut PaxosActions) {
        if view < self.hard.promised || self.status == Status::Recovering {
            return;
        }
        let (v, at) = self.need_view_sent;
        if v == view && self.now < at + self.opt.heartbeat_us {
            return;
        }
        self.need_view_sent = (view, self.now);
        self.send(Dest::One(from), Msg::NeedView { view }, 0, out);
    }

    /// A backup of the installed view has heard nothing from its primary for the timeout.
    pub(crate) fn primary_silent(&self) -> bool {
        self.status == Status::Normal
            && !self.is_primary()
            && self.now >= self.last_heard_primary + self.base_timeout()
    }

    /// A backup's accepted order has stayed unchosen for the timeout while its primary is
    /// heard (not while catching up).
    pub(crate) fn order_stuck(&self) -> bool {
        let (now, timeout) = (self.now, self.base_timeout());
        self.status == Status::Normal
            && !self.is_primary()
            && !self.catching_up()
            && self
                .waiting_since
                .values()
                .min()
                .is_some_and(|&t| now >= t + timeout)
    }

    /// The pre-vote: a backup that hears nothing from its primary asks the others whether
    /// they would change view too, and promises the next view (durably, disrupting the
    /// installed one) only with `f + 1` agreements, its own included. A replica cut off alone
    /// therefore never deposes a primary that the others still hear, and comes back to the
    /// installed view without a view change (its promise never moved). An order stuck under a
    /// primary that is heard still starts a view change at once, as does a primary that cannot
    /// gather its acknowledgements. Each agreement names the view its sender would move to
    /// (above its own installed view): replicas left in different views agree on the highest.
    pub(crate) fn pre_vote(&mut self, out: &mut PaxosActions) {
        let v = self.hard.installed + 1;
        if self.cluster.quorum() <= 1 {
            self.start_view_change(v, out);
            return;
        }
        match &mut self.suspect {
            Some((view, at, _)) if *view == v => {
                if self.now < *at + self.opt.heartbeat_us {
                    return;
                }
                *at = self.now;
            }
            _ => self.suspect = Some((v, self.now, Vec::new())),
        }
        self.send(Dest::All, Msg::Suspect { view: v }, 0, out);
    }

    pub fn on_suspect(&mut self, from: NodeId, view: u64, out: &mut PaxosActions) {
        let agree = match self.status {
            Status::ViewChange => Some(view.max(self.hard.promised)),
            // The asker installed a later view than this replica's (it asks for the one after
            // its own): a quorum promised past this view, which can decide nothing more. Its
            // primary, idle, would otherwise go on beating and refuse every pre-vote, and a
            // quorum made of it and the asker never changed view again.
            Status::Normal
                if view > self.hard.installed + 1
                    || self.primary_silent()
                    || self.order_stuck() =>
            {
                Some(view.max(self.hard.installed + 1))
            }
            Status::Normal | Status::Recovering => None,
        };
        match agree {
            Some(v) => self.send(Dest::One(from), Msg::SuspectAck { view: v }, 0, out),
            None if self.is_primary() && view <= self.hard.installed + 1 => {
                // The asker does not hear this primary (or is behind its view): its NEWVIEW
                // brings it in, and proves the primary alive.
                if let Some(nv) = self.new_view_msg.clone() {
                    self.send(Dest::One(from), nv, 0, out);
                }
            }
            None => {}
        }
    }

    pub fn on_suspect_ack(&mut self, from: NodeId, view: u64, out: &mut PaxosActions) {
        if !self.primary_silent() {
            return;
        }
        let q = self.cluster.quorum();
        let promised = self.hard.promised;
        let Some((mine, _, agrees)) = &mut self.suspect else {
            return;
        };
        if view < *mine {
            return;
        }
        if !agrees.iter().any(|&(id, _)| id == from) {
            agrees.push((from, view));
        }
        if agrees.len() + 1 >= q {
            let target = agrees.iter().map(|&(_, v)| v).max().unwrap_or(*mine);
            self.start_view_change(target.max(promised + 1), out);
        }
    }

    /// The prospective primary fetched chosen orders it lacked (catch-up or a checkpoint) while
    /// it collects: that is progress of the view change; NEWVIEW may be ready.
    pub(crate) fn collecting_progress(&mut self, out: &mut PaxosActions) {
        if self.status == Status::ViewChange && self.primary_of(self.hard.promised) == self.me() {
            self.vc_since = self.now;
            self.try_new_view(out);
        }
    }

    /// The prospective primary's beacon while it collects VIEWCHANGEs (every heartbeat).
    pub(crate) fn beacon(&mut self, out: &mut PaxosActions) {
        let v = self.hard.promised;
        let mut have: Vec<u32> = self.reports.keys().copied().collect();
        have.push(self.me());
        self.next_heartbeat = self.now + self.opt.heartbeat_us;
        self.send(Dest::All, Msg::Collecting { view: v, have }, 0, out);
    }

    /// A backup hears the beacon of the primary it promised: it waits on (the primary lives)
    /// and sends its report again if the primary lacks it.
    pub fn on_collecting(&mut self, from: NodeId, v: u64, have: Vec<u32>, out: &mut PaxosActions) {
        if from != self.primary_of(v) {
            return;
        }
        if v > self.hard.promised {
            self.start_view_change(v, out);
        }
        if v != self.hard.promised || self.status != Status::ViewChange {
            return;
        }
        self.vc_since = self.now;
        if have.contains(&self.me()) {
            return;
        }
        // A beacon that lacks this report may have left before the report arrived (a large
        // report on a slow link takes longer than a heartbeat): resend with a doubling wait,
        // so that copies do not pile up in the link behind the first one.
        let (sent, at, wait) = self.report_sent;
        if sent == v && self.now < at + wait {
            return;
        }
        let wait = if sent == v {
            (2 * wait).min(self.vc_timeout.max(self.opt.heartbeat_us))
        } else {
            self.first_resend_wait()
        };
        self.report_sent = (v, self.now, wait);
        let msg = self.view_change_msg(true);
        let after = self.issuer.last();
        self.send(Dest::One(from), msg, after, out);
    }

    pub fn on_need_view(&mut self, from: NodeId, view: u64, out: &mut PaxosActions) {
        if self.is_primary() && view <= self.hard.installed {
            if let Some(nv) = self.new_view_msg.clone() {
                self.send(Dest::One(from), nv, 0, out);
            }
        }
    }
}

/// Build NEWVIEW's `O` for view `v` from the reports (pft.md §3.4 with errata a and b): every
/// `n` from `base + 1` to the highest accepted `n` reported, a chosen order first, else the
/// accept from the highest view, else a null. (`Paxos::try_new_view` passes as `base` the
/// lowest execution point reported, at or above the highest log base: what every reporter
/// executed is not reissued.)
pub fn reissue(v: u64, base: u64, reports: &[&ViewReport], bug: Option<Bug>) -> Vec<Order> {
    let mut at: BTreeMap<u64, Vec<&Order>> = BTreeMap::new();
    for r in reports {
        for o in &r.orders {
            if o.n > base {
                at.entry(o.n).or_default().push(o);
            }
        }
    }
    let n_max = if bug == Some(Bug::NewViewToCommitted) {
        // The thesis's literal rule: up to the largest *committed* sequence number reported.
        reports
            .iter()
            .map(|r| {
                r.orders
                    .iter()
                    .filter(|o| o.chosen)
                    .map(|o| o.n)
                    .max()
                    .unwrap_or(0)
                    .max(r.executed)
            })
            .max()
            .unwrap_or(0)
    } else {
        at.keys().next_back().copied().unwrap_or(0)
    }
    .max(base);
    (base + 1..=n_max)
        .map(|n| {
            let candidates = at.get(&n).map(Vec::as_slice).unwrap_or(&[]);
            let pick = candidates.iter().find(|o| o.chosen).or_else(|| {
                if bug == Some(Bug::LowerViewWins) {
                    candidates.iter().min_by_key(|o| o.view)
                } else {
                    candidates.iter().max_by_key(|o| o.view)
                }
            });
            Order {
                n,
                view: v,
                chosen: false,
                commands: pick.map(|o| o.commands.clone()).unwrap_or_default(),
            }
        })
        .collect()
}
