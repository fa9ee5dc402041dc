//! The write path: [`ZkMachine::apply`] of a delivered transaction, the write operations of a
//! client request (create, delete, setData, setACL, check, multi), sessions, and the reaping of
//! container and TTL nodes.

use super::{Reply, Txn, ZkMachine};
use crate::jute::{err, op, read_acls, Id, JResult, JuteError, JuteWrite, Reader};
use crate::tree::{self, Change, CreateArgs, Tree};
use crate::watch::Fired;
use bytes::{BufMut, Bytes, BytesMut};

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
        data: Option<Bytes>,
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
        data: Option<Bytes>,
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
            let path = r.path()?;
            let data = r.opt_buffer()?;
            let acl = read_acls(r)?;
            let flags = r.int()?;
            let ttl = if op_code == op::CREATE_TTL {
                r.long()?
            } else {
                0
            };
            WriteOp::Create {
                path,
                data,
                acl,
                flags,
                ttl,
                op: op_code,
            }
        }
        op::DELETE => WriteOp::Delete {
            path: r.path()?,
            version: r.int()?,
        },
        op::SET_DATA => WriteOp::SetData {
            path: r.path()?,
            data: r.opt_buffer()?,
            version: r.int()?,
        },
        op::CHECK => WriteOp::Check {
            path: r.path()?,
            version: r.int()?,
        },
        _ => return Err(JuteError("operation not allowed here")),
    })
}

