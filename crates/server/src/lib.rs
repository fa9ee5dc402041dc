//! The synod server: one process hosting any number of replication groups ([`host`]), with a
//! peer transport ([`transport`]), one write-ahead log (`synod-log`), background snapshots,
//! Prometheus metrics, an admin HTTP endpoint ([`admin`]) and the ZooKeeper client port
//! ([`front`]), which serves group 0.
//!
//! | module | job |
//! |---|---|
//! | [`config`] | the configuration file and its checks |
//! | [`protocol`] | the protocols by name (Zab family, PFT Multi-Paxos), their options, zxids |
//! | [`identity`] | which cluster, node and protocols a data directory belongs to |
//! | [`build`] | the groups of this node, each with its protocol, restored from the log |
//! | [`host`] | the loop that runs every group, the WAL thread |
//! | [`transport`] | peer connections and frames |
//! | [`machine`] | the ZooKeeper tree as a group's machine (the register machine is the host's) |
//! | [`front`] | the ZooKeeper client port |
//! | [`admin`], [`metrics`] | the admin port and its metrics |

pub mod admin;
mod admin_backup;
mod admin_members;
pub mod build;
pub mod config;
pub mod etcd;
pub mod front;
pub mod host;
pub mod identity;
pub mod kv;
pub mod machine;
pub mod metrics;
pub mod protocol;
pub mod tls;
pub mod transport;
pub mod version;

use anyhow::{Context, Result};
use config::Config;
use host::{Driver, GroupHandle, HostInput, HostParts, Status};
use metrics::Metrics;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use synod_log::{FsyncPolicy, Wal, WalOptions};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};
use transport::{TransportConfig, TransportStats};

pub use identity::{check_identity, record_identity, Identity, IDENTITY_FILE};

