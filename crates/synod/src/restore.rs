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
//! Each family says where its seed stands (`Family::seed`, crates/registry).
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
use synod_registry::{Family, Visit};
use synod_server::config::Config;
use synod_zk::backup::Backup;
use synod_zk::machine::ZkMachine;

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
    if synod_server::protocol::family(&cfg.protocol).is_none() {
        bail!("'{}' is not a protocol of this server", cfg.protocol);
    }
    let m = machine(b)?;
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
    let opts = WalOptions {
        dir: cfg.data_dir.join("wal"),
        segment_bytes: cfg.limits.segment_bytes,
        preallocate_bytes: 0,
        fsync: FsyncPolicy::Always,
    };
    let seeding = Seeding {
        slot: b.header.slot,
        zxid: b.header.zxid,
        members,
        machine: m,
        opts,
    };
    synod_registry::visit(&cfg.protocol, seeding).expect("a protocol of this server")
}

/// The log of a new node of family `F`, seeded with a backup's state.
struct Seeding {
    slot: u64,
    zxid: i64,
    members: usize,
    machine: ZkMachine,
    opts: WalOptions,
}

impl Visit for Seeding {
    type Out = Result<(Position, i64)>;
    fn visit<F: Family>(self, _: &'static str) -> Self::Out {
        let seed = F::seed(self.slot.max(1), self.zxid.max(0), self.members);
        let mut m = self.machine;
        m.applied_slot = seed.at.slot;
        m.applied_zxid = seed.zxid;
        let data: Bytes = m.snapshot_view()();
        let snapshot = Snapshot { at: seed.at, data };
        write::<F::Record, F::Hard>(self.opts, seed.hard, snapshot)?;
        Ok((seed.at, seed.zxid))
    }
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
