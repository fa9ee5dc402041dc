//! Peer transport on TCP.
//!
//! Each replica keeps one outbound connection to every peer (its messages to that peer, FIFO)
//! and accepts one inbound connection from every peer. A connection starts with a handshake
//! (magic, version, cluster id, node id, protocol) that refuses a peer from another cluster or
//! protocol. Then it carries frames:
//!
//! ```text
//! [u32 length][u32 CRC32C of body][body = u8 kind, data]
//! kind 0: a whole message   1: a chunk, more follow   2: the last chunk
//!      3: hello             4: hello reply (u8 ok, reason)
//! ```
//!
//! Messages larger than `chunk_bytes` (snapshots) travel as chunks and are reassembled up to
//! `max_message_bytes`. A frame with a bad checksum or an undecodable message closes the
//! connection with a logged reason; the driver is told the connection broke.
//!
//! Sending is bounded: each peer has a queue of at most `peer_queue` messages. A peer that lets
//! it fill is too slow or dead: its queue is dropped, its connection reset, and the driver told,
//! so a slow follower cannot make the leader run out of memory. Queued messages are written in
//! batches (one `write` for many small messages) with TCP_NODELAY.

use crate::driver::DriverInput;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use synod_core::wire::{get_string, get_u16, get_u32, get_u8, put_str, Wire};
use synod_core::NodeId;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tracing::{debug, info, warn};

const MAGIC: u32 = 0x5359_4E44; // "SYND"
const VERSION: u16 = 1;
const K_WHOLE: u8 = 0;
const K_CHUNK: u8 = 1;
const K_LAST: u8 = 2;
const K_HELLO: u8 = 3;
const K_REPLY: u8 = 4;
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
const BATCH_BYTES: usize = 1 << 20;
/// Read buffer of an established inbound peer connection.
const PEER_READ_BUFFER: usize = 64 << 10;
/// Largest hello or hello reply: a connection that has not identified itself gets no more.
const HELLO_MAX_FRAME: usize = 4096;
/// An inbound connection must complete its hello within this time.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// Peers this replica is cut off from (fault injection).
    pub cut: Arc<Cut>,
    pub cluster_id: String,
    pub protocol: String,
    pub me: NodeId,
    pub members: BTreeMap<NodeId, SocketAddr>,
    pub chunk_bytes: usize,
    pub max_message_bytes: usize,
    pub peer_queue: usize,
    /// Inbound connections in their hello at once; more are closed at once.
    pub max_handshakes: usize,
}

impl TransportConfig {
    fn max_frame(&self) -> usize {
        self.chunk_bytes + 64 * 1024
    }
}

/// Counters the admin endpoint reports.
#[derive(Default, Debug)]
pub struct TransportStats {
    pub frames_in: AtomicU64,
    pub frames_out: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub rejected_handshakes: AtomicU64,
    pub bad_frames: AtomicU64,
    pub slow_peer_resets: AtomicU64,
}

/// The sending side of one peer.
pub struct PeerSender<M> {
    tx: mpsc::Sender<M>,
    reset: Arc<AtomicBool>,
    depth: Arc<AtomicU64>,
}

impl<M> PeerSender<M> {
    /// Queue a message. Returns false when the queue is full: the caller treats the peer as
    /// disconnected (the queue is dropped and the connection reset).
    pub fn send(&self, msg: M) -> bool {
        match self.tx.try_send(msg) {
            Ok(()) => {
                self.depth.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(_) => {
                self.reset.store(true, Ordering::Relaxed);
                false
            }
        }
    }
    pub fn depth(&self) -> u64 {
        self.depth.load(Ordering::Relaxed)
    }
}

/// Fault injection (`POST /v1/fault/cut`): the peers this replica is partitioned from. Cut peers'
/// connections are closed in both directions and their handshakes refused until healed, so the
/// protocol sees exactly what a partition shows it: broken connections that do not come back.
#[derive(Debug, Default)]
pub struct Cut {
    peers: std::sync::RwLock<std::collections::HashSet<NodeId>>,
}

impl Cut {
    pub fn is_cut(&self, peer: NodeId) -> bool {
        self.peers.read().expect("cut").contains(&peer)
    }
    pub fn set(&self, peers: impl IntoIterator<Item = NodeId>) {
        *self.peers.write().expect("cut") = peers.into_iter().collect();
    }
    pub fn get(&self) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self.peers.read().expect("cut").iter().copied().collect();
        v.sort();
        v
    }
}

