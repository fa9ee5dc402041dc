//! The read path: [`ZkMachine::read`] serves reads and local watch operations against this
//! replica's state, and re-registers watches after a reconnect.

use super::{Reply, ZkMachine, CONFIG_PATH};
use crate::jute::{err, event, op, write_acls, Id, JResult, JuteError, JuteWrite, Reader};
use crate::path;
use crate::tree;
use crate::watch;
use bytes::{BufMut, Bytes, BytesMut};

impl ZkMachine {
    /// Serve a read (or a local watch operation) for `session` against this replica's state.
    pub fn read(&mut self, session: i64, auth: &[Id], op_code: i32, body: Bytes) -> JResult<Reply> {
        let mut r = Reader::new(body);
        Ok(match op_code {
            op::EXISTS => {
                // Reads do not validate paths (a malformed one is just absent); exists alone
                // rejects a NUL byte.
                let p = root_if_empty(r.path()?);
                let watch = r.boolean()?;
                if p.contains('\0') {
                    return Ok(Reply::error(err::BAD_ARGUMENTS));
                }
                match self.node(&p) {
                    Some(n) => {
                        if !tree::allowed(&n.acl, crate::jute::perms::READ, auth) {
                            return Ok(Reply::error(err::NO_AUTH));
                        }
                        let mut b = BytesMut::new();
                        n.stat().write(&mut b);
                        if watch {
                            self.watches.add(session, watch::Kind::Data, &p);
                        }
                        Reply::ok(b)
                    }
                    None => {
                        if watch {
                            self.watches.add(session, watch::Kind::Data, &p);
                        }
                        Reply::error(err::NO_NODE)
                    }
                }
            }
            op::GET_DATA => {
                let p = root_if_empty(r.path()?);
                let watch = r.boolean()?;
                self.get_data(session, auth, &p, watch)
            }
            op::GET_CHILDREN | op::GET_CHILDREN2 => {
                let p = root_if_empty(r.path()?);
                let watch = r.boolean()?;
                self.get_children(session, auth, &p, watch, op_code == op::GET_CHILDREN2)
            }
            op::GET_ACL => {
                let p = root_if_empty(r.path()?);
                match self.node(&p) {
                    Some(n) => {
                        use crate::jute::perms;
                        let admin = tree::allowed(&n.acl, perms::ADMIN, auth);
                        if !admin && !tree::allowed(&n.acl, perms::READ, auth) {
                            return Ok(Reply::error(err::NO_AUTH));
                        }
                        // Without ADMIN, digest ids are masked as ZooKeeper does.
                        let acl: Vec<crate::jute::Acl> = n
                            .acl
                            .iter()
                            .map(|a| {
                                let mut a = a.clone();
                                if !admin && a.id.scheme == "digest" {
                                    let user = a.id.id.split(':').next().unwrap_or("").to_string();
                                    a.id.id = format!("{user}:x");
                                }
                                a
                            })
                            .collect();
                        let mut b = BytesMut::new();
                        write_acls(&mut b, &acl);
                        n.stat().write(&mut b);
                        Reply::ok(b)
                    }
                    None => Reply::error(err::NO_NODE),
                }
            }
            op::GET_EPHEMERALS => {
                // A blank prefix, or "/", means all (ZooKeeper trims it).
                // (A null prefix reads as blank here, as ZooKeeper's readString gives null.)
                let prefix = r.string()?;
                let prefix = match prefix.trim() {
                    "" | "/" => "/".to_string(),
                    _ => prefix,
                };
                let mut b = BytesMut::new();
                b.strings(&self.tree.ephemerals(session, &prefix));
                Reply::ok(b)
            }
            op::GET_ALL_CHILDREN_NUMBER => {
                let p = root_if_empty(r.path()?);
                match self.tree.get(&p) {
                    Some(_) => {
                        let mut b = BytesMut::new();
                        b.int(self.tree.count_descendants(&p));
                        Reply::ok(b)
                    }
                    None => Reply::error(err::NO_NODE),
                }
            }
            op::MULTI_READ => {
                let mut b = BytesMut::new();
                loop {
                    let ty = r.int()?;
                    let done = r.boolean()?;
                    let _ = r.int()?;
                    if done {
                        break;
                    }
                    let p = r.path()?;
                    // ZooKeeper reads the flag and sets no watch (multiRead never watches).
                    let _watch = r.boolean()?;
                    let watch = false;
                    let reply = match ty {
                        op::GET_DATA => self.get_data(session, auth, &p, watch),
                        op::GET_CHILDREN => self.get_children(session, auth, &p, watch, false),
                        _ => return Err(JuteError("multiRead takes getData and getChildren")),
                    };
                    if reply.err == err::OK {
                        b.int(ty);
                        b.boolean(false);
                        b.int(err::OK);
                        b.put_slice(&reply.body);
                    } else {
                        b.int(op::ERROR);
                        b.boolean(false);
                        b.int(reply.err);
                        b.int(reply.err);
                    }
                }
                b.int(-1);
                b.boolean(true);
                b.int(-1);
                Reply::ok(b)
            }
            op::ADD_WATCH => {
                let p = r.path()?;
                let mode = r.int()?;
                if path::validate(&p, false).is_err() {
                    return Ok(Reply::error(err::BAD_ARGUMENTS));
                }
                let kind = match mode {
                    0 => watch::Kind::Persistent,
                    1 => watch::Kind::Recursive,
                    _ => return Err(JuteError("addWatch mode")),
                };
                self.watches.add(session, kind, &p);
                // ZooKeeper answers with an ErrorResponse (err = 0): 4 zero bytes, which the
                // Java client reads (an empty body makes it throw EOFException and reconnect).
                let mut b = BytesMut::new();
                b.int(err::OK);
                Reply::ok(b)
            }
            op::CHECK_WATCHES | op::REMOVE_WATCHES => {
                let p = r.path()?;
                let ty = r.int()?;
                // ZooKeeper fails to read an unknown watcher type.
                let kinds = watch::Kind::of_type(ty).ok_or(JuteError("watcher type"))?;
                let mut found = false;
                for &k in kinds {
                    found |= if op_code == op::REMOVE_WATCHES {
                        self.watches.remove(session, k, &p)
                    } else {
                        self.watches.has(session, k, &p)
                    };
                }
                if found {
                    Reply::ok(BytesMut::new())
                } else {
                    Reply::error(err::NO_WATCHER)
                }
            }
            op::SET_WATCHES | op::SET_WATCHES2 => {
                let rel = r.long()?;
                let data = r.strict_strings()?;
                let exist = r.strict_strings()?;
                let child = r.strict_strings()?;
                let (persistent, recursive) = if op_code == op::SET_WATCHES2 {
                    (r.strict_strings()?, r.strict_strings()?)
                } else {
                    (Vec::new(), Vec::new())
                };
                self.set_watches(session, rel, data, exist, child, persistent, recursive);
                Reply::ok(BytesMut::new())
            }
            op::WHO_AM_I => {
                let mut b = BytesMut::new();
                // As ZooKeeper's AuthUtil.getClientInfos: each identity's user name as its
                // scheme's provider gives it (a digest id without its hash), and an empty name
                // for a scheme with no provider (`super`).
                b.int(auth.len() as i32);
                for i in auth {
                    b.string(&i.scheme);
                    b.string(match i.scheme.as_str() {
                        "digest" => i.id.split(':').next().unwrap_or(""),
                        "ip" | "x509" | "sasl" => &i.id,
                        _ => "",
                    });
                }
                Reply::ok(b)
            }
            _ => Reply::error(err::UNIMPLEMENTED),
        })
    }

