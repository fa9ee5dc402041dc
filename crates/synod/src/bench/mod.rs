//! `synod bench`: a closed-loop load generator that drives synod, Apache ZooKeeper (both through
//! the ZooKeeper client protocol) and etcd (through its v3 gRPC API, with the client crates/etcd
//! generates), and `synod bench compare | protocols | memory | kv | etcd`, which start the
//! clusters themselves and write results under docs/results/.
//!
//! Every client is one session with one request outstanding (closed loop). Latency is recorded
//! in an HDR histogram per client (nanoseconds, 3 significant digits) during the measured window
//! only; the warm-up is discarded.
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | the command line, [`RunResult`], the result table, [`Workload`], [`run`] |
//! | `load.rs` | the closed-loop load: key set-up, clients, histograms |
//! | `conn.rs` | one client's connection: a ZooKeeper session or an etcd client |
//! | `cost.rs` | the servers' peer messages, bytes and CPU time in the measured window |
//! | `machine_cpu.rs` | the whole machine's CPU in the measured window (/proc/stat) |
//! | `compare.rs` | `bench compare`: synod against ZooKeeper and etcd, markdown and SVG |
//! | `etcd.rs` | `bench etcd`: etcd's protocol against synod's etcd API and etcd 3.4 |
//! | `protocols.rs` | `bench protocols`: synod's replication protocols on real processes |
//! | `memory.rs` | `bench memory`: resident memory with many znodes |
//! | `kv.rs`, `kv_report.rs` | `bench kv`: YCSB transactions against SconeKV, beside the thesis |
//! | `tests.rs` | unit tests |

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use std::time::Duration;

mod compare;
mod conn;
mod cost;
mod etcd;
pub mod kv;
mod kv_report;
mod load;
mod machine_cpu;
mod memory;
mod protocols;
#[cfg(test)]
mod tests;

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
    Compare(compare::CompareArgs),
    /// Compare synod's own replication protocols on real processes (N = 3 and 5).
    Protocols(protocols::ProtocolArgs),
    /// Resident memory of a node holding many znodes, synod against ZooKeeper.
    Memory(memory::MemoryArgs),
    /// YCSB workloads A, B, C and F as transactions against SconeKV (the thesis's evaluation).
    Kv(kv::KvBenchArgs),
    /// etcd's protocol (Put, linearizable Range, a compare-and-put Txn, a four-key Txn) against
    /// synod's etcd API and etcd 3.4, 3 nodes each; writes docs/results/etcd-compare.md with
    /// `--out docs/results`.
    Etcd(etcd::EtcdBenchArgs),
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
    /// What the servers spent in the measured window (`bench protocols` and `compare`, synod's
    /// peer counters only for synod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<cost::ServerCost>,
    /// The whole machine's CPU in the measured window (servers, load generator and the rest),
    /// from /proc/stat: what an operation costs when everything runs on one machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<machine_cpu::MachineCpu>,
    /// The peer links the servers emulated (`bench protocols --link-*`); none: loopback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<protocols::LinkEmulation>,
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
    /// etcd's protocol only: this operation instead of the write ratio's sets and gets.
    etcd_op: Option<conn::EtcdOp>,
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
            etcd_op: None,
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
            let r = rt.block_on(load::run_workload(&w))?;
            print_table_with(
                std::slice::from_ref(&r),
                &["cores busy", "µs CPU/op"],
                machine_cpu::cells,
            );
            if let Some(p) = &args.run.json {
                std::fs::write(p, serde_json::to_string_pretty(&r)?)?;
            }
            Ok(if r.ops == 0 { 1 } else { 0 })
        }
        Some(BenchCmd::Compare(c)) => rt.block_on(compare::compare(c)),
        Some(BenchCmd::Protocols(p)) => rt.block_on(protocols::protocols(p)),
        Some(BenchCmd::Memory(m)) => rt.block_on(memory::memory(m)),
        Some(BenchCmd::Kv(k)) => rt.block_on(kv::bench(k)),
        Some(BenchCmd::Etcd(e)) => rt.block_on(etcd::bench(e)),
    }
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
    print_table_with(rs, &[], |_| vec![]);
}

/// Prints results as an aligned terminal table, with `extra` columns after the usual ones.
fn print_table_with(rs: &[RunResult], extra: &[&str], cells: impl Fn(&RunResult) -> Vec<String>) {
    const WIDTHS: [usize; 10] = [22, 7, 4, 11, 9, 9, 9, 9, 9, 7];
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let w = WIDTHS
                    .get(i)
                    .copied()
                    .unwrap_or(0)
                    .max(extra_width(extra, i));
                match i {
                    0 => format!("{c:<w$}"),
                    _ => format!("{c:>w$}"),
                }
            })
            .collect();
        println!("{}", padded.join(" "));
    };
    let mut header: Vec<String> = TABLE_HEADER.map(String::from).into();
    header.extend(extra.iter().map(|h| h.to_string()));
    line(&header);
    for r in rs {
        let mut row: Vec<String> = r.cells().into();
        row.extend(cells(r));
        line(&row);
    }
}

/// The width of extra column `i` (counted from the first column of the table): its header's,
/// at least 9.
fn extra_width(extra: &[&str], i: usize) -> usize {
    i.checked_sub(TABLE_HEADER.len())
        .and_then(|j| extra.get(j))
        .map_or(0, |h| h.chars().count().max(9))
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
