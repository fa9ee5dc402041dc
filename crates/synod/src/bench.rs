//! `synod bench`: a closed-loop load generator that drives synod, Apache ZooKeeper (both through
//! the ZooKeeper client protocol) and etcd (through its v3 gRPC API, with the `etcd` feature),
//! and `synod bench compare | protocols | memory`, which start the clusters themselves and write
//! results under docs/results/.
//!
//! Every client is one session with one request outstanding (closed loop). Latency is recorded
//! in an HDR histogram per client (nanoseconds, 3 significant digits) during the measured window
//! only; the warm-up is discarded.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::procs::{Cluster, Kind};
use crate::zkclient::ZkSession;

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    cmd: Option<BenchCmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum BenchCmd {
    /// Start synod, ZooKeeper 3.8 and etcd 3.4 (3 nodes each, one system at a time), run the
    /// same matrix against each and write docs/results/compare.{md,json,svg}.
    Compare(CompareArgs),
    /// Compare synod's own replication protocols on real processes (N = 3 and 5).
    Protocols(ProtocolArgs),
    /// Resident memory of a node holding many znodes, synod against ZooKeeper.
    Memory(MemoryArgs),
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Servers: `zk:host:port,host:port,…` (synod or ZooKeeper) or `etcd:host:port,…`.
    #[arg(
        long,
        default_value = "zk:127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183"
    )]
    target: String,
    /// Concurrent clients, one session each, spread round-robin over the servers.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Measured time (e.g. 10s, 500ms, 2m).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Warm-up before measuring (not recorded).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    warmup: Duration,
    /// Percentage of operations that write (the rest read).
    #[arg(long, default_value_t = 100)]
    write_ratio: u32,
    /// Bytes per value.
    #[arg(long, default_value_t = 1024)]
    value_size: usize,
    /// Number of keys.
    #[arg(long, default_value_t = 1000)]
    keys: usize,
    /// Key distribution: uniform or zipfian (θ = 0.99).
    #[arg(long, default_value = "uniform")]
    dist: String,
    /// Write operation: set (setData / put) or create-delete (create then delete a private
    /// key). Reads are getData / get.
    #[arg(long, default_value = "set")]
    op: String,
    /// Requests slower than this count as errors (the session is then reopened).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    op_timeout: Duration,
    /// Write the result as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// No progress line.
    #[arg(long)]
    quiet: bool,
}

/// Parse `10s`, `500ms`, `2m`, `1h` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, mul) = if let Some(v) = s.strip_suffix("ms") {
        (v, 0.001)
    } else if let Some(v) = s.strip_suffix('s') {
        (v, 1.0)
    } else if let Some(v) = s.strip_suffix('m') {
        (v, 60.0)
    } else if let Some(v) = s.strip_suffix('h') {
        (v, 3600.0)
    } else {
        (s, 1.0)
    };
    let x: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a duration (e.g. 10s, 500ms, 2m)"))?;
    if !(x >= 0.0 && x * mul < 1e7) {
        return Err(format!("'{s}' is out of range"));
    }
    Ok(Duration::from_secs_f64(x * mul))
}

/// One run's figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunResult {
    pub system: String,
    pub clients: usize,
    pub write_ratio: u32,
    pub value_size: usize,
    pub keys: usize,
    pub dist: String,
    pub op: String,
    pub seconds: f64,
    pub ops: u64,
    pub errors: u64,
    pub throughput: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    pub mean_us: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Zk,
    Etcd,
}

#[derive(Clone, Debug)]
struct Workload {
    proto: Proto,
    servers: Vec<String>,
    clients: usize,
    duration: Duration,
    warmup: Duration,
    write_ratio: u32,
    value_size: usize,
    keys: usize,
    zipf: bool,
    create_delete: bool,
    op_timeout: Duration,
    quiet: bool,
    label: String,
}

impl Workload {
    fn from_args(a: &RunArgs) -> Result<Workload> {
        let (proto, list) = match a.target.split_once(':') {
            Some(("zk", rest)) => (Proto::Zk, rest),
            Some(("etcd", rest)) => (Proto::Etcd, rest),
            _ => bail!(
                "--target must start with zk: or etcd: (got '{}'), e.g. zk:127.0.0.1:2181",
                a.target
            ),
        };
        let servers: Vec<String> = list
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if servers.is_empty() {
            bail!("--target names no server");
        }
        if a.clients == 0 || a.clients > 10_000 {
            bail!("--clients must be between 1 and 10000");
        }
        if a.write_ratio > 100 {
            bail!("--write-ratio is a percentage (0..=100)");
        }
        if a.value_size > 1 << 20 {
            bail!("--value-size must be at most 1 MiB");
        }
        if a.keys == 0 || a.keys > 10_000_000 {
            bail!("--keys must be between 1 and 10 000 000");
        }
        let zipf = match a.dist.as_str() {
            "uniform" => false,
            "zipfian" | "zipf" => true,
            d => bail!("--dist {d}: expected uniform or zipfian"),
        };
        let create_delete = match a.op.as_str() {
            "set" => false,
            "create-delete" => true,
            o => bail!("--op {o}: expected set or create-delete"),
        };
        Ok(Workload {
            proto,
            servers,
            clients: a.clients,
            duration: a.duration,
            warmup: a.warmup,
            write_ratio: a.write_ratio,
            value_size: a.value_size,
            keys: a.keys,
            zipf,
            create_delete,
            op_timeout: a.op_timeout,
            quiet: a.quiet,
            label: a.target.clone(),
        })
    }
}

