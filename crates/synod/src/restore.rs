//! Seeding a new node's data directory from a backup file: the ZooKeeper group's log begins
//! with the backup's state as its snapshot, so the node starts serving the backed-up tree.
//!
//! Every node of the new cluster is seeded from the same file with the same protocol, and so
//! gets the same snapshot at the same position, with an empty log after it: the replicas agree
//! from the first election. The position is chosen so that the zxids the new cluster gives out
//! are above every zxid in the tree (clients that remember a zxid are not refused):
//!
//! * **Zab**: the snapshot's tag is the backup's zxid itself, and the hard state says its epoch
//!   was accepted and current, so the first election starts the epoch after it.
//! * **PFT Paxos and Mencius**: the zxid of a position is `n << 16 | 0xFFFF` for batch (or
//!   instance) `n` done: the snapshot closes the first `n` above the backup's zxid (an
//!   instance at least the cluster size for Mencius, whose instances start there), and the
//!   cores resume after it, as after a snapshot they took themselves.
//!
//! Sessions are kept (id, timeout, password): every new leader gives each session a full
//! timeout of grace, so a client that reconnects in time keeps its session, and the ephemerals
//! of the others expire as after a ZooKeeper restart.

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use std::path::{Path, PathBuf};
use synod_core::wire::Wire;
use synod_core::{LogRecord, Position, Snapshot, StorageOp};
use synod_log::{FsyncPolicy, Wal, WalOptions};
use synod_server::config::Config;
use synod_server::protocol::{Family, Zxids};
use synod_zk::backup::Backup;
use synod_zk::machine::ZkMachine;

/// The position and zxid the restored snapshot takes under `family` (`members` replicas).
pub fn target(family: Family, slot: u64, zxid: i64, members: usize) -> (Position, i64) {
    let slot = slot.max(1);
    let zxid = zxid.max(0);
    match family {
        Family::Zab => (
            Position {
                slot,
                tag: zxid as u64,
            },
            zxid,
        ),
        Family::Paxos | Family::Mencius => {
            let mut n = (zxid as u64 >> 16) + 1;
            if family == Family::Mencius {
                n = n.max(members as u64);
            }
            let tag = n << 16;
            (Position { slot, tag }, Zxids::PaxosBatch.zxid(tag))
        }
    }
}

/// The backup's state as a machine (checked: a state that does not decode is refused here,
/// not at the new cluster's first start).
pub fn machine(b: &Backup) -> Result<ZkMachine> {
    let mut m = ZkMachine::default();
    m.restore(b.header.slot, b.state.clone())
        .map_err(|e| anyhow!("the backup's state cannot be read: {e}"))?;
    if m.tree.get("/").is_none() {
        bail!(
            "the backup's tree has no root node: not a backup synod or ZooKeeper could have made"
        );
    }
    if m.applied_zxid != b.header.zxid {
        bail!(
            "the backup's header says zxid {:#x} but its state is at {:#x}",
            b.header.zxid,
            m.applied_zxid
        );
    }
    Ok(m)
}

/// What a data directory holds that a restore would replace.
fn occupied(data_dir: &Path) -> Result<Vec<PathBuf>> {
    let wal = data_dir.join("wal");
    let mut found = Vec::new();
    if let Ok(rd) = std::fs::read_dir(&wal) {
        for e in rd {
            found.push(
                e.with_context(|| format!("cannot list {}", wal.display()))?
                    .path(),
            );
        }
    }
    let id = data_dir.join(synod_server::IDENTITY_FILE);
    if id.exists() {
        found.push(id);
    }
    Ok(found)
}

/// Seed `cfg`'s data directory from backup `b`. Refuses a directory that holds a log (or an
/// identity) unless `force`, which removes them first.
pub fn seed(cfg: &Config, b: &Backup, force: bool) -> Result<(Position, i64)> {
    let family = Family::of(&cfg.protocol)
        .ok_or_else(|| anyhow!("'{}' is not a protocol of this server", cfg.protocol))?;
    let mut m = machine(b)?;
    let found = occupied(&cfg.data_dir)?;
    if !found.is_empty() {
        if !force {
            bail!(
                "{} is not empty ({} and {} more): a restore seeds a NEW node. Stop the node \
                 and pass --force to replace its log, or point data_dir elsewhere",
                cfg.data_dir.display(),
                found[0].display(),
                found.len() - 1
            );
        }
        for p in &found {
            let r = if p.is_dir() {
                std::fs::remove_dir_all(p)
            } else {
                std::fs::remove_file(p)
            };
            r.with_context(|| format!("cannot remove {}", p.display()))?;
        }
    }
    let members = cfg.members()?.len();
    let (at, zxid) = target(family, b.header.slot, b.header.zxid, members);
    m.applied_slot = at.slot;
    m.applied_zxid = zxid;
    let data: Bytes = m.snapshot_view()();
    let snapshot = Snapshot { at, data };
    let opts = WalOptions {
        dir: cfg.data_dir.join("wal"),
        segment_bytes: cfg.limits.segment_bytes,
        preallocate_bytes: 0,
        fsync: FsyncPolicy::Always,
    };
    match family {
        Family::Zab => {
            let epoch = (zxid as u64 >> 32) as u32;
            let hard = synod_zab::Hard {
                accepted_epoch: epoch,
                current_epoch: epoch,
                ..Default::default()
            };
            write::<synod_zab::Entry, synod_zab::Hard>(opts, Some(hard), snapshot)?
        }
        Family::Paxos => write::<synod_paxos::Accepted, synod_paxos::Hard>(opts, None, snapshot)?,
        Family::Mencius => write::<synod_mencius::Rec, synod_mencius::Hard>(opts, None, snapshot)?,
    }
    Ok((at, zxid))
}

/// Write group 0's first records: the hard state (if any) and the snapshot that replaces the
/// log.
fn write<R: LogRecord + Wire, H: Wire>(
    opts: WalOptions,
    hard: Option<H>,
    snapshot: Snapshot,
) -> Result<()> {
    let dir = opts.dir.clone();
    let (mut wal, recovery) = Wal::open(opts)
        .with_context(|| format!("cannot open a write-ahead log in {}", dir.display()))?;
    if recovery.records != 0 {
        bail!("{} already holds a log", dir.display());
    }
    let at = snapshot.at;
    let mut ops: Vec<StorageOp<R, H>> = Vec::new();
    if let Some(h) = hard {
        ops.push(StorageOp::SetHard(h));
    }
    ops.push(StorageOp::Snapshot {
        snapshot,
        drop_through: at,
        replace_log: true,
    });
    let ops: Vec<_> = ops.iter().map(|o| synod_log::typed::encode(0, o)).collect();
    wal.write_batch(&ops)
        .with_context(|| format!("cannot write the log in {}", dir.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restored_zxids_stay_above_the_backups() {
        for family in [Family::Zab, Family::Paxos, Family::Mencius] {
            for zxid in [0i64, 1, 0xFFFF, 0x1_0000_0023, 0x7_0000_ffff] {
                let (at, z) = target(family, 0, zxid, 3);
                assert!(z >= zxid, "{family:?} {zxid:#x} -> {z:#x}");
                assert!(at.slot >= 1);
                let zx = family.zxids();
                assert_eq!(zx.zxid(at.tag), z, "{family:?}: the tag maps to the zxid");
            }
        }
        // Mencius never resumes below the instances it uses.
        let (at, _) = target(Family::Mencius, 5, 0, 5);
        assert!(at.tag >> 16 >= 5);
    }
}
