//! The replicated ZooKeeper data tree: znodes with ZooKeeper's Stat semantics, sessions and
//! their ephemerals, ACLs. Persistent (copy-on-write) maps make a snapshot view an O(1) clone and
//! let a `multi` run on a scratch copy that is kept only if every op succeeds.

use crate::jute::{err, mode, perms, Acl, Id, Stat};
use crate::path;
use bytes::Bytes;
use std::sync::Arc;

pub use crate::acl::{allowed, fix_acl, open_acl};

/// `ephemeralOwner` of a container node (EphemeralType.CONTAINER).
pub const CONTAINER_OWNER: i64 = i64::MIN;
/// `ephemeralOwner` high byte of a TTL node (EphemeralType.TTL): 0xFF << 56 | ttl.
pub const TTL_OWNER_MASK: i64 = 0xFFi64 << 56;
/// Largest TTL (the low 56 bits minus one bit, as ZooKeeper's EphemeralType.TTL allows).
pub const MAX_TTL_MS: i64 = (1i64 << 40) - 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Persistent,
    Ephemeral(i64),
    Container,
    Ttl(i64),
}

impl Kind {
    pub fn owner(self) -> i64 {
        match self {
            Kind::Persistent => 0,
            Kind::Ephemeral(s) => s,
            Kind::Container => CONTAINER_OWNER,
            Kind::Ttl(ms) => TTL_OWNER_MASK | ms,
        }
    }
    pub fn from_owner(o: i64) -> Kind {
        if o == 0 {
            Kind::Persistent
        } else if o == CONTAINER_OWNER {
            Kind::Container
        } else if o & TTL_OWNER_MASK == TTL_OWNER_MASK {
            Kind::Ttl(o & !TTL_OWNER_MASK)
        } else {
            Kind::Ephemeral(o)
        }
    }
}

#[derive(Clone, Debug)]
pub struct Node {
    /// The node's data; `None` when it was written as a null buffer (length -1), which
    /// ZooKeeper keeps and returns as such.
    pub data: Option<Bytes>,
    pub acl: Arc<Vec<Acl>>,
    pub stat: Stat,
    pub children: Children,
}

/// A znode's child names. Most znodes have none, and an empty `imbl::OrdSet` allocates a whole
/// B-tree node (about 1.6 KiB, measured), so the set exists only while there are children.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Children(Option<imbl::OrdSet<Arc<str>>>);

impl Children {
    pub fn new() -> Self {
        Children(None)
    }
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |s| s.len())
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn insert(&mut self, name: Arc<str>) {
        self.0.get_or_insert_with(imbl::OrdSet::new).insert(name);
    }
    pub fn remove(&mut self, name: &str) {
        if let Some(s) = &mut self.0 {
            s.remove(name);
            if s.is_empty() {
                self.0 = None;
            }
        }
    }
    pub fn iter(&self) -> impl Iterator<Item = &Arc<str>> {
        self.0.iter().flat_map(|s| s.iter())
    }
}

