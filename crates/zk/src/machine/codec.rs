//! The codecs of the machine's records: [`Txn`], the replicated transaction (the payload of a
//! command), and [`Reply`], the answer to a request.

use crate::jute::{err, Id, JResult, JuteError, JuteWrite, Reader, Stat};
use bytes::{BufMut, Bytes, BytesMut};

/// A replicated transaction (the payload of a command).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Txn {
    /// A new session, created at server `owner` (0: unknown, from an older log).
    CreateSession {
        session: i64,
        owner: u32,
        timeout_ms: i32,
        password: Bytes,
    },
    /// The session's client re-attached at server `owner` with `password`: if it is the
    /// session's, the session is touched, and writes its old connections send through another
    /// server fail with SESSIONMOVED. A wrong password changes nothing (anyone may name a
    /// session id: they are not secret).
    Attach {
        session: i64,
        owner: u32,
        password: Bytes,
    },
    CloseSession {
        session: i64,
    },
    Touch {
        sessions: Vec<i64>,
    },
    /// The session-duty holder found `session` untouched for its timeout, last touched at slot
    /// `touched`: it closes only if no later touch was applied meanwhile. A stale holder (cut
    /// off, or one of two that briefly disagree, as Mencius's may) thus cannot expire a live
    /// session, and a second expiry of the same session does nothing.
    Expire {
        session: i64,
        touched: u64,
    },
    /// A client write request: `body` is the jute request record of `op`.
    Op {
        session: i64,
        /// The server whose client connection sent it (0: unknown, from an older log).
        owner: u32,
        /// The proposer's `enforce_quota` setting: every replica decides QUOTAEXCEEDED alike,
        /// whatever its own configuration says.
        enforce_quota: bool,
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
                owner,
                timeout_ms,
                password,
            } => {
                b.put_u8(9);
                b.long(*session);
                b.int(*timeout_ms);
                b.buffer(password);
                b.int(*owner as i32);
            }
            Txn::Attach {
                session,
                owner,
                password,
            } => {
                b.put_u8(11);
                b.long(*session);
                b.int(*owner as i32);
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
                owner,
                enforce_quota,
                time_ms,
                auth,
                op,
                body,
            } => {
                b.put_u8(10);
                b.int(*owner as i32);
                b.boolean(*enforce_quota);
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
            Txn::Expire { session, touched } => {
                b.put_u8(8);
                b.long(*session);
                b.long(*touched as i64);
            }
        }
        b.freeze()
    }

    pub fn decode(data: Bytes) -> JResult<Txn> {
        let mut r = Reader::new(data);
        let kind = r.boolean_u8()?;
        Ok(match kind {
            // 1 and 4 are the forms written before servers were named in them.
            1 | 9 => Txn::CreateSession {
                session: r.long()?,
                timeout_ms: r.int()?,
                password: r.buffer()?,
                owner: if kind == 9 { r.int()? as u32 } else { 0 },
            },
            11 => Txn::Attach {
                session: r.long()?,
                owner: r.int()? as u32,
                password: r.buffer()?,
            },
            2 => Txn::CloseSession { session: r.long()? },
            3 => {
                let n = r.count(8)?;
                Txn::Touch {
                    sessions: (0..n).map(|_| r.long()).collect::<JResult<_>>()?,
                }
            }
            4 | 10 => {
                let (owner, enforce_quota) = if kind == 10 {
                    (r.int()? as u32, r.boolean()?)
                } else {
                    (0, false)
                };
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
                    owner,
                    enforce_quota,
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
            8 => Txn::Expire {
                session: r.long()?,
                touched: r.long()? as u64,
            },
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

pub fn write_stat(b: &mut BytesMut, s: &Stat) {
    s.write(b);
}
