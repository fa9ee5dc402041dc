//! Mencius's messages (mencius.md §5.1), its log record and its hard state, with their
//! encodings (U1 of §9: the report gives no wire format; this is ours).
//!
//! Every message travels on a per-peer stream: [`Msg`] carries the sender's incarnation and a
//! sequence number that counts the messages it sent to that one peer. The receiver infers
//! skips (Optimizations 1 and 2) only from a stream it has followed without a gap since a
//! [`Body::Sync`] (§6.2.3, M8): a lost message, a new connection or a restarted sender stops
//! the inference until the sender has said again what it suggested.

use bytes::{BufMut, Bytes, BytesMut};
use synod_core::wire::{get_bool, get_count, get_u64, get_u8, Wire, WireError, WireResult};
use synod_core::{Command, LogRecord, MessageKind, Position, Snapshot, WireSize};

/// The ballot of a record that holds a value known decided (a revoked block's listed value,
/// written by a learner so that a restart knows it without revoking again).
pub const DECIDED: u64 = u64::MAX;

/// The position of command `i` of a batch of `len` at an instance, its instance and what is
/// left of its batch: the core toolkit's position tag (synod_core::kit::tag), as PFT's.
pub use synod_core::kit::tag::{batch_of as tag_instance, left as tag_left, tag, MAX_BATCH};

/// A range of one owner's instances: `from`, `from + n`, …, up to `to` (both owned by the
/// same replica: `from ≡ to (mod n)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub from: u64,
    pub to: u64,
}

impl Range {
    pub fn covers(&self, i: u64, n: u64) -> bool {
        i >= self.from && i <= self.to && i % n == self.from % n
    }
}

/// A revocation's phase-1 promise or phase-2 no-op accept over a range, at `ballot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub range: Range,
    pub ballot: u64,
}

/// An accepted value at one instance, as an acceptor reports it in phase 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub instance: u64,
    pub ballot: u64,
    pub commands: Vec<Command>,
}

/// The durable log record: a value accepted at `instance` in `ballot` (0: the owner's
/// SUGGEST). Keyed by instance; a revocation's later accept replaces it. `own` says this
/// replica suggested the instance itself (kept when the record is replaced), so that a
/// restarted owner knows which of its instances below its index it used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rec {
    pub instance: u64,
    pub ballot: u64,
    pub own: bool,
    pub commands: Vec<Command>,
}

impl LogRecord for Rec {
    fn key(&self) -> u64 {
        self.instance
    }
    fn carries(&self, id: u64) -> bool {
        self.commands.iter().any(|c| c.id == id)
    }
    fn key_of(at: Position) -> u64 {
        tag_instance(at.tag)
    }
    /// Snapshots cover an instance prefix (out-of-order deliveries are never in one), so a
    /// command is in it when its instance is, or when it is no later in the same batch.
    fn snapshot_covers(snapshot_at: Position, at: Position) -> bool {
        let (si, ai) = (tag_instance(snapshot_at.tag), tag_instance(at.tag));
        si > ai || (si == ai && tag_left(snapshot_at.tag) <= tag_left(at.tag))
    }
}

/// The hard state: what must survive a crash besides the records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hard {
    /// Counts restarts: names the sender's streams, so a receiver notices a restart.
    pub incarnation: u64,
    /// I_p: the next instance this replica may suggest to. Every own instance below it that
    /// it did not suggest is a skip; it never goes back (H1).
    pub index: u64,
    /// The highest revocation round this replica used as a revoker (ballots never repeat).
    pub round: u64,
    /// Phase-1 promises given to revokers (PREPARE), per range.
    pub promises: Vec<Block>,
    /// Phase-2 no-op accepts of revocations (a revoked range whose instances carry no value).
    pub noops: Vec<Block>,
    /// Revoked blocks known decided (no-op but for the values their DECIDE listed, which are
    /// records): kept so that a restart does not have to revoke them again.
    pub decided: Vec<Range>,
}

/// Most blocks the hard state holds; those below the commit point are dropped first.
pub const MAX_BLOCKS: usize = 4096;

/// A message on the stream from one replica to another.
#[derive(Clone, Debug)]
pub struct Msg {
    /// The sender's incarnation.
    pub epoch: u64,
    /// Counts the messages of this incarnation to this receiver, from 1.
    pub seq: u64,
    pub body: Body,
}

