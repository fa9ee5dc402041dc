//! The replicated state machine interface, and the key-value machine the server serves until the
//! ZooKeeper data tree takes its place.

use bytes::{BufMut, Bytes, BytesMut};
use synod_core::wire::{get_bytes, get_count, get_u64, get_u8, Wire, WireError, WireResult};
use synod_core::{Command, Position, Snapshot};

/// A deterministic state machine fed with delivered commands.
///
/// * `apply` must depend only on the state and the command (no clock, no randomness), so that
///   every replica computes the same state.
/// * `snapshot_view` returns, quickly and under the caller's lock, a closure that serialises the
///   state as of now; the caller runs it on a background thread while writes continue. A
///   copy-on-write structure makes the view O(1).
/// * `restore` replaces the whole state with a snapshot (from disk, or from the leader).
pub trait StateMachine: Send + 'static {
    fn apply(&mut self, at: Position, command: &Command) -> Bytes;
    fn snapshot_view(&self) -> Box<dyn FnOnce() -> Bytes + Send>;
    fn restore(&mut self, snapshot: &Snapshot) -> Result<(), WireError>;
    /// Position of the last applied command (or restored snapshot).
    fn applied(&self) -> Position;
    /// A digest of the whole state, equal on replicas that applied the same commands.
    fn digest(&self) -> u64;
}

/// A KV command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvOp {
    Put { key: Bytes, value: Bytes },
    Delete { key: Bytes },
}

impl Wire for KvOp {
    fn encode(&self, b: &mut BytesMut) {
        match self {
            KvOp::Put { key, value } => {
                b.put_u8(1);
                synod_core::wire::put_bytes(b, key);
                synod_core::wire::put_bytes(b, value);
            }
            KvOp::Delete { key } => {
                b.put_u8(2);
                synod_core::wire::put_bytes(b, key);
            }
        }
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(match get_u8(b)? {
            1 => KvOp::Put {
                key: get_bytes(b, "key", 1 << 16)?,
                value: get_bytes(b, "value", 1 << 30)?,
            },
            2 => KvOp::Delete {
                key: get_bytes(b, "key", 1 << 16)?,
            },
            _ => return Err(WireError::Invalid("kv op")),
        })
    }
}

/// A key-value map on a persistent (copy-on-write) ordered map.
#[derive(Clone, Default)]
pub struct KvMachine {
    map: imbl::OrdMap<Bytes, Bytes>,
    applied: Position,
    /// Rolling hash of every applied command (order-sensitive), for convergence checks.
    digest: u64,
}

fn fnv(mut h: u64, data: &[u8]) -> u64 {
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

impl KvMachine {
    pub fn get(&self, key: &[u8]) -> Option<Bytes> {
        self.map.get(key).cloned()
    }
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl StateMachine for KvMachine {
    fn apply(&mut self, at: Position, command: &Command) -> Bytes {
        assert!(at.slot > self.applied.slot, "slots are applied in order");
        self.applied = at;
        self.digest = fnv(self.digest ^ at.slot, &command.payload);
        // A command that does not decode was still agreed on: every replica ignores it alike.
        match KvOp::from_bytes(command.payload.clone()) {
            Ok(KvOp::Put { key, value }) => {
                self.map.insert(key, value);
                Bytes::from_static(b"ok")
            }
            Ok(KvOp::Delete { key }) => match self.map.remove(&key) {
                Some(_) => Bytes::from_static(b"ok"),
                None => Bytes::from_static(b"absent"),
            },
            Err(_) => Bytes::from_static(b"malformed"),
        }
    }

    fn snapshot_view(&self) -> Box<dyn FnOnce() -> Bytes + Send> {
        let view = self.clone();
        Box::new(move || {
            let mut b = BytesMut::new();
            view.applied.encode(&mut b);
            b.put_u64(view.digest);
            b.put_u32(view.map.len() as u32);
            for (k, v) in view.map.iter() {
                synod_core::wire::put_bytes(&mut b, k);
                synod_core::wire::put_bytes(&mut b, v);
            }
            b.freeze()
        })
    }

    fn restore(&mut self, snapshot: &Snapshot) -> Result<(), WireError> {
        let mut b = snapshot.data.clone();
        let applied = Position::decode(&mut b)?;
        if applied != snapshot.at {
            return Err(WireError::Invalid("snapshot position"));
        }
        let digest = get_u64(&mut b)?;
        let n = get_count(&mut b, "snapshot entries", 8)?;
        let mut map = imbl::OrdMap::new();
        for _ in 0..n {
            let k = get_bytes(&mut b, "key", 1 << 16)?;
            let v = get_bytes(&mut b, "value", 1 << 30)?;
            map.insert(k, v);
        }
        if !b.is_empty() {
            return Err(WireError::Trailing(b.len()));
        }
        *self = KvMachine {
            map,
            applied,
            digest,
        };
        Ok(())
    }

    fn applied(&self) -> Position {
        self.applied
    }

    fn digest(&self) -> u64 {
        self.digest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(op: KvOp) -> Command {
        Command {
            id: 1,
            payload: op.to_bytes(),
        }
    }

    #[test]
    fn apply_snapshot_restore() {
        let mut m = KvMachine::default();
        let put = |k: &'static str, v: &'static str| {
            cmd(KvOp::Put {
                key: Bytes::from_static(k.as_bytes()),
                value: Bytes::from_static(v.as_bytes()),
            })
        };
        m.apply(Position { slot: 1, tag: 1 }, &put("a", "1"));
        m.apply(Position { slot: 2, tag: 2 }, &put("b", "2"));
        let view = m.snapshot_view();
        // Writes continue while the view is serialised.
        m.apply(Position { slot: 3, tag: 3 }, &put("a", "3"));
        let data = view();
        let mut r = KvMachine::default();
        r.restore(&Snapshot {
            at: Position { slot: 2, tag: 2 },
            data,
        })
        .unwrap();
        assert_eq!(r.get(b"a"), Some(Bytes::from_static(b"1")));
        assert_eq!(r.len(), 2);
        r.apply(Position { slot: 3, tag: 3 }, &put("a", "3"));
        assert_eq!(r.digest(), m.digest());
        assert_eq!(
            m.apply(
                Position { slot: 4, tag: 4 },
                &cmd(KvOp::Delete {
                    key: Bytes::from_static(b"zz")
                })
            ),
            Bytes::from_static(b"absent")
        );
    }

    #[test]
    fn a_damaged_snapshot_is_refused() {
        let m = KvMachine::default();
        let data = m.snapshot_view()();
        let mut r = KvMachine::default();
        assert!(r
            .restore(&Snapshot {
                at: Position { slot: 9, tag: 9 },
                data: data.clone(),
            })
            .is_err());
        assert!(r
            .restore(&Snapshot {
                at: Position::default(),
                data: data.slice(..data.len() - 1),
            })
            .is_err());
    }
}
