//! Transactions as a bucket sees them: ids, operations, outcomes, and the commands of a
//! bucket's log with their encoding.

use bytes::{BufMut, Bytes, BytesMut};
use synod_core::wire::{
    get_bool, get_bytes, get_count, get_string, get_u32, get_u64, get_u8, put_bytes, put_str, Wire,
    WireError, WireResult,
};

/// Largest key, value and read/write set a bucket accepts (the front end refuses bigger ones
/// with a clear error before they reach the log).
pub const MAX_KEY_BYTES: usize = 4096;
pub const MAX_VALUE_BYTES: usize = 1 << 20;
pub const MAX_OPS: usize = 1024;
/// Most bytes of keys and values in one transaction (a commit is one log entry of its
/// coordinator bucket).
pub const MAX_TXN_BYTES: usize = 16 << 20;
/// Most buckets one transaction may touch.
pub const MAX_BUCKETS: usize = 1024;

/// A transaction id: ordered by age first (`time`, microseconds at the node that began it), so
/// that the oldest transaction wins a lock conflict (sconekv.md §11.6 with the thesis's future
/// work on meaningful ids: a client counter, as the prototype used, favours whoever began
/// fewer transactions); `node` (node id << 32 | counter) makes it unique.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TxnId {
    pub time: u64,
    pub node: u64,
}

impl std::fmt::Display for TxnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:x}", self.time, self.node)
    }
}

impl Wire for TxnId {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u64(self.time);
        b.put_u64(self.node);
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(TxnId {
            time: get_u64(b)?,
            node: get_u64(b)?,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Write,
    Delete,
}

/// One key of a read/write set, with the version the transaction observed. A `blind` write
/// (a single-key put or delete outside a transaction) skips validation: it installs the next
/// version whatever the current one is, but still waits for the key's lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    pub key: Bytes,
    pub kind: OpKind,
    pub version: u64,
    pub value: Bytes,
    pub blind: bool,
}

impl Op {
    pub fn writes(&self) -> bool {
        self.kind != OpKind::Read
    }
}

impl Wire for Op {
    fn encode(&self, b: &mut BytesMut) {
        put_bytes(b, &self.key);
        b.put_u8(match self.kind {
            OpKind::Read => 0,
            OpKind::Write => 1,
            OpKind::Delete => 2,
        });
        b.put_u64(self.version);
        put_bytes(b, &self.value);
        b.put_u8(self.blind as u8);
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        let key = get_bytes(b, "key", MAX_KEY_BYTES as u64)?;
        let kind = match get_u8(b)? {
            0 => OpKind::Read,
            1 => OpKind::Write,
            2 => OpKind::Delete,
            _ => return Err(WireError::Invalid("op kind")),
        };
        Ok(Op {
            key,
            kind,
            version: get_u64(b)?,
            value: get_bytes(b, "value", MAX_VALUE_BYTES as u64)?,
            blind: get_bool(b)?,
        })
    }
}

pub(crate) fn put_ops(b: &mut BytesMut, ops: &[Op]) {
    b.put_u32(ops.len() as u32);
    for op in ops {
        op.encode(b);
    }
}

pub(crate) fn get_ops(b: &mut Bytes) -> WireResult<Vec<Op>> {
    let n = get_count(b, "ops", 14)?;
    if n > MAX_OPS {
        return Err(WireError::Invalid("too many ops"));
    }
    (0..n).map(|_| Op::decode(b)).collect()
}

pub(crate) fn put_u64s(b: &mut BytesMut, v: &[u64]) {
    b.put_u32(v.len() as u32);
    for x in v {
        b.put_u64(*x);
    }
}

pub(crate) fn get_u64s(b: &mut Bytes, max: usize) -> WireResult<Vec<u64>> {
    let n = get_count(b, "list", 8)?;
    if n > max {
        return Err(WireError::Invalid("list too long"));
    }
    (0..n).map(|_| get_u64(b)).collect()
}

pub(crate) fn put_u32s(b: &mut BytesMut, v: &[u32]) {
    b.put_u32(v.len() as u32);
    for x in v {
        b.put_u32(*x);
    }
}

pub(crate) fn get_u32s(b: &mut Bytes, max: usize) -> WireResult<Vec<u32>> {
    let n = get_count(b, "list", 4)?;
    if n > max {
        return Err(WireError::Invalid("list too long"));
    }
    (0..n).map(|_| get_u32(b)).collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Committed,
    Aborted,
}

/// What a bucket knows of a transaction it coordinated (or a single-key operation): kept for a
/// retried commit (idempotence) until its id is older than the retention horizon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decided {
    pub outcome: Outcome,
    pub reason: String,
    /// For a single-key operation: the key's version after it (or the current one if it failed).
    pub version: u64,
    /// For a committed transaction: the version of each op's key once it committed (a write or
    /// delete: the version it installed; a read: the version read), parts in bucket order. A
    /// blind write's client learns here which version it overwrote.
    pub versions: Vec<u64>,
}

