//! `synod bench kv`: YCSB workloads as transactions against SconeKV, as the thesis measured
//! them (sconekv.md §9): every transaction gathers 5 distinct keys from the workload's
//! operation mix (read, update, or read-modify-write), then commits; an aborted transaction is
//! not retried. **Throughput** counts the operations of every transaction, **goodput** those of
//! committed ones, and the **abort rate** is the share of transactions that aborted (§11.17).
//!
//! It starts a local cluster (`synod dev --kv`'s layout) unless `--servers` names one, runs
//! every combination of workload, key distribution and client count for `--duration` after
//! `--warmup`, and with `--out` writes the table beside the thesis's figures.

use anyhow::{bail, Context, Result};
use clap::Args;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use synod_kv_client::{Client, ClientConfig};

#[derive(Args, Debug, Clone)]
pub struct KvBenchArgs {
    /// KV servers (host:port,…); default: start a local 3-node cluster.
    #[arg(long)]
    servers: Option<String>,
    /// Workloads: A (50 % read, 50 % update), B (95/5), C (read only), F (50 % read, 50 %
    /// read-modify-write).
    #[arg(long, default_value = "A,B,C,F", value_delimiter = ',')]
    workloads: Vec<String>,
    /// Key distributions: zipfian (YCSB's constant 0.99, scrambled) and/or uniform.
    #[arg(long, default_value = "zipfian", value_delimiter = ',')]
    distributions: Vec<String>,
    /// Concurrent clients (one transaction in flight each).
    #[arg(long, default_value = "16,32,64,128,256", value_delimiter = ',')]
    clients: Vec<usize>,
    /// Distinct keys per transaction.
    #[arg(long, default_value_t = 5)]
    ops: usize,
    /// Keys in the key space (YCSB's recordcount; the thesis loaded 1,000,000).
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Measured time per point.
    #[arg(long, default_value = "10s", value_parser = super::parse_duration)]
    duration: Duration,
    #[arg(long, default_value = "2s", value_parser = super::parse_duration)]
    warmup: Duration,
    /// Buckets and protocol of the local cluster.
    #[arg(long, default_value_t = 3)]
    buckets: u32,
    #[arg(long, default_value = "zab")]
    protocol: String,
    /// fsync policy of the local cluster.
    #[arg(long, default_value = "always")]
    fsync: String,
    /// Base port of the local cluster (KV ports from base + 300).
    #[arg(long, default_value_t = 26000)]
    base_port: u16,
    /// Make every update conditional on a version fetched first, as the thesis did (one more
    /// round trip, and an abort whenever another transaction wrote the key meanwhile); by
    /// default a YCSB update, which reads nothing, is a blind write.
    #[arg(long)]
    conditional_writes: bool,
    /// Write the results (markdown, with the thesis's figures beside them) here.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

/// One measured point.
#[derive(Clone, Debug)]
pub struct Point {
    pub workload: String,
    pub distribution: String,
    pub clients: usize,
    pub throughput: f64,
    pub goodput: f64,
    pub abort_rate: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Transactions whose outcome stayed unknown (timeouts).
    pub unknown: u64,
}

#[derive(Clone, Copy)]
enum Mix {
    /// Share of reads; the rest are updates (or read-modify-writes).
    Rw { read: f64, rmw: bool },
}

fn mix(workload: &str) -> Result<Mix> {
    Ok(match workload.to_ascii_uppercase().as_str() {
        "A" => Mix::Rw {
            read: 0.5,
            rmw: false,
        },
        "B" => Mix::Rw {
            read: 0.95,
            rmw: false,
        },
        "C" => Mix::Rw {
            read: 1.0,
            rmw: false,
        },
        "F" => Mix::Rw {
            read: 0.5,
            rmw: true,
        },
        w => bail!("unknown workload {w} (A, B, C or F)"),
    })
}

/// YCSB's scrambled zipfian (`ScrambledZipfianGenerator`): a zipfian rank (constant 0.99) over
/// 10^10 items, hashed (FNV-1a) onto the key space, so hot keys land anywhere; its hottest key
/// gets about 1/26 of the draws whatever the record count.
struct Keys {
    records: u64,
    zipf: Option<Zipf<f64>>,
}

impl Keys {
    fn new(records: u64, distribution: &str) -> Result<Keys> {
        let zipf = match distribution {
            "zipfian" => Some(Zipf::new(10_000_000_000, 0.99).context("zipf")?),
            "uniform" => None,
            d => bail!("unknown distribution {d} (zipfian or uniform)"),
        };
        Ok(Keys { records, zipf })
    }
    fn next(&self, rng: &mut SmallRng) -> Vec<u8> {
        let i = match &self.zipf {
            Some(z) => {
                synod_kv::route::fnv1a_64(&(z.sample(rng) as u64).to_le_bytes()) % self.records
            }
            None => rng.gen_range(0..self.records),
        };
        format!("user{i:012}").into_bytes()
    }
}

#[derive(Default)]
struct Counters {
    txns: AtomicU64,
    committed: AtomicU64,
    unknown: AtomicU64,
}

/// Run one point: `clients` loops of transactions for warm-up + duration.
async fn point(
    servers: &[String],
    a: &KvBenchArgs,
    workload: &str,
    distribution: &str,
    clients: usize,
) -> Result<Point> {
    let Mix::Rw { read, rmw } = mix(workload)?;
    let keys = Arc::new(Keys::new(a.records, distribution)?);
    let client = Client::connect_with(servers, ClientConfig::default())
        .await
        .context("connect")?;
    let counters = Arc::new(Counters::default());
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (client, keys, counters, measuring, stop) = (
            client.clone(),
            keys.clone(),
            counters.clone(),
            measuring.clone(),
            stop.clone(),
        );
        let (ops, value_bytes, conditional) = (a.ops, a.value_bytes, a.conditional_writes);
        tasks.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(c as u64 * 7919 + 1);
            let mut hist = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
            while !stop.load(Ordering::Relaxed) {
                let began = Instant::now();
                let Ok(mut txn) = client.begin().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let mut seen = std::collections::BTreeSet::new();
                let mut failed = false;
                while seen.len() < ops {
                    let key = keys.next(&mut rng);
                    if !seen.insert(key.clone()) {
                        continue;
                    }
                    let value = vec![b'x'; value_bytes];
                    let r = if rng.gen_bool(read) {
                        txn.get(&key).await.map(|_| ())
                    } else if rmw {
                        match txn.get(&key).await {
                            Ok(_) => txn.put(&key, value).await,
                            Err(e) => Err(e),
                        }
                    } else if conditional {
                        txn.put(&key, value).await
                    } else {
                        txn.put_blind(&key, value).await
                    };
                    if r.is_err() {
                        failed = true;
                        break;
                    }
                }
                let outcome = if failed {
                    None
                } else {
                    Some(txn.commit().await)
                };
                let counted = measuring.load(Ordering::Relaxed);
                if counted {
                    counters.txns.fetch_add(1, Ordering::Relaxed);
                    match outcome {
                        Some(Ok(o)) if o.is_committed() => {
                            counters.committed.fetch_add(1, Ordering::Relaxed);
                        }
                        Some(Ok(_)) => {}
                        _ => {
                            counters.unknown.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    let _ = hist.record(began.elapsed().as_micros() as u64);
                }
            }
            hist
        }));
    }
    tokio::time::sleep(a.warmup).await;
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(a.duration).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut hist = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
    for t in tasks {
        hist.add(t.await?).ok();
    }
    let txns = counters.txns.load(Ordering::Relaxed) as f64;
    let committed = counters.committed.load(Ordering::Relaxed) as f64;
    Ok(Point {
        workload: workload.to_ascii_uppercase(),
        distribution: distribution.into(),
        clients,
        throughput: txns * a.ops as f64 / elapsed,
        goodput: committed * a.ops as f64 / elapsed,
        abort_rate: if txns > 0.0 {
            1.0 - committed / txns
        } else {
            0.0
        },
        p50_ms: hist.value_at_quantile(0.5) as f64 / 1000.0,
        p99_ms: hist.value_at_quantile(0.99) as f64 / 1000.0,
        unknown: counters.unknown.load(Ordering::Relaxed),
    })
}

