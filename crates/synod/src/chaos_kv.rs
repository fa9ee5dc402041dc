//! `synod chaos --kv`: the same nemesis as `synod chaos` (kill -9, SIGSTOP, partition,
//! graceful restart, on a seeded schedule) against SconeKV's buckets, with transactional
//! clients whose every transaction is recorded and, at the end, checked for serializability by
//! the Elle-style checker (`synod_history::txn`: G0, G1a–c, G-single, G2, lost updates).
//!
//! Each client runs transactions of 1–4 keys drawn from a few keys spread over the buckets:
//! reads, and writes of a value unique in the run (or, one time in ten, deletes) after reading
//! the key (conditional on the version read, so the installed version is known even when the
//! commit's outcome is not). `--bug kv-skip-read-validation` or `kv-reset-on-delete` plants a
//! server bug the check must catch. After the faults stop and the cluster heals, one read-only transaction per
//! client reads every key, so lost writes show up as anomalies too.

use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use synod_history::txn::{check, Status, Txn, TxnOp};
use synod_kv_client::{Client, ClientConfig, OpKind, RecordedOutcome, Recorder, TxnRecord};

use crate::chaos::{nemesis, ChaosArgs, Clock, Events};
use crate::procs::{Cluster, Kind};

fn key(k: usize) -> String {
    format!("chaos-{k}")
}

fn value_of(b: &Option<bytes::Bytes>) -> Option<u64> {
    b.as_ref().map(|v| {
        let mut a = [0u8; 8];
        let n = v.len().min(8);
        a[8 - n..].copy_from_slice(&v[v.len() - n..]);
        u64::from_be_bytes(a)
    })
}

/// A client's record in the checker's format.
fn to_txn(r: &TxnRecord, n: u64, start: Instant) -> Txn {
    let ops = r
        .ops
        .iter()
        .map(|op| {
            let key = String::from_utf8_lossy(&op.key).into_owned();
            match op.kind {
                OpKind::Read => TxnOp::Read {
                    key,
                    version: op.version,
                    value: value_of(&op.value),
                },
                OpKind::Write => TxnOp::Write {
                    key,
                    value: value_of(&op.value).unwrap_or(0),
                    read_version: op.version,
                },
                OpKind::Delete => TxnOp::Delete {
                    key,
                    read_version: op.version,
                },
            }
        })
        .collect();
    Txn {
        id: n,
        status: match r.outcome {
            RecordedOutcome::Committed => Status::Committed,
            RecordedOutcome::Aborted => Status::Aborted,
            RecordedOutcome::Unknown => Status::Unknown,
        },
        ops,
        invoke_ns: r.begun.saturating_duration_since(start).as_nanos() as u64,
        complete_ns: r.finished.saturating_duration_since(start).as_nanos() as u64,
    }
}

async fn client(c: Client, id: u64, keys: usize, seed: u64, stop: Arc<AtomicBool>) -> (u64, u64) {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed ^ id.wrapping_mul(0x9e37_79b9));
    let (mut committed, mut counter) = (0, 0u64);
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut txn) = c.begin().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let n = rng.gen_range(1..=4.min(keys));
        let mut chosen: Vec<usize> = (0..keys).collect();
        for i in 0..n {
            let j = rng.gen_range(i..keys);
            chosen.swap(i, j);
        }
        let mut ok = true;
        for &k in &chosen[..n] {
            let r = if rng.gen_bool(0.5) {
                txn.get(key(k)).await.map(|_| ())
            } else if rng.gen_bool(0.1) {
                match txn.get(key(k)).await {
                    Ok(_) => txn.delete(key(k)).await,
                    Err(e) => Err(e),
                }
            } else {
                counter += 1;
                let v = (id << 40 | counter).to_be_bytes().to_vec();
                match txn.get(key(k)).await {
                    Ok(_) => txn.put(key(k), v).await,
                    Err(e) => Err(e),
                }
            };
            if r.is_err() {
                ok = false;
                break;
            }
        }
        if ok {
            if let Ok(o) = txn.commit().await {
                committed += o.is_committed() as u64;
            }
        } else {
            let _ = txn.abort().await;
        }
    }
    (committed, counter)
}

