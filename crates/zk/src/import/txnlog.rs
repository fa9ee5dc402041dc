//! ZooKeeper's transaction log file (`FileTxnLog`): a `FileHeader` (magic `ZKLG`, version 2,
//! database id), then records `long adler32; int length; byte[length] txn; byte 'B'`, the file
//! preallocated with zeros beyond the last one (a zero length ends the log). Each txn is a
//! `TxnHeader` (client id, cxid, zxid, time, type), the record of its type, and in 3.6+ an
//! optional `TxnDigest`.
//!
//! As ZooKeeper's `FileTxnIterator`: a checksum that does not match is an error; a record cut
//! short (a crash while it was written) ends the log. Unlike ZooKeeper, a cut-short record is
//! accepted only at the end of the newest log file, and reported: anywhere else, records
//! after it would be silently lost.

use super::archive::{adler32, Archive, MAX_BUFFER};
use super::ImportError;
use crate::jute::{op, Acl};
use std::path::Path;

/// `ZKLG`.
pub const LOG_MAGIC: i32 = 0x5a4b_4c47;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnHeader {
    pub client_id: i64,
    pub cxid: i32,
    pub zxid: i64,
    pub time: i64,
    pub ty: i32,
}

/// A transaction's record, by type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Txn {
    CreateSession {
        timeout: i32,
    },
    /// `paths` is the 3.6+ `CloseSessionTxn` (None in older logs).
    CloseSession {
        paths: Option<Vec<String>>,
    },
    /// create, create2 (`ephemeral` set for an ephemeral node), createContainer
    /// (`owner` the container mark), createTTL (`owner` the TTL mark); `owner` is 0 for a
    /// create, whose owner is the client when `ephemeral`.
    Create {
        path: String,
        data: Option<Vec<u8>>,
        acl: Vec<Acl>,
        ephemeral: bool,
        parent_cversion: i32,
        owner: i64,
    },
    Delete {
        path: String,
    },
    SetData {
        path: String,
        data: Option<Vec<u8>>,
        version: i32,
    },
    SetAcl {
        path: String,
        acl: Vec<Acl>,
        version: i32,
    },
    Check {
        path: String,
        version: i32,
    },
    Error {
        err: i32,
    },
    /// Each sub-transaction with its type.
    Multi(Vec<(i32, Txn)>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// File offset of the record.
    pub offset: u64,
    pub header: TxnHeader,
    pub txn: Txn,
}

/// A whole log file.
#[derive(Debug, Default)]
pub struct LogFile {
    pub records: Vec<Record>,
    /// Set when the file ends with a record cut short: its offset.
    pub torn_at: Option<u64>,
}

/// The part of a log file that [`read`] looks at: the header, every record, and the first
/// 12 bytes after the last one (the zero length of the preallocated space, or whatever cut the
/// log short). ZooKeeper preallocates its log files 64 MB at a time, so a log of a few
/// records is mostly zeros: reading only what is used turned a data directory of 60 snapshots
/// and logs, imported once per snapshot, from minutes of reading zeros into seconds. [`read`]
/// decides exactly as it would on the whole file (the bytes it stops at are included).
pub fn read_used(file: &Path) -> Result<Vec<u8>, ImportError> {
    use std::io::Read;
    let cannot = |at: usize, e: std::io::Error| {
        ImportError::new(file, at as u64, format!("cannot read: {e}"))
    };
    let f = std::fs::File::open(file).map_err(|e| cannot(0, e))?;
    let mut f = std::io::BufReader::with_capacity(64 << 10, f);
    let mut b = Vec::new();
    // Up to `n` more bytes; false when the file ended first.
    let mut more = |b: &mut Vec<u8>, n: usize| -> Result<bool, ImportError> {
        let at = b.len();
        let got = (&mut f)
            .take(n as u64)
            .read_to_end(b)
            .map_err(|e| cannot(at, e))?;
        Ok(got == n)
    };
    if !more(&mut b, 16)? {
        return Ok(b);
    }
    loop {
        let at = b.len();
        if !more(&mut b, 12)? {
            return Ok(b);
        }
        let len = i32::from_be_bytes(b[at + 8..at + 12].try_into().expect("4 bytes"));
        if len <= 0 || len as usize > MAX_BUFFER {
            return Ok(b); // the end of the log, or a corrupt length `read` reports
        }
        if !more(&mut b, len as usize + 1)? {
            return Ok(b);
        }
    }
}

