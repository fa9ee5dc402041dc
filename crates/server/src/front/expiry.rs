//! The leader's session expiry by deadline: a session is looked at when its timeout may have
//! run out since its last touch, never in a scan of every session (the duties tick every 50 ms:
//! a scan would cost the number of sessions twenty times a second, under the tree's lock).
//!
//! Each session has at most one deadline queued. When it comes, the session's last touch and
//! timeout decide: expired (the caller asks for its expiry and it is looked at again one
//! timeout later, should that expiry be void), or touched since (queued again at its new
//! deadline). A session that is gone is forgotten.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::time::Instant;

/// When this server's replica last saw each session touched (applied `Touch`, `CreateSession`,
/// `Attach`), and the sessions first seen since the duties last looked.
#[derive(Default)]
pub(super) struct Touches {
    pub(super) last: HashMap<i64, Instant>,
    pub(super) fresh: Vec<i64>,
}

impl Touches {
    pub(super) fn touch(&mut self, session: i64, now: Instant) {
        if self.last.insert(session, now).is_none() {
            self.fresh.push(session);
        }
    }

    pub(super) fn forget(&mut self, session: i64) {
        self.last.remove(&session);
    }
}

#[derive(Default)]
pub(super) struct Deadlines {
    due: BinaryHeap<Reverse<(Instant, i64)>>,
    queued: HashSet<i64>,
}

impl Deadlines {
    /// Forget every deadline (a new leadership gives every session a full timeout of grace).
    pub(super) fn clear(&mut self) {
        self.due.clear();
        self.queued.clear();
    }

    #[cfg(test)]
    fn is_queued(&self, session: i64) -> bool {
        self.queued.contains(&session)
    }

    /// Look at `session` at `at` (unless it is queued already).
    pub(super) fn queue(&mut self, session: i64, at: Instant) {
        if self.queued.insert(session) {
            self.due.push(Reverse((at, session)));
        }
    }

    /// The sessions whose deadline came by `now`, unqueued: the caller queues each again.
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<i64> {
        let mut out = Vec::new();
        while let Some(Reverse((at, id))) = self.due.peek().copied() {
            if at > now {
                break;
            }
            self.due.pop();
            self.queued.remove(&id);
            out.push(id);
        }
        out
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.due.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn sessions_come_due_in_deadline_order_once_each() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut d = Deadlines::default();
        d.queue(7, ms(30));
        d.queue(5, ms(10));
        d.queue(7, ms(5)); // queued already: the first deadline stands
        assert_eq!(d.len(), 2);
        assert!(d.take_due(ms(9)).is_empty());
        assert_eq!(d.take_due(ms(10)), vec![5]);
        assert!(!d.is_queued(5) && d.is_queued(7));
        assert_eq!(d.take_due(ms(100)), vec![7]);
        d.queue(5, ms(200));
        d.clear();
        assert!(d.take_due(ms(1_000)).is_empty());
    }
}
