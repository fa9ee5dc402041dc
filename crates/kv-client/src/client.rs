//! [`Client`]: the view, the routing of each request to the right node, the retries, and the
//! single-key operations. Transactions are in [`crate::txn`].

use crate::error::{Error, Result};
use crate::history::Recorder;
use crate::limits::{check_key, check_value};
use crate::proto::kv_client::KvClient;
use crate::proto::{self, Error as Code};
use crate::routing::Routing;
use crate::transport::{verdict, Channels, Failure, Retry, Verdict};
use crate::txn::{Txn, TxnId};
use bytes::Bytes;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tonic::transport::Channel;

/// How the client talks to the cluster.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The limit of one RPC attempt, also sent as its gRPC deadline.
    pub timeout: Duration,
    /// Attempts after the first, for every operation (a redirect counts too).
    pub retries: u32,
    /// The first backoff between attempts; it doubles up to `backoff_max`.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Serve reads from any replica of the key's bucket instead of its master: the thesis's
    /// `REPLICA_ONLY` mode. A stale read only makes the commit abort.
    pub replica_reads: bool,
    /// Receives every finished transaction (see [`crate::history`]).
    pub recorder: Option<Recorder>,
    /// TLS to the nodes (a cluster whose `[tls] kv` is on, the default of a secure cluster):
    /// the cluster CA and, when the nodes ask for one, a client certificate.
    pub tls: Option<ClientTls>,
}

/// The PEM files a client needs for a cluster that serves TLS.
#[derive(Clone, Debug)]
pub struct ClientTls {
    /// The cluster CA (`ca.crt` of `synod certs`).
    pub ca_pem: Vec<u8>,
    /// A client certificate and its key (`client-<name>.crt/.key`), if any.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl ClientTls {
    /// Read the CA file and, optionally, a certificate and key file.
    pub fn from_files(
        ca: &std::path::Path,
        identity: Option<(&std::path::Path, &std::path::Path)>,
    ) -> std::io::Result<ClientTls> {
        let read = |p: &std::path::Path| {
            std::fs::read(p)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", p.display())))
        };
        Ok(ClientTls {
            ca_pem: read(ca)?,
            identity: match identity {
                Some((c, k)) => Some((read(c)?, read(k)?)),
                None => None,
            },
        })
    }
}

impl Default for ClientConfig {
    /// 5 s per call; 8 retries with a backoff from 50 ms doubling to 1 s (about 4.5 s of
    /// waiting in all, enough to ride out a master failover); reads at the master.
    fn default() -> Self {
        ClientConfig {
            timeout: Duration::from_secs(5),
            retries: 8,
            backoff_initial: Duration::from_millis(50),
            backoff_max: Duration::from_secs(1),
            replica_reads: false,
            recorder: None,
            tls: None,
        }
    }
}

/// A key's value and version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versioned {
    /// `None`: absent or deleted.
    pub value: Option<Bytes>,
    /// 0 if never written; a deleted key keeps its version.
    pub version: u64,
}

/// A connection to a SconeKV cluster. Cheap to clone; clones share the view and connections.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    config: ClientConfig,
    seeds: Vec<String>,
    routing: RwLock<Arc<Routing>>,
    channels: Channels,
    /// Rotates the choice among equivalent nodes.
    turn: AtomicUsize,
}

/// Which node a request goes to.
pub(crate) enum Target {
    /// The bucket's master (commits, writes).
    Master(u32),
    /// The bucket's master, or any of its replicas with `replica_reads`.
    Read(u32),
    /// Any node (views, `Begin`).
    Any,
}

/// Whether an operation may be sent again after an attempt that may have been applied.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repeat {
    /// Reads, views and commits (idempotent by their id).
    Always,
    /// Single-key writes: stop at the first ambiguous failure.
    UntilAmbiguous,
}

/// Why [`Client::request`] gave up.
pub(crate) enum Stop {
    /// The server refused it (`INVALID`, `TOO_LARGE`).
    Refused(Code, String),
    /// The retries ran out, or an ambiguous failure ended an [`Repeat::UntilAmbiguous`] call.
    Failed { ambiguous: bool, why: String },
}

