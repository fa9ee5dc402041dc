//! The backup file: one ZooKeeper group's replicated state (the snapshot encoding of
//! [`ZkMachine::snapshot_view`](crate::machine::ZkMachine::snapshot_view)) with a header saying
//! where it comes from, and a checksum. `synod backup` writes it from a running cluster, `synod
//! import --zookeeper` from an Apache ZooKeeper data directory, and `synod restore` seeds a new
//! cluster's data directories from it.
//!
//! ```text
//! "SYNODBAK"                 8 bytes, magic
//! u32 format version         1
//! u32 header length          bytes of the header fields that follow
//!   string cluster id        (u32 length + UTF-8; "" for an import)
//!   string source            "synod:<protocol>" or "zookeeper:<data directory>"
//!   u32 source node          0 for an import
//!   u32 group                always 0 (the ZooKeeper group)
//!   u64 slot, u64 tag        the delivered position the state was taken at (source's protocol)
//!   i64 zxid                 the ZooKeeper zxid of that position
//!   i64 created_ms           Unix time the backup was made
//! u64 state length
//! state bytes
//! u32 CRC32C of every byte before it
//! ```
//!
//! Big-endian throughout. A header longer than this version writes is read (later versions may
//! append fields); anything else that does not match is refused with the offset where it broke.

use bytes::{BufMut, Bytes, BytesMut};
use std::fmt;

pub const MAGIC: &[u8; 8] = b"SYNODBAK";
pub const VERSION: u32 = 1;
/// A header longer than this is not a header.
const MAX_HEADER: u32 = 64 * 1024;

/// Where the state comes from and at which position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub cluster_id: String,
    pub source: String,
    pub node: u32,
    pub group: u32,
    pub slot: u64,
    pub tag: u64,
    pub zxid: i64,
    pub created_ms: i64,
}

/// A decoded backup: its header and the state bytes (checked against the checksum; decoding the
/// state itself is the restorer's job).
#[derive(Clone, Debug)]
pub struct Backup {
    pub header: Header,
    pub state: Bytes,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupError {
    pub offset: usize,
    pub what: String,
}

impl fmt::Display for BackupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {})", self.what, self.offset)
    }
}

impl std::error::Error for BackupError {}

fn put_string(b: &mut BytesMut, s: &str) {
    b.put_u32(s.len() as u32);
    b.put_slice(s.as_bytes());
}

/// The whole file for `header` and `state`.
pub fn encode(header: &Header, state: &[u8]) -> Bytes {
    let mut h = BytesMut::new();
    put_string(&mut h, &header.cluster_id);
    put_string(&mut h, &header.source);
    h.put_u32(header.node);
    h.put_u32(header.group);
    h.put_u64(header.slot);
    h.put_u64(header.tag);
    h.put_i64(header.zxid);
    h.put_i64(header.created_ms);
    let mut b = BytesMut::with_capacity(h.len() + state.len() + 32);
    b.put_slice(MAGIC);
    b.put_u32(VERSION);
    b.put_u32(h.len() as u32);
    b.put_slice(&h);
    b.put_u64(state.len() as u64);
    b.put_slice(state);
    let crc = crc32c::crc32c(&b);
    b.put_u32(crc);
    b.freeze()
}

