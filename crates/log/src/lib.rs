//! synod's write-ahead log.
//!
//! The log stores the storage ops of a protocol core ([`StorageOp`]) so that a restarted replica
//! gets back exactly the [`DurableState`] the simulator models.
//!
//! **On disk** (one directory): segment files `wal-00000001.log`, … holding records, and
//! snapshot files `snap-<slot>.snap` holding state-machine snapshots. A record is
//! `[u32 length][u32 CRC32C of the payload][payload]`, the payload a one-byte type and the op.
//! A snapshot op is a record naming the snapshot file with its length and CRC32C; the file is
//! written and fsynced (then renamed into place) before the record.
//!
//! **Group commit**: [`Wal::write_batch`] encodes every op of a batch into one buffer, writes it
//! with one `write` and makes it durable with one `fdatasync`. The server's WAL thread hands it
//! every op that arrived while the previous batch was being synced.
//!
//! **Recovery** ([`Wal::open`]): segments are replayed in order. The first record that is torn
//! (the file ends inside it) or corrupt (bad length or checksum) ends the log: the segment is
//! truncated there, later segments are removed, and a warning says what was dropped. Nothing
//! behind a bad record is ever applied.
//!
//! **Compaction**: after a snapshot op, a new segment is started with a *reset* record (hard
//! state, snapshot reference, log base) followed by the records the snapshot does not cover;
//! once it is durable, the older segments and snapshot files are deleted. A crash in between
//! leaves old segments that the reset record supersedes on replay.

use bytes::{BufMut, Bytes, BytesMut};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use synod_core::wire::{get_bool, get_u32, get_u64, get_u8, Wire, WireError};
use synod_core::{DurableState, LogRecord, Persist, Position, Snapshot, StorageOp};

/// Largest record accepted on replay (a larger length field is corruption).
pub const MAX_RECORD: u64 = 512 << 20;

const T_HARD: u8 = 1;
const T_APPEND: u8 = 2;
const T_TRUNCATE: u8 = 3;
const T_SNAPSHOT: u8 = 4;
const T_RESET: u8 = 5;

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
    /// Zero-filled space written ahead of the log (0: none). Appending into space that already
    /// exists makes each fdatasync a pure data flush, with no file-size change to flush with it
    /// (measured on the workplace disk: 123 µs against 201 µs for append + fdatasync of 4 KiB;
    /// docs/results/profile.md). A zero record header marks the end of the log.
    pub preallocate_bytes: u64,
}

/// What recovery found, besides the state.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Records replayed.
    pub records: u64,
    /// Human-readable reports of what was dropped (torn or corrupt tails).
    pub warnings: Vec<String>,
}

#[derive(Debug)]
pub enum WalError {
    Io(io::Error),
    /// Unrecoverable: a snapshot the log refers to is missing or damaged.
    Snapshot(String),
}

impl std::fmt::Display for WalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WalError::Io(e) => write!(f, "{e}"),
            WalError::Snapshot(s) => write!(f, "{s}"),
        }
    }
}

impl std::error::Error for WalError {}

impl From<io::Error> for WalError {
    fn from(e: io::Error) -> Self {
        WalError::Io(e)
    }
}

pub struct Wal<R, H> {
    opts: WalOptions,
    segment: File,
    segment_index: u64,
    segment_bytes: u64,
    /// Length of the segment file: `segment_bytes` of records, then zero padding.
    allocated: u64,
    /// The durable state as written, used to write the reset record when compacting.
    mirror: DurableState<R, H>,
    /// Bytes in all segments.
    total_bytes: u64,
    _p: PhantomData<(R, H)>,
}

fn segment_name(index: u64) -> String {
    format!("wal-{index:08}.log")
}

fn snapshot_name(slot: u64) -> String {
    format!("snap-{slot:020}.snap")
}

fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn list(dir: &Path, prefix: &str, suffix: &str) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut v = Vec::new();
    for e in fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(num) = name
            .strip_prefix(prefix)
            .and_then(|r| r.strip_suffix(suffix))
        {
            if let Ok(n) = num.parse::<u64>() {
                v.push((n, e.path()));
            }
        }
    }
    v.sort();
    Ok(v)
}

