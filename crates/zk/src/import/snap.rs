//! ZooKeeper's snapshot file (`FileSnap`): a `FileHeader` (magic `ZKSN`, version 2, database
//! id), the session table (id, timeout), the ACL cache (id → ACL list), every node in
//! depth-first order (`path`, then `DataNode { buffer data; long acl; StatPersisted stat }`, the
//! root with the empty path) ended by the path `/`, and a seal: the Adler-32 of every byte so far
//! and the string `/`. ZooKeeper 3.6+ then writes the tree digest it had (zxid, digest version,
//! digest) and seals again, the checksum covering the whole file up to there.

use super::archive::{adler32, Archive};
use super::ImportError;
use crate::jute::{perms, Acl, Id, Stat};
use std::collections::HashMap;
use std::path::Path;

/// `ZKSN`.
pub const SNAP_MAGIC: i32 = 0x5a4b_534e;
/// The ACL reference of ZooKeeper's `OPEN_ACL_UNSAFE` (never in the cache).
const OPEN_UNSAFE_ACL_ID: i64 = -1;
/// Bytes of a `StatPersisted`.
const STAT_BYTES: usize = 8 * 4 + 4 * 3 + 8 + 8;

/// One node as the snapshot holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapNode {
    /// `/` for the root (stored with the empty path).
    pub path: String,
    pub data: Option<Vec<u8>>,
    pub acl: Vec<Acl>,
    /// An ACL reference the snapshot's ACL cache lacks (`acl` is then empty): a fuzzy snapshot
    /// serialises the cache before the nodes, so a node created in between names a list that
    /// only the replay of its create defines again (as ZooKeeper 3.6+ replays it: the create
    /// adds its list to the cache before it finds the node there). Resolved by the replay.
    pub acl_ref: Option<i64>,
    /// The node's reference into the ACL cache as written (-1: ZooKeeper's open ACL).
    pub acl_id: i64,
    /// `data_length` and `num_children` are 0: ZooKeeper derives them.
    pub stat: Stat,
}

#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub sessions: Vec<(i64, i32)>,
    pub nodes: Vec<SnapNode>,
    /// The ACL cache: reference → list, sorted by reference.
    pub acls: Vec<(i64, Vec<Acl>)>,
    /// The tree digest ZooKeeper 3.6+ recorded: (zxid, digest version, digest).
    pub digest: Option<(i64, i32, i64)>,
}

/// Most entries in one imported ACL list.
const MAX_ACL_LIST: usize = 4096;

fn open_acl() -> Vec<Acl> {
    vec![Acl {
        perms: perms::ALL,
        id: Id {
            scheme: "world".into(),
            id: "anyone".into(),
        },
    }]
}

/// Check a seal: the checksum of everything read so far, then the string `/`.
fn seal(a: &mut Archive) -> Result<(), ImportError> {
    let computed = adler32(a.consumed()) as i64;
    let at = a.offset();
    let val = a.long("the snapshot checksum")?;
    let slash = a.string("the seal's '/'")?;
    if val != computed {
        return Err(ImportError::new(
            a.file,
            at,
            format!(
                "snapshot checksum mismatch (file says {val:#x}, contents give {computed:#x}): \
                 the snapshot is corrupt"
            ),
        ));
    }
    if slash.as_deref() != Some("/") {
        return Err(ImportError::new(
            a.file,
            at + 8,
            "the seal does not end with '/'",
        ));
    }
    Ok(())
}