pub fn run(args: BenchArgs) -> Result<i32> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match args.cmd {
        None => {
            let w = Workload::from_args(&args.run)?;
            let r = rt.block_on(run_workload(&w))?;
            print_table(std::slice::from_ref(&r));
            if let Some(p) = &args.run.json {
                std::fs::write(p, serde_json::to_string_pretty(&r)?)?;
            }
            Ok(if r.ops == 0 { 1 } else { 0 })
        }
        Some(BenchCmd::Compare(c)) => rt.block_on(compare(c)),
        Some(BenchCmd::Protocols(p)) => rt.block_on(protocols(p)),
        Some(BenchCmd::Memory(m)) => rt.block_on(memory(m)),
    }
}

fn key_path(i: usize) -> String {
    format!("/bench/k{i:07}")
}

/// Create /bench and the keys (ignoring ones that exist), through 16 sessions.
async fn setup_zk(servers: &[String], keys: usize, value: &[u8]) -> Result<()> {
    let mut s = ZkSession::connect(&servers[0], 30_000, None, 0, Duration::from_secs(10)).await?;
    let r = s.create("/bench", b"", 0).await?;
    if r.err != 0 && r.err != synod_zk::jute::err::NODE_EXISTS {
        bail!("create /bench failed with error {}", r.err);
    }
    let _ = s.close().await;
    let workers = 16.min(keys);
    let mut tasks = Vec::new();
    for w in 0..workers {
        let addr = servers[w % servers.len()].clone();
        let value = value.to_vec();
        tasks.push(tokio::spawn(async move {
            let mut s = ZkSession::connect(&addr, 30_000, None, 0, Duration::from_secs(10)).await?;
            let mut i = w;
            while i < keys {
                let r = s.create(&key_path(i), &value, 0).await?;
                if r.err != 0 && r.err != synod_zk::jute::err::NODE_EXISTS {
                    bail!("create {} failed with error {}", key_path(i), r.err);
                }
                i += workers;
            }
            let _ = s.close().await;
            Ok::<_, anyhow::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

struct Shared {
    start: Instant,
    measure_from: Instant,
    measure_to: Instant,
    stop: AtomicBool,
    done: AtomicU64,
    errors: AtomicU64,
}

struct ClientOut {
    hist: Histogram<u64>,
    ops: u64,
    errors: u64,
}

fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000_000, 3).expect("valid histogram bounds")
}

/// Run one workload against running servers.
async fn run_workload(w: &Workload) -> Result<RunResult> {
    let value = vec![b'x'; w.value_size];
    match w.proto {
        Proto::Zk => setup_zk(&w.servers, w.keys, &value).await?,
        Proto::Etcd => setup_etcd(&w.servers, w.keys, &value).await?,
    }
    let start = Instant::now();
    let shared = Arc::new(Shared {
        start,
        measure_from: start + w.warmup,
        measure_to: start + w.warmup + w.duration,
        stop: AtomicBool::new(false),
        done: AtomicU64::new(0),
        errors: AtomicU64::new(0),
    });
    let zipf = if w.zipf {
        Some(rand_distr::Zipf::new(w.keys as u64, 0.99).map_err(|e| anyhow::anyhow!("{e}"))?)
    } else {
        None
    };
    let mut tasks = Vec::new();
    for c in 0..w.clients {
        let w = w.clone();
        let shared = shared.clone();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            let addr_i = c % w.servers.len();
            let mut rng = rand::rngs::SmallRng::seed_from_u64(c as u64 * 7919 + 1);
            let mut pick = move |rng: &mut rand::rngs::SmallRng| -> usize {
                match &zipf {
                    // Zipf samples are 1..=n, most frequent first; scatter the hot keys.
                    Some(z) => {
                        let k = rng.sample(z) as usize - 1;
                        (k.wrapping_mul(2654435761)) % w.keys
                    }
                    None => rng.gen_range(0..w.keys),
                }
            };
            client(c, addr_i, &w, &shared, &value, &mut rng, &mut pick).await
        }));
    }
    // Progress line.
    let progress = {
        let shared = shared.clone();
        let quiet = w.quiet || !std::io::IsTerminal::is_terminal(&std::io::stderr());
        let total = w.warmup + w.duration;
        tokio::spawn(async move {
            let mut last = 0u64;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                if shared.stop.load(Ordering::Relaxed) {
                    break;
                }
                let done = shared.done.load(Ordering::Relaxed);
                if !quiet {
                    let t = shared.start.elapsed();
                    let phase = if Instant::now() < shared.measure_from {
                        "warm-up"
                    } else {
                        "measure"
                    };
                    eprint!(
                        "\r  {:>5.1}s / {:.0}s  {phase}  {:>9} ops/s  errors {}      ",
                        t.as_secs_f64(),
                        total.as_secs_f64(),
                        done - last,
                        shared.errors.load(Ordering::Relaxed)
                    );
                }
                last = done;
            }
        })
    };
    tokio::time::sleep_until((shared.measure_to).into()).await;
    shared.stop.store(true, Ordering::Relaxed);
    let mut hist = new_hist();
    let (mut ops, mut errors) = (0, 0);
    for t in tasks {
        let out = t.await??;
        hist.add(&out.hist)?;
        ops += out.ops;
        errors += out.errors;
    }
    progress.abort();
    if !w.quiet && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprint!("\r{:78}\r", "");
    }
    let secs = w.duration.as_secs_f64();
    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    Ok(RunResult {
        system: w.label.clone(),
        clients: w.clients,
        write_ratio: w.write_ratio,
        value_size: w.value_size,
        keys: w.keys,
        dist: if w.zipf { "zipfian" } else { "uniform" }.into(),
        op: if w.create_delete {
            "create-delete"
        } else {
            "set"
        }
        .into(),
        seconds: secs,
        ops,
        errors,
        throughput: ops as f64 / secs,
        p50_us: us(0.5),
        p90_us: us(0.9),
        p99_us: us(0.99),
        p999_us: us(0.999),
        max_us: hist.max() as f64 / 1000.0,
        mean_us: hist.mean() / 1000.0,
    })
}

