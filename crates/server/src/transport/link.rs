//! Emulated peer links (`[link_emulation]`, off by default): a one-way delay, optional jitter
//! and a bandwidth limit applied to every message this node sends to its peers, so that a
//! cluster on one machine's loopback behaves like one on a slower network (the thesis's
//! 100 Mbit/s switched Ethernet, where a hop took milliseconds). netem would do this in the
//! kernel; it is not available everywhere, so the transport does it itself.
//!
//! The model is the simulator's (crates/sim, `send_one`): every node has **one network
//! interface shared by all its outgoing links**. A message occupies the interface for
//! `bytes × 8 / bandwidth` after whatever is ahead of it (of any link), then travels for
//! `delay + uniform[0, jitter]`. A link never reorders: a message is released no earlier than
//! the one before it on the same link, whatever its jitter. Nothing is emulated on receipt, so
//! each hop is delayed once.
//!
//! It works on what the core and the driver have already released to the transport, so it only
//! ever delays a message: the durability order (nothing leaves before the write it depends on is
//! durable) is untouched. Messages wait in a delay line of at most `peer_queue` messages per
//! link; while it is full the link takes nothing more from its queue, which then fills and the
//! peer is reset as too slow, exactly as when the real network cannot keep up. A broken
//! connection loses its delay line, as a real one loses what is in flight.
//!
//! Release times are kept by a thread of the node's own (one per process, only when emulation
//! is on): tokio's timer has a resolution of a millisecond and measured about 1.1 ms late per
//! hop on a 2 ms delay, a 55 % error; the thread waits on a futex with a nanosecond timeout and
//! wakes the link's task within tens of microseconds. A message is never written before its
//! release time, whichever clock woke the link.

use super::frame::encode_message;
use super::{link_down, write_batch, Outgoing, Pump, TransportConfig, TransportStats, BATCH_BYTES};
use bytes::BytesMut;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{mpsc as std_mpsc, Mutex};
use std::time::{Duration, Instant};
use synod_core::NodeId;
use tokio::sync::{mpsc, oneshot};

/// What every peer link of this node emulates. All zero (the default): nothing, and the
/// transport sends as it always did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkEmulation {
    /// One-way delay added to every message.
    pub delay: Duration,
    /// Extra delay, uniform in `[0, jitter]`, drawn per message (FIFO is kept regardless).
    pub jitter: Duration,
    /// Bandwidth of this node's network interface, shared by all its outgoing links;
    /// 0 is unlimited.
    pub bits_per_s: u64,
    /// Bandwidth of this one link (`[link_emulation.peers.<id>]`), on top of the interface's:
    /// a message leaves once both have carried it; 0 is unlimited.
    pub link_bits_per_s: u64,
}

impl LinkEmulation {
    pub fn is_on(&self) -> bool {
        !self.delay.is_zero()
            || !self.jitter.is_zero()
            || self.bits_per_s > 0
            || self.link_bits_per_s > 0
    }

    /// How long `bytes` occupy the interface.
    fn transmission(&self, bytes: usize) -> Duration {
        transmission(bytes, self.bits_per_s)
    }
}

/// How long `bytes` take at `bits_per_s` (0: no time).
fn transmission(bytes: usize, bits_per_s: u64) -> Duration {
    if bits_per_s == 0 {
        return Duration::ZERO;
    }
    let ns = (bytes as u128 * 8 * 1_000_000_000).div_ceil(bits_per_s as u128);
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

impl From<LinkEmulation> for LinkEmulations {
    fn from(all: LinkEmulation) -> Self {
        LinkEmulations::uniform(all)
    }
}

/// The emulation of every outgoing link of a node: one for all, and per-peer overrides
/// (asymmetric links: `[link_emulation.peers.<id>]`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkEmulations {
    pub all: LinkEmulation,
    /// The whole emulation of the link to a peer, where it differs from `all`.
    pub peers: std::collections::BTreeMap<NodeId, LinkEmulation>,
}

impl LinkEmulations {
    /// The same emulation on every link.
    pub fn uniform(all: LinkEmulation) -> Self {
        LinkEmulations {
            all,
            peers: Default::default(),
        }
    }

