//! Timers, as exact deadlines: the primary's heartbeat and batch timer, the view-change timer
//! (adaptive, off during catch-up, doubling while a view fails to install), MBQ's period and
//! the retries of PBQ, state transfer and recovery.

use crate::{Batching, CatchUp, Msg, Paxos, PaxosActions, Status};
use synod_core::{Dest, TimeUs};

impl Paxos {
    /// The view-change timeout in a running view: the configured value until ordering
    /// latencies are measured, then eight times their smoothed value (§5.6.1), never below
    /// three heartbeats nor above the maximum.
    pub(crate) fn base_timeout(&self) -> TimeUs {
        let floor = 3 * self.opt.heartbeat_us;
        match (self.opt.adaptive_timeout, self.latency_us) {
            (true, Some(l)) => (8 * l + 2 * self.opt.heartbeat_us)
                .clamp(floor, self.opt.view_change_timeout_max_us.max(floor)),
            _ => self.opt.view_change_timeout_us.max(floor),
        }
    }

    /// While catching up (and making progress) a backup does not suspect its primary for
    /// orders it cannot commit yet (§4.4.5).
    pub(crate) fn catching_up(&self) -> bool {
        self.catch_up_since
            .is_some_and(|t| self.now < t + 4 * self.base_timeout())
            || self.transfer.is_some()
    }

    pub(crate) fn next_deadline(&self) -> Option<TimeUs> {
        let mut d: Option<TimeUs> = None;
        let mut at = |t: TimeUs| d = Some(d.map_or(t, |x: TimeUs| x.min(t)));
        let timeout = self.base_timeout();
        match self.status {
            Status::Normal if self.is_primary() => {
                at(self.next_heartbeat);
                if let (Batching::Fixed { timer_us, .. }, Some(t)) =
                    (self.opt.batching, self.batch_since)
                {
                    at(t + timer_us);
                }
                if let Some(&t) = self.proposed_at.values().min() {
                    at(t + timeout);
                }
            }
            Status::Normal => {
                match &self.suspect {
                    // While a pre-vote runs, its resend stands for the silence deadline.
                    Some((_, t, _)) => at(t + self.opt.heartbeat_us),
                    None => at(self.last_heard_primary + timeout),
                }
                if let Some(&t) = self.waiting_since.values().min() {
                    if !self.catching_up() {
                        at(t + timeout);
                    }
                }
                if let Some(t) = self.catch_up_since {
                    at(t + 4 * timeout);
                    if self.opt.catch_up == CatchUp::Pbq {
                        at(self.next_query.max(self.now + 1));
                    }
                }
            }
            Status::ViewChange => {
                at(self.vc_since + self.vc_timeout);
                if self.primary_of(self.hard.promised) == self.me() {
                    at(self.next_heartbeat);
                }
            }
            Status::Recovering => {
                if let Some(r) = &self.recovery {
                    at(r.next_send);
                }
            }
        }
        if self.opt.catch_up == CatchUp::Mbq && self.status != Status::Recovering {
            at(self.next_mbq);
        }
        if let Some(t) = &self.transfer {
            at(t.asked_at + 4 * self.opt.heartbeat_us);
        }
        d
    }

    pub(crate) fn on_timeout(&mut self, out: &mut PaxosActions) {
        let now = self.now;
        let timeout = self.base_timeout();
        match self.status {
            Status::Normal if self.is_primary() => {
                if self
                    .proposed_at
                    .values()
                    .min()
                    .is_some_and(|&t| now >= t + timeout)
                {
                    // The primary cannot gather f + 1 acknowledgements: it gives the view up.
                    let v = self.hard.promised + 1;
                    self.start_view_change(v, out);
                } else {
                    if now >= self.next_heartbeat {
                        self.next_heartbeat = now + self.opt.heartbeat_us;
                        let msg = Msg::Commit {
                            view: self.hard.installed,
                            upto: self.commit_upto,
                        };
                        self.send(Dest::All, msg, 0, out);
                    }
                    self.propose(out);
                }
            }
            Status::Normal => {
                if self.order_stuck() {
                    let v = self.hard.promised + 1;
                    self.start_view_change(v, out);
                } else {
                    if self.primary_silent() {
                        self.pre_vote(out);
                    } else {
                        self.suspect = None;
                    }
                    self.catch_up_timers(timeout, out);
                }
            }
            Status::ViewChange => {
                if now >= self.vc_since + self.vc_timeout {
                    // The view did not install in time (its primary may be down too): the next
                    // view, with twice the patience (PBFT's escalation, pft.md §6.2).
                    self.vc_timeout =
                        (self.vc_timeout * 2).min(self.opt.view_change_timeout_max_us);
                    let v = self.hard.promised + 1;
                    let keep = self.vc_timeout;
                    self.start_view_change(v, out);
                    self.vc_timeout = keep;
                } else if self.primary_of(self.hard.promised) == self.me()
                    && now >= self.next_heartbeat
                {
                    self.beacon(out);
                    // Repeats a catch-up query for chosen orders it still lacks.
                    self.try_new_view(out);
                }
            }
            Status::Recovering => {
                if self.recovery.as_ref().is_some_and(|r| now >= r.next_send) {
                    self.resend_recover(out);
                }
            }
        }
        // Every timer is checked whatever happened above, so that each deadline moves.
        if self.opt.catch_up == CatchUp::Mbq
            && self.status != Status::Recovering
            && now >= self.next_mbq
        {
            self.mbq_tick(out);
        }
        if self
            .transfer
            .as_ref()
            .is_some_and(|t| now >= t.asked_at + 4 * self.opt.heartbeat_us)
        {
            self.retry_transfer(out);
        }
    }

    /// A backup's catch-up timers: give up a catch-up that stalled, and repeat PBQ's query.
    fn catch_up_timers(&mut self, timeout: TimeUs, out: &mut PaxosActions) {
        let now = self.now;
        if self.catch_up_since.is_some_and(|t| now >= t + 4 * timeout) {
            self.catch_up_since = None;
        }
        if self.opt.catch_up == CatchUp::Pbq
            && self.catch_up_since.is_some()
            && now >= self.next_query
        {
            let upto = self.commit_heard.1;
            if self.has_hole_below(upto) {
                self.pbq_query(self.exec_n + 1, upto, out);
            } else {
                self.catch_up_since = None;
            }
        }
    }
}
