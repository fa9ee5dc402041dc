//! Hostile input on every port of real `synod server` processes (one three-node cluster on
//! loopback, ports 26000–26099): random and mutated frames on the ZooKeeper client port, random
//! bytes and mutated hellos on the peer port, garbage and stalled requests on the admin port,
//! length prefixes that claim a megabyte and stall, thousands of idle connections, and clients
//! that never read their replies. Throughout, a well-behaved client on every node keeps getting
//! correct answers within a bounded latency, no server exits, replication keeps working, and
//! each server's resident memory stays under a bound and falls back when the attackers leave.

use bytes::{Bytes, BytesMut};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use synod_zk::jute::{mode, op, JuteWrite, Reader};

const BASE: u16 = 26000;
/// Resident memory a server may add over its baseline while under attack.
const RSS_BOUND_MB: u64 = 300;
/// The longest a well-behaved request may take while the servers are under attack.
const LATENCY_BOUND: Duration = Duration::from_secs(3);
/// Server settings the test relies on (shortened timeouts so that the test waits less).
const HANDSHAKE_TIMEOUT_MS: u64 = 2_000;
const WRITE_TIMEOUT_MS: u64 = 3_000;
const SESSION_TIMEOUT_MS: i32 = 4_000;
const MAX_BUFFER: usize = 1_048_575;

// ------------------------------------------------------------------ the cluster

struct Node {
    id: u32,
    client: u16,
    peer: u16,
    admin: u16,
    log: PathBuf,
    child: Child,
}

struct Cluster {
    nodes: Vec<Node>,
    _dir: tempfile::TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            let _ = n.child.kill();
            let _ = n.child.wait();
        }
    }
}

fn start_cluster() -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let mut peers = String::new();
    for i in 1..=3u16 {
        peers.push_str(&format!("{i} = \"127.0.0.1:{}\"\n", BASE + 10 + i));
    }
    let mut nodes = Vec::new();
    for i in 1..=3u16 {
        let data = dir.path().join(format!("node{i}"));
        let config = dir.path().join(format!("node{i}.toml"));
        let log = dir.path().join(format!("node{i}.log"));
        let (client, peer, admin) = (BASE + i, BASE + 10 + i, BASE + 20 + i);
        let text = format!(
            "cluster_id = \"hostile\"\nnode_id = {i}\ninsecure = true\nadmin_addr = \"127.0.0.1:{admin}\"\n\
             client_addr = \"127.0.0.1:{client}\"\ndata_dir = {:?}\nlog_level = \"info\"\n\
             fsync = \"never\"\n\
             [zab]\ntick_ms = 10\nheartbeat_ms = 50\nfollower_timeout_ms = 1000\n\
             leader_timeout_ms = 1000\ndiscovery_timeout_ms = 2000\n\
             [zookeeper]\nhandshake_timeout_ms = {HANDSHAKE_TIMEOUT_MS}\n\
             write_timeout_ms = {WRITE_TIMEOUT_MS}\nmax_queued_events = 1000\n\
             max_client_cnxns = 0\nsasl_users = {{ bob = \"bobsecret\" }}\n\
             [limits]\nadmin_idle_timeout_ms = {HANDSHAKE_TIMEOUT_MS}\n\
             [peers]\n{peers}",
            data.display().to_string()
        );
        std::fs::write(&config, text).unwrap();
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_synod"))
            .args(["server", "--config"])
            .arg(&config)
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .expect("start synod server");
        nodes.push(Node {
            id: i as u32,
            client,
            peer,
            admin,
            log,
            child,
        });
    }
    Cluster { nodes, _dir: dir }
}

impl Node {
    fn rss_mb(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kb| kb / 1024)
    }
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Cluster {
    fn assert_alive(&mut self) {
        for n in &mut self.nodes {
            if let Some(st) = n.child.try_wait().unwrap() {
                panic!(
                    "node {} exited ({st}); its log:\n{}",
                    n.id,
                    tail(&n.log_text())
                );
            }
        }
    }
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

fn wait_until<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

fn http(port: u16, method: &str, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).ok()?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).ok()?;
    let text = String::from_utf8_lossy(&resp).to_string();
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((code, body))
}

fn field(json: &str, name: &str) -> Option<String> {
    let key = format!("\"{name}\":");
    let i = json.find(&key)? + key.len();
    let rest = &json[i..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim_matches('"').to_string())
}

/// (applied slot, digest, leader) of a node.
fn status(n: &Node) -> Option<(u64, u64, u32)> {
    let (code, body) = http(n.admin, "GET", "/v1/status")?;
    if code != 200 {
        return None;
    }
    Some((
        field(&body, "applied_slot")?.parse().ok()?,
        field(&body, "digest")?.parse().ok()?,
        field(&body, "leader")?.parse().ok()?,
    ))
}

// ------------------------------------------------------------------ a small ZooKeeper client

struct Zk {
    s: TcpStream,
    xid: i32,
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(body.len() + 4);
    f.extend_from_slice(&(body.len() as i32).to_be_bytes());
    f.extend_from_slice(body);
    f
}

