//! A group's configuration: who votes, who only learns, and the version that orders
//! configurations. A core changes its configuration through its own log (docs/membership.md):
//! between the moment a new configuration is logged and the moment it is known committed, every
//! decision needs a majority of the old voters *and* of the new ones ([`Membership`]), so any
//! change, of one voter or many, is safe without a second log entry (ZooKeeper's
//! reconfiguration and Raft's joint consensus agree on this).
//!
//! Learners (ZooKeeper's observers, etcd's learners) receive the log and state transfer and
//! never count in a quorum.

use crate::quorum::{kth_largest, majority};
use crate::NodeId;
use std::fmt;
use std::sync::Arc;

/// The largest number of voters and learners a configuration may name.
pub const MAX_MEMBERS: usize = 255;

/// Voters, learners and a version. Both lists are sorted, without duplicates, and disjoint.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Config {
    /// Orders the configurations of a group: a later configuration has a higher version. The
    /// core that logs a configuration assigns it (Zab: the zxid of its entry, as ZooKeeper's
    /// `version=`); the configuration a group is born with has version 0.
    pub version: u64,
    pub voters: Vec<NodeId>,
    pub learners: Vec<NodeId>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{:#x}{:?}", self.version, self.voters)?;
        if !self.learners.is_empty() {
            write!(f, "+learners{:?}", self.learners)?;
        }
        Ok(())
    }
}

/// Why a configuration cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    NoVoters,
    /// Node id 0 is reserved (ids are 1-based).
    ZeroId,
    /// A node is both a voter and a learner.
    VoterAndLearner(NodeId),
    TooMany(usize),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::NoVoters => write!(f, "a configuration needs at least one voter"),
            ConfigError::ZeroId => write!(f, "node id 0 is not a valid member"),
            ConfigError::VoterAndLearner(n) => write!(f, "node {n} is both a voter and a learner"),
            ConfigError::TooMany(n) => {
                write!(f, "{n} members exceed the limit of {MAX_MEMBERS}")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// A checked configuration: the lists are sorted and deduplicated.
    pub fn new(
        version: u64,
        mut voters: Vec<NodeId>,
        mut learners: Vec<NodeId>,
    ) -> Result<Self, ConfigError> {
        voters.sort_unstable();
        voters.dedup();
        learners.sort_unstable();
        learners.dedup();
        if voters.is_empty() {
            return Err(ConfigError::NoVoters);
        }
        if voters.first() == Some(&0) || learners.first() == Some(&0) {
            return Err(ConfigError::ZeroId);
        }
        if let Some(&both) = learners.iter().find(|l| voters.binary_search(l).is_ok()) {
            return Err(ConfigError::VoterAndLearner(both));
        }
        if voters.len() + learners.len() > MAX_MEMBERS {
            return Err(ConfigError::TooMany(voters.len() + learners.len()));
        }
        Ok(Self {
            version,
            voters,
            learners,
        })
    }

    /// The configuration a group is born with: every member votes, version 0.
    pub fn initial(members: &[NodeId]) -> Self {
        Self::new(0, members.to_vec(), Vec::new()).expect("a cluster's static members")
    }

    pub fn is_voter(&self, n: NodeId) -> bool {
        self.voters.binary_search(&n).is_ok()
    }
    pub fn is_learner(&self, n: NodeId) -> bool {
        self.learners.binary_search(&n).is_ok()
    }
    pub fn is_member(&self, n: NodeId) -> bool {
        self.is_voter(n) || self.is_learner(n)
    }
    /// Does `has` hold for a majority of the voters?
    pub fn majority(&self, has: impl Fn(NodeId) -> bool) -> bool {
        self.voters.iter().filter(|&&v| has(v)).count() >= majority(self.voters.len())
    }
    /// The same members, ignoring the version.
    pub fn same_members(&self, other: &Config) -> bool {
        self.voters == other.voters && self.learners == other.learners
    }
}

/// A replica's configurations: the last one it knows committed, and those logged after it and
/// not yet known committed (one, when one change is in flight; possibly more in a log not yet
/// synchronised). Every quorum needs a majority of the voters of each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    pub committed: Arc<Config>,
    /// In log order, each with a higher version than the one before.
    pub pending: Vec<Arc<Config>>,
}

