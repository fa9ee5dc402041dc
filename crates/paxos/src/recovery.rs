//! Recovery of a replica that lost its disk (docs/protocols/paxos.md §9). The thesis leaves
//! rebuilding replicas open (pft.md §2.3: "a non-voting member").
//!
//! A replica restored with `DurableState::lost` (or still marked `recovering`) may have
//! forgotten accepts and promises that quorums counted. It writes `recovering` to its hard
//! state, acknowledges nothing, promises nothing and executes nothing, and asks every other
//! replica for its state (RECOVER). From `f + 1` answers of *other* replicas it takes the
//! highest promise (at least as high as any view whose NEWVIEW counted its lost promise: that
//! view's `f + 1` promisers include `f` others, and any `f + 1` of the `2f` others meet them),
//! the orders above the highest log base (a chosen order first, else the accept from the
//! highest view: whatever was chosen reaches it the same way a NEWVIEW does), and, when its own
//! snapshot is behind that base, a state transfer. It logs the orders, clears the mark with the
//! new promise, and rejoins as a replica in a view change for that promise, so it accepts
//! nothing below it.

use crate::{Msg, Order, Paxos, PaxosActions, Status};
use std::collections::BTreeMap;
use synod_core::{Dest, NodeId};

#[derive(Debug)]
pub struct Recovery {
    nonce: u64,
    replies: BTreeMap<NodeId, (u64, u64, Vec<Order>)>,
    /// The storage op that clears the mark; the replica rejoins once it is durable.
    finishing: Option<u64>,
    pub(crate) next_send: u64,
}

impl Paxos {
    pub(crate) fn start_recovery(&mut self, out: &mut PaxosActions) {
        let nonce = self.rng.next_u64();
        self.recovery = Some(Recovery {
            nonce,
            replies: BTreeMap::new(),
            finishing: None,
            next_send: self.now + 4 * self.opt.heartbeat_us,
        });
        let after = self.issuer.last();
        self.send(Dest::All, Msg::Recover { nonce }, after, out);
    }

    pub(crate) fn resend_recover(&mut self, out: &mut PaxosActions) {
        let hb = self.opt.heartbeat_us;
        let now = self.now;
        let Some(r) = &mut self.recovery else { return };
        r.next_send = now + 4 * hb;
        if r.finishing.is_some() {
            return;
        }
        let nonce = r.nonce;
        // The request waits for the `recovering` mark, whatever else was issued since.
        let after = self.issuer.last();
        self.send(Dest::All, Msg::Recover { nonce }, after, out);
        if let Some(t) = &self.transfer {
            if now >= t.asked_at + 4 * hb {
                self.retry_transfer(out);
            }
        }
    }

    /// A replica that is not recovering answers RECOVER with its promise, log base and orders.
    pub fn on_recover(&mut self, from: NodeId, nonce: u64, out: &mut PaxosActions) {
        let msg = Msg::RecoverReply {
            nonce,
            promised: self.hard.promised,
            stable: self.base,
            orders: self.orders_above(self.base + 1, usize::MAX),
        };
        self.send(Dest::One(from), msg, 0, out);
    }

    /// While recovering, only answers to RECOVER and state transfer chunks are taken.
    pub(crate) fn recovering_message(&mut self, from: NodeId, msg: Msg, out: &mut PaxosActions) {
        match msg {
            Msg::RecoverReply {
                nonce,
                promised,
                stable,
                orders,
            } => {
                let Some(r) = &mut self.recovery else { return };
                if nonce != r.nonce || r.finishing.is_some() {
                    return;
                }
                r.replies.insert(from, (promised, stable, orders));
                self.try_finish_recovery(out);
            }
            Msg::SnapChunk {
                at,
                total,
                offset,
                data,
            } => self.on_snap_chunk(from, at, total, offset, data, out),
            _ => {}
        }
    }

    pub(crate) fn try_finish_recovery(&mut self, out: &mut PaxosActions) {
        let q = self.cluster.quorum();
        let Some(r) = &self.recovery else { return };
        if r.finishing.is_some() || r.replies.len() < q {
            return;
        }
        let promised = r
            .replies
            .values()
            .map(|(p, _, _)| *p)
            .max()
            .unwrap_or(0)
            .max(self.hard.promised);
        let (base, src) = r
            .replies
            .iter()
            .map(|(&id, (_, s, _))| (*s, id))
            .max()
            .unwrap_or((0, 0));
        if base > self.exec_n {
            // Its own snapshot is behind what the others dropped: a checkpoint first.
            self.request_transfer(src, base, out);
            return;
        }
        let mut merged: BTreeMap<u64, &Order> = BTreeMap::new();
        for (_, _, orders) in r.replies.values() {
            for o in orders {
                if o.n <= self.exec_n {
                    continue;
                }
                match merged.get(&o.n) {
                    Some(m) if m.chosen || (!o.chosen && m.view >= o.view) => {}
                    _ => {
                        merged.insert(o.n, o);
                    }
                }
            }
        }
        let merged: Vec<Order> = merged.into_values().cloned().collect();
        self.log_orders(merged, out);
        self.next_n = self.log.keys().next_back().map_or(self.exec_n, |&n| n) + 1;
        self.hard.promised = promised;
        self.hard.recovering = false;
        let s = self.set_hard(out);
        if let Some(r) = &mut self.recovery {
            r.finishing = Some(s);
        }
        self.recovery_durable(out);
    }

    /// Once the cleared mark is durable the replica rejoins: in a view change for its promise
    /// (it accepts nothing below it; the primary's NEWVIEW installs it), or, when its promise
    /// is the view it had installed, as a backup of that view.
    pub(crate) fn recovery_durable(&mut self, out: &mut PaxosActions) {
        let Some(r) = &self.recovery else { return };
        if r.finishing.is_none_or(|s| s > self.durable_upto) {
            return;
        }
        self.recovery = None;
        self.vc_since = self.now;
        if self.hard.promised > self.hard.installed {
            self.status = Status::ViewChange;
            self.send_view_change(out);
        } else if self.primary_of(self.hard.installed) == self.me() {
            self.status = Status::Normal;
            let v = self.hard.promised + 1;
            self.start_view_change(v, out);
        } else {
            self.status = Status::Normal;
            self.last_heard_primary = self.now;
        }
        self.execute(out);
    }
}
