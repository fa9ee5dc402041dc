//! PRIME's view as a join-semilattice.
//!
//! The thesis's PRIME applies JOIN and LEAVE updates in EpTO's total order, drops a JOIN that
//! arrives after the LEAVE of the same node, and repairs **holes** (updates EpTO failed to
//! deliver) by walking timestamps back to zero asking peers (sconekv.md §2.4). It does not say
//! how a repaired update that orders *before* ones already applied is applied, nor what a view's
//! version is then. synod closes both gaps by making the view a lattice:
//!
//! * each node id has a **rank** `2·incarnation + left`: a JOIN of incarnation i is rank `2i`,
//!   its LEAVE rank `2i + 1`; a rejoin after a (wrong) removal takes incarnation `i + 1`;
//! * the view keeps, per node id, the highest rank it has seen ([`View::apply`] is a max), so
//!   applying updates in any order, twice, or after a repair gives the same view: a JOIN after
//!   its LEAVE is dropped by construction;
//! * the members are the ids whose rank is even (joined, not left);
//! * the **version** is the sum of the ranks: every effective update raises it, and two nodes
//!   that applied the same updates hold the same version; the **hash** (a sum of per-entry
//!   hashes, order-independent) tells two views of one version apart;
//! * repairing a hole is merging a peer's view ([`View::merge`]): the join of the two lattices.
//!
//! EpTO's order still matters: a node that misses nothing goes through every view of the one
//! total order, and the KV layer above derives bucket placement along that sequence.

use std::collections::BTreeMap;

use crate::{Member, ViewStamp};
use synod_core::NodeId;

/// A membership update, as broadcast through EpTO.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Update {
    Join(Member),
    Leave(Member),
}

impl Update {
    pub fn member(self) -> Member {
        match self {
            Update::Join(m) | Update::Leave(m) => m,
        }
    }
    pub fn rank(self) -> u64 {
        match self {
            Update::Join(m) => 2 * m.incarnation as u64,
            Update::Leave(m) => 2 * m.incarnation as u64 + 1,
        }
    }
}

/// The view: the highest rank seen per node id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    ranks: BTreeMap<NodeId, u64>,
    version: u64,
    hash: u64,
    /// The members sorted by id (PRIME's ring), kept in step with `ranks`.
    ring: Vec<Member>,
}