/// Record one completed operation.
fn record(shared: &Shared, out: &mut ClientOut, t0: Instant, ok: bool) {
    let now = Instant::now();
    shared.done.fetch_add(1, Ordering::Relaxed);
    if !ok {
        shared.errors.fetch_add(1, Ordering::Relaxed);
    }
    if t0 >= shared.measure_from && now <= shared.measure_to {
        if ok {
            out.ops += 1;
            let _ = out.hist.record((now - t0).as_nanos().max(1) as u64);
        } else {
            out.errors += 1;
        }
    }
}

/// One client's connection: a ZooKeeper session, or an etcd client.
enum Conn {
    Zk(ZkSession),
    #[cfg(feature = "etcd")]
    Etcd(Box<etcd_client::Client>),
}

impl Conn {
    async fn open(proto: Proto, addr: &str, timeout: Duration) -> Result<Conn> {
        match proto {
            Proto::Zk => Ok(Conn::Zk(
                ZkSession::connect(addr, 30_000, None, 0, timeout).await?,
            )),
            #[cfg(feature = "etcd")]
            Proto::Etcd => Ok(Conn::Etcd(Box::new(
                tokio::time::timeout(timeout, etcd_client::Client::connect([addr], None))
                    .await
                    .map_err(|_| anyhow::anyhow!("connect to {addr} timed out"))??,
            ))),
            #[cfg(not(feature = "etcd"))]
            Proto::Etcd => bail!("{NO_ETCD}"),
        }
    }

    /// setData (version −1) / put.
    async fn set(&mut self, key: &str, value: &[u8]) -> Result<bool> {
        match self {
            Conn::Zk(s) => Ok(s.set_data(key, value, -1).await?.0.err == 0),
            #[cfg(feature = "etcd")]
            Conn::Etcd(c) => {
                c.put(key, value, None).await?;
                Ok(true)
            }
        }
    }

    /// getData / get. etcd's reads are serializable: served by the member itself, as ZooKeeper
    /// and synod serve getData (etcd's default read goes through a ReadIndex round).
    async fn get(&mut self, key: &str) -> Result<bool> {
        match self {
            Conn::Zk(s) => Ok(s.get_data(key).await?.0.err == 0),
            #[cfg(feature = "etcd")]
            Conn::Etcd(c) => {
                let o = etcd_client::GetOptions::new().with_serializable();
                c.get(key, Some(o)).await?;
                Ok(true)
            }
        }
    }

    /// Create a private key, then delete it.
    async fn create_delete(&mut self, key: &str, value: &[u8]) -> Result<bool> {
        match self {
            Conn::Zk(s) => {
                if s.create(key, value, 0).await?.err != 0 {
                    return Ok(false);
                }
                Ok(s.delete(key, -1).await?.err == 0)
            }
            #[cfg(feature = "etcd")]
            Conn::Etcd(c) => {
                c.put(key, value, None).await?;
                c.delete(key, None).await?;
                Ok(true)
            }
        }
    }

    async fn close(self) {
        match self {
            Conn::Zk(s) => {
                let _ = tokio::time::timeout(Duration::from_secs(1), s.close()).await;
            }
            #[cfg(feature = "etcd")]
            Conn::Etcd(_) => {}
        }
    }
}

#[cfg(not(feature = "etcd"))]
const NO_ETCD: &str = "this synod was built without etcd support: build it with \
    `cargo build --release --features etcd` (needs protoc: apt-get install protobuf-compiler), \
    or run scripts/bench-compare.sh";

/// Create the keys in etcd.
async fn setup_etcd(servers: &[String], keys: usize, value: &[u8]) -> Result<()> {
    let mut c = Conn::open(Proto::Etcd, &servers[0], Duration::from_secs(10)).await?;
    for i in 0..keys {
        c.set(&key_path(i), value).await?;
    }
    Ok(())
}

