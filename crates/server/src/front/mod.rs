//! The ZooKeeper client port: connections, sessions, requests, watches and four-letter words.
//! It serves the host's group 0, through a [`GroupHandle`]: commands go to the group, and the
//! group's view (whether this replica serves, who leads) comes back through a watch.
//!
//! * **Order.** Requests of one connection are handled in order: writes are submitted to the
//!   group as they come (pipelined), a read waits until every earlier write of its session has
//!   been delivered here, and later writes wait for that read. Replies leave in request order,
//!   and watch events fired by a delivery leave before any reply sent after that delivery.
//! * **Sessions** are replicated: creation, close and liveness (`Touch`) are transactions. The
//!   replica the group's view names leader expires a session that nobody touched for its
//!   timeout (after a full timeout of grace when it becomes leader), and reaps container and TTL
//!   nodes ([`duties`]); both are checked again when applied, so a second or late holder (Mencius
//!   names one per failure detector) does no harm.
//! * **Linearizable sync.** `sync` is a transaction: its reply means a quorum ordered it in the
//!   current epoch, so a read after it sees every write acknowledged before the sync began (a
//!   deposed leader cannot answer it, unlike ZooKeeper's). Under Mencius it goes through the
//!   local replica like any write and is answered when delivered here, in instance order, after
//!   everything ordered before it.
//! * **No leader to forward to.** Writes always go to the local core; under Zab and PFT the
//!   core forwards them to its leader, under Mencius the local replica orders them itself.
//! * A server whose group does not serve accepts no client and drops its clients when it stops
//!   serving, as ZooKeeper's followers do; clients reconnect elsewhere.
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | the listener, connection limits, the front's shared state |
//! | `handshake.rs` | ConnectRequest: new sessions, re-attached sessions |
//! | `requests.rs` | the request pipeline of one connection, local reads, auth |
//! | `auth.rs` | SASL DIGEST-MD5, required authentication, the watch limit |
//! | `throttle.rs` | reading a connection at most `max_read_bytes_per_second` |
//! | `frames.rs` | request and reply frames |
//! | `words.rs` | four-letter words |
//! | `duties.rs` | serving or not, session touches, the leader's expiry and reaping |
//! | `expiry.rs` | the leader's session deadlines (expiry without scanning every session) |

mod auth;
mod duties;
mod expiry;
mod frames;
mod handshake;
mod requests;
mod throttle;
mod words;

pub use frames::read_request;
pub use handshake::{parse_auth, parse_connect, ConnectRequest};
pub use requests::digest_id;

use crate::host::{GroupHandle, SubmitResult};
use crate::machine::ZooKeeper;
use crate::protocol::Zxids;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use synod_zk::jute::{Acl, Id};
use synod_zk::machine::Txn;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tracing::{error, info, warn};

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

/// A watch event for a connection: type, path, and the node's ACL (the connection sends the
/// event only if its identities may READ the node, as ZooKeeper's ServerCnxn does; `None`
/// means unconditionally, as for events fired by setWatches).
struct ConnEvent(i32, String, Option<Arc<Vec<Acl>>>);

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
    /// Requests read and not yet answered, every connection's ([`OutstandingShare`]).
    outstanding: AtomicU64,
    /// From reading a request to encoding its reply.
    latency: crate::metrics::LatencyHistogram,
}

/// One connection's part of [`Stats::outstanding`]: set as its queues change, given back
/// when the connection ends, however it ends.
pub(super) struct OutstandingShare<'a> {
    total: &'a AtomicU64,
    mine: u64,
}

impl<'a> OutstandingShare<'a> {
    fn new(total: &'a AtomicU64) -> Self {
        OutstandingShare { total, mine: 0 }
    }
    fn set(&mut self, n: u64) {
        if n > self.mine {
            self.total.fetch_add(n - self.mine, Ordering::Relaxed);
        } else if n < self.mine {
            self.total.fetch_sub(self.mine - n, Ordering::Relaxed);
        }
        self.mine = n;
    }
}

