//! PFT's messages (pft.md §1.3), its log record and its hard state, with their encodings.
//!
//! Every ordering message carries its view (erratum §6.1.2: ACCEPTACK too). Batches travel
//! whole: ACCEPT carries the batch `S`, so a backup never needs the client's own copy.

use bytes::{BufMut, Bytes, BytesMut};
use synod_core::wire::{get_bool, get_u64, get_u8, Wire, WireError, WireResult};
use synod_core::{Command, LogRecord, MessageKind, Position, Snapshot, WireSize};

/// The order at one sequence number `n` as a replica holds it: the batch it accepted, in which
/// view, and whether it knows the order is chosen (committed). An empty batch is a null order
/// (a NEWVIEW hole filler): it advances `n` and delivers nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    pub n: u64,
    pub view: u64,
    /// Known chosen: a `C` record in the thesis's state log.
    pub chosen: bool,
    pub commands: Vec<Command>,
}

/// The durable log record: an `A` record, keyed by `n`. A later view's accept at `n` replaces
/// it (docs/contract.md §1.3). The `C` mark is not written: a delivered order is durable at
/// the `f + 1` acceptors that acknowledged it, and a restarted replica learns again what is
/// chosen (docs/protocols/paxos.md §2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub n: u64,
    pub view: u64,
    pub commands: Vec<Command>,
}

/// The position of command `i` of a batch of `len` at sequence number `n`, its sequence number
/// and what is left of its batch: the core toolkit's position tag (synod_core::kit::tag).
pub use synod_core::kit::tag::{batch_of as tag_n, left as tag_left, tag, MAX_BATCH};

impl LogRecord for Accepted {
    fn key(&self) -> u64 {
        self.n
    }
    fn carries(&self, id: u64) -> bool {
        self.commands.iter().any(|c| c.id == id)
    }
    fn key_of(at: Position) -> u64 {
        tag_n(at.tag)
    }
}

/// What survives a crash besides the log: the view promised (the last VIEWCHANGE sent, the
/// Paxos phase-1 promise) and the view installed (the last NEWVIEW accepted), and whether the
/// replica lost state and has not recovered it from its peers yet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hard {
    pub promised: u64,
    pub installed: u64,
    pub recovering: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// REQUEST: a backup forwards the commands submitted to it to the primary of its view.
    /// `seq` increases per forward within one incarnation (`nonce`), so a replayed or
    /// duplicated forward is dropped and a session's commands keep their order.
    Forward {
        view: u64,
        nonce: u64,
        seq: u64,
        commands: Vec<Command>,
    },
    /// `<ACCEPT, v, n, S>`.
    Accept {
        view: u64,
        n: u64,
        commands: Vec<Command>,
    },
    /// `<ACCEPTACK, v, n, i>`: sent once the A record is durable.
    AcceptAck { view: u64, n: u64 },
    /// `<COMMIT, v, n>`, cumulative: every order up to `upto` is chosen. The primary repeats it
    /// as its heartbeat.
    Commit { view: u64, upto: u64 },
    /// `<CHECKPOINT, l, i>` with a digest of the state at `l` (`n` whole batches, `slot`
    /// commands).
    Checkpoint { n: u64, slot: u64, digest: u64 },
    /// MBQ `<QUERYORDER_Multicast, n_lower, n_upper, i>`. `lower = None` is the status report
    /// (the invalid `n_lower`); `executed` is the sender's execution point.
    QueryMulticast {
        lower: Option<u64>,
        upper: u64,
        executed: u64,
    },
    /// PBQ `<QUERYORDER_Primary, n_expected, n_received, i>`.
    QueryPrimary { expected: u64, received: u64 },
    /// `<RESPONSEORDER, i, S>`: state records. An unchosen record is an `A` record and never
    /// permits execution on its own. `base`: the responder holds no order at or below it (a
    /// requester that needs one asks it for a state transfer).
    ResponseOrder { base: u64, orders: Vec<Order> },
    /// `<VIEWCHANGE, v+1, n, l, P, i>`: the promise for `view`, with the sender's execution
    /// point `n`, stable checkpoint `l` and every order it holds above `n` (the thesis: above
    /// `l`; what the sender executed is chosen, and the new primary fetches what it lacks).
    ViewChange {
        view: u64,
        executed: u64,
        stable: u64,
        orders: Vec<Order>,
    },
    /// `<NEWVIEW, v+1, O>`: the orders reissued in `view` (nulls included), from above the
    /// lowest execution point the new primary collected, which is at least `base`, the highest
    /// stable checkpoint reported. A replica below `base` pulls a checkpoint; one between `base`
    /// and the first order catches up.
    NewView {
        view: u64,
        base: u64,
        orders: Vec<Order>,
    },
    /// "Send me your NEWVIEW": a replica heard of `view` from its primary without installing it.
    NeedView { view: u64 },
    /// The new primary of `view`, alive and collecting VIEWCHANGEs, names the replicas whose
    /// reports it holds: the others send theirs again (after a wait that doubles), and nobody
    /// gives the view up while its primary is heard (large reports take time to arrive).
    Collecting { view: u64, have: Vec<u32> },
    /// Pre-vote: "I hear nothing from my primary; would you change to `view`?" No promise.
    Suspect { view: u64 },
    /// "So would I": the sender's primary is silent or stuck too (or it is changing views
    /// already, or the asker installed a later view than the sender's), and the view it would
    /// move to.
    SuspectAck { view: u64 },
    /// State transfer: send the stable checkpoint covering at least `n` whole batches, from
    /// byte `offset` of the snapshot at `at` (`None`: the latest).
    SnapRequest {
        n: u64,
        at: Option<Position>,
        offset: u64,
    },
    /// One chunk of a checkpoint's snapshot, `total` bytes in all.
    SnapChunk {
        at: Position,
        total: u64,
        offset: u64,
        data: Bytes,
    },
    /// A replica that lost its disk asks for its peers' state (docs/protocols/paxos.md §9).
    Recover { nonce: u64 },
    RecoverReply {
        nonce: u64,
        promised: u64,
        stable: u64,
        orders: Vec<Order>,
    },
}