impl<'a> IntoIterator for &'a Children {
    type Item = &'a Arc<str>;
    type IntoIter = Box<dyn Iterator<Item = &'a Arc<str>> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl Node {
    pub fn kind(&self) -> Kind {
        Kind::from_owner(self.stat.ephemeral_owner)
    }
    /// The Stat as clients see it, derived from the stored one as ZooKeeper's DataNode.copyStat
    /// does: the stored cversion counts child creations only, and clients see
    /// 2 × creations − numChildren (every create and every delete adds one); containers and TTL
    /// nodes show no owner.
    pub fn stat(&self) -> Stat {
        let children = self.children.len() as i32;
        Stat {
            num_children: children,
            data_length: self.data.as_ref().map_or(0, |d| d.len() as i32),
            cversion: self.stat.cversion.wrapping_mul(2).wrapping_sub(children),
            ephemeral_owner: match self.kind() {
                Kind::Ephemeral(s) => s,
                _ => 0,
            },
            ..self.stat
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub timeout_ms: i32,
    pub password: Bytes,
    pub ephemerals: imbl::OrdSet<Arc<str>>,
    /// The slot of the last transaction that created or touched the session (replicated, in
    /// snapshots): an expiry names the one it saw, and is void if a later touch was applied.
    /// 0 when restored from a snapshot that predates it.
    pub touched: u64,
    /// The server the session's client is attached to (replicated, in snapshots); 0 if
    /// unknown (a log or snapshot that predates it).
    pub owner: u32,
}

/// A change to the tree, for watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Created(Arc<str>),
    /// A node was removed; its ACL decides who may still hear of it.
    Deleted(Arc<str>, Arc<Vec<Acl>>),
    DataChanged(Arc<str>),
    ChildrenChanged(Arc<str>),
}

#[derive(Clone, Debug)]
pub struct Tree {
    pub nodes: imbl::OrdMap<Arc<str>, Node>,
    pub sessions: imbl::OrdMap<i64, Session>,
    /// Container and TTL nodes, which the leader reaps when they qualify.
    pub reapable: imbl::OrdSet<Arc<str>>,
}

impl Default for Tree {
    fn default() -> Self {
        let mut t = Tree {
            nodes: imbl::OrdMap::new(),
            sessions: imbl::OrdMap::new(),
            reapable: imbl::OrdSet::new(),
        };
        let empty = |acl: Arc<Vec<Acl>>| Node {
            data: Some(Bytes::new()),
            acl,
            stat: Stat::default(),
            children: Children::new(),
        };
        // As in ZooKeeper: "/" and the system node "/zookeeper" with "quota" and "config".
        let mut root = empty(open_acl());
        root.children.insert(Arc::from("zookeeper"));
        let mut zk = empty(open_acl());
        zk.children.insert(Arc::from("quota"));
        zk.children.insert(Arc::from("config"));
        t.nodes.insert(Arc::from("/"), root);
        t.nodes.insert(Arc::from("/zookeeper"), zk);
        t.nodes
            .insert(Arc::from("/zookeeper/quota"), empty(open_acl()));
        let read_only = Arc::new(vec![Acl {
            perms: perms::READ,
            id: Id {
                scheme: "world".into(),
                id: "anyone".into(),
            },
        }]);
        t.nodes
            .insert(Arc::from("/zookeeper/config"), empty(read_only));
        t
    }
}

pub struct CreateArgs<'a> {
    pub path: &'a str,
    pub data: Option<Bytes>,
    pub acl: &'a [Acl],
    pub flags: i32,
    /// createContainer: the node is a container whatever its (valid, non-TTL) flags say, and
    /// named sequentially if they say so (ZooKeeper's CreateContainerTxn).
    pub container: bool,
    pub ttl: i64,
    pub session: i64,
    pub auth: &'a [Id],
    pub zxid: i64,
    pub time: i64,
}

