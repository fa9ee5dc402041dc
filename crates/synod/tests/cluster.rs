//! Real `synod server` processes on loopback: leader crash and restart, a follower that needs a
//! snapshot transfer, a corrupted log tail, and a data directory of another cluster.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Node {
    id: u32,
    admin: u16,
    config: PathBuf,
    data: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

struct Cluster {
    nodes: Vec<Node>,
    _dir: tempfile::TempDir,
}

fn http(port: u16, method: &str, path: &str, body: &[u8]) -> Option<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(15))).ok()?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).ok()?;
    s.write_all(body).ok()?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).ok()?;
    let text_end = resp.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&resp[..text_end]).to_string();
    let code: u16 = head.split_whitespace().nth(1)?.parse().ok()?;
    let mut body = resp[text_end + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    Some((code, body))
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&b[..eol]).unwrap_or("0").trim();
        let n = usize::from_str_radix(size, 16).unwrap_or(0);
        if n == 0 || b.len() < eol + 4 + n {
            break;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[eol + 2 + n + 2..];
    }
    out
}

#[derive(Debug, Clone)]
struct Status {
    role: String,
    leader: Option<u32>,
    applied: u64,
    digest: u64,
    snapshots_installed: u64,
}

fn field(json: &str, name: &str) -> Option<String> {
    let key = format!("\"{name}\":");
    let i = json.find(&key)? + key.len();
    let rest = &json[i..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim_matches('"').to_string())
}

impl Node {
    fn status(&self) -> Option<Status> {
        let (code, body) = http(self.admin, "GET", "/v1/status", b"")?;
        if code != 200 {
            return None;
        }
        let j = String::from_utf8_lossy(&body).to_string();
        Some(Status {
            role: field(&j, "role")?,
            leader: field(&j, "leader")?.parse().ok(),
            applied: field(&j, "applied_slot")?.parse().ok()?,
            digest: field(&j, "digest")?.parse().ok()?,
            snapshots_installed: field(&j, "snapshots_installed")?.parse().ok()?,
        })
    }

    fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_synod"))
            .args(["server", "--config"])
            .arg(&self.config)
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start synod server");
        self.child = Some(child);
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    fn terminate(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(15);
            while c.try_wait().unwrap().is_none() {
                assert!(
                    Instant::now() < deadline,
                    "node {} ignored SIGTERM",
                    self.id
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.kill9();
        }
    }
}

fn cluster(base: u16, extra: &[&str]) -> Cluster {
    cluster_with(base, extra, &[])
}

fn cluster_with(base: u16, extra: &[&str], zab: &[&str]) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let mut peers = String::new();
    for i in 1..=3u16 {
        peers.push_str(&format!("{i} = \"127.0.0.1:{}\"\n", base + 10 + i));
    }
    let mut nodes = Vec::new();
    for i in 1..=3u32 {
        let data = dir.path().join(format!("node{i}"));
        let config = dir.path().join(format!("node{i}.toml"));
        let admin = base + 20 + i as u16;
        let mut text = format!(
            "cluster_id = \"test\"\nnode_id = {i}\nadmin_addr = \"127.0.0.1:{admin}\"\n\
             data_dir = {:?}\nlog_level = \"info\"\n",
            data.display().to_string()
        );
        for e in extra {
            text.push_str(e);
            text.push('\n');
        }
        text.push_str(
            "[zab]\ntick_ms = 10\nheartbeat_ms = 50\nfollower_timeout_ms = 500\n\
             leader_timeout_ms = 500\ndiscovery_timeout_ms = 1000\n",
        );
        for z in zab {
            text.push_str(z);
            text.push('\n');
        }
        text.push_str(&format!("[peers]\n{peers}"));
        std::fs::write(&config, text).unwrap();
        nodes.push(Node {
            id: i,
            admin,
            config,
            log: dir.path().join(format!("node{i}.log")),
            data,
            child: None,
        });
    }
    for n in &mut nodes {
        n.start();
    }
    Cluster { nodes, _dir: dir }
}

fn wait_until<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Cluster {
    /// The leader every running node agrees on.
    fn leader(&self) -> u32 {
        wait_until("a leader followed by every running node", 30, || {
            let st: Vec<Status> = self
                .nodes
                .iter()
                .filter(|n| n.child.is_some())
                .map(|n| n.status())
                .collect::<Option<_>>()?;
            let l = st.first()?.leader?;
            let ok = st
                .iter()
                .all(|s| s.leader == Some(l) && s.role != "electing");
            // The leader must be running and say so itself (survivors of a crash report the
            // dead leader until they notice).
            let alive = self.nodes[l as usize - 1].child.is_some();
            (ok && alive && self.nodes[l as usize - 1].status()?.role == "leading").then_some(l)
        })
    }

    fn put(&self, key: &str, value: &str) {
        wait_until(&format!("the write of {key}"), 30, || {
            let n = self.nodes.iter().find(|n| n.child.is_some())?;
            let (code, _) = http(n.admin, "PUT", &format!("/v1/kv/{key}"), value.as_bytes())?;
            (code == 200).then_some(())
        });
    }

    /// Every node has applied the same slots with the same digest.
    fn converged(&self) -> Status {
        wait_until("convergence", 30, || {
            let st: Vec<Status> = self
                .nodes
                .iter()
                .map(|n| n.status())
                .collect::<Option<_>>()?;
            let a = &st[0];
            st.iter()
                .all(|s| s.applied == a.applied && s.digest == a.digest && s.leader.is_some())
                .then(|| a.clone())
        })
    }

    fn node(&mut self, id: u32) -> &mut Node {
        &mut self.nodes[id as usize - 1]
    }

    fn assert_keys(&self, keys: impl Iterator<Item = (String, String)> + Clone) {
        for n in &self.nodes {
            for (k, v) in keys.clone() {
                let (code, body) = http(n.admin, "GET", &format!("/v1/kv/{k}"), b"").unwrap();
                assert_eq!(code, 200, "node {} lacks {k}", n.id);
                assert_eq!(String::from_utf8_lossy(&body), v, "node {} key {k}", n.id);
            }
        }
    }
}

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
        "synod_commit_latency_seconds",
        "synod_fsync_latency_seconds",
        "synod_messages_sent_total",
        "synod_log_bytes",
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
