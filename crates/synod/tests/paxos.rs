//! PFT Multi-Paxos (`protocol = "paxos"`) on real `synod server` processes: ZooKeeper clients
//! write through one node and read from another, the primary is killed and writes continue in
//! the next view, the old primary comes back and catches up; and a data directory written by
//! paxos is refused, with the reason, by a server configured for zab. Ports 24500–24599.

mod common;

use common::*;
use std::process::Command;

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

/// A ZooKeeper write at `node`, retried while the cluster changes views.
fn zk_write(node: &Node, args: &[&str]) {
    wait_until(&format!("{args:?} at node {}", node.id), 30, || {
        let (ok, out) = zk(node, args);
        (ok || out.contains("already exists")).then_some(())
    });
}

/// Wait until `node` reads `value` at `path` (reads are served locally: a follower may lag).
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

fn epoch(node: &Node) -> u64 {
    let (_, body) = http(node.admin, "GET", "/v1/status", b"").expect("status");
    field(&String::from_utf8_lossy(&body), "epoch")
        .and_then(|e| e.parse().ok())
        .expect("an epoch")
}

#[test]
fn a_paxos_cluster_serves_zookeeper_clients_and_survives_its_primary() {
    let mut c = cluster_with_clients(24500, &["protocol = \"paxos\""], &[]);
    let first = c.leader();
    let view = epoch(&c.nodes[first as usize - 1]);
    let backups: Vec<u32> = (1..=3).filter(|&i| i != first).collect();
    let (a, b) = (backups[0], backups[1]);
    // A write through a backup (forwarded to the primary), read at the other backup.
    zk_write(&c.nodes[a as usize - 1], &["create", "/p", "one"]);
    zk_reads(&c.nodes[b as usize - 1], "/p", "one");
    zk_write(&c.nodes[first as usize - 1], &["set", "/p", "two"]);
    zk_reads(&c.nodes[a as usize - 1], "/p", "two");
    for i in 0..50 {
        c.put(&format!("a{i}"), &format!("v{i}"));
    }
    // The primary dies: the backups install the next view and go on.
    c.node(first).kill9();
    let second = c.leader();
    assert_ne!(first, second, "a new primary leads");
    let view2 = epoch(&c.nodes[second as usize - 1]);
    assert!(
        view2 > view,
        "the new primary's view {view2} follows {view}"
    );
    let other = backups.iter().copied().find(|&i| i != second).unwrap();
    zk_write(&c.nodes[other as usize - 1], &["set", "/p", "three"]);
    zk_reads(&c.nodes[second as usize - 1], "/p", "three");
    for i in 0..50 {
        c.put(&format!("b{i}"), &format!("w{i}"));
    }
    // The old primary comes back, catches up and serves the latest state.
    c.node(first).start();
    // Sessions open and close through the log too: at least the 103 writes were delivered.
    let st = c.converged();
    assert!(st.applied >= 103, "{st:?}");
    zk_reads(&c.nodes[first as usize - 1], "/p", "three");
    c.assert_keys(
        (0..50)
            .map(|i| (format!("a{i}"), format!("v{i}")))
            .chain((0..50).map(|i| (format!("b{i}"), format!("w{i}")))),
    );
    // Every node says which protocol it runs.
    let (_, body) = http(c.nodes[0].admin, "GET", "/v1/status", b"").unwrap();
    assert_eq!(
        field(&String::from_utf8_lossy(&body), "protocol").as_deref(),
        Some("paxos")
    );
}