impl MessageKind for Msg {
    fn kind(&self) -> &'static str {
        match self {
            Msg::Forward { .. } => "forward",
            Msg::Accept { .. } => "accept",
            Msg::AcceptAck { .. } => "acceptack",
            Msg::Commit { .. } => "commit",
            Msg::Checkpoint { .. } => "checkpoint",
            Msg::QueryMulticast { .. } => "query-mbq",
            Msg::QueryPrimary { .. } => "query-pbq",
            Msg::ResponseOrder { .. } => "responseorder",
            Msg::ViewChange { .. } => "viewchange",
            Msg::NewView { .. } => "newview",
            Msg::NeedView { .. } => "needview",
            Msg::Collecting { .. } => "collecting",
            Msg::Suspect { .. } => "suspect",
            Msg::SuspectAck { .. } => "suspect-ack",
            Msg::SnapRequest { .. } => "snap-request",
            Msg::SnapChunk { .. } => "snap-chunk",
            Msg::Recover { .. } => "recover",
            Msg::RecoverReply { .. } => "recover-reply",
        }
    }
}

fn commands_size(cs: &[Command]) -> usize {
    4 + cs.iter().map(|c| 12 + c.payload.len()).sum::<usize>()
}

fn orders_size(os: &[Order]) -> usize {
    4 + os
        .iter()
        .map(|o| 17 + commands_size(&o.commands))
        .sum::<usize>()
}

impl WireSize for Msg {
    fn wire_size(&self) -> usize {
        1 + match self {
            Msg::Forward { commands, .. } => 24 + commands_size(commands),
            Msg::Accept { commands, .. } => 16 + commands_size(commands),
            Msg::AcceptAck { .. } | Msg::Commit { .. } => 16,
            Msg::Checkpoint { .. } => 24,
            Msg::QueryMulticast { .. } => 25,
            Msg::QueryPrimary { .. } => 16,
            Msg::ResponseOrder { orders, .. } => 8 + orders_size(orders),
            Msg::ViewChange { orders, .. } => 24 + orders_size(orders),
            Msg::NewView { orders, .. } => 16 + orders_size(orders),
            Msg::NeedView { .. } => 8,
            Msg::Collecting { have, .. } => 12 + 4 * have.len(),
            Msg::Suspect { .. } | Msg::SuspectAck { .. } => 8,
            Msg::SnapRequest { .. } => 33,
            Msg::SnapChunk { data, .. } => 36 + data.len(),
            Msg::Recover { .. } => 8,
            Msg::RecoverReply { orders, .. } => 24 + orders_size(orders),
        }
    }
}