/// Read a whole log file; `last` says whether it is the newest one (the only place a record
/// cut short is accepted).
pub fn read(file: &Path, b: &[u8], last: bool) -> Result<LogFile, ImportError> {
    let mut a = Archive::new(file, b, 0);
    let magic = a.int("the file header")?;
    if magic != LOG_MAGIC {
        return Err(ImportError::new(
            file,
            0,
            format!(
                "not a ZooKeeper transaction log (magic {magic:#010x}, expected 0x5a4b4c47 'ZKLG')"
            ),
        ));
    }
    let version = a.int("the file header's version")?;
    if version != 2 {
        return Err(ImportError::new(
            file,
            4,
            format!("log format version {version} is not supported (ZooKeeper 3.x writes 2)"),
        ));
    }
    a.long("the database id")?;
    let mut out = LogFile::default();
    loop {
        let start = a.offset();
        if a.remaining() == 0 {
            break;
        }
        // A record cut short: accepted at the end of the newest file only.
        let torn = |out: &mut LogFile, why: &str| -> Result<(), ImportError> {
            if last {
                out.torn_at = Some(start);
                Ok(())
            } else {
                Err(ImportError::new(
                    file,
                    start,
                    format!("{why}, but later log files follow: the log is damaged"),
                ))
            }
        };
        if a.remaining() < 12 {
            if b[start as usize..].iter().all(|&x| x == 0) {
                break;
            }
            torn(&mut out, "the last record is cut short")?;
            break;
        }
        let crc = a.long("a record's checksum")?;
        let len = a.int("a record's length")?;
        if len == 0 {
            // Preallocated space: the end of the log.
            break;
        }
        if len < 0 || len as usize > MAX_BUFFER {
            return Err(ImportError::new(
                file,
                start + 8,
                format!("a record claims {len} bytes: the log is corrupt"),
            ));
        }
        let len = len as usize;
        if a.remaining() < len + 1 {
            torn(&mut out, "the last record is cut short")?;
            break;
        }
        let body_at = a.offset();
        let body = a.bytes(len, "a record")?;
        let eor = a.byte("the end-of-record mark")?;
        let computed = adler32(body) as i64;
        if crc != computed {
            return Err(ImportError::new(
                file,
                start,
                format!(
                    "record checksum mismatch (file says {crc:#x}, contents give {computed:#x}): \
                     the log is corrupt"
                ),
            ));
        }
        if eor != b'B' {
            torn(&mut out, "a record lacks its end mark 'B'")?;
            break;
        }
        let (header, txn) = decode_txn(file, body, body_at)?;
        out.records.push(Record {
            offset: start,
            header,
            txn,
        });
    }
    Ok(out)
}

/// One transaction (`SerializeUtils.deserializeTxn`), its bytes starting at file offset `base`.
pub fn decode_txn(file: &Path, b: &[u8], base: u64) -> Result<(TxnHeader, Txn), ImportError> {
    let mut a = Archive::new(file, b, base);
    let header = TxnHeader {
        client_id: a.long("the txn header's client id")?,
        cxid: a.int("the txn header's cxid")?,
        zxid: a.long("the txn header's zxid")?,
        time: a.long("the txn header's time")?,
        ty: a.int("the txn header's type")?,
    };
    let txn = match header.ty {
        op::CREATE_SESSION => Txn::CreateSession {
            timeout: a.int("a session timeout")?,
        },
        op::CLOSE_SESSION => {
            if a.remaining() == 0 {
                Txn::CloseSession { paths: None }
            } else {
                let n = a.count(4, "the paths to delete")?;
                let mut paths = Vec::with_capacity(n);
                for _ in 0..n {
                    paths.push(a.path("a path to delete")?);
                }
                Txn::CloseSession { paths: Some(paths) }
            }
        }
        op::CREATE => {
            // A create of ZooKeeper before 3.3 (CreateTxnV0) has no parent cversion.
            let mut t = create(&mut a, header.ty)?;
            if let Txn::Create {
                parent_cversion, ..
            } = &mut t
            {
                if a.remaining() == 0 {
                    *parent_cversion = -1;
                } else {
                    *parent_cversion = a.int("the parent cversion")?;
                }
            }
            t
        }
        ty => sub_txn(&mut a, ty)?,
    };
    // ZooKeeper 3.6+ may append the tree digest (`TxnDigest { int version; long digest }`).
    if a.remaining() == 12 {
        a.int("the txn digest version")?;
        a.long("the txn digest")?;
    }
    if a.remaining() != 0 {
        return Err(a.error(format!(
            "{} unexpected bytes after a transaction of type {}",
            a.remaining(),
            header.ty
        )));
    }
    Ok((header, txn))
}

