//! Admin HTTP: `/metrics` (Prometheus text), `/health`, `/v1/status` (JSON), and a small
//! key-value API (`/v1/kv/<key>`: GET reads this replica's state, PUT and DELETE are
//! replicated) used by operators and the integration tests.

use crate::driver::{DriverInput, Status, SubmitError};
use crate::machine::{KvMachine, KvOp};
use crate::metrics::Metrics;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::sync::{Arc, Mutex};
use synod_core::wire::Wire;
use tokio::sync::{mpsc, oneshot};

pub struct AdminState<M> {
    pub status: Arc<Mutex<Status>>,
    pub metrics: Arc<Metrics>,
    pub machine: Arc<Mutex<KvMachine>>,
    pub driver: mpsc::Sender<DriverInput<M>>,
    pub max_key_bytes: usize,
    pub max_value_bytes: usize,
}

pub fn router<M: Send + 'static>(state: Arc<AdminState<M>>) -> Router {
    let limit = state.max_value_bytes + 1;
    Router::new()
        .route("/metrics", get(metrics::<M>))
        .route("/health", get(health::<M>))
        .route("/v1/status", get(status::<M>))
        .route(
            "/v1/kv/*key",
            get(kv_get::<M>).put(kv_put::<M>).delete(kv_delete::<M>),
        )
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
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

async fn kv_get<M>(State(s): State<Arc<AdminState<M>>>, Path(key): Path<String>) -> Response {
    match s.machine.lock().expect("machine").get(key.as_bytes()) {
        Some(v) => (StatusCode::OK, v).into_response(),
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
    replicate(&s, key, |key| KvOp::Put {
        key,
        value: body.clone(),
    })
    .await
}

async fn kv_delete<M: Send + 'static>(
    State(s): State<Arc<AdminState<M>>>,
    Path(key): Path<String>,
) -> Response {
    replicate(&s, key, |key| KvOp::Delete { key }).await
}

async fn replicate<M: Send + 'static>(
    s: &AdminState<M>,
    key: String,
    op: impl FnOnce(bytes::Bytes) -> KvOp,
) -> Response {
    if key.is_empty() || key.len() > s.max_key_bytes {
        return (StatusCode::BAD_REQUEST, "key empty or too long\n").into_response();
    }
    let payload = op(bytes::Bytes::from(key.into_bytes())).to_bytes();
    let (reply, rx) = oneshot::channel();
    if s.driver
        .send(DriverInput::Submit { payload, reply })
        .await
        .is_err()
    {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    match rx.await {
        Ok(Ok(applied)) => (
            StatusCode::OK,
            [("content-type", "application/json")],
            format!(
                "{{\"slot\":{},\"tag\":{},\"result\":{:?}}}\n",
                applied.at.slot,
                applied.at.tag,
                String::from_utf8_lossy(&applied.result)
            ),
        )
            .into_response(),
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