impl Wire for Order {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u64(self.n);
        b.put_u64(self.view);
        b.put_u8(self.chosen as u8);
        self.commands.encode(b);
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(Order {
            n: get_u64(b)?,
            view: get_u64(b)?,
            chosen: get_bool(b)?,
            commands: batch(b)?,
        })
    }
}

/// A batch, refused beyond [`MAX_BATCH`] commands.
fn batch(b: &mut Bytes) -> WireResult<Vec<Command>> {
    synod_core::wire::get_batch(b, MAX_BATCH)
}

impl Wire for Accepted {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u64(self.n);
        b.put_u64(self.view);
        self.commands.encode(b);
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(Accepted {
            n: get_u64(b)?,
            view: get_u64(b)?,
            commands: batch(b)?,
        })
    }
}

impl Wire for Hard {
    fn encode(&self, b: &mut BytesMut) {
        b.put_u64(self.promised);
        b.put_u64(self.installed);
        b.put_u8(self.recovering as u8);
    }
    fn decode(b: &mut Bytes) -> WireResult<Self> {
        let h = Hard {
            promised: get_u64(b)?,
            installed: get_u64(b)?,
            recovering: get_bool(b)?,
        };
        if h.installed > h.promised {
            return Err(WireError::Invalid(
                "hard state: installed view above the promise",
            ));
        }
        Ok(h)
    }
}

fn put_opt(b: &mut BytesMut, v: Option<u64>) {
    match v {
        Some(v) => {
            b.put_u8(1);
            b.put_u64(v);
        }
        None => b.put_u8(0),
    }
}

fn get_opt(b: &mut Bytes) -> WireResult<Option<u64>> {
    Ok(if get_bool(b)? {
        Some(get_u64(b)?)
    } else {
        None
    })
}

impl Wire for Msg {
    fn encode(&self, b: &mut BytesMut) {
        match self {
            Msg::Forward {
                view,
                nonce,
                seq,
                commands,
            } => {
                b.put_u8(1);
                b.put_u64(*view);
                b.put_u64(*nonce);
                b.put_u64(*seq);
                commands.encode(b);
            }
            Msg::Accept { view, n, commands } => {
                b.put_u8(2);
                b.put_u64(*view);
                b.put_u64(*n);
                commands.encode(b);
            }
            Msg::AcceptAck { view, n } => {
                b.put_u8(3);
                b.put_u64(*view);
                b.put_u64(*n);
            }
            Msg::Commit { view, upto } => {
                b.put_u8(4);
                b.put_u64(*view);
                b.put_u64(*upto);
            }
            Msg::Checkpoint { n, slot, digest } => {
                b.put_u8(5);
                b.put_u64(*n);
                b.put_u64(*slot);
                b.put_u64(*digest);
            }
            Msg::QueryMulticast {
                lower,
                upper,
                executed,
            } => {
                b.put_u8(6);
                put_opt(b, *lower);
                b.put_u64(*upper);
                b.put_u64(*executed);
            }
            Msg::QueryPrimary { expected, received } => {
                b.put_u8(7);
                b.put_u64(*expected);
                b.put_u64(*received);
            }
            Msg::ResponseOrder { base, orders } => {
                b.put_u8(8);
                b.put_u64(*base);
                orders.encode(b);
            }
            Msg::ViewChange {
                view,
                executed,
                stable,
                orders,
            } => {
                b.put_u8(9);
                b.put_u64(*view);
                b.put_u64(*executed);
                b.put_u64(*stable);
                orders.encode(b);
            }
            Msg::NewView { view, base, orders } => {
                b.put_u8(10);
                b.put_u64(*view);
                b.put_u64(*base);
                orders.encode(b);
            }
            Msg::Suspect { view } => {
                b.put_u8(17);
                b.put_u64(*view);
            }
            Msg::SuspectAck { view } => {
                b.put_u8(18);
                b.put_u64(*view);
            }
            Msg::Collecting { view, have } => {
                b.put_u8(16);
                b.put_u64(*view);
                b.put_u32(have.len() as u32);
                for h in have {
                    b.put_u32(*h);
                }
            }
            Msg::NeedView { view } => {
                b.put_u8(11);
                b.put_u64(*view);
            }
            Msg::SnapRequest { n, at, offset } => {
                b.put_u8(12);
                b.put_u64(*n);
                match at {
                    Some(p) => {
                        b.put_u8(1);
                        p.encode(b);
                    }
                    None => b.put_u8(0),
                }
                b.put_u64(*offset);
            }
            Msg::SnapChunk {
                at,
                total,
                offset,
                data,
            } => {
                b.put_u8(13);
                at.encode(b);
                b.put_u64(*total);
                b.put_u64(*offset);
                synod_core::wire::put_bytes(b, data);
            }
            Msg::Recover { nonce } => {
                b.put_u8(14);
                b.put_u64(*nonce);
            }
            Msg::RecoverReply {
                nonce,
                promised,
                stable,
                orders,
            } => {
                b.put_u8(15);
                b.put_u64(*nonce);
                b.put_u64(*promised);
                b.put_u64(*stable);
                orders.encode(b);
            }
        }
    }

