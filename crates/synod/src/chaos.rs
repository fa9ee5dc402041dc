//! `synod chaos`: Jepsen-style fault injection on a real cluster of `synod server` processes.
//!
//! Clients (one ZooKeeper session each) read (`sync` then `getData`), write (`setData`) and
//! compare-and-set (`setData` with a version) a few znodes while a nemesis, driven by a seeded
//! schedule, kills (-9) nodes or the leader, pauses them (SIGSTOP) for longer than the session
//! timeout, partitions one node from the others (the transport's fault-injection hook, see
//! docs/testing.md for why) and restarts them gracefully. Every operation is recorded with its
//! real invocation and completion times; at the end the cluster is healed and the history is
//! checked: linearizability per key (Wing–Gong with Lowe's memoisation, `synod-history`), no
//! acknowledged write lost (final reads at every node), zxids never going backwards within a
//! session, and every ephemeral of an expired or closed session gone at every node.
//!
//! Exit status: 0 when every check holds, 1 when one fails (the history is written to a file
//! and the anomaly named), 2 when the run itself could not be carried out.

use anyhow::{bail, Context, Result};
use clap::Args;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use synod_history::{Budget, Call, FinalRead, FinalReads, History, Op, Outcome, Ret, ZnodeState};
use synod_zk::jute::{err, mode};

use crate::bench::parse_duration;
use crate::procs::{Cluster, Kind};
use crate::zkclient::{SessionId, ZkSession};

#[derive(Args, Debug, Clone)]
pub struct ChaosArgs {
    /// Replicas.
    #[arg(long, default_value_t = 3)]
    pub(crate) nodes: u32,
    /// Time under faults (clients run throughout).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub(crate) duration: Duration,
    /// Fault kinds: kill, pause, partition, restart (comma-separated), or none.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kill,pause,partition,restart"
    )]
    pub(crate) faults: Vec<String>,
    /// Replication protocol of the cluster: zab, a Zab variant (zab-ct, zab-aa, …), PFT
    /// Multi-Paxos (paxos, paxos-mbq, paxos-none), or mencius.
    #[arg(long, default_value = "zab")]
    pub(crate) protocol: String,
    /// Seed of the fault schedule and of the clients' choices (random if not given; printed
    /// either way, and the same seed replays the same schedule).
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Concurrent client sessions.
    #[arg(long, default_value_t = 6)]
    pub(crate) clients: usize,
    /// Znodes the clients work on.
    #[arg(long, default_value_t = 3)]
    pub(crate) keys: usize,
    /// Share of operations that are reads (sync + getData), in percent; the rest are writes
    /// and conditional writes in the ratio 3:3. A read-heavy mix shows stale reads at a
    /// cut-off server sooner: a client's first write there blocks its session, so only the
    /// reads before it can come back stale.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub(crate) reads: u8,
    /// Pause between two operations of one client.
    #[arg(long, default_value = "2ms", value_parser = parse_duration)]
    pub(crate) think: Duration,
    /// Client session timeout (pauses last longer than this).
    #[arg(long, default_value_t = 3000)]
    pub(crate) session_timeout_ms: i32,
    /// A planted server bug, to prove the harness catches it: stale-sync (with --kv:
    /// kv-skip-read-validation or kv-reset-on-delete).
    #[arg(long)]
    pub(crate) bug: Option<String>,
    /// Configuration overrides for every server (`--set key=value`, repeatable), e.g.
    /// `--set log_level=info` to keep the view changes in the nodes' logs.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) sets: Vec<String>,
    /// Directory for the history (written when a check fails, or always with --keep).
    #[arg(long, default_value = "target/chaos")]
    pub(crate) out: PathBuf,
    /// Write the history even when every check passes.
    #[arg(long)]
    pub(crate) keep: bool,
    /// First port (client BASE+i, peer BASE+700+i, admin BASE+800+i).
    #[arg(long, default_value_t = 25000)]
    pub(crate) base_port: u16,
    /// Check a recorded history file instead of running a cluster.
    #[arg(long)]
    pub(crate) check: Option<PathBuf>,
    /// Run against SconeKV's transactional store instead of the ZooKeeper API (chaos_kv.rs):
    /// transactions on `--keys` keys over 3 buckets, checked for serializability.
    #[arg(long)]
    pub(crate) kv: bool,
}