/// Run a node until SIGTERM or SIGINT.
pub async fn run(mut cfg: Config) -> Result<()> {
    stop_on_panic();
    // SIGHUP reloads certificates; caught from the start, so that a reload sent while the log
    // replays (or to a node without TLS: `systemctl reload`) never kills the node.
    let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("cannot listen for SIGHUP")?;
    return_large_buffers();
    let fd_limit = raise_fd_limit();
    fit_connections(&mut cfg, fd_limit);
    let dir = cfg.data_dir.clone();
    let identity = check_identity(&dir, &cfg)?;
    let members = cfg.members()?;
    let wal_dir = dir.join("wal");
    let wal_opts = WalOptions {
        dir: wal_dir.clone(),
        segment_bytes: cfg.limits.segment_bytes,
        preallocate_bytes: cfg.limits.wal_preallocate_bytes,
        fsync: if cfg.fsync == "always" {
            FsyncPolicy::Always
        } else {
            FsyncPolicy::Never
        },
    };
    let (wal, recovery) = Wal::open(wal_opts)
        .with_context(|| format!("cannot open the write-ahead log in {}", wal_dir.display()))?;
    for w in &recovery.warnings {
        warn!("log recovery: {w}");
    }
    info!(records = recovery.records, "replayed the write-ahead log");
    let stats = Arc::new(TransportStats::default());
    let metrics = Arc::new(Metrics::new(stats.clone()));
    metrics.log_bytes.set(wal.log_bytes() as i64);
    metrics.log_segments.set(wal.segments() as i64);
    let built = build::build(&cfg, &wal_dir, recovery)?;
    if let Some(id) = identity {
        record_identity(&dir, &id)?;
    }
    let status = Arc::new(Mutex::new(Status::default()));
    let (tx, rx) = mpsc::channel(65_536);
    let cut = Arc::new(transport::Cut::default());
    let tls = match &cfg.tls {
        Some(t) => Some(tls::Tls::load(t, &cfg.cluster_id, cfg.node_id)?),
        None => {
            warn!("insecure = true: peers talk in plain text and accept any process that names the cluster");
            None
        }
    };
    let tcfg = TransportConfig {
        cut: cut.clone(),
        cluster_id: cfg.cluster_id.clone(),
        me: cfg.node_id,
        members: members.clone(),
        groups: built.protocols.clone(),
        chunk_bytes: cfg.limits.chunk_bytes as usize,
        max_message_bytes: cfg.limits.max_message_bytes as usize,
        peer_queue: cfg.limits.peer_queue,
        max_handshakes: cfg.limits.max_peer_handshakes,
        link: cfg.link_emulation.emulations(cfg.node_id),
        tls: tls.clone(),
    };
    let peer_addr = cfg.peer_listen_addr();
    let listener = TcpListener::bind(peer_addr)
        .await
        .with_context(|| format!("cannot listen for peers on {peer_addr}"))?;
    let admin_listener = TcpListener::bind(cfg.admin_addr)
        .await
        .with_context(|| format!("cannot listen for admin HTTP on {}", cfg.admin_addr))?;
    let client_listener = match cfg.client_addr {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .with_context(|| format!("cannot listen for ZooKeeper clients on {a}"))?,
        ),
        None => None,
    };
    let secure_client_listener = match cfg.secure_client_addr {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .with_context(|| format!("cannot listen for ZooKeeper TLS clients on {a}"))?,
        ),
        None => None,
    };
    let peers = transport::start_outbound::<HostInput>(&tcfg, tx.clone(), stats.clone());
    let inbound = tokio::spawn(transport::serve_inbound::<HostInput>(
        tcfg,
        listener,
        tx.clone(),
        stats,
    ));
    let zk = GroupHandle::new(0, cfg.node_id, tx.clone(), built.zookeeper.view.clone());
    let registers = built
        .registers
        .iter()
        .map(|(&id, s)| {
            (
                id,
                admin::RegisterGroup {
                    handle: GroupHandle::new(id, cfg.node_id, tx.clone(), s.view.clone()),
                    machine: s.machine.clone(),
                },
            )
        })
        .collect();
    let admin_state = Arc::new(admin::AdminState {
        status: status.clone(),
        metrics: metrics.clone(),
        machine: built.zookeeper.machine.clone(),
        zookeeper: zk.clone(),
        registers,
        max_key_bytes: cfg.limits.max_key_bytes,
        max_value_bytes: cfg.limits.max_value_bytes,
        cut: cfg.fault_injection.then_some(cut),
    });
    let app = admin::router(admin_state);
    let kv_tls = cfg.tls.as_ref().is_some_and(|t| t.kv);
    let admin_tls = tls
        .clone()
        .filter(|_| cfg.tls.as_ref().is_some_and(|t| t.admin));
    let kv = match cfg.kv.listen.filter(|_| cfg.kv.enabled()) {
        Some(addr) => {
            let listener = TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen for KV clients on {addr}"))?;
            let local = built
                .kv
                .iter()
                .map(|(&b, s)| {
                    let group = cfg.kv.group_base + b;
                    let handle = GroupHandle::new(group, cfg.node_id, tx.clone(), s.view.clone());
                    (
                        b,
                        kv::LocalBucket {
                            handle,
                            machine: s.machine.clone(),
                        },
                    )
                })
                .collect();
            let nodes = members.keys().copied().collect();
            let service = kv::KvService::new(cfg.node_id, &cfg.kv, &nodes, local);
            let service = synod_kv_client::proto::kv_server::KvServer::new(service)
                .max_decoding_message_size(2 * synod_kv::txn::MAX_TXN_BYTES);
            let builder = tonic::transport::Server::builder().add_service(service);
            let server: futures_boxed::BoxFuture = match tls.clone().filter(|_| kv_tls) {
                Some(t) => Box::pin(builder.serve_with_incoming(tls::grpc_incoming(listener, t))),
                None => Box::pin(builder.serve_with_incoming(plain_incoming(listener))),
            };
            Some(tokio::spawn(async move {
                if let Err(e) = server.await {
                    tracing::error!("the KV listener stopped: {e}");
                }
            }))
        }
        None => None,
    };
    // Every replica of the etcd store runs a lessor (the one that leads revokes expired
    // leases), whether or not it serves etcd clients.
    let etcd_node = built.etcd.as_ref().map(|served| {
        let handle = GroupHandle::new(cfg.etcd.group, cfg.node_id, tx.clone(), served.view.clone());
        let scheme = if tls.is_some() { "https" } else { "http" };
        let peer_urls = members
            .iter()
            .map(|(id, a)| (*id, format!("{scheme}://{a}")))
            .collect();
        let node = etcd::EtcdNode::new(
            cfg.node_id,
            &cfg.cluster_id,
            handle,
            served.machine.clone(),
            cfg.etcd.clone(),
            peer_urls,
        );
        tokio::spawn(etcd::lessor::run(node.clone()));
        node
    });
    let etcd = match (etcd_node, cfg.etcd.listen) {
        (Some(node), Some(addr)) => {
            let listener = TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen for etcd clients on {addr}"))?;
            let builder = etcd::router(node);
            let server: futures_boxed::BoxFuture = match tls.clone().filter(|_| kv_tls) {
                Some(t) => Box::pin(builder.serve_with_incoming(tls::grpc_incoming(listener, t))),
                None => Box::pin(builder.serve_with_incoming(plain_incoming(listener))),
            };
            Some(tokio::spawn(async move {
                if let Err(e) = server.await {
                    tracing::error!("the etcd listener stopped: {e}");
                }
            }))
        }
        _ => None,
    };
    let front = match (client_listener, cfg.client_addr) {
        (Some(l), Some(addr)) => {
            // /zookeeper/config with the Stat ZooKeeper gives it, but no `server.N=` lines:
            // ZooKeeper's format names two different peer ports per server and synod has one.
            // Curator's EnsembleTracker parses the lines with ZooKeeper's QuorumPeerConfig and
            // gives up with a ConfigException on equal ports (seen in CI); it ignores empty data.
            let loaded_ms = now_ms();
            built
                .zookeeper
                .machine
                .lock()
                .expect("machine")
                .set_config(bytes::Bytes::new(), loaded_ms);
            let f = front::Front::new(
                front::FrontConfig {
                    node_id: cfg.node_id,
                    client_addr: addr,
                    tuning: cfg.zookeeper.clone(),
                    bug_stale_sync: cfg.debug_bug == "stale-sync",
                    peers: members
                        .iter()
                        .map(|(id, a)| format!("server.{id}={a}"))
                        .collect(),
                },
                built.zookeeper.machine.clone(),
                zk,
            );
            let source: Arc<dyn metrics::ZkSource> = f.clone();
            metrics.zookeeper(Arc::downgrade(&source));
            if let (Some(sl), Some(t)) = (secure_client_listener, tls.clone()) {
                tokio::spawn(f.clone().serve_tls(sl, t));
            }
            Some(tokio::spawn(f.serve(l)))
        }
        _ => None,
    };
    let admin_limits = admin::AdminLimits {
        max_connections: cfg.limits.max_admin_connections,
        idle_timeout: Duration::from_millis(cfg.limits.admin_idle_timeout_ms),
        request_timeout: Duration::from_millis(
            cfg.limits.admin_idle_timeout_ms + cfg.limits.request_timeout_ms,
        ),
    };
    let admin = tokio::spawn(admin::serve(admin_listener, app, admin_limits, admin_tls));
    if let Some(t) = &tls {
        metrics.tls_certificate_expiry.set(t.not_after_unix());
    }
    tokio::spawn(reload_on_sighup(hangups, tls.clone(), metrics.clone()));
    info!(
        node = cfg.node_id,
        cluster = %cfg.cluster_id,
        peer = %peer_addr,
        client = ?cfg.client_addr,
        admin = %cfg.admin_addr,
        kv = ?cfg.kv.listen.filter(|_| cfg.kv.enabled()),
        etcd = ?cfg.etcd.listen.filter(|_| cfg.etcd.enabled),
        groups = built.protocols.len(),
        fd_limit,
        max_connections = cfg.zookeeper.max_connections,
        version = crate::version::DESCRIBE,
        "synod node started"
    );
    let host = Driver::new(
        HostParts {
            me: cfg.node_id,
            cluster_id: cfg.cluster_id.clone(),
            peers,
            wal,
            wal_dir,
            rx,
            tx: tx.clone(),
            metrics,
            status,
            host: synod_host::HostConfig {
                routes: built.routes,
                limits: cfg.batch.limits(),
                max_pending: cfg.limits.max_pending_requests,
                request_timeout_us: cfg.limits.request_timeout_ms * 1_000,
                resend_every_us: 1_000_000,
                id_base: command_id_base(cfg.node_id),
                ..synod_host::HostConfig::new(cfg.node_id)
            },
            views: built.views,
        },
        built.runners,
    );
    let host = tokio::spawn(host.run());

    wait_for_signal().await;
    info!("signal received: stop accepting, flush the log, close peers");
    admin.abort();
    inbound.abort();
    if let Some(f) = front {
        f.abort();
    }
    if let Some(k) = kv {
        k.abort();
    }
    if let Some(e) = etcd {
        e.abort();
    }
    let (done, flushed) = oneshot::channel();
    if tx.send(HostInput::Shutdown(done)).await.is_ok() {
        let _ = tokio::time::timeout(Duration::from_secs(10), flushed).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), host).await;
    info!("stopped");
    Ok(())
}