#[derive(Clone, Debug)]
pub enum Body {
    /// PROPOSE(0, v) from the owner: a client batch at one of its instances (Rule 1). On an
    /// in-sync stream it also says the sender skipped its instances below it (Opt. 2).
    Suggest {
        instance: u64,
        commands: Vec<Command>,
    },
    /// The reply to a SUGGEST, to its owner only. On an in-sync stream it promises that the
    /// sender will suggest nothing below `instance` that it has not already (Opt. 1).
    Accept { instance: u64 },
    /// A ballot-0 suggestion was accepted by a quorum (phase 3, from the owner).
    Learn { instance: u64 },
    /// Explicit skips (Accelerator 1, and the heartbeat): the sender will suggest nothing
    /// below `upto` that it has not already sent.
    Skip { upto: u64 },
    /// Phase 1 of a revocation: promise not to accept below `ballot` in `range`.
    Prepare { ballot: u64, range: Range },
    /// The promise, with every value accepted in the range and the no-op blocks accepted.
    Ack {
        ballot: u64,
        range: Range,
        values: Vec<Accepted>,
        noops: Vec<Block>,
    },
    /// Refusal: the sender promised `promised` in part of the range.
    Nack {
        ballot: u64,
        range: Range,
        promised: u64,
    },
    /// Phase 2 of a revocation: every instance of the range is a no-op but those listed.
    Propose {
        ballot: u64,
        range: Range,
        values: Vec<(u64, Vec<Command>)>,
    },
    /// Phase-2 accept of a revocation, to the revoker.
    Accepted { ballot: u64, range: Range },
    /// Decided instances: every instance of `range` is a no-op but those listed (the
    /// revoker's phase 3, and an answer to [`Body::Need`]).
    Decide {
        range: Range,
        values: Vec<(u64, Vec<Command>)>,
    },
    /// Catch-up: the sender's first undecided instance is `from`.
    Need { from: u64 },
    /// Every instance of `[from, to)` is decided: a no-op but those listed (the answer to
    /// [`Body::Need`]).
    Learned {
        from: u64,
        to: u64,
        values: Vec<(u64, Vec<Command>)>,
    },
    /// A replica behind tells the sender it follows its stream again from here on: say which
    /// of your instances in `[from, your index)` you suggested.
    SyncRequest { from: u64 },
    /// The sender's own instances in `[from, upto)` that it suggested (with the value when it
    /// still holds it); the others are skips. `upto` is its index, or, when `more` is set,
    /// where a list cut at `SYNC_MAX` entries stops: the sender suggested more at and above
    /// `upto`, so the receiver is not in sync yet and asks again from there. `from` was raised
    /// to the sender's log base when it had compacted below the request.
    Sync {
        from: u64,
        upto: u64,
        more: bool,
        suggested: Vec<(u64, Option<Vec<Command>>)>,
    },
    /// State transfer: the chunk at `offset` of the newest snapshot covering `from`.
    SnapRequest { from: u64, offset: u64 },
    SnapChunk {
        at: Position,
        total: u64,
        offset: u64,
        data: Bytes,
    },
}

impl MessageKind for Msg {
    fn kind(&self) -> &'static str {
        match &self.body {
            Body::Suggest { .. } => "suggest",
            Body::Accept { .. } => "accept",
            Body::Learn { .. } => "learn",
            Body::Skip { .. } => "skip",
            Body::Prepare { .. } => "prepare",
            Body::Ack { .. } => "ack",
            Body::Nack { .. } => "nack",
            Body::Propose { .. } => "propose",
            Body::Accepted { .. } => "accepted",
            Body::Decide { .. } => "decide",
            Body::Need { .. } => "need",
            Body::Learned { .. } => "learned",
            Body::SyncRequest { .. } => "sync-request",
            Body::Sync { .. } => "sync",
            Body::SnapRequest { .. } => "snap-request",
            Body::SnapChunk { .. } => "snap-chunk",
        }
    }
}

fn commands_size(cs: &[Command]) -> usize {
    4 + cs.iter().map(|c| 12 + c.payload.len()).sum::<usize>()
}

fn values_size(vs: &[(u64, Vec<Command>)]) -> usize {
    4 + vs.iter().map(|(_, c)| 8 + commands_size(c)).sum::<usize>()
}

impl WireSize for Msg {
    fn wire_size(&self) -> usize {
        17 + match &self.body {
            Body::Suggest { commands, .. } => 8 + commands_size(commands),
            Body::Accept { .. } | Body::Learn { .. } | Body::Skip { .. } => 8,
            Body::Need { .. } | Body::SyncRequest { .. } => 8,
            Body::Prepare { .. } | Body::Accepted { .. } => 24,
            Body::Nack { .. } => 32,
            Body::Ack { values, noops, .. } => {
                32 + values
                    .iter()
                    .map(|a| 16 + commands_size(&a.commands))
                    .sum::<usize>()
                    + 24 * noops.len()
            }
            Body::Propose { values, .. } => 24 + values_size(values),
            Body::Decide { values, .. } => 16 + values_size(values),
            Body::Learned { values, .. } => 16 + values_size(values),
            Body::Sync { suggested, .. } => {
                21 + suggested
                    .iter()
                    .map(|(_, v)| 9 + v.as_ref().map_or(0, |c| commands_size(c)))
                    .sum::<usize>()
            }
            Body::SnapRequest { .. } => 16,
            Body::SnapChunk { data, .. } => 36 + data.len(),
        }
    }
}