impl Membership {
    pub fn stable(config: Arc<Config>) -> Self {
        Self {
            committed: config,
            pending: Vec::new(),
        }
    }

    /// Every configuration in force, the committed one first.
    pub fn configs(&self) -> impl Iterator<Item = &Config> {
        std::iter::once(&*self.committed).chain(self.pending.iter().map(|c| &**c))
    }

    /// The newest configuration (the committed one when none is pending).
    pub fn latest(&self) -> &Arc<Config> {
        self.pending.last().unwrap_or(&self.committed)
    }

    /// Does `has` hold for a majority of the voters of every configuration in force?
    pub fn is_quorum(&self, has: impl Fn(NodeId) -> bool) -> bool {
        self.configs().all(|c| c.majority(&has))
    }

    /// The highest value a quorum has reached, given each voter's value (`None`: no value yet):
    /// for each configuration the value a majority of its voters reached, the lowest of those.
    /// With cumulative acknowledgements this is the commit point.
    pub fn quorum_value<T: Ord + Copy>(&self, value: impl Fn(NodeId) -> Option<T>) -> Option<T> {
        let mut lowest: Option<T> = None;
        let mut values = Vec::new();
        for c in self.configs() {
            values.clear();
            values.extend(c.voters.iter().filter_map(|&v| value(v)));
            let reached = kth_largest(&mut values, majority(c.voters.len()))?;
            lowest = Some(lowest.map_or(reached, |l| l.min(reached)));
        }
        lowest
    }

    /// A voter of any configuration in force.
    pub fn is_voter(&self, n: NodeId) -> bool {
        self.configs().any(|c| c.is_voter(n))
    }
    /// A voter or learner of any configuration in force.
    pub fn is_member(&self, n: NodeId) -> bool {
        self.configs().any(|c| c.is_member(n))
    }
    /// Every voter and learner of every configuration in force, sorted: whom a replica talks to.
    pub fn members(&self) -> Vec<NodeId> {
        let mut all: Vec<NodeId> = self
            .configs()
            .flat_map(|c| c.voters.iter().chain(c.learners.iter()).copied())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }
    /// The versions in force, the committed one first (what changes when the membership does).
    pub fn versions(&self) -> Vec<u64> {
        self.configs().map(|c| c.version).collect()
    }
}

/// A requested configuration change, as a client or operator states it: the new voters and
/// learners, and optionally the version it was computed from (ZooKeeper's `-v`, `from_config`):
/// a stale version is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub expect_version: Option<u64>,
    pub voters: Vec<NodeId>,
    pub learners: Vec<NodeId>,
}

/// Why a configuration change was refused on the spot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigReject {
    /// This family or variant does not change its configuration online.
    Unsupported,
    /// Only the established leader takes a change; retry there.
    NotLeader,
    /// The change was computed from `current`'s predecessor (ZooKeeper's BADVERSION).
    Stale { current: u64 },
    /// Another change is in flight, or the leader has not yet committed in its own epoch
    /// (ZooKeeper's RECONFIGINPROGRESS): retry once it commits.
    InFlight,
    /// The new configuration is malformed.
    Invalid(ConfigError),
    /// A majority of the new voters is not connected and caught up (ZooKeeper's
    /// NEWCONFIGNOQUORUM): the change would leave the group unable to commit.
    NoQuorum,
    /// The change would leave the configuration as it is.
    Unchanged,
}

