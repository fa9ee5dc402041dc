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
//! `max_message_bytes`. A frame with a bad checksum closes the connection with a logged reason;
//! the driver is told the connection broke. Message bytes go to the host as they are: the host
//! decodes them with the group's codec (crates/host), and asks for a reset when it cannot.
//!
//! Sending is bounded: each peer has a queue of at most `peer_queue` messages. A peer that lets
//! it fill is too slow or dead: its queue is dropped, its connection reset, and the driver told,
//! so a slow follower cannot make the leader run out of memory. Queued messages are written in
//! batches (one `write` for many small messages) with TCP_NODELAY.
//!
//! Optionally (`[link_emulation]`, off by default) every outgoing message is delayed and paced
//! as on a slower network: see [`link`].

mod frame;
pub mod link;
mod secure;

use bytes::{Bytes, BytesMut};
pub use link::{LinkEmulation, LinkEmulations, Nic};

use crate::config::PeerAddr;
use frame::{
    decode_hello, decode_reply, encode_hello, encode_message, read_frame, reply, split_group,
    FrameError, Hello, HELLO_MAX_FRAME, K_CHUNK, K_HELLO, K_LAST, K_REPLY, K_SUBMIT,
    K_SUBMIT_CHUNK, K_SUBMIT_LAST, K_WHOLE,
};
use secure::{DialError, PeerStream};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use synod_core::{GroupId, NodeId};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tracing::{debug, info, warn};

const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
const BATCH_BYTES: usize = 1 << 20;
/// Read buffer of an established inbound peer connection.
const PEER_READ_BUFFER: usize = 64 << 10;
/// An inbound connection must complete its hello within this time.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// What the transport delivers to the host.
pub enum Inbound {
    /// A message of `group` from `from`, as its bytes (the host decodes it).
    Message {
        from: NodeId,
        group: GroupId,
        data: Bytes,
    },
    /// A command for `group`, sent by a peer whose state machine addressed it (see
    /// `crate::host`'s routing of messages between groups).
    Submit {
        from: NodeId,
        group: GroupId,
        payload: Bytes,
    },
    /// The connection with `peer` broke: messages in flight may be lost.
    Disconnected { peer: NodeId },
}

/// One frame to send to a peer: a message or a submission of `group`, encoded once.
#[derive(Clone, Debug)]
pub struct Outgoing {
    kind: u8,
    group: GroupId,
    data: Bytes,
}

#[derive(Clone)]
pub struct TransportConfig {
    /// Peers this replica is cut off from (fault injection).
    pub cut: Arc<Cut>,
    pub cluster_id: String,
    pub me: NodeId,
    /// Every node of the cluster, this one included.
    pub members: BTreeMap<NodeId, PeerAddr>,
    /// The groups this node runs and their protocols: a peer that runs one of them with
    /// another protocol is refused, and frames of other groups are dropped.
    pub groups: Vec<(GroupId, String)>,
    pub chunk_bytes: usize,
    pub max_message_bytes: usize,
    pub peer_queue: usize,
    /// Inbound connections in their hello at once; more are closed at once.
    pub max_handshakes: usize,
    /// Delay and bandwidth emulated on the outgoing links (off by default).
    pub link: LinkEmulations,
    /// Mutual TLS between peers (`None`: plain TCP, `insecure = true`).
    pub tls: Option<Arc<crate::tls::Tls>>,
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
    /// Frames of groups this node does not run, dropped.
    pub dropped_frames: AtomicU64,
    pub slow_peer_resets: AtomicU64,
}

/// The sending side of one peer.
pub struct PeerSender {
    tx: mpsc::Sender<Outgoing>,
    reset: Arc<AtomicBool>,
    depth: Arc<AtomicU64>,
}

impl PeerSender {
    /// Queue a message of `group`. Returns false when the queue is full: the caller treats the
    /// peer as disconnected (the queue is dropped and the connection reset).
    pub fn send(&self, group: GroupId, data: Bytes) -> bool {
        self.queue(Outgoing {
            kind: K_WHOLE,
            group,
            data,
        })
    }

