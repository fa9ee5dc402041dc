//! Many groups in one cluster of real processes: the ZooKeeper group and two register groups
//! share three `synod server` processes, their peer connections and each node's log. A node is
//! killed under load in every group and comes back; every group recovers on every node, a
//! message between groups sent around the crash arrives exactly once, and the log metrics show
//! single fdatasyncs that served several groups at once.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::time::Duration;

const GROUPS: &str = "[[groups]]\nid = 1\nmachine = \"register\"\n\
                      [[groups]]\nid = 2\nmachine = \"register\"\n";

/// A group's leader, applied slot and digest.
type GroupState = (Option<u64>, u64, u64);

/// Every group's state as node `n` reports it.
fn groups(n: &Node) -> Option<BTreeMap<u64, GroupState>> {
    let (code, body) = http(n.admin, "GET", "/v1/status", b"")?;
    if code != 200 {
        return None;
    }
    let j: serde_json::Value = serde_json::from_slice(&body).ok()?;
    let mut out = BTreeMap::new();
    for g in j.get("groups")?.as_array()? {
        out.insert(
            g.get("id")?.as_u64()?,
            (
                g.get("leader")?.as_u64(),
                g.get("applied_slot")?.as_u64()?,
                g.get("digest")?.as_u64()?,
            ),
        );
    }
    Some(out)
}

/// Every running node reports the same state in every group, each group with a leader.
fn converged(c: &Cluster) -> BTreeMap<u64, GroupState> {
    wait_until("every group to converge on every node", 60, || {
        let all: Vec<_> = c.nodes.iter().map(groups).collect::<Option<_>>()?;
        let first = all.first()?.clone();
        let same = all.iter().all(|g| {
            g.len() == 3
                && g.iter().all(|(id, (l, a, d))| {
                    let f = &first[id];
                    l.is_some() && *l == f.0 && *a == f.1 && *d == f.2
                })
        });
        same.then_some(first)
    })
}

fn register_put(c: &Cluster, group: u32, key: &str, value: &str) {
    wait_until(&format!("the write of {key} in group {group}"), 30, || {
        for n in c.nodes.iter().filter(|n| n.child.is_some()) {
            let path = format!("/v1/groups/{group}/kv/{key}");
            if let Some((200, _)) = http(n.admin, "PUT", &path, value.as_bytes()) {
                return Some(());
            }
        }
        None
    });
}

fn relay(c: &Cluster, from: u32, to: u32, key: &str, value: &str) {
    wait_until(&format!("the relay of {key}"), 30, || {
        for n in c.nodes.iter().filter(|n| n.child.is_some()) {
            let path = format!("/v1/groups/{from}/relay/{to}/{key}");
            if let Some((200, _)) = http(n.admin, "POST", &path, value.as_bytes()) {
                return Some(());
            }
        }
        None
    });
}

fn register_get(n: &Node, group: u32, key: &str) -> Option<String> {
    match http(n.admin, "GET", &format!("/v1/groups/{group}/kv/{key}"), b"")? {
        (200, body) => Some(String::from_utf8_lossy(&body).to_string()),
        _ => None,
    }
}

/// A Prometheus sample of node `n`, by its full name with labels.
fn metric(n: &Node, sample: &str) -> f64 {
    let (_, body) = http(n.admin, "GET", "/metrics", b"").expect("metrics");
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {sample} on node {}", n.id))
}

/// Write in all three groups at once, from three threads.
fn load(c: &Cluster, round: &str, n: usize) {
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..n {
                c.put(&format!("{round}z{i}"), round);
            }
        });
        for g in [1u32, 2] {
            s.spawn(move || {
                for i in 0..n {
                    register_put(c, g, &format!("{round}g{g}k{i}"), round);
                }
            });
        }
    });
}

#[test]
fn three_groups_share_three_processes_and_each_recovers_from_a_killed_node() {
    let mut c = cluster_with(
        24400,
        &[
            "snapshot_every = 40",
            "[limits]\nsegment_bytes = 8192\nwal_preallocate_bytes = 0",
            GROUPS,
        ],
        // Keep few entries behind each snapshot, so that compaction frees segments.
        &["log_retain = 20"],
    );
    let before = converged(&c);
    assert_eq!(before.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2]);
    load(&c, "a", 60);
    relay(&c, 1, 2, "before-crash", "r1");
    converged(&c);

    // Kill the node that leads the ZooKeeper group, under load in every group.
    let victim = c.leader();
    c.node(victim).kill9();
    std::thread::scope(|s| {
        s.spawn(|| load(&c, "b", 60));
        s.spawn(|| relay(&c, 1, 2, "during-crash", "r2"));
    });
    c.node(victim).start();
    let after = converged(&c);
    for g in 0..3 {
        assert!(
            after[&g].1 > before[&g].1 + 50,
            "group {g} went on: {:?} -> {:?}",
            before[&g],
            after[&g]
        );
    }

    // Every node, the restarted one included, holds every write of every group.
    c.assert_keys((0..60).flat_map(|i| {
        [
            (format!("az{i}"), "a".to_string()),
            (format!("bz{i}"), "b".to_string()),
        ]
    }));
    for n in &c.nodes {
        for g in [1u32, 2] {
            for (round, i) in [("a", 0), ("a", 59), ("b", 0), ("b", 59)] {
                let key = format!("{round}g{g}k{i}");
                assert_eq!(
                    register_get(n, g, &key).as_deref(),
                    Some(round),
                    "node {} group {g} key {key}",
                    n.id
                );
            }
        }
        // The messages between groups arrived, around the crash too.
        for (key, v) in [("before-crash", "r1"), ("during-crash", "r2")] {
            wait_until(&format!("{key} in group 2 on node {}", n.id), 30, || {
                (register_get(n, 2, key).as_deref() == Some(v)).then_some(())
            });
        }
    }

    // One fdatasync served several groups: the log is shared, and so is its group commit.
    for n in &c.nodes {
        let fsyncs = metric(n, "synod_wal_fsyncs_total");
        let single = metric(n, "synod_wal_groups_per_fsync_bucket{le=\"1.0\"}");
        let total = metric(n, "synod_wal_groups_per_fsync_count");
        let records = metric(n, "synod_wal_records_per_fsync_sum");
        eprintln!(
            "node {}: {fsyncs} fsyncs, {} of them for more than one group, {:.2} records each",
            n.id,
            total - single,
            records / total.max(1.0)
        );
        assert!(
            fsyncs > 0.0 && total > single,
            "node {}: no fsync served two groups",
            n.id
        );
        // The small segments were unlinked as every group compacted past them (counted since
        // the node's last start).
        if n.id != victim {
            assert!(
                metric(n, "synod_wal_segments_deleted_total") > 0.0,
                "node {}",
                n.id
            );
        }
    }
    let logs: String = c.nodes.iter().map(|n| n.log_text()).collect();
    assert!(!logs.contains("panicked"), "a node panicked");
    std::thread::sleep(Duration::from_millis(10));
}
