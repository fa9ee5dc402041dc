//! The ZooKeeper client port: connections, sessions, requests, watches and four-letter words.
//!
//! * **Order.** Requests of one connection are handled in order: writes are submitted to the
//!   driver as they come (pipelined), a read waits until every earlier write of its session has
//!   been delivered here, and later writes wait for that read. Replies leave in request order,
//!   and watch events fired by a delivery leave before any reply sent after that delivery.
//! * **Sessions** are replicated: creation, close and liveness (`Touch`) are transactions. The
//!   leader expires a session that nobody touched for its timeout (after a full timeout of grace
//!   when it becomes leader), and reaps container and TTL nodes.
//! * **Linearizable sync.** `sync` is a transaction: its reply means a quorum ordered it in the
//!   current epoch, so a read after it sees every write acknowledged before the sync began (a
//!   deposed leader cannot answer it, unlike ZooKeeper's).
//! * A server without an established leader accepts no client and drops its clients when it
//!   loses the leader, as ZooKeeper's followers do; clients reconnect elsewhere.

use crate::driver::{DriverInput, Status, SubmitError, SubmitResult};
use bytes::{BufMut, Bytes, BytesMut};
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use synod_zab::Msg;
use synod_zk::jute::{err, event, op, xid, Id, JuteWrite, Reader};
use synod_zk::machine::{Effects, Reply, Txn, ZkMachine};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, info, warn};

#[derive(Clone, Debug)]
pub struct FrontConfig {
    pub node_id: u32,
    pub client_addr: SocketAddr,
    /// Limits, timeouts and four-letter words (the `[zookeeper]` section of the config).
    pub tuning: crate::config::ZkTuning,
    /// `server.<id>=<peer address>` lines for `conf`.
    pub peers: Vec<String>,
    /// Planted bug (fault injection only): answer `sync` locally, without ordering it, and keep
    /// serving clients without a leader.
    pub bug_stale_sync: bool,
}

/// A watch event for a connection.
struct ConnEvent(i32, String);

struct LocalSession {
    conn: u64,
    events: mpsc::Sender<ConnEvent>,
    /// Closing is signalled apart from the events, so that it is never lost or dropped: a full
    /// event queue closes the connection rather than silently losing an event.
    close: watch::Sender<Option<&'static str>>,
}

#[derive(Default)]
struct Stats {
    received: AtomicU64,
    sent: AtomicU64,
    connections: AtomicU64,
    latency_sum_us: AtomicU64,
    latency_count: AtomicU64,
    latency_max_us: AtomicU64,
}

pub struct Front {
    cfg: FrontConfig,
    machine: Arc<Mutex<ZkMachine>>,
    driver: mpsc::Sender<DriverInput<Msg>>,
    status: Arc<Mutex<Status>>,
    sessions: Arc<Mutex<HashMap<i64, LocalSession>>>,
    /// Sessions that sent anything since the last touch round.
    active: Mutex<HashSet<i64>>,
    /// Leader side: when each session was last touched (from applied `Touch` transactions).
    touches: Arc<Mutex<HashMap<i64, Instant>>>,
    next_session: AtomicU64,
    next_conn: AtomicU64,
    serving: watch::Receiver<bool>,
    stats: Stats,
    started: Instant,
    /// Open client sockets, those still in their handshake included (`max_connections`).
    open: AtomicUsize,
    refused: crate::RateLimitedWarn,
    timed_out: crate::RateLimitedWarn,
    /// Malformed or oversized input: anyone can send it, so it is logged at most once a second.
    bad_input: crate::RateLimitedWarn,
}

/// Replies buffered for one connection before they are written out (a client that does not
/// read then stalls its own connection, not the server's memory).
const OUT_FLUSH_BYTES: usize = 1 << 20;
/// Budget overhead counted per request besides its bytes.
const REQUEST_OVERHEAD: usize = 64;
/// Read buffer of an established client connection.
const CLIENT_READ_BUFFER: usize = 8 << 10;