    /// The emulation of the link to `peer`.
    pub fn to(&self, peer: NodeId) -> LinkEmulation {
        self.peers.get(&peer).copied().unwrap_or(self.all)
    }

    /// Whether any link is emulated.
    pub fn is_on(&self) -> bool {
        self.all.is_on() || self.peers.values().any(|e| e.is_on())
    }
}

/// This node's emulated network interface: when it is next free, and the clock thread that
/// wakes links at their release times. Shared by the sending side of every peer.
#[derive(Debug)]
pub struct Nic {
    free_at: Mutex<Instant>,
    /// Requests to the clock thread: wake me (send on the oneshot) at this time.
    clock: Option<Mutex<std_mpsc::Sender<Alarm>>>,
}

/// A wake-up due at a time (ordered by time, then by arrival).
struct Alarm {
    at: Instant,
    seq: u64,
    wake: oneshot::Sender<()>,
}

impl PartialEq for Alarm {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Alarm {}
impl PartialOrd for Alarm {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Alarm {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// A nic without a clock thread: links then wait on tokio's timer.
impl Default for Nic {
    fn default() -> Nic {
        Nic {
            free_at: Mutex::new(Instant::now()),
            clock: None,
        }
    }
}

impl Nic {
    /// The interface of a node, with its clock thread if any link is emulated (`on`). The
    /// thread ends when the nic is dropped.
    pub fn new(on: bool) -> Nic {
        let mut nic = Nic::default();
        if on {
            let (tx, rx) = std_mpsc::channel();
            match std::thread::Builder::new()
                .name("synod-link-clock".into())
                .spawn(move || clock(rx))
            {
                Ok(_) => nic.clock = Some(Mutex::new(tx)),
                Err(e) => tracing::warn!(
                    "no clock thread for the emulated links ({e}): using tokio's timer, \
                     about a millisecond late per hop"
                ),
            }
        }
        nic
    }

    /// A receiver that completes at `at` or later (at once with an error if there is no clock
    /// thread: the caller then sleeps on tokio's timer).
    fn alarm(&self, at: Instant, seq: u64) -> oneshot::Receiver<()> {
        let (wake, rx) = oneshot::channel();
        if let Some(c) = &self.clock {
            let _ = c.lock().expect("clock").send(Alarm { at, seq, wake });
        }
        rx
    }