fn frame(out: &mut BytesMut, kind: u8, data: &[u8]) {
    let mut body = BytesMut::with_capacity(1 + data.len());
    body.put_u8(kind);
    body.put_slice(data);
    out.put_u32(body.len() as u32);
    out.put_u32(crc32c::crc32c(&body));
    out.put_slice(&body);
}

/// Encode one message as one or more frames.
fn encode_message<M: Wire>(out: &mut BytesMut, msg: &M, chunk: usize) {
    let data = msg.to_bytes();
    if data.len() <= chunk {
        frame(out, K_WHOLE, &data);
        return;
    }
    let mut rest = &data[..];
    while rest.len() > chunk {
        frame(out, K_CHUNK, &rest[..chunk]);
        rest = &rest[chunk..];
    }
    frame(out, K_LAST, rest);
}

#[derive(Debug)]
enum FrameError {
    Io(io::Error),
    Bad(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Io(e) => write!(f, "{e}"),
            FrameError::Bad(s) => write!(f, "{s}"),
        }
    }
}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        FrameError::Io(e)
    }
}

/// Read one frame of at most `max_frame` bytes. Memory grows with the bytes that arrive, not
/// with the length the frame claims. `Ok(None)` at a clean end of stream.
async fn read_frame<R: AsyncRead + Unpin>(
    s: &mut R,
    max_frame: usize,
) -> Result<Option<(u8, Bytes)>, FrameError> {
    let mut head = [0u8; 8];
    match s.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(head[..4].try_into().expect("4")) as usize;
    let crc = u32::from_be_bytes(head[4..].try_into().expect("4"));
    if len == 0 || len > max_frame {
        return Err(FrameError::Bad(format!(
            "frame length {len} outside 1..={max_frame}"
        )));
    }
    let body = crate::read_body(s, len).await?;
    if crc32c::crc32c(&body) != crc {
        return Err(FrameError::Bad("frame checksum mismatch".into()));
    }
    let mut body = Bytes::from(body);
    let kind = body.get_u8();
    Ok(Some((kind, body)))
}

struct Hello {
    cluster_id: String,
    node_id: NodeId,
    protocol: String,
}

fn encode_hello(h: &Hello) -> BytesMut {
    let mut d = BytesMut::new();
    d.put_u32(MAGIC);
    d.put_u16(VERSION);
    put_str(&mut d, &h.cluster_id);
    d.put_u32(h.node_id);
    put_str(&mut d, &h.protocol);
    let mut out = BytesMut::new();
    frame(&mut out, K_HELLO, &d);
    out
}

fn decode_hello(mut b: Bytes) -> Result<Hello, String> {
    let magic = get_u32(&mut b).map_err(|e| e.to_string())?;
    if magic != MAGIC {
        return Err("not a synod peer (bad magic)".into());
    }
    let version = get_u16(&mut b).map_err(|e| e.to_string())?;
    if version != VERSION {
        return Err(format!(
            "peer protocol version {version}, expected {VERSION}"
        ));
    }
    let cluster_id = get_string(&mut b, "cluster id", 256).map_err(|e| e.to_string())?;
    let node_id = get_u32(&mut b).map_err(|e| e.to_string())?;
    let protocol = get_string(&mut b, "protocol", 64).map_err(|e| e.to_string())?;
    Ok(Hello {
        cluster_id,
        node_id,
        protocol,
    })
}

