//! The handshake of a client connection: a four-letter word, or a ConnectRequest that creates
//! a session or re-attaches one.

use super::frames::{read_request, write_frame, ClientWrite};
use super::{Front, LocalSession};
use bytes::{Bytes, BytesMut};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use synod_zk::jute::{Id, JuteWrite, Reader};
use synod_zk::machine::Txn;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tracing::{debug, info};

/// A ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd[, readOnly].
#[derive(Debug, PartialEq, Eq)]
pub struct ConnectRequest {
    pub protocol_version: i32,
    pub last_zxid: i64,
    pub timeout_ms: i32,
    pub session_id: i64,
    pub password: Bytes,
    /// The trailing readOnly flag; `None` from an old client that does not send it (ZooKeeper
    /// then leaves the flag out of its ConnectResponse too).
    pub read_only: Option<bool>,
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
        read_only: r.boolean().ok(),
    })
}

/// A ConnectResponse: protocol version 0, the session (0, 0 and a zero password: invalid),
/// and the readOnly flag only if the client sent one (as ZooKeeper answers old clients).
fn connect_response(
    timeout_ms: i32,
    session: i64,
    password: &[u8],
    read_only: Option<bool>,
) -> BytesMut {
    let mut b = BytesMut::new();
    b.int(0);
    b.int(timeout_ms);
    b.long(session);
    b.buffer(password);
    if let Some(ro) = read_only {
        b.boolean(ro);
    }
    b
}

/// Parse the body of an auth request: type, scheme, credentials (None when null).
pub fn parse_auth(body: Bytes) -> Result<(i32, String, Option<Bytes>), synod_zk::jute::JuteError> {
    let mut r = Reader::new(body);
    Ok((r.int()?, r.string()?, r.opt_buffer()?))
}

impl Front {
    /// Serve one client connection (plain or TLS, split into its halves) from its first bytes:
    /// a four-letter word, or a ConnectRequest then requests. `ids` are identities the
    /// connection already has (a TLS client certificate's x509 id); `deadline` bounds the
    /// handshake (a TLS handshake included).
    pub(super) async fn connection<R, W>(
        self: Arc<Self>,
        (mut rd, mut wr): (R, W),
        addr: SocketAddr,
        deadline: tokio::time::Instant,
        ids: Vec<Id>,
    ) where
        R: AsyncRead + Unpin + Send + 'static,
        W: ClientWrite,
    {
        let mut head = [0u8; 4];
        match tokio::time::timeout_at(deadline, rd.read_exact(&mut head)).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return,
            Err(_) => return self.handshake_timed_out(addr, "request"),
        }
        if head.iter().all(|b| b.is_ascii_lowercase()) {
            let word = String::from_utf8_lossy(&head).to_string();
            let text = self.four_letter_word(&word);
            let write_timeout = Duration::from_millis(self.cfg.tuning.write_timeout_ms);
            let _ = tokio::time::timeout(write_timeout, async {
                wr.write_all(text.as_bytes()).await?;
                wr.shutdown().await
            })
            .await;
            return;
        }
        if !self.serving() && !self.cfg.tuning.read_only_mode {
            debug!(%addr, "refusing a client: no established leader");
            return;
        }
        self.stats.connections.fetch_add(1, Ordering::Relaxed);
        let conn = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let why = self
            .run_connection((rd, wr), addr, head, conn, deadline, ids)
            .await;
        self.stats.connections.fetch_sub(1, Ordering::Relaxed);
        debug!(%addr, "client connection closed: {why}");
    }

    async fn run_connection<R, W>(
        self: &Arc<Self>,
        (mut rd, mut wr): (R, W),
        addr: SocketAddr,
        head: [u8; 4],
        conn: u64,
        deadline: tokio::time::Instant,
        ids: Vec<Id>,
    ) -> String
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: ClientWrite,
    {
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
            read_only,
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
        // Read-only mode (ZooKeeper's ReadOnlyZooKeeperServer): a server cut off from its
        // quorum serves the clients that ask for it (readOnly in the ConnectRequest) with reads
        // of its last state; their writes fail with NOTREADONLY, and the connections close when
        // the server serves again, so that the clients move back to read-write.
        let read_only_session = !self.serving();
        if read_only_session && read_only != Some(true) {
            debug!(%addr, "refusing a client: no established leader, and it did not ask for read-only");
            return "no leader; the client did not ask for read-only".into();
        }
        let (session, timeout, password) = if read_only_session {
            let known = self
                .machine
                .lock()
                .expect("machine")
                .session(session_id)
                .map(|s| (s.timeout_ms, s.password.clone()));
            match known {
                // A session of the cluster: its liveness is not touched (nothing can be
                // ordered), and it may expire once a quorum is back.
                Some((t, pw)) if session_id != 0 && pw == passwd => (session_id, t, pw),
                // A new session, local to this server (never replicated); the client gets a
                // new one from a read-write server.
                _ if session_id == 0 => {
                    let session = self.next_session.fetch_add(1, Ordering::Relaxed) as i64;
                    let password: [u8; 16] = rand::random();
                    (session, timeout, Bytes::copy_from_slice(&password))
                }
                _ => {
                    let b = connect_response(0, 0, &[0u8; 16], Some(true));
                    let _ = write_frame(&mut wr, &b).await;
                    return "unknown session or wrong password (read-only)".into();
                }
            }
        } else if session_id == 0 {
            let session = self.next_session.fetch_add(1, Ordering::Relaxed) as i64;
            let password: [u8; 16] = rand::random();
            let password = Bytes::copy_from_slice(&password);
            match self
                .submit(Txn::CreateSession {
                    session,
                    owner: self.cfg.node_id,
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
            // Attaching also makes this server the session's owner: writes that its old
            // connection (on another server) still sends fail with SESSIONMOVED.
            let touched = self
                .submit(Txn::Attach {
                    session: session_id,
                    owner: self.cfg.node_id,
                    password: passwd.clone(),
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
                    // Expired or wrong password: ZooKeeper answers with an invalid session,
                    // and also closes the session's connection on this server, if any.
                    if let Some(old) = self.sessions.lock().expect("sessions").remove(&session_id) {
                        old.close
                            .send_replace(Some("session re-attached with a wrong password"));
                    }
                    let b = connect_response(0, 0, &[0u8; 16], read_only.map(|_| false));
                    let _ = write_frame(&mut wr, &b).await;
                    return "expired session or wrong password".into();
                }
            }
        };
        let b = connect_response(
            timeout,
            session,
            &password,
            read_only.map(|_| read_only_session),
        );
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
        auth.extend(ids);
        let frame_timeout = Duration::from_millis(timeout.max(1) as u64);
        let why = self
            .requests(
                session,
                read_only_session,
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
        drop(s);
        if read_only_session {
            // A session local to this read-only server is never closed through the log: its
            // watches go with its connection.
            let mut m = self.machine.lock().expect("machine");
            if m.session(session).is_none() {
                m.watches.drop_session(session);
            }
        }
        why
    }
}