fn connect_request(timeout_ms: i32) -> Vec<u8> {
    let mut b = BytesMut::new();
    b.int(0);
    b.long(0);
    b.int(timeout_ms);
    b.long(0);
    b.buffer(&[0u8; 16]);
    b.boolean(false);
    frame(&b)
}

impl Zk {
    fn connect(port: u16) -> std::io::Result<Zk> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.set_write_timeout(Some(Duration::from_secs(10)))?;
        s.set_nodelay(true)?;
        let mut z = Zk { s, xid: 0 };
        z.s.write_all(&connect_request(SESSION_TIMEOUT_MS))?;
        let mut r = Reader::new(z.recv()?);
        let bad = || std::io::Error::other("malformed connect response");
        let _version = r.int().map_err(|_| bad())?;
        let timeout = r.int().map_err(|_| bad())?;
        if timeout <= 0 {
            return Err(std::io::Error::other("session refused"));
        }
        Ok(z)
    }

    fn recv(&mut self) -> std::io::Result<Bytes> {
        let mut len = [0u8; 4];
        self.s.read_exact(&mut len)?;
        let n = i32::from_be_bytes(len);
        if !(0..=16 << 20).contains(&n) {
            return Err(std::io::Error::other(format!("bad frame length {n}")));
        }
        let mut body = vec![0u8; n as usize];
        self.s.read_exact(&mut body)?;
        Ok(Bytes::from(body))
    }

    /// Send a request and wait for its reply (skipping watch events): (error code, body).
    fn call(&mut self, code: i32, body: &[u8]) -> std::io::Result<(i32, Reader)> {
        self.xid += 1;
        let mut b = BytesMut::new();
        b.int(self.xid);
        b.int(code);
        b.extend_from_slice(body);
        self.s.write_all(&frame(&b))?;
        loop {
            let mut r = Reader::new(self.recv()?);
            let bad = || std::io::Error::other("malformed reply header");
            let xid = r.int().map_err(|_| bad())?;
            let _zxid = r.long().map_err(|_| bad())?;
            let e = r.int().map_err(|_| bad())?;
            if xid == self.xid {
                return Ok((e, r));
            }
        }
    }

    fn create(&mut self, path: &str, data: &[u8]) -> std::io::Result<i32> {
        Ok(self.call(op::CREATE, &create_body(path, data))?.0)
    }

    fn set(&mut self, path: &str, data: &[u8]) -> std::io::Result<i32> {
        let mut b = BytesMut::new();
        b.string(path);
        b.buffer(data);
        b.int(-1);
        Ok(self.call(op::SET_DATA, &b)?.0)
    }

    fn get(&mut self, path: &str) -> std::io::Result<Result<Bytes, i32>> {
        let (e, mut r) = self.call(op::GET_DATA, &path_watch(path, false))?;
        if e != 0 {
            return Ok(Err(e));
        }
        Ok(Ok(r
            .buffer()
            .map_err(|_| std::io::Error::other("bad getData reply"))?))
    }
}

fn create_body(path: &str, data: &[u8]) -> BytesMut {
    let mut b = BytesMut::new();
    b.string(path);
    b.buffer(data);
    b.int(1);
    b.int(31);
    b.string("world");
    b.string("anyone");
    b.int(mode::PERSISTENT);
    b
}

fn path_watch(path: &str, watch: bool) -> BytesMut {
    let mut b = BytesMut::new();
    b.string(path);
    b.boolean(watch);
    b
}

// ------------------------------------------------------------------ the well-behaved client

#[derive(Default)]
struct ProbeStats {
    ops: AtomicU64,
    max_latency_us: AtomicU64,
    failures: Mutex<Vec<String>>,
}

