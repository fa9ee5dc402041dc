//! The ZooKeeper app ([`crate::App::ZooKeeper`]): every group runs the ZooKeeper data tree
//! (`synod_zk::group::ZooKeeper`, the server's machine), and every client is a ZooKeeper
//! session. A session is created by a replicated `CreateSession`; it writes keys `/k0..` (a
//! replicated `setData`, or an operator upsert that creates a key yet unseen), reads them
//! locally at its replica (`ZkMachine::read`, as the server's front end does), and sometimes
//! runs `sync` (a replicated transaction in synod) before a read.
//!
//! The front end's connection rule is modelled: a session reads at a replica only if the
//! replica has applied at least the last zxid the session saw (ZooKeeper's server refuses a
//! client that saw more than it has); otherwise the session moves on.
//!
//! The session-level checker:
//! * **reads never go back**: a session's read of a key returns a version (its `mzxid`) at
//!   least as new as any it saw of that key before, its own writes included;
//! * **sync + read is linearizable**: a read that follows a `sync` on the same replica sees
//!   every write acknowledged to any client before the sync was submitted;
//! * a key a session saw is never absent again (there are no deletes).

use super::World;
use crate::check::Checker;
use crate::ZkApp;
use bytes::{Bytes, BytesMut};
use rand_core::RngCore;
use std::collections::BTreeMap;
use synod_host::{Applied, Hosted};
use synod_zk::jute::{err, op, JuteWrite, Reader, Stat};
use synod_zk::machine::{Reply, Txn};

/// What a session's command is, for its reply.
#[derive(Clone, Copy, Debug)]
pub(super) enum ZkCommand {
    CreateSession,
    Write {
        key: u32,
    },
    /// A sync before reading `key`, with the newest acknowledged zxid of each key when it was
    /// submitted (kept in the session).
    Sync {
        key: u32,
    },
}

/// A session's view, as the checker keeps it.
#[derive(Clone, Debug, Default)]
pub(super) struct ZkSession {
    open: bool,
    /// The largest zxid this session has seen (its writes' and the states it read).
    last_zxid: i64,
    /// Per key, the newest version (mzxid) the session has seen.
    seen: BTreeMap<u32, i64>,
    /// With a sync outstanding or answered: per key, the newest zxid acknowledged to anyone
    /// when the sync was submitted.
    floor: Option<BTreeMap<u32, i64>>,
    writes: u64,
}

/// The app's state beside the world.
pub(super) struct ZkWorld {
    pub(super) sessions: Vec<ZkSession>,
    /// Per group, per key: the newest zxid of a write acknowledged to a client.
    acked: Vec<BTreeMap<u32, i64>>,
    /// Commands in flight: id → (client, what it is).
    pending: std::collections::HashMap<u64, (usize, ZkCommand)>,
    pub(super) reads: u64,
    pub(super) refused_reads: u64,
}

impl ZkWorld {
    pub(super) fn new(clients: usize, groups: usize) -> Self {
        ZkWorld {
            sessions: vec![ZkSession::default(); clients],
            acked: vec![BTreeMap::new(); groups],
            pending: Default::default(),
            reads: 0,
            refused_reads: 0,
        }
    }
}

fn path(key: u32) -> String {
    format!("/k{key}")
}

/// The session of client `c` (never 0: 0 is "no session").
fn session_of(c: usize) -> i64 {
    c as i64 + 1
}

impl<P: Hosted> World<P> {
    /// Client `c`'s next command in its group: open its session first, then write a key.
    pub(super) fn zk_command(&mut self, c: usize, app: &ZkApp, now_ms: i64) -> (Bytes, ZkCommand) {
        let keys = app.keys.max(1);
        let s = &self.zk.as_ref().expect("zk").sessions[c];
        if !s.open {
            let txn = Txn::CreateSession {
                session: session_of(c),
                owner: 0,
                timeout_ms: i32::MAX,
                password: Bytes::from_static(b"sim"),
            };
            return (txn.encode(), ZkCommand::CreateSession);
        }
        let key = (self.rng.next_u64() % keys as u64) as u32;
        let known = s.seen.contains_key(&key);
        let value = Bytes::from(format!("{c}.{}", s.writes));
        let txn = if known {
            let mut body = BytesMut::new();
            body.string(&path(key));
            body.buffer(&value);
            body.int(-1);
            Txn::Op {
                session: session_of(c),
                owner: 0,
                enforce_quota: false,
                time_ms: now_ms,
                auth: Vec::new(),
                op: op::SET_DATA,
                body: body.freeze(),
            }
        } else {
            Txn::Upsert {
                path: path(key),
                data: value,
                time_ms: now_ms,
            }
        };
        (txn.encode(), ZkCommand::Write { key })
    }

    /// The planted `LocalSync`: a sync answered at once at node `i`, then the read.
    pub(super) fn zk_local_sync(&mut self, i: usize, c: usize, key: u32) -> bool {
        let g = self.clients_group(c);
        let floor = self.zk.as_ref().expect("zk").acked[g].clone();
        self.zk_read(i, c, key, Some(floor))
    }

    /// A sync of client `c`'s session before it reads `key`.
    pub(super) fn zk_sync(&mut self, c: usize, key: u32, now_ms: i64) -> (Bytes, ZkCommand) {
        let g = self.clients_group(c);
        let floor = self.zk.as_ref().expect("zk").acked[g].clone();
        let z = self.zk.as_mut().expect("zk");
        z.sessions[c].floor = Some(floor);
        let mut body = BytesMut::new();
        body.string(&path(key));
        let txn = Txn::Op {
            session: session_of(c),
            owner: 0,
            enforce_quota: false,
            time_ms: now_ms,
            auth: Vec::new(),
            op: op::SYNC,
            body: body.freeze(),
        };
        (txn.encode(), ZkCommand::Sync { key })
    }