/// Reads big-endian fields, naming the offset of whatever is missing.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn err<T>(&self, what: impl Into<String>) -> Result<T, BackupError> {
        Err(BackupError {
            offset: self.at,
            what: what.into(),
        })
    }
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], BackupError> {
        if self.b.len() - self.at < n {
            return self.err(format!(
                "truncated: {what} needs {n} bytes, {} remain",
                self.b.len() - self.at
            ));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn u32(&mut self, what: &str) -> Result<u32, BackupError> {
        let s = self.take(4, what)?;
        Ok(u32::from_be_bytes(s.try_into().expect("4 bytes")))
    }
    fn u64(&mut self, what: &str) -> Result<u64, BackupError> {
        let s = self.take(8, what)?;
        Ok(u64::from_be_bytes(s.try_into().expect("8 bytes")))
    }
    fn string(&mut self, what: &str) -> Result<String, BackupError> {
        let n = self.u32(what)? as usize;
        let at = self.at;
        let s = self.take(n, what)?;
        String::from_utf8(s.to_vec()).map_err(|_| BackupError {
            offset: at,
            what: format!("{what} is not UTF-8"),
        })
    }
}

/// Decode and check a backup file.
pub fn decode(file: &Bytes) -> Result<Backup, BackupError> {
    let mut c = Cursor { b: file, at: 0 };
    if c.take(8, "the magic")? != MAGIC {
        return Err(BackupError {
            offset: 0,
            what: "not a synod backup file (bad magic)".into(),
        });
    }
    let version = c.u32("the format version")?;
    if version != VERSION {
        return c.err(format!(
            "backup format version {version} is not supported (this synod reads version {VERSION})"
        ));
    }
    let hlen = c.u32("the header length")?;
    if hlen > MAX_HEADER {
        return c.err(format!("header length {hlen} is implausible"));
    }
    let hbytes = c.take(hlen as usize, "the header")?;
    let hstart = c.at - hbytes.len();
    let mut h = Cursor {
        b: &file[..c.at],
        at: hstart,
    };
    let header = Header {
        cluster_id: h.string("the cluster id")?,
        source: h.string("the source")?,
        node: h.u32("the source node")?,
        group: h.u32("the group")?,
        slot: h.u64("the slot")?,
        tag: h.u64("the tag")?,
        zxid: h.u64("the zxid")? as i64,
        created_ms: h.u64("the creation time")? as i64,
    };
    let slen = c.u64("the state length")?;
    if slen > (c.b.len() - c.at) as u64 {
        return c.err(format!(
            "truncated: the state is {slen} bytes, {} remain",
            c.b.len() - c.at
        ));
    }
    let sstart = c.at;
    c.take(slen as usize, "the state")?;
    let body_end = c.at;
    let crc = c.u32("the checksum")?;
    if c.at != file.len() {
        return c.err(format!("{} bytes after the checksum", file.len() - c.at));
    }
    let computed = crc32c::crc32c(&file[..body_end]);
    if crc != computed {
        return Err(BackupError {
            offset: body_end,
            what: format!(
                "checksum mismatch (file says {crc:#010x}, contents give {computed:#010x}): the \
                 file is corrupt"
            ),
        });
    }
    if header.group != 0 {
        return Err(BackupError {
            offset: hstart,
            what: format!(
                "the backup is of group {}; only the ZooKeeper group (0) is restored",
                header.group
            ),
        });
    }
    Ok(Backup {
        header,
        state: file.slice(sstart..sstart + slen as usize),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Header, Bytes) {
        let h = Header {
            cluster_id: "c1".into(),
            source: "synod:zab".into(),
            node: 2,
            group: 0,
            slot: 17,
            tag: 0x1_0000_0011,
            zxid: 0x1_0000_0011,
            created_ms: 1_700_000_000_000,
        };
        (h.clone(), encode(&h, b"state bytes"))
    }

    #[test]
    fn round_trip() {
        let (h, f) = sample();
        let b = decode(&f).unwrap();
        assert_eq!(b.header, h);
        assert_eq!(&b.state[..], b"state bytes");
    }

    #[test]
    fn every_flipped_byte_and_every_truncation_is_refused() {
        let (_, f) = sample();
        for i in 0..f.len() {
            let mut v = f.to_vec();
            v[i] ^= 0x20;
            assert!(decode(&Bytes::from(v)).is_err(), "flip at {i} accepted");
            assert!(decode(&f.slice(..i)).is_err(), "truncation at {i} accepted");
        }
        let mut v = f.to_vec();
        v.push(0);
        let e = decode(&Bytes::from(v)).unwrap_err();
        assert!(e.what.contains("after the checksum"), "{e}");
    }

    #[test]
    fn errors_say_what_and_where() {
        let (_, f) = sample();
        let e = decode(&Bytes::from_static(b"PK\x03\x04 not a backup")).unwrap_err();
        assert!(e.to_string().contains("not a synod backup"), "{e}");
        let mut v = f.to_vec();
        let last = v.len() - 10;
        v[last] ^= 1;
        let e = decode(&Bytes::from(v)).unwrap_err();
        assert!(e.to_string().contains("checksum mismatch"), "{e}");
        let e = decode(&f.slice(..f.len() - 30)).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
    }
}