/// On every node, a client writes its own znode and reads it back, over and over, checking the
/// value and timing every request.
fn start_probes(
    ports: Vec<u16>,
    stop: Arc<AtomicBool>,
    stats: Arc<ProbeStats>,
) -> Vec<thread::JoinHandle<()>> {
    ports
        .into_iter()
        .enumerate()
        .map(|(i, port)| {
            let stop = stop.clone();
            let stats = stats.clone();
            thread::spawn(move || {
                let path = format!("/probe{i}");
                let mut zk = Zk::connect(port).expect("probe connects");
                let e = zk.create(&path, b"0").expect("probe create");
                assert!(e == 0 || e == -110, "probe create: {e}");
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let value = format!("{n}");
                    let t = Instant::now();
                    let outcome = zk.set(&path, value.as_bytes()).and_then(|e| {
                        if e != 0 {
                            return Err(std::io::Error::other(format!("setData error {e}")));
                        }
                        match zk.get(&path)? {
                            Ok(v) if v == value.as_bytes() => Ok(()),
                            other => Err(std::io::Error::other(format!(
                                "read {other:?}, expected {value}"
                            ))),
                        }
                    });
                    let us = t.elapsed().as_micros() as u64;
                    stats.max_latency_us.fetch_max(us, Ordering::Relaxed);
                    stats.ops.fetch_add(1, Ordering::Relaxed);
                    if let Err(e) = outcome {
                        stats
                            .failures
                            .lock()
                            .unwrap()
                            .push(format!("node on port {port}: {e}"));
                        // Carry on with a fresh session so that one failure does not hide others.
                        thread::sleep(Duration::from_millis(200));
                        if let Ok(z) = Zk::connect(port) {
                            zk = z;
                        }
                    }
                    thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect()
}

// ------------------------------------------------------------------ attacks

/// Valid request bodies, to be mutated.
fn request_corpus() -> Vec<(i32, Vec<u8>)> {
    let mut v = vec![
        (op::CREATE, create_body("/fuzz/a", b"data").to_vec()),
        (op::EXISTS, path_watch("/probe0", true).to_vec()),
        (op::GET_DATA, path_watch("/big", true).to_vec()),
        (op::GET_CHILDREN2, path_watch("/", true).to_vec()),
        (op::PING, Vec::new()),
    ];
    let mut set = BytesMut::new();
    set.string("/fuzz");
    set.buffer(b"v");
    set.int(-1);
    v.push((op::SET_DATA, set.to_vec()));
    let mut w = BytesMut::new();
    w.long(0);
    for _ in 0..5 {
        w.strings(&["/a".into(), "/fuzz".into()]);
    }
    v.push((op::SET_WATCHES2, w.to_vec()));
    let mut auth = BytesMut::new();
    auth.int(0);
    auth.string("digest");
    auth.buffer(b"user:pw");
    v.push((op::AUTH, auth.to_vec()));
    v.push((op::SASL, sasl_body(b"")));
    v.push((
        op::SASL,
        sasl_body(b"username=\"bob\",nonce=\"x\",nc=00000001"),
    ));
    let mut m = BytesMut::new();
    m.int(op::CREATE);
    m.boolean(false);
    m.int(-1);
    m.extend_from_slice(&create_body("/fuzz/m", b""));
    m.int(op::DELETE);
    m.boolean(false);
    m.int(-1);
    m.string("/fuzz/m");
    m.int(-1);
    m.int(-1);
    m.boolean(true);
    m.int(-1);
    v.push((op::MULTI, m.to_vec()));
    v
}

/// A GetSASLRequest body: the token.
fn sasl_body(token: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    b.buffer(token);
    b.to_vec()
}

/// bob's DIGEST-MD5 response to a challenge (the cluster has the SASL user bob/bobsecret).
fn sasl_response(challenge: &[u8]) -> Vec<u8> {
    use synod_zk::sasl::{parse_directives, Secret, DIGEST_URI, REALM};
    let d = parse_directives(challenge).expect("a well-formed challenge");
    let nonce = d
        .iter()
        .find(|(n, _)| n == "nonce")
        .map(|(_, v)| v.clone())
        .expect("a nonce");
    let secret = Secret {
        username: b"bob",
        realm: REALM.as_bytes(),
        password: b"bobsecret",
        nonce: &nonce,
        cnonce: b"hostile",
        nc: b"00000001",
        authzid: None,
    };
    let response = secret.digest(format!("AUTHENTICATE:{DIGEST_URI}").as_bytes());
    format!(
        "charset=utf-8,username=\"bob\",realm=\"{REALM}\",nonce=\"{}\",nc=00000001,cnonce=\"hostile\",digest-uri=\"{DIGEST_URI}\",qop=auth,response={response}",
        String::from_utf8_lossy(&nonce)
    )
    .into_bytes()
}

/// SASL garbage on a session: a malformed request, malformed, mutated or oversized tokens
/// after the challenge, and steps past the end of a successful exchange. Each must end with
/// AUTHFAILED and the connection closed, within three steps; a correct exchange must succeed.
fn sasl_attack(rng: &mut SmallRng, port: u16) {
    let Ok(mut z) = Zk::connect(port) else {
        return;
    };
    const AUTH_FAILED: i32 = -115;
    let kind = rng.gen_range(0..5);
    if kind == 4 {
        // Not a GetSASLRequest: a buffer length past the end.
        let mut b = BytesMut::new();
        b.int(1 << 20);
        b.extend_from_slice(b"abc");
        let (e, _) = z.call(op::SASL, &b).expect("an answer");
        assert_eq!(e, AUTH_FAILED, "malformed SASL request");
        assert!(closed_within(&z.s, Duration::from_secs(3)));
        return;
    }
    let (e, mut r) = z.call(op::SASL, &sasl_body(b"")).expect("a challenge");
    assert_eq!(e, 0, "SASL challenge");
    let challenge = r.buffer().expect("a challenge token");
    let good = sasl_response(&challenge);
    let mut token = match kind {
        0 => random_bytes(rng, 600),
        1 => vec![b'a'; rng.gen_range(4097..200_000)],
        2 => mutate(rng, &good),
        _ => good.clone(),
    };
    for step in 0..3 {
        let Ok((e, _)) = z.call(op::SASL, &sasl_body(&token)) else {
            panic!("no answer to SASL step {step} (kind {kind})");
        };
        if e == AUTH_FAILED {
            assert!(
                closed_within(&z.s, Duration::from_secs(3)),
                "a failed SASL exchange must close the connection"
            );
            return;
        }
        assert_eq!(e, 0, "SASL step {step} (kind {kind})");
        assert!(
            kind >= 2 && step == 0,
            "only a response that means what bob's does may succeed (kind {kind}, step {step})"
        );
        token = random_bytes(rng, 100);
    }
    panic!("three SASL steps without an end (kind {kind})");
}

fn mutate(rng: &mut SmallRng, base: &[u8]) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..rng.gen_range(1..4) {
        match rng.gen_range(0..5) {
            0 if !v.is_empty() => {
                let i = rng.gen_range(0..v.len());
                v[i] ^= 1 << rng.gen_range(0..8);
            }
            1 => {
                let n = rng.gen_range(0..=v.len());
                v.truncate(n);
            }
            2 if v.len() >= 4 => {
                let i = rng.gen_range(0..v.len() - 3);
                let forged: u32 =
                    [u32::MAX, i32::MAX as u32, 1 << 20, 1 << 24, rng.gen()][rng.gen_range(0..5)];
                v[i..i + 4].copy_from_slice(&forged.to_be_bytes());
            }
            3 => {
                let i = rng.gen_range(0..=v.len());
                let junk: Vec<u8> = (0..rng.gen_range(1..32)).map(|_| rng.gen()).collect();
                v.splice(i..i, junk);
            }
            _ => {}
        }
    }
    v
}

fn random_bytes(rng: &mut SmallRng, max: usize) -> Vec<u8> {
    (0..rng.gen_range(0..max)).map(|_| rng.gen()).collect()
}

/// Open, send, linger briefly, close. Errors (the server closing on us) are expected.
fn send_and_close(port: u16, data: &[u8], linger: Duration) {
    if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
        let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
        let _ = s.write_all(data);
        if !linger.is_zero() {
            let _ = s.set_read_timeout(Some(linger));
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
        }
    }
}

/// One hostile client-port connection: garbage, a random frame, or a valid session followed
/// by random and mutated requests with random opcodes.
fn client_attack(rng: &mut SmallRng, port: u16, corpus: &[(i32, Vec<u8>)]) {
    match rng.gen_range(0..4) {
        0 => send_and_close(port, &random_bytes(rng, 512), Duration::ZERO),
        1 => {
            let mut d = frame(&random_bytes(rng, 256));
            if rng.gen_bool(0.5) {
                d[..4].copy_from_slice(&rng.gen::<u32>().to_be_bytes());
            }
            send_and_close(port, &d, Duration::from_millis(10));
        }
        2 => {
            // A mutated connect request.
            let c = connect_request(SESSION_TIMEOUT_MS);
            let mut body = mutate(rng, &c[4..]);
            if rng.gen_bool(0.3) {
                body = random_bytes(rng, 64);
            }
            send_and_close(port, &frame(&body), Duration::from_millis(10));
        }
        _ => {
            let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
                return;
            };
            let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            if s.write_all(&connect_request(SESSION_TIMEOUT_MS)).is_err() {
                return;
            }
            let mut data = Vec::new();
            for i in 0..rng.gen_range(1..20) {
                let (code, base) = &corpus[rng.gen_range(0..corpus.len())];
                let code = if rng.gen_bool(0.2) {
                    [rng.gen_range(-12..110), rng.gen()][rng.gen_range(0..2)]
                } else {
                    *code
                };
                let body = if rng.gen_bool(0.2) {
                    random_bytes(rng, 128)
                } else {
                    mutate(rng, base)
                };
                let mut b = BytesMut::new();
                b.int(i + 1);
                b.int(code);
                b.extend_from_slice(&body);
                data.extend_from_slice(&frame(&b));
            }
            let _ = s.write_all(&data);
            // Read whatever comes back for a moment, then hang up.
            let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
            let mut buf = vec![0u8; 64 << 10];
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        }
    }
}

fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A peer-transport frame: length, CRC32C, kind, data.
fn peer_frame(kind: u8, data: &[u8]) -> Vec<u8> {
    let mut body = vec![kind];
    body.extend_from_slice(data);
    let mut f = Vec::new();
    f.extend_from_slice(&(body.len() as u32).to_be_bytes());
    f.extend_from_slice(&crc32c(&body).to_be_bytes());
    f.extend_from_slice(&body);
    f
}

/// A hello (peer protocol version 2): magic, version, cluster id, node id, then the groups the
/// sender runs with their protocols (here group 0 only).
fn hello_data(cluster: &str, node: u32, protocol: &str) -> Vec<u8> {
    let mut d = Vec::new();
    d.extend_from_slice(&0x5359_4E44u32.to_be_bytes());
    d.extend_from_slice(&2u16.to_be_bytes());
    d.extend_from_slice(&(cluster.len() as u32).to_be_bytes());
    d.extend_from_slice(cluster.as_bytes());
    d.extend_from_slice(&node.to_be_bytes());
    d.extend_from_slice(&1u32.to_be_bytes());
    d.extend_from_slice(&0u32.to_be_bytes());
    d.extend_from_slice(&(protocol.len() as u32).to_be_bytes());
    d.extend_from_slice(protocol.as_bytes());
    d
}

/// Does `data` start with an intact hello frame of a member of the cluster? (The peer port has
/// no authentication: such a connection takes over that member's inbound connection. Mutation
/// can produce one by chance, e.g. node id 2 with a bit flipped to 3, or junk appended.)
fn is_member_hello(data: &[u8]) -> bool {
    let parse = || -> Option<bool> {
        let len = u32::from_be_bytes(data.get(..4)?.try_into().ok()?) as usize;
        let crc = u32::from_be_bytes(data.get(4..8)?.try_into().ok()?);
        let body = data.get(8..8 + len)?;
        if crc32c(body) != crc || body.first() != Some(&3) {
            return Some(false);
        }
        let mut d = &body[1..];
        let mut take = |n: usize| -> Option<&[u8]> {
            let (a, b) = (d.get(..n)?, d.get(n..)?);
            d = b;
            Some(a)
        };
        if take(6)? != [0x53, 0x59, 0x4E, 0x44, 0, 2] {
            return Some(false);
        }
        let n = u32::from_be_bytes(take(4)?.try_into().ok()?) as usize;
        let cluster = take(n)?;
        let node = u32::from_be_bytes(take(4)?.try_into().ok()?);
        // Any list of groups whose protocols do not contradict the cluster's is accepted.
        let groups = u32::from_be_bytes(take(4)?.try_into().ok()?);
        let mut agrees = true;
        for _ in 0..groups {
            let g = u32::from_be_bytes(take(4)?.try_into().ok()?);
            let n = u32::from_be_bytes(take(4)?.try_into().ok()?) as usize;
            let protocol = take(n)?;
            agrees &= g != 0 || protocol == b"zab";
        }
        Some(cluster == b"hostile" && agrees && (1..=3).contains(&node) && d.is_empty())
    };
    parse().unwrap_or(false)
}

/// One hostile peer-port connection: random bytes, a mutated hello (with a correct or a broken
/// checksum), a hello of another cluster, or a hello with a forged length.
fn peer_attack(rng: &mut SmallRng, port: u16) {
    let hello = hello_data("hostile", 2, "zab");
    let data = match rng.gen_range(0..5) {
        0 => random_bytes(rng, 512),
        1 => peer_frame(3, &mutate(rng, &hello)),
        2 => mutate(rng, &peer_frame(3, &hello)),
        3 => peer_frame(3, &hello_data("another", rng.gen_range(0..5), "zab")),
        _ => {
            let mut f = peer_frame(3, &hello);
            f[..4].copy_from_slice(&rng.gen::<u32>().to_be_bytes());
            f
        }
    };
    if is_member_hello(&data) {
        return; // impersonation is tested on its own, at the end
    }
    send_and_close(port, &data, Duration::from_millis(20));
}

/// An admin-port connection: random bytes, or a mutated HTTP request.
fn admin_attack(rng: &mut SmallRng, port: u16) {
    let req = b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n";
    let data = if rng.gen_bool(0.5) {
        random_bytes(rng, 512)
    } else {
        mutate(rng, req)
    };
    send_and_close(port, &data, Duration::from_millis(20));
}

/// Does the server still hold this connection open? Read from /proc/net/tcp, not from the
/// socket (reading would unblock a server stuck writing to it): once the server closes, its
/// end leaves ESTABLISHED (FIN_WAIT after a close, gone after a reset).
fn server_holds(s: &TcpStream) -> bool {
    let (Ok(local), Ok(peer)) = (s.local_addr(), s.peer_addr()) else {
        return false;
    };
    let server = format!("0100007F:{:04X}", peer.port());
    let client = format!("0100007F:{:04X}", local.port());
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[1] == server && f[2] == client && f[3] == "01"
    })
}