    /// Remember what command `id` of client `c` is.
    pub(super) fn zk_submitted(&mut self, id: u64, c: usize, cmd: ZkCommand) {
        if let Some(z) = self.zk.as_mut() {
            z.pending.insert(id, (c, cmd));
        }
    }

    /// Command `a` of client `c` was delivered at node `i`: what it tells the checker. A sync
    /// is followed at once by its read, at the same replica.
    pub(super) fn zk_delivered(&mut self, i: usize, c: usize, a: &Applied) {
        let Some(z) = self.zk.as_mut() else {
            return;
        };
        let Some((_, cmd)) = z.pending.remove(&a.id) else {
            return;
        };
        let zxid = match &self.cfg.app {
            crate::App::ZooKeeper(app) => app.zxids.zxid(a.at.tag),
            _ => return,
        };
        let reply = Reply::decode(&a.result);
        let g = self.clients[c].group;
        let z = self.zk.as_mut().expect("zk");
        let s = &mut z.sessions[c];
        s.last_zxid = s.last_zxid.max(zxid);
        match cmd {
            ZkCommand::CreateSession => s.open = reply.err == err::OK,
            ZkCommand::Write { key } => {
                s.writes += 1;
                if reply.err == err::SESSION_EXPIRED {
                    s.open = false;
                } else if reply.err == err::OK {
                    let e = s.seen.entry(key).or_insert(0);
                    *e = (*e).max(zxid);
                    let e = z.acked[g].entry(key).or_insert(0);
                    *e = (*e).max(zxid);
                }
            }
            ZkCommand::Sync { key } => {
                let floor = s.floor.take();
                if reply.err == err::OK {
                    self.zk_read(i, c, key, floor);
                }
            }
        }
    }

    /// Client `c` reads `key` at node `i` (its replica's state, no broadcast); after a sync
    /// answered there, `floor` holds what was acknowledged when the sync was submitted. Returns
    /// false if the replica is behind what the session saw: ZooKeeper's server refuses such a
    /// client, which moves to another replica.
    pub(super) fn zk_read(
        &mut self,
        i: usize,
        c: usize,
        key: u32,
        floor: Option<BTreeMap<u32, i64>>,
    ) -> bool {
        let g = self.clients[c].group;
        let Some(machine) = self.nodes[i].groups[g].zk.clone() else {
            return true;
        };
        let (applied, reply) = {
            let mut m = machine.lock().expect("zk");
            let applied = m.applied_zxid;
            let mut body = BytesMut::new();
            body.string(&path(key));
            body.boolean(false);
            let reply = m.read(session_of(c), &[], op::GET_DATA, body.freeze());
            (applied, reply)
        };
        let now = self.now;
        let node = self.nodes[i].id;
        let stale_ok = matches!(
            &self.cfg.app,
            crate::App::ZooKeeper(a) if a.plant == Some(crate::ZkPlant::StaleReads)
        );
        let z = self.zk.as_mut().expect("zk");
        if applied < z.sessions[c].last_zxid && !stale_ok {
            z.refused_reads += 1;
            return false;
        }
        z.reads += 1;
        let s = &mut z.sessions[c];
        let floor = floor.and_then(|f| f.get(&key).copied());
        let seen = s.seen.get(&key).copied();
        s.last_zxid = s.last_zxid.max(applied);
        let found = match reply {
            Ok(r) if r.err == err::OK => {
                let mut rd = Reader::new(r.body);
                match rd.opt_buffer().and_then(|_| Stat::read(&mut rd)) {
                    Ok(stat) => Some(stat.mzxid),
                    Err(_) => {
                        self.histories[g].violate(
                            Checker::Session,
                            now,
                            format!("n{node}: a getData reply of /k{key} does not decode"),
                        );
                        return true;
                    }
                }
            }
            Ok(r) if r.err == err::NO_NODE => None,
            other => {
                self.histories[g].violate(
                    Checker::Session,
                    now,
                    format!("n{node}: getData /k{key} failed: {other:?}"),
                );
                return true;
            }
        };
        let got = found.unwrap_or(0);
        if let Some(seen) = seen.filter(|&v| got < v) {
            let what = if found.is_none() {
                "finds no node".to_string()
            } else {
                format!("returns version {got:#x}")
            };
            self.histories[g].violate(
                Checker::Session,
                now,
                format!(
                    "session {} read /k{key} at n{node} (applied {applied:#x}): it {what}, \
                     older than {seen:#x}, which the session saw before",
                    session_of(c)
                ),
            );
        }
        if let Some(floor) = floor.filter(|&f| got < f) {
            self.histories[g].violate(
                Checker::Session,
                now,
                format!(
                    "session {} read /k{key} at n{node} after a sync: version {got:#x}, but \
                     {floor:#x} was acknowledged before the sync began",
                    session_of(c)
                ),
            );
        }
        if let Some(v) = found {
            let z = self.zk.as_mut().expect("zk");
            let e = z.sessions[c].seen.entry(key).or_insert(0);
            *e = (*e).max(v);
        }
        true
    }

    fn clients_group(&self, c: usize) -> usize {
        self.clients[c].group
    }
}