/// Read a whole snapshot file.
pub fn read(file: &Path, b: &[u8]) -> Result<Snapshot, ImportError> {
    let mut a = Archive::new(file, b, 0);
    let magic = a.int("the file header")?;
    if magic != SNAP_MAGIC {
        return Err(ImportError::new(
            file,
            0,
            format!("not a ZooKeeper snapshot (magic {magic:#010x}, expected 0x5a4b534e 'ZKSN')"),
        ));
    }
    let version = a.int("the file header's version")?;
    if version != 2 {
        return Err(ImportError::new(
            file,
            4,
            format!("snapshot format version {version} is not supported (ZooKeeper 3.x writes 2)"),
        ));
    }
    a.long("the database id")?;
    let mut snap = Snapshot::default();
    let n = a.count(12, "the session count")?;
    for _ in 0..n {
        let id = a.long("a session id")?;
        let timeout = a.int("a session timeout")?;
        snap.sessions.push((id, timeout));
    }
    let n = a.count(12, "the ACL cache size")?;
    let mut acls: HashMap<i64, Vec<Acl>> = HashMap::with_capacity(n);
    for _ in 0..n {
        let at = a.offset();
        let key = a.long("an ACL cache key")?;
        let list = a.acls("an ACL list")?;
        // Every node referring to a list gets its own copy in synod's tree: a forged list of
        // millions of entries shared by many nodes would multiply. Real lists are a handful.
        if list.len() > MAX_ACL_LIST {
            return Err(ImportError::new(
                file,
                at,
                format!(
                    "ACL list {key} has {} entries (at most {MAX_ACL_LIST} are imported)",
                    list.len()
                ),
            ));
        }
        if acls.insert(key, list).is_some() {
            return Err(ImportError::new(
                file,
                at,
                format!("ACL cache key {key} appears twice"),
            ));
        }
    }
    loop {
        let at = a.offset();
        let path = a.path("a node path")?;
        if path == "/" {
            break;
        }
        let path = if path.is_empty() {
            "/".to_string()
        } else if path.starts_with('/') && !path.ends_with('/') {
            path
        } else {
            return Err(ImportError::new(
                file,
                at,
                format!("invalid node path {path:?}"),
            ));
        };
        let data = a.buffer("a node's data")?.map(|d| d.to_vec());
        let acl_at = a.offset();
        let acl_ref = a.long("a node's ACL reference")?;
        let (acl, unresolved) = if acl_ref == OPEN_UNSAFE_ACL_ID {
            (open_acl(), None)
        } else {
            match acls.get(&acl_ref) {
                Some(l) => (l.clone(), None),
                None if acl_ref > 0 => (Vec::new(), Some(acl_ref)),
                None => {
                    return Err(ImportError::new(
                        file,
                        acl_at,
                        format!("node {path} names ACL {acl_ref}, which cannot be a reference"),
                    ))
                }
            }
        };
        if a.remaining() < STAT_BYTES {
            return Err(a.error("truncated: a node's stat"));
        }
        let stat = Stat {
            czxid: a.long("czxid")?,
            mzxid: a.long("mzxid")?,
            ctime: a.long("ctime")?,
            mtime: a.long("mtime")?,
            version: a.int("version")?,
            cversion: a.int("cversion")?,
            aversion: a.int("aversion")?,
            ephemeral_owner: a.long("ephemeralOwner")?,
            pzxid: a.long("pzxid")?,
            data_length: 0,
            num_children: 0,
        };
        snap.nodes.push(SnapNode {
            path,
            data,
            acl,
            acl_ref: unresolved,
            acl_id: acl_ref,
            stat,
        });
    }
    snap.acls = acls.into_iter().collect();
    snap.acls.sort_unstable_by_key(|(k, _)| *k);
    seal(&mut a)?;
    if a.remaining() > 0 {
        let zxid = a.long("the digest's zxid")?;
        let version = a.int("the digest version")?;
        let digest = if version < 2 {
            let at = a.offset();
            let s = a.string("the digest")?.unwrap_or_default();
            i64::from_str_radix(&s, 16)
                .map_err(|_| ImportError::new(file, at, format!("digest {s:?} is not hex")))?
        } else {
            a.long("the digest")?
        };
        seal(&mut a)?;
        snap.digest = Some((zxid, version, digest));
    }
    if a.remaining() > 0 {
        return Err(a.error(format!(
            "{} unexpected bytes after the snapshot's last seal",
            a.remaining()
        )));
    }
    Ok(snap)
}