/// Plain-text gRPC connections, with Nagle's algorithm off (a reply held back for the client's
/// delayed acknowledgement costs 40 ms).
fn plain_incoming(
    listener: TcpListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use tokio_stream::StreamExt;
    tokio_stream::wrappers::TcpListenerStream::new(listener).map(|s| {
        if let Ok(s) = &s {
            let _ = s.set_nodelay(true);
        }
        s
    })
}

/// Command ids: node id in the top byte, 24 random bits per process start, a 32-bit counter.
fn command_id_base(me: synod_core::NodeId) -> u64 {
    let boot: u64 = rand::random::<u64>() & 0xFF_FFFF;
    ((me as u64 & 0xFF) << 56) | (boot << 32)
}

/// A panic anywhere stops the node. A panic is a broken invariant (a core's assertion, the
/// driver's checks of the contract) or a bug; a node that went on after one, with the task that
/// ran its groups gone, would answer with a stale status and never recover. Stopped, it is
/// restarted by its supervisor and recovers from its log and its peers.
fn stop_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        tracing::error!("panicked: {info}; stopping this node");
        std::process::exit(101);
    }));
}

/// Make glibc map buffers of 256 KiB and more on their own and unmap them when freed. Left to
/// itself, glibc raises this threshold after the first such free and then keeps large
/// buffers in its heap, so memory a burst of large requests or replies (or an attacker's
/// stalled megabyte requests) made the server hold would never return to the system.
fn return_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator tuning; it is called before the server starts
    // its tasks and is safe to call at any time in any case.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
    }
}

