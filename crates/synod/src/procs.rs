//! Local clusters of real processes on loopback: synod, Apache ZooKeeper 3.8 (Debian's
//! `zookeeper` package) and etcd 3.4 (Debian's `etcd-server`). The benchmark and the chaos
//! harness start, kill, pause and restart nodes through this module.
//!
//! Ports of node i (1-based) from a base B: client B+i, peer B+700+i, admin / election B+800+i
//! (the admin offset can be changed: `synod dev` uses B+7000+i).

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A tiny HTTP/1.0 request to a synod admin port (blocking, 2 s timeouts): the body of a 200
/// answer, or an error naming the status line.
pub fn admin_http(addr: &str, method: &str, path: &str) -> Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr.parse()?, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n"
    )?;
    let mut out = String::new();
    s.take(4 << 20).read_to_string(&mut out)?;
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!(
            "{method} {path} at {addr}: {}",
            head.lines().next().unwrap_or("")
        );
    }
    Ok(body.to_string())
}

/// The value of one Prometheus sample (full name with its labels) in a `/metrics` text.
pub fn metric(text: &str, sample: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
}

/// User + system CPU time of a process in clock ticks (see [`clock_ticks_per_second`]), from
/// /proc/<pid>/stat; None if it is gone.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    stat_cpu_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// utime + stime (fields 14 and 15) of a /proc/<pid>/stat line. The command name (field 2) is
/// in parentheses and may itself hold spaces and parentheses, so the fields are counted from
/// the last ')'. None if the line is malformed.
pub fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // From the state (field 3): utime and stime are the 12th and 13th after the name.
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    utime.checked_add(stime)
}

/// The kernel's clock ticks per second (`sysconf(_SC_CLK_TCK)`; 100, Linux's USER_HZ, if it
/// cannot be read).
pub fn clock_ticks_per_second() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&t| t > 0)
        .unwrap_or(100) as u64
}

/// Refuse, before any process starts, a protocol synod's server does not run.
pub fn check_protocol(protocol: &str) -> Result<()> {
    if synod_server::protocol::family(protocol).is_none() {
        bail!(
            "--protocol {protocol}: not a protocol of synod (supported: {})",
            synod_server::protocol::names().join(", ")
        );
    }
    Ok(())
}

/// Where Debian's zookeeper package puts the server's classes.
pub const ZK_JAR: &str = "/usr/share/java/zookeeper.jar";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// synod with a replication protocol and `--set key=value` overrides for every node.
    Synod {
        protocol: String,
        sets: Vec<String>,
    },
    ZooKeeper,
    Etcd,
}

impl Kind {
    pub fn name(&self) -> String {
        match self {
            Kind::Synod { protocol, .. } => format!("synod-{protocol}"),
            Kind::ZooKeeper => "zookeeper".into(),
            Kind::Etcd => "etcd".into(),
        }
    }
    /// Whether clients talk to it with the ZooKeeper protocol (else etcd's gRPC API).
    pub fn speaks_zk(&self) -> bool {
        !matches!(self, Kind::Etcd)
    }
}

struct Node {
    child: Option<Child>,
    paused: bool,
}

/// A running cluster. Dropping it kills every node.
pub struct Cluster {
    pub kind: Kind,
    pub n: u32,
    pub base: u16,
    pub dir: PathBuf,
    /// synod's admin port of node i is `base + admin_offset + i`.
    pub admin_offset: u32,
    /// Serve SconeKV: node i's KV gRPC listener is `kv_port + i - 1` (with `kv.buckets = 3`
    /// unless a `--set` says otherwise).
    pub kv_port: Option<u16>,
    /// Serve etcd's API: node i's etcd gRPC listener is [`Cluster::etcd_addr`].
    pub etcd_port: Option<u16>,
    /// Certificates made by `synod certs dev` (node-<i>.crt …) for mutual TLS between the
    /// replicas and TLS on their client ports; `None` runs them with `insecure = true`.
    pub tls: Option<PathBuf>,
    nodes: Vec<Node>,
    synod_exe: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

/// Is a program on PATH?
pub fn have(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false)
}

/// What is missing to run `kind`, in words an operator can act on.
pub fn missing(kind: &Kind) -> Option<String> {
    match kind {
        Kind::Synod { .. } => None,
        Kind::ZooKeeper => (!Path::new(ZK_JAR).exists() || !have("java")).then(|| {
            "Apache ZooKeeper is not installed (sudo apt-get install zookeeper)".to_string()
        }),
        Kind::Etcd => (!have("etcd"))
            .then(|| "etcd is not installed (sudo apt-get install etcd-server)".into()),
    }
}

