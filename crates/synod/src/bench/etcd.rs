//! `synod bench etcd`: etcd's protocol against synod's etcd API and against etcd 3.4, three
//! nodes each on this machine, one system at a time: a Put, etcd's default (linearizable)
//! Range, a Txn that puts a key if its mod revision is the one the client last saw (else gets
//! it: Kubernetes' update), and a Txn of puts of four keys. Printed as a table with the ratios;
//! written to `OUT/etcd-compare.{md,json,svg}` only with `--out` (`--replot DIR` redraws
//! DIR/etcd-compare.svg from DIR/etcd-compare.json).

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

use super::compare::template;
use super::conn::{Conn, EtcdOp};
use super::load::run_workload;
use super::{machine, parse_duration, Machine, Proto, RunResult};
use crate::plot::{bar_panels, BarPanel};
use crate::procs::{Cluster, Kind};

#[derive(Args, Debug)]
pub(super) struct EtcdBenchArgs {
    /// Systems, one cluster after another: `synod` (its etcd API, with --protocol) and `etcd`.
    #[arg(long, value_delimiter = ',', default_value = "synod,etcd")]
    systems: Vec<String>,
    /// Operations: put, range, txn-cas, txn-multi.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "put,range,txn-cas,txn-multi"
    )]
    ops: Vec<String>,
    #[arg(long, value_delimiter = ',', default_value = "32,256")]
    clients: Vec<usize>,
    /// Measured time per cell.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    warmup: Duration,
    #[arg(long, default_value_t = 256)]
    value_size: usize,
    #[arg(long, default_value_t = 1000)]
    keys: usize,
    /// synod's replication protocol for the etcd store's group.
    #[arg(long, default_value = "zab")]
    protocol: String,
    /// Configuration overrides for every synod node (`--set key=value`, repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Where to write etcd-compare.{md,json,svg} (nothing is written without it).
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// First port of the clusters.
    #[arg(long, default_value_t = 23500)]
    base_port: u16,
    /// Run nothing: redraw DIR/etcd-compare.svg from DIR/etcd-compare.json (e.g. `--replot
    /// docs/results`).
    #[arg(long, value_name = "DIR")]
    replot: Option<std::path::PathBuf>,
}

#[derive(Serialize, Deserialize)]
struct EtcdDoc {
    machine: Machine,
    versions: Vec<String>,
    settings: String,
    skipped: Vec<String>,
    results: Vec<RunResult>,
}

/// Wait until every endpoint takes a put.
async fn ready(cl: &Cluster, servers: &[String], timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let attempt = async {
            for a in servers {
                let mut c = Conn::open(Proto::Etcd, a, Duration::from_secs(3)).await?;
                tokio::time::timeout(Duration::from_secs(3), c.set("/ready", b"1")).await??;
            }
            Ok::<_, anyhow::Error>(())
        };
        match attempt.await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                bail!("{} not ready after {timeout:?}: {e:#}", cl.kind.name())
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    }
}