/// SplitMix64's finaliser: a well-mixed 64-bit hash of one (node, rank) entry.
fn mix(node: NodeId, rank: u64) -> u64 {
    let mut z = ((node as u64) << 40) ^ rank ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl View {
    /// A new cluster's first view: its founder.
    pub fn founded_by(founder: Member) -> Self {
        let mut v = View::default();
        v.apply(Update::Join(founder));
        v
    }

    /// Apply one update; `true` if it changed the view (a higher rank for its node).
    pub fn apply(&mut self, update: Update) -> bool {
        let node = update.member().node;
        let rank = update.rank();
        let old = self.ranks.get(&node).copied();
        if old.is_some_and(|o| o >= rank) {
            return false;
        }
        if let Some(o) = old {
            self.version -= o;
            self.hash = self.hash.wrapping_sub(mix(node, o));
        }
        self.ranks.insert(node, rank);
        self.version += rank;
        self.hash = self.hash.wrapping_add(mix(node, rank));
        let at = self.ring.partition_point(|m| m.node < node);
        if self.ring.get(at).is_some_and(|m| m.node == node) {
            self.ring.remove(at);
        }
        if rank & 1 == 0 {
            self.ring.insert(at, Member::new(node, (rank / 2) as u32));
        }
        true
    }

    /// Merge a peer's view (hole repair): the lattice join. `true` if anything changed.
    pub fn merge(&mut self, entries: &[(NodeId, u64)]) -> bool {
        let mut changed = false;
        for &(node, rank) in entries {
            let m = Member::new(node, (rank / 2) as u32);
            let update = if rank & 1 == 0 {
                Update::Join(m)
            } else {
                Update::Leave(m)
            };
            changed |= self.apply(update);
        }
        changed
    }

    /// The whole state, to send to a peer (view copy, repair).
    pub fn entries(&self) -> Vec<(NodeId, u64)> {
        self.ranks.iter().map(|(&n, &r)| (n, r)).collect()
    }

    pub fn stamp(&self) -> ViewStamp {
        ViewStamp {
            version: self.version,
            hash: self.hash,
        }
    }

    /// The highest rank this view holds for `node`.
    pub fn rank(&self, node: NodeId) -> Option<u64> {
        self.ranks.get(&node).copied()
    }

    /// The incarnation of `node` if it is a member.
    pub fn incarnation(&self, node: NodeId) -> Option<u32> {
        self.ranks
            .get(&node)
            .filter(|r| *r & 1 == 0)
            .map(|r| (r / 2) as u32)
    }

    pub fn contains(&self, m: Member) -> bool {
        self.incarnation(m.node) == Some(m.incarnation)
    }

    /// Whether `m` was removed: its incarnation or a later one has left, or a later one joined.
    pub fn removed(&self, m: Member) -> bool {
        self.ranks
            .get(&m.node)
            .is_some_and(|&r| r > 2 * m.incarnation as u64)
    }

    /// The members, sorted by node id: PRIME's ring.
    pub fn members(&self) -> &[Member] {
        &self.ring
    }

    pub fn len(&self) -> usize {
        self.ring.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn m(n: NodeId, i: u32) -> Member {
        Member::new(n, i)
    }

    #[test]
    fn a_join_after_its_leave_is_dropped() {
        let mut v = View::founded_by(m(1, 1));
        assert!(v.apply(Update::Leave(m(2, 1))));
        assert!(
            !v.apply(Update::Join(m(2, 1))),
            "the late JOIN changes nothing"
        );
        assert!(!v.contains(m(2, 1)));
        assert!(v.removed(m(2, 1)));
        // A rejoin takes a new incarnation and counts.
        assert!(v.apply(Update::Join(m(2, 2))));
        assert!(v.contains(m(2, 2)) && !v.removed(m(2, 2)));
        assert_eq!(v.members(), &[m(1, 1), m(2, 2)]);
    }

    #[test]
    fn every_effective_update_raises_the_version() {
        let mut v = View::default();
        let mut last = v.stamp().version;
        for u in [
            Update::Join(m(3, 1)),
            Update::Join(m(1, 1)),
            Update::Leave(m(3, 1)),
            Update::Join(m(3, 2)),
        ] {
            assert!(v.apply(u));
            assert!(v.stamp().version > last);
            last = v.stamp().version;
        }
    }

    fn update() -> impl Strategy<Value = Update> {
        (1u32..8, 1u32..4, any::<bool>()).prop_map(|(n, i, leave)| {
            if leave {
                Update::Leave(m(n, i))
            } else {
                Update::Join(m(n, i))
            }
        })
    }

    proptest! {
        /// Order, duplicates and repair by merging do not matter: the same updates give the
        /// same view, version and hash.
        #[test]
        fn the_view_is_a_function_of_the_set_of_updates(
            updates in proptest::collection::vec(update(), 0..30),
            split in 0usize..30,
        ) {
            let mut a = View::default();
            for u in &updates { a.apply(*u); }
            let mut b = View::default();
            for u in updates.iter().rev() { b.apply(*u); b.apply(*u); }
            prop_assert_eq!(&a, &b);
            // Two nodes with complementary holes converge by merging.
            let split = split.min(updates.len());
            let mut c = View::default();
            let mut d = View::default();
            for u in &updates[..split] { c.apply(*u); }
            for u in &updates[split..] { d.apply(*u); }
            let de = d.entries();
            c.merge(&de);
            prop_assert_eq!(c.stamp(), a.stamp());
            prop_assert_eq!(c.members(), a.members());
        }
    }
}