/// The version a system reports, for the record of a benchmark run.
pub fn version(kind: &Kind) -> String {
    match kind {
        Kind::Synod { .. } => format!("synod {}", env!("CARGO_PKG_VERSION")),
        Kind::ZooKeeper => {
            let out = Command::new("dpkg-query")
                .args(["-W", "-f", "${Version}", "zookeeper"])
                .output();
            match out {
                Ok(o) if o.status.success() => {
                    format!("zookeeper {}", String::from_utf8_lossy(&o.stdout))
                }
                _ => "zookeeper (version unknown)".into(),
            }
        }
        Kind::Etcd => match Command::new("etcd").arg("--version").output() {
            Ok(o) => String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("etcd")
                .to_string(),
            Err(_) => "etcd (not found)".into(),
        },
    }
}

impl Cluster {
    /// Prepare (but do not start) an `n`-node cluster in `dir` (a fresh temporary directory if
    /// None).
    pub fn new(kind: Kind, n: u32, base: u16, dir: Option<PathBuf>) -> Result<Cluster> {
        if let Some(why) = missing(&kind) {
            bail!("{why}");
        }
        if base as u32 + 900 + n > 65535 {
            bail!("base port {base} too high");
        }
        let (dir, temp) = match dir {
            Some(d) => {
                std::fs::create_dir_all(&d)?;
                (d, None)
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix("synod-cluster-")
                    .tempdir()?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let synod_exe = std::env::current_exe().context("cannot find the synod executable")?;
        Ok(Cluster {
            kind,
            n,
            base,
            dir,
            admin_offset: 800,
            kv_port: None,
            etcd_port: None,
            tls: None,
            nodes: (0..n)
                .map(|_| Node {
                    child: None,
                    paused: false,
                })
                .collect(),
            synod_exe,
            _temp: temp,
        })
    }

    pub fn client_addr(&self, i: u32) -> String {
        format!("127.0.0.1:{}", self.base as u32 + i)
    }
    /// Node i's ZooKeeper port over TLS (with `tls`).
    pub fn secure_client_addr(&self, i: u32) -> String {
        format!("127.0.0.1:{}", self.base as u32 + 100 + i)
    }
    pub fn admin_addr(&self, i: u32) -> String {
        format!("127.0.0.1:{}", self.base as u32 + self.admin_offset + i)
    }
    /// Node i's KV gRPC address (with `kv_port`).
    pub fn kv_addr(&self, i: u32) -> String {
        format!("127.0.0.1:{}", self.kv_port.unwrap_or(2479) as u32 + i - 1)
    }
    /// Node i's etcd gRPC address (with `etcd_port`): from 2379, etcd's Procfile ports (2379,
    /// 22379, 32379, … up to 62379, then 2379 + 1000 + i); from any other port, consecutive
    /// ports.
    pub fn etcd_addr(&self, i: u32) -> String {
        let base = self.etcd_port.unwrap_or(2379) as u32;
        let port = match (base, i) {
            (_, 1) => base,
            (2379, 2..=6) => base + 10_000 * i,
            (2379, _) => base + 1000 + i,
            _ => base + i - 1,
        };
        format!("127.0.0.1:{port}")
    }
    pub fn etcd_addrs(&self) -> Vec<String> {
        (1..=self.n).map(|i| self.etcd_addr(i)).collect()
    }
    pub fn kv_addrs(&self) -> Vec<String> {
        (1..=self.n).map(|i| self.kv_addr(i)).collect()
    }
    pub fn client_addrs(&self) -> Vec<String> {
        (1..=self.n).map(|i| self.client_addr(i)).collect()
    }
    pub fn peer_port(&self, i: u32) -> u32 {
        self.base as u32 + 700 + i
    }

    pub fn start_all(&mut self) -> Result<()> {
        for i in 1..=self.n {
            self.start(i)?;
        }
        Ok(())
    }

    /// Start node i (again, after a kill: its data directory is kept).
    pub fn start(&mut self, i: u32) -> Result<()> {
        if self.is_running(i) {
            return Ok(());
        }
        let child = match &self.kind {
            Kind::Synod { protocol, sets } => self.start_synod(i, protocol, sets)?,
            Kind::ZooKeeper => self.start_zookeeper(i)?,
            Kind::Etcd => self.start_etcd(i)?,
        };
        let node = &mut self.nodes[i as usize - 1];
        node.child = Some(child);
        node.paused = false;
        Ok(())
    }

    fn log_file(&self, i: u32) -> Result<std::fs::File> {
        Ok(std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("node{i}.log")))?)
    }