/// A batch, refused beyond [`MAX_BATCH`] commands.
fn batch(b: &mut Bytes) -> WireResult<Vec<Command>> {
    synod_core::wire::get_batch(b, MAX_BATCH)
}

impl Wire for Range {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u64(self.from);
        b.put_u64(self.to);
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        let r = Range {
            from: get_u64(b)?,
            to: get_u64(b)?,
        };
        if r.to < r.from {
            return Err(WireError::Invalid("instance range ending before it starts"));
        }
        Ok(r)
    }
}

impl Wire for Block {
    fn encode(&self, b: &mut BytesMut) {
        self.range.encode(b);
        b.put_u64(self.ballot);
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(Block {
            range: Range::decode(b)?,
            ballot: get_u64(b)?,
        })
    }
}

impl Wire for Accepted {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u64(self.instance);
        b.put_u64(self.ballot);
        self.commands.encode(b);
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(Accepted {
            instance: get_u64(b)?,
            ballot: get_u64(b)?,
            commands: batch(b)?,
        })
    }
}

impl Wire for Rec {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u64(self.instance);
        b.put_u64(self.ballot);
        b.put_u8(self.own as u8);
        self.commands.encode(b);
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(Rec {
            instance: get_u64(b)?,
            ballot: get_u64(b)?,
            own: get_bool(b)?,
            commands: batch(b)?,
        })
    }
}

fn blocks(b: &mut Bytes) -> WireResult<Vec<Block>> {
    let n = get_count(b, "blocks", 24)?;
    if n > MAX_BLOCKS {
        return Err(WireError::TooLarge {
            what: "blocks",
            len: n as u64,
            max: MAX_BLOCKS as u64,
        });
    }
    (0..n).map(|_| Block::decode(b)).collect()
}

fn put_blocks(b: &mut BytesMut, bs: &[Block]) {
    b.put_u32(bs.len() as u32);
    for x in bs {
        x.encode(b);
    }
}

impl Wire for Hard {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u64(self.incarnation);
        b.put_u64(self.index);
        b.put_u64(self.round);
        put_blocks(b, &self.promises);
        put_blocks(b, &self.noops);
        b.put_u32(self.decided.len() as u32);
        for r in &self.decided {
            r.encode(b);
        }
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(Hard {
            incarnation: get_u64(b)?,
            index: get_u64(b)?,
            round: get_u64(b)?,
            promises: blocks(b)?,
            noops: blocks(b)?,
            decided: {
                let n = get_count(b, "decided blocks", 16)?;
                if n > MAX_BLOCKS {
                    return Err(WireError::TooLarge {
                        what: "decided blocks",
                        len: n as u64,
                        max: MAX_BLOCKS as u64,
                    });
                }
                (0..n)
                    .map(|_| Range::decode(b))
                    .collect::<WireResult<Vec<_>>>()?
            },
        })
    }
}

fn put_values(b: &mut BytesMut, vs: &[(u64, Vec<Command>)]) {
    b.put_u32(vs.len() as u32);
    for (i, c) in vs {
        b.put_u64(*i);
        c.encode(b);
    }
}

fn values(b: &mut Bytes) -> WireResult<Vec<(u64, Vec<Command>)>> {
    let n = get_count(b, "values", 12)?;
    (0..n).map(|_| Ok((get_u64(b)?, batch(b)?))).collect()
}

