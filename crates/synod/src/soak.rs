//! `synod soak`: load held for a long time. Many sessions (1,000 by default) each send requests
//! at a steady rate (open loop: the schedule does not wait for slow replies), against a cluster
//! it starts (or `--target`). Every interval it prints throughput, latency percentiles and each
//! node's resident memory, and at the end writes the series to docs/results/soak.md.

use anyhow::{bail, Result};
use clap::Args;
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::bench::parse_duration;
use crate::procs::{Cluster, Kind};
use crate::zkclient::ZkSession;

#[derive(Args, Debug)]
pub struct SoakArgs {
    /// Concurrent sessions.
    #[arg(long, default_value_t = 1000)]
    sessions: usize,
    /// Requests per second, all sessions together.
    #[arg(long, default_value_t = 2000)]
    rate: u64,
    /// How long to hold the load.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    duration: Duration,
    /// Reporting interval.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    report_every: Duration,
    /// Percentage of writes (setData of 1 KiB); the rest are getData.
    #[arg(long, default_value_t = 20)]
    write_ratio: u32,
    /// Replication protocol of the cluster it starts (zab, a Zab variant, paxos, paxos-mbq,
    /// paxos-none, mencius).
    #[arg(long, default_value = "zab")]
    protocol: String,
    /// Use running servers instead (host:port,…; memory is then not reported).
    #[arg(long)]
    target: Option<String>,
    /// Where to write soak.md: target/results unless named (`--out docs/results` replaces the
    /// committed document).
    #[arg(long, default_value = "target/results")]
    out: std::path::PathBuf,
    #[arg(long, default_value_t = 23600)]
    base_port: u16,
    /// Configuration overrides for every node of the cluster it starts (`--set key=value`,
    /// repeatable), e.g. `--set snapshot_every=20000` for more compactions.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
}

struct Interval {
    hist: Histogram<u64>,
    errors: u64,
}

fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).expect("histogram bounds")
}

