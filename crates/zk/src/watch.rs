//! The watch registry of one server (watches are local to the server a session is connected to,
//! as in ZooKeeper). One-shot data and child watches, persistent and persistent-recursive
//! watches; a change fires at most one event per session.
//!
//! As in ZooKeeper 3.8's WatchManager, a persistent (or recursive) watch has a data half and a
//! child half: removeWatches of type data or children removes one half, and the watch then
//! fires only the events of the half that is left (the child half of a recursive watch fires
//! nothing, recursive watches never see children-changed events; it is kept for removeWatches
//! and checkWatches to answer as ZooKeeper does).

use crate::jute::event;
use crate::path;
use crate::tree::Change;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// getData / exists (also on a missing node).
    Data,
    /// getChildren.
    Child,
    /// addWatch PERSISTENT: registers both halves; as a table, the data half.
    Persistent,
    /// addWatch PERSISTENT_RECURSIVE: registers both halves; as a table, the data half.
    Recursive,
    /// The child half of a persistent watch.
    PersistentChild,
    /// The child half of a recursive watch.
    RecursiveChild,
}

impl Kind {
    /// The watch tables a removeWatches/checkWatches type names (1 children, 2 data, 3 any).
    pub fn of_type(ty: i32) -> Option<&'static [Kind]> {
        Some(match ty {
            1 => &[Kind::Child, Kind::PersistentChild, Kind::RecursiveChild],
            2 => &[Kind::Data, Kind::Persistent, Kind::Recursive],
            3 => &[
                Kind::Data,
                Kind::Child,
                Kind::Persistent,
                Kind::PersistentChild,
                Kind::Recursive,
                Kind::RecursiveChild,
            ],
            _ => return None,
        })
    }
}

#[derive(Default, Debug)]
pub struct Watches {
    data: HashMap<Arc<str>, HashSet<i64>>,
    child: HashMap<Arc<str>, HashSet<i64>>,
    persistent: HashMap<Arc<str>, HashSet<i64>>,
    recursive: HashMap<Arc<str>, HashSet<i64>>,
    persistent_child: HashMap<Arc<str>, HashSet<i64>>,
    recursive_child: HashMap<Arc<str>, HashSet<i64>>,
    /// Watches per session, at most this many (a bound on memory per connection).
    limit: usize,
    count: HashMap<i64, usize>,
}

/// An event for a session: (session, event type, path).
pub type Fired = (i64, i32, Arc<str>);

impl Watches {
    pub fn new(limit_per_session: usize) -> Self {
        Self {
            limit: limit_per_session,
            ..Self::default()
        }
    }

    fn table(&mut self, k: Kind) -> &mut HashMap<Arc<str>, HashSet<i64>> {
        match k {
            Kind::Data => &mut self.data,
            Kind::Child => &mut self.child,
            Kind::Persistent => &mut self.persistent,
            Kind::Recursive => &mut self.recursive,
            Kind::PersistentChild => &mut self.persistent_child,
            Kind::RecursiveChild => &mut self.recursive_child,
        }
    }

    /// Change the per-session limit (0: none); watches already held stay.
    pub fn set_limit(&mut self, limit_per_session: usize) {
        self.limit = limit_per_session;
    }

    /// Watches one session holds.
    pub fn of_session(&self, session: i64) -> usize {
        self.count.get(&session).copied().unwrap_or(0)
    }

    /// Watches registered, all kinds and sessions.
    pub fn total(&self) -> usize {
        self.count.values().sum()
    }

    /// Register a watch (both halves of a persistent or recursive one); false when the
    /// session has too many.
    pub fn add(&mut self, session: i64, k: Kind, p: &str) -> bool {
        let n = self.count.entry(session).or_default();
        if self.limit > 0 && *n >= self.limit {
            return false;
        }
        match k {
            Kind::Persistent => self.insert(session, Kind::PersistentChild, p),
            Kind::Recursive => self.insert(session, Kind::RecursiveChild, p),
            _ => {}
        }
        self.insert(session, k, p);
        true
    }

    fn insert(&mut self, session: i64, k: Kind, p: &str) {
        if self
            .table(k)
            .entry(Arc::from(p))
            .or_default()
            .insert(session)
        {
            *self.count.entry(session).or_default() += 1;
        }
    }

    pub fn has(&self, session: i64, k: Kind, p: &str) -> bool {
        let t = match k {
            Kind::Data => &self.data,
            Kind::Child => &self.child,
            Kind::Persistent => &self.persistent,
            Kind::Recursive => &self.recursive,
            Kind::PersistentChild => &self.persistent_child,
            Kind::RecursiveChild => &self.recursive_child,
        };
        t.get(p).is_some_and(|s| s.contains(&session))
    }

    /// Remove a session's watch; true if there was one.
    pub fn remove(&mut self, session: i64, k: Kind, p: &str) -> bool {
        let t = self.table(k);
        let removed = match t.get_mut(p) {
            Some(s) => {
                let r = s.remove(&session);
                if s.is_empty() {
                    t.remove(p);
                }
                r
            }
            None => false,
        };
        if removed {
            if let Some(n) = self.count.get_mut(&session) {
                *n = n.saturating_sub(1);
            }
        }
        removed
    }

    /// Forget every watch of a session (it closed or moved to another server).
    pub fn drop_session(&mut self, session: i64) {
        for t in [
            &mut self.data,
            &mut self.child,
            &mut self.persistent,
            &mut self.recursive,
            &mut self.persistent_child,
            &mut self.recursive_child,
        ] {
            t.retain(|_, s| {
                s.remove(&session);
                !s.is_empty()
            });
        }
        self.count.remove(&session);
    }

