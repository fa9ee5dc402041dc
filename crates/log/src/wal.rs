//! The write-ahead log of one process: every group's storage ops, tagged with the group, in one
//! sequence of segment files, so that one `fdatasync` makes a batch of many groups durable.
//!
//! **Compaction without rewriting.** A snapshot op does not rewrite anything: the log tracks,
//! for every segment, the highest key of each group's records in it that are still live (not
//! truncated away, not replaced by a state transfer). Once every group has compacted past
//! everything it holds in the oldest segment, that segment is unlinked. Each segment starts
//! with a checkpoint of every group's hard state, snapshot reference and log base, so the
//! deleted segments' hard-state writes and snapshot ops are not needed on replay.
//!
//! **Snapshots** live in their own files (`snap-g<group>-<slot>.snap`), written and fsynced
//! before the op that names them; an op names a file with its length and CRC32C. Only the
//! latest snapshot of each group is kept.

use crate::segment::{
    encode_record, fsync_dir, header_payload, list_segments, old_format_files, parse_snapshot_name,
    read_records, segment_name, snapshot_name, write_file_durably, FORMAT, MAGIC, T_APPEND,
    T_CHECKPOINT, T_HARD, T_HEADER, T_SNAPSHOT, T_TRUNCATE,
};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use synod_core::wire::{get_bool, get_bytes, get_u16, get_u32, get_u64, get_u8, Wire, WireError};
use synod_core::{GroupId, Position, Snapshot};

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

/// A snapshot file as an op names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapRef {
    pub at: Position,
    pub len: u64,
    pub crc: u32,
}

/// The body of one storage op, encoded by the group that owns it (see [`crate::typed`]).
#[derive(Clone, Debug)]
pub enum OpBody {
    /// The group's hard state.
    Hard(Bytes),
    /// Records (an encoded `Vec<R>`), and the highest key among them.
    Append {
        records: Bytes,
        max_key: Option<u64>,
    },
    Truncate {
        after_key: u64,
    },
    Snapshot {
        snapshot: Snapshot,
        drop_through: Position,
        /// `R::key_of(drop_through)`: records at or below it are dropped.
        drop_key: u64,
        replace_log: bool,
    },
}

/// One storage op of one group.
#[derive(Clone, Debug)]
pub struct WalOp {
    pub group: GroupId,
    pub body: OpBody,
}

/// One op read back, for its group to decode.
#[derive(Clone, Debug)]
pub enum Replayed {
    Hard(Bytes),
    /// Records (an encoded `Vec<R>`) and the highest key among them.
    Append {
        records: Bytes,
        max_key: Option<u64>,
    },
    Truncate {
        after_key: u64,
    },
    Snapshot {
        snap: SnapRef,
        drop_through: Position,
        drop_key: u64,
        replace_log: bool,
    },
    /// The group's state when a segment started (earlier segments may be gone): hard state,
    /// snapshot, log base. Records are untouched, except that none at or below `drop_key` live.
    Checkpoint {
        hard: Option<Bytes>,
        snap: Option<SnapRef>,
        log_base: Position,
        drop_key: Option<u64>,
    },
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
}

/// What the log keeps of each group to write checkpoints and decide what may be deleted.
#[derive(Clone, Debug, Default)]
struct Mirror {
    hard: Option<Bytes>,
    snap: Option<SnapRef>,
    log_base: Position,
    /// The key the group compacted through: its records at or below it are gone.
    drop_key: Option<u64>,
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
    mirrors: BTreeMap<GroupId, Mirror>,
    /// For every segment, the highest key of every group's records in it that may still live.
    live: BTreeMap<u64, BTreeMap<GroupId, u64>>,
    /// Bytes of records in every segment.
    sizes: BTreeMap<u64, u64>,
}