pub async fn chaos_kv(args: ChaosArgs, seed: u64) -> Result<i32> {
    let mut sets = vec![
        "fault_injection=true".to_string(),
        "kv.buckets=3".to_string(),
    ];
    if let Some(b) = &args.bug {
        sets.push(format!("debug_bug={b:?}"));
    }
    sets.extend(args.sets.iter().cloned());
    let mut cl = Cluster::new(
        Kind::Synod {
            protocol: args.protocol.clone(),
            sets,
        },
        args.nodes,
        args.base_port,
        None,
    )?;
    cl.kv_port = Some(args.base_port + 50);
    cl.start_all()?;
    let addrs = cl.kv_addrs();
    let records: Arc<Mutex<Vec<TxnRecord>>> = Arc::default();
    let config = || {
        let r = records.clone();
        ClientConfig {
            timeout: Duration::from_secs(2),
            recorder: Some(Recorder::new(move |t| r.lock().expect("records").push(t))),
            ..ClientConfig::default()
        }
    };
    let ready = Instant::now();
    let c = loop {
        match Client::connect_with(&addrs, config()).await {
            Ok(c)
                if c.routing().view().buckets.iter().all(|b| b.master != 0)
                    && c.get("chaos-ready").await.is_ok() =>
            {
                break c
            }
            _ if ready.elapsed() > Duration::from_secs(60) => {
                eprintln!("synod chaos --kv: the store did not become ready in 60 s");
                for i in 1..=cl.n {
                    eprintln!("--- node {i} log:\n{}", cl.log_tail(i, 15));
                }
                return Ok(2);
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let clock = Clock(Instant::now());
    let start = Instant::now();
    let stop_clients = Arc::new(AtomicBool::new(false));
    let stop_nemesis = Arc::new(AtomicBool::new(false));
    let events: Events = Arc::default();
    let tasks: Vec<_> = (0..args.clients as u64)
        .map(|id| {
            tokio::spawn(client(
                c.clone(),
                id + 1,
                args.keys,
                seed,
                stop_clients.clone(),
            ))
        })
        .collect();
    let cl = Arc::new(Mutex::new(cl));
    let nem = {
        let (cl, faults, stop, events) = (
            cl.clone(),
            args.faults.clone(),
            stop_nemesis.clone(),
            events.clone(),
        );
        std::thread::spawn(move || {
            nemesis(
                cl,
                faults,
                seed,
                Duration::from_secs(1),
                stop,
                clock,
                events,
            )
        })
    };
    tokio::time::sleep(args.duration).await;
    stop_nemesis.store(true, Ordering::Relaxed);
    let _ = tokio::task::spawn_blocking(move || nem.join()).await;
    // Healed: let the clients run a little longer, then stop them.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop_clients.store(true, Ordering::Relaxed);
    let mut committed = 0;
    for t in tasks {
        committed += t.await.map(|(c, _)| c).unwrap_or(0);
    }
    // Final reads: one read-only transaction over every key, retried until it commits.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut final_ok = false;
    while Instant::now() < deadline && !final_ok {
        if let Ok(mut t) = c.begin().await {
            let mut ok = true;
            for k in 0..args.keys {
                ok &= t.get(key(k)).await.is_ok();
            }
            final_ok = ok && t.commit().await.is_ok_and(|o| o.is_committed());
        }
        if !final_ok {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let records = std::mem::take(&mut *records.lock().expect("records"));
    let history: Vec<Txn> = records
        .iter()
        .enumerate()
        .map(|(i, r)| to_txn(r, i as u64 + 1, start))
        .collect();
    let report = check(&history);
    let unknown = records
        .iter()
        .filter(|r| r.outcome == RecordedOutcome::Unknown)
        .count();
    println!(
        "synod chaos --kv: {} transactions recorded, {committed} committed by the clients, {unknown} unknown; final read {}",
        history.len(),
        if final_ok { "committed" } else { "FAILED" }
    );
    println!("{report}");
    let failed = !report.ok() || !final_ok;
    if failed || args.keep {
        std::fs::create_dir_all(&args.out)?;
        let path = args.out.join(format!("kv-history-{seed}.json"));
        std::fs::write(&path, serde_json::to_string(&history)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("history written to {}", path.display());
    }
    let _ = events;
    Ok(if failed { 1 } else { 0 })
}
