//! Reading an Apache ZooKeeper 3.x data directory, so that a ZooKeeper user can move to synod:
//! the newest valid snapshot (`version-2/snapshot.<zxid>`) and the transaction logs after it
//! (`version-2/log.<zxid>`) are read and replayed exactly as a ZooKeeper server does when it
//! restarts, and the resulting tree and session table become the state of synod's ZooKeeper
//! group ([`Imported::state`], the encoding of [`ZkMachine::snapshot_view`]).
//!
//! | file | job |
//! |------|-----|
//! | `archive.rs` | jute's binary archive over a file in memory; Adler-32 |
//! | `snap.rs` | the snapshot file (`FileSnap`), its seals and 3.6+ digest |
//! | `txnlog.rs` | the transaction log file (`FileTxnLog`) and every transaction type |
//! | `replay.rs` | the tree the snapshot and transactions build (`DataTree.processTxn`) |
//!
//! Nothing here trusts its input: a file that does not parse is an [`ImportError`] naming the
//! file and the byte offset, never a panic, and no length is allocated before its bytes are
//! known to be there. Written from ZooKeeper's source as the specification (FileSnap,
//! FileTxnLog, Util, SerializeUtils, DataTree).

pub mod archive;
pub mod replay;
pub mod snap;
pub mod txnlog;

#[cfg(test)]
mod tests;

use crate::machine::ZkMachine;
use crate::tree;
use bytes::Bytes;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What is wrong with which file, where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportError {
    pub file: PathBuf,
    pub offset: u64,
    pub what: String,
}

impl ImportError {
    pub fn new(file: &Path, offset: u64, what: impl Into<String>) -> Self {
        ImportError {
            file: file.to_path_buf(),
            offset,
            what: what.into(),
        }
    }
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: at byte {}: {}",
            self.file.display(),
            self.offset,
            self.what
        )
    }
}

impl std::error::Error for ImportError {}

/// The result of an import.
#[derive(Debug)]
pub struct Imported {
    /// The ZooKeeper group's state (synod's snapshot encoding), at slot 1.
    pub state: Bytes,
    /// The last transaction the tree holds.
    pub zxid: i64,
    pub snapshot: PathBuf,
    pub logs: Vec<PathBuf>,
    /// Transactions replayed after the snapshot, and how many of them failed (those a fuzzy
    /// snapshot already holds).
    pub replayed: u64,
    pub failed: u64,
    pub nodes: usize,
    pub sessions: usize,
    /// Sessions that owned ephemerals but were not in the session table (their ephemerals
    /// were deleted, as ZooKeeper does at load).
    pub dead_sessions: usize,
    /// Things an operator should know (an older snapshot used, a torn log tail).
    pub warnings: Vec<String>,
}

/// The files of a ZooKeeper `version-2` directory: `<prefix>.<hex zxid>`, sorted by zxid.
fn files(dir: &Path, prefix: &str) -> Result<Vec<(i64, PathBuf)>, ImportError> {
    let rd = std::fs::read_dir(dir)
        .map_err(|e| ImportError::new(dir, 0, format!("cannot list the directory: {e}")))?;
    let mut v = Vec::new();
    for e in rd {
        let e = e.map_err(|e| ImportError::new(dir, 0, format!("cannot list: {e}")))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(prefix).and_then(|r| r.strip_prefix('.')) else {
            continue;
        };
        if rest.ends_with(".gz") || rest.ends_with(".snappy") {
            return Err(ImportError::new(
                &e.path(),
                0,
                "compressed snapshots (snapshot.compression.method) are not read: restart \
                 ZooKeeper once without compression so that it writes a plain snapshot",
            ));
        }
        if let Ok(z) = u64::from_str_radix(rest, 16) {
            v.push((z as i64, e.path()));
        }
    }
    v.sort();
    Ok(v)
}

/// ZooKeeper's `version-2` directory under `dir` (or `dir` itself).
fn version2(dir: &Path) -> PathBuf {
    let v = dir.join("version-2");
    if v.is_dir() {
        v
    } else {
        dir.to_path_buf()
    }
}

fn read_file(p: &Path) -> Result<Vec<u8>, ImportError> {
    std::fs::read(p).map_err(|e| ImportError::new(p, 0, format!("cannot read: {e}")))
}

/// The password ZooKeeper gives session `id` (`ZooKeeperServer.generatePasswd`: 16 bytes of
/// `java.util.Random` seeded with the id xor a fixed secret), so that a client of the old
/// ensemble could present it.
pub fn zookeeper_password(id: i64) -> Bytes {
    const SUPER_SECRET: i64 = 0xB341_5C00;
    const MULT: u64 = 0x5_DEEC_E66D;
    const MASK: u64 = (1 << 48) - 1;
    let mut seed = ((id ^ SUPER_SECRET) as u64 ^ MULT) & MASK;
    let mut out = Vec::with_capacity(16);
    while out.len() < 16 {
        seed = seed.wrapping_mul(MULT).wrapping_add(0xB) & MASK;
        let mut r = (seed >> 16) as u32;
        for _ in 0..(16 - out.len()).min(4) {
            out.push(r as u8);
            r >>= 8;
        }
    }
    Bytes::from(out)
}

