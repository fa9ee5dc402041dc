//! Admin HTTP: `/metrics` (Prometheus text), `/health`, `/v1/status` (JSON, with every group),
//! a small key-value API on the ZooKeeper tree (`/v1/kv/<key>` is znode `/<key>`: GET reads this
//! replica's state, PUT creates or sets it, DELETE removes it; writes are replicated), and the
//! register groups' maps (`/v1/groups/<id>/kv/<key>`, and `POST /v1/groups/<id>/relay/<to>/<key>`
//! to put a key in group `<to>` through a message between groups), used by operators and the
//! integration tests; and the web console ([`console`], docs/console.md) at `/console/`.

// The console lives in src/console/ but is declared here, with the admin port it is part of.
#[path = "console/mod.rs"]
pub mod console;

use crate::host::{Applied, GroupHandle, Status, SubmitError};
use crate::machine::ZooKeeper;
use crate::metrics::Metrics;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use synod_core::wire::Wire;
use synod_host::register::{Register, RegisterCmd};
use synod_zk::machine::{Reply, Txn};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::{debug, warn};

/// A register group, as the admin port serves it.
pub struct RegisterGroup {
    pub handle: GroupHandle,
    pub machine: Arc<Mutex<Register>>,
}

pub struct AdminState {
    pub status: Arc<Mutex<Status>>,
    pub metrics: Arc<Metrics>,
    /// The ZooKeeper group's tree, and the group.
    pub machine: Arc<Mutex<ZooKeeper>>,
    pub zookeeper: GroupHandle,
    pub registers: BTreeMap<u32, RegisterGroup>,
    pub max_key_bytes: usize,
    pub max_value_bytes: usize,
    /// The partition hook, when fault injection is enabled.
    pub cut: Option<Arc<crate::transport::Cut>>,
}

pub fn router(state: Arc<AdminState>) -> Router {
    let limit = state.max_value_bytes + 1;
    Router::new()
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .route("/v1/status", get(status))
        .route("/v1/fault/cut", get(cut_get).post(cut_set))
        .route(
            "/v1/backup",
            axum::routing::post(crate::admin_backup::backup),
        )
        .route("/v1/members/:group", get(crate::admin_members::list))
        .route(
            "/v1/members/:group/:action/:node",
            axum::routing::post(crate::admin_members::change),
        )
        .route("/v1/kv/*key", get(kv_get).put(kv_put).delete(kv_delete))
        .route(
            "/v1/groups/:group/kv/:key",
            get(group_get).put(group_put).delete(group_delete),
        )
        .route(
            "/v1/groups/:group/relay/:to/:key",
            axum::routing::post(group_relay),
        )
        .merge(console::routes())
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// Limits of the admin HTTP port (`limits.max_admin_connections`, `admin_idle_timeout_ms`).
#[derive(Clone, Copy, Debug)]
pub struct AdminLimits {
    /// Open connections; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// A connection is closed when a request's headers take longer than this to arrive, or
    /// when it is idle this long between requests.
    pub idle_timeout: Duration,
    /// A request, its body included, must be answered within this time (else 408).
    pub request_timeout: Duration,
}

/// Serve `app` on `listener` within `limits`: anyone who can reach the port can open
/// connections, so their number, their idleness and their slowness are all bounded.
/// Serve the admin port: plain HTTP, or HTTPS with `tls`. Over HTTPS only `/health`,
/// `/metrics`, `/v1/status` and the console's read-only paths ([`console::open`]: its
/// pages, and the tree as an anonymous ZooKeeper client may read it) are open to anyone:
/// everything else (the key-value API, which reads and writes the tree without ACLs, backups,
/// fault injection) needs a client certificate from the cluster CA. Each request over HTTPS
/// carries a [`console::Caller`] saying whether its connection presented one.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: AdminLimits,
    tls: Option<Arc<crate::tls::Tls>>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let refused = crate::RateLimitedWarn::new();
    let deadline = limits.request_timeout;
    let app = app.layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| async move {
            match tokio::time::timeout(deadline, next.run(req)).await {
                Ok(r) => r,
                Err(_) => (
                    StatusCode::REQUEST_TIMEOUT,
                    "request not completed in time\n",
                )
                    .into_response(),
            }
        },
    ));
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                warn!("admin listener: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            drop(stream);
            if let Some(more) = refused.check() {
                warn!(
                    %addr,
                    "refusing an admin connection: {} are open (limits.max_admin_connections); {more} more refused since the last warning",
                    limits.max_connections
                );
            }
            continue;
        };
        let app = app.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let _ = stream.set_nodelay(true);
            let Some(tls) = tls else {
                return serve_http(stream, app, limits, addr).await;
            };
            let s = match tokio::time::timeout(
                limits.idle_timeout,
                tls.admin_acceptor().accept(stream),
            )
            .await
            {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return debug!(%addr, "admin TLS handshake failed: {e}"),
                Err(_) => return debug!(%addr, "admin TLS handshake timed out"),
            };
            // rustls fills peer_certificates only with a chain the CA verified.
            let subject = s
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(crate::tls::x509_subject);
            let certified = subject.is_some_and(|s| tls.admin_subject(&s));
            let app = app.layer(axum::middleware::from_fn(
                move |mut req: axum::extract::Request, next: axum::middleware::Next| async move {
                    let path = req.uri().path();
                    let open = matches!(path, "/health" | "/metrics" | "/v1/status")
                        || console::open(path);
                    req.extensions_mut().insert(console::Caller {
                        tls: true,
                        admin: certified,
                    });
                    if open || certified {
                        next.run(req).await
                    } else {
                        (
                            StatusCode::FORBIDDEN,
                            "this admin endpoint needs an admin client certificate from the \
                             cluster CA ([tls] admin_subjects; synod certs client --name root)\n",
                        )
                            .into_response()
                    }
                },
            ));
            serve_http(s, app, limits, addr).await
        });
    }
}

