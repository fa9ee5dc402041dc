//! The write-ahead log of one process: every group's storage ops, tagged with the group, in one
//! sequence of segment files, so that one `fdatasync` makes a batch of many groups durable.
//!
//! **Compaction without rewriting the log.** The log keeps an exact index of every group's
//! live records and where they are ([`index`]), following every op as
//! `DurableState::apply` does. A segment that holds no live record is unlinked (by a thread of
//! its own: [`crate::deleter`]). Every segment starts with a checkpoint of every group's hard
//! state, snapshot reference and log base, so the ops of unlinked segments are not needed.
//!
//! **Light groups never pin the log.** A group that writes little and never compacts would keep
//! its first segment, and every later one, alive. When the oldest segment is held only by
//! groups whose live records are small (at most an eighth of a segment), the log copies those
//! records forward into the current segment and unlinks the old one. A heavy group holds the
//! segments of its own retained log, as a single-group log would.
//!
//! **Every start begins a new segment**, written with complete checkpoints and synced before
//! anything else: the segment found last may have been torn while it was being started, or
//! hold bytes past its clean end that a crash left there, and it is never written again.
//!
//! **Snapshots** live in their own files (`snap-g<group>-<slot>.snap`), written and synced
//! before the op that names them; an op names a file with its length and CRC32C.

mod index;
mod ops;

pub use ops::{OpBody, Replayed, SnapRef, WalOp};

use crate::deleter::Deleter;
use crate::segment::{
    check_format, encode_record, fsync_dir, header_payload, list_segments, old_format_files,
    parse_snapshot_name, read_records, segment_name, snapshot_name, write_file_durably,
};
use bytes::{Bytes, BytesMut};
use index::{Index, Loc};
use ops::{decode, encode_checkpoint, encode_op, Decoded};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use synod_core::{GroupId, Snapshot};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// fdatasync after every batch: nothing acknowledged is lost on power failure.
    Always,
    /// Never fsync (benchmarks of the rest of the system only: a crash of the machine loses
    /// acknowledged writes).
    Never,
}

#[derive(Clone, Debug)]
pub struct WalOptions {
    pub dir: PathBuf,
    /// A segment is closed and a new one started beyond this size.
    pub segment_bytes: u64,
    pub fsync: FsyncPolicy,
    /// Zero-filled space kept ahead of the log's end, written and synced by a helper thread
    /// (0: none; see [`crate::ahead`]). A zero record header marks the end of the log.
    pub preallocate_bytes: u64,
}

#[derive(Debug)]
pub enum WalError {
    Io(io::Error),
    /// Unrecoverable: a snapshot the log refers to is missing or damaged.
    Snapshot(String),
    /// A record passed its checksum but cannot be read: written by another format or version,
    /// or damaged before it was checksummed. Refusing is safer than dropping it.
    Corrupt(String),
}

impl std::fmt::Display for WalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WalError::Io(e) => write!(f, "{e}"),
            WalError::Snapshot(s) | WalError::Corrupt(s) => write!(f, "{s}"),
        }
    }
}

impl std::error::Error for WalError {}

impl From<io::Error> for WalError {
    fn from(e: io::Error) -> Self {
        WalError::Io(e)
    }
}

/// What recovery found.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Records replayed.
    pub records: u64,
    /// Human-readable reports of what was dropped (torn or corrupt tails).
    pub warnings: Vec<String>,
    /// Every group's ops, in order.
    pub groups: BTreeMap<GroupId, Vec<Replayed>>,
}

/// What one batch cost.
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchStats {
    pub records: usize,
    pub bytes: usize,
    /// Segments unlinked after the batch.
    pub segments_deleted: usize,
    /// Live records of light groups copied forward so that an old segment could go.
    pub records_carried: usize,
}

pub struct Wal {
    opts: WalOptions,
    segment: Arc<File>,
    segment_index: u64,
    segment_bytes: u64,
    /// Keeps zeros ahead of the log's end.
    ahead: crate::ahead::Ahead,
    /// Unlinks dead segments and old snapshot files off the write path.
    deleter: Deleter,
    index: Index,
    /// Bytes of records in every segment on disk.
    sizes: BTreeMap<u64, u64>,
}