/// The part of a create every kind shares, then its kind's own fields (without the parent
/// cversion of a plain create: its reader decides whether it is there).
fn create(a: &mut Archive, ty: i32) -> Result<Txn, ImportError> {
    let path = a.path("a create's path")?;
    let data = a.buffer("a create's data")?.map(|d| d.to_vec());
    let acl = a.acls("a create's ACL")?;
    let (ephemeral, parent_cversion, owner) = match ty {
        op::CREATE | op::CREATE2 => (a.boolean("a create's ephemeral flag")?, -1, 0),
        op::CREATE_CONTAINER => (
            false,
            a.int("the parent cversion")?,
            crate::tree::CONTAINER_OWNER,
        ),
        _ => {
            let pc = a.int("the parent cversion")?;
            let at = a.offset();
            let ttl = a.long("a TTL")?;
            if !(1..=crate::tree::MAX_TTL_MS).contains(&ttl) {
                return Err(ImportError::new(
                    a.file,
                    at,
                    format!("TTL {ttl} is out of range"),
                ));
            }
            (false, pc, crate::tree::TTL_OWNER_MASK | ttl)
        }
    };
    Ok(Txn::Create {
        path,
        data,
        acl,
        ephemeral,
        parent_cversion,
        owner,
    })
}

/// A transaction of type `ty` other than a session's, as it appears at the top level or
/// inside a multi.
fn sub_txn(a: &mut Archive, ty: i32) -> Result<Txn, ImportError> {
    Ok(match ty {
        op::CREATE | op::CREATE2 => {
            let mut t = create(a, ty)?;
            if let Txn::Create {
                parent_cversion, ..
            } = &mut t
            {
                *parent_cversion = a.int("the parent cversion")?;
            }
            t
        }
        op::CREATE_CONTAINER | op::CREATE_TTL => create(a, ty)?,
        op::DELETE | op::DELETE_CONTAINER => Txn::Delete {
            path: a.path("a delete's path")?,
        },
        op::SET_DATA | op::RECONFIG => Txn::SetData {
            path: a.path("a setData's path")?,
            data: a.buffer("a setData's data")?.map(|d| d.to_vec()),
            version: a.int("a setData's version")?,
        },
        op::SET_ACL => Txn::SetAcl {
            path: a.path("a setACL's path")?,
            acl: a.acls("a setACL's ACL")?,
            version: a.int("a setACL's version")?,
        },
        op::CHECK => Txn::Check {
            path: a.path("a check's path")?,
            version: a.int("a check's version")?,
        },
        op::ERROR => Txn::Error {
            err: a.int("an error code")?,
        },
        op::MULTI => {
            let n = a.count(8, "a multi's transactions")?;
            let mut subs = Vec::with_capacity(n);
            for _ in 0..n {
                let sty = a.int("a sub-transaction's type")?;
                let at = a.offset() + 4;
                let data = a.buffer("a sub-transaction")?.unwrap_or_default();
                let mut s = Archive::new(a.file, data, at);
                let t = match sty {
                    op::MULTI | op::CREATE_SESSION | op::CLOSE_SESSION => {
                        return Err(s.error(format!("a multi holds a transaction of type {sty}")))
                    }
                    _ => sub_txn(&mut s, sty)?,
                };
                if s.remaining() != 0 {
                    return Err(s.error("unexpected bytes after a sub-transaction"));
                }
                subs.push((sty, t));
            }
            Txn::Multi(subs)
        }
        _ => {
            return Err(a.error(format!(
                "transaction type {ty} is not one a ZooKeeper log holds"
            )))
        }
    })
}