fn reply(ok: bool, reason: &str) -> BytesMut {
    let mut d = BytesMut::new();
    d.put_u8(ok as u8);
    put_str(&mut d, reason);
    let mut out = BytesMut::new();
    frame(&mut out, K_REPLY, &d);
    out
}

/// Start the sending side for every peer. Returns the per-peer senders.
pub fn start_outbound<M: Wire + Send + 'static>(
    cfg: &TransportConfig,
    events: mpsc::Sender<DriverInput<M>>,
    stats: Arc<TransportStats>,
) -> BTreeMap<NodeId, PeerSender<M>> {
    let mut senders = BTreeMap::new();
    for (&peer, &addr) in &cfg.members {
        if peer == cfg.me {
            continue;
        }
        let (tx, rx) = mpsc::channel(cfg.peer_queue.max(1));
        let reset = Arc::new(AtomicBool::new(false));
        let depth = Arc::new(AtomicU64::new(0));
        tokio::spawn(outbound_loop(
            cfg.clone(),
            peer,
            addr,
            rx,
            reset.clone(),
            depth.clone(),
            events.clone(),
            stats.clone(),
        ));
        senders.insert(peer, PeerSender { tx, reset, depth });
    }
    senders
}

#[allow(clippy::too_many_arguments)]
async fn outbound_loop<M: Wire + Send + 'static>(
    cfg: TransportConfig,
    peer: NodeId,
    addr: SocketAddr,
    mut rx: mpsc::Receiver<M>,
    reset: Arc<AtomicBool>,
    depth: Arc<AtomicU64>,
    events: mpsc::Sender<DriverInput<M>>,
    stats: Arc<TransportStats>,
) {
    let mut backoff = Duration::from_millis(20);
    let hello = encode_hello(&Hello {
        cluster_id: cfg.cluster_id.clone(),
        node_id: cfg.me,
        protocol: cfg.protocol.clone(),
    });
    loop {
        if cfg.cut.is_cut(peer) {
            // Partitioned by fault injection: what is queued is lost, as on a broken link.
            while rx.try_recv().is_ok() {}
            depth.store(0, Ordering::Relaxed);
            if rx.is_closed() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        match connect(addr, &hello).await {
            Ok(mut stream) => {
                backoff = Duration::from_millis(20);
                debug!(peer, %addr, "connected to peer");
                reset.store(false, Ordering::Relaxed);
                let why = pump(&cfg, peer, &mut stream, &mut rx, &reset, &depth, &stats).await;
                match why {
                    Pump::Closed => return, // the driver is gone: shutting down
                    Pump::Failed(e) => debug!(peer, "connection to peer lost: {e}"),
                    Pump::TooSlow => {
                        stats.slow_peer_resets.fetch_add(1, Ordering::Relaxed);
                        warn!(
                            peer,
                            "peer too slow: its send queue filled; resetting the connection"
                        );
                    }
                }
                // What was queued for the broken connection is lost, as if in flight.
                while rx.try_recv().is_ok() {}
                depth.store(0, Ordering::Relaxed);
                let _ = stream.shutdown().await;
                if events
                    .send(DriverInput::Disconnected { peer })
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Err(e) => {
                debug!(peer, %addr, "cannot connect to peer: {e}");
                if let ConnectError::Refused(reason) = &e {
                    warn!(peer, %addr, "peer refused the handshake: {reason}");
                }
                // Messages for an unreachable peer are dropped (it will resynchronise).
                while rx.try_recv().is_ok() {}
                depth.store(0, Ordering::Relaxed);
                if rx.is_closed() {
                    return;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
        }
    }
}

enum ConnectError {
    Io(io::Error),
    Refused(String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Io(e) => write!(f, "{e}"),
            ConnectError::Refused(r) => write!(f, "refused: {r}"),
        }
    }
}

async fn connect(addr: SocketAddr, hello: &[u8]) -> Result<TcpStream, ConnectError> {
    let mut s = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr))
        .await
        .map_err(|_| ConnectError::Io(io::ErrorKind::TimedOut.into()))?
        .map_err(ConnectError::Io)?;
    s.set_nodelay(true).map_err(ConnectError::Io)?;
    s.write_all(hello).await.map_err(ConnectError::Io)?;
    let r = tokio::time::timeout(Duration::from_secs(2), read_frame(&mut s, HELLO_MAX_FRAME))
        .await
        .map_err(|_| ConnectError::Io(io::ErrorKind::TimedOut.into()))?;
    match r {
        Ok(Some((K_REPLY, mut b))) => {
            let ok = get_u8(&mut b).map_err(|e| ConnectError::Refused(e.to_string()))?;
            let reason = get_string(&mut b, "reason", 1024).unwrap_or_default();
            if ok == 1 {
                Ok(s)
            } else {
                Err(ConnectError::Refused(reason))
            }
        }
        Ok(_) => Err(ConnectError::Refused("unexpected reply".into())),
        Err(FrameError::Io(e)) => Err(ConnectError::Io(e)),
        Err(FrameError::Bad(b)) => Err(ConnectError::Refused(b)),
    }
}

enum Pump {
    Closed,
    Failed(io::Error),
    TooSlow,
}

async fn pump<M: Wire>(
    cfg: &TransportConfig,
    peer: NodeId,
    stream: &mut TcpStream,
    rx: &mut mpsc::Receiver<M>,
    reset: &AtomicBool,
    depth: &AtomicU64,
    stats: &TransportStats,
) -> Pump {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        let Some(first) = rx.recv().await else {
            return Pump::Closed;
        };
        if reset.load(Ordering::Relaxed) {
            return Pump::TooSlow;
        }
        if cfg.cut.is_cut(peer) {
            return Pump::Failed(io::Error::other("cut by fault injection"));
        }
        buf.clear();
        let mut n = 1u64;
        encode_message(&mut buf, &first, cfg.chunk_bytes);
        // Coalesce whatever else is queued into the same write.
        while buf.len() < BATCH_BYTES {
            match rx.try_recv() {
                Ok(m) => {
                    encode_message(&mut buf, &m, cfg.chunk_bytes);
                    n += 1;
                }
                Err(_) => break,
            }
        }
        depth.fetch_sub(n.min(depth.load(Ordering::Relaxed)), Ordering::Relaxed);
        match tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(&buf)).await {
            Ok(Ok(())) => {
                stats.frames_out.fetch_add(n, Ordering::Relaxed);
                stats
                    .bytes_out
                    .fetch_add(buf.len() as u64, Ordering::Relaxed);
            }
            Ok(Err(e)) => return Pump::Failed(e),
            Err(_) => return Pump::Failed(io::ErrorKind::TimedOut.into()),
        }
    }
}