/// The status of a response.
pub(crate) trait HasStatus {
    fn take_status(&mut self) -> Option<proto::Status>;
}

macro_rules! has_status {
    ($($t:ty),*) => {$(
        impl HasStatus for $t {
            fn take_status(&mut self) -> Option<proto::Status> {
                self.status.take()
            }
        }
    )*};
}
has_status!(
    proto::BeginResponse,
    proto::ReadResponse,
    proto::CommitResponse,
    proto::WriteResponse
);

impl Client {
    /// Connects with the default [`ClientConfig`]: fetches the view from the first seed
    /// (`host:port`) that answers.
    pub async fn connect(seeds: &[String]) -> Result<Client> {
        Client::connect_with(seeds, ClientConfig::default()).await
    }

    /// Connects with `config`.
    pub async fn connect_with(seeds: &[String], config: ClientConfig) -> Result<Client> {
        if seeds.is_empty() {
            return Err(Error::InvalidArgument("no seed address".into()));
        }
        let channels = Channels::new(config.timeout, config.tls.clone());
        let mut retry = Retry::new(config.retries, config.backoff_initial, config.backoff_max);
        loop {
            let mut last = String::new();
            for seed in seeds {
                match fetch_view(&channels, seed).await {
                    Ok(routing) => {
                        return Ok(Client {
                            inner: Arc::new(Inner {
                                config,
                                seeds: seeds.to_vec(),
                                routing: RwLock::new(Arc::new(routing)),
                                channels,
                                turn: AtomicUsize::new(0),
                            }),
                        })
                    }
                    Err(f) => last = f.why,
                }
            }
            if !retry.again(Failure::not_sent(last), true).await {
                return Err(Error::Unavailable(format!(
                    "no seed answered GetView: {}",
                    retry.last
                )));
            }
        }
    }

    /// The client's configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The current view.
    pub fn routing(&self) -> Arc<Routing> {
        self.inner.routing.read().expect("view lock").clone()
    }

    /// Fetches the view from a node (of the current view, then the seeds) and learns from it
    /// ([`Routing::merge`]). Returns the view in use afterwards.
    pub async fn refresh_view(&self) -> Result<Arc<Routing>> {
        let current = self.routing();
        let mut candidates: Vec<String> = current
            .node_addresses()
            .into_iter()
            .map(String::from)
            .collect();
        for s in &self.inner.seeds {
            if !candidates.contains(s) {
                candidates.push(s.clone());
            }
        }
        let start = self.inner.turn.fetch_add(1, Ordering::Relaxed);
        let mut last = String::new();
        for i in 0..candidates.len().min(3) {
            let addr = &candidates[(start + i) % candidates.len()];
            match fetch_view(&self.inner.channels, addr).await {
                Ok(r) => {
                    self.apply_view(r.view().clone());
                    return Ok(self.routing());
                }
                Err(f) => last = f.why,
            }
        }
        Err(Error::Unavailable(format!(
            "no node answered GetView: {last}"
        )))
    }

    /// Learns what `view` teaches ([`Routing::merge`]); true if the routing changed.
    pub(crate) fn apply_view(&self, view: proto::View) -> bool {
        let mut current = self.inner.routing.write().expect("view lock");
        match current.merge(view) {
            Some(r) => {
                *current = Arc::new(r);
                true
            }
            None => false,
        }
    }

    /// Where to send a request for `target` now. A bucket without a known master falls back
    /// to one of its replicas (commits and writes are forwarded to the master by any replica,
    /// and a read at a replica is refused with what that replica knows of the master), and a
    /// bucket without known replicas to any node (which answers `WRONG_NODE` with its view).
    fn address(&self, routing: &Routing, target: &Target) -> Option<String> {
        let turn = self.inner.turn.fetch_add(1, Ordering::Relaxed);
        let pick = |all: Vec<&str>| (!all.is_empty()).then(|| all[turn % all.len()].to_string());
        let any = || {
            let nodes = routing.node_addresses();
            if nodes.is_empty() {
                pick(self.inner.seeds.iter().map(String::as_str).collect())
            } else {
                pick(nodes)
            }
        };
        let bucket = match *target {
            Target::Any => return any(),
            Target::Read(b) if self.inner.config.replica_reads => {
                return pick(routing.replica_addresses(b)).or_else(any)
            }
            Target::Master(b) | Target::Read(b) => b,
        };
        routing
            .master_address(bucket)
            .map(String::from)
            .or_else(|| pick(routing.replica_addresses(bucket)))
            .or_else(any)
    }