impl Wal {
    /// Open (creating if needed) the log in `opts.dir`, replay it, and start a new segment.
    pub fn open(opts: WalOptions) -> Result<(Self, Recovery), WalError> {
        fs::create_dir_all(&opts.dir)?;
        let old = old_format_files(&opts.dir)?;
        if !old.is_empty() {
            return Err(WalError::Corrupt(format!(
                "{} holds a log of an earlier synod format ({}); this version cannot read it. \
                 Start the node with an empty data directory: it will recover from its peers.",
                opts.dir.display(),
                old[0].display()
            )));
        }
        let mut rec = Recovery::default();
        let mut index = Index::default();
        let mut sizes = BTreeMap::new();
        let segments = list_segments(&opts.dir)?;
        for (i, (seg, path)) in segments.iter().enumerate() {
            let mut data = Vec::new();
            File::open(path)?.read_to_end(&mut data)?;
            let data = Bytes::from(data);
            let (records, good, problem) = read_records(&data);
            for (n, r) in records.iter().enumerate() {
                let op = decode(r.payload.clone()).map_err(|e| {
                    WalError::Corrupt(format!(
                        "{} offset {}: a record with a valid checksum cannot be read ({e})",
                        path.display(),
                        r.offset
                    ))
                })?;
                match op {
                    Decoded::Header(format) if n == 0 => {
                        check_format(path, format).map_err(WalError::Corrupt)?
                    }
                    Decoded::Header(format) => {
                        return Err(WalError::Corrupt(format!(
                            "{} offset {}: a second log header (format {format})",
                            path.display(),
                            r.offset
                        )))
                    }
                    Decoded::Op(_, _) if n == 0 => {
                        return Err(WalError::Corrupt(format!(
                            "{}: the segment does not start with a synod log header",
                            path.display()
                        )))
                    }
                    Decoded::Op(group, op) => {
                        if let Replayed::Append { records } = &op {
                            let base = data.as_ptr() as usize;
                            index.put(
                                group,
                                records.iter().map(|(key, bytes)| {
                                    let loc = Loc {
                                        segment: *seg,
                                        offset: (bytes.as_ptr() as usize - base) as u64,
                                        len: bytes.len() as u32,
                                        crc: crc32c::crc32c(bytes),
                                    };
                                    (*key, loc)
                                }),
                            );
                        } else {
                            index.apply(group, &op);
                        }
                        rec.groups.entry(group).or_default().push(op);
                        rec.records += 1;
                    }
                }
            }
            sizes.insert(*seg, good as u64);
            if let Some(problem) = problem {
                // Nothing behind a torn or corrupt record may be applied: the log ends here.
                rec.warnings.push(format!(
                    "{}: {problem} at offset {good}; the log ends there ({} bytes dropped)",
                    path.display(),
                    data.len() - good
                ));
                let f = OpenOptions::new().write(true).open(path)?;
                f.set_len(good as u64)?;
                f.sync_all()?;
                for (s, later) in &segments[i + 1..] {
                    rec.warnings.push(format!(
                        "{}: removed, it follows a damaged record",
                        later.display()
                    ));
                    fs::remove_file(later)?;
                    sizes.remove(s);
                }
                fsync_dir(&opts.dir)?;
                break;
            }
        }
        // Give back the padding of the segments found (the last one's, and whatever a crash
        // left past a clean end: those bytes are never read again, nor written).
        for (seg, &good) in &sizes {
            let path = opts.dir.join(segment_name(*seg));
            if fs::metadata(&path)?.len() > good {
                let f = OpenOptions::new().write(true).open(&path)?;
                f.set_len(good)?;
                f.sync_all()?;
            }
        }
        let next = sizes.keys().next_back().map_or(1, |s| s + 1);
        let segment = Arc::new(create_segment(&opts.dir, next)?);
        let ahead = crate::ahead::Ahead::new(opts.preallocate_bytes);
        ahead.segment(segment.clone(), next, 0);
        let mut wal = Wal {
            opts,
            segment,
            segment_index: next,
            segment_bytes: 0,
            ahead,
            deleter: Deleter::new(),
            index,
            sizes,
        };
        wal.start_segment()?;
        wal.compact_segments()?;
        wal.remove_stale_snapshots(None)?;
        Ok((wal, rec))
    }

    /// Bytes of log on disk (segments only).
    pub fn log_bytes(&self) -> u64 {
        self.sizes.values().sum()
    }

    /// Segment files on disk.
    pub fn segments(&self) -> usize {
        self.sizes.len()
    }

    pub fn dir(&self) -> &Path {
        &self.opts.dir
    }

    /// Read a snapshot file named by an op.
    pub fn load_snapshot(&self, group: GroupId, r: &SnapRef) -> Result<Snapshot, WalError> {
        load_snapshot(&self.opts.dir, group, r)
    }

    /// Wait until every file the log asked to unlink is gone (tests, and a clean close).
    pub fn settle(&self) {
        self.deleter.settle();
    }

