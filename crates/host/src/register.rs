//! The register machine: a small replicated key-value map that a group can run instead of the
//! ZooKeeper tree (`machine = "register"` in a `[[groups]]` section), served on the admin port
//! (`/v1/groups/<id>/kv/<key>`). It exists to exercise the host: many groups in one process,
//! and messages between groups.
//!
//! **Relay** shows how a state machine sends reliably to another group through the host, the
//! way SconeKV's two-phase commit will: `relay(to, key, value)` puts an entry in the sending
//! group's *outbox* (replicated state) and emits a `deliver` message; the receiving group
//! applies the put once (it remembers which messages of each sender it applied) and emits an
//! `ack` back; the sender's `ack` removes the entry. A new leader emits every entry still in the
//! outbox again ([`StateMachine::pending`]), so a message outlives the failure of the leader
//! that first sent it.
//!
//! The simulator runs it too (`synod sim --app registers`): relays between groups are what
//! exercise the host's routing and resending there.

use bytes::{BufMut, Bytes, BytesMut};
use std::collections::{BTreeMap, BTreeSet};
use synod_core::wire::{
    get_bytes, get_count, get_string, get_u32, get_u64, get_u8, put_bytes, put_str, Wire,
    WireError, WireResult,
};
use synod_core::{Command, GroupId, GroupMessage, Position, Snapshot, StateMachine};

const MAX_KEY: u64 = 4096;
const MAX_VALUE: u64 = 1 << 24;

/// A command of the register machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterCmd {
    Put {
        key: String,
        value: Bytes,
    },
    Delete {
        key: String,
    },
    /// Put `key = value` in group `to`, reliably.
    Relay {
        to: GroupId,
        key: String,
        value: Bytes,
    },
    /// From group `from`: its message number `seq`, a put.
    Deliver {
        from: GroupId,
        seq: u64,
        key: String,
        value: Bytes,
    },
    /// From group `from`: it applied our message `seq`.
    Ack {
        from: GroupId,
        seq: u64,
    },
}

impl Wire for RegisterCmd {
    fn encode(&self, b: &mut BytesMut) {
        match self {
            RegisterCmd::Put { key, value } => {
                b.put_u8(1);
                put_str(b, key);
                put_bytes(b, value);
            }
            RegisterCmd::Delete { key } => {
                b.put_u8(2);
                put_str(b, key);
            }
            RegisterCmd::Relay { to, key, value } => {
                b.put_u8(3);
                b.put_u32(*to);
                put_str(b, key);
                put_bytes(b, value);
            }
            RegisterCmd::Deliver {
                from,
                seq,
                key,
                value,
            } => {
                b.put_u8(4);
                b.put_u32(*from);
                b.put_u64(*seq);
                put_str(b, key);
                put_bytes(b, value);
            }
            RegisterCmd::Ack { from, seq } => {
                b.put_u8(5);
                b.put_u32(*from);
                b.put_u64(*seq);
            }
        }
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(match get_u8(b)? {
            1 => RegisterCmd::Put {
                key: get_string(b, "key", MAX_KEY)?,
                value: get_bytes(b, "value", MAX_VALUE)?,
            },
            2 => RegisterCmd::Delete {
                key: get_string(b, "key", MAX_KEY)?,
            },
            3 => RegisterCmd::Relay {
                to: get_u32(b)?,
                key: get_string(b, "key", MAX_KEY)?,
                value: get_bytes(b, "value", MAX_VALUE)?,
            },
            4 => RegisterCmd::Deliver {
                from: get_u32(b)?,
                seq: get_u64(b)?,
                key: get_string(b, "key", MAX_KEY)?,
                value: get_bytes(b, "value", MAX_VALUE)?,
            },
            5 => RegisterCmd::Ack {
                from: get_u32(b)?,
                seq: get_u64(b)?,
            },
            _ => return Err(WireError::Invalid("register command")),
        })
    }
}

/// Which messages of one sender were applied: every number up to `through`, and these above.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Seen {
    through: u64,
    above: BTreeSet<u64>,
}