fn encode_record(payload: &[u8], out: &mut BytesMut) {
    out.put_u32(payload.len() as u32);
    out.put_u32(crc32c::crc32c(payload));
    out.put_slice(payload);
}

struct SnapRef {
    at: Position,
    len: u64,
    crc: u32,
}

impl<R, H> Wal<R, H>
where
    R: LogRecord + Wire,
    H: Wire + Clone + Default,
{
    /// Open (creating if needed) the log in `opts.dir` and replay it.
    pub fn open(opts: WalOptions) -> Result<(Self, DurableState<R, H>, Recovery), WalError> {
        fs::create_dir_all(&opts.dir)?;
        let mut state: DurableState<R, H> = DurableState::default();
        let mut rec = Recovery::default();
        let segments = list(&opts.dir, "wal-", ".log")?;
        let mut broken_at: Option<usize> = None;
        let mut total = 0u64;
        let mut last_good = 0u64;
        for (i, (_, path)) in segments.iter().enumerate() {
            let mut data = Vec::new();
            File::open(path)?.read_to_end(&mut data)?;
            let data = Bytes::from(data);
            let (good, problem) = replay_segment(&opts.dir, &data, &mut state, &mut rec)?;
            total += good as u64;
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
            for (_, path) in &segments[i + 1..] {
                rec.warnings.push(format!(
                    "{}: removed, it follows a damaged record",
                    path.display()
                ));
                fs::remove_file(path)?;
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
        // Appends go after the last good record (a clean log ends at its zero padding).
        let segment_bytes = if segments.is_empty() { 0 } else { last_good };
        if segments.is_empty() {
            fsync_dir(&opts.dir)?;
        }
        let wal = Wal {
            opts,
            segment,
            segment_index: index,
            segment_bytes,
            allocated,
            mirror: state.clone(),
            total_bytes: total.max(segment_bytes),
            _p: PhantomData,
        };
        Ok((wal, state, rec))
    }

    /// Bytes of log on disk (segments only).
    pub fn log_bytes(&self) -> u64 {
        self.total_bytes
    }

    pub fn dir(&self) -> &Path {
        &self.opts.dir
    }

    /// Write a batch of ops and make them durable with one sync.
    pub fn write_batch(&mut self, ops: &[Persist<R, H>]) -> Result<(), WalError> {
        let mut buf = BytesMut::new();
        let mut payload = BytesMut::new();
        let mut compact = false;
        for p in ops {
            payload.clear();
            match &p.op {
                StorageOp::SetHard(h) => {
                    payload.put_u8(T_HARD);
                    h.encode(&mut payload);
                }
                StorageOp::Append(rs) => {
                    payload.put_u8(T_APPEND);
                    rs.encode(&mut payload);
                }
                StorageOp::Truncate { after_slot } => {
                    payload.put_u8(T_TRUNCATE);
                    payload.put_u64(*after_slot);
                }
                StorageOp::Snapshot {
                    snapshot,
                    drop_through,
                    replace_log,
                } => {
                    let crc = self.ensure_snapshot_file(snapshot)?;
                    payload.put_u8(T_SNAPSHOT);
                    snapshot.at.encode(&mut payload);
                    payload.put_u64(snapshot.data.len() as u64);
                    payload.put_u32(crc);
                    drop_through.encode(&mut payload);
                    payload.put_u8(*replace_log as u8);
                    compact = true;
                }
            }
            encode_record(&payload, &mut buf);
            self.mirror.apply(&p.op);
        }
        self.append(&buf)?;
        self.sync()?;
        if compact {
            self.compact()?;
        } else if self.segment_bytes >= self.opts.segment_bytes {
            self.start_segment(self.segment_index + 1)?;
        }
        Ok(())
    }

    /// Write `buf` after the last record, growing the zero padding first if it is too short
    /// (the padding's own size change is made durable by the batch's sync).
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let end = self.segment_bytes + buf.len() as u64;
        if end > self.allocated && self.opts.preallocate_bytes > 0 {
            let target = end + self.opts.preallocate_bytes;
            let zeros = vec![0u8; 1 << 20];
            let mut at = self.allocated.max(end);
            while at < target {
                let n = ((target - at) as usize).min(zeros.len());
                self.segment.write_all_at(&zeros[..n], at)?;
                at += n as u64;
            }
            self.allocated = target;
        }
        self.segment.write_all_at(buf, self.segment_bytes)?;
        self.segment_bytes = end;
        self.allocated = self.allocated.max(end);
        self.total_bytes += buf.len() as u64;
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        match self.opts.fsync {
            FsyncPolicy::Always => self.segment.sync_data(),
            FsyncPolicy::Never => Ok(()),
        }
    }

    fn start_segment(&mut self, index: u64) -> io::Result<()> {
        // Give the closed segment's padding back (if this is lost in a crash, the padding is
        // still zeros, which replay reads as the segment's clean end).
        let _ = self.segment.set_len(self.segment_bytes);
        let path = self.opts.dir.join(segment_name(index));
        self.segment = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)?;
        self.segment_index = index;
        self.segment_bytes = 0;
        self.allocated = 0;
        fsync_dir(&self.opts.dir)
    }

    /// Write the snapshot's file unless an identical one is there; return its CRC32C.
    fn ensure_snapshot_file(&self, s: &Snapshot) -> io::Result<u32> {
        let crc = crc32c::crc32c(&s.data);
        let path = self.opts.dir.join(snapshot_name(s.at.slot));
        if let Ok(existing) = fs::read(&path) {
            if existing.len() == s.data.len() && crc32c::crc32c(&existing) == crc {
                return Ok(crc);
            }
        }
        write_file_durably(&self.opts.dir, &snapshot_name(s.at.slot), &s.data)?;
        Ok(crc)
    }

    /// Start a segment with the whole durable state, then drop what it supersedes.
    fn compact(&mut self) -> Result<(), WalError> {
        let old_index = self.segment_index;
        self.start_segment(old_index + 1)?;
        let mut buf = BytesMut::new();
        let mut payload = BytesMut::new();
        payload.put_u8(T_RESET);
        self.mirror.hard.encode(&mut payload);
        match &self.mirror.snapshot {
            Some(s) => {
                payload.put_u8(1);
                s.at.encode(&mut payload);
                payload.put_u64(s.data.len() as u64);
                payload.put_u32(crc32c::crc32c(&s.data));
            }
            None => payload.put_u8(0),
        }
        self.mirror.log_base.encode(&mut payload);
        encode_record(&payload, &mut buf);
        for chunk in self.mirror.records.chunks(1024) {
            payload.clear();
            payload.put_u8(T_APPEND);
            chunk.to_vec().encode(&mut payload);
            encode_record(&payload, &mut buf);
        }
        self.total_bytes = 0;
        self.append(&buf)?;
        self.segment.sync_data()?;
        for (n, path) in list(&self.opts.dir, "wal-", ".log")? {
            if n < self.segment_index {
                fs::remove_file(path)?;
            }
        }
        let keep = self.mirror.snapshot.as_ref().map(|s| s.at.slot);
        for (slot, path) in list(&self.opts.dir, "snap-", ".snap")? {
            if Some(slot) != keep {
                fs::remove_file(path)?;
            }
        }
        fsync_dir(&self.opts.dir)?;
        Ok(())
    }
}