    /// The node at `p` as reads see it: the tree's, but for `/zookeeper/config`, which shows
    /// the ensemble's configuration this server was started with (as ZooKeeper's does).
    fn node(&self, p: &str) -> Option<&tree::Node> {
        match &self.config_node {
            Some(n) if p == CONFIG_PATH => Some(n),
            _ => self.tree.get(p),
        }
    }

    fn get_data(&mut self, session: i64, auth: &[Id], p: &str, watch: bool) -> Reply {
        match self.node(p) {
            Some(n) => {
                if !tree::allowed(&n.acl, crate::jute::perms::READ, auth) {
                    return Reply::error(err::NO_AUTH);
                }
                let mut b = BytesMut::new();
                b.opt_buffer(n.data.as_deref());
                n.stat().write(&mut b);
                if watch {
                    self.watches.add(session, watch::Kind::Data, p);
                }
                Reply::ok(b)
            }
            None => Reply::error(err::NO_NODE),
        }
    }

    fn get_children(
        &mut self,
        session: i64,
        auth: &[Id],
        p: &str,
        watch: bool,
        stat: bool,
    ) -> Reply {
        match self.tree.get(p) {
            Some(n) => {
                if !tree::allowed(&n.acl, crate::jute::perms::READ, auth) {
                    return Reply::error(err::NO_AUTH);
                }
                let mut b = BytesMut::new();
                b.int(n.children.len() as i32);
                for c in &n.children {
                    b.string(c);
                }
                if stat {
                    n.stat().write(&mut b);
                }
                if watch {
                    self.watches.add(session, watch::Kind::Child, p);
                }
                Reply::ok(b)
            }
            None => Reply::error(err::NO_NODE),
        }
    }

    /// Re-register watches after a reconnect, firing at once those whose change the client
    /// missed (anything after `rel`, the last zxid it saw).
    #[allow(clippy::too_many_arguments)]
    fn set_watches(
        &mut self,
        session: i64,
        rel: i64,
        data: Vec<String>,
        exist: Vec<String>,
        child: Vec<String>,
        persistent: Vec<String>,
        recursive: Vec<String>,
    ) {
        let mut fire: Vec<(i32, String)> = Vec::new();
        for p in data {
            match self.tree.get(&p) {
                None => fire.push((event::NODE_DELETED, p)),
                Some(n) if n.stat.mzxid > rel => fire.push((event::NODE_DATA_CHANGED, p)),
                Some(_) => {
                    self.watches.add(session, watch::Kind::Data, &p);
                }
            }
        }
        for p in exist {
            if self.tree.get(&p).is_some() {
                fire.push((event::NODE_CREATED, p));
            } else {
                self.watches.add(session, watch::Kind::Data, &p);
            }
        }
        for p in child {
            match self.tree.get(&p) {
                None => fire.push((event::NODE_DELETED, p)),
                Some(n) if n.stat.pzxid > rel => fire.push((event::NODE_CHILDREN_CHANGED, p)),
                Some(_) => {
                    self.watches.add(session, watch::Kind::Child, &p);
                }
            }
        }
        for p in persistent {
            self.watches.add(session, watch::Kind::Persistent, &p);
        }
        for p in recursive {
            self.watches.add(session, watch::Kind::Recursive, &p);
        }
        if let Some(e) = &self.effects {
            for (ty, p) in fire {
                e.watch(session, ty, &p, None);
            }
        }
    }
}

/// ZooKeeper's tree keys the root as "" as well as "/": reads of "" see the root.
fn root_if_empty(p: String) -> String {
    if p.is_empty() {
        "/".to_string()
    } else {
        p
    }
}
