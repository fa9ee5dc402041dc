//! Admin HTTP: `/metrics` (Prometheus text), `/health`, `/v1/status` (JSON), and a small
//! key-value API on the ZooKeeper tree (`/v1/kv/<key>` is znode `/<key>`: GET reads this
//! replica's state, PUT creates or sets it, DELETE removes it; writes are replicated) used by
//! operators and the integration tests.

use crate::driver::{DriverInput, Status, SubmitError};
use crate::metrics::Metrics;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use synod_zk::machine::{Reply, Txn, ZkMachine};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tracing::{debug, warn};

pub struct AdminState<M> {
    pub status: Arc<Mutex<Status>>,
    pub metrics: Arc<Metrics>,
    pub machine: Arc<Mutex<ZkMachine>>,
    pub driver: mpsc::Sender<DriverInput<M>>,
    pub max_key_bytes: usize,
    pub max_value_bytes: usize,
    /// The partition hook, when fault injection is enabled.
    pub cut: Option<Arc<crate::transport::Cut>>,
}

pub fn router<M: Send + 'static>(state: Arc<AdminState<M>>) -> Router {
    let limit = state.max_value_bytes + 1;
    Router::new()
        .route("/metrics", get(metrics::<M>))
        .route("/health", get(health::<M>))
        .route("/v1/status", get(status::<M>))
        .route("/v1/fault/cut", get(cut_get::<M>).post(cut_set::<M>))
        .route(
            "/v1/kv/*key",
            get(kv_get::<M>).put(kv_put::<M>).delete(kv_delete::<M>),
        )
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
pub async fn serve(listener: TcpListener, app: Router, limits: AdminLimits) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;
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
        let svc = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let _ = stream.set_nodelay(true);
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.idle_timeout)
                .serve_connection(TokioIo::new(stream), svc);
            if let Err(e) = conn.await {
                debug!(%addr, "admin connection closed: {e}");
            }
        });
    }
}

/// `POST /v1/fault/cut?peers=2,3` cuts this replica off from peers 2 and 3 (both directions
/// of their connections); `peers=` heals. 403 unless `fault_injection` is on.
async fn cut_set<M>(
    State(s): State<Arc<AdminState<M>>>,
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
    (StatusCode::OK, format!("cut: {:?}\n", cut.get())).into_response()
}

async fn cut_get<M>(State(s): State<Arc<AdminState<M>>>) -> Response {
    match &s.cut {
        Some(c) => (StatusCode::OK, format!("cut: {:?}\n", c.get())).into_response(),
        None => (StatusCode::FORBIDDEN, "fault injection is off\n").into_response(),
    }
}

async fn metrics<M>(State(s): State<Arc<AdminState<M>>>) -> Response {
    (
        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
        s.metrics.render(),
    )
        .into_response()
}

/// 200 only when the replica serves with an established leader.
async fn health<M>(State(s): State<Arc<AdminState<M>>>) -> Response {
    let st = s.status.lock().expect("status").clone();
    if st.leader.is_some() && (st.role == "leading" || st.role == "following") {
        (
            StatusCode::OK,
            format!("ok: {} of leader {:?}\n", st.role, st.leader),
        )
            .into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no leader ({})\n", st.role),
        )
            .into_response()
    }
}

async fn status<M>(State(s): State<Arc<AdminState<M>>>) -> Response {
    let st = s.status.lock().expect("status").clone();
    (
        [("content-type", "application/json")],
        serde_json::to_string(&st).expect("status serialises"),
    )
        .into_response()
}

fn znode(key: &str) -> Option<String> {
    let p = format!("/{key}");
    synod_zk::path::validate(&p, false).ok().map(|_| p)
}

async fn kv_get<M>(State(s): State<Arc<AdminState<M>>>, Path(key): Path<String>) -> Response {
    let Some(p) = znode(&key) else {
        return (StatusCode::BAD_REQUEST, "invalid key\n").into_response();
    };
    match s.machine.lock().expect("machine").tree.get(&p) {
        Some(n) => (StatusCode::OK, n.data.clone()).into_response(),
        None => (StatusCode::NOT_FOUND, "no such key\n").into_response(),
    }
}

async fn kv_put<M: Send + 'static>(
    State(s): State<Arc<AdminState<M>>>,
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

async fn kv_delete<M: Send + 'static>(
    State(s): State<Arc<AdminState<M>>>,
    Path(key): Path<String>,
) -> Response {
    replicate(&s, key, |path| Txn::Remove { path }).await
}

async fn replicate<M: Send + 'static>(
    s: &AdminState<M>,
    key: String,
    op: impl FnOnce(String) -> Txn,
) -> Response {
    let path = match znode(&key) {
        Some(p) if key.len() <= s.max_key_bytes => p,
        _ => return (StatusCode::BAD_REQUEST, "invalid key\n").into_response(),
    };
    let payload = op(path).encode();
    let (reply, rx) = oneshot::channel();
    if s.driver
        .send(DriverInput::Submit { payload, reply })
        .await
        .is_err()
    {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    match rx.await {
        Ok(Ok(applied)) => {
            let reply = Reply::decode(&applied.result);
            let code = if reply.err == 0 {
                StatusCode::OK
            } else {
                StatusCode::CONFLICT
            };
            (
                code,
                [("content-type", "application/json")],
                format!(
                    "{{\"slot\":{},\"zxid\":{},\"err\":{}}}\n",
                    applied.at.slot, applied.at.tag, reply.err
                ),
            )
                .into_response()
        }
        Ok(Err(SubmitError::NoLeader)) => {
            (StatusCode::SERVICE_UNAVAILABLE, "no leader; retry\n").into_response()
        }
        Ok(Err(SubmitError::Busy)) => {
            (StatusCode::TOO_MANY_REQUESTS, "busy; retry later\n").into_response()
        }
        Ok(Err(SubmitError::Timeout)) => (
            StatusCode::GATEWAY_TIMEOUT,
            "not delivered in time; the write may still take effect\n",
        )
            .into_response(),
        Ok(Err(SubmitError::ShuttingDown)) | Err(_) => {
            (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response()
        }
    }
}
