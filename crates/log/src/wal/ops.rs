//! The log's ops on disk: what a group writes ([`WalOp`]), what replay gives back
//! ([`Replayed`]), and their encoding in a record's payload.
//!
//! ```text
//! payload: u8 type, then
//!   header      magic "SYNODWAL", u16 format
//!   hard        u32 group, the hard state's bytes
//!   append      u32 group, u32 count, count × (u64 key, u32 length, the record's bytes)
//!   truncate    u32 group, u64 after_key
//!   snapshot    u32 group, snapshot ref, drop_through position, u64 drop_key, u8 replace_log
//!   checkpoint  u32 group, optional hard state, optional snapshot ref, log base position
//! ```
//!
//! Every record of an append is stored with its key and length, so the log knows where each
//! live record is without decoding it, and can copy a group's live records forward.

use crate::segment::{MAGIC, T_APPEND, T_CHECKPOINT, T_HARD, T_HEADER, T_SNAPSHOT, T_TRUNCATE};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use synod_core::wire::{
    get_bool, get_bytes, get_u16, get_u32, get_u64, get_u8, put_bytes, Wire, WireError,
};
use synod_core::{GroupId, Position, Snapshot};

/// A snapshot file as an op names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapRef {
    pub at: Position,
    pub len: u64,
    pub crc: u32,
}

impl SnapRef {
    pub(crate) fn of(s: &Snapshot) -> Self {
        SnapRef {
            at: s.at,
            len: s.data.len() as u64,
            crc: crc32c::crc32c(&s.data),
        }
    }
}

/// The body of one storage op, encoded by the group that owns it (see [`crate::typed`]).
#[derive(Clone, Debug)]
pub enum OpBody {
    /// The group's hard state.
    Hard(Bytes),
    /// Records, each with its key and its encoding.
    Append {
        records: Vec<(u64, Bytes)>,
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
    /// Records, each with its key and its encoding.
    Append {
        records: Vec<(u64, Bytes)>,
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
    /// snapshot, log base. The records it had then lived in earlier segments; those still
    /// alive were carried into later segments before the earlier ones were unlinked.
    Checkpoint {
        hard: Option<Bytes>,
        snap: Option<SnapRef>,
        log_base: Position,
    },
}

/// Where, in its segment's file, each record of an encoded append sits.
pub(crate) type Placed = Vec<(u64, u64, u32, u32)>;

/// Encode `op` at the end of `out`, whose first byte will sit at `base` in the segment.
/// Returns, for an append, each record's (key, offset, length, CRC32C).
pub(crate) fn encode_op(op: &WalOp, out: &mut BytesMut, base: u64) -> Placed {
    let mut placed = Vec::new();
    let mut p = BytesMut::new();
    match &op.body {
        OpBody::Hard(h) => {
            p.put_u8(T_HARD);
            p.put_u32(op.group);
            p.put_slice(h);
        }
        OpBody::Append { records } => {
            p.put_u8(T_APPEND);
            p.put_u32(op.group);
            p.put_u32(records.len() as u32);
            for (key, bytes) in records {
                p.put_u64(*key);
                p.put_u32(bytes.len() as u32);
                // The record's bytes start after the record header (8 bytes) and what is in
                // the payload so far.
                let at = base + out.len() as u64 + 8 + p.len() as u64;
                placed.push((*key, at, bytes.len() as u32, crc32c::crc32c(bytes)));
                p.put_slice(bytes);
            }
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
            put_snap_ref(&mut p, &SnapRef::of(snapshot));
            drop_through.encode(&mut p);
            p.put_u64(*drop_key);
            p.put_u8(*replace_log as u8);
        }
    }
    crate::segment::encode_record(&p, out);
    placed
}

pub(crate) fn encode_checkpoint(
    group: GroupId,
    hard: Option<&Bytes>,
    snap: Option<&SnapRef>,
    log_base: Position,
    out: &mut BytesMut,
) {
    let mut p = BytesMut::new();
    p.put_u8(T_CHECKPOINT);
    p.put_u32(group);
    match hard {
        Some(h) => {
            p.put_u8(1);
            put_bytes(&mut p, h);
        }
        None => p.put_u8(0),
    }
    match snap {
        Some(s) => {
            p.put_u8(1);
            put_snap_ref(&mut p, s);
        }
        None => p.put_u8(0),
    }
    log_base.encode(&mut p);
    crate::segment::encode_record(&p, out);
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

pub(crate) enum Decoded {
    Header(u16),
    Op(GroupId, Replayed),
}

/// The op of a record's payload.
pub(crate) fn decode(mut b: Bytes) -> Result<Decoded, WireError> {
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
        T_APPEND => {
            let n = get_u32(&mut b)? as usize;
            // Each record takes at least 12 bytes: a forged count allocates nothing more.
            if n.saturating_mul(12) > b.remaining() {
                return Err(WireError::Truncated);
            }
            let mut records = Vec::with_capacity(n);
            for _ in 0..n {
                let key = get_u64(&mut b)?;
                let len = get_u32(&mut b)? as usize;
                if len > b.remaining() {
                    return Err(WireError::Truncated);
                }
                records.push((key, b.split_to(len)));
            }
            Replayed::Append { records }
        }
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
            }
        }
        _ => return Err(WireError::Invalid("record type")),
    };
    if b.has_remaining() && !matches!(op, Replayed::Hard(_)) {
        return Err(WireError::Trailing(b.remaining()));
    }
    Ok(Decoded::Op(group, op))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_know_where_each_record_sits() {
        let op = WalOp {
            group: 4,
            body: OpBody::Append {
                records: vec![
                    (7, Bytes::from_static(b"seven")),
                    (2, Bytes::from_static(b"two")),
                ],
            },
        };
        let mut out = BytesMut::new();
        out.put_bytes(0xEE, 10); // something written before, in the same segment
        let placed = encode_op(&op, &mut out, 1000);
        let file = out.freeze();
        for ((key, at, len, crc), want) in placed.iter().zip([(7, "seven"), (2, "two")]) {
            let at = (*at - 1000) as usize;
            let bytes = &file[at..at + *len as usize];
            assert_eq!((*key, bytes), (want.0, want.1.as_bytes()));
            assert_eq!(*crc, crc32c::crc32c(bytes));
        }
        let (records, _, problem) = crate::segment::read_records(&file.slice(10..));
        assert!(problem.is_none());
        let Ok(Decoded::Op(4, Replayed::Append { records: r })) =
            decode(records[0].payload.clone())
        else {
            panic!("an append of group 4")
        };
        assert_eq!(r[0], (7, Bytes::from_static(b"seven")));
    }

    #[test]
    fn forged_counts_are_errors() {
        let mut p = BytesMut::new();
        p.put_u8(T_APPEND);
        p.put_u32(1);
        p.put_u32(u32::MAX);
        assert!(decode(p.freeze()).is_err());
    }
}