    /// Queue a command for `group`, to be submitted at the peer.
    pub fn submit(&self, group: GroupId, payload: Bytes) -> bool {
        self.queue(Outgoing {
            kind: K_SUBMIT,
            group,
            data: payload,
        })
    }

    fn queue(&self, o: Outgoing) -> bool {
        // Once a message was dropped for want of room, nothing more is queued until the
        // connection is reset: a later message must never reach the peer without the dropped
        // one before it (FIFO per connection, with losses only at a reset).
        if self.reset.load(Ordering::Relaxed) {
            return false;
        }
        match self.tx.try_send(o) {
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

/// Start the sending side for every peer. Returns the per-peer senders.
pub fn start_outbound<T: From<Inbound> + Send + 'static>(
    cfg: &TransportConfig,
    events: mpsc::Sender<T>,
    stats: Arc<TransportStats>,
) -> BTreeMap<NodeId, PeerSender> {
    let mut senders = BTreeMap::new();
    // One emulated network interface for everything this node sends (used only when
    // `cfg.link` is on).
    let nic = Arc::new(Nic::new(cfg.link.is_on()));
    if cfg.link.is_on() {
        info!(
            delay = ?cfg.link.all.delay,
            jitter = ?cfg.link.all.jitter,
            bits_per_s = cfg.link.all.bits_per_s,
            overrides = ?cfg.link.peers,
            "emulating peer links: every message to a peer is delayed and paced (link_emulation)"
        );
    }
    for (&peer, addr) in &cfg.members {
        if peer == cfg.me {
            continue;
        }
        let (tx, rx) = mpsc::channel(cfg.peer_queue.max(1));
        let reset = Arc::new(AtomicBool::new(false));
        let depth = Arc::new(AtomicU64::new(0));
        tokio::spawn(outbound_loop(
            cfg.clone(),
            peer,
            addr.clone(),
            rx,
            reset.clone(),
            depth.clone(),
            events.clone(),
            stats.clone(),
            nic.clone(),
        ));
        senders.insert(peer, PeerSender { tx, reset, depth });
    }
    senders
}

/// The hello frame a node sends first on a peer connection (for tools and tests that play a
/// peer, e.g. an impostor in the TLS tests).
pub fn hello_frame(cluster_id: &str, node_id: NodeId, groups: &[(GroupId, String)]) -> Vec<u8> {
    encode_hello(&Hello {
        cluster_id: cluster_id.to_string(),
        node_id,
        groups: groups.to_vec(),
    })
    .to_vec()
}

fn my_hello(cfg: &TransportConfig) -> BytesMut {
    encode_hello(&Hello {
        cluster_id: cfg.cluster_id.clone(),
        node_id: cfg.me,
        groups: cfg.groups.clone(),
    })
}

#[allow(clippy::too_many_arguments)]
async fn outbound_loop<T: From<Inbound> + Send + 'static>(
    cfg: TransportConfig,
    peer: NodeId,
    addr: PeerAddr,
    mut rx: mpsc::Receiver<Outgoing>,
    reset: Arc<AtomicBool>,
    depth: Arc<AtomicU64>,
    events: mpsc::Sender<T>,
    stats: Arc<TransportStats>,
    nic: Arc<Nic>,
) {
    let mut backoff = Duration::from_millis(20);
    let hello = my_hello(&cfg);
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
        match connect(&cfg, peer, &addr, &hello).await {
            Ok(mut stream) => {
                backoff = Duration::from_millis(20);
                debug!(peer, %addr, "connected to peer");
                reset.store(false, Ordering::Relaxed);
                let why = if cfg.link.to(peer).is_on() {
                    let (s, r) = (&mut stream, &mut rx);
                    link::pump(&cfg, &nic, peer, s, r, &reset, &depth, &stats).await
                } else {
                    pump(&cfg, peer, &mut stream, &mut rx, &reset, &depth, &stats).await
                };
                match why {
                    Pump::Closed => return, // the host is gone: shutting down
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
                    .send(Inbound::Disconnected { peer }.into())
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Err(e) => {
                debug!(peer, %addr, "cannot connect to peer: {e}");
                match &e {
                    ConnectError::Refused(reason) => {
                        warn!(peer, %addr, "peer refused the handshake: {reason}")
                    }
                    ConnectError::Tls(reason) => {
                        stats.rejected_handshakes.fetch_add(1, Ordering::Relaxed);
                        warn!(peer, %addr, "refusing the peer: {reason}")
                    }
                    ConnectError::Io(_) => {}
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
    Tls(String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Io(e) => write!(f, "{e}"),
            ConnectError::Refused(r) => write!(f, "refused: {r}"),
            ConnectError::Tls(r) => write!(f, "{r}"),
        }
    }
}

async fn connect(
    cfg: &TransportConfig,
    peer: NodeId,
    addr: &PeerAddr,
    hello: &[u8],
) -> Result<PeerStream, ConnectError> {
    let mut s = secure::dial(cfg, peer, addr).await.map_err(|e| match e {
        DialError::Io(e) => ConnectError::Io(e),
        DialError::Tls(r) => ConnectError::Tls(r),
    })?;
    s.write_all(hello).await.map_err(ConnectError::Io)?;
    s.flush().await.map_err(ConnectError::Io)?;
    let r = tokio::time::timeout(Duration::from_secs(2), read_frame(&mut s, HELLO_MAX_FRAME))
        .await
        .map_err(|_| ConnectError::Io(io::ErrorKind::TimedOut.into()))?;
    match r {
        Ok(Some((K_REPLY, b))) => match decode_reply(b) {
            Ok((true, _)) => Ok(s),
            Ok((false, reason)) => Err(ConnectError::Refused(reason)),
            Err(e) => Err(ConnectError::Refused(e)),
        },
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

async fn pump(
    cfg: &TransportConfig,
    peer: NodeId,
    stream: &mut PeerStream,
    rx: &mut mpsc::Receiver<Outgoing>,
    reset: &AtomicBool,
    depth: &AtomicU64,
    stats: &TransportStats,
) -> Pump {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        let Some(first) = rx.recv().await else {
            return Pump::Closed;
        };
        if let Some(end) = link_down(cfg, peer, reset) {
            return end;
        }
        buf.clear();
        let mut n = 1u64;
        encode_message(
            &mut buf,
            first.kind,
            first.group,
            &first.data,
            cfg.chunk_bytes,
        );
        // Coalesce whatever else is queued into the same write.
        while buf.len() < BATCH_BYTES {
            match rx.try_recv() {
                Ok(m) => {
                    encode_message(&mut buf, m.kind, m.group, &m.data, cfg.chunk_bytes);
                    n += 1;
                }
                Err(_) => break,
            }
        }
        if let Err(end) = write_batch(stream, &buf, n, depth, stats).await {
            return end;
        }
    }
}

/// The link was reset as too slow, or cut by fault injection: why the pump ends, if it does.
fn link_down(cfg: &TransportConfig, peer: NodeId, reset: &AtomicBool) -> Option<Pump> {
    if reset.load(Ordering::Relaxed) {
        return Some(Pump::TooSlow);
    }
    cfg.cut
        .is_cut(peer)
        .then(|| Pump::Failed(io::Error::other("cut by fault injection")))
}

/// Write `n` encoded messages at once (they leave the link's queue depth) and count them.
async fn write_batch(
    stream: &mut PeerStream,
    bytes: &[u8],
    n: u64,
    depth: &AtomicU64,
    stats: &TransportStats,
) -> Result<(), Pump> {
    depth.fetch_sub(n.min(depth.load(Ordering::Relaxed)), Ordering::Relaxed);
    let write = async {
        stream.write_all(bytes).await?;
        stream.flush().await
    };
    match tokio::time::timeout(WRITE_TIMEOUT, write).await {
        Ok(Ok(())) => {
            stats.frames_out.fetch_add(n, Ordering::Relaxed);
            stats
                .bytes_out
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            Ok(())
        }
        Ok(Err(e)) => Err(Pump::Failed(e)),
        Err(_) => Err(Pump::Failed(io::ErrorKind::TimedOut.into())),
    }
}

/// Accept peers on `listener` and feed their messages to the host.
pub async fn serve_inbound<T: From<Inbound> + Send + 'static>(
    cfg: TransportConfig,
    listener: TcpListener,
    events: mpsc::Sender<T>,
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

/// Accept a hello, or say why not. With TLS, `certified` are the nodes the peer's certificate
/// names: the hello must claim one of them.
fn check_hello(
    cfg: &TransportConfig,
    h: Hello,
    certified: Option<&[NodeId]>,
) -> Result<NodeId, String> {
    if h.cluster_id != cfg.cluster_id {
        return Err(format!(
            "peer belongs to cluster '{}', this is cluster '{}'",
            h.cluster_id, cfg.cluster_id
        ));
    }
    if h.node_id == cfg.me || !cfg.members.contains_key(&h.node_id) {
        return Err(format!(
            "node id {} is not a peer of this replica",
            h.node_id
        ));
    }
    for (g, theirs) in &h.groups {
        if let Some((_, ours)) = cfg.groups.iter().find(|(mine, _)| mine == g) {
            if ours != theirs {
                return Err(format!(
                    "peer runs protocol '{theirs}' in group {g}, this node runs '{ours}'"
                ));
            }
        }
    }
    if let Some(ids) = certified {
        if !ids.contains(&h.node_id) {
            return Err(format!(
                "its hello claims node {}, but its certificate is node {ids:?}'s",
                h.node_id
            ));
        }
    }
    if cfg.cut.is_cut(h.node_id) {
        return Err(format!("node {} is cut off (fault injection)", h.node_id));
    }
    Ok(h.node_id)
}

async fn inbound<T: From<Inbound> + Send + 'static>(
    cfg: TransportConfig,
    tcp: TcpStream,
    addr: SocketAddr,
    events: mpsc::Sender<T>,
    stats: Arc<TransportStats>,
    live: Arc<Mutex<HashMap<NodeId, Arc<AtomicBool>>>>,
    handshake: tokio::sync::OwnedSemaphorePermit,
) {
    // Anyone can open a connection: refusals are logged at most once a second.
    static REFUSED: crate::RateLimitedWarn = crate::RateLimitedWarn::new();
    let started = std::time::Instant::now();
    let _ = tcp.set_nodelay(true);
    let (mut s, certified) = match secure::accept(&cfg, tcp, HELLO_TIMEOUT).await {
        Ok(x) => x,
        Err(reason) => {
            stats.rejected_handshakes.fetch_add(1, Ordering::Relaxed);
            if let Some(more) = REFUSED.check() {
                warn!(%addr, "refusing peer connection: {reason} ({more} more refused since the last message)");
            }
            return;
        }
    };
    let left = HELLO_TIMEOUT.saturating_sub(started.elapsed());
    let max_frame = cfg.max_frame();
    let hello = match tokio::time::timeout(left, read_frame(&mut s, HELLO_MAX_FRAME)).await {
        Ok(Ok(Some((K_HELLO, b)))) => decode_hello(b),
        Ok(Ok(Some(_))) => Err("expected a hello frame".to_string()),
        Ok(Ok(None)) => return,
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no hello within {} s", HELLO_TIMEOUT.as_secs())),
    };
    let peer = match hello.and_then(|h| check_hello(&cfg, h, certified.as_deref())) {
        Ok(p) => p,
        Err(reason) => {
            stats.rejected_handshakes.fetch_add(1, Ordering::Relaxed);
            if let Some(more) = REFUSED.check() {
                warn!(%addr, "refusing peer connection: {reason} ({more} more refused since the last message)");
            }
            let refuse = async {
                s.write_all(&reply(false, &reason)).await?;
                s.shutdown().await
            };
            let _ = tokio::time::timeout(WRITE_TIMEOUT, refuse).await;
            return;
        }
    };
    let accepted = async {
        s.write_all(&reply(true, "")).await?;
        s.flush().await
    };
    if !matches!(
        tokio::time::timeout(WRITE_TIMEOUT, accepted).await,
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
    // Buffered from here on: a peer coalesces many messages into one write, and they are read
    // with one recv instead of two per frame (profile.md). Large frames bypass the buffer.
    let mut s = tokio::io::BufReader::with_capacity(PEER_READ_BUFFER, s);
    let mut reader = Reassembly::new(cfg.max_message_bytes);
    let runs: HashSet<GroupId> = cfg.groups.iter().map(|(g, _)| *g).collect();
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
        let event = match reader.frame(kind, data, &runs) {
            Ok(Some(Assembled::Unknown(group))) => {
                // A peer that runs a group this node does not (configurations that differ
                // during a rolling change): its frames are dropped, and the connection, which
                // every other group shares, stays.
                stats.dropped_frames.fetch_add(1, Ordering::Relaxed);
                static UNKNOWN: crate::RateLimitedWarn = crate::RateLimitedWarn::new();
                if let Some(more) = UNKNOWN.check() {
                    warn!(peer, group, "dropping frames of a group this node does not run ({more} more since the last message)");
                }
                continue;
            }
            Ok(Some(m)) => m,
            Ok(None) => continue,
            Err(e) => {
                stats.bad_frames.fetch_add(1, Ordering::Relaxed);
                break e;
            }
        };
        if superseded.load(Ordering::SeqCst) {
            return; // a newer connection from this peer took over
        }
        if cfg.cut.is_cut(peer) {
            break "cut by fault injection".to_string();
        }
        let event = match event {
            Assembled::Message(group, data) => Inbound::Message {
                from: peer,
                group,
                data,
            },
            Assembled::Submit(group, payload) => Inbound::Submit {
                from: peer,
                group,
                payload,
            },
            Assembled::Unknown(_) => unreachable!("dropped above"),
        };
        if events.send(event.into()).await.is_err() {
            return;
        }
    };
    if why.starts_with("malformed")
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
    let _ = events.send(Inbound::Disconnected { peer }.into()).await;
}

/// What one or more frames amount to.
enum Assembled {
    Message(GroupId, Bytes),
    Submit(GroupId, Bytes),
    /// A whole message or submission of a group this node does not run.
    Unknown(GroupId),
}

/// Reassembles chunked messages (decoding them is the host's job).
struct Reassembly {
    /// A message or submission in chunks: whether it is a submission, its group, its bytes.
    partial: Option<(bool, GroupId, BytesMut)>,
    max_message_bytes: usize,
}

impl Reassembly {
    fn new(max_message_bytes: usize) -> Self {
        Reassembly {
            partial: None,
            max_message_bytes,
        }
    }

    /// Feed one frame: `Ok(Some)` when a message is complete, `Ok(None)` inside a chunked one,
    /// `Err` (with the reason to close the connection) on anything malformed.
    fn frame(
        &mut self,
        kind: u8,
        data: Bytes,
        runs: &HashSet<GroupId>,
    ) -> Result<Option<Assembled>, String> {
        let (group, data) = split_group(data).map_err(|e| format!("malformed frame: {e}"))?;
        let (submit, whole) = match kind {
            K_WHOLE | K_SUBMIT if self.partial.is_none() => (kind == K_SUBMIT, data),
            K_CHUNK | K_LAST | K_SUBMIT_CHUNK | K_SUBMIT_LAST => {
                let submit = matches!(kind, K_SUBMIT_CHUNK | K_SUBMIT_LAST);
                let (s, g, p) = self
                    .partial
                    .get_or_insert_with(|| (submit, group, BytesMut::new()));
                if (*s, *g) != (submit, group) {
                    return Err(format!(
                        "unexpected chunk of group {group} inside another message of group {g}"
                    ));
                }
                if p.len() + data.len() > self.max_message_bytes {
                    return Err(format!(
                        "message larger than max_message_bytes ({})",
                        self.max_message_bytes
                    ));
                }
                p.extend_from_slice(&data);
                if matches!(kind, K_CHUNK | K_SUBMIT_CHUNK) {
                    return Ok(None);
                }
                (submit, self.partial.take().expect("set").2.freeze())
            }
            _ => return Err(format!("unexpected frame kind {kind}")),
        };
        if !runs.contains(&group) {
            return Ok(Some(Assembled::Unknown(group)));
        }
        Ok(Some(if submit {
            Assembled::Submit(group, whole)
        } else {
            Assembled::Message(group, whole)
        }))
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tls_tests;
