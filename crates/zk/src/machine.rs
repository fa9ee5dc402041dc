//! The ZooKeeper state machine: replicated transactions applied to the data tree, local reads,
//! and the local watch registry.
//!
//! A client write is not turned into a ZooKeeper-style "txn" by the leader: the request itself is
//! replicated (`Txn::Op`, with the session, its identities and the proposer's clock) and every
//! replica executes it at the same position of the total order. Sequential names, version checks
//! and errors are therefore computed identically everywhere, and the replica that received the
//! request answers with the result computed at its own delivery.

use crate::jute::{
    err, event, op, read_acls, write_acls, Id, JResult, JuteError, JuteWrite, Reader, Stat,
};
use crate::path;
use crate::tree::{self, Change, CreateArgs, Kind, Tree};
use crate::watch::{self, Fired, Watches};
use bytes::{BufMut, Bytes, BytesMut};
use std::sync::Arc;

/// What the server must do beyond answering the request.
pub trait Effects: Send {
    /// A watch fired for a session connected here (or elsewhere: the server filters).
    fn watch(&self, session: i64, event_type: i32, path: &str);
    /// The replicated session table changed.
    fn session_closed(&self, session: i64);
    /// Sessions were touched (the leader tracks their liveness).
    fn touched(&self, sessions: &[i64]);
}

/// A replicated transaction (the payload of a command).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Txn {
    CreateSession {
        session: i64,
        timeout_ms: i32,
        password: Bytes,
    },
    CloseSession {
        session: i64,
    },
    Touch {
        sessions: Vec<i64>,
    },
    /// A client write request: `body` is the jute request record of `op`.
    Op {
        session: i64,
        time_ms: i64,
        auth: Vec<Id>,
        op: i32,
        body: Bytes,
    },
    /// The leader found a container or TTL node due for removal.
    Reap {
        path: String,
        time_ms: i64,
    },
    /// Operator write from the admin API: create the node (parent must exist) or set its data.
    Upsert {
        path: String,
        data: Bytes,
        time_ms: i64,
    },
    /// Operator delete from the admin API (any version).
    Remove {
        path: String,
    },
}

impl Txn {
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        match self {
            Txn::CreateSession {
                session,
                timeout_ms,
                password,
            } => {
                b.put_u8(1);
                b.long(*session);
                b.int(*timeout_ms);
                b.buffer(password);
            }
            Txn::CloseSession { session } => {
                b.put_u8(2);
                b.long(*session);
            }
            Txn::Touch { sessions } => {
                b.put_u8(3);
                b.int(sessions.len() as i32);
                for s in sessions {
                    b.long(*s);
                }
            }
            Txn::Op {
                session,
                time_ms,
                auth,
                op,
                body,
            } => {
                b.put_u8(4);
                b.long(*session);
                b.long(*time_ms);
                b.int(auth.len() as i32);
                for i in auth {
                    b.string(&i.scheme);
                    b.string(&i.id);
                }
                b.int(*op);
                b.buffer(body);
            }
            Txn::Reap { path, time_ms } => {
                b.put_u8(5);
                b.string(path);
                b.long(*time_ms);
            }
            Txn::Upsert {
                path,
                data,
                time_ms,
            } => {
                b.put_u8(6);
                b.string(path);
                b.buffer(data);
                b.long(*time_ms);
            }
            Txn::Remove { path } => {
                b.put_u8(7);
                b.string(path);
            }
        }
        b.freeze()
    }

    pub fn decode(data: Bytes) -> JResult<Txn> {
        let mut r = Reader::new(data);
        let kind = r.boolean_u8()?;
        Ok(match kind {
            1 => Txn::CreateSession {
                session: r.long()?,
                timeout_ms: r.int()?,
                password: r.buffer()?,
            },
            2 => Txn::CloseSession { session: r.long()? },
            3 => {
                let n = r.count(8)?;
                Txn::Touch {
                    sessions: (0..n).map(|_| r.long()).collect::<JResult<_>>()?,
                }
            }
            4 => {
                let session = r.long()?;
                let time_ms = r.long()?;
                let n = r.count(8)?;
                let auth = (0..n)
                    .map(|_| {
                        Ok(Id {
                            scheme: r.string()?,
                            id: r.string()?,
                        })
                    })
                    .collect::<JResult<_>>()?;
                Txn::Op {
                    session,
                    time_ms,
                    auth,
                    op: r.int()?,
                    body: r.buffer()?,
                }
            }
            5 => Txn::Reap {
                path: r.string()?,
                time_ms: r.long()?,
            },
            6 => Txn::Upsert {
                path: r.string()?,
                data: r.buffer()?,
                time_ms: r.long()?,
            },
            7 => Txn::Remove { path: r.string()? },
            _ => return Err(JuteError("transaction type")),
        })
    }
}