/// Write `name` in `dir` so that it is either absent or complete: temporary file, fsync,
/// rename, fsync of the directory.
pub fn write_file_durably(dir: &Path, name: &str, data: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join(name))?;
    fsync_dir(dir)
}

/// Replay one segment into `state`. Returns the length of the good prefix and, if the segment
/// does not end cleanly, what is wrong at that point.
fn replay_segment<R, H>(
    dir: &Path,
    data: &Bytes,
    state: &mut DurableState<R, H>,
    rec: &mut Recovery,
) -> Result<(usize, Option<String>), WalError>
where
    R: LogRecord + Wire,
    H: Wire + Clone + Default,
{
    let mut off = 0usize;
    while off < data.len() {
        let rest = data.len() - off;
        if rest < 8 {
            return Ok((off, Some(format!("torn record header ({rest} bytes)"))));
        }
        let len = u32::from_be_bytes(data[off..off + 4].try_into().expect("4")) as u64;
        let crc = u32::from_be_bytes(data[off + 4..off + 8].try_into().expect("4"));
        if len == 0 && crc == 0 {
            // Zero padding written ahead of the log: its clean end (every real record has
            // at least a type byte).
            return Ok((off, None));
        }
        if len > MAX_RECORD {
            return Ok((off, Some(format!("record length {len} out of range"))));
        }
        if (rest as u64) < 8 + len {
            return Ok((off, Some("torn record".to_string())));
        }
        let payload = data.slice(off + 8..off + 8 + len as usize);
        if crc32c::crc32c(&payload) != crc {
            return Ok((off, Some("checksum mismatch".to_string())));
        }
        match decode_op::<R, H>(dir, payload) {
            Ok(Replay::Op(op)) => state.apply(&op),
            Ok(Replay::Reset {
                hard,
                snapshot,
                log_base,
            }) => {
                *state = DurableState {
                    hard,
                    snapshot,
                    log_base,
                    records: Vec::new(),
                };
            }
            Err(ReplayError::Decode(e)) => {
                return Ok((off, Some(format!("undecodable record ({e})"))));
            }
            Err(ReplayError::Fatal(e)) => return Err(e),
        }
        rec.records += 1;
        off += 8 + len as usize;
    }
    Ok((off, None))
}

