//! Segment files and records: names, the record frame, and reading a segment back.
//!
//! A segment is `seg-<index>.wal`: a header record, then checkpoint records (one per group the
//! log knows, written when the segment is started), then op records, then zero padding written
//! ahead of the log. A record is `[u32 length][u32 CRC32C of the payload][payload]`; its payload
//! is a one-byte type, the group id and the body.

use bytes::{BufMut, Bytes, BytesMut};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Largest record accepted on replay (a larger length field is corruption).
pub const MAX_RECORD: u64 = 512 << 20;

/// The first record of every segment: magic and format version.
pub const MAGIC: &[u8; 8] = b"SYNODWAL";
/// The log format this version writes and reads. Version 3 since v0.1.0 (the segmented log of
/// every group with checkpoint records). A release that changes the format must still read the
/// previous one, so that a node upgraded in place replays the log its older binary wrote.
pub const FORMAT: u16 = 3;
/// The oldest log format this version reads.
pub const MIN_FORMAT: u16 = 3;

pub(crate) const T_HEADER: u8 = 0;
pub(crate) const T_HARD: u8 = 1;
pub(crate) const T_APPEND: u8 = 2;
pub(crate) const T_TRUNCATE: u8 = 3;
pub(crate) const T_SNAPSHOT: u8 = 4;
pub(crate) const T_CHECKPOINT: u8 = 5;

pub fn segment_name(index: u64) -> String {
    format!("seg-{index:08}.wal")
}

/// The file a group's snapshot at `slot` is kept in.
pub fn snapshot_name(group: u32, slot: u64) -> String {
    format!("snap-g{group}-{slot:020}.snap")
}

/// `(group, slot)` of a snapshot file name.
pub(crate) fn parse_snapshot_name(name: &str) -> Option<(u32, u64)> {
    let rest = name.strip_prefix("snap-g")?.strip_suffix(".snap")?;
    let (g, s) = rest.split_once('-')?;
    Some((g.parse().ok()?, s.parse().ok()?))
}

pub(crate) fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Segments in `dir`, by index.
pub(crate) fn list_segments(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut v = Vec::new();
    for e in fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(num) = name
            .strip_prefix("seg-")
            .and_then(|r| r.strip_suffix(".wal"))
        {
            if let Ok(n) = num.parse::<u64>() {
                v.push((n, e.path()));
            }
        }
    }
    v.sort();
    Ok(v)
}

/// Files of the first log format (one group per log, rewritten on compaction), which this
/// version does not read.
pub(crate) fn old_format_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut v = Vec::new();
    for e in fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("wal-") && name.ends_with(".log") {
            v.push(e.path());
        }
    }
    Ok(v)
}

/// Read a segment whose header says `format`, or say why not (`path` names the segment).
pub(crate) fn check_format(path: &Path, format: u16) -> Result<(), String> {
    if format > FORMAT {
        return Err(format!(
            "{}: log format {format} was written by a newer synod release; this version reads \
             formats {MIN_FORMAT}..={FORMAT}. Run the newer release on this data directory (a \
             downgrade across a log format change is not supported)",
            path.display()
        ));
    }
    if format < MIN_FORMAT {
        return Err(format!(
            "{}: log format {format} is older than this version reads (formats \
             {MIN_FORMAT}..={FORMAT}). Upgrade one release at a time, or start the node with an \
             empty data directory: it will recover from its peers",
            path.display()
        ));
    }
    Ok(())
}

pub(crate) fn encode_record(payload: &[u8], out: &mut BytesMut) {
    out.put_u32(payload.len() as u32);
    out.put_u32(crc32c::crc32c(payload));
    out.put_slice(payload);
}