impl Reader {
    fn boolean_u8(&mut self) -> JResult<u8> {
        let b = self.rest();
        if b.is_empty() {
            return Err(JuteError("truncated"));
        }
        let kind = b[0];
        *self = Reader::new(b.slice(1..));
        Ok(kind)
    }
}

/// The answer to a request: an error code and the response record (empty on error).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub err: i32,
    pub body: Bytes,
}

impl Reply {
    pub fn error(err: i32) -> Reply {
        Reply {
            err,
            body: Bytes::new(),
        }
    }
    pub fn ok(body: BytesMut) -> Reply {
        Reply {
            err: err::OK,
            body: body.freeze(),
        }
    }
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(4 + self.body.len());
        b.int(self.err);
        b.put_slice(&self.body);
        b.freeze()
    }
    pub fn decode(b: &Bytes) -> Reply {
        if b.len() < 4 {
            return Reply::error(err::SYSTEM_ERROR);
        }
        Reply {
            err: i32::from_be_bytes(b[..4].try_into().expect("4")),
            body: b.slice(4..),
        }
    }
}

pub struct ZkMachine {
    pub tree: Tree,
    /// Position (slot, zxid) of the last applied transaction.
    pub applied_slot: u64,
    pub applied_zxid: i64,
    pub digest: u64,
    pub watches: Watches,
    effects: Option<Box<dyn Effects>>,
}

impl Default for ZkMachine {
    fn default() -> Self {
        ZkMachine {
            tree: Tree::default(),
            applied_slot: 0,
            applied_zxid: 0,
            digest: 0,
            watches: Watches::new(100_000),
            effects: None,
        }
    }
}