    /// Sends a request to `target` (resolved in the current view at each attempt), retrying
    /// within the budget: at once after a redirect that taught the client a new master or view,
    /// after a backoff (and a view refresh) otherwise. `build` makes the request for a view, `call` sends it.
    pub(crate) async fn request<Req, Resp, T, B, C, Fut>(
        &self,
        target: T,
        repeat: Repeat,
        build: B,
        call: C,
    ) -> std::result::Result<Resp, Stop>
    where
        T: Fn(&Routing) -> Target,
        B: Fn(&Routing) -> Req,
        C: Fn(KvClient<Channel>, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<Resp>, tonic::Status>>,
        Resp: HasStatus,
    {
        let c = &self.inner.config;
        let mut retry = Retry::new(c.retries, c.backoff_initial, c.backoff_max);
        loop {
            let routing = self.routing();
            let target = target(&routing);
            let (failure, wait) = match self.address(&routing, &target) {
                None => {
                    let _ = self.refresh_view().await;
                    let why = format!("no node to send to in view {}", routing.version());
                    (Failure::not_sent(why), true)
                }
                Some(addr) => {
                    let sent = self
                        .inner
                        .channels
                        .send(&addr, build(&routing), &call)
                        .await;
                    match sent {
                        Ok(mut resp) => match verdict(&addr, resp.take_status()) {
                            Verdict::Served => return Ok(resp),
                            Verdict::Refused(code, detail) => {
                                return Err(Stop::Refused(code, detail))
                            }
                            Verdict::Again(f) => (f, true),
                            Verdict::Redirect(view) => {
                                let learned = view.is_some_and(|v| self.apply_view(v));
                                if !learned {
                                    let _ = self.refresh_view().await;
                                }
                                let why = format!("{addr} redirected (view {})", routing.version());
                                (Failure::not_sent(why), !learned)
                            }
                        },
                        Err(f) => {
                            let _ = self.refresh_view().await;
                            (f, true)
                        }
                    }
                }
            };
            if failure.ambiguous && repeat == Repeat::UntilAmbiguous {
                return Err(Stop::Failed {
                    ambiguous: true,
                    why: failure.why,
                });
            }
            if !retry.again(failure, wait).await {
                return Err(Stop::Failed {
                    ambiguous: retry.ambiguous,
                    why: format!("gave up after {} retries: {}", c.retries, retry.last),
                });
            }
        }
    }

    /// Begins a transaction: asks any node for a transaction id.
    pub async fn begin(&self) -> Result<Txn> {
        let resp = self
            .request(
                |_| Target::Any,
                Repeat::Always,
                |_| proto::BeginRequest {},
                |mut c, r| async move { c.begin(r).await },
            )
            .await
            .map_err(|s| safe_error(s, "begin"))?;
        let id = resp
            .id
            .ok_or_else(|| Error::Unavailable("Begin answered without an id".into()))?;
        Ok(Txn::new(self.clone(), TxnId::from(id)))
    }

    /// The latest committed value of `key` at its bucket's master. Not validated: only a
    /// transaction's commit certifies what it read.
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        Ok(self.get_versioned(key).await?.value)
    }

    /// [`Client::get`] with the key's version.
    pub async fn get_versioned(&self, key: impl AsRef<[u8]>) -> Result<Versioned> {
        let key = Bytes::copy_from_slice(key.as_ref());
        check_key(&key)?;
        self.read(key).await
    }

