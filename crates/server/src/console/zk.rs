//! The console's read-only view of group 0's ZooKeeper tree: `GET /v1/zk/children` and
//! `GET /v1/zk/node` (see the module above).

use super::{caller, Caller};
use crate::admin::{json, AdminState};
use axum::extract::{Extension, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use synod_zk::jute::{perms, Acl};
use synod_zk::tree::{allowed, Kind, Node};

/// Children listed when the request does not say.
pub const CHILDREN_DEFAULT: usize = 200;
/// Children listed at most in one answer (page on with `after`).
pub const CHILDREN_MAX: usize = 1000;
/// Bytes of data shown when the request does not say.
pub const DATA_DEFAULT: usize = 4096;
/// Bytes of data shown at most.
pub const DATA_MAX: usize = 65536;

type Params = Query<HashMap<String, String>>;

fn refuse(code: StatusCode, msg: &str) -> Response {
    json(code, &json!({ "error": msg }))
}

/// The `path` parameter, a valid znode path, or why not.
fn path_of(q: &HashMap<String, String>) -> Result<String, String> {
    let p = q.get("path").map(String::as_str).unwrap_or("/");
    match synod_zk::path::validate(p, false) {
        Ok(_) => Ok(p.to_string()),
        Err(_) => Err("invalid znode path".to_string()),
    }
}

/// A numeric parameter, `default` when absent, at most `max`.
fn bounded(
    q: &HashMap<String, String>,
    key: &str,
    default: usize,
    max: usize,
) -> Result<usize, String> {
    match q.get(key) {
        None => Ok(default),
        Some(v) => match v.parse::<usize>() {
            Ok(n) => Ok(n.min(max)),
            Err(_) => Err(format!("bad number for '{key}'")),
        },
    }
}

/// May this caller read `n`'s children and data? The admin may read everything (as the
/// key-value API does); anyone else as an anonymous ZooKeeper client (no authentication).
fn readable(c: Caller, n: &Node) -> bool {
    c.admin || allowed(&n.acl, perms::READ, &[])
}

/// `GET /v1/zk/children?path=/&after=&limit=`.
pub(crate) async fn children(
    State(s): State<Arc<AdminState>>,
    c: Option<Extension<Caller>>,
    Query(q): Params,
) -> Response {
    let c = caller(c);
    let (path, limit) = match (
        path_of(&q),
        bounded(&q, "limit", CHILDREN_DEFAULT, CHILDREN_MAX),
    ) {
        (Ok(p), Ok(l)) => (p, l),
        (Err(e), _) | (_, Err(e)) => return refuse(StatusCode::BAD_REQUEST, &e),
    };
    let after = q.get("after").cloned().unwrap_or_default();
    let machine = s.machine.lock().expect("machine");
    let Some(n) = machine.tree.get(&path) else {
        return refuse(StatusCode::NOT_FOUND, "no such znode");
    };
    if !readable(c, n) {
        return refuse(
            StatusCode::FORBIDDEN,
            "this znode's ACL does not let anonymous clients read it (the admin certificate reads everything)",
        );
    }
    let total = n.children.len();
    let names: Vec<String> = n
        .children
        .iter()
        .filter(|name| after.is_empty() || name.as_ref() > after.as_str())
        .take(limit + 1)
        .map(|name| name.to_string())
        .collect();
    drop(machine);
    let truncated = names.len() > limit;
    let names = &names[..names.len().min(limit)];
    json(
        StatusCode::OK,
        &json!({
            "path": path,
            "children": names,
            "total": total,
            "truncated": truncated,
        }),
    )
}

/// `GET /v1/zk/node?path=/a&bytes=`.
pub(crate) async fn node(
    State(s): State<Arc<AdminState>>,
    c: Option<Extension<Caller>>,
    Query(q): Params,
) -> Response {
    let c = caller(c);
    let (path, bytes) = match (path_of(&q), bounded(&q, "bytes", DATA_DEFAULT, DATA_MAX)) {
        (Ok(p), Ok(b)) => (p, b),
        (Err(e), _) | (_, Err(e)) => return refuse(StatusCode::BAD_REQUEST, &e),
    };
    let machine = s.machine.lock().expect("machine");
    let Some(n) = machine.tree.get(&path) else {
        return refuse(StatusCode::NOT_FOUND, "no such znode");
    };
    let readable = readable(c, n);
    let stat = n.stat();
    let kind = n.kind();
    let acl: Vec<Value> = n.acl.iter().map(|a| acl_json(a, c.admin)).collect();
    let data = n.data.clone();
    drop(machine);
    let (kind, ttl_ms) = match kind {
        Kind::Persistent => ("persistent", None),
        Kind::Ephemeral(_) => ("ephemeral", None),
        Kind::Container => ("container", None),
        Kind::Ttl(ms) => ("ttl", Some(ms)),
    };
    let data = match (&data, readable) {
        (_, false) => Value::Null,
        (None, true) => json!({ "null": true, "shown": 0, "length": 0 }),
        (Some(d), true) => data_json(d, bytes),
    };
    json(
        StatusCode::OK,
        &json!({
            "path": path,
            "kind": kind,
            "ttl_ms": ttl_ms,
            "readable": readable,
            "stat": {
                "czxid": zxid(stat.czxid),
                "mzxid": zxid(stat.mzxid),
                "pzxid": zxid(stat.pzxid),
                "ctime": stat.ctime,
                "mtime": stat.mtime,
                "version": stat.version,
                "cversion": stat.cversion,
                "aversion": stat.aversion,
                "ephemeral_owner": zxid(stat.ephemeral_owner),
                "data_length": stat.data_length,
                "num_children": stat.num_children,
            },
            "acl": acl,
            "data": data,
        }),
    )
}

/// A zxid or session id as zkCli prints it: `0x` and hexadecimal (JavaScript's numbers would
/// round 64-bit ones).
fn zxid(v: i64) -> String {
    format!("0x{v:x}")
}

/// An ACL entry, `perms` in zkCli's letters (`cdrwa`). A digest id's hash is shown only to
/// the admin.
fn acl_json(a: &Acl, admin: bool) -> Value {
    let letters: String = [
        (perms::CREATE, 'c'),
        (perms::DELETE, 'd'),
        (perms::READ, 'r'),
        (perms::WRITE, 'w'),
        (perms::ADMIN, 'a'),
    ]
    .iter()
    .filter(|(p, _)| a.perms & p != 0)
    .map(|&(_, l)| l)
    .collect();
    let id = match (a.id.scheme.as_str(), a.id.id.split_once(':')) {
        ("digest", Some((user, _))) if !admin => format!("{user}:(hidden)"),
        _ => a.id.id.clone(),
    };
    json!({ "scheme": a.id.scheme, "id": id, "perms": letters })
}

/// The first `max` bytes of `d`: as text when they are UTF-8 (a character cut at the end is
/// left out), else in hexadecimal.
fn data_json(d: &[u8], max: usize) -> Value {
    let shown = &d[..d.len().min(max)];
    let text = match std::str::from_utf8(shown) {
        Ok(t) => Some(t),
        // Only a character cut by the limit: the part before it is text.
        Err(e) if e.error_len().is_none() && shown.len() < d.len() => {
            std::str::from_utf8(&shown[..e.valid_up_to()]).ok()
        }
        Err(_) => None,
    };
    match text {
        Some(t) => json!({
            "null": false,
            "length": d.len(),
            "shown": t.len(),
            "text": t,
        }),
        None => json!({
            "null": false,
            "length": d.len(),
            "shown": shown.len(),
            "hex": shown.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        }),
    }
}

#[cfg(test)]
pub(super) mod unit {
    use super::*;

    #[test]
    fn data_is_text_when_utf8_and_cut_at_a_character() {
        let v = data_json("héllo".as_bytes(), 2);
        assert_eq!(v["text"], "h");
        assert_eq!(v["length"], 6);
        let v = data_json(&[0xff, 0, 1], 10);
        assert_eq!(v["hex"], "ff0001");
        assert_eq!(v["shown"], 3);
    }

    #[test]
    fn digest_hashes_are_hidden_from_anonymous_callers() {
        let a = Acl {
            perms: perms::READ | perms::WRITE,
            id: synod_zk::jute::Id {
                scheme: "digest".into(),
                id: "bob:SECRETHASH=".into(),
            },
        };
        assert_eq!(acl_json(&a, false)["id"], "bob:(hidden)");
        assert_eq!(acl_json(&a, true)["id"], "bob:SECRETHASH=");
        assert_eq!(acl_json(&a, false)["perms"], "rw");
    }
}