/// One HTTP/1.1 connection of the admin port.
async fn serve_http<S>(stream: S, app: Router, limits: AdminLimits, addr: std::net::SocketAddr)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout)
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    if let Err(e) = conn.await {
        debug!(%addr, "admin connection closed: {e}");
    }
}

/// `POST /v1/fault/cut?peers=2,3` cuts this replica off from peers 2 and 3 (both directions
/// of their connections); `peers=` heals. 403 unless `fault_injection` is on.
async fn cut_set(
    State(s): State<Arc<AdminState>>,
    axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Response {
    let Some(cut) = &s.cut else {
        return (
            StatusCode::FORBIDDEN,
            "fault injection is off (config key fault_injection)\n",
        )
            .into_response();
    };
    let list = q.get("peers").map(String::as_str).unwrap_or("");
    let mut peers = Vec::new();
    for p in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match p.parse() {
            Ok(id) => peers.push(id),
            Err(_) => {
                return (StatusCode::BAD_REQUEST, format!("bad peer id '{p}'\n")).into_response()
            }
        }
    }
    cut.set(peers);
    cut_json(cut)
}

/// `{"cut": [2, 3]}`: the peers this replica is cut off from.
fn cut_json(cut: &crate::transport::Cut) -> Response {
    json(StatusCode::OK, &serde_json::json!({ "cut": cut.get() }))
}

async fn cut_get(State(s): State<Arc<AdminState>>) -> Response {
    match &s.cut {
        Some(c) => cut_json(c),
        None => (StatusCode::FORBIDDEN, "fault injection is off\n").into_response(),
    }
}

/// A JSON answer, one line.
pub(crate) fn json(code: StatusCode, v: &serde_json::Value) -> Response {
    (
        code,
        [("content-type", "application/json")],
        format!("{v}\n"),
    )
        .into_response()
}

async fn metrics(State(s): State<Arc<AdminState>>) -> Response {
    (
        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
        s.metrics.render(),
    )
        .into_response()
}

/// 200 only when the ZooKeeper group serves here (an established leader, or every replica
/// proposing), 503 otherwise; the body says why, in JSON:
/// `{"status": "ok", "serving": true, "role": "following", "leader": 3, "epoch": 2}`, or
/// `{"status": "no leader", "serving": false, "role": "electing", "leader": null, …}`.
async fn health(State(s): State<Arc<AdminState>>) -> Response {
    let v = s.zookeeper.view();
    let serving = v.serving();
    let (code, status) = if serving {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "no leader")
    };
    json(
        code,
        &serde_json::json!({
            "status": status,
            "serving": serving,
            "role": v.role.name(),
            "leader": v.leader,
            "epoch": v.epoch,
        }),
    )
}

async fn status(State(s): State<Arc<AdminState>>) -> Response {
    let st = s.status.lock().expect("status").clone();
    let mut body = serde_json::to_value(&st).expect("status serialises");
    body["version"] = crate::version::VERSION.into();
    body["commit"] = crate::version::COMMIT.into();
    ([("content-type", "application/json")], body.to_string()).into_response()
}

fn znode(key: &str) -> Option<String> {
    let p = format!("/{key}");
    synod_zk::path::validate(&p, false).ok().map(|_| p)
}

async fn kv_get(State(s): State<Arc<AdminState>>, Path(key): Path<String>) -> Response {
    let Some(p) = znode(&key) else {
        return (StatusCode::BAD_REQUEST, "invalid key\n").into_response();
    };
    match s.machine.lock().expect("machine").tree.get(&p) {
        Some(n) => (StatusCode::OK, n.data.clone().unwrap_or_default()).into_response(),
        None => (StatusCode::NOT_FOUND, "no such key\n").into_response(),
    }
}

async fn kv_put(
    State(s): State<Arc<AdminState>>,
    Path(key): Path<String>,
    body: Bytes,
) -> Response {
    if body.len() > s.max_value_bytes {
        return (StatusCode::PAYLOAD_TOO_LARGE, "value too large\n").into_response();
    }
    let time_ms = crate::now_ms();
    replicate(&s, key, |path| Txn::Upsert {
        path,
        data: body.clone(),
        time_ms,
    })
    .await
}

