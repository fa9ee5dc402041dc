//! Reliable, ordered channels between buckets, kept in each bucket's replicated state.
//!
//! The host delivers messages between groups at most once and only while the sending leader
//! stays (docs/contract.md §3). A bucket therefore numbers its messages per destination, keeps
//! each until the destination acknowledges it, and emits every unacknowledged one again when
//! asked ([`Channels::pending`]: a new master does at once, and every master periodically). The
//! receiver applies message `seq` only if it is the next one from that sender; a duplicate is
//! acknowledged again and a message after a gap is dropped (the sender will send the missing
//! one, then this one, again). So each message is applied exactly once and in order: a vote
//! can never overtake the revert request sent after it, and a re-sent stale vote can never be
//! counted after the coordinator withdrew it.

use crate::txn::{Cmd, Msg};
use bytes::{BufMut, Bytes, BytesMut};
use std::collections::{BTreeMap, VecDeque};
use synod_core::wire::{get_count, get_u32, get_u64, Wire, WireResult};

/// A command for another bucket: the host submits `payload` to bucket `to`'s group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Out {
    pub to: u32,
    pub payload: Bytes,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Outbox {
    next: u64,
    unacked: VecDeque<(u64, Msg)>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Channels {
    out: BTreeMap<u32, Outbox>,
    /// Per sender, the last message applied.
    applied: BTreeMap<u32, u64>,
}

/// What to do with an arriving message.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival {
    /// The next one: apply it.
    Apply,
    /// Applied before (or one after a gap): acknowledge what was applied, do nothing else.
    Skip,
}

impl Channels {
    /// Number and emit `msg` for bucket `to`; returns its number.
    pub fn send(&mut self, me: u32, to: u32, msg: Msg, emit: &mut Vec<Out>) -> u64 {
        let o = self.out.entry(to).or_default();
        o.next += 1;
        let seq = o.next;
        let ack = self.applied.get(&to).copied().unwrap_or(0);
        emit.push(Out {
            to,
            payload: Cmd::Channel {
                from: me,
                seq,
                ack,
                msg: msg.clone(),
            }
            .to_bytes(),
        });
        o.unacked.push_back((seq, msg));
        seq
    }

    /// `to` applied our messages up to `upto`: forget them.
    pub fn acked(&mut self, to: u32, upto: u64) {
        if let Some(o) = self.out.get_mut(&to) {
            while o.unacked.front().is_some_and(|(s, _)| *s <= upto) {
                o.unacked.pop_front();
            }
        }
    }

    /// Message `seq` from `from` arrived.
    pub fn arrive(&mut self, from: u32, seq: u64) -> Arrival {
        let last = self.applied.entry(from).or_insert(0);
        if seq == *last + 1 {
            *last = seq;
            Arrival::Apply
        } else {
            Arrival::Skip
        }
    }

    /// An explicit acknowledgement of everything applied from `from`.
    pub fn ack_for(&self, me: u32, from: u32) -> Out {
        let upto = self.applied.get(&from).copied().unwrap_or(0);
        Out {
            to: from,
            payload: Cmd::Ack { from: me, upto }.to_bytes(),
        }
    }

    /// Every message not acknowledged yet, in order, per destination.
    pub fn pending(&self, me: u32, emit: &mut Vec<Out>) {
        for (&to, o) in &self.out {
            let ack = self.applied.get(&to).copied().unwrap_or(0);
            for (seq, msg) in &o.unacked {
                emit.push(Out {
                    to,
                    payload: Cmd::Channel {
                        from: me,
                        seq: *seq,
                        ack,
                        msg: msg.clone(),
                    }
                    .to_bytes(),
                });
            }
        }
    }

    pub fn unacked(&self) -> usize {
        self.out.values().map(|o| o.unacked.len()).sum()
    }

    pub fn encode(&self, b: &mut BytesMut) {
        b.put_u32(self.out.len() as u32);
        for (to, o) in &self.out {
            b.put_u32(*to);
            b.put_u64(o.next);
            b.put_u32(o.unacked.len() as u32);
            for (seq, msg) in &o.unacked {
                b.put_u64(*seq);
                msg.encode(b);
            }
        }
        b.put_u32(self.applied.len() as u32);
        for (from, seq) in &self.applied {
            b.put_u32(*from);
            b.put_u64(*seq);
        }
    }

    pub fn decode(b: &mut Bytes) -> WireResult<Self> {
        let mut c = Channels::default();
        for _ in 0..get_count(b, "outboxes", 16)? {
            let to = get_u32(b)?;
            let next = get_u64(b)?;
            let mut unacked = VecDeque::new();
            for _ in 0..get_count(b, "unacked", 9)? {
                unacked.push_back((get_u64(b)?, Msg::decode(b)?));
            }
            c.out.insert(to, Outbox { next, unacked });
        }
        for _ in 0..get_count(b, "inboxes", 12)? {
            c.applied.insert(get_u32(b)?, get_u64(b)?);
        }
        Ok(c)
    }
}