    /// Write a batch of ops (of any groups) and make them durable with one sync.
    pub fn write_batch(&mut self, ops: &[WalOp]) -> Result<BatchStats, WalError> {
        let mut buf = BytesMut::new();
        let mut placed = Vec::with_capacity(ops.len());
        let mut compacted = false;
        for op in ops {
            if let OpBody::Snapshot { snapshot, .. } = &op.body {
                self.ensure_snapshot_file(op.group, snapshot)?;
                compacted = true;
            }
            compacted |= matches!(op.body, OpBody::Truncate { .. });
            placed.push(encode_op(op, &mut buf, self.segment_bytes));
        }
        let segment = self.segment_index;
        self.append(&buf)?;
        self.sync()?;
        for (op, placed) in ops.iter().zip(placed) {
            match &op.body {
                OpBody::Append { .. } => self.index.put(op.group, locs(segment, placed)),
                body => self.index.apply(op.group, &replayed_of(body)),
            }
        }
        let mut stats = BatchStats {
            records: ops.len(),
            bytes: buf.len(),
            ..BatchStats::default()
        };
        if self.segment_bytes >= self.opts.segment_bytes {
            self.roll()?;
            compacted = true;
        }
        if compacted {
            let (deleted, carried) = self.compact_segments()?;
            stats.segments_deleted = deleted;
            stats.records_carried = carried;
            for op in ops {
                if matches!(op.body, OpBody::Snapshot { .. }) {
                    self.remove_stale_snapshots(Some(op.group))?;
                }
            }
        }
        Ok(stats)
    }

    /// Write `buf` after the last record (into the zeros the helper keeps ahead, when it is
    /// ahead; the size change, if any, is made durable by the batch's sync).
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let end = self.segment_bytes + buf.len() as u64;
        self.ahead.before_write(end)?;
        self.segment.write_all_at(buf, self.segment_bytes)?;
        self.segment_bytes = end;
        self.sizes.insert(self.segment_index, self.segment_bytes);
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        match self.opts.fsync {
            FsyncPolicy::Always => self.segment.sync_data(),
            FsyncPolicy::Never => Ok(()),
        }
    }

    /// Close the current segment and start the next.
    fn roll(&mut self) -> Result<(), WalError> {
        let index = self.segment_index + 1;
        let next = Arc::new(create_segment(&self.opts.dir, index)?);
        // The helper moves to the new segment once no fill of the old one runs.
        self.ahead.segment(next.clone(), index, 0);
        let old = std::mem::replace(&mut self.segment, next);
        // Give the closed segment's padding back (if this is lost in a crash, the padding is
        // still zeros, which replay reads as the segment's clean end).
        let _ = old.set_len(self.segment_bytes);
        self.segment_index = index;
        self.segment_bytes = 0;
        self.start_segment()
    }

    /// Write the current (empty) segment's header and every group's checkpoint, durably,
    /// before anything else goes into it.
    fn start_segment(&mut self) -> Result<(), WalError> {
        let mut buf = BytesMut::new();
        encode_record(&header_payload(), &mut buf);
        for (&group, g) in &self.index.groups {
            encode_checkpoint(
                group,
                g.hard.as_ref(),
                g.snap.as_ref(),
                g.log_base,
                &mut buf,
            );
        }
        self.append(&buf)?;
        self.segment.sync_data()?;
        fsync_dir(&self.opts.dir)?;
        Ok(())
    }

    /// Unlink the oldest segments while they hold no live record, copying forward the live
    /// records of light groups that hold the oldest one. Returns the segments unlinked and the
    /// records copied.
    fn compact_segments(&mut self) -> Result<(usize, usize), WalError> {
        let light = (self.opts.segment_bytes / 8).max(1);
        let mut dead = Vec::new();
        let mut carried = 0;
        while let Some(&oldest) = self.sizes.keys().next() {
            if oldest >= self.segment_index {
                break;
            }
            if self.index.pinned(oldest) {
                let holders = self.index.pinning(oldest);
                if holders
                    .iter()
                    .any(|g| self.index.groups.get(g).is_none_or(|g| g.bytes > light))
                {
                    break; // a heavy group's own retained log: it frees it by compacting
                }
                carried += self.carry_forward(&holders)?;
                if self.index.pinned(oldest) {
                    break;
                }
            }
            dead.push(self.opts.dir.join(segment_name(oldest)));
            self.sizes.remove(&oldest);
            self.index.forget(oldest);
        }
        let deleted = dead.len();
        self.deleter.remove(dead);
        Ok((deleted, carried))
    }

    /// Copy every live record of `groups` into the current segment, durably, so that older
    /// segments no longer hold any of them. Each record is read back and checked against the
    /// CRC32C it had when written: a record the disk damaged since is refused, not copied.
    fn carry_forward(&mut self, groups: &[GroupId]) -> Result<usize, WalError> {
        use std::os::unix::fs::FileExt;
        let mut files: BTreeMap<u64, File> = BTreeMap::new();
        let mut ops = Vec::new();
        for &group in groups {
            let Some(g) = self.index.groups.get(&group) else {
                continue;
            };
            let mut records = Vec::with_capacity(g.records.len());
            for (&key, loc) in &g.records {
                let file = match files.entry(loc.segment) {
                    std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::btree_map::Entry::Vacant(e) => {
                        e.insert(File::open(self.opts.dir.join(segment_name(loc.segment)))?)
                    }
                };
                let mut bytes = vec![0u8; loc.len as usize];
                file.read_exact_at(&mut bytes, loc.offset)?;
                if crc32c::crc32c(&bytes) != loc.crc {
                    return Err(WalError::Corrupt(format!(
                        "{} offset {}: a live record of group {group} changed on disk since it \
                         was written",
                        segment_name(loc.segment),
                        loc.offset
                    )));
                }
                records.push((key, Bytes::from(bytes)));
            }
            ops.push(WalOp {
                group,
                body: OpBody::Append { records },
            });
        }
        let mut buf = BytesMut::new();
        let placed: Vec<_> = ops
            .iter()
            .map(|op| encode_op(op, &mut buf, self.segment_bytes))
            .collect();
        let segment = self.segment_index;
        self.append(&buf)?;
        self.segment.sync_data()?;
        let mut n = 0;
        for (op, placed) in ops.iter().zip(placed) {
            n += placed.len();
            self.index.put(op.group, locs(segment, placed));
        }
        Ok(n)
    }

    /// Remove snapshot files (of `group`, or of every group) older than the one each group's
    /// state names, and leftovers of interrupted writes. Newer files are left alone: the host
    /// writes a snapshot's file before it offers the snapshot, so a newer file may be about to
    /// be named by an op.
    fn remove_stale_snapshots(&self, group: Option<GroupId>) -> io::Result<()> {
        let mut stale = Vec::new();
        for e in fs::read_dir(&self.opts.dir)? {
            let e = e?;
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("snap-") && name.ends_with(".tmp") && group.is_none() {
                stale.push(e.path());
                continue;
            }
            let Some((g, slot)) = parse_snapshot_name(&name) else {
                continue;
            };
            if group.is_some_and(|only| only != g) {
                continue;
            }
            let keep = self
                .index
                .groups
                .get(&g)
                .and_then(|x| x.snap.as_ref())
                .map(|s| s.at.slot);
            if keep.is_some_and(|k| slot < k) {
                stale.push(e.path());
            }
        }
        self.deleter.remove(stale);
        Ok(())
    }

    /// Make sure the snapshot's file exists: the host writes it (durably) before it offers the
    /// snapshot to the core; a snapshot received from a peer is written here.
    fn ensure_snapshot_file(&self, group: GroupId, s: &Snapshot) -> io::Result<()> {
        let name = snapshot_name(group, s.at.slot);
        let path = self.opts.dir.join(&name);
        if fs::metadata(&path).is_ok_and(|m| m.len() == s.data.len() as u64) {
            return Ok(());
        }
        write_file_durably(&self.opts.dir, &name, &s.data)
    }
}