/// One closed-loop client: one request outstanding; on an error or a timeout it reconnects to
/// the next server.
async fn client(
    c: usize,
    mut addr_i: usize,
    w: &Workload,
    shared: &Shared,
    value: &[u8],
    rng: &mut rand::rngs::SmallRng,
    pick: &mut impl FnMut(&mut rand::rngs::SmallRng) -> usize,
) -> Result<ClientOut> {
    let mut out = ClientOut {
        hist: new_hist(),
        ops: 0,
        errors: 0,
    };
    let mut seq = 0u64;
    'conn: while !shared.stop.load(Ordering::Relaxed) {
        let mut conn = match Conn::open(w.proto, &w.servers[addr_i], w.op_timeout).await {
            Ok(conn) => conn,
            Err(_) => {
                shared.errors.fetch_add(1, Ordering::Relaxed);
                out.errors += 1;
                addr_i = (addr_i + 1) % w.servers.len();
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        while !shared.stop.load(Ordering::Relaxed) {
            let write = rng.gen_range(0..100) < w.write_ratio;
            let t0 = Instant::now();
            let res = if write && w.create_delete {
                seq += 1;
                let k = format!("/bench/c{c}-{seq}");
                tokio::time::timeout(w.op_timeout, conn.create_delete(&k, value)).await
            } else if write {
                let k = key_path(pick(rng));
                tokio::time::timeout(w.op_timeout, conn.set(&k, value)).await
            } else {
                let k = key_path(pick(rng));
                tokio::time::timeout(w.op_timeout, conn.get(&k)).await
            };
            match res {
                Ok(Ok(ok)) => record(shared, &mut out, t0, ok),
                _ => {
                    record(shared, &mut out, t0, false);
                    addr_i = (addr_i + 1) % w.servers.len();
                    continue 'conn;
                }
            }
        }
        conn.close().await;
    }
    Ok(out)
}

impl RunResult {
    /// The cells of this result's row, in the order of [`TABLE_HEADER`]: the terminal table
    /// and the markdown one show the same figures.
    fn cells(&self) -> [String; 10] {
        let us = |v: f64| format!("{v:.0}");
        [
            self.system.clone(),
            self.clients.to_string(),
            self.write_ratio.to_string(),
            us(self.throughput),
            us(self.p50_us),
            us(self.p90_us),
            us(self.p99_us),
            us(self.p999_us),
            us(self.max_us),
            self.errors.to_string(),
        ]
    }
}

/// The columns of a result table (the write ratio is a percentage).
const TABLE_HEADER: [&str; 10] = [
    "system",
    "clients",
    "wr%",
    "ops/s",
    "p50 µs",
    "p90 µs",
    "p99 µs",
    "p99.9 µs",
    "max µs",
    "errors",
];

/// Prints results as an aligned terminal table.
fn print_table(rs: &[RunResult]) {
    const WIDTHS: [usize; 10] = [22, 7, 4, 11, 9, 9, 9, 9, 9, 7];
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(WIDTHS)
            .enumerate()
            .map(|(i, (c, w))| match i {
                0 => format!("{c:<w$}"),
                _ => format!("{c:>w$}"),
            })
            .collect();
        println!("{}", padded.join(" "));
    };
    line(&TABLE_HEADER.map(String::from));
    for r in rs {
        line(&r.cells());
    }
}