enum Replay<R, H> {
    Op(StorageOp<R, H>),
    Reset {
        hard: H,
        snapshot: Option<Snapshot>,
        log_base: Position,
    },
}

enum ReplayError {
    Decode(WireError),
    Fatal(WalError),
}

impl From<WireError> for ReplayError {
    fn from(e: WireError) -> Self {
        ReplayError::Decode(e)
    }
}

fn decode_op<R: LogRecord + Wire, H: Wire>(
    dir: &Path,
    mut b: Bytes,
) -> Result<Replay<R, H>, ReplayError> {
    let op = match get_u8(&mut b)? {
        T_HARD => Replay::Op(StorageOp::SetHard(H::decode(&mut b)?)),
        T_APPEND => Replay::Op(StorageOp::Append(Vec::<R>::decode(&mut b)?)),
        T_TRUNCATE => Replay::Op(StorageOp::Truncate {
            after_slot: get_u64(&mut b)?,
        }),
        T_SNAPSHOT => {
            let r = decode_snap_ref(&mut b)?;
            let drop_through = Position::decode(&mut b)?;
            let replace_log = get_bool(&mut b)?;
            Replay::Op(StorageOp::Snapshot {
                snapshot: load_snapshot(dir, &r).map_err(ReplayError::Fatal)?,
                drop_through,
                replace_log,
            })
        }
        T_RESET => {
            let hard = H::decode(&mut b)?;
            let snapshot = if get_bool(&mut b)? {
                let r = decode_snap_ref(&mut b)?;
                Some(load_snapshot(dir, &r).map_err(ReplayError::Fatal)?)
            } else {
                None
            };
            Replay::Reset {
                hard,
                snapshot,
                log_base: Position::decode(&mut b)?,
            }
        }
        _ => return Err(ReplayError::Decode(WireError::Invalid("record type"))),
    };
    if !b.is_empty() {
        return Err(ReplayError::Decode(WireError::Trailing(b.len())));
    }
    Ok(op)
}

fn decode_snap_ref(b: &mut Bytes) -> Result<SnapRef, WireError> {
    Ok(SnapRef {
        at: Position::decode(b)?,
        len: get_u64(b)?,
        crc: get_u32(b)?,
    })
}

fn load_snapshot(dir: &Path, r: &SnapRef) -> Result<Snapshot, WalError> {
    let path = dir.join(snapshot_name(r.at.slot));
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

#[cfg(test)]
mod tests;