impl fmt::Display for ConfigReject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigReject::Unsupported => {
                write!(f, "this protocol does not change its configuration online")
            }
            ConfigReject::NotLeader => write!(f, "not the established leader; retry there"),
            ConfigReject::Stale { current } => {
                write!(
                    f,
                    "the configuration changed: its version is now {current:#x}"
                )
            }
            ConfigReject::InFlight => write!(f, "another configuration change is in progress"),
            ConfigReject::Invalid(e) => write!(f, "invalid configuration: {e}"),
            ConfigReject::NoQuorum => write!(
                f,
                "a majority of the new voters is not connected and caught up"
            ),
            ConfigReject::Unchanged => write!(f, "the configuration would not change"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cfg(version: u64, voters: &[NodeId]) -> Arc<Config> {
        Arc::new(Config::new(version, voters.to_vec(), vec![]).unwrap())
    }

    #[test]
    fn a_malformed_configuration_is_refused() {
        assert_eq!(Config::new(1, vec![], vec![1]), Err(ConfigError::NoVoters));
        assert_eq!(Config::new(1, vec![0, 1], vec![]), Err(ConfigError::ZeroId));
        assert_eq!(
            Config::new(1, vec![1, 2], vec![2, 3]),
            Err(ConfigError::VoterAndLearner(2))
        );
        let many: Vec<NodeId> = (1..=300).collect();
        assert_eq!(Config::new(1, many, vec![]), Err(ConfigError::TooMany(300)));
        let c = Config::new(3, vec![3, 1, 3, 2], vec![5, 4]).unwrap();
        assert_eq!(c.voters, vec![1, 2, 3]);
        assert!(c.is_learner(4) && !c.is_voter(4) && c.is_member(5) && !c.is_member(6));
    }

    #[test]
    fn a_pending_configuration_needs_both_majorities() {
        let m = Membership {
            committed: cfg(0, &[1, 2, 3]),
            pending: vec![cfg(7, &[3, 4, 5])],
        };
        // {1, 2} is a majority of the old voters only; {4, 5} of the new ones only.
        assert!(!m.is_quorum(|n| n == 1 || n == 2));
        assert!(!m.is_quorum(|n| n == 4 || n == 5));
        assert!(m.is_quorum(|n| n == 2 || n == 3 || n == 4));
        // Without the joint rule the old and the new configuration decide apart: disjoint
        // majorities, the split the joint rule exists to prevent.
        assert!(Membership::stable(cfg(0, &[1, 2, 3])).is_quorum(|n| n == 1 || n == 2));
        assert!(Membership::stable(cfg(7, &[3, 4, 5])).is_quorum(|n| n == 4 || n == 5));
        assert_eq!(m.members(), vec![1, 2, 3, 4, 5]);
        assert_eq!(m.versions(), vec![0, 7]);
        // Acks 1:10 2:9 3:5 4:8 5:1: the old majority reached 9, the new one 5.
        let acks = [0u64, 10, 9, 5, 8, 1];
        assert_eq!(m.quorum_value(|n| Some(acks[n as usize])), Some(5));
        let stable = Membership::stable(cfg(0, &[1, 2, 3]));
        assert_eq!(stable.quorum_value(|n| Some(acks[n as usize])), Some(9));
        // Too few values for a majority of one configuration: nothing reached.
        assert_eq!(m.quorum_value(|n| (n <= 3).then_some(1u64)), None);
    }

    #[test]
    fn learners_never_count() {
        let c = Arc::new(Config::new(1, vec![1, 2, 3], vec![4, 5, 6]).unwrap());
        let m = Membership::stable(c);
        assert!(!m.is_quorum(|n| n == 1 || n >= 4));
        assert!(m.is_voter(1) && !m.is_voter(4) && m.is_member(4));
    }

    proptest! {
        /// Any quorum of a membership (old and new majorities while a change is pending)
        /// intersects any quorum of the configuration before it and of the one after it: the
        /// property every decision across a change rests on.
        #[test]
        fn quorums_across_a_change_intersect(
            old in proptest::collection::btree_set(1u32..9, 1..7),
            new in proptest::collection::btree_set(1u32..9, 1..7),
            a in proptest::collection::btree_set(1u32..9, 0..9),
            b in proptest::collection::btree_set(1u32..9, 0..9),
        ) {
            let old = cfg(0, &old.into_iter().collect::<Vec<_>>());
            let new = cfg(1, &new.into_iter().collect::<Vec<_>>());
            let joint = Membership { committed: old.clone(), pending: vec![new.clone()] };
            let in_a = |n| a.contains(&n);
            let in_b = |n| b.contains(&n);
            for other in [Membership::stable(old), Membership::stable(new), joint.clone()] {
                if joint.is_quorum(in_a) && other.is_quorum(in_b) {
                    prop_assert!(a.intersection(&b).next().is_some());
                }
            }
        }
    }
}