/// Wait until every node of a cluster serves requests and a write commits.
async fn wait_ready(cl: &mut Cluster, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let addrs = cl.client_addrs();
    loop {
        let attempt = async {
            if cl.kind.speaks_zk() {
                for a in &addrs {
                    let mut s =
                        ZkSession::connect(a, 30_000, None, 0, Duration::from_secs(3)).await?;
                    let r = tokio::time::timeout(Duration::from_secs(3), s.sync("/")).await??;
                    if r.err != 0 {
                        bail!("sync at {a}: error {}", r.err);
                    }
                    let r = tokio::time::timeout(
                        Duration::from_secs(3),
                        s.create("/ready", b"", synod_zk::jute::mode::EPHEMERAL),
                    )
                    .await??;
                    if r.err != 0 && r.err != synod_zk::jute::err::NODE_EXISTS {
                        bail!("create at {a}: error {}", r.err);
                    }
                    let _ = s.close().await;
                }
                Ok(())
            } else {
                tokio::time::timeout(Duration::from_secs(5), async {
                    for a in &addrs {
                        let mut c = Conn::open(Proto::Etcd, a, Duration::from_secs(3)).await?;
                        c.set("/ready", b"1").await?;
                    }
                    Ok::<_, anyhow::Error>(())
                })
                .await?
            }
        };
        match attempt.await {
            Ok(()) => return Ok(()),
            Err(e) => {
                for i in 1..=cl.n {
                    if !cl.is_running(i) {
                        bail!(
                            "{} node {i} exited during start-up:\n{}",
                            cl.kind.name(),
                            cl.log_tail(i, 20)
                        );
                    }
                }
                if Instant::now() > deadline {
                    bail!("{} not ready after {:?}: {e:#}", cl.kind.name(), timeout);
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Machine {
    cores: usize,
    cpu: String,
    kernel: String,
    memory_gib: f64,
    date: String,
}

fn machine() -> Machine {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|x| x.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let memory_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0 / 1024.0)
        .unwrap_or(0.0);
    let date = std::process::Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%dT%H:%M:%SZ")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    Machine {
        cores: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        cpu,
        kernel,
        memory_gib,
        date,
    }
}

#[derive(Args, Debug)]
struct CompareArgs {
    /// Systems to run: synod, zookeeper, etcd (a missing one is skipped with the reason).
    #[arg(long, value_delimiter = ',', default_value = "synod,zookeeper,etcd")]
    systems: Vec<String>,
    /// Write percentages of the matrix.
    #[arg(long, value_delimiter = ',', default_value = "0,50,100")]
    write_ratios: Vec<u32>,
    /// Client counts of the matrix.
    #[arg(long, value_delimiter = ',', default_value = "1,32,256")]
    clients: Vec<usize>,
    /// Measured time per cell.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    warmup: Duration,
    #[arg(long, default_value_t = 1024)]
    value_size: usize,
    #[arg(long, default_value_t = 1000)]
    keys: usize,
    /// synod's replication protocol.
    #[arg(long, default_value = "zab")]
    protocol: String,
    /// Configuration overrides for every synod node (`--set key=value`, repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Where to write compare.{md,json,svg}.
    #[arg(long, default_value = "docs/results")]
    out: std::path::PathBuf,
    /// First port (clusters use BASE+1.., BASE+701.., BASE+801..).
    #[arg(long, default_value_t = 23000)]
    base_port: u16,
}

#[derive(Serialize, Deserialize)]
struct CompareDoc {
    machine: Machine,
    versions: Vec<String>,
    settings: String,
    skipped: Vec<String>,
    results: Vec<RunResult>,
}

fn kind_of(name: &str, protocol: &str, sets: &[String]) -> Result<Kind> {
    Ok(match name {
        "synod" => Kind::Synod {
            protocol: protocol.into(),
            sets: sets.to_vec(),
        },
        "zookeeper" | "zk" => Kind::ZooKeeper,
        "etcd" => Kind::Etcd,
        s => bail!("unknown system '{s}' (synod, zookeeper, etcd)"),
    })
}

/// Run a matrix against a freshly started cluster of `kind`.
#[allow(clippy::too_many_arguments)]
async fn run_matrix(
    kind: Kind,
    n: u32,
    base: u16,
    write_ratios: &[u32],
    clients: &[usize],
    tmpl: &Workload,
    label: &str,
) -> Result<Vec<RunResult>> {
    let mut cl = Cluster::new(kind.clone(), n, base, None)?;
    cl.start_all()?;
    wait_ready(&mut cl, Duration::from_secs(60))
        .await
        .with_context(|| format!("starting {label}"))?;
    let mut out = Vec::new();
    for &c in clients {
        for &wr in write_ratios {
            let mut w = tmpl.clone();
            w.proto = if kind.speaks_zk() {
                Proto::Zk
            } else {
                Proto::Etcd
            };
            w.servers = cl.client_addrs();
            w.clients = c;
            w.write_ratio = wr;
            w.label = label.to_string();
            eprintln!("{label}: {c} clients, {wr}% writes");
            let cpu0: f64 = (1..=n).filter_map(|i| cl.cpu_seconds(i)).sum();
            let r = run_workload(&w).await?;
            let cpu1: f64 = (1..=n).filter_map(|i| cl.cpu_seconds(i)).sum();
            eprintln!(
                "  {:.0} ops/s  p50 {:.0} µs  p99 {:.0} µs  errors {}  (server CPU {:.1} s)",
                r.throughput,
                r.p50_us,
                r.p99_us,
                r.errors,
                cpu1 - cpu0
            );
            out.push(r);
        }
    }
    cl.stop_all();
    Ok(out)
}

fn template(duration: Duration, warmup: Duration, value_size: usize, keys: usize) -> Workload {
    Workload {
        proto: Proto::Zk,
        servers: vec![],
        clients: 1,
        duration,
        warmup,
        write_ratio: 100,
        value_size,
        keys,
        zipf: false,
        create_delete: false,
        op_timeout: Duration::from_secs(10),
        quiet: false,
        label: String::new(),
    }
}

async fn compare(a: CompareArgs) -> Result<i32> {
    let tmpl = template(a.duration, a.warmup, a.value_size, a.keys);
    let mut results = Vec::new();
    let mut versions = Vec::new();
    let mut skipped = Vec::new();
    for (k, name) in a.systems.iter().enumerate() {
        let kind = kind_of(name, &a.protocol, &a.set)?;
        if let Some(why) = crate::procs::missing(&kind) {
            eprintln!("skipping {name}: {why}");
            skipped.push(format!("{name}: {why}"));
            continue;
        }
        if kind == Kind::Etcd && !cfg!(feature = "etcd") {
            let why = "built without the etcd feature (scripts/bench-compare.sh builds it)";
            eprintln!("skipping etcd: {why}");
            skipped.push(format!("etcd: {why}"));
            continue;
        }
        versions.push(crate::procs::version(&kind));
        let label = if name == "synod" {
            format!("synod ({})", a.protocol)
        } else {
            name.clone()
        };
        let base = a.base_port + (k as u16) * 20;
        results
            .extend(run_matrix(kind, 3, base, &a.write_ratios, &a.clients, &tmpl, &label).await?);
    }
    print_table(&results);
    let doc = CompareDoc {
        machine: machine(),
        versions,
        settings: format!(
            "3 nodes each on loopback, fsync on every commit batch (synod fsync=always, \
             ZooKeeper forceSync=yes, etcd default); {} B values over {} keys, uniform; \
             closed loop, one session per client; {:?} measured after {:?} warm-up per cell; \
             reads: ZooKeeper/synod getData, etcd serializable get",
            a.value_size, a.keys, a.duration, a.warmup
        ),
        skipped,
        results,
    };
    std::fs::create_dir_all(&a.out)?;
    let json = a.out.join("compare.json");
    std::fs::write(&json, serde_json::to_string_pretty(&doc)?)?;
    let md = a.out.join("compare.md");
    std::fs::write(&md, compare_markdown(&doc))?;
    std::fs::write(a.out.join("compare.svg"), chart(&doc.results))?;
    println!("wrote {}, {} and compare.svg", md.display(), json.display());
    Ok(0)
}

fn find<'a>(rs: &'a [RunResult], sys: &str, c: usize, wr: u32) -> Option<&'a RunResult> {
    rs.iter()
        .find(|r| r.system.starts_with(sys) && r.clients == c && r.write_ratio == wr)
}

fn compare_markdown(doc: &CompareDoc) -> String {
    let mut s = String::new();
    s += "# synod against Apache ZooKeeper and etcd\n\n";
    s += "Generated by `synod bench compare` (scripts/bench-compare.sh); do not edit by hand.\n\n";
    s += &format!(
        "Machine: {} cores ({}), {:.0} GiB, Linux {}; run at {}.\n\nVersions: {}.\n\nSettings: {}.\n\n",
        doc.machine.cores,
        doc.machine.cpu,
        doc.machine.memory_gib,
        doc.machine.kernel,
        doc.machine.date,
        doc.versions.join(", "),
        doc.settings
    );
    for sk in &doc.skipped {
        s += &format!("Skipped: {sk}\n\n");
    }
    s += &format!("| {} |\n", TABLE_HEADER.join(" | "));
    s += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for r in &doc.results {
        s += &format!("| {} |\n", r.cells().join(" | "));
    }
    s += "\n## Ratios\n\nThroughput ratio > 1 and latency ratio < 1 favour synod.\n\n";
    s += "| clients | writes | ops/s synod/ZK | p50 synod/ZK | p99 synod/ZK | ops/s synod/etcd | p50 synod/etcd | p99 synod/etcd |\n";
    s += "|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for r in doc.results.iter().filter(|r| r.system.starts_with("synod")) {
        let cell = |other: &str| match find(&doc.results, other, r.clients, r.write_ratio) {
            Some(o) if o.throughput > 0.0 => format!(
                "{:.2} | {:.2} | {:.2}",
                r.throughput / o.throughput,
                r.p50_us / o.p50_us.max(1e-9),
                r.p99_us / o.p99_us.max(1e-9)
            ),
            _ => "– | – | –".into(),
        };
        s += &format!(
            "| {} | {}% | {} | {} |\n",
            r.clients,
            r.write_ratio,
            cell("zookeeper"),
            cell("etcd")
        );
    }
    s += "\n![throughput](compare.svg)\n";
    s
}