const OP_TIMEOUT: Duration = Duration::from_secs(2);

fn key_path(k: usize) -> String {
    format!("/chaos/k{k}")
}

/// Monotonic nanoseconds since the start of the run.
#[derive(Clone, Copy)]
pub(crate) struct Clock(pub(crate) Instant);
impl Clock {
    fn ns(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

pub fn run(args: ChaosArgs) -> Result<i32> {
    if let Some(path) = &args.check {
        let h = History::from_json_file(path)
            .with_context(|| format!("cannot read history {}", path.display()))?;
        let report = synod_history::check_all(&h, None, Budget::default());
        println!("{report}");
        return Ok(if report.passed() { 0 } else { 1 });
    }
    for f in &args.faults {
        if !matches!(
            f.as_str(),
            "kill" | "pause" | "partition" | "restart" | "none"
        ) {
            bail!("--faults: unknown fault '{f}' (kill, pause, partition, restart, none)");
        }
    }
    if !(1..=9).contains(&args.nodes) {
        bail!("--nodes must be between 1 and 9");
    }
    crate::procs::check_protocol(&args.protocol)?;
    if args.clients == 0 || args.clients > 200 || args.keys == 0 || args.keys > 100 {
        bail!("--clients must be 1..=200 and --keys 1..=100");
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    println!(
        "synod chaos: seed {seed} (replay with --seed {seed}), protocol {}, {} nodes, {:?}, faults {}",
        args.protocol,
        args.nodes,
        args.duration,
        args.faults.join(",")
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if args.kv {
        return rt.block_on(crate::chaos_kv::chaos_kv(args, seed));
    }
    rt.block_on(chaos(args, seed))
}

fn status(cl: &Cluster, i: u32) -> Option<serde_json::Value> {
    crate::procs::admin_http(&cl.admin_addr(i), "GET", "/v1/status")
        .ok()
        .and_then(|b| serde_json::from_str(&b).ok())
}

/// The leader, or under a multi-leader protocol (every replica a proposer) the session-duty
/// holder, which is where the faults aimed at "the leader" hurt most.
fn leader_of(cl: &Cluster) -> Option<u32> {
    (1..=cl.n).find(|&i| {
        status(cl, i).is_some_and(|s| {
            s["role"] == "leading" || (s["role"] == "proposer" && s["leader"] == i)
        }) && !cl.is_paused(i)
            && cl.pid(i).is_some()
    })
}

fn cut(cl: &Cluster, i: u32, peers: &[u32]) -> Result<()> {
    let list: Vec<String> = peers.iter().map(|p| p.to_string()).collect();
    crate::procs::admin_http(
        &cl.admin_addr(i),
        "POST",
        &format!("/v1/fault/cut?peers={}", list.join(",")),
    )
    .map(|_| ())
}

/// What the nemesis did, for the record.
pub(crate) type Events = Arc<Mutex<Vec<(u64, String)>>>;

fn note(events: &Events, clock: Clock, what: String) {
    println!("  [{:>7.2}s] {what}", clock.ns() as f64 / 1e9);
    events.lock().expect("events").push((clock.ns(), what));
}

/// The fault schedule: run until `stop`, then heal everything.
pub(crate) fn nemesis(
    cl: Arc<Mutex<Cluster>>,
    faults: Vec<String>,
    seed: u64,
    session_timeout: Duration,
    stop: Arc<AtomicBool>,
    clock: Clock,
    events: Events,
) {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed ^ 0x6e656d65736973);
    let faults: Vec<String> = faults.into_iter().filter(|f| f != "none").collect();
    let sleep_until_stop = |d: Duration| {
        let end = Instant::now() + d;
        while Instant::now() < end && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let n = cl.lock().expect("cluster").n;
    while !stop.load(Ordering::Relaxed) && !faults.is_empty() {
        sleep_until_stop(Duration::from_millis(rng.gen_range(1000..3000)));
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let kind = faults[rng.gen_range(0..faults.len())].clone();
        let at_leader = rng.gen_bool(0.4);
        let random = rng.gen_range(1..=n);
        let hold = Duration::from_millis(rng.gen_range(1500..5000));
        let target = if at_leader {
            leader_of(&cl.lock().expect("cluster")).unwrap_or(random)
        } else {
            random
        };
        let who = if at_leader {
            format!("node {target} (leader)")
        } else {
            format!("node {target}")
        };
        match kind.as_str() {
            "kill" => {
                cl.lock().expect("cluster").kill(target);
                note(&events, clock, format!("kill -9 {who}"));
                sleep_until_stop(hold);
                let r = cl.lock().expect("cluster").start(target);
                note(&events, clock, format!("start node {target} ({r:?})"));
            }
            "restart" => {
                cl.lock()
                    .expect("cluster")
                    .stop(target, Duration::from_secs(10));
                note(&events, clock, format!("stop (SIGTERM) {who}"));
                sleep_until_stop(hold / 3);
                let r = cl.lock().expect("cluster").start(target);
                note(&events, clock, format!("start node {target} ({r:?})"));
            }
            "pause" => {
                cl.lock().expect("cluster").pause(target);
                let hold = session_timeout + hold;
                note(&events, clock, format!("SIGSTOP {who} for {hold:?}"));
                sleep_until_stop(hold);
                cl.lock().expect("cluster").resume(target);
                note(&events, clock, format!("SIGCONT node {target}"));
            }
            "partition" => {
                let c = cl.lock().expect("cluster");
                let others: Vec<u32> = (1..=n).filter(|&j| j != target).collect();
                let mut ok = cut(&c, target, &others).is_ok();
                for &j in &others {
                    ok &= cut(&c, j, &[target]).is_ok();
                }
                drop(c);
                note(
                    &events,
                    clock,
                    format!(
                        "partition {who} from {others:?}{}",
                        if ok { "" } else { " (some nodes were down)" }
                    ),
                );
                sleep_until_stop(hold);
                let c = cl.lock().expect("cluster");
                for j in 1..=n {
                    let _ = cut(&c, j, &[]);
                }
                note(&events, clock, "heal partition".into());
            }
            _ => {}
        }
    }
    // Heal everything.
    let mut c = cl.lock().expect("cluster");
    for j in 1..=n {
        c.resume(j);
        if c.pid(j).is_none() || !c.is_running(j) {
            let _ = c.start(j);
        }
    }
    for j in 1..=n {
        let _ = cut(&c, j, &[]);
    }
    drop(c);
    note(
        &events,
        clock,
        "nemesis stopped; every node up and healed".into(),
    );
}

struct ClientCtx {
    id: usize,
    addrs: Vec<String>,
    keys: usize,
    reads_percent: u8,
    think: Duration,
    session_timeout_ms: i32,
    clock: Clock,
    stop: Arc<AtomicBool>,
    ops: Arc<Mutex<Vec<Op>>>,
    next_id: Arc<std::sync::atomic::AtomicU64>,
    /// Sessions this client opened (their ephemerals must all be gone at the end).
    sessions: Arc<Mutex<Vec<i64>>>,
}

/// One client: a closed loop of random operations, reattaching its session elsewhere when its
/// server goes away, and opening a new one when the session expired.
async fn client(ctx: ClientCtx, seed: u64) -> Option<ZkSession> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed ^ (ctx.id as u64).wrapping_mul(0x9e37));
    let mut node = ctx.id % ctx.addrs.len();
    let mut resume: Option<SessionId> = None;
    let mut last_zxid = 0i64;
    let mut session: Option<ZkSession> = None;
    let mut counter = 0i64;
    let mut seen_version: BTreeMap<usize, i32> = BTreeMap::new();
    while !ctx.stop.load(Ordering::Relaxed) {
        let s = match session.as_mut() {
            Some(s) => s,
            None => {
                match ZkSession::connect(
                    &ctx.addrs[node],
                    ctx.session_timeout_ms,
                    resume,
                    last_zxid,
                    OP_TIMEOUT,
                )
                .await
                {
                    Ok(mut s) => {
                        if resume.map(|r| r.id) != Some(s.session.id) {
                            // A new session: mark it with an ephemeral.
                            ctx.sessions.lock().expect("sessions").push(s.session.id);
                            let p = format!("/chaos/eph/c{}-{:x}", ctx.id, s.session.id);
                            let _ = tokio::time::timeout(
                                OP_TIMEOUT,
                                s.create(&p, b"", mode::EPHEMERAL),
                            )
                            .await;
                        }
                        resume = Some(s.session);
                        session = Some(s);
                        session.as_mut().expect("set")
                    }
                    Err(e) => {
                        if e.to_string().contains("refused the session") {
                            // Expired (or unknown here): start over with a new session.
                            resume = None;
                        }
                        node = (node + 1) % ctx.addrs.len();
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
        };
        let k = rng.gen_range(0..ctx.keys);
        let path = key_path(k);
        let dice = rng.gen_range(0..100u32);
        let reads = u32::from(ctx.reads_percent);
        let call = if dice < reads {
            Call::Read
        } else if dice < reads + (100 - reads) / 2 {
            counter += 1;
            Call::Write {
                value: (ctx.id as i64 + 1) * 1_000_000_000 + counter,
            }
        } else {
            counter += 1;
            let v = *seen_version.get(&k).unwrap_or(&0) + rng.gen_range(0..2);
            Call::Cas {
                expect_version: v,
                value: (ctx.id as i64 + 1) * 1_000_000_000 + counter,
            }
        };
        let invoke = ctx.clock.ns();
        let sid = s.session.id;
        let res = tokio::time::timeout(OP_TIMEOUT, async {
            match call {
                Call::Read => {
                    let r = s.sync(&path).await?;
                    if r.err != 0 {
                        return Ok((r.err, r.zxid, None));
                    }
                    let (r, got) = s.get_data(&path).await?;
                    let ret = got.map(|(data, stat)| Ret::Read {
                        value: std::str::from_utf8(&data)
                            .ok()
                            .and_then(|t| t.parse().ok())
                            .unwrap_or(i64::MIN),
                        version: stat.version,
                    });
                    Ok::<_, anyhow::Error>((r.err, r.zxid, ret))
                }
                Call::Write { value } | Call::Cas { value, .. } => {
                    let version = match call {
                        Call::Cas { expect_version, .. } => expect_version,
                        _ => -1,
                    };
                    let (r, stat) = s
                        .set_data(&path, value.to_string().as_bytes(), version)
                        .await?;
                    let ret = if r.err == err::BAD_VERSION {
                        Some(Ret::BadVersion)
                    } else {
                        stat.map(|st| Ret::Written {
                            version: st.version,
                        })
                    };
                    Ok((r.err, r.zxid, ret))
                }
            }
        })
        .await;
        let complete = ctx.clock.ns();
        let (outcome, zxid, lost) = match res {
            Ok(Ok((_, zxid, Some(ret)))) => {
                match ret {
                    Ret::Read { version, .. } | Ret::Written { version } => {
                        seen_version.insert(k, version);
                    }
                    Ret::BadVersion => {}
                }
                (Outcome::Ok(ret), Some(zxid), false)
            }
            // An error reply (session expired or moved, ...): the server did not apply it.
            Ok(Ok((e, _, None))) => (Outcome::Failed, None, e == err::SESSION_EXPIRED),
            // No reply: the operation may or may not have happened.
            _ => (Outcome::Unknown, None, true),
        };
        let op = Op {
            id: ctx
                .next_id
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            process: ctx.id as u64,
            session: sid,
            key: path.clone(),
            call,
            invoke_ns: invoke,
            complete_ns: (outcome != Outcome::Unknown).then_some(complete),
            outcome,
            zxid,
            node: Some((node + 1) as u8),
        };
        ctx.ops.lock().expect("ops").push(op);
        if lost {
            if let Some(s) = session.take() {
                last_zxid = last_zxid.max(s.last_zxid);
            }
            node = (node + 1) % ctx.addrs.len();
        }
        if let Some(s) = &session {
            last_zxid = last_zxid.max(s.last_zxid);
        }
        if session.is_some() && rng.gen_ratio(1, 3000) {
            // A client crash: the session is abandoned without closing it; the cluster must
            // expire it and remove its ephemeral everywhere.
            session = None;
            resume = None;
        }
        if !ctx.think.is_zero() {
            tokio::time::sleep(ctx.think).await;
        }
    }
    session
}

async fn chaos(args: ChaosArgs, seed: u64) -> Result<i32> {
    let mut sets = vec![
        "fault_injection=true".to_string(),
        "zookeeper.min_session_timeout_ms=1000".to_string(),
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
    cl.start_all()?;
    let addrs = cl.client_addrs();
    // Wait for a leader and create the keys.
    let setup = async {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let attempt = async {
                let mut s =
                    ZkSession::connect(&addrs[0], 10_000, None, 0, Duration::from_secs(3)).await?;
                for p in ["/chaos", "/chaos/eph"] {
                    let r = s.create(p, b"", 0).await?;
                    if r.err != 0 && r.err != err::NODE_EXISTS {
                        bail!("create {p}: error {}", r.err);
                    }
                }
                for k in 0..args.keys {
                    let r = s.create(&key_path(k), b"0", 0).await?;
                    if r.err != 0 && r.err != err::NODE_EXISTS {
                        bail!("create key: error {}", r.err);
                    }
                }
                let _ = s.close().await;
                Ok(())
            };
            match tokio::time::timeout(Duration::from_secs(5), attempt).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) if Instant::now() > deadline => return Err(e),
                Err(_) if Instant::now() > deadline => bail!("cluster not ready in 60 s"),
                _ => tokio::time::sleep(Duration::from_millis(300)).await,
            }
        }
    };
    if let Err(e) = setup.await {
        eprintln!("synod chaos: the cluster did not start: {e:#}");
        for i in 1..=cl.n {
            eprintln!("--- node {i} log:\n{}", cl.log_tail(i, 15));
        }
        return Ok(2);
    }
    let clock = Clock(Instant::now());
    let stop_clients = Arc::new(AtomicBool::new(false));
    let stop_nemesis = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(Mutex::new(Vec::new()));
    let sessions = Arc::new(Mutex::new(Vec::new()));
    let next_id = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let events: Events = Arc::default();
    let mut tasks = Vec::new();
    for id in 0..args.clients {
        let ctx = ClientCtx {
            id,
            addrs: addrs.clone(),
            keys: args.keys,
            reads_percent: args.reads,
            think: args.think,
            session_timeout_ms: args.session_timeout_ms,
            clock,
            stop: stop_clients.clone(),
            ops: ops.clone(),
            next_id: next_id.clone(),
            sessions: sessions.clone(),
        };
        tasks.push(tokio::spawn(client(ctx, seed)));
    }
    let cl = Arc::new(Mutex::new(cl));
    let nem = {
        let cl = cl.clone();
        let faults = args.faults.clone();
        let stop = stop_nemesis.clone();
        let events = events.clone();
        let st = Duration::from_millis(args.session_timeout_ms as u64);
        tokio::task::spawn_blocking(move || nemesis(cl, faults, seed, st, stop, clock, events))
    };
    tokio::time::sleep(args.duration).await;
    stop_nemesis.store(true, Ordering::Relaxed);
    nem.await?;
    // Let clients work a little on the healed cluster, then stop them.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop_clients.store(true, Ordering::Relaxed);
    let mut live = Vec::new();
    for t in tasks {
        if let Some(s) = t.await? {
            live.push(s);
        }
    }
    let mut history = History::new();
    history.ops = std::mem::take(&mut *ops.lock().expect("ops"));
    history.ops.sort_by_key(|o| o.invoke_ns);
    for k in 0..args.keys {
        history.initial.insert(key_path(k), ZnodeState::new(0, 0));
    }
    history.meta.insert("seed".into(), seed.into());
    history
        .meta
        .insert("protocol".into(), args.protocol.clone().into());
    history.meta.insert(
        "faults".into(),
        serde_json::to_value(&*events.lock().expect("events"))?,
    );
    let (ok_ops, unknown) = history
        .ops
        .iter()
        .fold((0, 0), |(a, b), o| match o.outcome {
            Outcome::Ok(_) => (a + 1, b),
            Outcome::Unknown => (a, b + 1),
            Outcome::Failed => (a, b),
        });
    println!(
        "history: {} operations ({ok_ops} ok, {unknown} indeterminate), {} sessions",
        history.ops.len(),
        sessions.lock().expect("sessions").len()
    );
    let mut anomalies: Vec<String> = Vec::new();
    // Close the live sessions (their ephemerals go with them).
    for s in live {
        let _ = tokio::time::timeout(Duration::from_secs(5), s.close()).await;
    }
    // Convergence: every node at the same applied slot and digest.
    let converged = {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let sts: Vec<Option<(u64, u64)>> = {
                let c = cl.lock().expect("cluster");
                (1..=c.n)
                    .map(|i| {
                        status(&c, i).and_then(|s| {
                            Some((s["applied_slot"].as_u64()?, s["digest"].as_u64()?))
                        })
                    })
                    .collect()
            };
            if sts.iter().all(|s| s.is_some() && *s == sts[0]) {
                break true;
            }
            if Instant::now() > deadline {
                anomalies.push(format!(
                    "replicas did not converge within 60 s after healing: (applied slot, digest) = {sts:?}"
                ));
                break false;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    // Final reads of every key at every node, and the ephemerals of dead sessions.
    let mut finals: FinalReads = BTreeMap::new();
    let expire_wait = Duration::from_millis(args.session_timeout_ms as u64 * 2 + 2000);
    tokio::time::sleep(expire_wait).await;
    for (i, addr) in addrs.iter().enumerate() {
        let res = async {
            let mut s = ZkSession::connect(addr, 10_000, None, 0, Duration::from_secs(5)).await?;
            let mut out = Vec::new();
            for k in 0..args.keys {
                let p = key_path(k);
                s.sync(&p).await?;
                let (_, got) = s.get_data(&p).await?;
                let (data, stat) = got.context("key missing")?;
                let value: i64 = std::str::from_utf8(&data)?.parse()?;
                out.push((p, value, stat.version));
            }
            let (_, eph) = s.get_children("/chaos/eph").await?;
            let _ = s.close().await;
            Ok::<_, anyhow::Error>((out, eph))
        };
        match tokio::time::timeout(Duration::from_secs(20), res).await {
            Ok(Ok((reads, eph))) => {
                for (p, value, version) in reads {
                    finals.entry(p).or_default().push(FinalRead {
                        node: (i + 1) as u8,
                        value,
                        version,
                    });
                }
                if !eph.is_empty() {
                    anomalies.push(format!(
                        "node {}: ephemerals of closed or expired sessions still present \
                         {expire_wait:?} after the end: {eph:?}",
                        i + 1
                    ));
                }
            }
            Ok(Err(e)) => anomalies.push(format!("final read at node {} failed: {e:#}", i + 1)),
            Err(_) => anomalies.push(format!("final read at node {} timed out", i + 1)),
        }
    }
    let t0 = Instant::now();
    let report = synod_history::check_all(&history, Some(&finals), Budget::default());
    println!("checked in {:.1} s:\n{report}", t0.elapsed().as_secs_f64());
    println!(
        "ephemerals of ended sessions gone everywhere: {}",
        if anomalies.iter().any(|a| a.contains("ephemerals")) {
            "FAIL"
        } else {
            "PASS"
        }
    );
    println!(
        "replicas converged after healing: {}",
        if converged { "PASS" } else { "FAIL" }
    );
    let failed = !report.passed() || !anomalies.is_empty();
    if failed || args.keep {
        std::fs::create_dir_all(&args.out)?;
        let path = args.out.join(format!("history-{seed}.json"));
        history.to_json_file(&path)?;
        println!("history written to {}", path.display());
    }
    if failed {
        for a in &anomalies {
            println!("ANOMALY: {a}");
        }
        if report.linearizability.verdict() == synod_history::Verdict::Fail {
            println!("ANOMALY: the history is not linearizable (see above)");
        }
        for v in report.violations() {
            println!("ANOMALY: {v}");
        }
        if report.verdict() == synod_history::Verdict::Unknown {
            println!("ANOMALY: linearizability undecided within the search budget");
        }
        println!("synod chaos: FAILED (seed {seed})");
        let c = cl.lock().expect("cluster");
        println!("cluster logs in {}", c.dir.display());
        // Keep the logs for the post-mortem.
        let keep = args.out.join(format!("logs-{seed}"));
        let _ = std::fs::create_dir_all(&keep);
        for i in 1..=c.n {
            let _ = std::fs::copy(
                c.dir.join(format!("node{i}.log")),
                keep.join(format!("node{i}.log")),
            );
        }
        return Ok(1);
    }
    println!("synod chaos: PASSED (seed {seed})");
    cl.lock().expect("cluster").stop_all();
    Ok(0)
}