impl Wire for Decided {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u8(match self.outcome {
            Outcome::Committed => 1,
            Outcome::Aborted => 2,
        });
        put_str(b, &self.reason);
        b.put_u64(self.version);
        put_u64s(b, &self.versions);
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        let outcome = match get_u8(b)? {
            1 => Outcome::Committed,
            2 => Outcome::Aborted,
            _ => return Err(WireError::Invalid("outcome")),
        };
        Ok(Decided {
            outcome,
            reason: get_string(b, "reason", 4096)?,
            version: get_u64(b)?,
            versions: get_u64s(b, MAX_OPS)?,
        })
    }
}

/// A message from one bucket to another (inside [`Cmd::Channel`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// From the coordinator bucket: this bucket's part of transaction `id`.
    Prepare {
        id: TxnId,
        buckets: Vec<u32>,
        ops: Vec<Op>,
    },
    /// To the coordinator: this bucket's local decision (replicated here before it left), with
    /// the versions its ops will have if the transaction commits (see [`Decided::versions`]).
    Vote {
        id: TxnId,
        yes: bool,
        reason: String,
        versions: Vec<u64>,
    },
    /// From the coordinator: the global decision.
    Decision { id: TxnId, commit: bool },
    /// To the coordinator of `id`: an older transaction waits for `id`'s locks here; withdraw
    /// this bucket's vote if `id` is not decided (Algorithm 5, with the ∧ erratum).
    RevertRequest { id: TxnId },
    /// From the coordinator: the vote is withdrawn; release `id`'s locks and decide it again.
    RevertGrant { id: TxnId },
}

impl Wire for Msg {
    fn encode(&self, b: &mut BytesMut) {
        match self {
            Msg::Prepare { id, buckets, ops } => {
                b.put_u8(1);
                id.encode(b);
                put_u32s(b, buckets);
                put_ops(b, ops);
            }
            Msg::Vote {
                id,
                yes,
                reason,
                versions,
            } => {
                b.put_u8(2);
                id.encode(b);
                b.put_u8(*yes as u8);
                put_str(b, reason);
                put_u64s(b, versions);
            }
            Msg::Decision { id, commit } => {
                b.put_u8(3);
                id.encode(b);
                b.put_u8(*commit as u8);
            }
            Msg::RevertRequest { id } => {
                b.put_u8(4);
                id.encode(b);
            }
            Msg::RevertGrant { id } => {
                b.put_u8(5);
                id.encode(b);
            }
        }
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(match get_u8(b)? {
            1 => Msg::Prepare {
                id: TxnId::decode(b)?,
                buckets: get_u32s(b, MAX_BUCKETS)?,
                ops: get_ops(b)?,
            },
            2 => Msg::Vote {
                id: TxnId::decode(b)?,
                yes: get_bool(b)?,
                reason: get_string(b, "reason", 4096)?,
                versions: get_u64s(b, MAX_OPS)?,
            },
            3 => Msg::Decision {
                id: TxnId::decode(b)?,
                commit: get_bool(b)?,
            },
            4 => Msg::RevertRequest {
                id: TxnId::decode(b)?,
            },
            5 => Msg::RevertGrant {
                id: TxnId::decode(b)?,
            },
            _ => return Err(WireError::Invalid("kv message")),
        })
    }
}