/// A grouped bar chart of throughput per cell, as a self-contained SVG (log scale).
fn chart(rs: &[RunResult]) -> String {
    let mut systems: Vec<&str> = Vec::new();
    let mut cells: Vec<(usize, u32)> = Vec::new();
    for r in rs {
        if !systems.contains(&r.system.as_str()) {
            systems.push(&r.system);
        }
        if !cells.contains(&(r.clients, r.write_ratio)) {
            cells.push((r.clients, r.write_ratio));
        }
    }
    let colours = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    ];
    let (w, h, left, bottom, top) = (900.0, 420.0, 70.0, 70.0, 40.0);
    let max = rs.iter().map(|r| r.throughput).fold(1.0, f64::max);
    let lmax = max.log10().ceil().max(1.0);
    let y = |v: f64| {
        let lv = if v > 1.0 { v.log10() } else { 0.0 };
        h - bottom - (h - bottom - top) * lv / lmax
    };
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{}\" y=\"20\" font-size=\"14\" text-anchor=\"middle\">Throughput (ops/s, log scale), 3 nodes, 1 KiB values</text>\n",
        w / 2.0
    );
    for e in 0..=(lmax as i32) {
        let yy = y(10f64.powi(e));
        s += &format!(
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">1e{e}</text>\n",
            w - 10.0,
            left - 5.0,
            yy + 4.0
        );
    }
    let group = (w - left - 10.0) / cells.len().max(1) as f64;
    let bar = group * 0.8 / systems.len().max(1) as f64;
    for (ci, (c, wr)) in cells.iter().enumerate() {
        let gx = left + ci as f64 * group + group * 0.1;
        for (si, sys) in systems.iter().enumerate() {
            if let Some(r) = rs
                .iter()
                .find(|r| r.system == *sys && r.clients == *c && r.write_ratio == *wr)
            {
                let x = gx + si as f64 * bar;
                let yy = y(r.throughput);
                s += &format!(
                    "<rect x=\"{x:.1}\" y=\"{yy:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{sys}: {:.0} ops/s</title></rect>\n",
                    bar - 1.0,
                    (h - bottom - yy).max(0.0),
                    colours[si % colours.len()],
                    r.throughput
                );
            }
        }
        s += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{c} cl, {wr}% w</text>\n",
            gx + group * 0.4,
            h - bottom + 15.0
        );
    }
    for (si, sys) in systems.iter().enumerate() {
        let x = left + si as f64 * 200.0;
        s += &format!(
            "<rect x=\"{x}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{sys}</text>\n",
            h - 30.0,
            colours[si % colours.len()],
            x + 16.0,
            h - 20.0
        );
    }
    s += "</svg>\n";
    s
}