/// Is the connection closed by the server within `within`? (EOF or reset, not a timeout.)
fn closed_within(mut s: &TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let _ = s.set_read_timeout(Some(left));
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // a reply or an error frame: keep reading
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false
            }
            Err(_) => return true,
        }
    }
}

/// Run `f` on `threads` threads, each with its own seeded RNG, `per_thread` times.
fn swarm(threads: u64, per_thread: usize, f: impl Fn(&mut SmallRng) + Send + Sync + 'static) {
    let f = Arc::new(f);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let f = f.clone();
            thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(0x5EED ^ t);
                for _ in 0..per_thread {
                    f(&mut rng);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

// ------------------------------------------------------------------ memory

struct Memory {
    baseline: Vec<u64>,
    peak: Vec<u64>,
    /// Peak since the last report.
    phase_peak: Vec<u64>,
}

impl Memory {
    fn report(&mut self, c: &Cluster, phase: &str) {
        self.sample(c, phase);
        let now: Vec<u64> = c.nodes.iter().map(|n| n.rss_mb()).collect();
        eprintln!(
            "{phase}: RSS now {now:?} MB, peak in this phase {:?} MB",
            self.phase_peak
        );
        self.phase_peak = now;
    }
    fn sample(&mut self, c: &Cluster, phase: &str) {
        for (i, n) in c.nodes.iter().enumerate() {
            let rss = n.rss_mb();
            self.peak[i] = self.peak[i].max(rss);
            self.phase_peak[i] = self.phase_peak[i].max(rss);
            assert!(
                rss <= self.baseline[i] + RSS_BOUND_MB,
                "node {} uses {rss} MB during {phase} (baseline {} MB, bound +{RSS_BOUND_MB} MB)",
                n.id,
                self.baseline[i]
            );
        }
    }
}

// ------------------------------------------------------------------ the test

#[test]
fn servers_survive_hostile_input_on_every_port() {
    let started = Instant::now();
    let fd_limit = synod_server::raise_fd_limit();
    // Thousands of idle connections where the descriptor limit allows (this machine: 20 000);
    // fewer, with a note, where the hard limit is low, rather than fail on the test's own side.
    let idle_wanted = 2000usize
        .min(fd_limit.saturating_sub(1200) as usize)
        .max(200);
    if idle_wanted < 2000 {
        eprintln!(
            "note: open-file limit {fd_limit}: {idle_wanted} idle connections instead of 2000"
        );
    }
    let mut c = start_cluster();
    // Wait for a leader every node follows.
    wait_until("a leader on every node", 30, || {
        let st: Vec<_> = c.nodes.iter().map(status).collect::<Option<_>>()?;
        (st.iter().all(|s| s.2 == st[0].2 && s.2 != 0)).then_some(())
    });
    let ports: Vec<u16> = c.nodes.iter().map(|n| n.client).collect();
    wait_until("every node serving clients", 30, || {
        ports.iter().all(|&p| Zk::connect(p).is_ok()).then_some(())
    });
    let big = vec![0xABu8; 1_000_000];
    {
        let mut zk = Zk::connect(ports[0]).unwrap();
        assert_eq!(zk.create("/big", &big).unwrap(), 0);
        assert_eq!(zk.create("/fuzz", b"").unwrap(), 0);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let probe = Arc::new(ProbeStats::default());
    let probes = start_probes(ports.clone(), stop.clone(), probe.clone());
    thread::sleep(Duration::from_millis(500));
    let mut mem = Memory {
        baseline: c.nodes.iter().map(|n| n.rss_mb()).collect(),
        peak: vec![0; 3],
        phase_peak: vec![0; 3],
    };
    eprintln!("baseline RSS (MB): {:?}", mem.baseline);
    let corpus = Arc::new(request_corpus());

    // 1. Random and mutated frames on the client port of every node: 600 connections.
    let t = Instant::now();
    {
        let ports = ports.clone();
        let corpus = corpus.clone();
        swarm(6, 100, move |rng| {
            let port = ports[rng.gen_range(0..ports.len())];
            client_attack(rng, port, &corpus);
        });
    }
    c.assert_alive();
    mem.report(&c, "client-port fuzzing");
    eprintln!("client-port fuzzing: {:?}", t.elapsed());

    // 1b. SASL garbage: malformed, oversized and surplus tokens, 200 sessions.
    let t = Instant::now();
    {
        let ports = ports.clone();
        swarm(4, 50, move |rng| {
            let port = ports[rng.gen_range(0..ports.len())];
            sasl_attack(rng, port);
        });
    }
    c.assert_alive();
    mem.report(&c, "SASL garbage");
    eprintln!("SASL garbage: {:?}", t.elapsed());

    // 2. Random bytes and mutated hellos on the peer port, garbage on the admin port.
    let t = Instant::now();
    {
        let peers: Vec<u16> = c.nodes.iter().map(|n| n.peer).collect();
        let admins: Vec<u16> = c.nodes.iter().map(|n| n.admin).collect();
        swarm(4, 100, move |rng| {
            let peer = peers[rng.gen_range(0..peers.len())];
            peer_attack(rng, peer);
            let admin = admins[rng.gen_range(0..admins.len())];
            admin_attack(rng, admin);
        });
    }
    c.assert_alive();
    mem.report(&c, "peer and admin fuzzing");
    eprintln!("peer and admin fuzzing: {:?}", t.elapsed());

    // 3. Stalled frames and idle connections, all at once, on every port of every node:
    //    * a claimed 1 MB request with a few bytes of it, before the connect request;
    //    * a session, then a 1 MB request of which all but one byte arrive;
    //    * a length prefix over jute.maxbuffer (closed at once);
    //    * peer hellos that claim a megabyte, and admin requests cut off inside the headers;
    //    * 2000 connections that send nothing at all.
    let t = Instant::now();
    let mut stalled_pre: Vec<TcpStream> = Vec::new();
    let mut stalled_post: Vec<TcpStream> = Vec::new();
    let mut over: Vec<TcpStream> = Vec::new();
    let mut stalled_peer: Vec<TcpStream> = Vec::new();
    let mut stalled_admin: Vec<TcpStream> = Vec::new();
    for n in &c.nodes {
        for _ in 0..50 {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", n.client)) {
                let _ = s.write_all(&(1i32 << 20).to_be_bytes()[..]);
                let _ = s.write_all(&[1, 2, 3]);
                stalled_pre.push(s);
            }
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", n.peer)) {
                let _ = s.write_all(&(1u32 << 20).to_be_bytes());
                let _ = s.write_all(&[0, 0, 0, 0, 3]);
                stalled_peer.push(s);
            }
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", n.admin)) {
                let _ = s.write_all(b"GET /v1/status HTTP/1.1\r\nHost: loc");
                stalled_admin.push(s);
            }
        }
        for _ in 0..20 {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", n.client)) {
                let _ = s.write_all(&(MAX_BUFFER as i32 + 1).to_be_bytes());
                over.push(s);
            }
        }
    }
    // Sessions that stall inside a 1 MB request: memory really held by the server.
    let stalled_post_threads: Vec<_> = ports
        .iter()
        .map(|&port| {
            thread::spawn(move || {
                let mut v = Vec::new();
                for _ in 0..40 {
                    let Ok(mut zk) = Zk::connect(port) else {
                        continue;
                    };
                    let mut b = BytesMut::new();
                    b.int(1);
                    b.int(op::SET_DATA);
                    b.string("/fuzz");
                    b.buffer(&vec![7u8; MAX_BUFFER - 40]);
                    b.int(-1);
                    let f = frame(&b);
                    let _ = zk.s.write_all(&f[..f.len() - 1]);
                    v.push(zk.s);
                }
                v
            })
        })
        .collect();
    for h in stalled_post_threads {
        stalled_post.extend(h.join().unwrap());
    }
    eprintln!("  stalled connections opened: {:?}", t.elapsed());
    let mut idle: Vec<TcpStream> = Vec::new();
    for i in 0..idle_wanted {
        let n = &c.nodes[i % 3];
        let port = [n.client, n.client, n.peer, n.admin][i % 4];
        if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
            idle.push(s);
        }
    }
    eprintln!(
        "opened {} stalled, {} stalled sessions, {} over the limit, {} idle connections",
        stalled_pre.len() + stalled_peer.len() + stalled_admin.len(),
        stalled_post.len(),
        over.len(),
        idle.len()
    );
    eprintln!("  idle connections opened: {:?}", t.elapsed());
    assert!(
        idle.len() >= idle_wanted * 95 / 100,
        "the test opened its idle connections"
    );
    mem.report(&c, "stalled and idle connections open");
    for s in &over {
        assert!(
            closed_within(s, Duration::from_secs(2)),
            "a length prefix over jute.maxbuffer closes the connection"
        );
    }
    // Everything that never completes its handshake is closed after the handshake timeout
    // (the peer port's hello timeout is 5 s).
    let handshake = Duration::from_millis(HANDSHAKE_TIMEOUT_MS);
    thread::sleep(handshake);
    mem.sample(&c, "stalled and idle connections");
    let grace = Duration::from_secs(5);
    for s in stalled_pre.iter().chain(stalled_admin.iter()) {
        assert!(
            closed_within(s, grace),
            "a connection stalled in its handshake is closed"
        );
    }
    for s in stalled_peer.iter() {
        assert!(closed_within(s, grace), "a stalled peer hello is closed");
    }
    let open = idle
        .iter()
        .filter(|s| !closed_within(s, Duration::from_millis(10)))
        .count();
    let open = if open > 0 {
        thread::sleep(grace);
        idle.iter()
            .filter(|s| !closed_within(s, Duration::from_millis(10)))
            .count()
    } else {
        0
    };
    assert_eq!(
        open, 0,
        "idle connections are closed after the handshake timeout"
    );
    // A session stalled inside a request frame is closed within its session timeout.
    for s in stalled_post.iter() {
        assert!(
            closed_within(s, Duration::from_millis(SESSION_TIMEOUT_MS as u64 * 2)),
            "a session stalled inside a frame is closed"
        );
    }
    c.assert_alive();
    mem.report(&c, "stalled and idle connections closed");
    drop((
        stalled_pre,
        stalled_post,
        over,
        stalled_peer,
        stalled_admin,
        idle,
    ));
    eprintln!("stalled and idle connections: {:?}", t.elapsed());

    // 4. Clients that never read: pipelined getData of the 1 MB znode (behind a write, so
    //    that replies pile up), and a recursive watch on / while another client writes.
    let t = Instant::now();
    let mut deaf: Vec<TcpStream> = Vec::new();
    for &port in &ports {
        for _ in 0..6 {
            let Ok(mut zk) = Zk::connect(port) else {
                continue;
            };
            let _ = zk.s.set_write_timeout(Some(Duration::from_millis(500)));
            let mut data = Vec::new();
            for i in 0..600 {
                let mut b = BytesMut::new();
                b.int(i + 1);
                if i % 100 == 0 {
                    b.int(op::SET_DATA);
                    b.string("/fuzz");
                    b.buffer(b"x");
                    b.int(-1);
                } else {
                    b.int(op::GET_DATA);
                    b.extend_from_slice(&path_watch("/big", false));
                }
                data.extend_from_slice(&frame(&b));
            }
            let _ = zk.s.write_all(&data);
            deaf.push(zk.s);
        }
        for _ in 0..2 {
            let Ok(mut zk) = Zk::connect(port) else {
                continue;
            };
            let mut b = BytesMut::new();
            b.int(1);
            b.int(op::ADD_WATCH);
            b.string("/");
            b.int(1);
            let _ = zk.s.write_all(&frame(&b));
            deaf.push(zk.s);
        }
    }
    {
        let mut zk = Zk::connect(ports[1]).unwrap();
        let long = "w".repeat(200);
        for i in 0..3000 {
            let e = zk.create(&format!("/fuzz/{long}{i}"), b"").unwrap();
            assert!(e == 0 || e == -110, "create: {e}");
            if i % 500 == 0 {
                mem.sample(&c, "clients that never read");
            }
        }
    }
    // Each is closed by its write timeout, its event queue overflowing or its session
    // expiring, whichever comes first.
    let t_close = Instant::now();
    wait_until(
        "the server to close every client that never reads",
        20,
        || {
            mem.sample(&c, "clients that never read");
            let open = deaf.iter().filter(|s| server_holds(s)).count();
            (open == 0).then_some(())
        },
    );
    eprintln!(
        "  clients that never read all closed {:?} after the writes ended",
        t_close.elapsed()
    );
    c.assert_alive();
    mem.report(&c, "clients that never read");
    drop(deaf);
    eprintln!("clients that never read: {:?}", t.elapsed());

    // The attack is over: the well-behaved clients never failed and stayed fast.
    stop.store(true, Ordering::Relaxed);
    for p in probes {
        p.join().unwrap();
    }
    let failures = probe.failures.lock().unwrap().clone();
    let max_latency = Duration::from_micros(probe.max_latency_us.load(Ordering::Relaxed));
    eprintln!(
        "well-behaved clients: {} ops, max latency {max_latency:?}, {} failures",
        probe.ops.load(Ordering::Relaxed),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "well-behaved clients failed: {failures:?}"
    );
    assert!(
        max_latency <= LATENCY_BOUND,
        "a well-behaved request took {max_latency:?}"
    );

    // Replication still works: a write through each node reaches every node.
    for (i, &port) in ports.iter().enumerate() {
        let mut zk = Zk::connect(port).unwrap();
        assert_eq!(zk.create(&format!("/after{i}"), b"ok").unwrap(), 0);
    }
    let (applied, _) = wait_until("every node applies the same state", 30, || {
        let st: Vec<_> = c.nodes.iter().map(status).collect::<Option<_>>()?;
        st.iter()
            .all(|s| s.0 == st[0].0 && s.1 == st[0].1)
            .then_some((st[0].0, st[0].1))
    });
    for &port in &ports {
        let mut zk = Zk::connect(port).unwrap();
        for i in 0..3 {
            assert_eq!(
                zk.get(&format!("/after{i}")).unwrap().unwrap(),
                &b"ok"[..],
                "a write replicated to every node"
            );
        }
    }
    eprintln!("replicated: every node at slot {applied}");

    // Impersonation: the peer port has no authentication, so a connection with a valid hello
    // of member 2 takes over member 2's inbound connection on nodes 1 and 3, then sends
    // garbage. The real member reconnects and replication carries on.
    for n in &c.nodes {
        if n.id == 2 {
            continue;
        }
        let mut d = peer_frame(3, &hello_data("hostile", 2, "zab"));
        d.extend_from_slice(&peer_frame(0, b"\xFF\xFF garbage"));
        d.extend_from_slice(&[0xAB; 64]);
        send_and_close(n.peer, &d, Duration::from_millis(200));
    }
    for (i, &port) in ports.iter().enumerate() {
        let path = format!("/after-spoof{i}");
        wait_until("a write after impersonation", 30, || {
            let mut zk = Zk::connect(port).ok()?;
            matches!(zk.create(&path, b"ok").ok()?, 0 | -110).then_some(())
        });
    }
    wait_until(
        "every node applies the same state after impersonation",
        30,
        || {
            let st: Vec<_> = c.nodes.iter().map(status).collect::<Option<_>>()?;
            st.iter()
                .all(|s| s.0 == st[0].0 && s.1 == st[0].1)
                .then_some(())
        },
    );
    for &port in &ports {
        let mut zk = Zk::connect(port).unwrap();
        for i in 0..3 {
            assert_eq!(
                zk.get(&format!("/after-spoof{i}")).unwrap().unwrap(),
                &b"ok"[..]
            );
        }
    }
    eprintln!("replication survived impersonation of a member");

    // Memory falls back once the attackers are gone.
    let settled = wait_until("memory to fall back", 20, || {
        let now: Vec<u64> = c.nodes.iter().map(|n| n.rss_mb()).collect();
        now.iter()
            .zip(&mem.baseline)
            .all(|(n, b)| *n <= b + RSS_BOUND_MB / 3)
            .then_some(now)
    });
    eprintln!(
        "RSS (MB): baseline {:?}, peak {:?}, after {:?}",
        mem.baseline, mem.peak, settled
    );
    c.assert_alive();
    let _ = std::io::stderr().flush();
    // Every defence said what it did, naming its configuration key.
    let logs: String = c.nodes.iter().map(|n| n.log_text()).collect();
    eprintln!(
        "server log lines (rate-limited warnings): {}",
        logs.lines().count()
    );
    for expected in [
        "zookeeper.handshake_timeout_ms",
        "jute.maxbuffer",
        "did not arrive within the session timeout",
        "zookeeper.write_timeout_ms",
        "limits.max_peer_handshakes",
        "refusing peer connection",
    ] {
        assert!(
            logs.contains(expected),
            "no log message mentions {expected:?}"
        );
    }
    for n in &c.nodes {
        let log = n.log_text();
        assert!(
            !log.contains("panicked"),
            "node {} panicked:\n{}",
            n.id,
            tail(&log)
        );
    }
    eprintln!("hostile test: {:?}", started.elapsed());
}
