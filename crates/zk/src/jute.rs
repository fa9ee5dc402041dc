//! The jute encoding of ZooKeeper's client protocol (records of `zookeeper.jute`), written from
//! the specification in docs/zookeeper-wire.md. Big-endian integers; strings and buffers are a
//! 4-byte length (-1 for null) and bytes; vectors a 4-byte count (-1 for null) and elements.
//! Every read checks what remains, so a malformed request is an error, never a panic.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JuteError(pub &'static str);

impl fmt::Display for JuteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed request: {}", self.0)
    }
}

impl std::error::Error for JuteError {}

pub type JResult<T> = Result<T, JuteError>;

pub struct Reader {
    b: Bytes,
}

impl Reader {
    pub fn new(b: Bytes) -> Self {
        Self { b }
    }
    pub fn remaining(&self) -> usize {
        self.b.remaining()
    }
    fn need(&self, n: usize) -> JResult<()> {
        if self.b.remaining() < n {
            Err(JuteError("truncated"))
        } else {
            Ok(())
        }
    }
    pub fn int(&mut self) -> JResult<i32> {
        self.need(4)?;
        Ok(self.b.get_i32())
    }
    pub fn long(&mut self) -> JResult<i64> {
        self.need(8)?;
        Ok(self.b.get_i64())
    }
    pub fn boolean(&mut self) -> JResult<bool> {
        self.need(1)?;
        Ok(self.b.get_u8() != 0)
    }
    /// A buffer; null reads as empty.
    pub fn buffer(&mut self) -> JResult<Bytes> {
        let n = self.int()?;
        if n < 0 {
            return Ok(Bytes::new());
        }
        let n = n as usize;
        self.need(n)?;
        Ok(self.b.split_to(n))
    }
    /// A buffer that may be null (length -1), as znode data is.
    pub fn opt_buffer(&mut self) -> JResult<Option<Bytes>> {
        let n = self.int()?;
        if n < 0 {
            return Ok(None);
        }
        let n = n as usize;
        self.need(n)?;
        Ok(Some(self.b.split_to(n)))
    }
    /// A string; null reads as empty.
    pub fn string(&mut self) -> JResult<String> {
        let raw = self.buffer()?;
        String::from_utf8(raw.to_vec()).map_err(|_| JuteError("string is not UTF-8"))
    }
    /// A path as ZooKeeper's Java server reads it: a null string is a marshalling error, and
    /// bytes that are not UTF-8 decode to U+FFFD (which no valid path contains, so the request
    /// then fails as ZooKeeper's does: BADARGUMENTS for a write, NONODE for a read).
    pub fn path(&mut self) -> JResult<String> {
        let n = self.int()?;
        if n < 0 {
            return Err(JuteError("null path"));
        }
        let n = n as usize;
        self.need(n)?;
        Ok(String::from_utf8_lossy(&self.b.split_to(n)).into_owned())
    }
    /// A vector of strings that must not be null (ZooKeeper fails to read a null one).
    pub fn strict_strings(&mut self) -> JResult<Vec<String>> {
        if self.b.remaining() >= 4 && self.b[..4] == [0xff; 4] {
            return Err(JuteError("null vector"));
        }
        self.strings()
    }
    /// A vector count; null reads as 0. Each element takes at least `min` bytes, which bounds the
    /// count by what remains (no allocation from a forged count).
    pub fn count(&mut self, min: usize) -> JResult<usize> {
        let n = self.int()?;
        if n < 0 {
            return Ok(0);
        }
        if (n as usize).saturating_mul(min.max(1)) > self.b.remaining() {
            return Err(JuteError("vector longer than the request"));
        }
        Ok(n as usize)
    }
    pub fn strings(&mut self) -> JResult<Vec<String>> {
        let n = self.count(4)?;
        (0..n).map(|_| self.string()).collect()
    }
    /// The rest of the input, whatever it is.
    pub fn rest(&mut self) -> Bytes {
        self.b.split_off(0)
    }
}

pub trait JuteWrite {
    fn int(&mut self, v: i32);
    fn long(&mut self, v: i64);
    fn boolean(&mut self, v: bool);
    fn buffer(&mut self, v: &[u8]);
    /// A buffer that may be null (written with length -1).
    fn opt_buffer(&mut self, v: Option<&[u8]>);
    fn string(&mut self, v: &str);
    fn strings(&mut self, v: &[String]);
}

