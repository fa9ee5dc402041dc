//! `synod bench compare`: synod, Apache ZooKeeper and etcd on the same matrix, written as
//! docs/results/compare.{md,json,svg} and compare-latency.svg (`--replot DIR` redraws the
//! pictures from DIR/compare.json); and the cluster helpers the other subcommands share.

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

use super::conn::Conn;
use super::cost::{ServerCost, ServerProbe};
use super::load::run_workload_probed;
use super::{
    machine, parse_duration, print_table, Machine, Proto, RunResult, Workload, TABLE_HEADER,
};
use crate::plot::{bar_panels, BarPanel};
use crate::procs::{Cluster, Kind};
use crate::zkclient::ZkSession;

/// Wait until every node of a cluster serves requests and a write commits.
pub(super) async fn wait_ready(cl: &mut Cluster, timeout: Duration) -> Result<()> {
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

#[derive(Args, Debug)]
pub(super) struct CompareArgs {
    /// Systems to run, one cluster after another: `synod` (with --protocol), `synod-PROTOCOL`
    /// for synod with a given protocol (e.g. `synod-paxos`, `synod-zab-ct`: several synod
    /// protocols side by side, labelled `synod (PROTOCOL)`), `zookeeper`, `etcd`. A system
    /// that is not installed is skipped with the reason.
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
    /// The replication protocol of the system `synod` (zab, a Zab variant, paxos, paxos-mbq,
    /// paxos-none, mencius).
    #[arg(long, default_value = "zab")]
    protocol: String,
    /// Configuration overrides for every synod node (`--set key=value`, repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Where to write compare.{md,json,svg}: target/results unless named (`--out docs/results`
    /// replaces the committed documents; scripts/bench-compare.sh does).
    #[arg(long, default_value = "target/results")]
    out: std::path::PathBuf,
    /// First port (clusters use BASE+1.., BASE+701.., BASE+801..).
    #[arg(long, default_value_t = 23000)]
    base_port: u16,
    /// Run nothing: redraw DIR/compare.svg and DIR/compare-latency.svg from DIR/compare.json
    /// (e.g. `--replot docs/results`).
    #[arg(long, value_name = "DIR")]
    replot: Option<std::path::PathBuf>,
}

#[derive(Serialize, Deserialize)]
pub(super) struct CompareDoc {
    pub(super) machine: Machine,
    pub(super) versions: Vec<String>,
    pub(super) settings: String,
    pub(super) skipped: Vec<String>,
    pub(super) results: Vec<RunResult>,
}

/// The system a `--systems` name starts, and its label in the results: `synod` runs
/// `protocol`, `synod-PROTOCOL` its own.
pub(super) fn kind_of(name: &str, protocol: &str, sets: &[String]) -> Result<(Kind, String)> {
    let synod = |p: &str| -> Result<(Kind, String)> {
        if synod_server::protocol::family(p).is_none() {
            bail!(
                "system '{name}': '{p}' is not a protocol of synod (supported: {})",
                synod_server::protocol::names().join(", ")
            );
        }
        let kind = Kind::Synod {
            protocol: p.into(),
            sets: sets.to_vec(),
        };
        Ok((kind, format!("synod ({p})")))
    };
    Ok(match name {
        "synod" => synod(protocol)?,
        "zookeeper" | "zk" => (Kind::ZooKeeper, "zookeeper".into()),
        "etcd" => (Kind::Etcd, "etcd".into()),
        s => match s.strip_prefix("synod-") {
            Some(p) => synod(p)?,
            None => bail!(
                "unknown system '{s}' (synod, synod-PROTOCOL such as synod-paxos, zookeeper, etcd)"
            ),
        },
    })
}

/// Run a matrix against a freshly started cluster of `kind`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn run_matrix(
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
            // synod's peer counters and every server's CPU time, snapshotted when the measured
            // window opens and closes.
            let probe = matches!(kind, Kind::Synod { .. }).then(|| ServerProbe::of(&cl));
            let r = run_workload_probed(&w, probe).await?;
            let cpu1: f64 = (1..=n).filter_map(|i| cl.cpu_seconds(i)).sum();
            eprintln!(
                "  {:.0} ops/s  p50 {:.0} µs  p99 {:.0} µs  errors {}  (server CPU {:.1} s)",
                r.throughput,
                r.p50_us,
                r.p99_us,
                r.errors,
                cpu1 - cpu0
            );
            if r.server.is_some() {
                let c = ServerCost::cells(r.server.as_ref());
                eprintln!(
                    "  measured window: {} peer msgs/op, {} peer msgs/write, {} peer B/op, {} CPU µs/op, {} CPU µs/msg",
                    c[0], c[1], c[2], c[3], c[4]
                );
            }
            out.push(r);
        }
    }
    cl.stop_all();
    Ok(out)
}

pub(super) fn template(
    duration: Duration,
    warmup: Duration,
    value_size: usize,
    keys: usize,
) -> Workload {
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
        etcd_op: None,
        op_timeout: Duration::from_secs(10),
        quiet: false,
        label: String::new(),
    }
}

