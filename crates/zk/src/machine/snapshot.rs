//! Snapshots: [`ZkMachine::snapshot_view`] serialises the replicated state (the nodes and the
//! session table, with the applied position and digest) and [`ZkMachine::restore`] rebuilds it.

use super::ZkMachine;
use crate::jute::{read_acls, write_acls, JResult, JuteError, JuteWrite, Reader, Stat};
use crate::path;
use crate::tree::{self, Kind, Tree};
use bytes::{BufMut, Bytes, BytesMut};
use std::sync::Arc;

/// Marks the section of the sessions' last touches.
const SESSIONS_TOUCHED: i32 = 1;
/// Marks the section of the machine's node clock (`ZkMachine::clock_ms`).
const NODE_CLOCK: i32 = 2;
/// Marks the section of the sessions' owners (`tree::Session::owner`).
const SESSION_OWNERS: i32 = 3;

impl ZkMachine {
    /// Serialise the replicated state (not the watches: they are local).
    pub fn snapshot_view(&self) -> impl FnOnce() -> Bytes + Send + 'static {
        let tree = self.tree.clone();
        let (slot, zxid, digest) = (self.applied_slot, self.applied_zxid, self.digest);
        let clock_ms = self.clock_ms;
        move || {
            let mut b = BytesMut::new();
            b.put_u64(slot);
            b.long(zxid);
            b.put_u64(digest);
            let mut paths: Vec<&Arc<str>> = tree.nodes.keys().collect();
            paths.sort();
            b.int(paths.len() as i32);
            for p in paths {
                let n = &tree.nodes[p];
                b.string(p);
                b.opt_buffer(n.data.as_deref());
                write_acls(&mut b, &n.acl);
                n.stat.write(&mut b);
            }
            b.int(tree.sessions.len() as i32);
            for (id, s) in tree.sessions.iter() {
                b.long(*id);
                b.int(s.timeout_ms);
                b.buffer(&s.password);
            }
            // Appended after the original format (which ends here), in the same order: when
            // each session was last touched.
            b.int(SESSIONS_TOUCHED);
            for s in tree.sessions.values() {
                b.long(s.touched as i64);
            }
            b.int(NODE_CLOCK);
            b.long(clock_ms);
            b.int(SESSION_OWNERS);
            for s in tree.sessions.values() {
                b.int(s.owner as i32);
            }
            b.freeze()
        }
    }

    pub fn restore(&mut self, slot: u64, data: Bytes) -> JResult<()> {
        let mut r = Reader::new(data);
        let snap_slot = r.long()? as u64;
        if snap_slot != slot {
            return Err(JuteError("snapshot position"));
        }
        let zxid = r.long()?;
        let digest = r.long()? as u64;
        let n = r.count(16)?;
        let mut tree = Tree {
            nodes: imbl::OrdMap::new(),
            sessions: imbl::OrdMap::new(),
            reapable: imbl::OrdSet::new(),
        };
        for _ in 0..n {
            let p: Arc<str> = Arc::from(r.string()?.as_str());
            let data = r.opt_buffer()?;
            let acl = read_acls(&mut r)?;
            let stat = Stat::read(&mut r)?;
            tree.nodes.insert(
                p,
                tree::Node {
                    data,
                    acl: Arc::new(acl),
                    stat,
                    children: crate::tree::Children::new(),
                },
            );
        }
        let m = r.count(16)?;
        let mut ids = Vec::with_capacity(m);
        for _ in 0..m {
            let id = r.long()?;
            let timeout_ms = r.int()?;
            let password = r.buffer()?;
            tree.create_session(id, timeout_ms, password);
            ids.push(id);
        }
        // A snapshot written before sessions carried their last touch ends here: they restore
        // with 0, and their holder expires them unconditionally (front end, duties).
        if r.remaining() != 0 {
            if r.int()? != SESSIONS_TOUCHED {
                return Err(JuteError("snapshot section"));
            }
            for id in &ids {
                let touched = r.long()? as u64;
                tree.touch_session(*id, touched);
            }
        }
        // A snapshot written before the node clock was kept ends here: it restarts from the
        // latest node time in the tree.
        let mut clock_ms = tree
            .nodes
            .values()
            .map(|n| n.stat.mtime.max(n.stat.ctime))
            .max()
            .unwrap_or(0);
        if r.remaining() != 0 {
            if r.int()? != NODE_CLOCK {
                return Err(JuteError("snapshot section"));
            }
            clock_ms = r.long()?;
        }
        if r.remaining() != 0 {
            if r.int()? != SESSION_OWNERS {
                return Err(JuteError("snapshot section"));
            }
            for id in &ids {
                let owner = r.int()? as u32;
                tree.attach_session(*id, owner);
            }
        }
        if r.remaining() != 0 {
            return Err(JuteError("trailing bytes in snapshot"));
        }
        // Rebuild children, ephemerals and the reapable set from the nodes.
        let paths: Vec<Arc<str>> = tree.nodes.keys().cloned().collect();
        for p in paths {
            if &*p != "/" {
                let parent = path::parent(&p).to_string();
                let name: Arc<str> = Arc::from(path::name(&p));
                match tree.nodes.get_mut(parent.as_str()) {
                    Some(pn) => {
                        pn.children.insert(name);
                    }
                    None => return Err(JuteError("snapshot node without parent")),
                }
            }
            match tree.nodes[&p].kind() {
                Kind::Ephemeral(s) => {
                    if let Some(sess) = tree.sessions.get_mut(&s) {
                        sess.ephemerals.insert(p.clone());
                    }
                }
                Kind::Container | Kind::Ttl(_) => {
                    tree.reapable.insert(p.clone());
                }
                Kind::Persistent => {}
            }
        }
        self.tree = tree;
        self.applied_slot = slot;
        self.applied_zxid = zxid;
        self.digest = digest;
        self.clock_ms = clock_ms;
        Ok(())
    }
}
