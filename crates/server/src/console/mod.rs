//! The web console (docs/console.md): plain HTML, CSS and JavaScript compiled into the binary
//! and served on the admin port at `/console/` (`/` redirects there). Nothing is fetched from
//! elsewhere: the page reads this node's `/v1/status` and `/metrics` every second, and the
//! ZooKeeper tree of group 0 through two read-only JSON endpoints:
//!
//! * `GET /v1/zk/children?path=/a&after=x&limit=N`: the names of a znode's children, sorted,
//!   after `after`, at most `limit` (default [`zk::CHILDREN_DEFAULT`], at most
//!   [`zk::CHILDREN_MAX`]), with their total count;
//! * `GET /v1/zk/node?path=/a&bytes=N`: a znode's Stat, kind and ACL, and the first `bytes` of
//!   its data (default [`zk::DATA_DEFAULT`], at most [`zk::DATA_MAX`]).
//!
//! Both read this replica's state, as `GET /v1/kv/<key>` does. A caller without the admin client
//! certificate reads the tree as an anonymous ZooKeeper client would: children and data only of
//! znodes whose ACL gives `world:anyone` READ, and digest ids without their hash. Over HTTPS,
//! these paths and the pages are open to anyone (the admin port's other endpoints need the
//! certificate); the console offers writes (through `PUT`/`DELETE /v1/kv/<key>`, which need the
//! certificate) only to a caller who presented it. Without TLS, nobody presents one, so the
//! console is read-only (the admin port's API itself is then open to anyone who reaches it).

mod zk;

use super::AdminState;
use axum::extract::Extension;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use std::sync::Arc;

const INDEX_HTML: &str = include_str!("index.html");
const CONSOLE_JS: &str = include_str!("console.js");
const CONSOLE_CSS: &str = include_str!("console.css");

/// Who is asking, as the admin port's TLS layer saw the connection: inserted into every request
/// served over HTTPS; absent over plain HTTP.
#[derive(Clone, Copy, Debug, Default)]
pub struct Caller {
    /// The admin port runs HTTPS.
    pub tls: bool,
    /// The connection presented a client certificate of the cluster CA whose subject is one of
    /// `[tls] admin_subjects`.
    pub admin: bool,
}

/// The console's paths that anyone may read over HTTPS (the pages, the session, the tree as an
/// anonymous ZooKeeper client sees it).
pub fn open(path: &str) -> bool {
    matches!(
        path,
        "/" | "/console"
            | "/console/"
            | "/console/console.js"
            | "/console/console.css"
            | "/v1/console/session"
            | "/v1/zk/children"
            | "/v1/zk/node"
    )
}

pub(crate) fn routes() -> Router<Arc<AdminState>> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/console/") }))
        .route("/console", get(|| async { Redirect::to("/console/") }))
        .route(
            "/console/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/console/console.js",
            get(|| async { asset("text/javascript; charset=utf-8", CONSOLE_JS) }),
        )
        .route(
            "/console/console.css",
            get(|| async { asset("text/css; charset=utf-8", CONSOLE_CSS) }),
        )
        .route("/v1/console/session", get(session))
        .route("/v1/zk/children", get(zk::children))
        .route("/v1/zk/node", get(zk::node))
}

/// A page or script of the console, with headers that keep the browser from running anything
/// but the console's own script (no inline script, nothing from other origins) and from
/// framing it.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            ("content-type", content_type),
            ("cache-control", "no-cache"),
            ("x-content-type-options", "nosniff"),
            ("referrer-policy", "no-referrer"),
            ("x-frame-options", "DENY"),
            (
                "content-security-policy",
                "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                 img-src 'self' data:; base-uri 'none'; form-action 'none'; \
                 frame-ancestors 'none'",
            ),
        ],
        body,
    )
        .into_response()
}

/// The caller of a request (no TLS, not admin when the TLS layer left nothing).
pub(crate) fn caller(c: Option<Extension<Caller>>) -> Caller {
    c.map(|Extension(c)| c).unwrap_or_default()
}

/// `GET /v1/console/session`: what the console may offer this caller, and its limits.
async fn session(c: Option<Extension<Caller>>) -> Response {
    let c = caller(c);
    super::json(
        StatusCode::OK,
        &serde_json::json!({
            "tls": c.tls,
            "admin": c.admin,
            "writes": c.admin,
            "limits": {
                "children_default": zk::CHILDREN_DEFAULT,
                "children_max": zk::CHILDREN_MAX,
                "data_default": zk::DATA_DEFAULT,
                "data_max": zk::DATA_MAX,
            },
        }),
    )
}

#[cfg(test)]
mod tests;