    /// Put `tx` worth of bytes on the interface at `now`: when the last of them has left.
    fn transmit(&self, now: Instant, tx: Duration) -> Instant {
        let mut free_at = self.free_at.lock().expect("nic");
        *free_at = (*free_at).max(now) + tx;
        *free_at
    }
}

/// The clock thread: fires every alarm at its time. It holds at most one alarm per link (a link
/// asks again only once the last one fired or was abandoned with its connection).
fn clock(requests: std_mpsc::Receiver<Alarm>) {
    let mut due: BinaryHeap<Reverse<Alarm>> = BinaryHeap::new();
    loop {
        let now = Instant::now();
        while due.peek().is_some_and(|a| a.0.at <= now) {
            let Reverse(a) = due.pop().expect("peeked");
            let _ = a.wake.send(()); // the link may be gone: nothing to wake
        }
        let next = match due.peek() {
            Some(a) => requests.recv_timeout(a.0.at - now),
            None => requests
                .recv()
                .map_err(|_| std_mpsc::RecvTimeoutError::Disconnected),
        };
        match next {
            Ok(a) => due.push(Reverse(a)),
            Err(std_mpsc::RecvTimeoutError::Timeout) => {}
            Err(std_mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// The emulated state of one connection to a peer: when each message may be written.
pub(super) struct Link<'a> {
    emulation: LinkEmulation,
    nic: &'a Nic,
    /// The release time of the last message on this link (FIFO: never earlier for the next).
    last_release: Option<Instant>,
    /// When this link's own bandwidth (if limited) is next free.
    free_at: Instant,
    rng: rand::rngs::StdRng,
}

impl<'a> Link<'a> {
    pub(super) fn new(emulation: LinkEmulation, nic: &'a Nic) -> Self {
        Link {
            emulation,
            nic,
            last_release: None,
            free_at: Instant::now(),
            rng: rand::rngs::StdRng::from_entropy(),
        }
    }

    /// When a message of `bytes` handed to the link at `now` may be written to the socket.
    pub(super) fn release_at(&mut self, now: Instant, bytes: usize) -> Instant {
        let e = self.emulation;
        let mut sent = if e.bits_per_s > 0 {
            self.nic.transmit(now, e.transmission(bytes))
        } else {
            now
        };
        if e.link_bits_per_s > 0 {
            self.free_at = self.free_at.max(now) + transmission(bytes, e.link_bits_per_s);
            sent = sent.max(self.free_at);
        }
        let jitter = if e.jitter.is_zero() {
            Duration::ZERO
        } else {
            Duration::from_nanos(
                self.rng
                    .gen_range(0..=u64::try_from(e.jitter.as_nanos()).unwrap_or(u64::MAX)),
            )
        };
        let mut release = sent + e.delay + jitter;
        if let Some(last) = self.last_release {
            release = release.max(last);
        }
        self.last_release = Some(release);
        release
    }
}

/// [`super::pump`] through an emulated link: messages are encoded as they arrive, wait in a
/// bounded delay line until their release time, and everything due is written at once.
#[allow(clippy::too_many_arguments)]
pub(super) async fn pump(
    cfg: &TransportConfig,
    nic: &Nic,
    peer: NodeId,
    stream: &mut super::secure::PeerStream,
    rx: &mut mpsc::Receiver<Outgoing>,
    reset: &AtomicBool,
    depth: &AtomicU64,
    stats: &TransportStats,
) -> Pump {
    let mut link = Link::new(cfg.link.to(peer), nic);
    // The encoded messages waiting, in order, and each one's release time and length.
    let mut pending = BytesMut::with_capacity(64 * 1024);
    let mut line: VecDeque<(Instant, usize)> = VecDeque::new();
    let limit = cfg.peer_queue.max(1);
    // The alarm set for the release time of the line's first message.
    let mut alarm: Option<(Instant, oneshot::Receiver<()>)> = None;
    let mut alarms = 0u64;
    loop {
        match line.front() {
            Some(&(at, _)) if alarm.as_ref().map(|a| a.0) != Some(at) => {
                alarms += 1;
                alarm = Some((at, nic.alarm(at, alarms)));
            }
            Some(_) => {}
            None => alarm = None,
        }
        tokio::select! {
            biased;
            () = async {
                let (at, fired) = alarm.as_mut().expect("enabled");
                if fired.await.is_err() {
                    // No clock thread: tokio's timer instead.
                    tokio::time::sleep_until((*at).into()).await;
                }
            }, if alarm.is_some() => {
                alarm = None;
                let now = Instant::now();
                let (mut n, mut len) = (0u64, 0usize);
                while let Some(&(at, l)) = line.front() {
                    if at > now || (n > 0 && len + l > BATCH_BYTES) {
                        break;
                    }
                    line.pop_front();
                    n += 1;
                    len += l;
                }
                if n == 0 {
                    continue; // woken early: never released before its time
                }
                if cfg.cut.is_cut(peer) {
                    return Pump::Failed(io::Error::other("cut by fault injection"));
                }
                let batch = pending.split_to(len);
                if let Err(end) = write_batch(stream, &batch, n, depth, stats).await {
                    return end;
                }
            }
            m = rx.recv(), if line.len() < limit => {
                let Some(mut m) = m else {
                    return Pump::Closed;
                };
                if let Some(end) = link_down(cfg, peer, reset) {
                    return end;
                }
                // Take whatever else is queued too, while the delay line has room.
                loop {
                    let before = pending.len();
                    encode_message(&mut pending, m.kind, m.group, &m.data, cfg.chunk_bytes);
                    let bytes = pending.len() - before;
                    line.push_back((link.release_at(Instant::now(), bytes), bytes));
                    if line.len() >= limit {
                        break;
                    }
                    match rx.try_recv() {
                        Ok(next) => m = next,
                        Err(_) => break,
                    }
                }
            }
        }
    }
}
