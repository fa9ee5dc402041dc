//! Catch-up (pft.md §3.3): MBQ and PBQ, and the answers to both.
//!
//! * **PBQ** (passive): a replica that receives an ordering message beyond the order it
//!   expects asks the primary for the missing range (QUERYORDER_Primary). The primary's
//!   heartbeat is a COMMIT carrying its commit point, so a replica that missed the latest
//!   messages learns of its hole within a heartbeat.
//! * **MBQ** (active): every replica multicasts a report every `mbq_period_us`: the range it
//!   misses, or (no known hole) its latest accepted order, which the others compare with what
//!   they executed (QUERYORDER_Multicast).
//! * **Answers** (RESPONSEORDER) carry state records: a chosen order (C) may be executed, an
//!   accepted one (A) never on its own (§6.1.14): it is kept only as an accept of the installed
//!   view, to become chosen by that view's COMMIT. A responder whose log no longer holds the
//!   range says so (`base`), and the requester pulls a state transfer from it.

use crate::normal::same_ids;
use crate::{Bug, CatchUp, Msg, Order, Paxos, PaxosActions, Status};
use synod_core::{Dest, NodeId};

impl Paxos {
    /// PBQ: ask the primary for `expected..=received` (at most once per retry interval).
    pub(crate) fn pbq_query(&mut self, expected: u64, received: u64, out: &mut PaxosActions) {
        if self.opt.catch_up != CatchUp::Pbq || self.status != Status::Normal || self.is_primary() {
            return;
        }
        if self.catch_up_since.is_none() {
            self.catch_up_since = Some(self.now);
            self.counters.catch_ups += 1;
        }
        if self.now < self.next_query {
            return;
        }
        self.next_query = self.now + 2 * self.opt.heartbeat_us;
        let to = self.primary_of(self.hard.installed);
        self.send(
            Dest::One(to),
            Msg::QueryPrimary { expected, received },
            0,
            out,
        );
    }

    /// MBQ's periodic report.
    pub(crate) fn mbq_tick(&mut self, out: &mut PaxosActions) {
        self.next_mbq = self.now + self.opt.mbq_period_us;
        let latest = self.log.keys().next_back().copied().unwrap_or(self.exec_n);
        // A hole is an order known committed (COMMIT heard) but not held as chosen here;
        // orders still in flight are not holes.
        let known = self.commit_heard.1;
        let msg = if self.has_hole_below(known) {
            if self.catch_up_since.is_none() {
                self.catch_up_since = Some(self.now);
                self.counters.catch_ups += 1;
            }
            Msg::QueryMulticast {
                lower: Some(self.exec_n + 1),
                upper: known,
                executed: self.exec_n,
            }
        } else {
            Msg::QueryMulticast {
                lower: None,
                upper: latest,
                executed: self.exec_n,
            }
        };
        self.send(Dest::All, msg, 0, out);
    }

    pub fn on_query_primary(
        &mut self,
        from: NodeId,
        expected: u64,
        received: u64,
        out: &mut PaxosActions,
    ) {
        if self.is_primary() {
            self.respond(from, expected, received, out);
        }
    }

    pub fn on_query_multicast(
        &mut self,
        from: NodeId,
        lower: Option<u64>,
        upper: u64,
        executed: u64,
        out: &mut PaxosActions,
    ) {
        let (lower, upper) = match lower {
            Some(l) => (l, upper),
            None => {
                // A status report: answer if the reporter is behind what this replica executed.
                if self.exec_n < executed.max(upper) + self.opt.mbq_threshold {
                    return;
                }
                (executed + 1, self.exec_n)
            }
        };
        self.respond(from, lower, upper, out);
    }

    /// RESPONSEORDER for `lower..=upper`, capped; `base` tells the requester what this log no
    /// longer holds.
    fn respond(&mut self, to: NodeId, lower: u64, upper: u64, out: &mut PaxosActions) {
        if upper < lower || self.status == Status::Recovering {
            return;
        }
        let orders: Vec<Order> = self
            .orders_above(lower, self.opt.catch_up_max_orders)
            .into_iter()
            .filter(|o| o.n <= upper)
            .collect();
        if orders.is_empty() && lower > self.base {
            return;
        }
        let base = self.base;
        self.send(Dest::One(to), Msg::ResponseOrder { base, orders }, 0, out);
    }

    /// State records from a catch-up answer.
    pub fn on_response_order(
        &mut self,
        from: NodeId,
        base: u64,
        orders: Vec<Order>,
        out: &mut PaxosActions,
    ) {
        if base > self.exec_n && !self.log.get(&(self.exec_n + 1)).is_some_and(|s| s.chosen) {
            self.request_transfer(from, base, out);
        }
        let mut keep = Vec::new();
        for o in orders {
            if o.n <= self.exec_n || o.n <= self.base {
                continue;
            }
            let old = self.log.get(&o.n);
            if o.chosen || self.opt.bug == Some(Bug::ExecuteCatchUpAccept) {
                // A C record: the order is chosen; any accept of it from a later view is the
                // same order.
                if let Some(old) = old {
                    if old.chosen {
                        continue;
                    }
                    assert!(
                        old.view <= o.view
                            || same_ids(&old.commands, &o.commands)
                            || self.opt.bug.is_some(),
                        "n{}: order {} chosen in view {} differs from its accept in view {}",
                        self.me(),
                        o.n,
                        o.view,
                        old.view
                    );
                }
                let view = o.view.max(old.map_or(0, |s| s.view));
                keep.push(Order {
                    view,
                    chosen: true,
                    ..o
                });
            } else if self.status == Status::Normal
                && o.view == self.hard.installed
                && old.is_none_or(|s| s.view < o.view && !s.chosen)
            {
                // An A record of the installed view: as good as the primary's ACCEPT, but no
                // acknowledgement and no execution until that view's COMMIT covers it.
                let chosen = self.commit_heard.0 == o.view && o.n <= self.commit_heard.1;
                keep.push(Order { chosen, ..o });
            }
        }
        if keep.is_empty() {
            return;
        }
        self.counters.catch_up_orders += keep.len() as u64;
        self.log_orders(keep, out);
        self.next_query = self.now;
        self.execute(out);
        self.collecting_progress(out);
        if self.opt.catch_up == CatchUp::Pbq && self.has_hole_below(self.commit_heard.1) {
            let upto = self.commit_heard.1;
            self.pbq_query(self.exec_n + 1, upto, out);
        }
    }
}