/// A command of a bucket's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cmd {
    /// A client's commit, submitted to the coordinator bucket (the lowest bucket index the
    /// transaction touches): `parts` holds each bucket's operations, sorted by bucket.
    Commit {
        id: TxnId,
        parts: Vec<(u32, Vec<Op>)>,
    },
    /// A client gives up on `id`: abort it unless it is decided already.
    Abort { id: TxnId },
    /// Message `seq` on the channel from bucket `from`, which has also applied every message
    /// of ours up to `ack`.
    Channel {
        from: u32,
        seq: u64,
        ack: u64,
        msg: Msg,
    },
    /// Bucket `from` has applied every message of ours up to `upto`.
    Ack { from: u32, upto: u64 },
}

impl Wire for Cmd {
    fn encode(&self, b: &mut BytesMut) {
        match self {
            Cmd::Commit { id, parts } => {
                b.put_u8(1);
                id.encode(b);
                b.put_u32(parts.len() as u32);
                for (bucket, ops) in parts {
                    b.put_u32(*bucket);
                    put_ops(b, ops);
                }
            }
            Cmd::Abort { id } => {
                b.put_u8(2);
                id.encode(b);
            }
            Cmd::Channel {
                from,
                seq,
                ack,
                msg,
            } => {
                b.put_u8(3);
                b.put_u32(*from);
                b.put_u64(*seq);
                b.put_u64(*ack);
                msg.encode(b);
            }
            Cmd::Ack { from, upto } => {
                b.put_u8(4);
                b.put_u32(*from);
                b.put_u64(*upto);
            }
        }
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(match get_u8(b)? {
            1 => {
                let id = TxnId::decode(b)?;
                let n = get_count(b, "parts", 8)?;
                if n > MAX_BUCKETS {
                    return Err(WireError::Invalid("too many buckets"));
                }
                let parts = (0..n)
                    .map(|_| Ok((get_u32(b)?, get_ops(b)?)))
                    .collect::<WireResult<_>>()?;
                Cmd::Commit { id, parts }
            }
            2 => Cmd::Abort {
                id: TxnId::decode(b)?,
            },
            3 => Cmd::Channel {
                from: get_u32(b)?,
                seq: get_u64(b)?,
                ack: get_u64(b)?,
                msg: Msg::decode(b)?,
            },
            4 => Cmd::Ack {
                from: get_u32(b)?,
                upto: get_u64(b)?,
            },
            _ => return Err(WireError::Invalid("kv command")),
        })
    }
}

/// The reply to a command, returned by `apply` to whoever submitted it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Decided (now, or earlier: a retried commit).
    Decided(Decided),
    /// Taken in; the decision comes later (`Bucket::decided`).
    Pending,
    /// Refused: malformed, sent to the wrong bucket, too old to be told apart from a retry.
    Refused(String),
    /// A message between buckets (nobody waits for it).
    Internal,
}

impl Wire for Reply {
    fn encode(&self, b: &mut BytesMut) {
        match self {
            Reply::Decided(d) => {
                b.put_u8(1);
                d.encode(b);
            }
            Reply::Pending => b.put_u8(2),
            Reply::Refused(why) => {
                b.put_u8(3);
                put_str(b, why);
            }
            Reply::Internal => b.put_u8(4),
        }
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(match get_u8(b)? {
            1 => Reply::Decided(Decided::decode(b)?),
            2 => Reply::Pending,
            3 => Reply::Refused(get_string(b, "reason", 4096)?),
            4 => Reply::Internal,
            _ => return Err(WireError::Invalid("kv reply")),
        })
    }
}