/// File descriptors kept for the log, snapshots, peers and the admin port when the client
/// port's `max_connections` is fitted to the descriptor limit.
const FD_RESERVE: u64 = 512;

/// Raise this process's soft RLIMIT_NOFILE to its hard limit (many systems start processes
/// with a soft limit of 1024, far below `zookeeper.max_connections`). Returns the soft limit
/// now in force (u64::MAX when unknown).
pub fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return u64::MAX;
    };
    if soft >= hard {
        return soft;
    }
    // An unlimited hard limit is not a valid soft limit everywhere; 1 Mi descriptors is plenty.
    let want = hard.min(1 << 20).max(soft);
    match setrlimit(Resource::RLIMIT_NOFILE, want, hard) {
        Ok(()) => want,
        Err(e) => {
            warn!("cannot raise the open-file limit from {soft} to {want}: {e}");
            soft
        }
    }
}

/// Fit the client port's connection limit to the file-descriptor limit, so that clients
/// cannot take the descriptors the log and the peers need.
fn fit_connections(cfg: &mut Config, fd_limit: u64) {
    let room = fd_limit
        .saturating_sub(FD_RESERVE + cfg.limits.max_peer_handshakes as u64)
        .saturating_sub(cfg.limits.max_admin_connections as u64)
        .max(16);
    if cfg.zookeeper.max_connections as u64 > room {
        warn!(
            "config key zookeeper.max_connections: {} does not fit the open-file limit of {fd_limit} \
             (with limits.max_admin_connections and max_peer_handshakes); using {room}",
            cfg.zookeeper.max_connections
        );
        cfg.zookeeper.max_connections = room as usize;
    }
}