impl Seen {
    /// Record `seq`; false if it was seen before.
    fn insert(&mut self, seq: u64) -> bool {
        if seq <= self.through || !self.above.insert(seq) {
            return false;
        }
        while self.above.remove(&(self.through + 1)) {
            self.through += 1;
        }
        true
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct State {
    map: BTreeMap<String, Bytes>,
    /// Messages sent and not yet acknowledged: number → (to, key, value).
    outbox: BTreeMap<u64, (GroupId, String, Bytes)>,
    next_seq: u64,
    seen: BTreeMap<GroupId, Seen>,
}

pub struct Register {
    group: GroupId,
    state: State,
    applied: Position,
    digest: u64,
}

impl Register {
    pub fn new(group: GroupId) -> Self {
        Register {
            group,
            state: State::default(),
            applied: Position::default(),
            digest: 0,
        }
    }

    pub fn get(&self, key: &str) -> Option<Bytes> {
        self.state.map.get(key).cloned()
    }

    /// Messages to other groups not yet acknowledged.
    pub fn unacknowledged(&self) -> usize {
        self.state.outbox.len()
    }

    fn deliver_msg(&self, seq: u64, to: GroupId, key: &str, value: &Bytes) -> GroupMessage {
        GroupMessage {
            to,
            payload: RegisterCmd::Deliver {
                from: self.group,
                seq,
                key: key.to_string(),
                value: value.clone(),
            }
            .to_bytes(),
        }
    }
}

fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z ^ (z >> 31)
}

impl StateMachine for Register {
    fn apply(&mut self, at: Position, command: &Command, out: &mut Vec<GroupMessage>) -> Bytes {
        self.applied = at;
        self.digest = mix(self.digest, u64::from(crc32c::crc32c(&command.payload)));
        let Ok(cmd) = RegisterCmd::from_bytes(command.payload.clone()) else {
            return Bytes::from_static(b"bad command");
        };
        let s = &mut self.state;
        match cmd {
            RegisterCmd::Put { key, value } => {
                s.map.insert(key, value);
            }
            RegisterCmd::Delete { key } => {
                s.map.remove(&key);
            }
            RegisterCmd::Relay { to, key, value } => {
                s.next_seq += 1;
                let seq = s.next_seq;
                let m = self.deliver_msg(seq, to, &key, &value);
                self.state.outbox.insert(seq, (to, key, value));
                out.push(m);
                return Bytes::from(seq.to_string());
            }
            RegisterCmd::Deliver {
                from,
                seq,
                key,
                value,
            } => {
                if s.seen.entry(from).or_default().insert(seq) {
                    s.map.insert(key, value);
                }
                // Acknowledge every copy: the sender may have missed the first ack.
                out.push(GroupMessage {
                    to: from,
                    payload: RegisterCmd::Ack {
                        from: self.group,
                        seq,
                    }
                    .to_bytes(),
                });
            }
            RegisterCmd::Ack { from, seq } => {
                if s.outbox.get(&seq).is_some_and(|(to, _, _)| *to == from) {
                    s.outbox.remove(&seq);
                }
            }
        }
        Bytes::from_static(b"ok")
    }

    fn pending(&self, out: &mut Vec<GroupMessage>) {
        for (&seq, (to, key, value)) in &self.state.outbox {
            out.push(self.deliver_msg(seq, *to, key, value));
        }
    }

    fn snapshot_view(&self) -> Box<dyn FnOnce() -> Bytes + Send> {
        let state = self.state.clone();
        let digest = self.digest;
        Box::new(move || encode_state(&state, digest))
    }

    fn restore(&mut self, snapshot: &Snapshot) -> Result<(), WireError> {
        let (state, digest) = decode_state(snapshot.data.clone())?;
        self.state = state;
        self.digest = digest;
        self.applied = snapshot.at;
        Ok(())
    }

    fn applied(&self) -> Position {
        self.applied
    }

    fn digest(&self) -> u64 {
        self.digest
    }
}

fn encode_state(s: &State, digest: u64) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u64(digest);
    b.put_u64(s.next_seq);
    b.put_u32(s.map.len() as u32);
    for (k, v) in &s.map {
        put_str(&mut b, k);
        put_bytes(&mut b, v);
    }
    b.put_u32(s.outbox.len() as u32);
    for (seq, (to, k, v)) in &s.outbox {
        b.put_u64(*seq);
        b.put_u32(*to);
        put_str(&mut b, k);
        put_bytes(&mut b, v);
    }
    b.put_u32(s.seen.len() as u32);
    for (g, seen) in &s.seen {
        b.put_u32(*g);
        b.put_u64(seen.through);
        b.put_u32(seen.above.len() as u32);
        for x in &seen.above {
            b.put_u64(*x);
        }
    }
    b.freeze()
}

