//! The identity of a data directory: which cluster, node and group protocols it belongs to.
//! Recorded once a start has read the directory's log with it; a later start with another
//! cluster id or node id, or with a group running another protocol than the one its log was
//! written by, refuses to use the directory.

use crate::config::Config;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Identity {
    pub cluster_id: String,
    pub node_id: u32,
    /// The ZooKeeper group's protocol.
    pub protocol: String,
    /// The protocol of every other group this node runs, by id.
    #[serde(default)]
    pub groups: BTreeMap<String, String>,
}

pub const IDENTITY_FILE: &str = "identity.toml";

fn mine(cfg: &Config) -> Identity {
    let groups = cfg
        .groups
        .iter()
        .filter(|g| cfg.group_members(g).contains(&cfg.node_id))
        .map(|g| {
            (
                g.id.to_string(),
                g.protocol.clone().unwrap_or_else(|| cfg.protocol.clone()),
            )
        })
        .collect();
    Identity {
        cluster_id: cfg.cluster_id.clone(),
        node_id: cfg.node_id,
        protocol: cfg.protocol.clone(),
        groups,
    }
}

/// Check the identity of `dir`: another cluster or node, or a group that changed protocol, is
/// refused. Returns the identity to record ([`record_identity`]) once the log has been read
/// with it: on first start, or when groups were added. It is not written before, so a start
/// that fails to read a log (a directory whose identity file was lost, opened with another
/// protocol) does not name the directory after the wrong protocol.
pub fn check_identity(dir: &Path, cfg: &Config) -> Result<Option<Identity>> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create data directory {}", dir.display()))?;
    let mine = mine(cfg);
    let path = dir.join(IDENTITY_FILE);
    let found: Identity = match std::fs::read_to_string(&path) {
        Ok(text) => {
            toml::from_str(&text).with_context(|| format!("{} is damaged", path.display()))?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Some(mine)),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let refuse = |what: String| -> Result<Option<Identity>> {
        bail!(
            "data directory {} belongs to {what}; refusing to start. Point data_dir elsewhere \
             or remove the directory if it is no longer needed.",
            dir.display()
        )
    };
    if (&found.cluster_id, found.node_id, &found.protocol)
        != (&mine.cluster_id, mine.node_id, &mine.protocol)
    {
        return refuse(format!(
            "cluster '{}' node {} (protocol {}), but this server is cluster '{}' node {} \
             (protocol {})",
            found.cluster_id,
            found.node_id,
            found.protocol,
            mine.cluster_id,
            mine.node_id,
            mine.protocol
        ));
    }
    for (g, p) in &found.groups {
        match mine.groups.get(g) {
            Some(q) if q != p => {
                return refuse(format!(
                    "a node whose group {g} ran protocol {p}, but this configuration runs {q}"
                ))
            }
            None => {
                return refuse(format!(
                    "a node that ran group {g} ({p}), which this configuration no longer runs here"
                ))
            }
            Some(_) => {}
        }
    }
    Ok((found.groups != mine.groups).then_some(mine))
}

/// Write the identity of `dir` (durably).
pub fn record_identity(dir: &Path, id: &Identity) -> Result<()> {
    let text = toml::to_string(id).expect("identity serialises");
    synod_log::write_file_durably(dir, IDENTITY_FILE, text.as_bytes())
        .with_context(|| format!("cannot write {}", dir.join(IDENTITY_FILE).display()))
}