impl Drop for OutstandingShare<'_> {
    fn drop(&mut self) {
        self.set(0);
    }
}

pub struct Front {
    cfg: FrontConfig,
    machine: Arc<Mutex<ZooKeeper>>,
    /// How the group's positions become zxids (a write's reply carries its zxid).
    zxids: Zxids,
    group: GroupHandle,
    sessions: Arc<Mutex<HashMap<i64, LocalSession>>>,
    /// Sessions that sent anything since the last touch round.
    active: Mutex<HashSet<i64>>,
    /// Leader side: when each session was last touched (from applied `Touch` transactions).
    touches: Arc<Mutex<expiry::Touches>>,
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
    /// SASL users (name → password); None: SASL answered as by a ZooKeeper without it.
    sasl_users: Option<BTreeMap<String, String>>,
    /// Open connections per client address (`max_client_cnxns`).
    per_ip: Mutex<HashMap<IpAddr, usize>>,
    auth_failures: crate::RateLimitedWarn,
    /// Connections, requests and reads refused or slowed by a per-client limit (one log
    /// rate limit per limit).
    limited_cnxns: crate::RateLimitedWarn,
    limited_watches: crate::RateLimitedWarn,
    limited_rate: crate::RateLimitedWarn,
    limited_outstanding: crate::RateLimitedWarn,
}

/// Replies buffered for one connection before they are written out (a client that does not
/// read then stalls its own connection, not the server's memory).
const OUT_FLUSH_BYTES: usize = 1 << 20;
/// Read buffer of an established client connection.
const CLIENT_READ_BUFFER: usize = 8 << 10;

/// Decrements the open-connection count when a connection task ends, however it ends.
struct OpenGuard(Arc<Front>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Decrements a client address's connection count when its connection ends.
struct IpGuard(Arc<Front>, IpAddr);

impl Drop for IpGuard {
    fn drop(&mut self) {
        let mut m = self.0.per_ip.lock().expect("per_ip");
        if let Some(n) = m.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.1);
            }
        }
    }
}

fn now_ms() -> i64 {
    crate::now_ms()
}

impl Front {
    pub fn new(cfg: FrontConfig, machine: Arc<Mutex<ZooKeeper>>, group: GroupHandle) -> Arc<Front> {
        let sessions = Arc::new(Mutex::new(HashMap::new()));
        let touches = Arc::new(Mutex::new(expiry::Touches::default()));
        let zxids = {
            let mut m = machine.lock().expect("machine");
            m.set_effects(Box::new(duties::FrontEffects {
                sessions: sessions.clone(),
                touches: touches.clone(),
            }));
            m.watches.set_limit(cfg.tuning.max_watches_per_session);
            m.zxids()
        };
        // Checked when the configuration was loaded; a file that went bad since leaves SASL
        // failing for everyone rather than open.
        let sasl_users = cfg.tuning.sasl_users().unwrap_or_else(|e| {
            error!("{e:#}; every SASL authentication will fail");
            Some(BTreeMap::new())
        });
        let (serving_tx, serving) = watch::channel(false);
        let base = ((cfg.node_id as u64 & 0xFF) << 56)
            | (((now_ms() as u64) << 16) & 0x00FF_FFFF_FFFF_0000);
        let front = Arc::new(Front {
            cfg,
            machine,
            zxids,
            group,
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
            sasl_users,
            per_ip: Mutex::new(HashMap::new()),
            auth_failures: crate::RateLimitedWarn::new(),
            limited_cnxns: crate::RateLimitedWarn::new(),
            limited_watches: crate::RateLimitedWarn::new(),
            limited_rate: crate::RateLimitedWarn::new(),
            limited_outstanding: crate::RateLimitedWarn::new(),
        });
        tokio::spawn(duties::run(front.clone(), serving_tx));
        front
    }

