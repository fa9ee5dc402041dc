//! The admin port's `/health`, the console's pages and its tree endpoints, served for real
//! (plain HTTP on a loopback port) over an AdminState with a tree and no running group.

use crate::admin::{router, serve, AdminLimits, AdminState};
use crate::host::{GroupHandle, Status};
use crate::machine::{ZooKeeper, Zxids};
use crate::metrics::Metrics;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use synod_core::{Role, View};
use synod_zk::jute::{perms, Acl, Id};
use synod_zk::tree::{open_acl, CreateArgs};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

struct Port {
    addr: std::net::SocketAddr,
    view: watch::Sender<View>,
    machine: Arc<Mutex<ZooKeeper>>,
}

async fn start() -> Port {
    let (tx, _rx) = tokio::sync::mpsc::channel(1);
    let (view, view_rx) = watch::channel(View::default());
    let machine = Arc::new(Mutex::new(ZooKeeper::new(Zxids::default())));
    let state = Arc::new(AdminState {
        status: Arc::new(Mutex::new(Status::default())),
        metrics: Arc::new(Metrics::new(Default::default())),
        machine: machine.clone(),
        zookeeper: GroupHandle::new(0, 1, tx, view_rx),
        registers: BTreeMap::new(),
        max_key_bytes: 256,
        max_value_bytes: 1024,
        cut: Some(Arc::new(crate::transport::Cut::default())),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let limits = AdminLimits {
        max_connections: 8,
        idle_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(5),
    };
    tokio::spawn(serve(listener, router(state), limits, None));
    Port {
        addr,
        view,
        machine,
    }
}

/// One request; the status, the headers (lower-case names) and the body.
async fn http(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, String, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!("{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.expect("read");
    let out = String::from_utf8_lossy(&out).to_string();
    let (head, body) = out.split_once("\r\n\r\n").expect("a response");
    let code = head[9..12].parse().expect("status");
    (code, head.to_ascii_lowercase(), body.to_string())
}

async fn get_json(addr: std::net::SocketAddr, path: &str) -> (u16, serde_json::Value) {
    let (code, _, body) = http(addr, "GET", path).await;
    (code, serde_json::from_str(&body).expect("JSON"))
}

fn create(m: &Mutex<ZooKeeper>, path: &str, data: &str, acl: &[Acl]) {
    let mut m = m.lock().expect("machine");
    m.tree
        .create(
            CreateArgs {
                path,
                data: Some(bytes::Bytes::copy_from_slice(data.as_bytes())),
                acl,
                flags: 0,
                container: false,
                ttl: 0,
                session: 0,
                auth: &[],
                zxid: 0x1_0000_0005,
                time: 1,
            },
            &mut Vec::new(),
        )
        .expect("create");
}

#[tokio::test]
async fn health_answers_json_200_while_serving_and_503_without_a_leader() {
    let p = start().await;
    let (code, h) = get_json(p.addr, "/health").await;
    assert_eq!(code, 503);
    assert_eq!(h["status"], "no leader");
    assert_eq!(h["serving"], false);
    assert!(h["leader"].is_null());
    p.view.send_replace(View {
        role: Role::Following,
        leader: Some(2),
        epoch: 3,
    });
    let (code, h) = get_json(p.addr, "/health").await;
    assert_eq!(code, 200);
    assert_eq!(h["status"], "ok");
    assert_eq!(h["role"], "following");
    assert_eq!(h["leader"], 2);
    assert_eq!(h["epoch"], 3);
    let (code, _, body) = http(p.addr, "GET", "/health").await;
    assert_eq!(code, 200);
    assert!(!body.contains("Some("), "{body}");
}

#[tokio::test]
async fn admin_fault_cut_answers_json() {
    let p = start().await;
    let (code, v) = get_json(p.addr, "/v1/fault/cut?peers=3,2").await;
    assert_eq!(code, 200);
    assert_eq!(v["cut"], serde_json::json!([]), "GET does not cut");
    let (code, _, body) = http(p.addr, "POST", "/v1/fault/cut?peers=3,2").await;
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(v["cut"], serde_json::json!([2, 3]));
}

#[tokio::test]
async fn admin_console_pages_are_embedded_and_run_only_their_own_script() {
    let p = start().await;
    let (code, head, _) = http(p.addr, "GET", "/").await;
    assert_eq!(code, 303);
    assert!(head.contains("location: /console/"), "{head}");
    let (code, head, body) = http(p.addr, "GET", "/console/").await;
    assert_eq!(code, 200);
    assert!(head.contains("content-type: text/html"), "{head}");
    assert!(head.contains("content-security-policy: default-src 'none'; script-src 'self'"));
    assert!(body.contains("src=\"console.js\""), "{body}");
    assert!(
        !body.contains("http://") && !body.contains("https://"),
        "nothing from elsewhere"
    );
    for asset in ["/console/console.js", "/console/console.css"] {
        let (code, _, body) = http(p.addr, "GET", asset).await;
        assert_eq!(code, 200, "{asset}");
        assert!(
            !body.contains("innerHTML"),
            "{asset} builds the DOM with textContent"
        );
    }
    let (code, s) = get_json(p.addr, "/v1/console/session").await;
    assert_eq!(code, 200);
    assert_eq!(
        s["writes"], false,
        "no certificate over plain HTTP: read-only"
    );
    assert_eq!(s["tls"], false);
}

#[tokio::test]
async fn admin_console_reads_the_tree_as_an_anonymous_client() {
    let p = start().await;
    create(&p.machine, "/app", "héllo wörld", &open_acl());
    for i in 0..5 {
        create(&p.machine, &format!("/app/c{i}"), "", &open_acl());
    }
    let digest = [Acl {
        perms: perms::ALL,
        id: Id {
            scheme: "digest".into(),
            id: "bob:HASH=".into(),
        },
    }];
    create(&p.machine, "/secret", "password", &digest);

    let (code, v) = get_json(p.addr, "/v1/zk/children?path=/").await;
    assert_eq!(code, 200);
    assert_eq!(
        v["children"],
        serde_json::json!(["app", "secret", "zookeeper"])
    );
    assert_eq!(v["truncated"], false);
    // Pages: two at a time, then on after the last name shown.
    let (_, v) = get_json(p.addr, "/v1/zk/children?path=/app&limit=2").await;
    assert_eq!(v["children"], serde_json::json!(["c0", "c1"]));
    assert_eq!(v["total"], 5);
    assert_eq!(v["truncated"], true);
    let (_, v) = get_json(p.addr, "/v1/zk/children?path=/app&limit=2&after=c3").await;
    assert_eq!(v["children"], serde_json::json!(["c4"]));
    assert_eq!(v["truncated"], false);

    let (code, n) = get_json(p.addr, "/v1/zk/node?path=/app").await;
    assert_eq!(code, 200);
    assert_eq!(n["data"]["text"], "héllo wörld");
    assert_eq!(n["stat"]["czxid"], "0x100000005");
    assert_eq!(n["stat"]["num_children"], 5);
    assert_eq!(n["kind"], "persistent");
    assert_eq!(n["acl"][0]["perms"], "cdrwa");
    // The data shown is bounded; a cut character is left out.
    let (_, n) = get_json(p.addr, "/v1/zk/node?path=/app&bytes=2").await;
    assert_eq!(n["data"]["text"], "h");
    assert_eq!(n["data"]["length"], "héllo wörld".len());

    // Its ACL lets only bob read /secret: its Stat, not its data nor its children, and not
    // bob's password hash.
    let (code, n) = get_json(p.addr, "/v1/zk/node?path=/secret").await;
    assert_eq!(code, 200);
    assert_eq!(n["readable"], false);
    assert!(n["data"].is_null());
    assert_eq!(n["acl"][0]["id"], "bob:(hidden)");
    let (code, _) = get_json(p.addr, "/v1/zk/children?path=/secret").await;
    assert_eq!(code, 403);

    let (code, _) = get_json(p.addr, "/v1/zk/node?path=/nothing").await;
    assert_eq!(code, 404);
    let (code, _) = get_json(p.addr, "/v1/zk/node?path=no-slash").await;
    assert_eq!(code, 400);
    let (code, _) = get_json(p.addr, "/v1/zk/children?path=/&limit=x").await;
    assert_eq!(code, 400);
}

#[test]
fn admin_https_opens_the_console_reads_and_nothing_else() {
    use super::open;
    for p in [
        "/",
        "/console/",
        "/console/console.js",
        "/v1/zk/node",
        "/v1/zk/children",
    ] {
        assert!(open(p), "{p}");
    }
    for p in [
        "/v1/kv/a",
        "/v1/backup",
        "/v1/members/0",
        "/v1/zk/node/",
        "/console/x",
    ] {
        assert!(!open(p), "{p}");
    }
}