/// Accept peers on `listener` and feed their messages to the driver.
pub async fn serve_inbound<M: Wire + Send + 'static>(
    cfg: TransportConfig,
    listener: TcpListener,
    events: mpsc::Sender<DriverInput<M>>,
    stats: Arc<TransportStats>,
) {
    // One live inbound connection per peer: a newer one supersedes the older, whose leftover
    // messages and late disconnect must not interleave with the new connection's (FIFO).
    let live: Arc<Mutex<HashMap<NodeId, Arc<AtomicBool>>>> = Arc::default();
    // Connections that have not identified themselves yet are few and short-lived: anyone can
    // open them, so their number is capped (and each has HELLO_TIMEOUT and HELLO_MAX_FRAME).
    let handshakes = Arc::new(Semaphore::new(cfg.max_handshakes.max(1)));
    let refused = crate::RateLimitedWarn::new();
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                warn!("peer listener: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = handshakes.clone().try_acquire_owned() else {
            stats.rejected_handshakes.fetch_add(1, Ordering::Relaxed);
            drop(stream);
            if let Some(more) = refused.check() {
                warn!(
                    %addr,
                    "refusing a peer connection: {} connections are in their handshake (limits.max_peer_handshakes); {more} more refused since the last warning",
                    cfg.max_handshakes
                );
            }
            continue;
        };
        let cfg = cfg.clone();
        let events = events.clone();
        let stats = stats.clone();
        let live = live.clone();
        tokio::spawn(async move {
            inbound(cfg, stream, addr, events, stats, live, permit).await;
        });
    }
}