pub async fn bench(a: KvBenchArgs) -> Result<i32> {
    let mut cluster = None;
    let servers: Vec<String> = match &a.servers {
        Some(s) => s.split(',').map(|x| x.trim().to_string()).collect(),
        None => {
            let kind = crate::procs::Kind::Synod {
                protocol: a.protocol.clone(),
                sets: vec![
                    format!("fsync={:?}", a.fsync),
                    format!("kv.buckets={}", a.buckets),
                ],
            };
            let mut cl = crate::procs::Cluster::new(kind, 3, a.base_port, None)?;
            cl.kv_port = Some(a.base_port + 300);
            cl.start_all()?;
            let addrs = cl.kv_addrs();
            cluster = Some(cl);
            addrs
        }
    };
    // Wait until the store answers (every bucket has a master).
    let ready = Instant::now();
    loop {
        match Client::connect(&servers).await {
            Ok(c)
                if c.routing().view().buckets.iter().all(|b| b.master != 0)
                    && c.put(b"bench-ready", "1").await.is_ok() =>
            {
                break
            }
            _ if ready.elapsed() > Duration::from_secs(30) => {
                bail!("the KV store did not become ready in 30 s")
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    println!("workload  keys     clients  throughput  goodput  abort   p50 ms  p99 ms  unknown");
    let mut points = Vec::new();
    for w in &a.workloads {
        for d in &a.distributions {
            for &c in &a.clients {
                let p = point(&servers, &a, w, d, c).await?;
                println!(
                    "{:<9} {:<8} {:>7} {:>11.0} {:>8.0} {:>5.1} % {:>7.1} {:>7.1} {:>8}",
                    p.workload,
                    p.distribution,
                    p.clients,
                    p.throughput,
                    p.goodput,
                    p.abort_rate * 100.0,
                    p.p50_ms,
                    p.p99_ms,
                    p.unknown
                );
                points.push(p);
            }
        }
    }
    if let Some(out) = &a.out {
        std::fs::write(
            out,
            super::kv_report::markdown(&a_summary(&a, cluster.is_some()), &points),
        )
        .with_context(|| format!("cannot write {}", out.display()))?;
        println!("wrote {}", out.display());
    }
    drop(cluster);
    Ok(0)
}

fn a_summary(a: &KvBenchArgs, local: bool) -> String {
    format!(
        "`synod bench kv --workloads {} --distributions {} --clients {} --duration {}s --records {} --buckets {} --protocol {} --fsync {}{}`{}",
        a.workloads.join(","),
        a.distributions.join(","),
        a.clients.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(","),
        a.duration.as_secs(),
        a.records,
        a.buckets,
        a.protocol,
        a.fsync,
        if a.conditional_writes { " --conditional-writes" } else { "" },
        if local { " (a local 3-node cluster on this machine)" } else { "" }
    )
}