    fn take(&mut self, k: Kind, p: &str, out: &mut BTreeSet<i64>) {
        if let Some(s) = self.table(k).remove(p) {
            for &id in &s {
                if let Some(n) = self.count.get_mut(&id) {
                    *n = n.saturating_sub(1);
                }
            }
            out.extend(s);
        }
    }

    /// The persistent watches on `p` (their data half, or with `child` their child half),
    /// and with `recursive_too` the data halves of the recursive watches on `p` and above.
    fn persistent_for(&self, p: &str, child: bool, recursive_too: bool, out: &mut BTreeSet<i64>) {
        let table = if child {
            &self.persistent_child
        } else {
            &self.persistent
        };
        if let Some(s) = table.get(p) {
            out.extend(s.iter().copied());
        }
        if recursive_too && !self.recursive.is_empty() {
            let mut cur = p;
            loop {
                if let Some(s) = self.recursive.get(cur) {
                    out.extend(s.iter().copied());
                }
                if cur == "/" {
                    break;
                }
                cur = path::parent(cur);
            }
        }
    }

    /// The events a change fires (one-shot watches are consumed).
    pub fn trigger(&mut self, change: &Change, fired: &mut Vec<Fired>) {
        let mut who = BTreeSet::new();
        let (ty, p) = match change {
            Change::Created(p) => {
                self.take(Kind::Data, p, &mut who);
                self.persistent_for(p, false, true, &mut who);
                (event::NODE_CREATED, p)
            }
            Change::Deleted(p, _) => {
                self.take(Kind::Data, p, &mut who);
                self.take(Kind::Child, p, &mut who);
                self.persistent_for(p, false, true, &mut who);
                self.persistent_for(p, true, false, &mut who);
                (event::NODE_DELETED, p)
            }
            Change::DataChanged(p) => {
                self.take(Kind::Data, p, &mut who);
                self.persistent_for(p, false, true, &mut who);
                (event::NODE_DATA_CHANGED, p)
            }
            Change::ChildrenChanged(p) => {
                self.take(Kind::Child, p, &mut who);
                self.persistent_for(p, true, false, &mut who);
                (event::NODE_CHILDREN_CHANGED, p)
            }
        };
        fired.extend(who.into_iter().map(|s| (s, ty, p.clone())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fire(w: &mut Watches, c: Change) -> Vec<(i64, i32)> {
        let mut f = Vec::new();
        w.trigger(&c, &mut f);
        f.into_iter().map(|(s, t, _)| (s, t)).collect()
    }

    #[test]
    fn one_shot_watches_fire_once() {
        let mut w = Watches::new(100);
        w.add(1, Kind::Data, "/a");
        w.add(2, Kind::Child, "/");
        assert_eq!(
            fire(&mut w, Change::DataChanged("/a".into())),
            vec![(1, event::NODE_DATA_CHANGED)]
        );
        assert!(fire(&mut w, Change::DataChanged("/a".into())).is_empty());
        assert_eq!(
            fire(&mut w, Change::ChildrenChanged("/".into())),
            vec![(2, event::NODE_CHILDREN_CHANGED)]
        );
    }

    #[test]
    fn persistent_and_recursive_watches_stay() {
        let mut w = Watches::new(100);
        w.add(1, Kind::Persistent, "/a");
        w.add(2, Kind::Recursive, "/a");
        for _ in 0..2 {
            assert_eq!(
                fire(&mut w, Change::DataChanged("/a".into())),
                vec![(1, event::NODE_DATA_CHANGED), (2, event::NODE_DATA_CHANGED)]
            );
        }
        assert_eq!(
            fire(&mut w, Change::Created("/a/b/c".into())),
            vec![(2, event::NODE_CREATED)]
        );
        // Recursive watches get no children-changed events; persistent ones do.
        assert_eq!(
            fire(&mut w, Change::ChildrenChanged("/a".into())),
            vec![(1, event::NODE_CHILDREN_CHANGED)]
        );
        assert!(w.remove(2, Kind::Recursive, "/a"));
        assert!(!w.remove(2, Kind::Recursive, "/a"));
        assert!(w.remove(2, Kind::RecursiveChild, "/a"));
        // One half of a persistent watch removed: only the other half's events (ZooKeeper).
        assert!(w.remove(1, Kind::PersistentChild, "/a"));
        assert!(fire(&mut w, Change::ChildrenChanged("/a".into())).is_empty());
        assert_eq!(
            fire(&mut w, Change::DataChanged("/a".into())),
            vec![(1, event::NODE_DATA_CHANGED)]
        );
        w.add(1, Kind::Persistent, "/a");
        assert!(w.remove(1, Kind::Persistent, "/a"));
        assert!(fire(&mut w, Change::DataChanged("/a".into())).is_empty());
        assert_eq!(
            fire(&mut w, Change::ChildrenChanged("/a".into())),
            vec![(1, event::NODE_CHILDREN_CHANGED)]
        );
        w.drop_session(1);
        assert!(fire(&mut w, Change::DataChanged("/a".into())).is_empty());
    }

    #[test]
    fn one_event_per_session_and_a_bound() {
        let mut w = Watches::new(3);
        assert!(w.add(1, Kind::Data, "/a"));
        assert!(w.add(1, Kind::Child, "/a"));
        assert!(w.add(1, Kind::Data, "/b"));
        assert!(
            !w.add(1, Kind::Persistent, "/a"),
            "over the per-session limit"
        );
        assert_eq!(
            fire(&mut w, Change::Deleted("/a".into(), crate::acl::open_acl())),
            vec![(1, event::NODE_DELETED)]
        );
        assert!(
            w.add(1, Kind::Persistent, "/a"),
            "fired watches free their slots"
        );
    }
}
