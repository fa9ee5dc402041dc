//! Binary encoding for messages and log records. Hand-written (it is the product): fixed-width
//! big-endian integers, length-prefixed byte strings, and a decoder that checks every length
//! against what remains and against a limit, so malformed input is an error, never a panic
//! and never an unbounded allocation.

use crate::config::MAX_MEMBERS;
use crate::{Command, Config, Position, Snapshot};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// The input ended inside a value.
    Truncated,
    /// A length exceeds its limit.
    TooLarge {
        what: &'static str,
        len: u64,
        max: u64,
    },
    /// A tag or value that cannot occur.
    Invalid(&'static str),
    /// Bytes left over after a complete value.
    Trailing(usize),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated => write!(f, "input ends inside a value"),
            WireError::TooLarge { what, len, max } => {
                write!(f, "{what} of {len} exceeds the limit of {max}")
            }
            WireError::Invalid(what) => write!(f, "invalid {what}"),
            WireError::Trailing(n) => write!(f, "{n} bytes after the end of the value"),
        }
    }
}

impl std::error::Error for WireError {}

pub type WireResult<T> = Result<T, WireError>;

/// Largest byte string accepted inside a message (a snapshot travels as one, reassembled by the
/// transport from chunks; the transport enforces its own, smaller, per-message limit first).
pub const MAX_BYTES: u64 = 1 << 32;
/// Largest element count of a sequence.
pub const MAX_ITEMS: u64 = 1 << 24;

pub trait Wire: Sized {
    fn encode(&self, b: &mut BytesMut);
    fn decode(b: &mut Bytes) -> WireResult<Self>;

    fn to_bytes(&self) -> Bytes {
        let mut b = BytesMut::new();
        self.encode(&mut b);
        b.freeze()
    }
    /// Decode a whole buffer: trailing bytes are an error.
    fn from_bytes(mut b: Bytes) -> WireResult<Self> {
        let v = Self::decode(&mut b)?;
        if b.has_remaining() {
            return Err(WireError::Trailing(b.remaining()));
        }
        Ok(v)
    }
}

fn need(b: &Bytes, n: usize) -> WireResult<()> {
    if b.remaining() < n {
        Err(WireError::Truncated)
    } else {
        Ok(())
    }
}

pub fn get_u8(b: &mut Bytes) -> WireResult<u8> {
    need(b, 1)?;
    Ok(b.get_u8())
}
pub fn get_u16(b: &mut Bytes) -> WireResult<u16> {
    need(b, 2)?;
    Ok(b.get_u16())
}
pub fn get_u32(b: &mut Bytes) -> WireResult<u32> {
    need(b, 4)?;
    Ok(b.get_u32())
}
pub fn get_u64(b: &mut Bytes) -> WireResult<u64> {
    need(b, 8)?;
    Ok(b.get_u64())
}
pub fn get_bool(b: &mut Bytes) -> WireResult<bool> {
    match get_u8(b)? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(WireError::Invalid("boolean")),
    }
}

pub fn put_bytes(b: &mut BytesMut, v: &[u8]) {
    b.put_u32(v.len() as u32);
    b.put_slice(v);
}

/// A length-prefixed byte string of at most `max` bytes, sharing the input buffer (no copy).
pub fn get_bytes(b: &mut Bytes, what: &'static str, max: u64) -> WireResult<Bytes> {
    let len = get_u32(b)? as u64;
    if len > max {
        return Err(WireError::TooLarge { what, len, max });
    }
    need(b, len as usize)?;
    Ok(b.split_to(len as usize))
}

pub fn put_str(b: &mut BytesMut, s: &str) {
    put_bytes(b, s.as_bytes());
}

pub fn get_string(b: &mut Bytes, what: &'static str, max: u64) -> WireResult<String> {
    let raw = get_bytes(b, what, max)?;
    String::from_utf8(raw.to_vec()).map_err(|_| WireError::Invalid(what))
}

/// A sequence count, checked against the limit and against the bytes left (each element takes
/// at least `min_size` bytes), so a forged count cannot make the decoder allocate.
pub fn get_count(b: &mut Bytes, what: &'static str, min_size: usize) -> WireResult<usize> {
    let n = get_u32(b)? as u64;
    if n > MAX_ITEMS {
        return Err(WireError::TooLarge {
            what,
            len: n,
            max: MAX_ITEMS,
        });
    }
    if n.saturating_mul(min_size.max(1) as u64) > b.remaining() as u64 {
        return Err(WireError::Truncated);
    }
    Ok(n as usize)
}

