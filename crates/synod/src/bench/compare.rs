//! `synod bench compare`: synod, Apache ZooKeeper and etcd on the same matrix, written as
//! docs/results/compare.{md,json,svg}; and the cluster helpers the other subcommands share.

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
    /// Where to write compare.{md,json,svg}.
    #[arg(long, default_value = "docs/results")]
    out: std::path::PathBuf,
    /// First port (clusters use BASE+1.., BASE+701.., BASE+801..).
    #[arg(long, default_value_t = 23000)]
    base_port: u16,
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
    std::fs::write(a.out.join("compare.svg"), chart(&doc.results))?;
    println!("wrote {}, {} and compare.svg", md.display(), json.display());
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
    s += "\n![throughput](compare.svg)\n";
    s
}

/// A grouped bar chart of throughput per cell, as a self-contained SVG (log scale).
pub(super) fn chart(rs: &[RunResult]) -> String {
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
