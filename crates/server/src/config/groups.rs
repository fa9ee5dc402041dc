//! `[[groups]]`: the groups besides the ZooKeeper group (group 0), each with its own protocol,
//! members and state machine, and the checks that tie them to the rest of the configuration.

use super::Config;
use crate::protocol::check_protocol;
use anyhow::{bail, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use synod_core::NodeId;

/// One `[[groups]]` entry.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    /// The group's id: 1 or more (0 is the ZooKeeper group), unique in the cluster.
    pub id: u32,
    /// Its replication protocol (default: the top-level `protocol`).
    #[serde(default)]
    pub protocol: Option<String>,
    /// Its state machine: `register` (a replicated key-value map served on the admin port at
    /// `/v1/groups/<id>/kv/<key>`).
    #[serde(default = "default_machine")]
    pub machine: String,
    /// Its members, node ids among `peers` (default: every node).
    #[serde(default)]
    pub members: Option<Vec<u32>>,
}

fn default_machine() -> String {
    "register".into()
}

impl Config {
    /// Checks every `[[groups]]` entry; returns their ids.
    pub(super) fn check_groups(&self) -> Result<BTreeSet<u32>> {
        let mut seen = BTreeSet::new();
        for (i, g) in self.groups.iter().enumerate() {
            let key = format!("groups[{i}]");
            if g.id == 0 {
                bail!("config key {key}.id: 0 is the ZooKeeper group; use 1 or more");
            }
            if !seen.insert(g.id) {
                bail!("config key {key}.id: group {} is listed twice", g.id);
            }
            if g.machine != "register" {
                bail!(
                    "config key {key}.machine: '{}' (expected register)",
                    g.machine
                );
            }
            let members = self.group_members(g);
            if members.is_empty() {
                bail!("config key {key}.members: a group needs at least one member");
            }
            for m in &members {
                if !self.members()?.contains_key(m) {
                    bail!("config key {key}.members: {m} is not one of the peers");
                }
            }
            check_protocol(
                &format!("{key}.protocol"),
                g.protocol.as_deref().unwrap_or(&self.protocol),
                members.len(),
            )?;
        }
        Ok(seen)
    }

    /// The members of a configured group (every node when it lists none).
    pub fn group_members(&self, g: &GroupConfig) -> Vec<NodeId> {
        let mut m = match &g.members {
            Some(m) => m.clone(),
            None => self
                .members()
                .map(|m| m.keys().copied().collect())
                .unwrap_or_default(),
        };
        m.sort_unstable();
        m.dedup();
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_checked_and_default_to_every_node() {
        let text =
            "cluster_id = 'c'\nnode_id = 1\ninsecure = true\nadmin_addr = '127.0.0.1:9181'\n\
                    data_dir = '/tmp/x'\n[peers]\n1 = '127.0.0.1:2881'\n2 = '127.0.0.1:2882'\n\
                    3 = '127.0.0.1:2883'\n[[groups]]\nid = 1\n[[groups]]\nid = 2\n\
                    protocol = 'zab-ct'\nmembers = [1, 3]\n";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, text).unwrap();
        let c = Config::load(Some(&path), &[]).unwrap();
        assert_eq!(c.group_members(&c.groups[0]), vec![1, 2, 3]);
        assert_eq!(c.group_members(&c.groups[1]), vec![1, 3]);
        // ZabCT with a named coin (the thesis's configurations) is a protocol too.
        let o = c.options::<synod_zab::Zab>("zab-ct-a");
        assert_eq!(o.variant, synod_zab::variant::Variant::Ct);
        assert!(matches!(
            o.coin,
            synod_zab::coin::Choice::Adaptive {
                policy: synod_zab::coin::Policy::Average,
                theta: None
            }
        ));
        assert!(check_protocol("protocol", "zab-ct-half", 3).is_ok());
        for (bad, key) in [
            ("[[groups]]\nid = 0\n", "groups[2].id"),
            ("[[groups]]\nid = 1\n", "groups[2].id"),
            ("[[groups]]\nid = 5\nmembers = [9]\n", "groups[2].members"),
            ("[[groups]]\nid = 5\nmachine = 'sql'\n", "groups[2].machine"),
            (
                "[[groups]]\nid = 5\nprotocol = 'raft'\n",
                "groups[2].protocol",
            ),
        ] {
            std::fs::write(&path, format!("{text}{bad}")).unwrap();
            let e = Config::load(Some(&path), &[]).unwrap_err().to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
    }
}