pub fn run(a: SoakArgs) -> Result<i32> {
    if a.sessions == 0 || a.sessions > 20_000 || a.rate == 0 {
        bail!("--sessions must be 1..=20000 and --rate positive");
    }
    if a.target.is_none() {
        crate::procs::check_protocol(&a.protocol)?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(soak(a))
}

async fn soak(a: SoakArgs) -> Result<i32> {
    let mut cluster = None;
    let addrs: Vec<String> = match &a.target {
        Some(t) => t.split(',').map(|s| s.trim().to_string()).collect(),
        None => {
            let mut cl = Cluster::new(
                Kind::Synod {
                    protocol: a.protocol.clone(),
                    sets: a.sets.clone(),
                },
                3,
                a.base_port,
                None,
            )?;
            cl.start_all()?;
            let addrs = cl.client_addrs();
            cluster = Some(cl);
            addrs
        }
    };
    // Set up the keys (retrying while the cluster elects).
    let value = vec![b's'; 1024];
    let keys = 1000usize;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let attempt = async {
            let mut s =
                ZkSession::connect(&addrs[0], 30_000, None, 0, Duration::from_secs(3)).await?;
            let _ = s.create("/soak", b"", 0).await?;
            for k in 0..keys {
                let _ = s.create(&format!("/soak/k{k}"), &value, 0).await?;
            }
            let _ = s.close().await;
            Ok::<_, anyhow::Error>(())
        };
        match tokio::time::timeout(Duration::from_secs(30), attempt).await {
            Ok(Ok(())) => break,
            _ if Instant::now() > deadline => bail!("the cluster did not become ready"),
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    let interval = Arc::new(Mutex::new(Interval {
        hist: new_hist(),
        errors: 0,
    }));
    let stop = Arc::new(AtomicBool::new(false));
    let connected = Arc::new(AtomicU64::new(0));
    let per_session = Duration::from_secs_f64(a.sessions as f64 / a.rate as f64);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..a.sessions {
        let addr = addrs[i % addrs.len()].clone();
        let (interval, stop, connected, value) = (
            interval.clone(),
            stop.clone(),
            connected.clone(),
            value.clone(),
        );
        let wr = a.write_ratio;
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(i as u64);
            // Spread the first requests over one period, and the connects over a few seconds.
            tokio::time::sleep(Duration::from_millis(i as u64 % 5000)).await;
            let mut next = Instant::now() + per_session.mul_f64(rng.gen::<f64>());
            let mut s: Option<ZkSession> = None;
            while !stop.load(Ordering::Relaxed) {
                if s.is_none() {
                    match ZkSession::connect(&addr, 10_000, None, 0, Duration::from_secs(10)).await
                    {
                        Ok(x) => {
                            connected.fetch_add(1, Ordering::Relaxed);
                            s = Some(x);
                        }
                        Err(_) => {
                            interval.lock().expect("interval").errors += 1;
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            continue;
                        }
                    }
                }
                tokio::time::sleep_until(next.into()).await;
                // Latency counts from the scheduled time (no coordinated omission).
                let scheduled = next;
                next += per_session;
                let k = format!("/soak/k{}", rng.gen_range(0..keys));
                let sess = s.as_mut().expect("session");
                let res = tokio::time::timeout(Duration::from_secs(10), async {
                    if rng.gen_range(0..100) < wr {
                        Ok::<_, anyhow::Error>(sess.set_data(&k, &value, -1).await?.0.err)
                    } else {
                        Ok(sess.get_data(&k).await?.0.err)
                    }
                })
                .await;
                let mut iv = interval.lock().expect("interval");
                match res {
                    Ok(Ok(0)) => {
                        let _ = iv
                            .hist
                            .record(scheduled.elapsed().as_micros().max(1) as u64);
                    }
                    _ => {
                        iv.errors += 1;
                        drop(iv);
                        connected.fetch_sub(1, Ordering::Relaxed);
                        s = None;
                    }
                }
            }
            if let Some(s) = s {
                let _ = tokio::time::timeout(Duration::from_secs(2), s.close()).await;
            }
        }));
    }
    let mut rows = Vec::new();
    println!(
        "synod soak: {} sessions, {} req/s, {}% writes, {:?}",
        a.sessions, a.rate, a.write_ratio, a.duration
    );
    println!(
        "{:>7} {:>9} {:>9} {:>8} {:>8} {:>8} {:>7}  {:<18} snapshots / segments unlinked",
        "t s", "sessions", "ops/s", "p50 µs", "p99 µs", "max µs", "errors", "RSS MiB per node"
    );
    let mut tick = tokio::time::interval(a.report_every);
    tick.tick().await;
    let mut failed = false;
    while start.elapsed() < a.duration {
        tick.tick().await;
        let (h, errors) = {
            let mut iv = interval.lock().expect("interval");
            let h = std::mem::replace(&mut iv.hist, new_hist());
            let e = std::mem::take(&mut iv.errors);
            (h, e)
        };
        // Compaction so far, all nodes together: snapshots of the ZooKeeper group taken and
        // log segments unlinked (the work that used to stall writes).
        let compaction = cluster.as_ref().map(|cl| {
            let mut snaps = 0.0;
            let mut unlinked = 0.0;
            for i in 1..=cl.n {
                if let Ok(m) = crate::procs::admin_http(&cl.admin_addr(i), "GET", "/metrics") {
                    snaps +=
                        crate::procs::metric(&m, "synod_group_snapshots_taken_total{group=\"0\"}")
                            .unwrap_or(0.0);
                    unlinked +=
                        crate::procs::metric(&m, "synod_wal_segments_deleted_total").unwrap_or(0.0);
                }
            }
            (snaps as u64, unlinked as u64)
        });
        let rss: Vec<f64> = match &cluster {
            Some(cl) => (1..=cl.n)
                .map(|i| cl.rss_bytes(i).unwrap_or(0) as f64 / 1048576.0)
                .collect(),
            None => vec![],
        };
        if let Some(cl) = &mut cluster {
            for i in 1..=cl.n {
                if !cl.is_running(i) {
                    println!("node {i} exited:\n{}", cl.log_tail(i, 20));
                    failed = true;
                }
            }
        }
        let row = (
            start.elapsed().as_secs_f64(),
            connected.load(Ordering::Relaxed),
            h.len() as f64 / a.report_every.as_secs_f64(),
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.max(),
            errors,
            rss,
            compaction,
        );
        println!(
            "{:>7.0} {:>9} {:>9.0} {:>8} {:>8} {:>8} {:>7}  {:<18} {}",
            row.0,
            row.1,
            row.2,
            row.3,
            row.4,
            row.5,
            row.6,
            row.7
                .iter()
                .map(|m| format!("{m:.0}"))
                .collect::<Vec<_>>()
                .join(" / "),
            row.8.map_or(String::new(), |(s, u)| format!("{s} / {u}"))
        );
        rows.push(row);
        if failed {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let mut md = format!(
        "# Soak: {} sessions at {} requests/s for {:?}\n\nGenerated by `synod soak --sessions {} \
         --rate {} --duration {}s{}`; 3 synod nodes ({}) on loopback, fsync always, {}% setData \
         of 1 KiB, the rest getData, over 1000 znodes. Open loop: latency counts from each \
         request's scheduled time. The last column counts, on all nodes together since the start, \
         snapshots of the ZooKeeper group and log segments unlinked by compaction.\n\n\
         | t (s) | sessions | ops/s | p50 µs | p99 µs | max µs | errors | RSS MiB per node | \
         snapshots / segments unlinked |\n|---:|---:|---:|---:|---:|---:|---:|---|---|\n",
        a.sessions,
        a.rate,
        a.duration,
        a.sessions,
        a.rate,
        a.duration.as_secs(),
        a.sets
            .iter()
            .map(|s| format!(" --set {s}"))
            .collect::<String>(),
        a.protocol,
        a.write_ratio
    );
    for r in &rows {
        md += &format!(
            "| {:.0} | {} | {:.0} | {} | {} | {} | {} | {} | {} |\n",
            r.0,
            r.1,
            r.2,
            r.3,
            r.4,
            r.5,
            r.6,
            r.7.iter()
                .map(|m| format!("{m:.0}"))
                .collect::<Vec<_>>()
                .join(" / "),
            r.8.map_or(String::new(), |(s, u)| format!("{s} / {u}"))
        );
    }
    std::fs::create_dir_all(&a.out)?;
    std::fs::write(a.out.join("soak.md"), md)?;
    println!("wrote {}", a.out.join("soak.md").display());
    if let Some(mut cl) = cluster {
        cl.stop_all();
    }
    Ok(if failed { 1 } else { 0 })
}
