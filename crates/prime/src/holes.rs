//! PRIME's hole manager: tells a **hole** (an update EpTO failed to deliver here, or there) from
//! the ordinary lag of a gossip protocol, and asks for a repair only for the first.
//!
//! Guardians check their protegees this way; and every node sends a random neighbour an
//! **anti-entropy digest** now and then: the stamp it held a window ago, which a node that
//! misses nothing has held too. A digest naming a stamp the receiver never held starts the same
//! repair. The ring alone spreads a repair one guardian hop per window (measured: minutes for
//! 600 nodes missing one JOIN at 1,000 nodes); random digests spread it like gossip.
//!
//! Two nodes that miss nothing go through the same sequence of views (EpTO's total order), one
//! a little ahead of the other. So a guardian records the view stamps its protegee reports in
//! heartbeats and its own recent stamps: while one side's stamp shows up in the other's
//! recent history, they **agree** (one lags). A hole makes every later stamp of the two differ;
//! once they have not agreed for a whole `window` (longer than EpTO takes to deliver an event
//! everywhere: (TTL + 2) rounds), the guardian exchanges view state with the protegee and the
//! lattice merge ([`crate::view::View::merge`]) repairs both. Asking on every mismatch instead
//! floods a churning cluster with repairs (measured: 175,000 repairs of 1,000-entry views in a
//! 1,000-node run; about 32,000 with the window and the digests below, most of them while
//! nodes join and fail: docs/results/membership-scale.md).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::{NodeId, TimeUs, ViewStamp};

/// Stamps remembered per protegee.
const PEER_STAMPS: usize = 16;
/// Own stamps remembered.
const OWN_STAMPS: usize = 64;

#[derive(Clone, Debug, Default)]
struct Track {
    /// The peer's stamps, each with when it was first reported.
    stamps: VecDeque<(ViewStamp, TimeUs)>,
    /// The latest time at which the two views are known to have been equal.
    last_agree: TimeUs,
}

#[derive(Clone, Debug, Default)]
pub struct HoleManager {
    /// This node's stamps, each with when it took it.
    own: VecDeque<(ViewStamp, TimeUs)>,
    peers: BTreeMap<NodeId, Track>,
}

/// When the holder of `history` moved past `stamp` (the time its next stamp was taken), if
/// `stamp` is in it and not its last.
fn left_at(history: &VecDeque<(ViewStamp, TimeUs)>, stamp: ViewStamp) -> Option<TimeUs> {
    let i = history.iter().position(|(s, _)| *s == stamp)?;
    history.get(i + 1).map(|(_, t)| *t)
}

impl HoleManager {
    /// This node's view changed at `now`.
    pub fn on_own_view(&mut self, now: TimeUs, stamp: ViewStamp) {
        if self.own.back().map(|o| o.0) != Some(stamp) {
            self.own.push_back((stamp, now));
            if self.own.len() > OWN_STAMPS {
                self.own.pop_front();
            }
        }
    }

    /// The stamp this node held at `t` (its oldest remembered one if `t` is older), for
    /// anti-entropy digests: a stamp old enough that every node should have passed it.
    pub fn stamp_at(&self, t: TimeUs) -> Option<ViewStamp> {
        self.own
            .iter()
            .rev()
            .find(|(_, since)| *since <= t)
            .or(self.own.front())
            .map(|(s, _)| *s)
    }

    /// Whether this node held `stamp` (among the stamps it remembers).
    pub fn held(&self, stamp: ViewStamp) -> bool {
        self.own.iter().any(|(s, _)| *s == stamp)
    }

    /// Keep tracks only for these peers (the protegees).
    pub fn retain(&mut self, peers: &BTreeSet<NodeId>) {
        self.peers.retain(|p, _| peers.contains(p));
    }

    /// A heartbeat from `peer` reporting `stamp`, while this node holds `current`: whether to
    /// repair with it now. The two views were equal when they hold one stamp, and when one
    /// holds a stamp the other held: as of the moment the other moved past it. A lag never
    /// counts for longer than that, so a peer that misses only the latest update is repaired
    /// as surely as one that misses an older one.
    pub fn on_heartbeat(
        &mut self,
        now: TimeUs,
        peer: NodeId,
        stamp: ViewStamp,
        current: ViewStamp,
        window_us: TimeUs,
    ) -> bool {
        let new = !self.peers.contains_key(&peer);
        let t = self.peers.entry(peer).or_default();
        if t.stamps.back().map(|s| s.0) != Some(stamp) {
            t.stamps.push_back((stamp, now));
            if t.stamps.len() > PEER_STAMPS {
                t.stamps.pop_front();
            }
        }
        let agreed = if stamp == current {
            Some(now)
        } else {
            left_at(&self.own, stamp).or_else(|| left_at(&t.stamps, current))
        };
        match agreed {
            Some(a) => t.last_agree = t.last_agree.max(a),
            None if new => t.last_agree = now, // a new protegee gets a whole window
            None => {}
        }
        if now.saturating_sub(t.last_agree) >= window_us {
            t.last_agree = now; // one repair per window
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: u64) -> ViewStamp {
        ViewStamp {
            version: v,
            hash: v * 31,
        }
    }

    #[test]
    fn a_lagging_peer_is_not_a_hole() {
        let mut h = HoleManager::default();
        for v in 1..=5 {
            h.on_own_view(v * 100, s(v));
        }
        // The peer is a view or two behind, within the window: no repair.
        for (t, v) in [(500, 3), (900, 4), (1_200, 5)] {
            assert!(!h.on_heartbeat(t, 7, s(v), s(5), 1_000));
        }
        // The peer is ahead: this node reaches its stamp soon after.
        assert!(!h.on_heartbeat(1_500, 7, s(6), s(5), 1_000));
        h.on_own_view(1_600, s(6));
        assert!(
            !h.on_heartbeat(2_000, 7, s(7), s(6), 1_000),
            "it left 6 at 2000"
        );
        assert!(!h.on_heartbeat(2_900, 7, s(7), s(6), 1_000));
    }

    /// A peer that stays on a stamp this node moved past (it missed the latest update) is a
    /// hole once the window has passed since this node moved on.
    #[test]
    fn missing_the_latest_update_is_a_hole_too() {
        let mut h = HoleManager::default();
        h.on_own_view(0, s(1));
        h.on_own_view(1_000, s(2));
        assert!(!h.on_heartbeat(1_500, 7, s(1), s(2), 1_000));
        assert!(h.on_heartbeat(2_000, 7, s(1), s(2), 1_000));
    }

    #[test]
    fn a_divergence_that_lasts_a_window_asks_for_one_repair() {
        let mut h = HoleManager::default();
        h.on_own_view(0, s(10));
        assert!(!h.on_heartbeat(0, 7, s(11), s(10), 1_000));
        assert!(!h.on_heartbeat(500, 7, s(12), s(10), 1_000));
        assert!(
            h.on_heartbeat(1_000, 7, s(13), s(10), 1_000),
            "a window without agreement"
        );
        assert!(
            !h.on_heartbeat(1_500, 7, s(14), s(10), 1_000),
            "then one per window"
        );
    }
}
