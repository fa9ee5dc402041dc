//! The data tree of a ZooKeeper server being restored: loaded from a snapshot, then the later
//! transactions applied exactly as ZooKeeper's `DataTree.processTxn` applies them while it
//! replays its log after a restart. The snapshot is fuzzy (taken while writes went on), so a
//! transaction may find its effect already there: as in ZooKeeper, a failing transaction
//! changes nothing and replay goes on, and a create that finds its node still moves the
//! parent's cversion and pzxid forward.

use super::snap::Snapshot;
use super::txnlog::{Txn, TxnHeader};
use crate::jute::{op, Acl, Stat};
use crate::path;
use std::collections::{BTreeMap, BTreeSet, HashMap};

#[derive(Clone, Debug)]
pub struct ZNode {
    pub data: Option<Vec<u8>>,
    pub acl: Vec<Acl>,
    /// Its reference into the ACL cache (-1: the open ACL, outside the cache).
    acl_id: i64,
    /// As ZooKeeper stores it (`StatPersisted`: cversion counts creations of children).
    pub stat: Stat,
    pub children: BTreeSet<String>,
}

#[derive(Debug, Default)]
pub struct DataTree {
    pub nodes: HashMap<String, ZNode>,
    /// Session id → timeout (ms).
    pub sessions: BTreeMap<i64, i32>,
    /// Session id → its ephemeral nodes.
    owned: HashMap<i64, BTreeSet<String>>,
    /// The last transaction applied.
    pub zxid: i64,
    /// Transactions that failed when replayed (normal for the ones a fuzzy snapshot covers).
    pub failed: u64,
    /// ZooKeeper's ACL cache as the replay rebuilds it (`ReferenceCountedACLCache`), kept
    /// exactly, reference counts included, because the references it hands out must be
    /// ZooKeeper's: a list not in the cache gets the next one, and a list whose count falls to
    /// zero leaves it (and gets a new reference if it comes back).
    acl_ids: HashMap<Vec<Acl>, i64>,
    acl_lists: HashMap<i64, Vec<Acl>>,
    acl_counts: HashMap<i64, u64>,
    acl_index: i64,
    /// Nodes of the snapshot naming a reference its cache lacked, by that reference.
    awaiting: HashMap<i64, Vec<String>>,
}

#[derive(Debug, PartialEq, Eq)]
enum Fail {
    NoNode,
    NodeExists,
}

/// The parent of a node (`/` for the root's children).
fn parent(p: &str) -> &str {
    path::parent(p)
}

impl DataTree {
    /// The tree of a snapshot taken at `zxid`. Fails on a node without its parent.
    pub fn from_snapshot(s: Snapshot, zxid: i64) -> Result<Self, String> {
        let mut t = DataTree {
            zxid,
            sessions: s.sessions.into_iter().collect(),
            acl_index: s.acls.iter().map(|(k, _)| *k).max().unwrap_or(0),
            acl_ids: s.acls.iter().map(|(k, l)| (l.clone(), *k)).collect(),
            acl_counts: s.acls.iter().map(|(k, _)| (*k, 0)).collect(),
            acl_lists: s.acls.into_iter().collect(),
            ..Default::default()
        };
        for n in s.nodes {
            if let Some(r) = n.acl_ref {
                t.awaiting.entry(r).or_default().push(n.path.clone());
            }
            // `addUsage`: a reference the cache lacks is ignored.
            if let Some(c) = t.acl_counts.get_mut(&n.acl_id) {
                *c += 1;
            }
            if n.path != "/" {
                let name = path::name(&n.path).to_string();
                match t.nodes.get_mut(parent(&n.path)) {
                    Some(p) => {
                        p.children.insert(name);
                    }
                    None => {
                        return Err(format!(
                            "the snapshot holds {} before (or without) its parent",
                            n.path
                        ))
                    }
                }
            }
            t.own(n.stat.ephemeral_owner, &n.path);
            t.nodes.insert(
                n.path,
                ZNode {
                    data: n.data,
                    acl: n.acl,
                    acl_id: n.acl_id,
                    stat: n.stat,
                    children: BTreeSet::new(),
                },
            );
        }
        if !t.nodes.contains_key("/") {
            return Err("the snapshot has no root node".into());
        }
        // `purgeUnused`: lists no node names leave the cache once it is loaded.
        let unused: Vec<i64> = t
            .acl_counts
            .iter()
            .filter(|(_, c)| **c == 0)
            .map(|(k, _)| *k)
            .collect();
        for k in unused {
            t.drop_acl(k);
        }
        Ok(t)
    }