/// Decrements the open-connection count when a connection task ends, however it ends.
struct OpenGuard(Arc<Front>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd[, readOnly].
#[derive(Debug, PartialEq, Eq)]
pub struct ConnectRequest {
    pub protocol_version: i32,
    pub last_zxid: i64,
    pub timeout_ms: i32,
    pub session_id: i64,
    pub password: Bytes,
}

/// Parse the body of a ConnectRequest frame (the trailing readOnly flag is optional).
pub fn parse_connect(body: Bytes) -> Result<ConnectRequest, synod_zk::jute::JuteError> {
    let mut r = Reader::new(body);
    Ok(ConnectRequest {
        protocol_version: r.int()?,
        last_zxid: r.long()?,
        timeout_ms: r.int()?,
        session_id: r.long()?,
        password: r.buffer()?,
    })
}

/// Parse the body of an auth request: type, scheme, credentials.
pub fn parse_auth(body: Bytes) -> Result<(i32, String, Bytes), synod_zk::jute::JuteError> {
    let mut r = Reader::new(body);
    Ok((r.int()?, r.string()?, r.buffer()?))
}

/// The length of a request frame from its 4-byte prefix, checked against jute.maxbuffer.
fn request_len(head: [u8; 4], max_buffer: usize) -> Result<usize, String> {
    let len = i32::from_be_bytes(head);
    if len < 0 || len as usize > max_buffer {
        return Err(format!(
            "request length {len} is out of range (jute.maxbuffer is {max_buffer})"
        ));
    }
    Ok(len as usize)
}

/// Read one request frame (its length prefix already read when `head` is given). Memory
/// grows with the bytes that arrive, not with the length the prefix claims.
pub async fn read_request<R: AsyncRead + Unpin>(
    r: &mut R,
    head: Option<[u8; 4]>,
    max_buffer: usize,
) -> Result<Bytes, String> {
    let head = match head {
        Some(h) => h,
        None => {
            let mut h = [0u8; 4];
            r.read_exact(&mut h).await.map_err(|e| e.to_string())?;
            h
        }
    };
    let len = request_len(head, max_buffer)?;
    let body = crate::read_body(r, len).await.map_err(|e| e.to_string())?;
    Ok(Bytes::from(body))
}

/// The next request of an established connection, once this connection's byte budget has
/// room for it; its body must arrive within `frame_timeout` of its length prefix.
async fn next_request<R: AsyncRead + Unpin>(
    r: &mut R,
    budget: &Arc<Semaphore>,
    max_buffer: usize,
    frame_timeout: Duration,
) -> Result<(Bytes, OwnedSemaphorePermit), String> {
    let mut head = [0u8; 4];
    r.read_exact(&mut head).await.map_err(|e| e.to_string())?;
    let len = request_len(head, max_buffer)?;
    let permit = budget
        .clone()
        .acquire_many_owned((len + REQUEST_OVERHEAD) as u32)
        .await
        .map_err(|_| "connection budget closed".to_string())?;
    let body = tokio::time::timeout(frame_timeout, crate::read_body(r, len))
        .await
        .map_err(|_| {
            format!(
                "a request of {len} bytes did not arrive within the session timeout ({} ms)",
                frame_timeout.as_millis()
            )
        })?
        .map_err(|e| e.to_string())?;
    Ok((Bytes::from(body), permit))
}

/// The effects of applied transactions on this server's clients.
struct FrontEffects {
    sessions: Arc<Mutex<HashMap<i64, LocalSession>>>,
    touches: Arc<Mutex<HashMap<i64, Instant>>>,
}

impl Effects for FrontEffects {
    fn watch(&self, session: i64, event_type: i32, path: &str) {
        let s = self.sessions.lock().expect("sessions");
        if let Some(ls) = s.get(&session) {
            if ls
                .events
                .try_send(ConnEvent(event_type, path.to_string()))
                .is_err()
            {
                ls.close.send_replace(Some("too many queued watch events"));
            }
        }
    }
    fn session_closed(&self, session: i64) {
        self.touches.lock().expect("touches").remove(&session);
        let s = self.sessions.lock().expect("sessions");
        if let Some(ls) = s.get(&session) {
            ls.close.send_replace(Some("session closed"));
        }
    }
    fn touched(&self, sessions: &[i64]) {
        let now = Instant::now();
        let mut t = self.touches.lock().expect("touches");
        for s in sessions {
            t.insert(*s, now);
        }
    }
}

fn now_ms() -> i64 {
    crate::now_ms()
}

impl Front {
    pub fn new(
        cfg: FrontConfig,
        machine: Arc<Mutex<ZkMachine>>,
        driver: mpsc::Sender<DriverInput<Msg>>,
        status: Arc<Mutex<Status>>,
    ) -> Arc<Front> {
        let sessions = Arc::new(Mutex::new(HashMap::new()));
        let touches = Arc::new(Mutex::new(HashMap::new()));
        machine
            .lock()
            .expect("machine")
            .set_effects(Box::new(FrontEffects {
                sessions: sessions.clone(),
                touches: touches.clone(),
            }));
        let (serving_tx, serving) = watch::channel(false);
        let base = ((cfg.node_id as u64 & 0xFF) << 56)
            | (((now_ms() as u64) << 16) & 0x00FF_FFFF_FFFF_0000);
        let front = Arc::new(Front {
            cfg,
            machine,
            driver,
            status,
            sessions,
            active: Mutex::new(HashSet::new()),
            touches,
            next_session: AtomicU64::new(base),
            next_conn: AtomicU64::new(1),
            serving,
            stats: Stats::default(),
            started: Instant::now(),
            open: AtomicUsize::new(0),
            refused: crate::RateLimitedWarn::new(),
            timed_out: crate::RateLimitedWarn::new(),
            bad_input: crate::RateLimitedWarn::new(),
        });
        tokio::spawn(monitor(front.clone(), serving_tx));
        front
    }

    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        loop {
            let (stream, addr) = match listener.accept().await {
                Ok(x) => x,
                Err(e) => {
                    warn!("client listener: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let open = self.open.fetch_add(1, Ordering::Relaxed);
            let guard = OpenGuard(self.clone());
            if open >= self.cfg.tuning.max_connections {
                drop((stream, guard));
                if let Some(more) = self.refused.check() {
                    warn!(
                        %addr,
                        "refusing a client connection: {open} are open (zookeeper.max_connections); {more} more refused since the last warning"
                    );
                }
                continue;
            }
            let front = self.clone();
            tokio::spawn(async move {
                let _guard = guard;
                let _ = stream.set_nodelay(true);
                front.connection(stream, addr).await;
            });
        }
    }

    fn serving(&self) -> bool {
        *self.serving.borrow()
    }

    async fn submit(&self, txn: Txn) -> SubmitResult {
        let (reply, rx) = oneshot::channel();
        let payload = txn.encode();
        if self
            .driver
            .send(DriverInput::Submit { payload, reply })
            .await
            .is_err()
        {
            return Err(SubmitError::ShuttingDown);
        }
        rx.await.unwrap_or(Err(SubmitError::ShuttingDown))
    }

    /// A client closed for what it sent (or did not read): logged, rate-limited.
    fn closing(&self, addr: SocketAddr, why: &str) {
        if let Some(more) = self.bad_input.check() {
            let more = if more > 0 {
                format!(" ({more} more clients closed for bad input since the last message)")
            } else {
                String::new()
            };
            warn!(%addr, "closing a client: {why}{more}");
        }
    }

    /// A connection that timed out in its handshake: logged, rate-limited.
    fn handshake_timed_out(&self, addr: SocketAddr, what: &str) {
        if let Some(more) = self.timed_out.check() {
            info!(
                %addr,
                "closing a client that sent no {what} within {} ms (zookeeper.handshake_timeout_ms); {more} more since the last message",
                self.cfg.tuning.handshake_timeout_ms
            );
        }
    }

    async fn connection(self: Arc<Self>, mut stream: TcpStream, addr: SocketAddr) {
        // One deadline for the whole handshake: the first bytes and the ConnectRequest.
        let deadline = tokio::time::Instant::now()
            + Duration::from_millis(self.cfg.tuning.handshake_timeout_ms);
        let mut head = [0u8; 4];
        match tokio::time::timeout_at(deadline, stream.read_exact(&mut head)).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return,
            Err(_) => return self.handshake_timed_out(addr, "request"),
        }
        if head.iter().all(|b| b.is_ascii_lowercase()) {
            let word = String::from_utf8_lossy(&head).to_string();
            let text = self.four_letter_word(&word);
            let write_timeout = Duration::from_millis(self.cfg.tuning.write_timeout_ms);
            let _ = tokio::time::timeout(write_timeout, async {
                stream.write_all(text.as_bytes()).await?;
                stream.shutdown().await
            })
            .await;
            return;
        }
        if !self.serving() {
            debug!(%addr, "refusing a client: no established leader");
            return;
        }
        self.stats.connections.fetch_add(1, Ordering::Relaxed);
        let conn = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let why = self
            .run_connection(stream, addr, head, conn, deadline)
            .await;
        self.stats.connections.fetch_sub(1, Ordering::Relaxed);
        debug!(%addr, "client connection closed: {why}");
    }

    async fn run_connection(
        self: &Arc<Self>,
        stream: TcpStream,
        addr: SocketAddr,
        head: [u8; 4],
        conn: u64,
        deadline: tokio::time::Instant,
    ) -> String {
        let (mut rd, mut wr) = stream.into_split();
        let max_buffer = self.cfg.tuning.max_buffer;
        let body =
            match tokio::time::timeout_at(deadline, read_request(&mut rd, Some(head), max_buffer))
                .await
            {
                Ok(Ok(b)) => b,
                Ok(Err(e)) => {
                    self.closing(addr, &e);
                    return e;
                }
                Err(_) => {
                    self.handshake_timed_out(addr, "complete ConnectRequest");
                    return "no connect request".into();
                }
            };
        let Ok(ConnectRequest {
            last_zxid,
            timeout_ms: timeout,
            session_id,
            password: passwd,
            ..
        }) = parse_connect(body)
        else {
            self.closing(addr, "malformed connect request");
            return "malformed connect request".into();
        };
        let applied_zxid = self.machine.lock().expect("machine").applied_zxid;
        if last_zxid > applied_zxid {
            info!(%addr, "refusing a client that has seen zxid {last_zxid:#x}, ahead of ours {applied_zxid:#x}; it must try another server");
            return "client ahead of this server".into();
        }
        let timeout = timeout.clamp(
            self.cfg.tuning.min_session_timeout_ms,
            self.cfg.tuning.max_session_timeout_ms,
        );
        let (session, timeout, password) = if session_id == 0 {
            let session = self.next_session.fetch_add(1, Ordering::Relaxed) as i64;
            let password: [u8; 16] = rand::random();
            let password = Bytes::copy_from_slice(&password);
            match self
                .submit(Txn::CreateSession {
                    session,
                    timeout_ms: timeout,
                    password: password.clone(),
                })
                .await
            {
                Ok(_) => (session, timeout, password),
                Err(e) => return format!("session creation failed: {e:?}"),
            }
        } else {
            // Touch the session through the log first: it refreshes its liveness at the leader
            // before we answer, and once applied here this replica has caught up with the
            // session's creation (a lagging replica must not call a live session expired).
            let touched = self
                .submit(Txn::Touch {
                    sessions: vec![session_id],
                })
                .await;
            if let Err(e) = touched {
                return format!("cannot re-attach session now: {e:?}");
            }
            let known = self
                .machine
                .lock()
                .expect("machine")
                .session(session_id)
                .map(|s| (s.timeout_ms, s.password.clone()));
            match known {
                Some((t, pw)) if pw == passwd => {
                    self.active.lock().expect("active").insert(session_id);
                    (session_id, t, pw)
                }
                _ => {
                    // Expired or wrong password: ZooKeeper answers with an invalid session.
                    let mut b = BytesMut::new();
                    b.int(0);
                    b.int(0);
                    b.long(0);
                    b.buffer(&[0u8; 16]);
                    b.boolean(false);
                    let _ = write_frame(&mut wr, &b).await;
                    return "expired session or wrong password".into();
                }
            }
        };
        let mut b = BytesMut::new();
        b.int(0);
        b.int(timeout);
        b.long(session);
        b.buffer(&password);
        b.boolean(false);
        if write_frame(&mut wr, &b).await.is_err() {
            return "client went away".into();
        }
        let (ev_tx, ev_rx) = mpsc::channel(self.cfg.tuning.max_queued_events.max(1));
        let (close_tx, close_rx) = watch::channel(None);
        if let Some(old) = self.sessions.lock().expect("sessions").insert(
            session,
            LocalSession {
                conn,
                events: ev_tx,
                close: close_tx,
            },
        ) {
            old.close
                .send_replace(Some("session moved to another connection"));
        }
        // The machine keeps watches per session; a session that moves here starts afresh
        // (clients re-register with setWatches).
        self.machine
            .lock()
            .expect("machine")
            .watches
            .drop_session(session);
        let mut auth = vec![Id {
            scheme: "ip".into(),
            id: addr.ip().to_string(),
        }];
        let frame_timeout = Duration::from_millis(timeout.max(1) as u64);
        let why = self
            .requests(
                session,
                &mut auth,
                rd,
                wr,
                ev_rx,
                close_rx,
                addr,
                frame_timeout,
            )
            .await;
        let mut s = self.sessions.lock().expect("sessions");
        if s.get(&session).is_some_and(|ls| ls.conn == conn) {
            s.remove(&session);
        }
        why
    }

    #[allow(clippy::too_many_arguments)]
    async fn requests(
        self: &Arc<Self>,
        session: i64,
        auth: &mut Vec<Id>,
        rd: OwnedReadHalf,
        mut wr: OwnedWriteHalf,
        mut events: mpsc::Receiver<ConnEvent>,
        mut close: watch::Receiver<Option<&'static str>>,
        addr: SocketAddr,
        frame_timeout: Duration,
    ) -> String {
        // Frames are read by their own task so that a slow reply path backs up into TCP. The
        // reader takes each request's bytes from this connection's budget before reading its
        // body; they return when the request is answered, so what one connection pins is
        // bounded (max_outstanding_bytes) however fast it sends and however slowly it reads.
        let (frames_tx, mut frames) = mpsc::channel::<Request>(64);
        let max_buffer = self.cfg.tuning.max_buffer;
        let budget = Arc::new(Semaphore::new(
            self.cfg
                .tuning
                .max_outstanding_bytes
                .max(max_buffer + REQUEST_OVERHEAD),
        ));
        let reader = tokio::spawn(async move {
            // Pipelined requests are read with one recv per batch rather than two per request
            // (a small buffer: there may be thousands of connections).
            let mut rd = tokio::io::BufReader::with_capacity(CLIENT_READ_BUFFER, rd);
            loop {
                let f = next_request(&mut rd, &budget, max_buffer, frame_timeout).await;
                let stop = f.is_err();
                if frames_tx.send(f).await.is_err() || stop {
                    return;
                }
            }
        });
        let write_timeout = Duration::from_millis(self.cfg.tuning.write_timeout_ms);
        let mut serving = self.serving.clone();
        let mut backlog: VecDeque<(i32, i32, Bytes, Instant, OwnedSemaphorePermit)> =
            VecDeque::new();
        let mut pending: VecDeque<Pending> = VecDeque::new();
        let mut out = BytesMut::new();
        // Set once this client asked to close its session: the replicated close then closes the
        // connection only after its reply is sent.
        let mut closing = false;
        let why = 'conn: loop {
            // Start what may start: writes in order, a read once no earlier write is in flight.
            while let Some((xid, code, _, _, _)) = backlog.front() {
                let (xid, code) = (*xid, *code);
                let planted = self.cfg.bug_stale_sync && code == op::SYNC;
                if is_write(code) && !planted {
                    let (_, _, body, t, permit) = backlog.pop_front().expect("front");
                    let txn = if code == op::CLOSE_SESSION {
                        Txn::CloseSession { session }
                    } else {
                        Txn::Op {
                            session,
                            time_ms: now_ms(),
                            auth: auth.clone(),
                            op: code,
                            body,
                        }
                    };
                    let (reply, rx) = oneshot::channel();
                    if self
                        .driver
                        .send(DriverInput::Submit {
                            payload: txn.encode(),
                            reply,
                        })
                        .await
                        .is_err()
                    {
                        break 'conn "server shutting down".to_string();
                    }
                    closing |= code == op::CLOSE_SESSION;
                    pending.push_back(Pending::Write {
                        xid,
                        code,
                        rx,
                        t,
                        _permit: permit,
                    });
                } else if pending.is_empty() {
                    let (_, _, body, t, permit) = backlog.pop_front().expect("front");
                    let e = self.local(session, auth, xid, code, body, &mut events, &mut out);
                    drop(permit);
                    // A failed auth, or an invalid opcode (a top-level check among them), closes
                    // the connection after the error reply, as ZooKeeper does.
                    let close = (code == op::AUTH && e != err::OK) || e == err::UNIMPLEMENTED;
                    self.record(t);
                    if close {
                        let _ = flush(&mut wr, &mut out, write_timeout).await;
                        reader.abort();
                        return "authentication failed or invalid operation".into();
                    }
                    // Large replies (or many) go out before more are encoded.
                    if out.len() >= OUT_FLUSH_BYTES {
                        if let Err(e) = flush(&mut wr, &mut out, write_timeout).await {
                            break 'conn self.write_failed(addr, &wr, e);
                        }
                    }
                } else {
                    break;
                }
            }
            if let Err(e) = flush(&mut wr, &mut out, write_timeout).await {
                break self.write_failed(addr, &wr, e);
            }
            let room = backlog.len() + pending.len() < self.cfg.tuning.max_outstanding;
            tokio::select! {
                biased;
                ev = events.recv() => match ev {
                    Some(ConnEvent(ty, path)) => encode_event(&mut out, ty, &path),
                    None => break "event channel closed".to_string(),
                },
                _ = close.changed() => {
                    let why = *close.borrow_and_update();
                    match why {
                        // Our own closeSession: its reply goes out first.
                        Some("session closed") if closing => {}
                        Some(why) => break why.to_string(),
                        None => {}
                    }
                }
                _ = serving.changed() => {
                    if !*serving.borrow() {
                        break "this server lost its leader".to_string();
                    }
                }
                done = front_write(&mut pending), if !pending.is_empty() => {
                    let Some((xid, code, result, t)) = done else { continue };
                    drain_events(&mut events, &mut out);
                    match result {
                        Ok(applied) => {
                            let reply = Reply::decode(&applied.result);
                            encode_reply(&mut out, xid, applied.at.tag as i64, &reply);
                            self.record(t);
                            if code == op::CLOSE_SESSION {
                                let _ = flush(&mut wr, &mut out, write_timeout).await;
                                break "session closed by the client".to_string();
                            }
                        }
                        Err(SubmitError::Busy) => {
                            // Overloaded: this client's outcome is unknown; make it reconnect.
                            break "server busy".to_string();
                        }
                        Err(e) => break format!("write not delivered here ({e:?})"),
                    }
                }
                f = frames.recv(), if room => match f {
                    Some(Ok((frame, permit))) => {
                        self.stats.received.fetch_add(1, Ordering::Relaxed);
                        self.active.lock().expect("active").insert(session);
                        let mut r = Reader::new(frame);
                        let (Ok(xid), Ok(code)) = (r.int(), r.int()) else {
                            self.closing(addr, "malformed request header");
                            break "malformed request header".to_string();
                        };
                        backlog.push_back((xid, code, r.rest(), Instant::now(), permit));
                    }
                    Some(Err(e)) => {
                        if e.contains("out of range") || e.contains("did not arrive") {
                            self.closing(addr, &e);
                        }
                        break e;
                    }
                    None => break "reader stopped".to_string(),
                },
            }
        };
        reader.abort();
        if let Err(e) = flush(&mut wr, &mut out, write_timeout).await {
            if e.kind() == std::io::ErrorKind::TimedOut {
                let _ = wr.as_ref().set_zero_linger();
            }
        }
        why
    }

    fn write_failed(&self, addr: SocketAddr, wr: &OwnedWriteHalf, e: std::io::Error) -> String {
        if e.kind() == std::io::ErrorKind::TimedOut {
            // Reset rather than close: a FIN would wait behind the unread replies, and the
            // kernel would keep them for the orphaned socket long after we let go of it.
            let _ = wr.as_ref().set_zero_linger();
            let why = format!(
                "replies not read for {} ms (zookeeper.write_timeout_ms)",
                self.cfg.tuning.write_timeout_ms
            );
            self.closing(addr, &why);
            why
        } else {
            "client went away".to_string()
        }
    }

    fn record(&self, since: Instant) {
        self.stats.sent.fetch_add(1, Ordering::Relaxed);
        let us = since.elapsed().as_micros() as u64;
        self.stats.latency_sum_us.fetch_add(us, Ordering::Relaxed);
        self.stats.latency_count.fetch_add(1, Ordering::Relaxed);
        self.stats.latency_max_us.fetch_max(us, Ordering::Relaxed);
    }

    /// A request served here (reads, watch management, auth, ping): its reply is encoded into
    /// `out` while the machine is locked, after every watch event already fired, so that no
    /// event for a watch this request registers can overtake the reply (clients register the
    /// watcher when the reply arrives). Returns the error code.
    #[allow(clippy::too_many_arguments)]
    fn local(
        &self,
        session: i64,
        auth: &mut Vec<Id>,
        xid: i32,
        code: i32,
        body: Bytes,
        events: &mut mpsc::Receiver<ConnEvent>,
        out: &mut BytesMut,
    ) -> i32 {
        let mut m = self.machine.lock().expect("machine");
        let zxid = m.applied_zxid;
        let reply = match code {
            op::PING => Reply::ok(BytesMut::new()),
            // Reached only with the planted stale-sync bug: sync answered from local state.
            op::SYNC => {
                let mut b = BytesMut::new();
                b.string(&Reader::new(body).string().unwrap_or_default());
                Reply::ok(b)
            }
            op::AUTH => match parse_auth(body) {
                Ok((_, scheme, cred)) if scheme == "digest" => {
                    let cred = String::from_utf8_lossy(&cred).to_string();
                    match digest_id(&cred) {
                        Some(id) => {
                            let id = Id {
                                scheme: "digest".into(),
                                id,
                            };
                            if !auth.contains(&id) {
                                auth.push(id);
                            }
                            Reply::ok(BytesMut::new())
                        }
                        None => Reply::error(err::AUTH_FAILED),
                    }
                }
                _ => Reply::error(err::AUTH_FAILED),
            },
            _ => match m.read(session, auth, code, body) {
                Ok(r) => r,
                Err(_) => Reply::error(err::MARSHALLING_ERROR),
            },
        };
        drain_events(events, out);
        encode_reply(out, xid, zxid, &reply);
        reply.err
    }

    fn four_letter_word(&self, word: &str) -> String {
        let allowed = self
            .cfg
            .tuning
            .four_letter_words
            .iter()
            .any(|w| w == "*" || w == word);
        let known = [
            "ruok", "isro", "srvr", "stat", "mntr", "conf", "cons", "envi", "wchs", "dump",
        ];
        if !known.contains(&word) {
            return String::new();
        }
        if !allowed {
            return format!("{word} is not executed because it is not in the whitelist.\n");
        }
        let st = self.status.lock().expect("status").clone();
        // The mode follows whether this server accepts clients (the same flag that admits a
        // connection), so a "follower" answer means a client connecting now is served; the
        // core's role alone can run ahead of it by one monitor tick.
        let mode = match (st.role.as_str(), *self.serving.borrow()) {
            ("leading", true) => "leader",
            ("following", true) => "follower",
            _ => "looking",
        };
        let (zxid, nodes, sessions, watches) = {
            let m = self.machine.lock().expect("machine");
            (
                m.applied_zxid,
                m.tree.nodes.len(),
                m.tree.sessions.len(),
                m.watches.total(),
            )
        };
        let count = self.stats.latency_count.load(Ordering::Relaxed).max(1);
        let avg_ms =
            self.stats.latency_sum_us.load(Ordering::Relaxed) as f64 / count as f64 / 1000.0;
        let max_ms = self.stats.latency_max_us.load(Ordering::Relaxed) as f64 / 1000.0;
        let version = format!("3.8.0-synod-{}", env!("CARGO_PKG_VERSION"));
        let srvr = format!(
            "Zookeeper version: {version}, built on synod\nLatency min/avg/max: 0/{avg_ms:.4}/{max_ms:.4}\n\
             Received: {}\nSent: {}\nConnections: {}\nOutstanding: 0\nZxid: {zxid:#x}\nMode: {mode}\nNode count: {nodes}\n",
            self.stats.received.load(Ordering::Relaxed),
            self.stats.sent.load(Ordering::Relaxed),
            self.stats.connections.load(Ordering::Relaxed),
        );
        match word {
            "ruok" => "imok".into(),
            "isro" => if st.leader.is_some() { "rw" } else { "null" }.into(),
            "srvr" => srvr,
            "stat" => format!("Clients:\n /{}[0](queued=0,recved=0,sent=0)\n\n{srvr}", self.cfg.client_addr),
            "mntr" => format!(
                "zk_version\t{version}\nzk_server_state\t{mode}\nzk_avg_latency\t{avg_ms:.4}\nzk_max_latency\t{max_ms:.4}\n\
                 zk_min_latency\t0\nzk_packets_received\t{}\nzk_packets_sent\t{}\nzk_num_alive_connections\t{}\n\
                 zk_outstanding_requests\t0\nzk_znode_count\t{nodes}\nzk_watch_count\t{watches}\n\
                 zk_ephemerals_count\t{}\nzk_approximate_data_size\t0\nzk_open_file_descriptor_count\t0\n\
                 zk_max_file_descriptor_count\t0\nzk_uptime\t{}\n",
                self.stats.received.load(Ordering::Relaxed),
                self.stats.sent.load(Ordering::Relaxed),
                self.stats.connections.load(Ordering::Relaxed),
                sessions,
                self.started.elapsed().as_millis(),
            ),
            "conf" => {
                let mut s = format!(
                    "clientPort={}\nclientPortAddress={}\nserverId={}\nminSessionTimeout={}\nmaxSessionTimeout={}\njute.maxbuffer={}\n",
                    self.cfg.client_addr.port(),
                    self.cfg.client_addr.ip(),
                    self.cfg.node_id,
                    self.cfg.tuning.min_session_timeout_ms,
                    self.cfg.tuning.max_session_timeout_ms,
                    self.cfg.tuning.max_buffer
                );
                for p in &self.cfg.peers {
                    s.push_str(p);
                    s.push('\n');
                }
                s
            }
            "cons" => {
                let s = self.sessions.lock().expect("sessions");
                let mut out = String::new();
                for id in s.keys() {
                    out.push_str(&format!(" /client[sid={id:#x}]\n"));
                }
                out.push('\n');
                out
            }
            "envi" => format!(
                "Environment:\nzookeeper.version={version}\nhost.name=localhost\nos.name={}\nos.arch={}\nuser.dir={}\n",
                std::env::consts::OS,
                std::env::consts::ARCH,
                std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default()
            ),
            "wchs" => format!(
                "{} connections watching paths\nTotal watches:{watches}\n",
                self.stats.connections.load(Ordering::Relaxed)
            ),
            "dump" => {
                let m = self.machine.lock().expect("machine");
                let mut out = format!("SessionTracker dump:\nGlobal Sessions({}):\n", m.tree.sessions.len());
                for (id, s) in m.tree.sessions.iter() {
                    out.push_str(&format!("{id:#x}\t{}ms\n", s.timeout_ms));
                }
                out.push_str("ephemeral nodes dump:\n");
                for (id, s) in m.tree.sessions.iter() {
                    if !s.ephemerals.is_empty() {
                        out.push_str(&format!("Sessions with Ephemerals ({}):\n{id:#x}:\n", 1));
                        for p in s.ephemerals.iter() {
                            out.push_str(&format!("\t{p}\n"));
                        }
                    }
                }
                out
            }
            _ => String::new(),
        }
    }
}

/// A request read from a connection, with its share of the connection's byte budget.
type Request = Result<(Bytes, OwnedSemaphorePermit), String>;

enum Pending {
    Write {
        xid: i32,
        code: i32,
        rx: oneshot::Receiver<SubmitResult>,
        t: Instant,
        /// Released when the reply is encoded.
        _permit: OwnedSemaphorePermit,
    },
}

/// Wait for the oldest write in flight (replies leave in order).
async fn front_write(p: &mut VecDeque<Pending>) -> Option<(i32, i32, SubmitResult, Instant)> {
    let Pending::Write { rx, .. } = p.front_mut()?;
    let r = rx.await.unwrap_or(Err(SubmitError::ShuttingDown));
    let Some(Pending::Write { xid, code, t, .. }) = p.pop_front() else {
        return None;
    };
    Some((xid, code, r, t))
}

fn is_write(code: i32) -> bool {
    matches!(
        code,
        op::CREATE
            | op::CREATE2
            | op::CREATE_CONTAINER
            | op::CREATE_TTL
            | op::DELETE
            | op::DELETE_CONTAINER
            | op::SET_DATA
            | op::SET_ACL
            | op::MULTI
            | op::SYNC
            | op::CLOSE_SESSION
    )
}

fn drain_events(events: &mut mpsc::Receiver<ConnEvent>, out: &mut BytesMut) {
    while let Ok(ConnEvent(ty, path)) = events.try_recv() {
        encode_event(out, ty, &path);
    }
}

fn encode_reply(out: &mut BytesMut, xid: i32, zxid: i64, reply: &Reply) {
    let body_len = if reply.err == err::OK {
        reply.body.len()
    } else {
        0
    };
    out.put_i32((16 + body_len) as i32);
    out.int(xid);
    out.long(zxid);
    out.int(reply.err);
    if reply.err == err::OK {
        out.put_slice(&reply.body);
    }
}

fn encode_event(out: &mut BytesMut, ty: i32, path: &str) {
    let mut b = BytesMut::new();
    b.int(xid::NOTIFICATION);
    b.long(-1);
    b.int(err::OK);
    b.int(ty);
    b.int(event::STATE_SYNC_CONNECTED);
    b.string(path);
    out.put_i32(b.len() as i32);
    out.put_slice(&b);
}

async fn write_frame(w: &mut OwnedWriteHalf, body: &[u8]) -> std::io::Result<()> {
    let mut b = BytesMut::with_capacity(4 + body.len());
    b.put_i32(body.len() as i32);
    b.put_slice(body);
    w.write_all(&b).await
}

async fn flush(
    w: &mut OwnedWriteHalf,
    out: &mut BytesMut,
    timeout: Duration,
) -> std::io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    let r = tokio::time::timeout(timeout, w.write_all(out)).await;
    out.clear();
    match r {
        Ok(r) => r,
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

/// `user:password` → `user:base64(sha1(user:password))`, ZooKeeper's digest identity.
pub fn digest_id(cred: &str) -> Option<String> {
    use base64::Engine;
    let (user, _) = cred.split_once(':')?;
    let hash = sha1_smol::Sha1::from(cred.as_bytes()).digest().bytes();
    Some(format!(
        "{user}:{}",
        base64::engine::general_purpose::STANDARD.encode(hash)
    ))
}

/// Background duties: whether this server serves clients; touches of its sessions; and, on the
/// leader, session expiry and container/TTL reaping.
async fn monitor(front: Arc<Front>, serving: watch::Sender<bool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut last_touch_round = Instant::now();
    let mut led_epoch: Option<u64> = None;
    let mut expiring: HashMap<i64, Instant> = HashMap::new();
    let mut reaping: HashMap<String, Instant> = HashMap::new();
    loop {
        tick.tick().await;
        let st = front.status.lock().expect("status").clone();
        // The planted stale-sync bug also keeps serving a server that lost its leader: it then
        // answers reads (and "syncs") from a deposed state for as long as it is cut off.
        let is_serving = front.cfg.bug_stale_sync
            || (st.leader.is_some() && (st.role == "leading" || st.role == "following"));
        serving.send_if_modified(|v| {
            let changed = *v != is_serving;
            *v = is_serving;
            changed
        });
        if !is_serving {
            led_epoch = None;
            continue;
        }
        if last_touch_round.elapsed() >= Duration::from_millis(500) {
            last_touch_round = Instant::now();
            let sessions: Vec<i64> = front.active.lock().expect("active").drain().collect();
            if !sessions.is_empty() {
                let f = front.clone();
                tokio::spawn(async move {
                    let again = sessions.clone();
                    if f.submit(Txn::Touch { sessions }).await.is_err() {
                        // Not delivered (overload, no leader): try again next round rather than
                        // let live sessions expire.
                        f.active.lock().expect("active").extend(again);
                    }
                });
            }
        }
        if st.role != "leading" {
            led_epoch = None;
            continue;
        }
        let now = Instant::now();
        if led_epoch != Some(st.epoch) {
            // A new leader gives every session a full timeout of grace.
            led_epoch = Some(st.epoch);
            let ids: Vec<i64> = front
                .machine
                .lock()
                .expect("machine")
                .tree
                .sessions
                .keys()
                .copied()
                .collect();
            let mut t = front.touches.lock().expect("touches");
            t.clear();
            for id in ids {
                t.insert(id, now);
            }
        }
        let (expired, due) = {
            let m = front.machine.lock().expect("machine");
            let mut t = front.touches.lock().expect("touches");
            let mut expired = Vec::new();
            for (id, s) in m.tree.sessions.iter() {
                let last = *t.entry(*id).or_insert(now);
                if now.duration_since(last) > Duration::from_millis(s.timeout_ms.max(0) as u64) {
                    expired.push(*id);
                }
            }
            (expired, m.due_for_reaping(now_ms(), 100))
        };
        expiring.retain(|_, at| now.duration_since(*at) < Duration::from_secs(10));
        reaping.retain(|_, at| now.duration_since(*at) < Duration::from_secs(10));
        for id in expired {
            if expiring.insert(id, now).is_none() {
                info!(session = format!("{id:#x}"), "session expired");
                let f = front.clone();
                tokio::spawn(async move {
                    let _ = f.submit(Txn::CloseSession { session: id }).await;
                });
            }
        }
        for path in due {
            if reaping.insert(path.clone(), now).is_none() {
                let f = front.clone();
                tokio::spawn(async move {
                    let _ = f
                        .submit(Txn::Reap {
                            path,
                            time_ms: now_ms(),
                        })
                        .await;
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_identity_matches_zookeeper() {
        // ZooKeeper's DigestAuthenticationProvider.generateDigest("super:test").
        assert_eq!(
            digest_id("super:test").unwrap(),
            "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
        );
        assert!(digest_id("nocolon").is_none());
    }

    mod hostile {
        use super::*;
        use crate::fuzz::{block_on, bounded, config, mutate, mutation};
        use proptest::prelude::*;

        fn connect_body() -> Vec<u8> {
            let mut b = BytesMut::new();
            b.int(0);
            b.long(5);
            b.int(10_000);
            b.long(0x0100_0000_0000_0001);
            b.buffer(&[9u8; 16]);
            b.boolean(false);
            b.to_vec()
        }

        fn auth_body() -> Vec<u8> {
            let mut b = BytesMut::new();
            b.int(0);
            b.string("digest");
            b.buffer(b"user:password");
            b.to_vec()
        }

        fn framed(body: &[u8]) -> Vec<u8> {
            let mut f = (body.len() as i32).to_be_bytes().to_vec();
            f.extend_from_slice(body);
            f
        }

        /// What the client port does with the first bytes of a connection: read a frame (at
        /// most jute.maxbuffer), parse it as a ConnectRequest, and the same for auth.
        fn consume(data: &[u8]) {
            bounded(data.len(), || {
                let mut r = data;
                if let Ok(body) = block_on(read_request(&mut r, None, 0xfffff)) {
                    let _ = parse_connect(body.clone());
                    let _ = parse_auth(body.clone());
                    // A request header, as for every frame after the connect.
                    let mut h = Reader::new(body);
                    let _ = (h.int(), h.int(), h.rest());
                }
                let _ = parse_connect(Bytes::copy_from_slice(data));
                let _ = parse_auth(Bytes::copy_from_slice(data));
            });
        }

        proptest! {
            #![proptest_config(config(3_000))]

            #[test]
            fn mutated_connect_and_auth_frames_never_panic(
                which in any::<bool>(),
                muts in prop::collection::vec(mutation(), 1..5),
            ) {
                let corpus = [framed(&connect_body()), framed(&auth_body())];
                let base = &corpus[which as usize];
                consume(&mutate(base, &muts, &corpus));
            }

            #[test]
            fn random_client_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..512)) {
                consume(&data);
            }
        }

        #[test]
        fn valid_connect_and_auth_parse() {
            let c = parse_connect(Bytes::from(connect_body())).unwrap();
            assert_eq!((c.last_zxid, c.timeout_ms), (5, 10_000));
            assert_eq!(c.password.len(), 16);
            let (_, scheme, cred) = parse_auth(Bytes::from(auth_body())).unwrap();
            assert_eq!(
                (scheme.as_str(), &cred[..]),
                ("digest", &b"user:password"[..])
            );
        }

        #[test]
        fn claimed_lengths_are_not_allocated() {
            // Within jute.maxbuffer but not sent: an error, without a megabyte allocated.
            let d = framed(&[1, 2, 3]);
            let mut d = d.clone();
            d[..4].copy_from_slice(&0xfffffi32.to_be_bytes());
            let r = bounded(d.len(), || {
                block_on(read_request(&mut &d[..], None, 0xfffff))
            });
            assert!(r.is_err());
            // Over jute.maxbuffer, or negative: refused before reading anything.
            for len in [0x100000i32, i32::MAX, -1, i32::MIN] {
                let d = len.to_be_bytes();
                let r = block_on(read_request(&mut &d[..], None, 0xfffff));
                assert!(r.unwrap_err().contains("out of range"));
            }
        }
    }
}