    fn start_synod(&self, i: u32, protocol: &str, sets: &[String]) -> Result<Child> {
        let mut peers = toml::Table::new();
        for j in 1..=self.n {
            peers.insert(
                j.to_string(),
                format!("127.0.0.1:{}", self.peer_port(j)).into(),
            );
        }
        let mut cfg = toml::Table::new();
        cfg.insert("cluster_id".into(), "synod-local".into());
        cfg.insert("node_id".into(), (i as i64).into());
        cfg.insert("protocol".into(), protocol.into());
        cfg.insert("peers".into(), peers.into());
        cfg.insert("client_addr".into(), self.client_addr(i).into());
        cfg.insert("admin_addr".into(), self.admin_addr(i).into());
        cfg.insert(
            "data_dir".into(),
            self.dir
                .join(format!("node{i}"))
                .display()
                .to_string()
                .into(),
        );
        cfg.insert("log_level".into(), "warn".into());
        match &self.tls {
            Some(d) => {
                let mut tls = toml::Table::new();
                let path = |f: String| d.join(f).display().to_string();
                tls.insert("ca_file".into(), path("ca.crt".into()).into());
                tls.insert("cert_file".into(), path(format!("node-{i}.crt")).into());
                tls.insert("key_file".into(), path(format!("node-{i}.key")).into());
                cfg.insert("tls".into(), tls.into());
                cfg.insert(
                    "secure_client_addr".into(),
                    self.secure_client_addr(i).into(),
                );
            }
            None => {
                cfg.insert("insecure".into(), true.into());
            }
        }
        // As the ZooKeeper of the same harness (maxClientCnxns=0): the load comes from one
        // address.
        let mut zk = toml::Table::new();
        zk.insert("max_client_cnxns".into(), 0.into());
        cfg.insert("zookeeper".into(), zk.into());
        if self.kv_port.is_some() {
            let mut addrs = toml::Table::new();
            for j in 1..=self.n {
                addrs.insert(j.to_string(), self.kv_addr(j).into());
            }
            let mut kv = toml::Table::new();
            kv.insert("buckets".into(), 3.into());
            kv.insert("listen".into(), self.kv_addr(i).into());
            kv.insert("addrs".into(), addrs.into());
            cfg.insert("kv".into(), kv.into());
        }
        if self.etcd_port.is_some() {
            let scheme = if self.tls.is_some() { "https" } else { "http" };
            let mut addrs = toml::Table::new();
            for j in 1..=self.n {
                addrs.insert(
                    j.to_string(),
                    format!("{scheme}://{}", self.etcd_addr(j)).into(),
                );
            }
            let mut etcd = toml::Table::new();
            etcd.insert("enabled".into(), true.into());
            etcd.insert("listen".into(), self.etcd_addr(i).into());
            etcd.insert("addrs".into(), addrs.into());
            cfg.insert("etcd".into(), etcd.into());
        }
        let path = self.dir.join(format!("node{i}.toml"));
        // The overrides go on the command line; the header says so, so that the file with them
        // starts the node by hand exactly as here.
        let mut header = String::from("# Started as: synod server --config THIS_FILE");
        for s in sets.iter() {
            header.push_str(&format!(" --set '{s}'"));
        }
        std::fs::write(&path, format!("{header}\n{}", toml::to_string(&cfg)?))?;
        let log = self.log_file(i)?;
        let mut cmd = Command::new(&self.synod_exe);
        cmd.arg("server").arg("--config").arg(&path);
        for s in sets {
            cmd.arg("--set").arg(s);
        }
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start synod node {i}"))
    }