    /// Serve the plain client port.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        self.accept(listener, |front, stream, addr, deadline| async move {
            front
                .connection(stream.into_split(), addr, deadline, Vec::new())
                .await
        })
        .await
    }

    /// Serve the secure client port (ZooKeeper's secureClientPort): TLS with the node's
    /// certificate, a client certificate asked for as `[tls] client_auth` says. The TLS
    /// handshake counts against the handshake timeout, and the connection limits apply before
    /// it. A client certificate adds the identity `x509:<subject DN>` (ZooKeeper's
    /// X509AuthenticationProvider).
    pub async fn serve_tls(self: Arc<Self>, listener: TcpListener, tls: Arc<crate::tls::Tls>) {
        self.accept(listener, move |front, stream, addr, deadline| {
            let acceptor = tls.client_acceptor();
            async move {
                let stream = match tokio::time::timeout_at(deadline, acceptor.accept(stream)).await
                {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        crate::metrics::zk_front().limited("tls_handshake");
                        if let Some(more) = front.auth_failures.check() {
                            warn!(%addr, "TLS handshake with a client failed: {e} ({more} more failures since the last message)");
                        }
                        return;
                    }
                    Err(_) => return front.handshake_timed_out(addr, "TLS handshake"),
                };
                let ids: Vec<Id> = stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(crate::tls::x509_subject)
                    .map(|subject| Id {
                        scheme: "x509".into(),
                        id: subject,
                    })
                    .into_iter()
                    .collect();
                front
                    .connection(tokio::io::split(stream), addr, deadline, ids)
                    .await
            }
        })
        .await
    }

    /// The accept loop of a client port: connection limits (`max_connections`,
    /// `max_client_cnxns`), then `serve` in a task of its own with the handshake's deadline.
    async fn accept<F, Fut>(self: Arc<Self>, listener: TcpListener, serve: F)
    where
        F: Fn(Arc<Front>, tokio::net::TcpStream, SocketAddr, tokio::time::Instant) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
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
            let Some(ip_guard) = self.claim_address(addr) else {
                drop((stream, guard));
                continue;
            };
            let _ = stream.set_nodelay(true);
            let deadline = tokio::time::Instant::now()
                + Duration::from_millis(self.cfg.tuning.handshake_timeout_ms);
            let task = serve(self.clone(), stream, addr, deadline);
            tokio::spawn(async move {
                let _guard = (guard, ip_guard);
                task.await;
            });
        }
    }

    /// Count a new connection against its address's `max_client_cnxns` (ZooKeeper's
    /// maxClientCnxns: an excess connection is closed as soon as it is accepted).
    fn claim_address(self: &Arc<Self>, addr: SocketAddr) -> Option<IpGuard> {
        let max = self.cfg.tuning.max_client_cnxns;
        let ip = addr.ip();
        let mut m = self.per_ip.lock().expect("per_ip");
        let n = m.entry(ip).or_insert(0);
        if max > 0 && *n >= max {
            drop(m);
            crate::metrics::zk_front().limited("max_client_cnxns");
            if let Some(more) = self.limited_cnxns.check() {
                warn!(%addr, "too many connections from {ip}: max is {max} (zookeeper.max_client_cnxns); closing it; {more} more limited since the last message");
            }
            return None;
        }
        *n += 1;
        Some(IpGuard(self.clone(), ip))
    }

    fn serving(&self) -> bool {
        *self.serving.borrow()
    }

    /// Submit a session transaction for a connection in its handshake. Given up as soon as
    /// this server stops serving (it lost its leader), as its established connections are
    /// closed then: the client moves to a server that serves instead of waiting here while
    /// its session times out.
    async fn submit(&self, txn: Txn) -> SubmitResult {
        let mut serving = self.serving.clone();
        tokio::select! {
            r = self.group.submit(txn.encode()) => r,
            _ = serving.wait_for(|s| !*s) => Err(crate::host::SubmitError::NoLeader),
        }
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
}

#[cfg(test)]
mod tests;