impl Wal {
    /// Open (creating if needed) the log in `opts.dir` and replay it.
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
        let mut mirrors: BTreeMap<GroupId, Mirror> = BTreeMap::new();
        let mut live: BTreeMap<u64, BTreeMap<GroupId, u64>> = BTreeMap::new();
        let mut sizes = BTreeMap::new();
        let segments = list_segments(&opts.dir)?;
        let mut broken_at: Option<usize> = None;
        let mut last_good = 0u64;
        for (i, (index, path)) in segments.iter().enumerate() {
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
                    Decoded::Header(format) if n == 0 && format == FORMAT => {}
                    Decoded::Header(format) => {
                        return Err(WalError::Corrupt(format!(
                            "{}: log format {format}, this version reads format {FORMAT}",
                            path.display()
                        )))
                    }
                    Decoded::Op(_, _) if n == 0 => {
                        return Err(WalError::Corrupt(format!(
                            "{}: the segment does not start with a synod log header",
                            path.display()
                        )))
                    }
                    Decoded::Op(group, op) => {
                        note(&mut mirrors, &mut live, *index, group, &op);
                        rec.groups.entry(group).or_default().push(op);
                        rec.records += 1;
                    }
                }
            }
            sizes.insert(*index, good as u64);
            live.entry(*index).or_default();
            last_good = good as u64;
            if let Some(problem) = problem {
                rec.warnings.push(format!(
                    "{}: {problem} at offset {good}; the log ends there ({} bytes dropped)",
                    path.display(),
                    data.len() - good
                ));
                let f = OpenOptions::new().write(true).open(path)?;
                f.set_len(good as u64)?;
                f.sync_all()?;
                broken_at = Some(i);
                break;
            }
        }
        if let Some(i) = broken_at {
            for (index, path) in &segments[i + 1..] {
                rec.warnings.push(format!(
                    "{}: removed, it follows a damaged record",
                    path.display()
                ));
                fs::remove_file(path)?;
                live.remove(index);
            }
            fsync_dir(&opts.dir)?;
        }
        let index = match broken_at {
            Some(i) => segments[i].0,
            None => segments.last().map_or(1, |s| s.0),
        };
        let path = opts.dir.join(segment_name(index));
        let segment = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)?;
        let allocated = segment.metadata()?.len();
        live.entry(index).or_default();
        let segment = Arc::new(segment);
        let ahead = crate::ahead::Ahead::new(opts.preallocate_bytes);
        ahead.segment(segment.clone(), index, allocated);
        let mut wal = Wal {
            opts,
            segment,
            segment_index: index,
            segment_bytes: if segments.is_empty() { 0 } else { last_good },
            ahead,
            deleter: Deleter::new(),
            mirrors,
            live,
            sizes,
        };
        if wal.segment_bytes == 0 {
            // A new log, or a last segment whose header never became durable: start it again.
            let mut buf = BytesMut::new();
            encode_record(&header_payload(), &mut buf);
            wal.append(&buf)?;
            wal.segment.sync_data()?;
            fsync_dir(&wal.opts.dir)?;
        }
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

    /// Write a batch of ops (of any groups) and make them durable with one sync.
    pub fn write_batch(&mut self, ops: &[WalOp]) -> Result<BatchStats, WalError> {
        let mut buf = BytesMut::new();
        let mut payload = BytesMut::new();
        let mut compacted = false;
        for op in ops {
            payload.clear();
            if let OpBody::Snapshot { snapshot, .. } = &op.body {
                self.ensure_snapshot_file(op.group, snapshot)?;
                compacted = true;
            }
            if matches!(op.body, OpBody::Truncate { .. }) {
                compacted = true;
            }
            encode_op(op, &mut payload);
            encode_record(&payload, &mut buf);
        }
        self.append(&buf)?;
        self.sync()?;
        let index = self.segment_index;
        for op in ops {
            let replayed = replayed_of(&op.body);
            note(
                &mut self.mirrors,
                &mut self.live,
                index,
                op.group,
                &replayed,
            );
        }
        let mut stats = BatchStats {
            records: ops.len(),
            bytes: buf.len(),
            segments_deleted: 0,
        };
        if self.segment_bytes >= self.opts.segment_bytes {
            self.roll()?;
            compacted = true;
        }
        if compacted {
            stats.segments_deleted = self.delete_dead_segments()?;
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

    /// Close the current segment and start the next with a header and every group's
    /// checkpoint, durably.
    fn roll(&mut self) -> Result<(), WalError> {
        let index = self.segment_index + 1;
        let path = self.opts.dir.join(segment_name(index));
        let next = Arc::new(
            OpenOptions::new()
                .create(true)
                .truncate(true)
                .read(true)
                .write(true)
                .open(&path)?,
        );
        // The helper moves to the new segment once no fill of the old one runs.
        self.ahead.segment(next.clone(), index, 0);
        let old = std::mem::replace(&mut self.segment, next);
        // Give the closed segment's padding back (if this is lost in a crash, the padding is
        // still zeros, which replay reads as the segment's clean end).
        let _ = old.set_len(self.segment_bytes);
        self.segment_index = index;
        self.segment_bytes = 0;
        self.live.entry(index).or_default();
        let mut buf = BytesMut::new();
        encode_record(&header_payload(), &mut buf);
        let mut payload = BytesMut::new();
        for (&group, m) in &self.mirrors {
            payload.clear();
            encode_checkpoint(group, m, &mut payload);
            encode_record(&payload, &mut buf);
        }
        self.append(&buf)?;
        self.segment.sync_data()?;
        fsync_dir(&self.opts.dir)?;
        Ok(())
    }

    /// Unlink the oldest segments while no group has a live record in them. The files are
    /// unlinked by the deleter thread (freeing a 64 MiB file takes milliseconds, which the WAL
    /// thread must not spend: every write waits for it); a crash before they are gone leaves
    /// dead segments that replay reads and every group's later checkpoint supersedes.
    fn delete_dead_segments(&mut self) -> Result<usize, WalError> {
        let mut dead_files = Vec::new();
        while let Some((&index, groups)) = self.live.iter().next() {
            if index >= self.segment_index {
                break;
            }
            let dead = groups.iter().all(|(g, &k)| {
                self.mirrors
                    .get(g)
                    .and_then(|m| m.drop_key)
                    .is_some_and(|d| k <= d)
            });
            if !dead {
                break;
            }
            dead_files.push(self.opts.dir.join(segment_name(index)));
            self.live.remove(&index);
            self.sizes.remove(&index);
        }
        let deleted = dead_files.len();
        self.deleter.remove(dead_files);
        Ok(deleted)
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
                .mirrors
                .get(&g)
                .and_then(|m| m.snap.as_ref())
                .map(|s| s.at.slot);
            if keep.is_some_and(|k| slot < k) {
                stale.push(e.path());
            }
        }
        self.deleter.remove(stale);
        Ok(())
    }

    /// Wait until every file the log asked to unlink is gone (tests, and a clean close).
    pub fn settle(&self) {
        self.deleter.settle();
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

/// Record what an op does to the group's mirror and to the live keys of each segment.
fn note(
    mirrors: &mut BTreeMap<GroupId, Mirror>,
    live: &mut BTreeMap<u64, BTreeMap<GroupId, u64>>,
    segment: u64,
    group: GroupId,
    op: &Replayed,
) {
    let m = mirrors.entry(group).or_default();
    match op {
        Replayed::Hard(h) => m.hard = Some(h.clone()),
        Replayed::Append { max_key, .. } => {
            if let Some(k) = max_key {
                let e = live.entry(segment).or_default().entry(group).or_insert(*k);
                *e = (*e).max(*k);
            }
        }
        Replayed::Truncate { after_key } => {
            // Records above the cut are gone from every segment.
            for keys in live.values_mut() {
                if let Some(k) = keys.get_mut(&group) {
                    *k = (*k).min(*after_key);
                }
            }
        }
        Replayed::Snapshot {
            snap,
            drop_through,
            drop_key,
            replace_log,
        } => {
            if *replace_log {
                // A state transfer replaces every record the group had.
                for keys in live.values_mut() {
                    keys.remove(&group);
                }
                m.log_base = snap.at;
            } else if drop_through.slot > m.log_base.slot {
                m.log_base = *drop_through;
            }
            m.drop_key = Some(m.drop_key.map_or(*drop_key, |d| d.max(*drop_key)));
            m.snap = Some(snap.clone());
        }
        Replayed::Checkpoint {
            hard,
            snap,
            log_base,
            drop_key,
        } => {
            *m = Mirror {
                hard: hard.clone(),
                snap: snap.clone(),
                log_base: *log_base,
                drop_key: *drop_key,
            };
        }
    }
}

fn replayed_of(body: &OpBody) -> Replayed {
    match body {
        OpBody::Hard(h) => Replayed::Hard(h.clone()),
        OpBody::Append { records, max_key } => Replayed::Append {
            records: records.clone(),
            max_key: *max_key,
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
            snap: SnapRef {
                at: snapshot.at,
                len: snapshot.data.len() as u64,
                crc: crc32c::crc32c(&snapshot.data),
            },
            drop_through: *drop_through,
            drop_key: *drop_key,
            replace_log: *replace_log,
        },
    }
}

fn encode_op(op: &WalOp, p: &mut BytesMut) {
    match &op.body {
        OpBody::Hard(h) => {
            p.put_u8(T_HARD);
            p.put_u32(op.group);
            p.put_slice(h);
        }
        OpBody::Append { records, max_key } => {
            p.put_u8(T_APPEND);
            p.put_u32(op.group);
            put_opt_u64(p, *max_key);
            p.put_slice(records);
        }
        OpBody::Truncate { after_key } => {
            p.put_u8(T_TRUNCATE);
            p.put_u32(op.group);
            p.put_u64(*after_key);
        }
        OpBody::Snapshot {
            snapshot,
            drop_through,
            drop_key,
            replace_log,
        } => {
            p.put_u8(T_SNAPSHOT);
            p.put_u32(op.group);
            put_snap_ref(
                p,
                &SnapRef {
                    at: snapshot.at,
                    len: snapshot.data.len() as u64,
                    crc: crc32c::crc32c(&snapshot.data),
                },
            );
            drop_through.encode(p);
            p.put_u64(*drop_key);
            p.put_u8(*replace_log as u8);
        }
    }
}

fn encode_checkpoint(group: GroupId, m: &Mirror, p: &mut BytesMut) {
    p.put_u8(T_CHECKPOINT);
    p.put_u32(group);
    match &m.hard {
        Some(h) => {
            p.put_u8(1);
            synod_core::wire::put_bytes(p, h);
        }
        None => p.put_u8(0),
    }
    match &m.snap {
        Some(s) => {
            p.put_u8(1);
            put_snap_ref(p, s);
        }
        None => p.put_u8(0),
    }
    m.log_base.encode(p);
    put_opt_u64(p, m.drop_key);
}

fn put_opt_u64(p: &mut BytesMut, v: Option<u64>) {
    match v {
        Some(k) => {
            p.put_u8(1);
            p.put_u64(k);
        }
        None => p.put_u8(0),
    }
}

fn get_opt_u64(b: &mut Bytes) -> Result<Option<u64>, WireError> {
    Ok(if get_bool(b)? {
        Some(get_u64(b)?)
    } else {
        None
    })
}

fn put_snap_ref(p: &mut BytesMut, s: &SnapRef) {
    s.at.encode(p);
    p.put_u64(s.len);
    p.put_u32(s.crc);
}

fn get_snap_ref(b: &mut Bytes) -> Result<SnapRef, WireError> {
    Ok(SnapRef {
        at: Position::decode(b)?,
        len: get_u64(b)?,
        crc: get_u32(b)?,
    })
}

enum Decoded {
    Header(u16),
    Op(GroupId, Replayed),
}

fn decode(mut b: Bytes) -> Result<Decoded, WireError> {
    let t = get_u8(&mut b)?;
    if t == T_HEADER {
        if b.remaining() < MAGIC.len() || &b[..MAGIC.len()] != MAGIC {
            return Err(WireError::Invalid("log header magic"));
        }
        b.advance(MAGIC.len());
        let format = get_u16(&mut b)?;
        return Ok(Decoded::Header(format));
    }
    let group = get_u32(&mut b)?;
    let op = match t {
        T_HARD => Replayed::Hard(std::mem::take(&mut b)),
        T_APPEND => Replayed::Append {
            max_key: get_opt_u64(&mut b)?,
            records: std::mem::take(&mut b),
        },
        T_TRUNCATE => Replayed::Truncate {
            after_key: get_u64(&mut b)?,
        },
        T_SNAPSHOT => Replayed::Snapshot {
            snap: get_snap_ref(&mut b)?,
            drop_through: Position::decode(&mut b)?,
            drop_key: get_u64(&mut b)?,
            replace_log: get_bool(&mut b)?,
        },
        T_CHECKPOINT => {
            let hard = if get_bool(&mut b)? {
                Some(get_bytes(&mut b, "hard state", 1 << 20)?)
            } else {
                None
            };
            let snap = if get_bool(&mut b)? {
                Some(get_snap_ref(&mut b)?)
            } else {
                None
            };
            Replayed::Checkpoint {
                hard,
                snap,
                log_base: Position::decode(&mut b)?,
                drop_key: get_opt_u64(&mut b)?,
            }
        }
        _ => return Err(WireError::Invalid("record type")),
    };
    if b.has_remaining() && !matches!(op, Replayed::Hard(_) | Replayed::Append { .. }) {
        return Err(WireError::Trailing(b.remaining()));
    }
    Ok(Decoded::Op(group, op))
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

/// A thread that unlinks files and then syncs their directory, in the order asked.
struct Deleter {
    tx: Option<std::sync::mpsc::Sender<DeleteJob>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

enum DeleteJob {
    Remove(Vec<PathBuf>),
    Settle(std::sync::mpsc::SyncSender<()>),
}

impl Deleter {
    fn new() -> Self {
        let (tx, rx) = std::sync::mpsc::channel::<DeleteJob>();
        let thread = std::thread::Builder::new()
            .name("synod-wal-unlink".into())
            .spawn(move || {
                for job in rx {
                    match job {
                        DeleteJob::Remove(paths) => {
                            // A file that cannot be unlinked stays: replay reads a dead segment
                            // harmlessly, and an old snapshot file is only space.
                            for p in &paths {
                                let _ = fs::remove_file(p);
                            }
                            if let Some(dir) = paths.first().and_then(|p| p.parent()) {
                                let _ = fsync_dir(dir);
                            }
                        }
                        DeleteJob::Settle(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            })
            .expect("spawn the unlink thread");
        Deleter {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    fn remove(&self, paths: Vec<PathBuf>) {
        if paths.is_empty() {
            return;
        }
        if let Some(tx) = &self.tx {
            let _ = tx.send(DeleteJob::Remove(paths));
        }
    }

    fn settle(&self) {
        let (done, wait) = std::sync::mpsc::sync_channel(1);
        if let Some(tx) = &self.tx {
            if tx.send(DeleteJob::Settle(done)).is_ok() {
                let _ = wait.recv();
            }
        }
    }
}

impl Drop for Deleter {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