impl Tree {
    pub fn get(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path)
    }

    /// create / create2 / createContainer / createTTL, quotas not enforced.
    pub fn create(
        &mut self,
        a: CreateArgs<'_>,
        changes: &mut Vec<Change>,
    ) -> Result<(String, Stat), i32> {
        self.create_quota(a, false, changes)
    }

    /// create / create2 / createContainer / createTTL; with `enforce_quota`, a create past a
    /// hard quota fails with QUOTAEXCEEDED (see crate::quota).
    pub fn create_quota(
        &mut self,
        a: CreateArgs<'_>,
        enforce_quota: bool,
        changes: &mut Vec<Change>,
    ) -> Result<(String, Stat), i32> {
        let sequential = matches!(
            a.flags,
            mode::PERSISTENT_SEQUENTIAL
                | mode::EPHEMERAL_SEQUENTIAL
                | mode::PERSISTENT_SEQUENTIAL_WITH_TTL
        );
        let kind = match a.flags {
            mode::PERSISTENT
            | mode::PERSISTENT_SEQUENTIAL
            | mode::EPHEMERAL
            | mode::EPHEMERAL_SEQUENTIAL
            | mode::CONTAINER
                if a.container =>
            {
                Kind::Container
            }
            mode::PERSISTENT | mode::PERSISTENT_SEQUENTIAL => Kind::Persistent,
            mode::EPHEMERAL | mode::EPHEMERAL_SEQUENTIAL => Kind::Ephemeral(a.session),
            mode::CONTAINER => Kind::Container,
            mode::PERSISTENT_WITH_TTL | mode::PERSISTENT_SEQUENTIAL_WITH_TTL => {
                if a.ttl <= 0 || a.ttl > MAX_TTL_MS {
                    return Err(err::BAD_ARGUMENTS);
                }
                Kind::Ttl(a.ttl)
            }
            _ => return Err(err::BAD_ARGUMENTS),
        };
        // ZooKeeper's order of checks (PrepRequestProcessor): the first failure wins.
        if matches!(kind, Kind::Ephemeral(_)) && !self.sessions.contains_key(&a.session) {
            return Err(err::SESSION_EXPIRED);
        }
        if !a.path.contains('/') || a.path.contains('\0') {
            return Err(err::BAD_ARGUMENTS);
        }
        let acl = fix_acl(a.acl, a.auth)?;
        let parent_path = path::parent(a.path).to_string();
        let parent = self.nodes.get(parent_path.as_str()).ok_or(err::NO_NODE)?;
        if !allowed(&parent.acl, perms::CREATE, a.auth) {
            return Err(err::NO_AUTH);
        }
        let full = if sequential {
            format!("{}{:010}", a.path, parent.stat.cversion)
        } else {
            a.path.to_string()
        };
        if path::validate(&full, false).is_err() {
            return Err(err::BAD_ARGUMENTS);
        }
        if self.nodes.contains_key(full.as_str()) {
            return Err(err::NODE_EXISTS);
        }
        if matches!(parent.kind(), Kind::Ephemeral(_)) {
            return Err(err::NO_CHILDREN_FOR_EPHEMERALS);
        }
        let len = a.data.as_ref().map_or(0, |d| d.len() as i64);
        if enforce_quota {
            self.quota_check(&full, len, 1)?;
        }
        let name: Arc<str> = Arc::from(path::name(&full));
        let key: Arc<str> = Arc::from(full.as_str());
        let stat = Stat {
            czxid: a.zxid,
            mzxid: a.zxid,
            ctime: a.time,
            mtime: a.time,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: kind.owner(),
            data_length: a.data.as_ref().map_or(0, |d| d.len() as i32),
            num_children: 0,
            pzxid: a.zxid,
        };
        let node = Node {
            data: a.data,
            acl: Arc::new(acl),
            stat,
            children: Children::new(),
        };
        let parent = self.nodes.get_mut(parent_path.as_str()).expect("checked");
        parent.children.insert(name);
        parent.stat.cversion = parent.stat.cversion.wrapping_add(1);
        parent.stat.pzxid = a.zxid;
        let stat = node.stat();
        self.nodes.insert(key.clone(), node);
        match kind {
            Kind::Ephemeral(s) => {
                if let Some(sess) = self.sessions.get_mut(&s) {
                    sess.ephemerals.insert(key.clone());
                }
            }
            Kind::Container | Kind::Ttl(_) => {
                self.reapable.insert(key.clone());
            }
            Kind::Persistent => {}
        }
        self.quota_created(&full, len);
        changes.push(Change::Created(key));
        changes.push(Change::ChildrenChanged(Arc::from(parent_path.as_str())));
        Ok((full, stat))
    }

    pub fn delete(
        &mut self,
        p: &str,
        version: i32,
        auth: &[Id],
        zxid: i64,
        changes: &mut Vec<Change>,
    ) -> Result<(), i32> {
        // ZooKeeper's special paths; nodes under /zookeeper/quota (quotas) may go.
        if !p.contains('/')
            || p.contains('\0')
            || matches!(
                p,
                "/" | "/zookeeper" | crate::quota::QUOTA_ROOT | "/zookeeper/config"
            )
        {
            return Err(err::BAD_ARGUMENTS);
        }
        let parent_path = path::parent(p);
        let parent = self.nodes.get(parent_path).ok_or(err::NO_NODE)?;
        if !allowed(&parent.acl, perms::DELETE, auth) {
            return Err(err::NO_AUTH);
        }
        let node = self.nodes.get(p).ok_or(err::NO_NODE)?;
        if version != -1 && version != node.stat.version {
            return Err(err::BAD_VERSION);
        }
        if !node.children.is_empty() {
            return Err(err::NOT_EMPTY);
        }
        self.remove(p, zxid, changes);
        Ok(())
    }

    /// Remove a childless node (no checks).
    fn remove(&mut self, p: &str, zxid: i64, changes: &mut Vec<Change>) {
        let Some((key, node)) = self.nodes.remove_with_key(p) else {
            return;
        };
        let parent_path: Arc<str> = Arc::from(path::parent(p));
        if let Some(parent) = self.nodes.get_mut(&parent_path) {
            // The stored cversion counts creations; the visible one still moves (see stat()).
            parent.children.remove(path::name(p));
            parent.stat.pzxid = zxid;
        }
        match node.kind() {
            Kind::Ephemeral(s) => {
                if let Some(sess) = self.sessions.get_mut(&s) {
                    sess.ephemerals.remove(&key);
                }
            }
            Kind::Container | Kind::Ttl(_) => {
                self.reapable.remove(&key);
            }
            Kind::Persistent => {}
        }
        self.quota_removed(p, node.data.as_ref().map_or(0, |d| d.len() as i64));
        changes.push(Change::Deleted(key, node.acl.clone()));
        changes.push(Change::ChildrenChanged(parent_path));
    }

    /// setData, quotas not enforced.
    #[allow(clippy::too_many_arguments)]
    pub fn set_data(
        &mut self,
        p: &str,
        data: Option<Bytes>,
        version: i32,
        auth: &[Id],
        zxid: i64,
        time: i64,
        changes: &mut Vec<Change>,
    ) -> Result<Stat, i32> {
        self.set_data_quota(p, data, version, auth, zxid, time, false, changes)
    }

    /// setData; with `enforce_quota`, growing past a hard quota fails with QUOTAEXCEEDED
    /// (checked before the version, as ZooKeeper does).
    #[allow(clippy::too_many_arguments)]
    pub fn set_data_quota(
        &mut self,
        p: &str,
        data: Option<Bytes>,
        version: i32,
        auth: &[Id],
        zxid: i64,
        time: i64,
        enforce_quota: bool,
        changes: &mut Vec<Change>,
    ) -> Result<Stat, i32> {
        if path::validate(p, false).is_err() {
            return Err(err::BAD_ARGUMENTS);
        }
        let (key, node) = self.nodes.get_key_value(p).ok_or(err::NO_NODE)?;
        let key = key.clone();
        if !allowed(&node.acl, perms::WRITE, auth) {
            return Err(err::NO_AUTH);
        }
        let old = node.data.as_ref().map_or(0, |d| d.len() as i64);
        let new = data.as_ref().map_or(0, |d| d.len() as i64);
        if enforce_quota {
            self.quota_check(p, new - old, 0)?;
        }
        if version != -1 && version != node.stat.version {
            return Err(err::BAD_VERSION);
        }
        let node = self.nodes.get_mut(&key).expect("present");
        node.data = data;
        node.stat.version = node.stat.version.wrapping_add(1);
        node.stat.mzxid = zxid;
        node.stat.mtime = time;
        let stat = node.stat();
        self.quota_changed(p, old, new);
        changes.push(Change::DataChanged(key));
        Ok(stat)
    }

    pub fn set_acl(
        &mut self,
        p: &str,
        acl: &[Acl],
        version: i32,
        auth: &[Id],
    ) -> Result<Stat, i32> {
        if path::validate(p, false).is_err() {
            return Err(err::BAD_ARGUMENTS);
        }
        let node = self.nodes.get(p).ok_or(err::NO_NODE)?;
        if !allowed(&node.acl, perms::ADMIN, auth) {
            return Err(err::NO_AUTH);
        }
        if version != -1 && version != node.stat.aversion {
            return Err(err::BAD_VERSION);
        }
        let acl = fix_acl(acl, auth)?;
        let node = self.nodes.get_mut(p).expect("present");
        node.acl = Arc::new(acl);
        node.stat.aversion = node.stat.aversion.wrapping_add(1);
        Ok(node.stat())
    }

    pub fn check(&self, p: &str, version: i32, auth: &[Id]) -> Result<(), i32> {
        if path::validate(p, false).is_err() {
            return Err(err::BAD_ARGUMENTS);
        }
        let node = self.nodes.get(p).ok_or(err::NO_NODE)?;
        if !allowed(&node.acl, perms::READ, auth) {
            return Err(err::NO_AUTH);
        }
        if version != -1 && version != node.stat.version {
            return Err(err::BAD_VERSION);
        }
        Ok(())
    }

    pub fn create_session(&mut self, id: i64, timeout_ms: i32, password: Bytes) {
        self.sessions.entry(id).or_insert(Session {
            timeout_ms,
            password,
            ephemerals: imbl::OrdSet::new(),
            touched: 0,
            owner: 0,
        });
    }

    /// Record that session `id`'s client is attached at server `owner`.
    pub fn attach_session(&mut self, id: i64, owner: u32) {
        if let Some(s) = self.sessions.get_mut(&id) {
            s.owner = owner;
        }
    }

    /// Record that session `id` was touched at `slot`; false if there is no such session.
    pub fn touch_session(&mut self, id: i64, slot: u64) -> bool {
        match self.sessions.get_mut(&id) {
            Some(s) => {
                s.touched = s.touched.max(slot);
                true
            }
            None => false,
        }
    }

    /// Close a session: its ephemerals are deleted (deepest first, in path order).
    pub fn close_session(&mut self, id: i64, zxid: i64, changes: &mut Vec<Change>) -> bool {
        let Some(s) = self.sessions.remove(&id) else {
            return false;
        };
        let mut paths: Vec<Arc<str>> = s.ephemerals.into_iter().collect();
        paths.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        for p in paths {
            self.remove(&p, zxid, changes);
        }
        true
    }

    /// A container with no children that once had one, or a TTL node with no children whose
    /// TTL has passed since its last modification: the leader proposes its removal.
    pub fn reap_due(&self, p: &str, now: i64) -> bool {
        let Some(n) = self.nodes.get(p) else {
            return false;
        };
        if !n.children.is_empty() {
            return false;
        }
        match n.kind() {
            // Stored cversion > 0: it once had a child.
            Kind::Container => n.stat.cversion > 0,
            Kind::Ttl(ttl) => now - n.stat.mtime > ttl,
            _ => false,
        }
    }

    /// Remove a node the leader found due for reaping, if it still is at `time`.
    pub fn reap(&mut self, p: &str, time: i64, zxid: i64, changes: &mut Vec<Change>) -> bool {
        if !self.reap_due(p, time) {
            return false;
        }
        self.remove(p, zxid, changes);
        true
    }

    /// Every node's path below `prefix` that is an ephemeral of `session`.
    pub fn ephemerals(&self, session: i64, prefix: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .sessions
            .get(&session)
            .map(|s| {
                s.ephemerals
                    .iter()
                    .filter(|p| prefix == "/" || p.starts_with(prefix))
                    .map(|p| p.to_string())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// The number of descendants of `p` (not counting `p`).
    pub fn count_descendants(&self, p: &str) -> i32 {
        let Some(n) = self.nodes.get(p) else {
            return 0;
        };
        let mut total = 0;
        let mut stack: Vec<String> = n.children.iter().map(|c| path::join(p, c)).collect();
        while let Some(c) = stack.pop() {
            total += 1;
            if let Some(n) = self.nodes.get(c.as_str()) {
                stack.extend(n.children.iter().map(|k| path::join(&c, k)));
            }
        }
        total
    }
}

#[cfg(test)]
mod tests;