    /// Apply one logged transaction (`FileTxnSnapLog.processTransaction`).
    pub fn apply(&mut self, h: &TxnHeader, txn: &Txn) {
        match txn {
            Txn::CreateSession { timeout } => {
                self.sessions.insert(h.client_id, *timeout);
            }
            Txn::CloseSession { paths } => {
                self.sessions.remove(&h.client_id);
                self.kill_session(h.client_id, h.zxid, paths.as_deref());
            }
            _ => {
                let r = self.process(h, h.ty, txn);
                if r.is_err() {
                    self.failed += 1;
                }
                // The snapshot was taken while this create's node was created, deleted and
                // created again by another session: its parent still moves forward.
                if let (
                    Err(Fail::NodeExists),
                    op::CREATE,
                    Txn::Create {
                        path,
                        parent_cversion,
                        ..
                    },
                ) = (&r, h.ty, txn)
                {
                    self.set_cversion_pzxid(parent(path), *parent_cversion, h.zxid);
                }
            }
        }
        if h.zxid > self.zxid {
            self.zxid = h.zxid;
        }
    }

    fn process(&mut self, h: &TxnHeader, ty: i32, txn: &Txn) -> Result<(), Fail> {
        match txn {
            Txn::Create {
                path,
                data,
                acl,
                ephemeral,
                parent_cversion,
                owner,
            } => {
                let owner = match ty {
                    op::CREATE | op::CREATE2 if *ephemeral => h.client_id,
                    op::CREATE | op::CREATE2 => 0,
                    _ => *owner,
                };
                self.create_node(path, data, acl, owner, *parent_cversion, h.zxid, h.time)
            }
            Txn::Delete { path } => self.delete_node(path, h.zxid),
            Txn::SetData {
                path,
                data,
                version,
            } => {
                let n = self.nodes.get_mut(path.as_str()).ok_or(Fail::NoNode)?;
                n.data = data.clone();
                n.stat.mtime = h.time;
                n.stat.mzxid = h.zxid;
                n.stat.version = *version;
                Ok(())
            }
            Txn::SetAcl { path, acl, version } => {
                if !self.nodes.contains_key(path.as_str()) {
                    return Err(Fail::NoNode);
                }
                self.forget_awaiting(path);
                let old = self.nodes.get(path.as_str()).map_or(-1, |n| n.acl_id);
                self.remove_acl_usage(old);
                let id = self.convert_acl(acl);
                let n = self.nodes.get_mut(path.as_str()).ok_or(Fail::NoNode)?;
                n.acl = acl.clone();
                n.acl_id = id;
                n.stat.aversion = *version;
                Ok(())
            }
            Txn::Check { .. } | Txn::Error { .. } => Ok(()),
            Txn::Multi(subs) => {
                // A multi that failed was logged with every sub-transaction an error: nothing
                // of it applies.
                if subs.iter().any(|(_, t)| matches!(t, Txn::Error { .. })) {
                    return Ok(());
                }
                let mut r = Ok(());
                for (sty, t) in subs {
                    if let Err(e) = self.process(h, *sty, t) {
                        r = Err(e);
                    }
                }
                r
            }
            Txn::CreateSession { .. } | Txn::CloseSession { .. } => Ok(()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn create_node(
        &mut self,
        path: &str,
        data: &Option<Vec<u8>>,
        acl: &[Acl],
        owner: i64,
        parent_cversion: i32,
        zxid: i64,
        time: i64,
    ) -> Result<(), Fail> {
        if path == "/" || !path.starts_with('/') {
            return Err(Fail::NodeExists);
        }
        let name = path::name(path).to_string();
        if !self.nodes.contains_key(parent(path)) {
            return Err(Fail::NoNode);
        }
        // As ZooKeeper 3.6+: the list enters the cache before the node is looked for, so a
        // create replayed over a fuzzy snapshot defines the reference its node there names.
        let acl_id = self.convert_acl(acl);
        let p = self.nodes.get_mut(parent(path)).ok_or(Fail::NoNode)?;
        if p.children.contains(&name) {
            return Err(Fail::NodeExists);
        }
        let pc = if parent_cversion == -1 {
            p.stat.cversion + 1
        } else {
            parent_cversion
        };
        // A create replayed over a fuzzy snapshot must not move the parent back.
        if pc > p.stat.cversion {
            p.stat.cversion = pc;
            p.stat.pzxid = zxid;
        }
        p.children.insert(name);
        self.own(owner, path);
        self.nodes.insert(
            path.to_string(),
            ZNode {
                data: data.clone(),
                acl: acl.to_vec(),
                acl_id,
                stat: Stat {
                    czxid: zxid,
                    mzxid: zxid,
                    ctime: time,
                    mtime: time,
                    pzxid: zxid,
                    ephemeral_owner: owner,
                    ..Stat::default()
                },
                children: BTreeSet::new(),
            },
        );
        Ok(())
    }

    /// `convertAcls`: the reference of `acl` in the cache, handing out the next one to a list
    /// not there, and one more usage of it; nodes of the snapshot waiting for that reference get
    /// the list.
    fn convert_acl(&mut self, acl: &[Acl]) -> i64 {
        let id = match self.acl_ids.get(acl) {
            Some(&id) => id,
            None => {
                self.acl_index += 1;
                let id = self.acl_index;
                self.acl_ids.insert(acl.to_vec(), id);
                self.acl_lists.insert(id, acl.to_vec());
                for p in self.awaiting.remove(&id).unwrap_or_default() {
                    if let Some(n) = self.nodes.get_mut(&p) {
                        n.acl = acl.to_vec();
                    }
                }
                id
            }
        };
        *self.acl_counts.entry(id).or_default() += 1;
        id
    }

    /// `removeUsage`: one usage fewer; a list no longer used leaves the cache.
    fn remove_acl_usage(&mut self, id: i64) {
        let Some(c) = self.acl_counts.get_mut(&id) else {
            return;
        };
        *c = c.saturating_sub(1);
        if *c == 0 {
            self.drop_acl(id);
        }
    }

    fn drop_acl(&mut self, id: i64) {
        self.acl_counts.remove(&id);
        if let Some(list) = self.acl_lists.remove(&id) {
            self.acl_ids.remove(&list);
        }
    }

    /// A node that was waiting for its ACL is replaced or given another: stop waiting.
    fn forget_awaiting(&mut self, path: &str) {
        for paths in self.awaiting.values_mut() {
            paths.retain(|p| p != path);
        }
        self.awaiting.retain(|_, v| !v.is_empty());
    }

    /// Nodes whose ACL reference neither the snapshot's cache nor any replayed transaction
    /// defined: (reference, path).
    pub fn unresolved_acls(&self) -> Vec<(i64, String)> {
        let mut v: Vec<(i64, String)> = self
            .awaiting
            .iter()
            .flat_map(|(r, ps)| ps.iter().map(move |p| (*r, p.clone())))
            .filter(|(_, p)| self.nodes.contains_key(p))
            .collect();
        v.sort();
        v
    }

    fn delete_node(&mut self, path: &str, zxid: i64) -> Result<(), Fail> {
        if path == "/" || !self.nodes.contains_key(path) {
            return Err(Fail::NoNode);
        }
        if !self.awaiting.is_empty() {
            self.forget_awaiting(path);
        }
        let name = path::name(path).to_string();
        if let Some(p) = self.nodes.get_mut(parent(path)) {
            p.children.remove(&name);
            if zxid > p.stat.pzxid {
                p.stat.pzxid = zxid;
            }
        }
        if let Some(n) = self.nodes.remove(path) {
            self.remove_acl_usage(n.acl_id);
            let o = n.stat.ephemeral_owner;
            if let Some(set) = self.owned.get_mut(&o) {
                set.remove(path);
                if set.is_empty() {
                    self.owned.remove(&o);
                }
            }
        }
        Ok(())
    }

    /// Index an ephemeral node under its session.
    fn own(&mut self, owner: i64, path: &str) {
        if let crate::tree::Kind::Ephemeral(s) = crate::tree::Kind::from_owner(owner) {
            self.owned.entry(s).or_default().insert(path.to_string());
        }
    }

    fn set_cversion_pzxid(&mut self, path: &str, cversion: i32, zxid: i64) {
        if let Some(n) = self.nodes.get_mut(path) {
            let c = if cversion == -1 {
                n.stat.cversion + 1
            } else {
                cversion
            };
            if c > n.stat.cversion {
                n.stat.cversion = c;
                n.stat.pzxid = zxid;
            }
        }
    }

    /// The ephemeral nodes of `session`, deepest first.
    fn ephemerals(&self, session: i64) -> Vec<String> {
        let mut v: Vec<String> = self
            .owned
            .get(&session)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        v.reverse();
        v
    }

    /// Delete a closed session's ephemerals: those its close listed, and any other it owned.
    pub fn kill_session(&mut self, session: i64, zxid: i64, listed: Option<&[String]>) {
        for p in listed.unwrap_or_default() {
            if self
                .nodes
                .get(p)
                .is_some_and(|n| n.stat.ephemeral_owner == session)
            {
                let _ = self.delete_node(p, zxid);
            }
        }
        for p in self.ephemerals(session) {
            let _ = self.delete_node(&p, zxid);
        }
    }

    /// As ZooKeeper does once its database is loaded: the ephemerals of sessions that are not
    /// in the session table are deleted. Returns how many sessions that was.
    pub fn kill_dead_sessions(&mut self) -> usize {
        let dead: Vec<i64> = self
            .owned
            .keys()
            .copied()
            .filter(|o| !self.sessions.contains_key(o))
            .collect();
        for &s in &dead {
            self.kill_session(s, self.zxid, None);
        }
        dead.len()
    }
}