fn decode_state(mut b: Bytes) -> Result<(State, u64), WireError> {
    let b = &mut b;
    let digest = get_u64(b)?;
    let mut s = State {
        next_seq: get_u64(b)?,
        ..State::default()
    };
    for _ in 0..get_count(b, "entries", 8)? {
        let k = get_string(b, "key", MAX_KEY)?;
        s.map.insert(k, get_bytes(b, "value", MAX_VALUE)?);
    }
    for _ in 0..get_count(b, "outbox", 20)? {
        let seq = get_u64(b)?;
        let to = get_u32(b)?;
        let k = get_string(b, "key", MAX_KEY)?;
        s.outbox
            .insert(seq, (to, k, get_bytes(b, "value", MAX_VALUE)?));
    }
    for _ in 0..get_count(b, "senders", 16)? {
        let g = get_u32(b)?;
        let mut seen = Seen {
            through: get_u64(b)?,
            above: BTreeSet::new(),
        };
        for _ in 0..get_count(b, "seen", 8)? {
            seen.above.insert(get_u64(b)?);
        }
        s.seen.insert(g, seen);
    }
    Ok((s, digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(c: RegisterCmd) -> Command {
        Command {
            id: 0,
            payload: c.to_bytes(),
        }
    }

    fn at(slot: u64) -> Position {
        Position { slot, tag: slot }
    }

    #[test]
    fn relay_is_applied_once_acknowledged_and_resent_by_a_new_leader() {
        let mut a = Register::new(1);
        let mut b = Register::new(2);
        let mut out = Vec::new();
        a.apply(
            at(1),
            &cmd(RegisterCmd::Relay {
                to: 2,
                key: "k".into(),
                value: Bytes::from_static(b"v"),
            }),
            &mut out,
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].to, 2);
        let deliver = out.remove(0);
        // Delivered twice (a resend): applied once, acknowledged twice.
        for slot in 1..=2 {
            b.apply(
                at(slot),
                &Command {
                    id: 0,
                    payload: deliver.payload.clone(),
                },
                &mut out,
            );
        }
        assert_eq!(b.get("k"), Some(Bytes::from_static(b"v")));
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|m| m.to == 1));
        // Before the ack, a new leader sends the message again.
        let mut again = Vec::new();
        a.pending(&mut again);
        assert_eq!(again, vec![deliver]);
        a.apply(
            at(2),
            &Command {
                id: 0,
                payload: out[0].payload.clone(),
            },
            &mut Vec::new(),
        );
        assert_eq!(a.unacknowledged(), 0);
        again.clear();
        a.pending(&mut again);
        assert!(again.is_empty());
    }

    #[test]
    fn out_of_order_copies_are_each_applied_once() {
        let mut s = Seen::default();
        assert!(s.insert(2));
        assert!(s.insert(1));
        assert!(!s.insert(2));
        assert!(!s.insert(1));
        assert_eq!(s.through, 2);
        assert!(s.insert(4));
        assert!(!s.insert(4));
    }

    #[test]
    fn snapshots_round_trip() {
        let mut a = Register::new(1);
        let mut out = Vec::new();
        a.apply(
            at(1),
            &cmd(RegisterCmd::Put {
                key: "x".into(),
                value: Bytes::from_static(b"1"),
            }),
            &mut out,
        );
        a.apply(
            at(2),
            &cmd(RegisterCmd::Relay {
                to: 3,
                key: "y".into(),
                value: Bytes::from_static(b"2"),
            }),
            &mut out,
        );
        a.apply(
            at(3),
            &cmd(RegisterCmd::Deliver {
                from: 3,
                seq: 5,
                key: "z".into(),
                value: Bytes::from_static(b"3"),
            }),
            &mut out,
        );
        let snap = Snapshot {
            at: a.applied(),
            data: (a.snapshot_view())(),
        };
        let mut b = Register::new(1);
        b.restore(&snap).unwrap();
        assert_eq!(b.state, a.state);
        assert_eq!(b.digest(), a.digest());
        assert!(b
            .restore(&Snapshot {
                at: snap.at,
                data: snap.data.slice(..snap.data.len() - 1)
            })
            .is_err());
    }
}