impl JuteWrite for BytesMut {
    fn int(&mut self, v: i32) {
        self.put_i32(v);
    }
    fn long(&mut self, v: i64) {
        self.put_i64(v);
    }
    fn boolean(&mut self, v: bool) {
        self.put_u8(v as u8);
    }
    fn buffer(&mut self, v: &[u8]) {
        self.put_i32(v.len() as i32);
        self.put_slice(v);
    }
    fn opt_buffer(&mut self, v: Option<&[u8]>) {
        match v {
            Some(v) => self.buffer(v),
            None => self.put_i32(-1),
        }
    }
    fn string(&mut self, v: &str) {
        self.buffer(v.as_bytes());
    }
    fn strings(&mut self, v: &[String]) {
        self.put_i32(v.len() as i32);
        for s in v {
            self.string(s);
        }
    }
}

/// A znode's metadata, in wire order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    pub czxid: i64,
    pub mzxid: i64,
    pub ctime: i64,
    pub mtime: i64,
    pub version: i32,
    pub cversion: i32,
    pub aversion: i32,
    pub ephemeral_owner: i64,
    pub data_length: i32,
    pub num_children: i32,
    pub pzxid: i64,
}

impl Stat {
    pub fn write(&self, b: &mut BytesMut) {
        b.long(self.czxid);
        b.long(self.mzxid);
        b.long(self.ctime);
        b.long(self.mtime);
        b.int(self.version);
        b.int(self.cversion);
        b.int(self.aversion);
        b.long(self.ephemeral_owner);
        b.int(self.data_length);
        b.int(self.num_children);
        b.long(self.pzxid);
    }
    pub fn read(r: &mut Reader) -> JResult<Self> {
        Ok(Stat {
            czxid: r.long()?,
            mzxid: r.long()?,
            ctime: r.long()?,
            mtime: r.long()?,
            version: r.int()?,
            cversion: r.int()?,
            aversion: r.int()?,
            ephemeral_owner: r.long()?,
            data_length: r.int()?,
            num_children: r.int()?,
            pzxid: r.long()?,
        })
    }
}

/// An identity: a scheme and an id within it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Id {
    pub scheme: String,
    pub id: String,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Acl {
    pub perms: i32,
    pub id: Id,
}

pub fn write_acls(b: &mut BytesMut, acls: &[Acl]) {
    b.int(acls.len() as i32);
    for a in acls {
        b.int(a.perms);
        b.string(&a.id.scheme);
        b.string(&a.id.id);
    }
}

pub fn read_acls(r: &mut Reader) -> JResult<Vec<Acl>> {
    let n = r.count(12)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let perms = r.int()?;
        let scheme = r.string()?;
        let id = r.string()?;
        v.push(Acl {
            perms,
            id: Id { scheme, id },
        });
    }
    Ok(v)
}

pub mod perms {
    pub const READ: i32 = 1;
    pub const WRITE: i32 = 2;
    pub const CREATE: i32 = 4;
    pub const DELETE: i32 = 8;
    pub const ADMIN: i32 = 16;
    pub const ALL: i32 = 31;
}

/// Operation codes (ZooDefs.OpCode).
pub mod op {
    pub const NOTIFICATION: i32 = 0;
    pub const CREATE: i32 = 1;
    pub const DELETE: i32 = 2;
    pub const EXISTS: i32 = 3;
    pub const GET_DATA: i32 = 4;
    pub const SET_DATA: i32 = 5;
    pub const GET_ACL: i32 = 6;
    pub const SET_ACL: i32 = 7;
    pub const GET_CHILDREN: i32 = 8;
    pub const SYNC: i32 = 9;
    pub const PING: i32 = 11;
    pub const GET_CHILDREN2: i32 = 12;
    pub const CHECK: i32 = 13;
    pub const MULTI: i32 = 14;
    pub const CREATE2: i32 = 15;
    pub const RECONFIG: i32 = 16;
    pub const CHECK_WATCHES: i32 = 17;
    pub const REMOVE_WATCHES: i32 = 18;
    pub const CREATE_CONTAINER: i32 = 19;
    pub const DELETE_CONTAINER: i32 = 20;
    pub const CREATE_TTL: i32 = 21;
    pub const MULTI_READ: i32 = 22;
    pub const AUTH: i32 = 100;
    pub const SET_WATCHES: i32 = 101;
    pub const SASL: i32 = 102;
    pub const GET_EPHEMERALS: i32 = 103;
    pub const GET_ALL_CHILDREN_NUMBER: i32 = 104;
    pub const SET_WATCHES2: i32 = 105;
    pub const ADD_WATCH: i32 = 106;
    pub const WHO_AM_I: i32 = 107;
    pub const CREATE_SESSION: i32 = -10;
    pub const CLOSE_SESSION: i32 = -11;
    pub const ERROR: i32 = -1;
}

