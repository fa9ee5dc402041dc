//! The register workload (`Workload::registers`): each command writes one of κ registers, or
//! is a barrier that conflicts with everything (standing for a ZooKeeper multi or a session
//! operation). It exists for protocols that deliver commuting commands out of order (Mencius
//! with M13's out-of-order commit): [`commute`] is the state machine's commutativity test they
//! are handed, and the checkers compare histories up to that commutation (`check/commute.rs`).
//!
//! **Payload format** (little-endian, 16 bytes, then padding up to `Workload::payload_bytes`):
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `b"SREG"` |
//! | 4..8 | register (`u32`); [`BARRIER`] (`u32::MAX`) for a barrier |
//! | 8..16 | client session (`u64`): the simulator's client index |
//!
//! Two commands commute iff both are register writes, to different registers, from different
//! client sessions (per-session FIFO survives: one session's commands never commute). A payload
//! that does not parse commutes with nothing.

use bytes::Bytes;
use synod_core::Command;

/// The first four bytes of every register-workload payload.
pub const MAGIC: [u8; 4] = *b"SREG";
/// The register field of a barrier.
pub const BARRIER: u32 = u32::MAX;
/// Bytes of the header; a payload is never shorter.
pub const HEADER: usize = 16;
/// The padding byte after the header (the simulator's payload byte).
const PAD: u8 = 0xA5;

/// What one command of the register workload does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Writes `register` for client session `client`.
    Write { register: u32, client: u64 },
    /// Conflicts with every command (a multi, a session operation).
    Barrier { client: u64 },
}

impl Op {
    /// The client session that submitted it.
    pub fn client(self) -> u64 {
        match self {
            Op::Write { client, .. } | Op::Barrier { client } => client,
        }
    }

    /// Whether applying `self` and `other` in either order gives the same state and replies.
    pub fn commutes_with(self, other: Op) -> bool {
        match (self, other) {
            (
                Op::Write {
                    register: r1,
                    client: c1,
                },
                Op::Write {
                    register: r2,
                    client: c2,
                },
            ) => r1 != r2 && c1 != c2,
            _ => false,
        }
    }

    /// The payload of this command: the header, padded to `size` bytes (never shorter than
    /// [`HEADER`]).
    pub fn encode(self, size: usize) -> Bytes {
        let mut b = Vec::with_capacity(size.max(HEADER));
        b.extend_from_slice(&MAGIC);
        let register = match self {
            Op::Write { register, .. } => {
                assert_ne!(register, BARRIER, "register {BARRIER} is the barrier mark");
                register
            }
            Op::Barrier { .. } => BARRIER,
        };
        b.extend_from_slice(&register.to_le_bytes());
        b.extend_from_slice(&self.client().to_le_bytes());
        b.resize(size.max(HEADER), PAD);
        Bytes::from(b)
    }

    /// The operation a payload names, or `None` when it is not a register-workload payload.
    pub fn decode(payload: &[u8]) -> Option<Op> {
        if payload.len() < HEADER || payload[..4] != MAGIC {
            return None;
        }
        let register = u32::from_le_bytes(payload[4..8].try_into().ok()?);
        let client = u64::from_le_bytes(payload[8..16].try_into().ok()?);
        Some(if register == BARRIER {
            Op::Barrier { client }
        } else {
            Op::Write { register, client }
        })
    }
}

/// The commutativity test of the register workload's state machine, for a protocol core's
/// options (Mencius's `Options::commute`): `a` and `b` commute iff both are register writes to
/// different registers from different client sessions. Commands whose payload does not parse
/// never commute.
pub fn commute(a: &Command, b: &Command) -> bool {
    match (Op::decode(&a.payload), Op::decode(&b.payload)) {
        (Some(x), Some(y)) => x.commutes_with(y),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(id: u64, op: Op) -> Command {
        Command {
            id,
            payload: op.encode(64),
        }
    }

    #[test]
    fn payloads_round_trip_at_any_size() {
        for op in [
            Op::Write {
                register: 3,
                client: 7,
            },
            Op::Barrier { client: 2 },
        ] {
            for size in [0, 16, 64, 1024] {
                let p = op.encode(size);
                assert_eq!(p.len(), size.max(HEADER));
                assert_eq!(Op::decode(&p), Some(op));
            }
        }
        assert_eq!(Op::decode(&[0xA5; 64]), None);
        assert_eq!(Op::decode(b"SREG"), None);
    }

    #[test]
    fn only_writes_to_different_registers_from_different_sessions_commute() {
        let w = |register, client| Op::Write { register, client };
        assert!(commute(&cmd(1, w(0, 0)), &cmd(2, w(1, 1))));
        assert!(
            !commute(&cmd(1, w(0, 0)), &cmd(2, w(0, 1))),
            "same register"
        );
        assert!(!commute(&cmd(1, w(0, 0)), &cmd(2, w(1, 0))), "same session");
        assert!(!commute(
            &cmd(1, w(0, 0)),
            &cmd(2, Op::Barrier { client: 1 })
        ));
        assert!(!commute(
            &cmd(1, Op::Barrier { client: 0 }),
            &cmd(2, Op::Barrier { client: 1 })
        ));
        let raw = Command {
            id: 3,
            payload: Bytes::from_static(&[0xA5; 64]),
        };
        assert!(!commute(&raw, &cmd(2, w(1, 1))), "unparsed: never commutes");
        assert!(!commute(&cmd(2, w(1, 1)), &raw));
    }
}