pub(crate) fn header_payload() -> BytesMut {
    let mut p = BytesMut::new();
    p.put_u8(T_HEADER);
    p.put_slice(MAGIC);
    p.put_u16(FORMAT);
    p
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

/// One record read back: its payload and where it starts.
pub(crate) struct Read {
    pub payload: Bytes,
    pub offset: usize,
}

/// Walk the records of a segment. Returns them, the length of the good prefix and, if the
/// segment does not end cleanly, what is wrong at that point (a torn or corrupt record ends the
/// log there: nothing behind it may be applied).
pub(crate) fn read_records(data: &Bytes) -> (Vec<Read>, usize, Option<String>) {
    let mut out = Vec::new();
    let mut off = 0usize;
    while off < data.len() {
        let rest = data.len() - off;
        if rest < 8 {
            return (out, off, Some(format!("torn record header ({rest} bytes)")));
        }
        let len = u32::from_be_bytes(data[off..off + 4].try_into().expect("4")) as u64;
        let crc = u32::from_be_bytes(data[off + 4..off + 8].try_into().expect("4"));
        if len == 0 && crc == 0 {
            // Zero padding written ahead of the log: its clean end (every real record has at
            // least a type byte).
            return (out, off, None);
        }
        if len > MAX_RECORD {
            return (out, off, Some(format!("record length {len} out of range")));
        }
        if (rest as u64) < 8 + len {
            return (out, off, Some("torn record".to_string()));
        }
        let payload = data.slice(off + 8..off + 8 + len as usize);
        if crc32c::crc32c(&payload) != crc {
            return (out, off, Some("checksum mismatch".to_string()));
        }
        out.push(Read {
            payload,
            offset: off,
        });
        off += 8 + len as usize;
    }
    (out, off, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(parse_snapshot_name(&snapshot_name(7, 42)), Some((7, 42)));
        assert_eq!(parse_snapshot_name("snap-00000000000000000042.snap"), None);
        assert_eq!(segment_name(3), "seg-00000003.wal");
    }

    #[test]
    fn records_end_at_padding_and_stop_at_damage() {
        let mut b = BytesMut::new();
        encode_record(b"one", &mut b);
        encode_record(b"two", &mut b);
        let clean = b.len();
        b.put_bytes(0, 64);
        let (r, good, problem) = read_records(&b.clone().freeze());
        assert_eq!(r.len(), 2);
        assert_eq!(good, clean);
        assert!(problem.is_none());
        let mut damaged = b.to_vec();
        damaged[clean - 1] ^= 1;
        let (r, good, problem) = read_records(&Bytes::from(damaged));
        assert_eq!(r.len(), 1);
        assert_eq!(good, 11);
        assert_eq!(problem.as_deref(), Some("checksum mismatch"));
    }

    /// A log whose first segment's header says `format`, in `dir`.
    fn log_of_format(dir: &Path, format: u16) {
        let mut payload = BytesMut::new();
        payload.put_u8(T_HEADER);
        payload.put_slice(MAGIC);
        payload.put_u16(format);
        let mut b = BytesMut::new();
        encode_record(&payload, &mut b);
        fs::write(dir.join(segment_name(1)), &b).unwrap();
    }

    fn open(dir: &Path) -> Result<(), String> {
        let opts = crate::WalOptions {
            dir: dir.to_path_buf(),
            segment_bytes: 1 << 20,
            fsync: crate::FsyncPolicy::Always,
            preallocate_bytes: 0,
        };
        crate::Wal::open(opts)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_formats_this_version_reads_open() {
        for format in MIN_FORMAT..=FORMAT {
            let dir = tempfile::tempdir().unwrap();
            log_of_format(dir.path(), format);
            assert_eq!(open(dir.path()), Ok(()), "format {format}");
        }
        assert_eq!(&header_payload()[MAGIC.len() + 1..], &FORMAT.to_be_bytes());
    }

    #[test]
    fn a_log_of_a_newer_format_is_refused_with_an_explanation() {
        let dir = tempfile::tempdir().unwrap();
        log_of_format(dir.path(), FORMAT + 1);
        let err = open(dir.path()).unwrap_err();
        assert!(err.contains("seg-00000001.wal"), "{err}");
        assert!(
            err.contains(&format!("log format {} was written by a newer", FORMAT + 1)),
            "{err}"
        );
        assert!(err.contains(&format!("{MIN_FORMAT}..={FORMAT}")), "{err}");
        // Nothing was changed: the newer release can still read its log.
        assert_eq!(list_segments(dir.path()).unwrap().len(), 1);
    }

    #[test]
    fn a_log_of_an_older_format_is_refused_with_an_explanation() {
        let dir = tempfile::tempdir().unwrap();
        log_of_format(dir.path(), MIN_FORMAT - 1);
        let err = open(dir.path()).unwrap_err();
        assert!(
            err.contains(&format!("log format {} is older", MIN_FORMAT - 1)),
            "{err}"
        );
        assert!(err.contains("Upgrade one release at a time"), "{err}");
    }
}
