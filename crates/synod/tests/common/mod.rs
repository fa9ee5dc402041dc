//! Real `synod server` processes on loopback for the integration tests: a three-node cluster
//! with its configuration files, data directories and logs, and the admin API to drive it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Start `bin server --config config`, its output appended to `log`.
pub fn spawn_server(bin: &std::path::Path, config: &std::path::Path, log: std::fs::File) -> Child {
    Command::new(bin)
        .args(["server", "--config"])
        .arg(config)
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("start synod server")
}

pub struct Node {
    pub id: u32,
    pub admin: u16,
    /// The ZooKeeper client port, if the node serves one.
    pub client: Option<u16>,
    pub config: PathBuf,
    pub data: PathBuf,
    pub log: PathBuf,
    pub child: Option<Child>,
}

pub struct Cluster {
    pub nodes: Vec<Node>,
    _dir: tempfile::TempDir,
}

pub fn http(port: u16, method: &str, path: &str, body: &[u8]) -> Option<(u16, Vec<u8>)> {
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
pub struct Status {
    pub role: String,
    pub leader: Option<u32>,
    pub applied: u64,
    pub digest: u64,
    pub snapshots_installed: u64,
}

pub fn field(json: &str, name: &str) -> Option<String> {
    let key = format!("\"{name}\":");
    let i = json.find(&key)? + key.len();
    let rest = &json[i..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim_matches('"').to_string())
}

impl Node {
    pub fn status(&self) -> Option<Status> {
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

    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let bin = std::path::Path::new(env!("CARGO_BIN_EXE_synod"));
        self.child = Some(spawn_server(bin, &self.config, log));
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    pub fn terminate(&mut self) {
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

    pub fn log_text(&self) -> String {
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

pub fn cluster(base: u16, extra: &[&str]) -> Cluster {
    cluster_with(base, extra, &[])
}

pub fn cluster_with(base: u16, extra: &[&str], zab: &[&str]) -> Cluster {
    cluster_full(base, extra, zab, false)
}

/// A cluster whose nodes also serve ZooKeeper clients, node i on port `base + 30 + i`.
pub fn cluster_with_clients(base: u16, extra: &[&str], sections: &[&str]) -> Cluster {
    cluster_full(base, extra, sections, true)
}

/// `extra` lines go at the top level of every node's configuration, `zab` lines after its
/// `[zab]` section (other sections may follow them).
fn cluster_full(base: u16, extra: &[&str], zab: &[&str], clients: bool) -> Cluster {
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
        let client = clients.then_some(base + 30 + i as u16);
        let mut text = format!(
            "cluster_id = \"test\"\nnode_id = {i}\ninsecure = true\nadmin_addr = \"127.0.0.1:{admin}\"\n\
             data_dir = {:?}\nlog_level = \"info\"\n",
            data.display().to_string()
        );
        if let Some(port) = client {
            text.push_str(&format!("client_addr = \"127.0.0.1:{port}\"\n"));
        }
        for e in extra {
            text.push_str(e);
            text.push('\n');
        }
        text.push_str(
            "[zab]\ntick_ms = 10\nheartbeat_ms = 50\nfollower_timeout_ms = 500\n\
             leader_timeout_ms = 500\ndiscovery_timeout_ms = 1000\n",
        );
        for z in zab {
            // `{kv}` stands for this node's KV port, base + 40 + i.
            text.push_str(&z.replace("{kv}", &(base + 40 + i as u16).to_string()));
            text.push('\n');
        }
        text.push_str(&format!("[peers]\n{peers}"));
        std::fs::write(&config, text).unwrap();
        nodes.push(Node {
            id: i,
            admin,
            client,
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

pub fn wait_until<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
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
    pub fn leader(&self) -> u32 {
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

    pub fn put(&self, key: &str, value: &str) {
        wait_until(&format!("the write of {key}"), 30, || {
            let n = self.nodes.iter().find(|n| n.child.is_some())?;
            let (code, _) = http(n.admin, "PUT", &format!("/v1/kv/{key}"), value.as_bytes())?;
            (code == 200).then_some(())
        });
    }

    /// Every node has applied the same slots with the same digest.
    pub fn converged(&self) -> Status {
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

    pub fn node(&mut self, id: u32) -> &mut Node {
        &mut self.nodes[id as usize - 1]
    }

    pub fn assert_keys(&self, keys: impl Iterator<Item = (String, String)> + Clone) {
        for n in &self.nodes {
            for (k, v) in keys.clone() {
                let (code, body) = http(n.admin, "GET", &format!("/v1/kv/{k}"), b"").unwrap();
                assert_eq!(code, 200, "node {} lacks {k}", n.id);
                assert_eq!(String::from_utf8_lossy(&body), v, "node {} key {k}", n.id);
            }
        }
    }
}