async fn kv_delete(State(s): State<Arc<AdminState>>, Path(key): Path<String>) -> Response {
    replicate(&s, key, |path| Txn::Remove { path }).await
}

async fn replicate(s: &AdminState, key: String, op: impl FnOnce(String) -> Txn) -> Response {
    let path = match znode(&key) {
        Some(p) if key.len() <= s.max_key_bytes => p,
        _ => return (StatusCode::BAD_REQUEST, "invalid key\n").into_response(),
    };
    match s.zookeeper.submit(op(path).encode()).await {
        Ok(applied) => {
            let reply = Reply::decode(&applied.result);
            let code = if reply.err == 0 {
                StatusCode::OK
            } else {
                StatusCode::CONFLICT
            };
            let zxid = s
                .machine
                .lock()
                .expect("machine")
                .zxids()
                .zxid(applied.at.tag);
            (
                code,
                [("content-type", "application/json")],
                format!(
                    "{{\"slot\":{},\"zxid\":{zxid},\"err\":{}}}\n",
                    applied.at.slot, reply.err
                ),
            )
                .into_response()
        }
        Err(e) => submit_error(e),
    }
}

pub(crate) fn submit_error(e: SubmitError) -> Response {
    match e {
        SubmitError::NoLeader => {
            (StatusCode::SERVICE_UNAVAILABLE, "no leader; retry\n").into_response()
        }
        SubmitError::Busy => (StatusCode::TOO_MANY_REQUESTS, "busy; retry later\n").into_response(),
        SubmitError::Timeout => (
            StatusCode::GATEWAY_TIMEOUT,
            "not delivered in time; the write may still take effect\n",
        )
            .into_response(),
        SubmitError::NoSuchGroup => {
            (StatusCode::NOT_FOUND, "no such group on this node\n").into_response()
        }
        SubmitError::Config(r) => (StatusCode::CONFLICT, format!("{r}\n")).into_response(),
        SubmitError::ShuttingDown => {
            (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response()
        }
    }
}

fn applied_json(a: &Applied) -> Response {
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        format!(
            "{{\"slot\":{},\"tag\":{},\"result\":\"{}\"}}\n",
            a.at.slot,
            a.at.tag,
            String::from_utf8_lossy(&a.result).escape_default()
        ),
    )
        .into_response()
}

/// Why an admin request is refused: a status and a message.
type Refusal = (StatusCode, String);

/// The register group `id` of this node.
fn register(s: &AdminState, id: u32) -> Result<&RegisterGroup, Refusal> {
    s.registers.get(&id).ok_or_else(|| {
        (
            StatusCode::NOT_FOUND,
            format!("group {id} is not a register group of this node\n"),
        )
    })
}

fn register_key(s: &AdminState, key: &str) -> Result<(), Refusal> {
    if key.is_empty() || key.len() > s.max_key_bytes {
        return Err((StatusCode::BAD_REQUEST, "invalid key\n".to_string()));
    }
    Ok(())
}

async fn group_get(
    State(s): State<Arc<AdminState>>,
    Path((group, key)): Path<(u32, String)>,
) -> Response {
    let g = match register(&s, group) {
        Ok(g) => g,
        Err(r) => return r.into_response(),
    };
    let value = g.machine.lock().expect("register").get(&key);
    match value {
        Some(v) => (StatusCode::OK, v).into_response(),
        None => (StatusCode::NOT_FOUND, "no such key\n").into_response(),
    }
}

async fn group_write(s: &AdminState, group: u32, key: &str, cmd: RegisterCmd) -> Response {
    let g = match register(s, group).and_then(|g| register_key(s, key).map(|_| g)) {
        Ok(g) => g,
        Err(r) => return r.into_response(),
    };
    match g.handle.submit(cmd.to_bytes()).await {
        Ok(a) => applied_json(&a),
        Err(e) => submit_error(e),
    }
}

async fn group_put(
    State(s): State<Arc<AdminState>>,
    Path((group, key)): Path<(u32, String)>,
    body: Bytes,
) -> Response {
    if body.len() > s.max_value_bytes {
        return (StatusCode::PAYLOAD_TOO_LARGE, "value too large\n").into_response();
    }
    let cmd = RegisterCmd::Put {
        key: key.clone(),
        value: body,
    };
    group_write(&s, group, &key, cmd).await
}

async fn group_delete(
    State(s): State<Arc<AdminState>>,
    Path((group, key)): Path<(u32, String)>,
) -> Response {
    let cmd = RegisterCmd::Delete { key: key.clone() };
    group_write(&s, group, &key, cmd).await
}

/// Put `key = body` in group `to` by a message from group `group`: replicated in `group`
/// first, then delivered (and acknowledged) through the host.
async fn group_relay(
    State(s): State<Arc<AdminState>>,
    Path((group, to, key)): Path<(u32, u32, String)>,
    body: Bytes,
) -> Response {
    if body.len() > s.max_value_bytes {
        return (StatusCode::PAYLOAD_TOO_LARGE, "value too large\n").into_response();
    }
    let cmd = RegisterCmd::Relay {
        to,
        key: key.clone(),
        value: body,
    };
    group_write(&s, group, &key, cmd).await
}