/// Error codes (KeeperException.Code).
pub mod err {
    pub const OK: i32 = 0;
    pub const SYSTEM_ERROR: i32 = -1;
    pub const RUNTIME_INCONSISTENCY: i32 = -2;
    pub const MARSHALLING_ERROR: i32 = -5;
    pub const UNIMPLEMENTED: i32 = -6;
    pub const BAD_ARGUMENTS: i32 = -8;
    pub const API_ERROR: i32 = -100;
    pub const NO_NODE: i32 = -101;
    pub const NO_AUTH: i32 = -102;
    pub const BAD_VERSION: i32 = -103;
    pub const NO_CHILDREN_FOR_EPHEMERALS: i32 = -108;
    pub const NODE_EXISTS: i32 = -110;
    pub const NOT_EMPTY: i32 = -111;
    pub const SESSION_EXPIRED: i32 = -112;
    pub const INVALID_ACL: i32 = -114;
    pub const AUTH_FAILED: i32 = -115;
    pub const SESSION_MOVED: i32 = -118;
    pub const NOT_READ_ONLY: i32 = -119;
    pub const NO_WATCHER: i32 = -121;
    pub const RECONFIG_DISABLED: i32 = -123;
}

/// Watch event types (Watcher.Event.EventType).
pub mod event {
    pub const NONE: i32 = -1;
    pub const NODE_CREATED: i32 = 1;
    pub const NODE_DELETED: i32 = 2;
    pub const NODE_DATA_CHANGED: i32 = 3;
    pub const NODE_CHILDREN_CHANGED: i32 = 4;
    pub const DATA_WATCH_REMOVED: i32 = 5;
    pub const CHILD_WATCH_REMOVED: i32 = 6;
    pub const PERSISTENT_WATCH_REMOVED: i32 = 7;
    /// KeeperState.SyncConnected.
    pub const STATE_SYNC_CONNECTED: i32 = 3;
}

/// Special xids.
pub mod xid {
    pub const NOTIFICATION: i32 = -1;
    pub const PING: i32 = -2;
    pub const AUTH: i32 = -4;
    pub const SET_WATCHES: i32 = -8;
}

/// Create modes (CreateMode flags).
pub mod mode {
    pub const PERSISTENT: i32 = 0;
    pub const EPHEMERAL: i32 = 1;
    pub const PERSISTENT_SEQUENTIAL: i32 = 2;
    pub const EPHEMERAL_SEQUENTIAL: i32 = 3;
    pub const CONTAINER: i32 = 4;
    pub const PERSISTENT_WITH_TTL: i32 = 5;
    pub const PERSISTENT_SEQUENTIAL_WITH_TTL: i32 = 6;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_round_trip_and_nulls() {
        let mut b = BytesMut::new();
        b.int(-7);
        b.long(1 << 40);
        b.boolean(true);
        b.string("héllo");
        b.int(-1); // null buffer
        b.strings(&["a".into(), "bc".into()]);
        b.int(-1); // null vector
        let mut r = Reader::new(b.freeze());
        assert_eq!(r.int().unwrap(), -7);
        assert_eq!(r.long().unwrap(), 1 << 40);
        assert!(r.boolean().unwrap());
        assert_eq!(r.string().unwrap(), "héllo");
        assert_eq!(r.buffer().unwrap(), Bytes::new());
        assert_eq!(
            r.strings().unwrap(),
            vec!["a".to_string(), "bc".to_string()]
        );
        assert_eq!(r.strings().unwrap(), Vec::<String>::new());
        assert_eq!(r.remaining(), 0);
        assert!(r.int().is_err());
    }

    #[test]
    fn forged_lengths_are_errors() {
        let mut b = BytesMut::new();
        b.int(i32::MAX);
        assert!(Reader::new(b.freeze()).buffer().is_err());
        let mut b = BytesMut::new();
        b.int(1_000_000);
        assert!(Reader::new(b.freeze()).strings().is_err());
    }

    #[test]
    fn stat_round_trips() {
        let s = Stat {
            czxid: 1,
            mzxid: 2,
            ctime: 3,
            mtime: 4,
            version: 5,
            cversion: 6,
            aversion: 7,
            ephemeral_owner: 8,
            data_length: 9,
            num_children: 10,
            pzxid: 11,
        };
        let mut b = BytesMut::new();
        s.write(&mut b);
        assert_eq!(b.len(), 68);
        assert_eq!(Stat::read(&mut Reader::new(b.freeze())).unwrap(), s);
    }
}