    /// One `Read` RPC (the key already checked).
    pub(crate) async fn read(&self, key: Bytes) -> Result<Versioned> {
        let any_replica = self.inner.config.replica_reads;
        let resp = self
            .request(
                |r| Target::Read(r.bucket_of(&key)),
                Repeat::Always,
                |r| proto::ReadRequest {
                    view_version: r.version(),
                    key: key.clone(),
                    any_replica,
                },
                |mut c, r| async move { c.read(r).await },
            )
            .await
            .map_err(|s| safe_error(s, "read"))?;
        Ok(Versioned {
            value: resp.found.then_some(resp.value),
            version: resp.version,
        })
    }

    /// Writes `value` at `key` unconditionally; returns the key's new version.
    pub async fn put(&self, key: impl AsRef<[u8]>, value: impl Into<Bytes>) -> Result<u64> {
        let key = Bytes::copy_from_slice(key.as_ref());
        let value = value.into();
        check_key(&key)?;
        check_value(&value)?;
        let resp = self
            .write(
                &key,
                |r| proto::PutRequest {
                    view_version: r.version(),
                    key: key.clone(),
                    value: value.clone(),
                },
                |mut c, r| async move { c.put(r).await },
            )
            .await?;
        Ok(resp.version)
    }

    /// Deletes `key` (it keeps a tombstone version); returns the key's new version.
    pub async fn delete(&self, key: impl AsRef<[u8]>) -> Result<u64> {
        let key = Bytes::copy_from_slice(key.as_ref());
        check_key(&key)?;
        let resp = self
            .write(
                &key,
                |r| proto::DeleteRequest {
                    view_version: r.version(),
                    key: key.clone(),
                },
                |mut c, r| async move { c.delete(r).await },
            )
            .await?;
        Ok(resp.version)
    }

    /// Writes `value` at `key` if its version is `expected_version` (0: never written).
    /// Returns whether it wrote, and the key's version afterwards (the current one if not).
    pub async fn compare_and_set(
        &self,
        key: impl AsRef<[u8]>,
        expected_version: u64,
        value: impl Into<Bytes>,
    ) -> Result<(bool, u64)> {
        let key = Bytes::copy_from_slice(key.as_ref());
        let value = value.into();
        check_key(&key)?;
        check_value(&value)?;
        let resp = self
            .write(
                &key,
                |r| proto::CompareAndSetRequest {
                    view_version: r.version(),
                    key: key.clone(),
                    expected_version,
                    value: value.clone(),
                },
                |mut c, r| async move { c.compare_and_set(r).await },
            )
            .await?;
        Ok((resp.done, resp.version))
    }

    /// A single-key write at the master of `key`'s bucket, never repeated once an attempt may
    /// have been applied.
    async fn write<Req, B, C, Fut>(
        &self,
        key: &[u8],
        build: B,
        call: C,
    ) -> Result<proto::WriteResponse>
    where
        B: Fn(&Routing) -> Req,
        C: Fn(KvClient<Channel>, tonic::Request<Req>) -> Fut,
        Fut: Future<
            Output = std::result::Result<tonic::Response<proto::WriteResponse>, tonic::Status>,
        >,
    {
        self.request(
            |r| Target::Master(r.bucket_of(key)),
            Repeat::UntilAmbiguous,
            build,
            call,
        )
        .await
        .map_err(|s| match s {
            Stop::Refused(code, detail) => Error::Rejected { code, detail },
            Stop::Failed {
                ambiguous: true,
                why,
            } => Error::Unknown {
                txn: None,
                detail: why,
            },
            Stop::Failed {
                ambiguous: false,
                why,
            } => Error::Unavailable(why),
        })
    }
}

/// The error of an operation without effects (reads, views, `Begin`).
fn safe_error(stop: Stop, what: &str) -> Error {
    match stop {
        Stop::Refused(code, detail) => Error::Rejected { code, detail },
        Stop::Failed { why, .. } => Error::Unavailable(format!("{what}: {why}")),
    }
}

/// One `GetView` at `addr`.
async fn fetch_view(channels: &Channels, addr: &str) -> std::result::Result<Routing, Failure> {
    let view = channels
        .send(addr, proto::GetViewRequest {}, |mut c, r| async move {
            c.get_view(r).await
        })
        .await?;
    Routing::new(view).map_err(|e| Failure::not_sent(format!("{addr}: {e}")))
}