#[derive(Args, Debug)]
struct ProtocolArgs {
    /// Protocols to compare.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "zab,zab-ac,zab-aa,zab-aa-leader-first,zab-ct"
    )]
    protocols: Vec<String>,
    /// Cluster sizes.
    #[arg(long, value_delimiter = ',', default_value = "3,5")]
    nodes: Vec<u32>,
    #[arg(long, value_delimiter = ',', default_value = "50,100")]
    write_ratios: Vec<u32>,
    #[arg(long, value_delimiter = ',', default_value = "1,32")]
    clients: Vec<usize>,
    #[arg(long, default_value = "8s", value_parser = parse_duration)]
    duration: Duration,
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    warmup: Duration,
    #[arg(long, default_value = "docs/results")]
    out: std::path::PathBuf,
    #[arg(long, default_value_t = 23200)]
    base_port: u16,
}

async fn protocols(a: ProtocolArgs) -> Result<i32> {
    let tmpl = template(a.duration, a.warmup, 1024, 1000);
    let mut results = Vec::new();
    for &n in &a.nodes {
        for p in &a.protocols {
            let kind = Kind::Synod {
                protocol: p.clone(),
                sets: vec![],
            };
            let label = format!("{p} N={n}");
            match run_matrix(
                kind,
                n,
                a.base_port,
                &a.write_ratios,
                &a.clients,
                &tmpl,
                &label,
            )
            .await
            {
                Ok(r) => results.extend(r),
                Err(e) => eprintln!("{label}: {e:#}"),
            }
        }
    }
    print_table(&results);
    // The simulator's figures for the same configurations (LAN network and SSD disk models,
    // no faults, closed-loop clients without think time, 1 KiB payloads, 3 seeds).
    let sim_of = |r: &RunResult| -> Option<(f64, f64)> {
        let (proto, n) = r.system.split_once(" N=")?;
        let n: usize = n.parse().ok()?;
        let mut cfg = synod_sim::SimConfig::new(n, 0, ());
        cfg.faults = "none".parse().ok()?;
        cfg.workload.clients = r.clients;
        cfg.workload.think_us = 0;
        cfg.workload.payload_bytes = r.value_size;
        cfg.workload.write_ratio = r.write_ratio as f64 / 100.0;
        let rep = synod_sim::protocols::run_named_seeds(proto, &cfg, 0..3, 2).ok()?;
        let p50 = rep.percentile_us(0.5) as f64;
        let tput = rep.committed as f64 / (rep.virtual_us.max(1) as f64 / 1e6);
        Some((p50, tput))
    };
    std::fs::create_dir_all(&a.out)?;
    let mut s = String::from(
        "# synod's protocols on real processes\n\nGenerated by `synod bench protocols`; the \
         discussion against the simulator's figures is in docs/results/protocols-notes.md.\n\n",
    );
    let m = machine();
    s += &format!(
        "Machine: {} cores ({}), Linux {}; run at {}. Loopback, fsync always, 1 KiB values, \
         1000 keys, {:?} measured after {:?} warm-up per cell.\n\n",
        m.cores, m.cpu, m.kernel, m.date, a.duration, a.warmup
    );
    s += "| protocol | clients | writes | ops/s | p50 µs | p99 µs | errors | sim p50 µs | sim writes/s |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for r in &results {
        let (sp50, stput) = sim_of(r).unwrap_or((f64::NAN, f64::NAN));
        s += &format!(
            "| {} | {} | {}% | {:.0} | {:.0} | {:.0} | {} | {:.0} | {:.0} |\n",
            r.system,
            r.clients,
            r.write_ratio,
            r.throughput,
            r.p50_us,
            r.p99_us,
            r.errors,
            sp50,
            stput
        );
    }
    std::fs::write(a.out.join("protocols.md"), s)?;
    std::fs::write(
        a.out.join("protocols.json"),
        serde_json::to_string_pretty(&results)?,
    )?;
    println!("wrote {}", a.out.join("protocols.md").display());
    Ok(0)
}