pub(super) async fn compare(a: CompareArgs) -> Result<i32> {
    if let Some(dir) = &a.replot {
        let json = dir.join("compare.json");
        let doc: CompareDoc = serde_json::from_str(
            &std::fs::read_to_string(&json).with_context(|| format!("{}", json.display()))?,
        )
        .with_context(|| format!("{}", json.display()))?;
        write_charts(dir, &doc.results)?;
        println!(
            "redrew compare.svg and compare-latency.svg in {}",
            dir.display()
        );
        return Ok(0);
    }
    let tmpl = template(a.duration, a.warmup, a.value_size, a.keys);
    let mut results = Vec::new();
    let mut versions = Vec::new();
    let mut skipped = Vec::new();
    for (k, name) in a.systems.iter().enumerate() {
        let (kind, label) = kind_of(name, &a.protocol, &a.set)?;
        if let Some(why) = crate::procs::missing(&kind) {
            eprintln!("skipping {name}: {why}");
            skipped.push(format!("{name}: {why}"));
            continue;
        }
        let version = crate::procs::version(&kind);
        if !versions.contains(&version) {
            versions.push(version);
        }
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
             reads: ZooKeeper/synod getData, etcd serializable get{}",
            a.value_size,
            a.keys,
            a.duration,
            a.warmup,
            if a.set.is_empty() {
                String::new()
            } else {
                format!("; every synod node with --set {}", a.set.join(" --set "))
            }
        ),
        skipped,
        results,
    };
    std::fs::create_dir_all(&a.out)?;
    let json = a.out.join("compare.json");
    std::fs::write(&json, serde_json::to_string_pretty(&doc)?)?;
    let md = a.out.join("compare.md");
    std::fs::write(&md, compare_markdown(&doc))?;
    write_charts(&a.out, &doc.results)?;
    println!(
        "wrote {}, {}, compare.svg and compare-latency.svg",
        md.display(),
        json.display()
    );
    Ok(0)
}

fn find<'a>(rs: &'a [RunResult], sys: &str, c: usize, wr: u32) -> Option<&'a RunResult> {
    rs.iter()
        .find(|r| r.system.starts_with(sys) && r.clients == c && r.write_ratio == wr)
}

pub(super) fn compare_markdown(doc: &CompareDoc) -> String {
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
    s += "| synod | clients | writes | ops/s synod/ZK | p50 synod/ZK | p99 synod/ZK | ops/s synod/etcd | p50 synod/etcd | p99 synod/etcd |\n";
    s += "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
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
            "| {} | {} | {}% | {} | {} |\n",
            r.system,
            r.clients,
            r.write_ratio,
            cell("zookeeper"),
            cell("etcd")
        );
    }
    s += "\n![throughput](compare.svg)\n\n![p99 latency](compare-latency.svg)\n";
    s
}

/// Write OUT/compare.svg (throughput) and OUT/compare-latency.svg (p99).
fn write_charts(out: &std::path::Path, rs: &[RunResult]) -> Result<()> {
    std::fs::write(out.join("compare.svg"), chart(rs))?;
    std::fs::write(out.join("compare-latency.svg"), latency_chart(rs))?;
    Ok(())
}

/// Throughput per cell: one panel per write ratio, a group of bars (one per system) per client
/// count, linear from 0.
pub(super) fn chart(rs: &[RunResult]) -> String {
    panels(
        rs,
        "Throughput, 3 nodes, fsync on every commit batch (higher is better)",
        "ops/s",
        |r| r.throughput,
    )
}

/// p99 latency per cell, in milliseconds, laid out as [`chart`].
pub(super) fn latency_chart(rs: &[RunResult]) -> String {
    panels(
        rs,
        "p99 latency, 3 nodes, fsync on every commit batch (lower is better)",
        "p99 latency (ms)",
        |r| r.p99_us / 1000.0,
    )
}

fn panels(rs: &[RunResult], title: &str, y_label: &str, value: fn(&RunResult) -> f64) -> String {
    let (mut systems, mut clients, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for r in rs {
        if !systems.contains(&r.system) {
            systems.push(r.system.clone());
        }
        if !clients.contains(&r.clients) {
            clients.push(r.clients);
        }
        if !ratios.contains(&r.write_ratio) {
            ratios.push(r.write_ratio);
        }
    }
    let panels: Vec<BarPanel> = ratios
        .iter()
        .map(|&wr| BarPanel {
            caption: format!("{wr}% writes"),
            categories: clients
                .iter()
                .map(|&c| format!("{c} client{}", if c == 1 { "" } else { "s" }))
                .collect(),
            series: systems
                .iter()
                .map(|sys| {
                    let vs = clients
                        .iter()
                        .map(|&c| {
                            rs.iter()
                                .find(|r| &r.system == sys && r.clients == c && r.write_ratio == wr)
                                .map_or(f64::NAN, value)
                        })
                        .collect();
                    (sys.clone(), vs)
                })
                .collect(),
        })
        .collect();
    let width = (380 * panels.len() as u32).clamp(600, 1600);
    bar_panels(title, y_label, &panels, width, 460)
}
