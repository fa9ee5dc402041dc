//! The request pipeline of one client connection: writes submitted to the group as they come,
//! reads served from this replica's state once no earlier write of the session is in flight,
//! replies in request order, watch events before the replies sent after them.

use super::auth::{add_identity, SaslOutcome, QUOTA_EXCEEDED, SESSION_CLOSED_REQUIRE_SASL_AUTH};
use super::frames::{
    drain_events, encode_event, encode_reply, flush, next_request, ClientWrite, REQUEST_OVERHEAD,
};
use super::handshake::parse_auth;
use super::{now_ms, ConnEvent, Front, CLIENT_READ_BUFFER, OUT_FLUSH_BYTES};
use crate::host::{SubmitError, SubmitResult};
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use synod_zk::jute::{err, op, Id, JuteWrite, Reader};
use synod_zk::machine::{Reply, Txn};
use tokio::io::AsyncRead;
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};

impl Front {
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn requests<R, W>(
        self: &Arc<Self>,
        session: i64,
        read_only: bool,
        auth: &mut Vec<Id>,
        rd: R,
        mut wr: W,
        mut events: mpsc::Receiver<ConnEvent>,
        mut close: watch::Receiver<Option<&'static str>>,
        addr: SocketAddr,
        frame_timeout: Duration,
    ) -> String
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: ClientWrite,
    {
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
        let rate = self.cfg.tuning.max_read_bytes_per_second;
        let mut warned = false;
        let front = self.clone();
        let on_throttle = Box::new(move || {
            crate::metrics::zk_front().limited("max_read_bytes_per_second");
            if !warned {
                warned = true;
                if let Some(more) = front.limited_rate.check() {
                    tracing::info!(%addr, "reading a client more slowly: it sends more than {rate} bytes/s (zookeeper.max_read_bytes_per_second); {more} more limited since the last message");
                }
            }
        });
        let largest = self.cfg.tuning.max_buffer + 4;
        let rd = super::throttle::Throttled::new(rd, rate, largest, on_throttle);
        let front = self.clone();
        let mut on_full = move || front.outstanding_full(addr, "max_outstanding_bytes");
        let reader = tokio::spawn(async move {
            // Pipelined requests are read with one recv per batch rather than two per request
            // (a small buffer: there may be thousands of connections).
            let mut rd = tokio::io::BufReader::with_capacity(CLIENT_READ_BUFFER, rd);
            loop {
                let f =
                    next_request(&mut rd, &budget, max_buffer, frame_timeout, &mut on_full).await;
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
        let mut sasl_exchange = None;
        let mut room_before = true;
        let mut outstanding = super::OutstandingShare::new(&self.stats.outstanding);
        let why = 'conn: loop {
            // Start what may start: writes in order, a read once no earlier write is in flight.
            while let Some((xid, code, _, _, _)) = backlog.front() {
                let (xid, code) = (*xid, *code);
                if self.auth_missing(code, auth) {
                    // require_auth (ZooKeeper's enforce.auth): answered in order, then closed.
                    if !pending.is_empty() {
                        break;
                    }
                    let (_, _, _, t, _) = backlog.pop_front().expect("front");
                    encode_reply(
                        &mut out,
                        xid,
                        0,
                        &Reply::error(SESSION_CLOSED_REQUIRE_SASL_AUTH),
                    );
                    self.record(t);
                    self.refused_unauthenticated(addr, auth);
                    let _ = flush(&mut wr, &mut out, write_timeout).await;
                    reader.abort();
                    return "not authenticated (zookeeper.require_auth)".into();
                }
                let planted = self.cfg.bug_stale_sync && code == op::SYNC;
                if read_only && is_write(code) {
                    // A read-only session: writes (and syncs) fail, as in ZooKeeper's
                    // ReadOnlyRequestProcessor; closing one closes the connection.
                    let (_, _, _, t, _) = backlog.pop_front().expect("front");
                    let (err, zxid) = if code == op::CLOSE_SESSION {
                        (err::OK, 0)
                    } else {
                        (
                            err::NOT_READ_ONLY,
                            self.machine.lock().expect("machine").applied_zxid,
                        )
                    };
                    encode_reply(&mut out, xid, zxid, &Reply::error(err));
                    self.record(t);
                    if code == op::CLOSE_SESSION {
                        let _ = flush(&mut wr, &mut out, write_timeout).await;
                        reader.abort();
                        return "read-only session closed by the client".into();
                    }
                } else if is_write(code) && !planted {
                    let (_, _, body, t, permit) = backlog.pop_front().expect("front");
                    let txn = if code == op::CLOSE_SESSION {
                        Txn::CloseSession { session }
                    } else {
                        Txn::Op {
                            session,
                            owner: self.cfg.node_id,
                            enforce_quota: self.cfg.tuning.enforce_quota,
                            time_ms: now_ms(),
                            auth: auth.clone(),
                            op: code,
                            body,
                        }
                    };
                    let Ok(rx) = self.group.submit_pipelined(txn.encode()).await else {
                        break 'conn "server shutting down".to_string();
                    };
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
                    if code == op::SASL {
                        let outcome = self.sasl(
                            session,
                            auth,
                            &mut sasl_exchange,
                            addr,
                            (xid, body),
                            &mut events,
                            &mut out,
                        );
                        drop(permit);
                        self.record(t);
                        if let SaslOutcome::Close(why) = outcome {
                            let _ = flush(&mut wr, &mut out, write_timeout).await;
                            reader.abort();
                            return why;
                        }
                        continue;
                    }
                    let e = self.local(
                        session,
                        auth,
                        addr,
                        (xid, code, body),
                        &mut events,
                        &mut out,
                    );
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
            outstanding.set((backlog.len() + pending.len()) as u64);
            let room = backlog.len() + pending.len() < self.cfg.tuning.max_outstanding;
            if !room && room_before {
                self.outstanding_full(addr, "max_outstanding");
            }
            room_before = room;
            tokio::select! {
                biased;
                ev = events.recv() => match ev {
                    Some(ev) => encode_event(&mut out, ev, auth),
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
                    let now = *serving.borrow();
                    if !now && !read_only {
                        break "this server lost its leader".to_string();
                    }
                    if now && read_only {
                        // As ZooKeeper's read-only server shuts down when the quorum is back:
                        // the client reconnects, read-write.
                        break "the quorum is back: read-only session closed".to_string();
                    }
                }
                done = front_write(&mut pending), if !pending.is_empty() => {
                    let Some((xid, code, result, t)) = done else { continue };
                    drain_events(&mut events, auth, &mut out);
                    match result {
                        Ok(applied) => {
                            let reply = Reply::decode(&applied.result);
                            if reply.err == err::SESSION_MOVED {
                                // As ZooKeeper (ZOOKEEPER-710): a connection-level error, the
                                // old connection of a moved session is closed, unanswered.
                                break "the session moved to another server".to_string();
                            }
                            encode_reply(&mut out, xid, self.zxids.zxid(applied.at.tag), &reply);
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
                wr.reset_on_close();
            }
        }
        why
    }

    pub(super) fn write_failed<W: ClientWrite>(
        &self,
        addr: SocketAddr,
        wr: &W,
        e: std::io::Error,
    ) -> String {
        if e.kind() == std::io::ErrorKind::TimedOut {
            // Reset rather than close: a FIN would wait behind the unread replies, and the
            // kernel would keep them for the orphaned socket long after we let go of it.
            wr.reset_on_close();
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

    /// A connection reached `max_outstanding` or `max_outstanding_bytes`: reading it pauses
    /// until replies go out. Counted; logged (rate-limited) with the client's address.
    fn outstanding_full(&self, addr: SocketAddr, limit: &'static str) {
        crate::metrics::zk_front().limited(limit);
        if let Some(more) = self.limited_outstanding.check() {
            tracing::info!(%addr, "reading a client pauses: its unanswered requests reached zookeeper.{limit}; {more} more since the last message");
        }
    }

    pub(super) fn record(&self, since: Instant) {
        self.stats.sent.fetch_add(1, Ordering::Relaxed);
        let us = since.elapsed().as_micros() as u64;
        self.stats.latency.observe_us(us);
    }

    /// A request served here (reads, watch management, auth, ping): its reply is encoded into
    /// `out` while the machine is locked, after every watch event already fired, so that no
    /// event for a watch this request registers can overtake the reply (clients register the
    /// watcher when the reply arrives). Returns the error code.
    fn local(
        &self,
        session: i64,
        auth: &mut Vec<Id>,
        addr: SocketAddr,
        (xid, code, body): (i32, i32, Bytes),
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
                // As ZooKeeper's DigestAuthenticationProvider: any credential is accepted and
                // names the identity `user:base64(sha1(credential))`, the user being what
                // precedes the first colon (all of it if there is none); the super digest
                // also grants the `super` identity.
                Ok((_, scheme, Some(cred))) if scheme == "digest" => {
                    let cred = String::from_utf8_lossy(&cred).to_string();
                    let id = digest_id(&cred);
                    if self.cfg.tuning.super_digest.as_deref() == Some(id.as_str()) {
                        add_identity(auth, "super", "");
                    }
                    add_identity(auth, "digest", &id);
                    Reply::ok(BytesMut::new())
                }
                // As IPAuthenticationProvider: the identity is the client's own address.
                Ok((_, scheme, _)) if scheme == "ip" => {
                    add_identity(auth, "ip", &addr.ip().to_string());
                    Reply::ok(BytesMut::new())
                }
                _ => Reply::error(err::AUTH_FAILED),
            },
            // Dynamic reconfiguration is disabled, as in ZooKeeper by default
            // (reconfigEnabled=false): its first check.
            op::RECONFIG => Reply::error(err::RECONFIG_DISABLED),
            _ if self.watch_limited(m.watches.of_session(session), code, &body, addr) => {
                Reply::error(QUOTA_EXCEEDED)
            }
            _ => match m.read(session, auth, code, body) {
                Ok(r) => r,
                Err(_) => Reply::error(err::MARSHALLING_ERROR),
            },
        };
        drain_events(events, auth, out);
        // The header as ZooKeeper fills it: pings answer with the ping xid; auth replies carry
        // zxid 0, an invalid operation zxid -1.
        let (xid, zxid) = match code {
            op::PING => (synod_zk::jute::xid::PING, zxid),
            op::AUTH => (xid, 0),
            _ if reply.err == err::UNIMPLEMENTED => (xid, -1),
            _ => (xid, zxid),
        };
        encode_reply(out, xid, zxid, &reply);
        reply.err
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

/// `user:password` → `user:base64(sha1(user:password))`, ZooKeeper's digest identity
/// (DigestAuthenticationProvider.generateDigest: the user is what precedes the first colon, or
/// the whole credential if it has none).
pub fn digest_id(cred: &str) -> String {
    use base64::Engine;
    let user = cred.split_once(':').map_or(cred, |(user, _)| user);
    let hash = sha1_smol::Sha1::from(cred.as_bytes()).digest().bytes();
    format!(
        "{user}:{}",
        base64::engine::general_purpose::STANDARD.encode(hash)
    )
}