#[test]
fn a_paxos_data_directory_is_refused_by_zab_with_the_reason() {
    let mut c = cluster(24550, &["protocol = \"paxos\""]);
    c.leader();
    c.put("k", "v");
    c.node(1).terminate();
    let node = &c.nodes[0];
    let start_as_zab = || {
        let out = Command::new(env!("CARGO_BIN_EXE_synod"))
            .args(["server", "--config"])
            .arg(&node.config)
            .args(["--set", "protocol=zab"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "zab started on a paxos log");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let err = start_as_zab();
    assert!(err.contains("(protocol paxos)"), "{err}");
    assert!(err.contains("refusing to start"), "{err}");
    // Without its identity file the log itself is refused, and the failed start does not
    // record the wrong protocol as the directory's.
    let identity = node.data.join("identity.toml");
    std::fs::remove_file(&identity).unwrap();
    let err = start_as_zab();
    assert!(
        err.contains("cannot recover group 0 from its log as protocol zab"),
        "{err}"
    );
    assert!(!identity.exists(), "a failed start wrote an identity");
    assert!(!err.contains("panicked"), "{err}");
    // Paxos still reads it, and the node rejoins.
    c.node(1).start();
    let st = c.converged();
    assert_eq!(st.applied, 1);
}

/// One group as `/v1/status` shows it: (id, leader, applied slot, digest, snapshots installed).
type GroupRow = (u64, Option<u64>, u64, u64, u64);

/// Every group as node `n` reports it.
fn groups(n: &Node) -> Option<Vec<GroupRow>> {
    let (code, body) = http(n.admin, "GET", "/v1/status", b"")?;
    if code != 200 {
        return None;
    }
    let j: serde_json::Value = serde_json::from_slice(&body).ok()?;
    j.get("groups")?
        .as_array()?
        .iter()
        .map(|g| {
            Some((
                g.get("id")?.as_u64()?,
                g.get("leader")?.as_u64(),
                g.get("applied_slot")?.as_u64()?,
                g.get("digest")?.as_u64()?,
                g.get("snapshots_installed")?.as_u64()?,
            ))
        })
        .collect()
}

fn register_put(c: &Cluster, group: u32, key: &str, value: &str) {
    wait_until(&format!("the write of {key} in group {group}"), 30, || {
        c.nodes.iter().filter(|n| n.child.is_some()).find_map(|n| {
            let path = format!("/v1/groups/{group}/kv/{key}");
            matches!(
                http(n.admin, "PUT", &path, value.as_bytes()),
                Some((200, _))
            )
            .then_some(())
        })
    });
}

#[test]
fn zab_and_paxos_groups_share_processes_and_a_lagging_paxos_replica_gets_a_state_transfer() {
    let mut c = cluster_with(
        24570,
        &[
            "snapshot_every = 40",
            "[[groups]]\nid = 1\nprotocol = \"paxos\"\n\
             [[groups]]\nid = 2\nprotocol = \"paxos-mbq\"",
        ],
        &[],
    );
    let settled = |c: &Cluster| {
        wait_until("every group to agree on every node", 60, || {
            let all: Vec<_> = c.nodes.iter().map(groups).collect::<Option<_>>()?;
            let same = all.iter().all(|g| {
                g.len() == 3
                    && g.iter()
                        .zip(&all[0])
                        .all(|(a, b)| a.1.is_some() && (a.0, a.1, a.2, a.3) == (b.0, b.1, b.2, b.3))
            });
            same.then_some(all)
        })
    };
    let before = settled(&c);
    // Kill the primary of the paxos group, then write well past a few checkpoints in every
    // group: the survivors compact their logs behind stable checkpoints.
    let primary = before[0][1].1.unwrap() as u32;
    c.node(primary).kill9();
    for i in 0..150 {
        c.put(&format!("z{i}"), "zab");
        register_put(&c, 1, &format!("k{i}"), &format!("v{i}"));
        register_put(&c, 2, &format!("m{i}"), &format!("w{i}"));
    }
    c.node(primary).start();
    let after = settled(&c);
    let back = &after[primary as usize - 1];
    assert!(
        back[1].2 >= 150 && back[2].2 >= 150,
        "the paxos groups went on: {back:?}"
    );
    assert!(
        back[1].4 >= 1,
        "the restarted paxos replica installed a checkpoint from a peer: {back:?}"
    );
    for n in &c.nodes {
        for (g, k, v) in [(1, "k0", "v0"), (1, "k149", "v149"), (2, "m149", "w149")] {
            let (code, body) = http(n.admin, "GET", &format!("/v1/groups/{g}/kv/{k}"), b"")
                .expect("register read");
            assert_eq!((code, String::from_utf8_lossy(&body).as_ref()), (200, v));
        }
    }
    c.assert_keys([("z149".to_string(), "zab".to_string())].into_iter());
    let logs: String = c.nodes.iter().map(|n| n.log_text()).collect();
    assert!(!logs.contains("panicked"), "a node panicked");
}