/// The running digest of the applied transactions: every replica that applied the same ones
/// in the same slots has the same digest. The payload is hashed with CRC32C (hardware on
/// x86-64: a 1 KiB write costs tens of nanoseconds, where a byte-at-a-time hash cost over a
/// microsecond on every replica) and mixed into 64 bits with the slot.
fn digest_step(h: u64, slot: u64, payload: &[u8]) -> u64 {
    let mut z = h ^ slot.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(crc32c::crc32c(payload));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A write operation of a `multi` or a single request.
enum WriteOp {
    Create {
        path: String,
        data: Bytes,
        acl: Vec<crate::jute::Acl>,
        flags: i32,
        ttl: i64,
        op: i32,
    },
    Delete {
        path: String,
        version: i32,
    },
    SetData {
        path: String,
        data: Bytes,
        version: i32,
    },
    Check {
        path: String,
        version: i32,
    },
}

fn read_write_op(op_code: i32, r: &mut Reader) -> JResult<WriteOp> {
    Ok(match op_code {
        op::CREATE | op::CREATE2 | op::CREATE_CONTAINER | op::CREATE_TTL => {
            let path = r.string()?;
            let data = r.buffer()?;
            let acl = read_acls(r)?;
            let mut flags = r.int()?;
            let ttl = if op_code == op::CREATE_TTL {
                r.long()?
            } else {
                0
            };
            if op_code == op::CREATE_CONTAINER {
                flags = crate::jute::mode::CONTAINER;
            }
            WriteOp::Create {
                path,
                data,
                acl,
                flags,
                ttl,
                op: op_code,
            }
        }
        op::DELETE | op::DELETE_CONTAINER => WriteOp::Delete {
            path: r.string()?,
            version: r.int()?,
        },
        op::SET_DATA => WriteOp::SetData {
            path: r.string()?,
            data: r.buffer()?,
            version: r.int()?,
        },
        op::CHECK => WriteOp::Check {
            path: r.string()?,
            version: r.int()?,
        },
        _ => return Err(JuteError("operation not allowed here")),
    })
}

pub fn write_stat(b: &mut BytesMut, s: &Stat) {
    s.write(b);
}

impl ZkMachine {
    pub fn set_effects(&mut self, e: Box<dyn Effects>) {
        self.effects = Some(e);
    }

    /// Is `session` a live session of the replicated table?
    pub fn session(&self, session: i64) -> Option<&tree::Session> {
        self.tree.sessions.get(&session)
    }

    /// Apply a delivered transaction at (slot, zxid). Returns the encoded [`Reply`].
    pub fn apply(&mut self, slot: u64, zxid: i64, payload: &Bytes) -> Bytes {
        assert!(slot > self.applied_slot, "slots are applied in order");
        self.applied_slot = slot;
        self.applied_zxid = zxid;
        self.digest = digest_step(self.digest, slot, payload);
        let txn = match Txn::decode(payload.clone()) {
            Ok(t) => t,
            // Agreed on but unreadable: every replica ignores it alike.
            Err(_) => return Reply::error(err::MARSHALLING_ERROR).encode(),
        };
        let mut changes = Vec::new();
        let reply = match txn {
            Txn::CreateSession {
                session,
                timeout_ms,
                password,
            } => {
                self.tree.create_session(session, timeout_ms, password);
                if let Some(e) = &self.effects {
                    e.touched(&[session]);
                }
                Reply::ok(BytesMut::new())
            }
            Txn::CloseSession { session } => {
                self.tree.close_session(session, zxid, &mut changes);
                self.watches.drop_session(session);
                if let Some(e) = &self.effects {
                    e.session_closed(session);
                }
                Reply::ok(BytesMut::new())
            }
            Txn::Touch { sessions } => {
                if let Some(e) = &self.effects {
                    e.touched(&sessions);
                }
                Reply::ok(BytesMut::new())
            }
            Txn::Reap { path, time_ms } => {
                self.tree.reap(&path, time_ms, zxid, &mut changes);
                Reply::ok(BytesMut::new())
            }
            Txn::Upsert {
                path,
                data,
                time_ms,
            } => {
                let admin = [Id {
                    scheme: "super".into(),
                    id: "admin".into(),
                }];
                let r = if self.tree.get(&path).is_some() {
                    self.tree
                        .set_data(&path, data, -1, &admin, zxid, time_ms, &mut changes)
                        .map(|_| ())
                } else {
                    let acl = tree::open_acl();
                    self.tree
                        .create(
                            CreateArgs {
                                path: &path,
                                data,
                                acl: &acl,
                                flags: crate::jute::mode::PERSISTENT,
                                ttl: 0,
                                session: 0,
                                auth: &admin,
                                zxid,
                                time: time_ms,
                            },
                            &mut changes,
                        )
                        .map(|_| ())
                };
                match r {
                    Ok(()) => Reply::ok(BytesMut::new()),
                    Err(e) => Reply::error(e),
                }
            }
            Txn::Remove { path } => {
                let admin = [Id {
                    scheme: "super".into(),
                    id: "admin".into(),
                }];
                match self.tree.delete(&path, -1, &admin, zxid, &mut changes) {
                    Ok(()) => Reply::ok(BytesMut::new()),
                    Err(e) => Reply::error(e),
                }
            }
            Txn::Op {
                session,
                time_ms,
                auth,
                op,
                body,
            } => {
                if !self.tree.sessions.contains_key(&session) {
                    Reply::error(err::SESSION_EXPIRED)
                } else {
                    self.apply_op(session, time_ms, &auth, op, body, zxid, &mut changes)
                }
            }
        };
        self.fire(&changes);
        reply.encode()
    }

    fn fire(&mut self, changes: &[Change]) {
        if changes.is_empty() {
            return;
        }
        let mut fired: Vec<Fired> = Vec::new();
        for c in changes {
            self.watches.trigger(c, &mut fired);
        }
        if let Some(e) = &self.effects {
            for (s, ty, p) in fired {
                e.watch(s, ty, &p);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn apply_op(
        &mut self,
        session: i64,
        time: i64,
        auth: &[Id],
        op_code: i32,
        body: Bytes,
        zxid: i64,
        changes: &mut Vec<Change>,
    ) -> Reply {
        let mut r = Reader::new(body);
        match op_code {
            op::MULTI => {
                let mut ops = Vec::new();
                loop {
                    let ty = match r.int() {
                        Ok(t) => t,
                        Err(_) => return Reply::error(err::MARSHALLING_ERROR),
                    };
                    let done = r.boolean().unwrap_or(true);
                    let _err = r.int();
                    if done {
                        break;
                    }
                    match read_write_op(ty, &mut r) {
                        Ok(o) => ops.push((ty, o)),
                        Err(_) => return Reply::error(err::MARSHALLING_ERROR),
                    }
                }
                self.multi(session, time, auth, ops, zxid, changes)
            }
            op::SYNC => {
                let p = r.string().unwrap_or_default();
                let mut b = BytesMut::new();
                b.string(&p);
                Reply::ok(b)
            }
            op::SET_ACL => {
                let (p, acl, version) = match (|| Ok((r.string()?, read_acls(&mut r)?, r.int()?)))()
                {
                    Ok(x) => x,
                    Err(JuteError(_)) => return Reply::error(err::MARSHALLING_ERROR),
                };
                match self.tree.set_acl(&p, &acl, version, auth) {
                    Ok(stat) => {
                        let mut b = BytesMut::new();
                        stat.write(&mut b);
                        Reply::ok(b)
                    }
                    Err(e) => Reply::error(e),
                }
            }
            _ => match read_write_op(op_code, &mut r) {
                Ok(o) => {
                    let out =
                        Self::write_one(&mut self.tree, session, time, auth, o, zxid, changes);
                    match out {
                        Ok(body) => Reply::ok(body),
                        Err(e) => Reply::error(e),
                    }
                }
                Err(_) => Reply::error(err::MARSHALLING_ERROR),
            },
        }
    }

    /// One write on `tree`; the response record on success.
    #[allow(clippy::too_many_arguments)]
    fn write_one(
        tree: &mut Tree,
        session: i64,
        time: i64,
        auth: &[Id],
        o: WriteOp,
        zxid: i64,
        changes: &mut Vec<Change>,
    ) -> Result<BytesMut, i32> {
        let mut b = BytesMut::new();
        match o {
            WriteOp::Create {
                path,
                data,
                acl,
                flags,
                ttl,
                op: code,
            } => {
                if code == op::CREATE_TTL
                    && !matches!(
                        flags,
                        crate::jute::mode::PERSISTENT_WITH_TTL
                            | crate::jute::mode::PERSISTENT_SEQUENTIAL_WITH_TTL
                    )
                {
                    return Err(err::BAD_ARGUMENTS);
                }
                if code != op::CREATE_TTL
                    && matches!(
                        flags,
                        crate::jute::mode::PERSISTENT_WITH_TTL
                            | crate::jute::mode::PERSISTENT_SEQUENTIAL_WITH_TTL
                    )
                {
                    return Err(err::BAD_ARGUMENTS);
                }
                let (p, stat) = tree.create(
                    CreateArgs {
                        path: &path,
                        data,
                        acl: &acl,
                        flags,
                        ttl,
                        session,
                        auth,
                        zxid,
                        time,
                    },
                    changes,
                )?;
                b.string(&p);
                if code != op::CREATE {
                    stat.write(&mut b);
                }
            }
            WriteOp::Delete { path, version } => {
                tree.delete(&path, version, auth, zxid, changes)?
            }
            WriteOp::SetData {
                path,
                data,
                version,
            } => tree
                .set_data(&path, data, version, auth, zxid, time, changes)?
                .write(&mut b),
            WriteOp::Check { path, version } => tree.check(&path, version, auth)?,
        }
        Ok(b)
    }

    /// All or nothing: the ops run on a scratch copy of the tree, kept only if all succeed.
    /// On failure the ops before the failing one report OK, the failing one its error, the ops
    /// after it RUNTIMEINCONSISTENCY, each as an error result.
    fn multi(
        &mut self,
        session: i64,
        time: i64,
        auth: &[Id],
        ops: Vec<(i32, WriteOp)>,
        zxid: i64,
        changes: &mut Vec<Change>,
    ) -> Reply {
        let mut scratch = self.tree.clone();
        let mut scratch_changes = Vec::new();
        let mut results: Vec<(i32, BytesMut)> = Vec::new();
        let mut failed: Option<(usize, i32)> = None;
        let n = ops.len();
        for (i, (ty, o)) in ops.into_iter().enumerate() {
            match Self::write_one(
                &mut scratch,
                session,
                time,
                auth,
                o,
                zxid,
                &mut scratch_changes,
            ) {
                Ok(body) => results.push((ty, body)),
                Err(e) => {
                    failed = Some((i, e));
                    break;
                }
            }
        }
        let mut b = BytesMut::new();
        match failed {
            None => {
                self.tree = scratch;
                changes.extend(scratch_changes);
                for (ty, body) in results {
                    // ZooKeeper reports createContainer and createTTL results as create2's.
                    let ty = match ty {
                        op::CREATE_CONTAINER | op::CREATE_TTL => op::CREATE2,
                        t => t,
                    };
                    b.int(ty);
                    b.boolean(false);
                    b.int(err::OK);
                    b.put_slice(&body);
                }
            }
            Some((at, e)) => {
                for i in 0..n {
                    let code = match i.cmp(&at) {
                        std::cmp::Ordering::Less => err::OK,
                        std::cmp::Ordering::Equal => e,
                        std::cmp::Ordering::Greater => err::RUNTIME_INCONSISTENCY,
                    };
                    b.int(op::ERROR);
                    b.boolean(false);
                    b.int(code);
                    b.int(code);
                }
            }
        }
        b.int(-1);
        b.boolean(true);
        b.int(-1);
        Reply::ok(b)
    }

    /// Serve a read (or a local watch operation) for `session` against this replica's state.
    pub fn read(&mut self, session: i64, auth: &[Id], op_code: i32, body: Bytes) -> JResult<Reply> {
        let mut r = Reader::new(body);
        Ok(match op_code {
            op::EXISTS => {
                // Reads do not validate paths (a malformed one is just absent); exists alone
                // rejects a NUL byte.
                let p = r.string()?;
                let watch = r.boolean()?;
                if p.contains('\0') {
                    return Ok(Reply::error(err::BAD_ARGUMENTS));
                }
                match self.tree.get(&p) {
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
                let p = r.string()?;
                let watch = r.boolean()?;
                self.get_data(session, auth, &p, watch)
            }
            op::GET_CHILDREN | op::GET_CHILDREN2 => {
                let p = r.string()?;
                let watch = r.boolean()?;
                self.get_children(session, auth, &p, watch, op_code == op::GET_CHILDREN2)
            }
            op::GET_ACL => {
                let p = r.string()?;
                match self.tree.get(&p) {
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
                let prefix = r.string()?;
                let mut b = BytesMut::new();
                b.strings(&self.tree.ephemerals(session, &prefix));
                Reply::ok(b)
            }
            op::GET_ALL_CHILDREN_NUMBER => {
                let p = r.string()?;
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
                    let p = r.string()?;
                    let watch = r.boolean()?;
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
                let p = r.string()?;
                let mode = r.int()?;
                if path::validate(&p, false).is_err() {
                    return Ok(Reply::error(err::BAD_ARGUMENTS));
                }
                let kind = match mode {
                    0 => watch::Kind::Persistent,
                    1 => watch::Kind::Recursive,
                    _ => return Ok(Reply::error(err::BAD_ARGUMENTS)),
                };
                self.watches.add(session, kind, &p);
                Reply::ok(BytesMut::new())
            }
            op::CHECK_WATCHES | op::REMOVE_WATCHES => {
                let p = r.string()?;
                let ty = r.int()?;
                let kinds: &[watch::Kind] = match ty {
                    1 => &[watch::Kind::Child],
                    2 => &[watch::Kind::Data],
                    3 => &[
                        watch::Kind::Child,
                        watch::Kind::Data,
                        watch::Kind::Persistent,
                        watch::Kind::Recursive,
                    ],
                    _ => return Ok(Reply::error(err::BAD_ARGUMENTS)),
                };
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
                let data = r.strings()?;
                let exist = r.strings()?;
                let child = r.strings()?;
                let (persistent, recursive) = if op_code == op::SET_WATCHES2 {
                    (r.strings()?, r.strings()?)
                } else {
                    (Vec::new(), Vec::new())
                };
                self.set_watches(session, rel, data, exist, child, persistent, recursive);
                Reply::ok(BytesMut::new())
            }
            op::WHO_AM_I => {
                let mut b = BytesMut::new();
                b.int(auth.len() as i32);
                for i in auth {
                    b.string(&i.scheme);
                    b.string(&i.id);
                }
                Reply::ok(b)
            }
            _ => Reply::error(err::UNIMPLEMENTED),
        })
    }

    fn get_data(&mut self, session: i64, auth: &[Id], p: &str, watch: bool) -> Reply {
        match self.tree.get(p) {
            Some(n) => {
                if !tree::allowed(&n.acl, crate::jute::perms::READ, auth) {
                    return Reply::error(err::NO_AUTH);
                }
                let mut b = BytesMut::new();
                b.buffer(&n.data);
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
                e.watch(session, ty, &p);
            }
        }
    }

    /// Container and TTL nodes due for removal at `now_ms` (the leader proposes their reaping).
    pub fn due_for_reaping(&self, now_ms: i64, max: usize) -> Vec<String> {
        self.tree
            .reapable
            .iter()
            .filter(|p| self.tree.reap_due(p, now_ms))
            .take(max)
            .map(|p| p.to_string())
            .collect()
    }

    // ------------------------------------------------------------------ snapshots

    /// Serialise the replicated state (not the watches: they are local).
    pub fn snapshot_view(&self) -> impl FnOnce() -> Bytes + Send + 'static {
        let tree = self.tree.clone();
        let (slot, zxid, digest) = (self.applied_slot, self.applied_zxid, self.digest);
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
                b.buffer(&n.data);
                write_acls(&mut b, &n.acl);
                n.stat.write(&mut b);
            }
            b.int(tree.sessions.len() as i32);
            for (id, s) in tree.sessions.iter() {
                b.long(*id);
                b.int(s.timeout_ms);
                b.buffer(&s.password);
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
            let data = r.buffer()?;
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
        for _ in 0..m {
            let id = r.long()?;
            let timeout_ms = r.int()?;
            let password = r.buffer()?;
            tree.create_session(id, timeout_ms, password);
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
        Ok(())
    }
}

#[cfg(test)]
mod tests;
