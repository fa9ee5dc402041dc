//! `observers`: peers born as learners of the ZooKeeper group (docs/membership.md).

use super::Config;
use anyhow::{bail, Result};
use synod_core::NodeId;

impl Config {
    /// The voters of the ZooKeeper group at birth: every peer but the observers.
    pub fn zookeeper_voters(&self) -> Result<Vec<NodeId>> {
        Ok(self
            .members()?
            .keys()
            .copied()
            .filter(|id| !self.observers.contains(id))
            .collect())
    }

    /// Observers are peers, leave at least one voter, and need a protocol that has learners.
    pub(super) fn check_observers(&self) -> Result<()> {
        if self.observers.is_empty() {
            return Ok(());
        }
        if self.protocol != "zab" {
            bail!(
                "config key observers: protocol '{}' has no observers (only zab changes its \
                 configuration online)",
                self.protocol
            );
        }
        let peers = self.members()?;
        for o in &self.observers {
            if !peers.contains_key(o) {
                bail!("config key observers: {o} is not one of the peers");
            }
        }
        if self.zookeeper_voters()?.is_empty() {
            bail!("config key observers: every peer is an observer; the group needs a voter");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::protocol::tests::load;

    #[test]
    fn observers_are_peers_leave_a_voter_and_need_zab() {
        let c = load(&["observers=[3]"]).unwrap();
        assert_eq!(c.zookeeper_voters().unwrap(), vec![1, 2]);
        for (extra, why) in [
            (&["observers=[4]"][..], "4 is not one of the peers"),
            (&["observers=[1,2,3]"][..], "the group needs a voter"),
            (&["observers=[3]", "protocol=paxos"][..], "has no observers"),
        ] {
            let e = load(extra).unwrap_err().to_string();
            assert!(e.contains(why), "{extra:?}: {e}");
        }
    }
}