impl Wire for Msg {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u64(self.epoch);
        b.put_u64(self.seq);
        match &self.body {
            Body::Suggest { instance, commands } => {
                b.put_u8(1);
                b.put_u64(*instance);
                commands.encode(b);
            }
            Body::Accept { instance } => {
                b.put_u8(2);
                b.put_u64(*instance);
            }
            Body::Learn { instance } => {
                b.put_u8(3);
                b.put_u64(*instance);
            }
            Body::Skip { upto } => {
                b.put_u8(4);
                b.put_u64(*upto);
            }
            Body::Prepare { ballot, range } => {
                b.put_u8(5);
                b.put_u64(*ballot);
                range.encode(b);
            }
            Body::Ack {
                ballot,
                range,
                values,
                noops,
            } => {
                b.put_u8(6);
                b.put_u64(*ballot);
                range.encode(b);
                values.encode(b);
                put_blocks(b, noops);
            }
            Body::Nack {
                ballot,
                range,
                promised,
            } => {
                b.put_u8(7);
                b.put_u64(*ballot);
                range.encode(b);
                b.put_u64(*promised);
            }
            Body::Propose {
                ballot,
                range,
                values,
            } => {
                b.put_u8(8);
                b.put_u64(*ballot);
                range.encode(b);
                put_values(b, values);
            }
            Body::Accepted { ballot, range } => {
                b.put_u8(9);
                b.put_u64(*ballot);
                range.encode(b);
            }
            Body::Decide { range, values } => {
                b.put_u8(10);
                range.encode(b);
                put_values(b, values);
            }
            Body::Need { from } => {
                b.put_u8(11);
                b.put_u64(*from);
            }
            Body::Learned { from, to, values } => {
                b.put_u8(16);
                b.put_u64(*from);
                b.put_u64(*to);
                put_values(b, values);
            }
            Body::SyncRequest { from } => {
                b.put_u8(12);
                b.put_u64(*from);
            }
            Body::Sync {
                from,
                upto,
                more,
                suggested,
            } => {
                b.put_u8(13);
                b.put_u64(*from);
                b.put_u64(*upto);
                b.put_u8(*more as u8);
                b.put_u32(suggested.len() as u32);
                for (i, v) in suggested {
                    b.put_u64(*i);
                    match v {
                        Some(c) => {
                            b.put_u8(1);
                            c.encode(b);
                        }
                        None => b.put_u8(0),
                    }
                }
            }
            Body::SnapRequest { from, offset } => {
                b.put_u8(14);
                b.put_u64(*from);
                b.put_u64(*offset);
            }
            Body::SnapChunk {
                at,
                total,
                offset,
                data,
            } => {
                b.put_u8(15);
                at.encode(b);
                b.put_u64(*total);
                b.put_u64(*offset);
                synod_core::wire::put_bytes(b, data);
            }
        }
    }

    fn decode(b: &mut Bytes) -> WireResult<Self> {
        let epoch = get_u64(b)?;
        let seq = get_u64(b)?;
        let body = match get_u8(b)? {
            1 => Body::Suggest {
                instance: get_u64(b)?,
                commands: batch(b)?,
            },
            2 => Body::Accept {
                instance: get_u64(b)?,
            },
            3 => Body::Learn {
                instance: get_u64(b)?,
            },
            4 => Body::Skip { upto: get_u64(b)? },
            5 => Body::Prepare {
                ballot: get_u64(b)?,
                range: Range::decode(b)?,
            },
            6 => Body::Ack {
                ballot: get_u64(b)?,
                range: Range::decode(b)?,
                values: Vec::<Accepted>::decode(b)?,
                noops: blocks(b)?,
            },
            7 => Body::Nack {
                ballot: get_u64(b)?,
                range: Range::decode(b)?,
                promised: get_u64(b)?,
            },
            8 => Body::Propose {
                ballot: get_u64(b)?,
                range: Range::decode(b)?,
                values: values(b)?,
            },
            9 => Body::Accepted {
                ballot: get_u64(b)?,
                range: Range::decode(b)?,
            },
            10 => Body::Decide {
                range: Range::decode(b)?,
                values: values(b)?,
            },
            11 => Body::Need { from: get_u64(b)? },
            12 => Body::SyncRequest { from: get_u64(b)? },
            16 => {
                let (from, to) = (get_u64(b)?, get_u64(b)?);
                if to < from {
                    return Err(WireError::Invalid("learned range ending before it starts"));
                }
                Body::Learned {
                    from,
                    to,
                    values: values(b)?,
                }
            }
            13 => {
                let from = get_u64(b)?;
                let upto = get_u64(b)?;
                let more = get_bool(b)?;
                let n = get_count(b, "suggestions", 9)?;
                let mut suggested = Vec::with_capacity(n);
                for _ in 0..n {
                    let i = get_u64(b)?;
                    let v = if get_bool(b)? { Some(batch(b)?) } else { None };
                    suggested.push((i, v));
                }
                Body::Sync {
                    from,
                    upto,
                    more,
                    suggested,
                }
            }
            14 => Body::SnapRequest {
                from: get_u64(b)?,
                offset: get_u64(b)?,
            },
            15 => Body::SnapChunk {
                at: Position::decode(b)?,
                total: get_u64(b)?,
                offset: get_u64(b)?,
                data: synod_core::wire::get_bytes(b, "snapshot chunk", 64 << 20)?,
            },
            _ => return Err(WireError::Invalid("mencius message type")),
        };
        Ok(Msg { epoch, seq, body })
    }
}

/// A snapshot's bytes are what the state machine made; only its position is ours.
pub fn snapshot_instance(s: &Snapshot) -> u64 {
    tag_instance(s.at.tag)
}