#[derive(Args, Debug)]
struct MemoryArgs {
    /// Systems to measure.
    #[arg(long, value_delimiter = ',', default_value = "synod,zookeeper")]
    systems: Vec<String>,
    /// Znodes to create.
    #[arg(long, default_value_t = 1_000_000)]
    znodes: usize,
    /// Bytes per znode.
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    #[arg(long, default_value = "docs/results")]
    out: std::path::PathBuf,
    #[arg(long, default_value_t = 23400)]
    base_port: u16,
}

async fn memory(a: MemoryArgs) -> Result<i32> {
    let mut rows = Vec::new();
    for name in &a.systems {
        let kind = kind_of(name, "zab", &[])?;
        if kind == Kind::Etcd {
            bail!("memory compares ZooKeeper-protocol systems (synod, zookeeper)");
        }
        let mut cl = Cluster::new(kind.clone(), 3, a.base_port, None)?;
        cl.start_all()?;
        wait_ready(&mut cl, Duration::from_secs(60)).await?;
        let before: Vec<u64> = (1..=3).filter_map(|i| cl.rss_bytes(i)).collect();
        eprintln!("{name}: creating {} znodes of {} B", a.znodes, a.value_size);
        let t0 = Instant::now();
        let value = vec![b'v'; a.value_size];
        let addrs = cl.client_addrs();
        let mut s = ZkSession::connect(&addrs[0], 30_000, None, 0, Duration::from_secs(10)).await?;
        let _ = s.create("/m", b"", 0).await?;
        let workers = 64;
        let mut tasks = Vec::new();
        let done = Arc::new(AtomicU64::new(0));
        for wkr in 0..workers {
            let addr = addrs[wkr % addrs.len()].clone();
            let value = value.clone();
            let done = done.clone();
            let total = a.znodes;
            tasks.push(tokio::spawn(async move {
                let mut s =
                    ZkSession::connect(&addr, 30_000, None, 0, Duration::from_secs(10)).await?;
                let mut i = wkr;
                while i < total {
                    let r = s.create(&format!("/m/{i:08}"), &value, 0).await?;
                    if r.err != 0 && r.err != synod_zk::jute::err::NODE_EXISTS {
                        bail!("create failed with error {}", r.err);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                    i += workers;
                }
                Ok::<_, anyhow::Error>(())
            }));
        }
        let progress = {
            let done = done.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    eprint!("\r  {} created   ", done.load(Ordering::Relaxed));
                }
            })
        };
        for t in tasks {
            t.await??;
        }
        progress.abort();
        eprintln!();
        let secs = t0.elapsed().as_secs_f64();
        // Let background work (snapshots, GC) settle before reading RSS.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let after: Vec<u64> = (1..=3).filter_map(|i| cl.rss_bytes(i)).collect();
        let mib = |v: &[u64]| v.iter().map(|b| *b as f64 / 1048576.0).collect::<Vec<_>>();
        eprintln!(
            "{name}: {:.0} s to fill; RSS MiB before {:?} after {:?}",
            secs,
            mib(&before),
            mib(&after)
        );
        rows.push((
            crate::procs::version(&kind),
            secs,
            mib(&before),
            mib(&after),
        ));
        cl.stop_all();
    }
    let m = machine();
    let mut s = format!(
        "# Resident memory with {} znodes of {} B\n\nGenerated by `synod bench memory`. \
         Machine: {} cores, Linux {}; run at {}. 3-node clusters on loopback; ZooKeeper runs \
         with the JVM's default heap limit (a quarter of RAM), as a packaged install does.\n\n\
         | system | fill time s | RSS per node before (MiB) | RSS per node after (MiB) |\n|---|---:|---|---|\n",
        a.znodes, a.value_size, m.cores, m.kernel, m.date
    );
    for (v, secs, b, af) in &rows {
        let f = |x: &Vec<f64>| {
            x.iter()
                .map(|m| format!("{m:.0}"))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        s += &format!("| {v} | {secs:.0} | {} | {} |\n", f(b), f(af));
    }
    std::fs::create_dir_all(&a.out)?;
    std::fs::write(a.out.join("memory.md"), &s)?;
    print!("{s}");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn ratios_table_names_both_systems() {
        let r = |sys: &str, t: f64| RunResult {
            system: sys.into(),
            clients: 32,
            write_ratio: 100,
            value_size: 1024,
            keys: 10,
            dist: "uniform".into(),
            op: "set".into(),
            seconds: 1.0,
            ops: t as u64,
            errors: 0,
            throughput: t,
            p50_us: 100.0,
            p90_us: 1.0,
            p99_us: 200.0,
            p999_us: 1.0,
            max_us: 1.0,
            mean_us: 1.0,
        };
        let doc = CompareDoc {
            machine: machine(),
            versions: vec![],
            settings: String::new(),
            skipped: vec![],
            results: vec![r("synod (zab)", 5000.0), r("zookeeper", 1000.0)],
        };
        let md = compare_markdown(&doc);
        assert!(
            md.contains("| 32 | 100% | 5.00 | 1.00 | 1.00 | – | – | – |"),
            "{md}"
        );
        assert!(chart(&doc.results).contains("<svg"));
    }
}
