//! The closed-loop load: the keys, one task per client, and the histograms.

use anyhow::{bail, Result};
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::conn::{setup_etcd, Conn};
use super::cost::{ServerCost, ServerProbe};
use super::{Proto, RunResult, Workload};
use crate::zkclient::ZkSession;

pub(super) fn key_path(i: usize) -> String {
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
pub(super) async fn run_workload(w: &Workload) -> Result<RunResult> {
    run_workload_probed(w, None).await
}

/// Run one workload; with a probe, also what the servers spent in the measured window (the
/// probe snapshots their counters when it opens and when it closes).
pub(super) async fn run_workload_probed(
    w: &Workload,
    probe: Option<ServerProbe>,
) -> Result<RunResult> {
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
    let mut before = None;
    tokio::time::sleep_until(shared.measure_from.into()).await;
    let machine0 = super::machine_cpu::busy();
    if let Some(p) = &probe {
        let p = p.clone();
        before = Some(tokio::task::spawn_blocking(move || p.snapshot()).await?);
    }
    tokio::time::sleep_until((shared.measure_to).into()).await;
    let machine1 = super::machine_cpu::busy();
    let mut after = None;
    if let Some(p) = probe {
        after = Some(tokio::task::spawn_blocking(move || p.snapshot()).await?);
    }
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
        op: match w.etcd_op {
            Some(op) => op.name(),
            None if w.create_delete => "create-delete",
            None => "set",
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
        server: match (before, after) {
            (Some(a), Some(b)) => Some(ServerCost::between(&a, &b, ops)),
            _ => None,
        },
        machine: super::machine_cpu::MachineCpu::between(machine0, machine1, secs, ops),
        link: None,
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
    // etcd's compare-and-put: the mod revision this client last saw of each key.
    let mut seen: std::collections::HashMap<usize, i64> = std::collections::HashMap::new();
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
            let res = if let Some(op) = w.etcd_op {
                let n = if op == super::conn::EtcdOp::TxnMulti {
                    4
                } else {
                    1
                };
                let mut picked: Vec<usize> = Vec::with_capacity(n);
                while picked.len() < n.min(w.keys) {
                    let k = pick(rng);
                    if !picked.contains(&k) {
                        picked.push(k);
                    }
                }
                let keys: Vec<String> = picked.iter().map(|&k| key_path(k)).collect();
                let s = seen.entry(picked[0]).or_insert(0);
                tokio::time::timeout(w.op_timeout, conn.etcd_op(op, &keys, value, s)).await
            } else if write && w.create_delete {
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