    fn start_zookeeper(&self, i: u32) -> Result<Child> {
        let d = self.dir.join(format!("zk{i}"));
        std::fs::create_dir_all(d.join("data"))?;
        std::fs::write(d.join("data/myid"), format!("{i}\n"))?;
        let mut servers = String::new();
        for j in 1..=self.n {
            servers += &format!(
                "server.{j}=127.0.0.1:{}:{}\n",
                self.peer_port(j),
                self.base as u32 + 800 + j
            );
        }
        std::fs::write(
            d.join("zoo.cfg"),
            format!(
                "tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir={}\nclientPort={}\n\
                 clientPortAddress=127.0.0.1\nforceSync=yes\nmaxClientCnxns=0\n\
                 4lw.commands.whitelist=*\nadmin.enableServer=false\n{servers}",
                d.join("data").display(),
                self.base as u32 + i
            ),
        )?;
        std::fs::write(
            d.join("log4j.properties"),
            format!(
                "log4j.rootLogger=WARN, F\nlog4j.appender.F=org.apache.log4j.FileAppender\n\
                 log4j.appender.F.File={}/zk.log\n\
                 log4j.appender.F.layout=org.apache.log4j.PatternLayout\n",
                d.display()
            ),
        )?;
        let log = self.log_file(i)?;
        // The JVM's defaults (heap up to a quarter of RAM) as a packaged install would run it,
        // plus the class path: Debian's zkServer.sh adds nothing that changes performance.
        Command::new("java")
            .arg(format!(
                "-Dlog4j.configuration=file:{}/log4j.properties",
                d.display()
            ))
            .arg("-cp")
            .arg(format!("{}:{ZK_JAR}", d.display()))
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(d.join("zoo.cfg"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start java (ZooKeeper)")
    }

    fn start_etcd(&self, i: u32) -> Result<Child> {
        let cluster: Vec<String> = (1..=self.n)
            .map(|j| format!("n{j}=http://127.0.0.1:{}", self.peer_port(j)))
            .collect();
        let data = self.dir.join(format!("etcd{i}"));
        let state = if data.exists() { "existing" } else { "new" };
        let log = self.log_file(i)?;
        Command::new("etcd")
            .arg("--name")
            .arg(format!("n{i}"))
            .arg("--data-dir")
            .arg(&data)
            .arg("--listen-client-urls")
            .arg(format!("http://{}", self.client_addr(i)))
            .arg("--advertise-client-urls")
            .arg(format!("http://{}", self.client_addr(i)))
            .arg("--listen-peer-urls")
            .arg(format!("http://127.0.0.1:{}", self.peer_port(i)))
            .arg("--initial-advertise-peer-urls")
            .arg(format!("http://127.0.0.1:{}", self.peer_port(i)))
            .arg("--initial-cluster")
            .arg(cluster.join(","))
            .arg("--initial-cluster-state")
            .arg(state)
            .arg("--initial-cluster-token")
            .arg("synod-bench")
            .arg("--log-level")
            .arg("warn")
            .arg("--logger")
            .arg("zap")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start etcd")
    }

    pub fn is_running(&mut self, i: u32) -> bool {
        let node = &mut self.nodes[i as usize - 1];
        match &mut node.child {
            Some(c) => match c.try_wait() {
                Ok(None) => true,
                _ => {
                    node.child = None;
                    false
                }
            },
            None => false,
        }
    }

    pub fn pid(&self, i: u32) -> Option<u32> {
        self.nodes[i as usize - 1].child.as_ref().map(|c| c.id())
    }

    fn signal(&self, i: u32, sig: Signal) {
        if let Some(pid) = self.pid(i) {
            let _ = kill(Pid::from_raw(pid as i32), sig);
        }
    }

    /// kill -9, and reap.
    pub fn kill(&mut self, i: u32) {
        self.signal(i, Signal::SIGKILL);
        let node = &mut self.nodes[i as usize - 1];
        if let Some(mut c) = node.child.take() {
            let _ = c.wait();
        }
        node.paused = false;
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub fn stop(&mut self, i: u32, grace: Duration) {
        self.resume(i);
        self.signal(i, Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while self.is_running(i) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill(i);
    }

    pub fn pause(&mut self, i: u32) {
        self.signal(i, Signal::SIGSTOP);
        self.nodes[i as usize - 1].paused = true;
    }

    pub fn resume(&mut self, i: u32) {
        if self.nodes[i as usize - 1].paused {
            self.signal(i, Signal::SIGCONT);
            self.nodes[i as usize - 1].paused = false;
        }
    }

    pub fn is_paused(&self, i: u32) -> bool {
        self.nodes[i as usize - 1].paused
    }

    /// Resident memory of node i in bytes (from /proc), if it runs.
    pub fn rss_bytes(&self, i: u32) -> Option<u64> {
        let pid = self.pid(i)?;
        let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    }

    /// CPU time (user + system) of node i in seconds, if it runs.
    pub fn cpu_seconds(&self, i: u32) -> Option<f64> {
        Some(cpu_ticks(self.pid(i)?)? as f64 / clock_ticks_per_second() as f64)
    }

    /// The tail of node i's log, for error messages.
    pub fn log_tail(&self, i: u32, lines: usize) -> String {
        let s = std::fs::read_to_string(self.dir.join(format!("node{i}.log"))).unwrap_or_default();
        let v: Vec<&str> = s.lines().collect();
        v[v.len().saturating_sub(lines)..].join("\n")
    }

    pub fn stop_all(&mut self) {
        for i in 1..=self.n {
            self.stop(i, Duration::from_secs(10));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 1..=self.n {
            self.resume(i);
            self.kill(i);
        }
    }
}