impl Wire for Position {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u64(self.slot);
        b.put_u64(self.tag);
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(Position {
            slot: get_u64(b)?,
            tag: get_u64(b)?,
        })
    }
}

/// A batch of commands, refused beyond `max` commands (each protocol's batch limit).
pub fn get_batch(b: &mut Bytes, max: usize) -> WireResult<Vec<Command>> {
    let cs = Vec::<Command>::decode(b)?;
    if cs.len() > max {
        return Err(WireError::TooLarge {
            what: "batch",
            len: cs.len() as u64,
            max: max as u64,
        });
    }
    Ok(cs)
}

impl Wire for Command {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u64(self.id);
        put_bytes(b, &self.payload);
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(Command {
            id: get_u64(b)?,
            payload: get_bytes(b, "command payload", MAX_BYTES)?,
        })
    }
}

/// A configuration: its version, then voters and learners, each a u16 count and u32 ids. A
/// malformed configuration (no voter, id 0, a voter that is also a learner, too many) is an
/// error.
impl Wire for Config {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u64(self.version);
        for ids in [&self.voters, &self.learners] {
            b.put_u16(ids.len() as u16);
            for &id in ids {
                b.put_u32(id);
            }
        }
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        let version = get_u64(b)?;
        let mut lists = [Vec::new(), Vec::new()];
        for ids in lists.iter_mut() {
            let n = get_u16(b)? as usize;
            if n > MAX_MEMBERS {
                return Err(WireError::TooLarge {
                    what: "configuration",
                    len: n as u64,
                    max: MAX_MEMBERS as u64,
                });
            }
            for _ in 0..n {
                let id = get_u32(b)?;
                // One encoding per configuration: ids strictly increasing.
                if ids.last().is_some_and(|&last| last >= id) {
                    return Err(WireError::Invalid("configuration order"));
                }
                ids.push(id);
            }
        }
        let [voters, learners] = lists;
        Config::new(version, voters, learners).map_err(|_| WireError::Invalid("configuration"))
    }
}

impl Wire for Snapshot {
    fn encode(&self, b: &mut BytesMut) {
        self.at.encode(b);
        put_bytes(b, &self.data);
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(Snapshot {
            at: Position::decode(b)?,
            data: get_bytes(b, "snapshot", MAX_BYTES)?,
        })
    }
}

impl<T: Wire> Wire for Vec<T> {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u32(self.len() as u32);
        for v in self {
            v.encode(b);
        }
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        let n = get_count(b, "sequence", 1)?;
        // Reserve no more memory than the input holds: a forged count within the input's
        // length must not make the decoder allocate size_of::<T>() times the input.
        let fits = b.remaining() / std::mem::size_of::<T>().max(1);
        let mut v = Vec::with_capacity(n.min(fits));
        for _ in 0..n {
            v.push(T::decode(b)?);
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let c = Command {
            id: 42,
            payload: Bytes::from_static(b"hello"),
        };
        let bytes = c.to_bytes();
        assert_eq!(Command::from_bytes(bytes.clone()).unwrap(), c);
        for cut in 0..bytes.len() {
            assert_eq!(
                Command::from_bytes(bytes.slice(..cut)),
                Err(WireError::Truncated),
                "cut at {cut}"
            );
        }
        let mut longer = BytesMut::from(&bytes[..]);
        longer.put_u8(0);
        assert_eq!(
            Command::from_bytes(longer.freeze()),
            Err(WireError::Trailing(1))
        );
    }

    #[test]
    fn forged_counts_do_not_allocate() {
        let mut b = BytesMut::new();
        b.put_u32(u32::MAX);
        assert!(Vec::<Position>::from_bytes(b.freeze()).is_err());
        let mut b = BytesMut::new();
        b.put_u32(1000);
        b.put_u64(1);
        assert_eq!(
            Vec::<Position>::from_bytes(b.freeze()),
            Err(WireError::Truncated)
        );
    }
}