impl ZkMachine {
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
                owner,
                timeout_ms,
                password,
            } => {
                self.tree.create_session(session, timeout_ms, password);
                self.tree.touch_session(session, slot);
                self.tree.attach_session(session, owner);
                if let Some(e) = &self.effects {
                    e.touched(&[session]);
                }
                Reply::ok(BytesMut::new())
            }
            Txn::Attach {
                session,
                owner,
                password,
            } => {
                let known = self
                    .tree
                    .sessions
                    .get(&session)
                    .is_some_and(|s| s.password == password);
                if known && self.tree.touch_session(session, slot) {
                    self.tree.attach_session(session, owner);
                    if let Some(e) = &self.effects {
                        e.touched(&[session]);
                    }
                }
                Reply::ok(BytesMut::new())
            }
            Txn::CloseSession { session } => {
                self.close_session(session, zxid, &mut changes);
                Reply::ok(BytesMut::new())
            }
            Txn::Expire { session, touched } => {
                // Void if the session was touched after the holder looked (or is gone: closing
                // twice does nothing).
                let due = self
                    .tree
                    .sessions
                    .get(&session)
                    .is_some_and(|s| s.touched <= touched);
                if due {
                    self.close_session(session, zxid, &mut changes);
                }
                Reply::ok(BytesMut::new())
            }
            Txn::Touch { sessions } => {
                // Only live sessions: a touch ordered after a session's close revives nothing.
                let live: Vec<i64> = sessions
                    .into_iter()
                    .filter(|&s| self.tree.touch_session(s, slot))
                    .collect();
                if let Some(e) = &self.effects {
                    e.touched(&live);
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
                let time_ms = self.node_time(time_ms);
                let admin = [Id {
                    scheme: "super".into(),
                    id: "admin".into(),
                }];
                let r = if self.tree.get(&path).is_some() {
                    self.tree
                        .set_data(&path, Some(data), -1, &admin, zxid, time_ms, &mut changes)
                        .map(|_| ())
                } else {
                    let acl = tree::open_acl();
                    self.tree
                        .create(
                            CreateArgs {
                                path: &path,
                                data: Some(data),
                                acl: &acl,
                                flags: crate::jute::mode::PERSISTENT,
                                container: false,
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
                owner,
                enforce_quota,
                time_ms,
                auth,
                op,
                body,
            } => {
                self.enforce_quota = enforce_quota;
                let attached = self.tree.sessions.get(&session).map(|s| s.owner);
                if attached.is_none() {
                    Reply::error(err::SESSION_EXPIRED)
                } else if owner != 0 && attached.is_some_and(|a| a != 0 && a != owner) {
                    // Sent by a connection the session has since left for another server
                    // (ZooKeeper's leader checks the session's owner alike).
                    Reply::error(err::SESSION_MOVED)
                } else {
                    let time_ms = self.node_time(time_ms);
                    self.apply_op(session, time_ms, &auth, op, body, zxid, &mut changes)
                }
            }
        };
        self.fire(&changes);
        reply.encode()
    }

    /// The time a write gives its nodes (ctime, mtime): the proposer's clock as carried in the
    /// transaction, but never before the time of an earlier write. Every replica computes the
    /// same from the same order, so node times are identical everywhere and, as under one
    /// ZooKeeper leader, never go backwards in zxid order, whatever the skew between the
    /// clocks of the replicas that received the writes.
    fn node_time(&mut self, proposed_ms: i64) -> i64 {
        self.clock_ms = self.clock_ms.max(proposed_ms);
        self.clock_ms
    }

    /// Close a session (a client's close or an expiry): its ephemerals go, and its local
    /// connection is told. A session already closed is left alone.
    fn close_session(&mut self, session: i64, zxid: i64, changes: &mut Vec<Change>) {
        if self.tree.close_session(session, zxid, changes) {
            self.watches.drop_session(session);
            if let Some(e) = &self.effects {
                e.session_closed(session);
            }
        }
    }

    fn fire(&mut self, changes: &[Change]) {
        if changes.is_empty() {
            return;
        }
        let mut fired: Vec<Fired> = Vec::new();
        for c in changes {
            fired.clear();
            self.watches.trigger(c, &mut fired);
            if fired.is_empty() {
                continue;
            }
            let acl = match c {
                Change::Deleted(_, acl) => Some(acl),
                // The node's ACL now, or, if a multi deleted it again, the ACL it had then:
                // never unfiltered.
                Change::Created(p) | Change::DataChanged(p) | Change::ChildrenChanged(p) => {
                    self.tree.get(p).map(|n| &n.acl).or_else(|| {
                        changes.iter().find_map(|d| match d {
                            Change::Deleted(q, acl) if q == p => Some(acl),
                            _ => None,
                        })
                    })
                }
            };
            if let Some(e) = &self.effects {
                for (s, ty, p) in &fired {
                    e.watch(*s, *ty, p, acl);
                }
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
            // Only the server deletes containers (Txn::Reap): ZooKeeper reads a client's
            // request as a path that cannot be valid.
            op::DELETE_CONTAINER => Reply::error(err::BAD_ARGUMENTS),
            op::SYNC => {
                let p = r.string().unwrap_or_default();
                let mut b = BytesMut::new();
                b.string(&p);
                Reply::ok(b)
            }
            op::SET_ACL => {
                let (p, acl, version) = match (|| Ok((r.path()?, read_acls(&mut r)?, r.int()?)))() {
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
                    let enforce = self.enforce_quota;
                    let out = Self::write_one(
                        &mut self.tree,
                        session,
                        time,
                        auth,
                        o,
                        zxid,
                        enforce,
                        changes,
                    );
                    match out {
                        Ok(body) => Reply::ok(body),
                        Err(e) => Reply::error(e),
                    }
                }
                Err(_) => Reply::error(err::MARSHALLING_ERROR),
            },
        }
    }

    /// One write on `tree`; the response record on success. With `enforce_quota`, creates
    /// and setData past a hard quota fail (QUOTAEXCEEDED).
    #[allow(clippy::too_many_arguments)]
    fn write_one(
        tree: &mut Tree,
        session: i64,
        time: i64,
        auth: &[Id],
        o: WriteOp,
        zxid: i64,
        enforce_quota: bool,
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
                let (p, stat) = tree.create_quota(
                    CreateArgs {
                        path: &path,
                        data,
                        acl: &acl,
                        flags,
                        container: code == op::CREATE_CONTAINER,
                        ttl,
                        session,
                        auth,
                        zxid,
                        time,
                    },
                    enforce_quota,
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
                .set_data_quota(
                    &path,
                    data,
                    version,
                    auth,
                    zxid,
                    time,
                    enforce_quota,
                    changes,
                )?
                .write(&mut b),
            WriteOp::Check { path, version } => tree.check(&path, version, auth)?,
        }
        Ok(b)
    }

    /// All or nothing: the ops run on a scratch copy of the tree, kept only if all succeed.
    /// On failure the ops before the failing one report OK, the failing one its error, the ops
    /// after it RUNTIMEINCONSISTENCY, each as an error result. Each op's quota check sees the
    /// ops before it (ZooKeeper's leader checks every op against the tree as committed before
    /// the multi, so a multi can pass a hard quota there; here it cannot).
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
                self.enforce_quota,
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
}