/// A record of `op` as the log would write it at the start of a segment (tests craft the
/// bytes a crash could leave behind with it).
#[cfg(test)]
pub(crate) fn encode_stray(op: &WalOp, out: &mut BytesMut) {
    encode_op(op, out, 0);
}

fn create_segment(dir: &Path, index: u64) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.join(segment_name(index)))
}

fn locs(segment: u64, placed: ops::Placed) -> impl Iterator<Item = (u64, Loc)> {
    placed.into_iter().map(move |(key, offset, len, crc)| {
        (
            key,
            Loc {
                segment,
                offset,
                len,
                crc,
            },
        )
    })
}

fn replayed_of(body: &OpBody) -> Replayed {
    match body {
        OpBody::Hard(h) => Replayed::Hard(h.clone()),
        OpBody::Append { records } => Replayed::Append {
            records: records.clone(),
        },
        OpBody::Truncate { after_key } => Replayed::Truncate {
            after_key: *after_key,
        },
        OpBody::Snapshot {
            snapshot,
            drop_through,
            drop_key,
            replace_log,
        } => Replayed::Snapshot {
            snap: SnapRef::of(snapshot),
            drop_through: *drop_through,
            drop_key: *drop_key,
            replace_log: *replace_log,
        },
    }
}

pub(crate) fn load_snapshot(dir: &Path, group: GroupId, r: &SnapRef) -> Result<Snapshot, WalError> {
    let path = dir.join(snapshot_name(group, r.at.slot));
    let data = fs::read(&path).map_err(|e| {
        WalError::Snapshot(format!(
            "the log refers to snapshot {} which cannot be read: {e}",
            path.display()
        ))
    })?;
    if data.len() as u64 != r.len || crc32c::crc32c(&data) != r.crc {
        return Err(WalError::Snapshot(format!(
            "snapshot {} is damaged (length or checksum differs from the log's record)",
            path.display()
        )));
    }
    Ok(Snapshot {
        at: r.at,
        data: Bytes::from(data),
    })
}
