//! Real `synod server` processes on loopback: leader crash and restart, a follower that needs a
//! snapshot transfer, a corrupted log tail, and a data directory of another cluster.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn leader_killed_and_restarted_loses_nothing() {
    let mut c = cluster(24000, &[]);
    let first = c.leader();
    for i in 0..100 {
        c.put(&format!("a{i}"), &format!("v{i}"));
    }
    c.node(first).kill9();
    let second = c.leader();
    assert_ne!(first, second, "a new leader is elected");
    for i in 0..100 {
        c.put(&format!("b{i}"), &format!("w{i}"));
    }
    c.node(first).start();
    let st = c.converged();
    assert_eq!(st.applied, 200);
    c.assert_keys(
        (0..100)
            .map(|i| (format!("a{i}"), format!("v{i}")))
            .chain((0..100).map(|i| (format!("b{i}"), format!("w{i}")))),
    );
    // Metrics and health are served.
    let (code, body) = http(c.nodes[0].admin, "GET", "/metrics", b"").unwrap();
    assert_eq!(code, 200);
    let text = String::from_utf8_lossy(&body);
    for m in [
        "synod_group_commit_latency_seconds",
        "synod_wal_fsync_duration_seconds",
        "synod_group_messages_sent_total",
        "synod_wal_size_bytes",
    ] {
        assert!(text.contains(m), "missing metric {m}");
    }
    assert_eq!(
        http(c.nodes[0].admin, "GET", "/health", b"").unwrap().0,
        200
    );
}

#[test]
fn a_follower_far_behind_catches_up_by_snapshot() {
    // Few log entries are kept behind each snapshot, so the follower cannot catch up by diff.
    let mut c = cluster_with(24100, &["snapshot_every = 40"], &["log_retain = 10"]);
    let leader = c.leader();
    let follower = (1..=3).find(|&i| i != leader).unwrap();
    c.node(follower).kill9();
    for i in 0..300 {
        c.put(&format!("k{}", i % 50), &format!("v{i}"));
    }
    c.node(follower).start();
    let st = c.converged();
    assert_eq!(st.applied, 300);
    let s = c.nodes[follower as usize - 1].status().unwrap();
    assert!(
        s.snapshots_installed >= 1,
        "the follower installed a snapshot: {s:?}"
    );
    c.assert_keys((250..300).map(|i| (format!("k{}", i % 50), format!("v{i}"))));
}

#[test]
fn a_corrupt_log_tail_is_truncated_and_caught_up() {
    let mut c = cluster(24200, &[]);
    let leader = c.leader();
    let follower = (1..=3).find(|&i| i != leader).unwrap();
    for i in 0..50 {
        c.put(&format!("k{i}"), "x");
    }
    c.converged();
    c.node(follower).terminate();
    // Damage the end of the newest segment.
    let wal = c.nodes[follower as usize - 1].data.join("wal");
    let seg = newest_segment(&wal);
    let mut bytes = std::fs::read(&seg).unwrap();
    // The end of the records (the segment is zero-padded ahead of the log).
    let n = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    for b in &mut bytes[n - 40..n - 30] {
        *b ^= 0xFF;
    }
    std::fs::write(&seg, bytes).unwrap();
    for i in 50..80 {
        c.put(&format!("k{i}"), "y");
    }
    c.node(follower).start();
    let st = c.converged();
    assert_eq!(st.applied, 80);
    let log = c.nodes[follower as usize - 1].log_text();
    assert!(
        log.contains("log recovery"),
        "a warning names the damage:\n{log}"
    );
    c.assert_keys((0..80).map(|i| (format!("k{i}"), if i < 50 { "x" } else { "y" }.to_string())));
}

fn newest_segment(dir: &Path) -> PathBuf {
    let mut segs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    segs.sort();
    segs.pop().expect("a segment")
}

#[test]
fn a_data_directory_of_another_cluster_is_refused() {
    let mut c = cluster(24300, &[]);
    c.leader();
    c.node(1).terminate();
    let node = &c.nodes[0];
    let out = Command::new(env!("CARGO_BIN_EXE_synod"))
        .args(["server", "--config"])
        .arg(&node.config)
        .args(["--set", "cluster_id=\"other\""])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("belongs to cluster 'test'"), "{err}");
    assert!(err.contains("refusing to start"), "{err}");
}

#[test]
fn a_bad_config_names_the_key() {
    let out = Command::new(env!("CARGO_BIN_EXE_synod"))
        .args(["server", "--set", "cluster_id=x", "--set", "node_id=1"])
        .args([
            "--set",
            "peers.1=\"127.0.0.1:1\"",
            "--set",
            "admin_addr=\"127.0.0.1:2\"",
            "--set",
            "insecure=true",
        ])
        .args([
            "--set",
            "data_dir=/tmp/x",
            "--set",
            "zab.heartbeat_ms=\"fast\"",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("heartbeat_ms"), "{err}");
}