/// Read exactly `len` bytes, growing the buffer as they arrive (at most doubling what has
/// arrived), so that a length that claims more than the peer sends costs only what it sent.
pub(crate) async fn read_body<R: tokio::io::AsyncRead + Unpin>(
    r: &mut R,
    len: usize,
) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut body: Vec<u8> = Vec::new();
    while body.len() < len {
        let want = (len - body.len()).min(body.len().max(64 << 10));
        body.reserve_exact(want);
        let n = (&mut *r).take(want as u64).read_buf(&mut body).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(body)
}

pub(crate) use synod_zk::ratelimit::RateLimitedWarn;

/// Wall-clock milliseconds since the Unix epoch (ZooKeeper's ctime/mtime).
pub use synod_zk::ratelimit::now_ms;

/// The futures the listeners run, boxed so that plain and TLS listeners have one type.
mod futures_boxed {
    pub type BoxFuture = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<(), tonic::transport::Error>> + Send>,
    >;
}

/// Reload the certificates on SIGHUP (crate::tls): connections opened afterwards use them.
async fn reload_on_sighup(
    mut hup: tokio::signal::unix::Signal,
    tls: Option<Arc<tls::Tls>>,
    metrics: Arc<Metrics>,
) {
    while hup.recv().await.is_some() {
        let Some(tls) = &tls else {
            info!("SIGHUP: no [tls] section, nothing to reload");
            continue;
        };
        match tls.reload() {
            Ok(()) => {
                metrics.tls_certificate_expiry.set(tls.not_after_unix());
                info!(
                    serial = %tls.serial(),
                    not_after_unix = tls.not_after_unix(),
                    "SIGHUP: reloaded the TLS certificates"
                )
            }
            Err(e) => {
                warn!("SIGHUP: cannot reload the TLS certificates, keeping those in use: {e:#}")
            }
        }
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Hostile-input tests: random and mutated bytes into the decoders of the network ports,
/// with a probe of the largest single allocation they make.
#[cfg(test)]
pub(crate) mod fuzz {
    pub(crate) use synod_testkit::{bounded, config, mutate, mutation};

    #[global_allocator]
    static PROBE: synod_testkit::Probe = synod_testkit::Probe;

    /// Run a future to completion on a fresh single-threaded runtime.
    pub(crate) fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn read_body_grows_with_what_arrives() {
        // 10 bytes arrive of a claimed megabyte: an error, and no megabyte allocated.
        let data = [7u8; 10];
        let r = bounded(data.len(), || {
            block_on(crate::read_body(&mut &data[..], 1 << 20))
        });
        assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
        let data = vec![5u8; 300_000];
        let body = block_on(crate::read_body(&mut &data[..], 300_000)).unwrap();
        assert_eq!(body, data);
        assert!(body.capacity() <= 300_000, "{}", body.capacity());
    }

    #[test]
    fn max_connections_fits_the_descriptor_limit() {
        let load = || {
            let set = [
                "cluster_id=\"c\"",
                "node_id=1",
                "peers.1=\"127.0.0.1:1\"",
                "admin_addr=\"127.0.0.1:2\"",
                "data_dir=\"/tmp/unused\"",
                "insecure=true",
            ];
            crate::Config::load(None, &set.map(String::from)).unwrap()
        };
        let mut cfg = load();
        crate::fit_connections(&mut cfg, 1 << 20);
        assert_eq!(cfg.zookeeper.max_connections, 10_000, "fits: unchanged");
        let mut cfg = load();
        crate::fit_connections(&mut cfg, 1024);
        // 1024 − 512 reserved − 64 peer handshakes − 256 admin connections.
        assert_eq!(cfg.zookeeper.max_connections, 192);
        assert!(super::raise_fd_limit() >= 64);
    }

    #[test]
    #[should_panic(expected = "an allocation of")]
    fn the_probe_sees_a_claimed_length_allocation() {
        bounded(10, || vec![0u8; 1 << 24]);
    }
}