/// Read the ZooKeeper data directory `data` (its transaction logs in `logs`, if ZooKeeper's
/// `dataLogDir` was set apart) and build the tree a restarted ZooKeeper server would serve.
pub fn import(data: &Path, logs: Option<&Path>) -> Result<Imported, ImportError> {
    let snap_dir = version2(data);
    let log_dir = version2(logs.unwrap_or(data));
    let snaps = files(&snap_dir, "snapshot")?;
    if snaps.is_empty() {
        return Err(ImportError::new(
            &snap_dir,
            0,
            "no snapshot.<zxid> file: is this a ZooKeeper data directory?",
        ));
    }
    let mut warnings = Vec::new();
    // As ZooKeeper: the newest snapshot that reads, older ones if it does not.
    let mut loaded = None;
    let mut first_error = None;
    for (zxid, path) in snaps.iter().rev() {
        match snap::read(path, &read_file(path)?) {
            Ok(s) => {
                loaded = Some((*zxid, path.clone(), s));
                break;
            }
            Err(e) => {
                warnings.push(format!("skipped an unreadable snapshot: {e}"));
                first_error.get_or_insert(e);
            }
        }
    }
    let Some((snap_zxid, snap_path, snap)) = loaded else {
        return Err(first_error.expect("an error per snapshot"));
    };
    let mut dt = replay::DataTree::from_snapshot(snap, snap_zxid)
        .map_err(|e| ImportError::new(&snap_path, 0, e))?;
    // The newest log that starts at or before the snapshot, and every later one.
    let all = files(&log_dir, "log")?;
    let start = all.iter().rposition(|(z, _)| *z <= snap_zxid).unwrap_or(0);
    let used: Vec<(i64, PathBuf)> = all[start..].to_vec();
    let mut replayed = 0u64;
    let mut last = snap_zxid;
    for (i, (_, path)) in used.iter().enumerate() {
        let is_last = i + 1 == used.len();
        let f = txnlog::read(path, &txnlog::read_used(path)?, is_last)?;
        if let Some(at) = f.torn_at {
            warnings.push(format!(
                "{}: the log ends with a record cut short at byte {at} (a crash while it was \
                 written; ZooKeeper ignores it too)",
                path.display()
            ));
        }
        for r in f.records {
            let z = r.header.zxid;
            if z <= last {
                continue;
            }
            // Within an epoch, zxids are consecutive: a jump means missing transactions.
            if z >> 32 == last >> 32 && z != last + 1 {
                return Err(ImportError::new(
                    path,
                    r.offset,
                    format!(
                        "transaction {z:#x} follows {last:#x}: the transactions between them \
                         are missing (a log file was removed?)"
                    ),
                ));
            }
            dt.apply(&r.header, &r.txn);
            last = z;
            replayed += 1;
        }
    }
    if let Some((r, p)) = dt.unresolved_acls().first() {
        return Err(ImportError::new(
            &snap_path,
            0,
            format!(
                "node {p} names ACL {r}, which neither the snapshot's ACL cache nor any later \
                 transaction defines"
            ),
        ));
    }
    let dead_sessions = dt.kill_dead_sessions();
    let (state, nodes, sessions) = build(&dt);
    Ok(Imported {
        state,
        zxid: dt.zxid,
        snapshot: snap_path,
        logs: used.into_iter().map(|(_, p)| p).collect(),
        replayed,
        failed: dt.failed,
        nodes,
        sessions,
        dead_sessions,
        warnings,
    })
}

/// synod's state for the tree: the machine at slot 1 with the tree's last zxid, every session
/// with ZooKeeper's password for it (untouched, so that they expire unless their clients come
/// back, as after a ZooKeeper restart).
fn build(dt: &replay::DataTree) -> (Bytes, usize, usize) {
    let mut m = ZkMachine::default();
    let mut nodes = imbl::OrdMap::new();
    let mut clock_ms = 0i64;
    for (p, n) in &dt.nodes {
        let mut stat = n.stat;
        stat.data_length = n.data.as_ref().map_or(0, |d| d.len() as i32);
        stat.num_children = n.children.len() as i32;
        clock_ms = clock_ms.max(stat.mtime).max(stat.ctime);
        nodes.insert(
            Arc::<str>::from(p.as_str()),
            tree::Node {
                data: n.data.clone().map(Bytes::from),
                acl: Arc::new(n.acl.clone()),
                stat,
                children: tree::Children::new(),
            },
        );
    }
    m.tree.nodes = nodes;
    m.tree.sessions = imbl::OrdMap::new();
    m.tree.reapable = imbl::OrdSet::new();
    for (&id, &timeout) in &dt.sessions {
        m.tree.create_session(id, timeout, zookeeper_password(id));
    }
    m.applied_slot = 1;
    m.applied_zxid = dt.zxid;
    m.clock_ms = clock_ms;
    let state = m.snapshot_view()();
    (state, dt.nodes.len(), dt.sessions.len())
}