pub(super) async fn bench(a: EtcdBenchArgs) -> Result<i32> {
    if let Some(dir) = &a.replot {
        let json = dir.join("etcd-compare.json");
        let doc: EtcdDoc = serde_json::from_str(
            &std::fs::read_to_string(&json).with_context(|| format!("{}", json.display()))?,
        )
        .with_context(|| format!("{}", json.display()))?;
        std::fs::write(dir.join("etcd-compare.svg"), chart(&doc.results))?;
        println!("redrew {}", dir.join("etcd-compare.svg").display());
        return Ok(0);
    }
    let ops: Vec<EtcdOp> = a
        .ops
        .iter()
        .map(|o| {
            EtcdOp::named(o).ok_or_else(|| {
                anyhow::anyhow!("--ops {o}: known are put, range, txn-cas, txn-multi")
            })
        })
        .collect::<Result<_>>()?;
    let mut results = Vec::new();
    let (mut versions, mut skipped) = (Vec::new(), Vec::new());
    for (k, name) in a.systems.iter().enumerate() {
        let (kind, label) = match name.as_str() {
            "synod" => (
                Kind::Synod {
                    protocol: a.protocol.clone(),
                    sets: a.set.clone(),
                },
                format!("synod ({})", a.protocol),
            ),
            "etcd" => (Kind::Etcd, "etcd".to_string()),
            s => bail!("unknown system '{s}' (synod, etcd)"),
        };
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
        let synod = matches!(kind, Kind::Synod { .. });
        let mut cl = Cluster::new(kind, 3, base, None)?;
        if synod {
            cl.etcd_port = Some(base + 400);
        }
        cl.start_all()?;
        let servers = if synod {
            cl.etcd_addrs()
        } else {
            cl.client_addrs()
        };
        ready(&cl, &servers, Duration::from_secs(60)).await?;
        for &c in &a.clients {
            for &op in &ops {
                let mut w = template(a.duration, a.warmup, a.value_size, a.keys);
                w.proto = Proto::Etcd;
                w.servers = servers.clone();
                w.clients = c;
                w.etcd_op = Some(op);
                w.write_ratio = if op == EtcdOp::Range { 0 } else { 100 };
                w.label = label.clone();
                eprintln!("{label}: {c} clients, {}", op.name());
                let r = run_workload(&w).await?;
                eprintln!(
                    "  {:.0} ops/s  p50 {:.0} µs  p99 {:.0} µs  errors {}",
                    r.throughput, r.p50_us, r.p99_us, r.errors
                );
                results.push(r);
            }
        }
        cl.stop_all();
    }
    let doc = EtcdDoc {
        machine: machine(),
        versions,
        settings: format!(
            "3 nodes each on loopback, fsync on every commit batch (synod fsync=always, etcd \
             default); {} B values over {} keys, uniform; closed loop, one connection per \
             client; {:?} measured after {:?} warm-up per cell; synod's etcd store is one \
             {} group on every node (docs/etcd.md){}",
            a.value_size,
            a.keys,
            a.duration,
            a.warmup,
            a.protocol,
            if a.set.is_empty() {
                String::new()
            } else {
                format!("; every synod node with --set {}", a.set.join(" --set "))
            }
        ),
        skipped,
        results,
    };
    let md = markdown(&doc);
    println!("{md}");
    if let Some(out) = &a.out {
        std::fs::create_dir_all(out)?;
        std::fs::write(out.join("etcd-compare.md"), &md)?;
        std::fs::write(
            out.join("etcd-compare.json"),
            serde_json::to_string_pretty(&doc)?,
        )?;
        std::fs::write(out.join("etcd-compare.svg"), chart(&doc.results))?;
        println!("wrote {}", out.join("etcd-compare.md").display());
    }
    Ok(0)
}

fn markdown(doc: &EtcdDoc) -> String {
    let mut s = String::from("# etcd's protocol: synod against etcd 3.4\n\n");
    s += "Generated by `synod bench etcd --out docs/results`; do not edit by hand.\n\n";
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
    s += "| system | operation | clients | ops/s | p50 µs | p99 µs | p99.9 µs | errors |\n";
    s += "|---|---|---:|---:|---:|---:|---:|---:|\n";
    for r in &doc.results {
        s += &format!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {} |\n",
            r.system, r.op, r.clients, r.throughput, r.p50_us, r.p99_us, r.p999_us, r.errors
        );
    }
    s += "\n## Ratios\n\nsynod / etcd: a throughput ratio above 1 and a p99 ratio below 1 favour synod.\n\n";
    s += "| operation | clients | ops/s synod/etcd | p99 synod/etcd |\n|---|---:|---:|---:|\n";
    for r in doc.results.iter().filter(|r| r.system.starts_with("synod")) {
        if let Some(e) = doc
            .results
            .iter()
            .find(|e| e.system == "etcd" && e.op == r.op && e.clients == r.clients)
        {
            s += &format!(
                "| {} | {} | {:.2} | {:.2} |\n",
                r.op,
                r.clients,
                r.throughput / e.throughput.max(1e-9),
                r.p99_us / e.p99_us.max(1e-9)
            );
        }
    }
    s += "\n![throughput](etcd-compare.svg)\n";
    s
}

/// Throughput per operation, synod beside etcd: one panel per client count, linear from 0.
fn chart(rs: &[RunResult]) -> String {
    let (mut systems, mut clients, mut ops) = (Vec::new(), Vec::new(), Vec::new());
    for r in rs {
        if !systems.contains(&r.system) {
            systems.push(r.system.clone());
        }
        if !clients.contains(&r.clients) {
            clients.push(r.clients);
        }
        if !ops.contains(&r.op) {
            ops.push(r.op.clone());
        }
    }
    let panels: Vec<BarPanel> = clients
        .iter()
        .map(|&c| BarPanel {
            caption: format!("{c} client{}", if c == 1 { "" } else { "s" }),
            categories: ops.clone(),
            series: systems
                .iter()
                .map(|sys| {
                    let vs = ops
                        .iter()
                        .map(|op| {
                            rs.iter()
                                .find(|r| &r.system == sys && r.clients == c && &r.op == op)
                                .map_or(f64::NAN, |r| r.throughput)
                        })
                        .collect();
                    (sys.clone(), vs)
                })
                .collect(),
        })
        .collect();
    let width = (480 * panels.len() as u32).clamp(600, 1600);
    bar_panels(
        "etcd's protocol: throughput, 3 nodes (higher is better)",
        "ops/s",
        &panels,
        width,
        440,
    )
}