    fn decode(b: &mut Bytes) -> WireResult<Self> {
        Ok(match get_u8(b)? {
            1 => Msg::Forward {
                view: get_u64(b)?,
                nonce: get_u64(b)?,
                seq: get_u64(b)?,
                commands: batch(b)?,
            },
            2 => Msg::Accept {
                view: get_u64(b)?,
                n: get_u64(b)?,
                commands: batch(b)?,
            },
            3 => Msg::AcceptAck {
                view: get_u64(b)?,
                n: get_u64(b)?,
            },
            4 => Msg::Commit {
                view: get_u64(b)?,
                upto: get_u64(b)?,
            },
            5 => Msg::Checkpoint {
                n: get_u64(b)?,
                slot: get_u64(b)?,
                digest: get_u64(b)?,
            },
            6 => Msg::QueryMulticast {
                lower: get_opt(b)?,
                upper: get_u64(b)?,
                executed: get_u64(b)?,
            },
            7 => Msg::QueryPrimary {
                expected: get_u64(b)?,
                received: get_u64(b)?,
            },
            8 => Msg::ResponseOrder {
                base: get_u64(b)?,
                orders: Vec::decode(b)?,
            },
            9 => Msg::ViewChange {
                view: get_u64(b)?,
                executed: get_u64(b)?,
                stable: get_u64(b)?,
                orders: Vec::decode(b)?,
            },
            10 => Msg::NewView {
                view: get_u64(b)?,
                base: get_u64(b)?,
                orders: Vec::decode(b)?,
            },
            11 => Msg::NeedView { view: get_u64(b)? },
            17 => Msg::Suspect { view: get_u64(b)? },
            18 => Msg::SuspectAck { view: get_u64(b)? },
            16 => {
                let view = get_u64(b)?;
                let n = synod_core::wire::get_count(b, "reporters", 4)?;
                let mut have = Vec::with_capacity(n.min(64));
                for _ in 0..n {
                    have.push(synod_core::wire::get_u32(b)?);
                }
                Msg::Collecting { view, have }
            }
            12 => Msg::SnapRequest {
                n: get_u64(b)?,
                at: if get_bool(b)? {
                    Some(Position::decode(b)?)
                } else {
                    None
                },
                offset: get_u64(b)?,
            },
            13 => Msg::SnapChunk {
                at: Position::decode(b)?,
                total: get_u64(b)?,
                offset: get_u64(b)?,
                data: synod_core::wire::get_bytes(b, "snapshot chunk", 1 << 24)?,
            },
            14 => Msg::Recover { nonce: get_u64(b)? },
            15 => Msg::RecoverReply {
                nonce: get_u64(b)?,
                promised: get_u64(b)?,
                stable: get_u64(b)?,
                orders: Vec::decode(b)?,
            },
            _ => return Err(WireError::Invalid("paxos message type")),
        })
    }
}

/// CHECKPOINT's state digest: the CRC-32C of the snapshot's bytes (the checksum the log already
/// uses, hardware-accelerated) with the slot it covers in the low half.
pub fn digest(s: &Snapshot) -> u64 {
    (crc32c::crc32c(&s.data) as u64) << 32 | (s.at.slot & 0xFFFF_FFFF)
}

/// A VIEWCHANGE as the new primary keeps it: one replica's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewReport {
    pub view: u64,
    pub executed: u64,
    /// The sender's log base: it reports every order it holds above it.
    pub stable: u64,
    pub orders: Vec<Order>,
}
