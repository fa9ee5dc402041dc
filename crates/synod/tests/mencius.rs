//! Mencius (`protocol = "mencius"`) on real `synod server` processes: every replica proposes,
//! so ZooKeeper clients write at every node (no forwarding) and read each other's writes; a
//! replica is killed and the others keep serving once its instances are revoked; the session
//! duties move to the next replica; the dead one restarts and rejoins; and a data directory
//! written by mencius is refused, with the reason, by a server configured for paxos.
//! Ports 24600–24699.

mod common;

use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

/// Timers short enough for a test: suspected after 300 ms of silence.
const MENCIUS: &str = "[mencius]\nheartbeat_ms = 20\nsuspect_timeout_ms = 300\n\
                       revoke_timeout_ms = 300\ntau_ms = 10\nbeta = 1000";

/// `synod cli` against one node's ZooKeeper port: (success, stdout + stderr).
fn zk(node: &Node, args: &[&str]) -> (bool, String) {
    let port = node.client.expect("a client port");
    let out = Command::new(env!("CARGO_BIN_EXE_synod"))
        .args(["cli", "--server", &format!("127.0.0.1:{port}"), "--"])
        .args(args)
        .output()
        .expect("run synod cli");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A ZooKeeper write at `node`, retried while the cluster revokes a dead replica.
fn zk_write(node: &Node, args: &[&str]) {
    wait_until(&format!("{args:?} at node {}", node.id), 30, || {
        let (ok, out) = zk(node, args);
        (ok || out.contains("already exists")).then_some(())
    });
}

/// Wait until `node` reads `value` at `path` (reads are served locally: a replica may trail).
fn zk_reads(node: &Node, path: &str, value: &str) {
    wait_until(
        &format!("node {} to read {value} at {path}", node.id),
        30,
        || {
            let (ok, out) = zk(node, &["get", path]);
            (ok && out.lines().any(|l| l.trim() == value)).then_some(())
        },
    );
}

/// Wait until every running node proposes and names `holder` for the session duties (the
/// status is refreshed periodically, and failure detectors take a suspect timeout to agree).
fn duty_holder(c: &Cluster, holder: u32) {
    wait_until(
        &format!("every running node to propose and name {holder} holder"),
        30,
        || {
            let st: Vec<Status> = c
                .nodes
                .iter()
                .filter(|n| n.child.is_some())
                .map(|n| n.status())
                .collect::<Option<_>>()?;
            st.iter()
                .all(|s| s.role == "proposer" && s.leader == Some(holder))
                .then_some(())
        },
    )
}

#[test]
fn a_mencius_cluster_takes_writes_at_every_replica_and_survives_a_dead_one() {
    let mut c = cluster_with_clients(24600, &["protocol = \"mencius\""], &[MENCIUS]);
    // The duty holder is the lowest-id replica nobody suspects.
    duty_holder(&c, 1);
    // Every replica takes writes for its own clients, and every other replica reads them.
    for i in 1..=3u32 {
        zk_write(
            &c.nodes[i as usize - 1],
            &["create", &format!("/w{i}"), "one"],
        );
    }
    for i in 1..=3u32 {
        for j in 1..=3u32 {
            zk_reads(&c.nodes[j as usize - 1], &format!("/w{i}"), "one");
        }
    }
    for i in 0..30 {
        c.put(&format!("a{i}"), &format!("v{i}"));
    }
    // Every replica delivered writes suggested at every replica: each one suggested some.
    let metrics = |n: &Node| {
        let (_, body) = http(n.admin, "GET", "/metrics", b"").expect("metrics");
        String::from_utf8_lossy(&body).to_string()
    };
    for n in &c.nodes {
        let m = metrics(n);
        let suggested = m
            .lines()
            .find(|l| l.starts_with("synod_protocol_mencius_suggested_total{"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("node {} exports mencius_suggested: {m}", n.id));
        assert!(suggested >= 1.0, "node {} suggested nothing", n.id);
    }
    // Replica 1, the duty holder, dies: the others go on once its instances are revoked (a
    // few suspect timeouts), and replica 2 takes the duties.
    c.node(1).kill9();
    let killed = Instant::now();
    zk_write(&c.nodes[1], &["set", "/w2", "two"]);
    zk_write(&c.nodes[2], &["set", "/w3", "two"]);
    let resumed = killed.elapsed();
    assert!(
        resumed < Duration::from_secs(15),
        "writes resumed only after {resumed:?}"
    );
    zk_reads(&c.nodes[1], "/w3", "two");
    zk_reads(&c.nodes[2], "/w2", "two");
    duty_holder(&c, 2);
    for i in 0..30 {
        c.put(&format!("b{i}"), &format!("w{i}"));
    }
    let revocations: f64 = c.nodes[1..]
        .iter()
        .map(|n| {
            metrics(n)
                .lines()
                .find(|l| l.starts_with("synod_protocol_mencius_revocations_total{"))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .unwrap_or(0.0)
        })
        .sum();
    assert!(revocations >= 1.0, "the dead replica was never revoked");
    // It comes back, catches up, takes writes again and holds the duties again.
    c.node(1).start();
    duty_holder(&c, 1);
    zk_write(&c.nodes[0], &["set", "/w1", "three"]);
    for n in &c.nodes {
        zk_reads(n, "/w1", "three");
        zk_reads(n, "/w2", "two");
    }
    let st = c.converged();
    assert!(st.applied >= 60, "{st:?}");
    c.assert_keys(
        (0..30)
            .map(|i| (format!("a{i}"), format!("v{i}")))
            .chain((0..30).map(|i| (format!("b{i}"), format!("w{i}")))),
    );
    let (_, body) = http(c.nodes[0].admin, "GET", "/v1/status", b"").unwrap();
    assert_eq!(
        field(&String::from_utf8_lossy(&body), "protocol").as_deref(),
        Some("mencius")
    );
    let logs: String = c.nodes.iter().map(|n| n.log_text()).collect();
    assert!(!logs.contains("panicked"), "a node panicked");
}

#[test]
fn a_mencius_data_directory_is_refused_by_paxos_with_the_reason() {
    let mut c = cluster(24650, &["protocol = \"mencius\""]);
    duty_holder(&c, 1);
    c.put("k", "v");
    c.node(1).terminate();
    let node = &c.nodes[0];
    let start_as_paxos = || {
        let out = Command::new(env!("CARGO_BIN_EXE_synod"))
            .args(["server", "--config"])
            .arg(&node.config)
            .args(["--set", "protocol=paxos"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "paxos started on a mencius log");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let err = start_as_paxos();
    assert!(err.contains("(protocol mencius)"), "{err}");
    assert!(err.contains("refusing to start"), "{err}");
    // Without its identity file the log itself is refused.
    std::fs::remove_file(node.data.join("identity.toml")).unwrap();
    let err = start_as_paxos();
    assert!(
        err.contains("cannot recover group 0 from its log as protocol paxos"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // Mencius still reads it, and the node rejoins.
    c.node(1).start();
    let st = c.converged();
    assert_eq!(st.applied, 1);
}