async fn inbound<M: Wire + Send + 'static>(
    cfg: TransportConfig,
    mut s: TcpStream,
    addr: SocketAddr,
    events: mpsc::Sender<DriverInput<M>>,
    stats: Arc<TransportStats>,
    live: Arc<Mutex<HashMap<NodeId, Arc<AtomicBool>>>>,
    handshake: tokio::sync::OwnedSemaphorePermit,
) {
    let _ = s.set_nodelay(true);
    let max_frame = cfg.max_frame();
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, read_frame(&mut s, HELLO_MAX_FRAME)).await
    {
        Ok(Ok(Some((K_HELLO, b)))) => decode_hello(b),
        Ok(Ok(Some(_))) => Err("expected a hello frame".to_string()),
        Ok(Ok(None)) => return,
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no hello within {} s", HELLO_TIMEOUT.as_secs())),
    };
    let check = hello.and_then(|h| {
        if h.cluster_id != cfg.cluster_id {
            Err(format!(
                "peer belongs to cluster '{}', this is cluster '{}'",
                h.cluster_id, cfg.cluster_id
            ))
        } else if h.protocol != cfg.protocol {
            Err(format!(
                "peer runs protocol '{}', this cluster runs '{}'",
                h.protocol, cfg.protocol
            ))
        } else if cfg.cut.is_cut(h.node_id) {
            Err(format!("node {} is cut off (fault injection)", h.node_id))
        } else if h.node_id == cfg.me || !cfg.members.contains_key(&h.node_id) {
            Err(format!(
                "node id {} is not a peer of this replica",
                h.node_id
            ))
        } else {
            Ok(h.node_id)
        }
    });
    let peer = match check {
        Ok(p) => p,
        Err(reason) => {
            stats.rejected_handshakes.fetch_add(1, Ordering::Relaxed);
            // Anyone can send a bad hello: at most one message a second.
            static REFUSED: crate::RateLimitedWarn = crate::RateLimitedWarn::new();
            if let Some(more) = REFUSED.check() {
                warn!(%addr, "refusing peer connection: {reason} ({more} more refused since the last message)");
            }
            let _ = tokio::time::timeout(WRITE_TIMEOUT, s.write_all(&reply(false, &reason))).await;
            return;
        }
    };
    if !matches!(
        tokio::time::timeout(WRITE_TIMEOUT, s.write_all(&reply(true, ""))).await,
        Ok(Ok(()))
    ) {
        return;
    }
    drop(handshake);
    info!(peer, %addr, "peer connected");
    let superseded = Arc::new(AtomicBool::new(false));
    if let Some(old) = live
        .lock()
        .expect("live peers")
        .insert(peer, superseded.clone())
    {
        old.store(true, Ordering::SeqCst);
    }
    let mut partial: Option<BytesMut> = None;
    // Buffered from here on: a peer coalesces many messages into one write, and they are read
    // with one recv instead of two per frame (profile.md). Large frames bypass the buffer.
    let mut s = tokio::io::BufReader::with_capacity(PEER_READ_BUFFER, s);
    let why = loop {
        let (kind, data) = match read_frame(&mut s, max_frame).await {
            Ok(Some(f)) => f,
            Ok(None) => break "closed by peer".to_string(),
            Err(FrameError::Io(e)) => break e.to_string(),
            Err(FrameError::Bad(b)) => {
                stats.bad_frames.fetch_add(1, Ordering::Relaxed);
                break format!("malformed frame: {b}");
            }
        };
        stats.frames_in.fetch_add(1, Ordering::Relaxed);
        stats
            .bytes_in
            .fetch_add(data.len() as u64 + 9, Ordering::Relaxed);
        let whole = match kind {
            K_WHOLE if partial.is_none() => data,
            K_CHUNK | K_LAST => {
                let p = partial.get_or_insert_with(BytesMut::new);
                if p.len() + data.len() > cfg.max_message_bytes {
                    stats.bad_frames.fetch_add(1, Ordering::Relaxed);
                    break format!(
                        "message larger than max_message_bytes ({})",
                        cfg.max_message_bytes
                    );
                }
                p.extend_from_slice(&data);
                if kind == K_CHUNK {
                    continue;
                }
                partial.take().expect("set").freeze()
            }
            _ => {
                stats.bad_frames.fetch_add(1, Ordering::Relaxed);
                break format!("unexpected frame kind {kind}");
            }
        };
        let msg = match M::from_bytes(whole) {
            Ok(m) => m,
            Err(e) => {
                stats.bad_frames.fetch_add(1, Ordering::Relaxed);
                break format!("undecodable message: {e}");
            }
        };
        if superseded.load(Ordering::SeqCst) {
            return; // a newer connection from this peer took over
        }
        if cfg.cut.is_cut(peer) {
            break "cut by fault injection".to_string();
        }
        if events
            .send(DriverInput::Peer { from: peer, msg })
            .await
            .is_err()
        {
            return;
        }
    };
    if why.starts_with("malformed")
        || why.starts_with("undecodable")
        || why.starts_with("message larger")
        || why.starts_with("unexpected")
    {
        warn!(peer, %addr, "closing peer connection: {why}");
    } else {
        debug!(peer, %addr, "peer connection ended: {why}");
    }
    {
        let mut l = live.lock().expect("live peers");
        if superseded.load(Ordering::SeqCst) {
            return; // the newer connection is the one that counts
        }
        if l.get(&peer).is_some_and(|f| Arc::ptr_eq(f, &superseded)) {
            l.remove(&peer);
        }
    }
    let _ = events.send(DriverInput::Disconnected { peer }).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_messages_are_chunked() {
        #[derive(Debug, PartialEq)]
        struct Blob(Bytes);
        impl Wire for Blob {
            fn encode(&self, b: &mut BytesMut) {
                synod_core::wire::put_bytes(b, &self.0);
            }
            fn decode(b: &mut Bytes) -> synod_core::wire::WireResult<Self> {
                Ok(Blob(synod_core::wire::get_bytes(b, "blob", 1 << 30)?))
            }
        }
        let blob = Blob(Bytes::from(vec![9u8; 10_000]));
        let mut out = BytesMut::new();
        encode_message(&mut out, &blob, 4096);
        // Walk the frames: 3 chunks (4096 + 4096 + rest).
        let mut kinds = Vec::new();
        let mut data = BytesMut::new();
        let mut b = out.freeze();
        while b.has_remaining() {
            let len = b.get_u32() as usize;
            let crc = b.get_u32();
            let body = b.split_to(len);
            assert_eq!(crc32c::crc32c(&body), crc);
            kinds.push(body[0]);
            data.extend_from_slice(&body[1..]);
        }
        assert_eq!(kinds, vec![K_CHUNK, K_CHUNK, K_LAST]);
        assert_eq!(Blob::from_bytes(data.freeze()).unwrap(), blob);
    }

    mod hostile {
        use super::*;
        use crate::fuzz::{block_on, bounded, config, mutate, mutation};
        use proptest::prelude::*;
        use synod_zab::{Msg, Point, Zxid};

        fn hello() -> Vec<u8> {
            encode_hello(&Hello {
                cluster_id: "c1".into(),
                node_id: 2,
                protocol: "zab".into(),
            })
            .to_vec()
        }

        /// Valid peer-port byte streams: a hello, a hello reply, frames of messages.
        fn corpus() -> Vec<Vec<u8>> {
            let mut msgs = BytesMut::new();
            let p = Point {
                zxid: Zxid::new(1, 2),
                slot: 3,
            };
            for m in [
                Msg::NewEpoch { epoch: 4 },
                Msg::UpToDate {
                    epoch: 4,
                    commit: p,
                },
            ] {
                encode_message(&mut msgs, &m, 1 << 20);
            }
            let mut chunked = BytesMut::new();
            encode_message(
                &mut chunked,
                &Msg::Forward {
                    command: synod_core::Command {
                        id: 1,
                        payload: Bytes::from(vec![1u8; 100]),
                    },
                },
                16,
            );
            vec![
                hello(),
                reply(false, "no").to_vec(),
                msgs.to_vec(),
                chunked.to_vec(),
            ]
        }

        /// Read frames from `data` as an inbound connection does: the hello with the hello
        /// limit, then messages, decoded, with chunks reassembled.
        fn consume(data: &[u8]) {
            bounded(data.len(), || {
                block_on(async {
                    let mut r = data;
                    match read_frame(&mut r, HELLO_MAX_FRAME).await {
                        Ok(Some((K_HELLO, b))) => {
                            let _ = decode_hello(b);
                        }
                        Ok(Some((K_REPLY, mut b))) => {
                            let _ = get_u8(&mut b);
                            let _ = get_string(&mut b, "reason", 1024);
                        }
                        _ => {}
                    }
                    let mut r = data;
                    let mut partial = BytesMut::new();
                    while let Ok(Some((kind, b))) = read_frame(&mut r, (1 << 20) + 65536).await {
                        match kind {
                            K_WHOLE => {
                                let _ = Msg::from_bytes(b);
                            }
                            K_CHUNK => partial.extend_from_slice(&b),
                            K_LAST => {
                                partial.extend_from_slice(&b);
                                let _ = Msg::from_bytes(std::mem::take(&mut partial).freeze());
                            }
                            _ => break,
                        }
                    }
                })
            });
        }

        proptest! {
            #![proptest_config(config(3_000))]

            #[test]
            fn mutated_peer_streams_never_panic(
                which in any::<usize>(),
                muts in prop::collection::vec(mutation(), 1..5),
            ) {
                let c = corpus();
                consume(&mutate(&c[which % c.len()], &muts, &c));
            }

            /// Mutations behind a valid checksum reach decode_hello itself.
            #[test]
            fn mutated_hellos_are_refused_or_accepted_never_panic(
                muts in prop::collection::vec(mutation(), 1..5),
            ) {
                let h = hello();
                let data = mutate(&h[9..], &muts, &[h[9..].to_vec()]);
                let b = Bytes::from(data.clone());
                if let Ok(h) = bounded(data.len(), || decode_hello(b)) {
                    prop_assert!(h.cluster_id.len() <= 256 && h.protocol.len() <= 64);
                }
                let mut framed = BytesMut::new();
                frame(&mut framed, K_HELLO, &data);
                consume(&framed);
            }

            #[test]
            fn random_peer_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..512)) {
                consume(&data);
            }
        }

        #[test]
        fn a_hello_claiming_a_megabyte_is_refused_unread() {
            let mut d = BytesMut::new();
            d.put_u32(1 << 20);
            d.put_u32(0);
            d.put_u8(K_HELLO);
            let r = bounded(d.len(), || {
                block_on(read_frame(&mut &d[..], HELLO_MAX_FRAME))
            });
            assert!(matches!(r, Err(FrameError::Bad(_))));
        }
    }
}
