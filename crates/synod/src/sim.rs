//! `synod sim`: run seeds of a protocol in the simulator and print what the checkers found.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::time::Instant;
use synod_core::Role;
use synod_protocols as protocols;
use synod_sim::{ClockModel, CostModel, FaultSet, NetModel, Report, SimConfig, Wan};

#[derive(Args, Debug)]
pub struct SimArgs {
    /// Protocol (any name of the registry, crates/registry): zab, PFT Multi-Paxos (paxos,
    /// paxos-mbq, paxos-none), Mencius (mencius, mencius-ooo), and the thesis's Zab variants
    /// (zab-ac, zab-aa, zab-aa-restricted, zab-aa-leader-first, zab-ct, zab-ct-restricted,
    /// zab-ct-half, zab-ct-a, zab-ct-aa, zab-ct-optimal); *-bug-* and *-unrestricted are
    /// deliberately broken, to show the checkers fire. A wrong name lists them all.
    #[arg(long, default_value = "zab")]
    protocol: String,
    /// Number of replicas.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Range of seeds, START..END (END exclusive).
    #[arg(long, default_value = "0..100", conflicts_with = "seed")]
    seeds: String,
    /// Run this one seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Fault kinds: all, none, or a comma list of crash, partition, one-way, slow-node,
    /// slow-disk, link-reset, pause, clock-drift, disk-error, replay, corrupt, wipe (all of
    /// these are `all`), and crash-pair, lying-disk, wipe-majority (by name only: beyond the
    /// protocols' assumptions). See docs/simulator.md.
    #[arg(long, default_value = "all")]
    faults: String,
    /// CPU cost per message: `free` (messages cost nothing), `calibrated` (measured on real
    /// processes on this machine), or RECEIVE_NS,SEND_NS,BYTE_NS.
    #[arg(long, default_value = "free")]
    cost: String,
    /// Network: `lan` (one rack), `wan` (the Mencius report's three sites, 50 ms, 20 Mbit/s),
    /// or a file describing sites, links and changes (docs/simulator.md).
    #[arg(long, default_value = "lan")]
    network: String,
    /// Largest offset of a node's clock from true time, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    clock_skew_ms: u64,
    /// Largest steady drift of a node's clock, in parts per million.
    #[arg(long, default_value_t = 500)]
    clock_drift_ppm: u64,
    /// Groups: every node runs a replica of each, sharing its disk, interface and CPU.
    #[arg(long, default_value_t = 1)]
    groups: usize,
    /// The groups' state machines and what clients ask of them: `opaque` (payloads the
    /// protocol orders, a machine that keeps nothing), `registers` (the register machine in
    /// every group; clients put keys and relay puts to other groups through the hosts) or
    /// `zookeeper` (the ZooKeeper tree; clients are sessions, checked session by session) or
    /// `etcd` (etcd's store; replies, reads and watch streams checked against a model of etcd).
    #[arg(long, default_value = "opaque")]
    app: String,
    /// Plant a bug in every node's host, to see the checkers catch it:
    /// drop-routed-at-follower, no-resend, durable-before-write, reply-before-durable.
    #[arg(long)]
    plant_host: Option<String>,
    /// Whether a crash during an fsync lands part of it (`true`/`false`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    torn_writes: bool,
    /// Restart every replica from its disk at the end of each run and check what they recover.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    restart_check: bool,
    /// Print the event trace of the run (with --seed).
    #[arg(long, requires = "seed")]
    trace: bool,
    /// Closed-loop clients (default 6; 8 with --kv).
    #[arg(long)]
    clients: Option<usize>,
    /// Pause between a client's reply and its next command, in microseconds.
    #[arg(long, default_value_t = 5_000)]
    think_us: u64,
    /// With it, the pause is uniform in [--think-us, --think-max-us] (the thesis's wait-time).
    #[arg(long, default_value_t = 0)]
    think_max_us: u64,
    /// Clients send each request to the next replica in turn (the thesis's clients).
    #[arg(long)]
    round_robin: bool,
    /// Probability that a client request is a write (reads are served locally).
    #[arg(long, default_value_t = 1.0)]
    write_ratio: f64,
    /// Bytes per command.
    #[arg(long, default_value_t = 64)]
    payload: usize,
    /// Commands each client keeps outstanding (a pipelining session), delivered in order.
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    /// Most commands a replica hands its core in one batch (1: no batching).
    #[arg(long, default_value_t = 512)]
    batch: usize,
    /// Length of the fault phase in milliseconds of virtual time (default 4000; 3000 with
    /// --kv).
    #[arg(long)]
    window_ms: Option<u64>,
    /// Most faults drawn per run, 1..=N of them (default 8; 6 with --kv).
    #[arg(long)]
    max_faults: Option<usize>,
    /// Longest fault, in milliseconds.
    #[arg(long, default_value_t = 1_500)]
    max_fault_ms: u64,
    /// Replicas that crash when the faults heal and never come back.
    #[arg(long, default_value_t = 0)]
    stay_down: usize,
    /// Run an experiment instead of a sweep: `pft` (the PFT thesis's batching, catch-up,
    /// view-change and Paxos-against-Zab figures, docs/results/pft.md), `mencius` (the Mencius
    /// report's WAN figures against Paxos, docs/results/mencius.md), `membership` (SconeKV's
    /// elastic membership, PRIME against one replicated group, at 200 and 1,000 nodes,
    /// docs/results/membership-scale.md) or `thesis` (the thesis's failure-free comparison of
    /// the Zab family; writes docs/results/thesis.md).
    #[arg(long)]
    experiment: Option<String>,
    /// With --experiment: a smaller, faster run (N = 3 and 5, 50 clients), printed only.
    #[arg(long)]
    quick: bool,
    /// Worker threads (default: available cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Simulate SconeKV on whole nodes: every bucket a group of real replicas of --protocol
    /// (zab, paxos, …), two-phase commit between bucket groups through the hosts, closed-loop
    /// transactional clients, and SconeKV's checkers (serializability, atomicity, outcomes,
    /// liveness) with the protocol checkers on every seed. Uses --protocol, --nodes,
    /// --seeds/--seed, --clients, --faults, --window-ms, --max-faults, --threads.
    #[arg(long)]
    kv: bool,
    /// With --kv: buckets.
    #[arg(long, default_value_t = 3)]
    buckets: u32,
    /// With --kv: keys (few, so that transactions contend).
    #[arg(long, default_value_t = 12)]
    keys: u32,
    /// With --kv: transactions per client.
    #[arg(long, default_value_t = 60)]
    txns: usize,
    /// With --kv: Zipf exponent of the key choice (0: uniform).
    #[arg(long, default_value_t = 0.0)]
    zipf: f64,
    /// With --kv: plant a bug in every bucket to see the checker catch it
    /// (reset-on-delete, skip-read-validation).
    #[arg(long)]
    plant: Option<String>,
    /// With --kv: the scaling experiment instead of a sweep: 1, 2, 4 and 8 buckets on 24
    /// nodes with the CPU cost model (synod_kv::sim::scaling); prints a table.
    #[arg(long, requires = "kv")]
    scaling: bool,
    /// With --kv: the elastic experiment instead of a sweep: nodes join a running store one
    /// at a time (3 → 24) and leave again, under transactions, with the CPU cost model
    /// (synod_kv::sim::elastic); prints a table.
    #[arg(long, requires = "kv")]
    elastic: bool,
    /// With --experiment, --scaling or --elastic: write the markdown document into this
    /// directory (`--out docs/results` replaces the committed one); without it, it is printed
    /// only.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

fn parse_cost(s: &str) -> Result<CostModel> {
    Ok(match s {
        "free" => CostModel::free(),
        "calibrated" => CostModel::calibrated(),
        _ => {
            let v: Vec<u64> = s
                .split(',')
                .map(|x| x.trim().parse::<u64>())
                .collect::<Result<_, _>>()
                .ok()
                .filter(|v: &Vec<u64>| v.len() == 3)
                .with_context(|| {
                    format!(
                        "--cost takes free, calibrated or RECEIVE_NS,SEND_NS,BYTE_NS, got '{s}'"
                    )
                })?;
            CostModel {
                receive_ns: v[0],
                send_ns: v[1],
                byte_ns: v[2],
            }
        }
    })
}

fn parse_range(s: &str) -> Result<std::ops::Range<u64>> {
    let (a, b) = s
        .split_once("..")
        .with_context(|| format!("--seeds takes START..END, got '{s}'"))?;
    let a: u64 = a.trim().parse().context("--seeds START")?;
    let b: u64 = b.trim().parse().context("--seeds END")?;
    if b <= a {
        bail!("--seeds {s}: END must be greater than START");
    }
    Ok(a..b)
}

pub fn run(args: SimArgs) -> Result<i32> {
    if args.kv {
        return kv::run(&args);
    }
    if let Some(e) = &args.experiment {
        if e == "pft" {
            crate::experiment::pft::pft_experiment(args.quick, args.out.as_deref())?;
            return Ok(0);
        }
        if e == "mencius" {
            let threads = args
                .threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            crate::experiment::mencius::mencius_experiment(
                args.quick,
                threads,
                args.out.as_deref(),
            )?;
            return Ok(0);
        }
        if e == "membership" {
            crate::experiment::membership::membership_experiment(args.quick, args.out.as_deref())?;
            return Ok(0);
        }
        if e != "thesis" {
            bail!("unknown experiment '{e}' (known: thesis, pft, mencius, membership)");
        }
        let threads = args
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let seeds = parse_range(&args.seeds)?;
        let cost = (args.cost != "free")
            .then(|| parse_cost(&args.cost))
            .transpose()?;
        crate::experiment::thesis_experiment(crate::experiment::Plan {
            seeds,
            threads,
            quick: args.quick,
            cost,
            out: args.out.clone(),
        })?;
        return Ok(0);
    }
    protocols::check_name(&args.protocol).map_err(anyhow::Error::msg)?;
    protocols::check_size(&args.protocol, args.nodes).map_err(anyhow::Error::msg)?;
    if !(1..=15).contains(&args.nodes) {
        bail!("--nodes must be between 1 and 15");
    }
    let faults: FaultSet = args.faults.parse().map_err(anyhow::Error::msg)?;
    let mut cfg = SimConfig::new(args.nodes, 0, ());
    cfg.faults = faults;
    cfg.workload.clients = args.clients.unwrap_or(6);
    cfg.workload.think_us = args.think_us;
    cfg.workload.think_max_us = args.think_max_us;
    if args.round_robin && args.pipeline > 1 {
        bail!("--round-robin moves a client after every request: it needs --pipeline 1");
    }
    cfg.workload.round_robin = args.round_robin;
    if !(0.0..=1.0).contains(&args.write_ratio) || args.write_ratio == 0.0 {
        bail!("--write-ratio must be in (0, 1]");
    }
    cfg.workload.write_ratio = args.write_ratio;
    cfg.workload.payload_bytes = args.payload;
    if !(1..=1024).contains(&args.pipeline) {
        bail!("--pipeline must be between 1 and 1024");
    }
    cfg.workload.pipeline = args.pipeline;
    if args.batch == 0 {
        bail!("--batch must be at least 1");
    }
    cfg.batch_commands = args.batch;
    cfg.fault_window_us = args.window_ms.unwrap_or(4_000) * 1_000;
    cfg.stay_down = args.stay_down;
    cfg.max_faults = args.max_faults.unwrap_or(8);
    cfg.max_fault_us = args.max_fault_ms * 1_000;
    cfg.cost = parse_cost(&args.cost)?;
    cfg.net = match args.network.as_str() {
        "lan" => NetModel::lan(),
        "wan" => NetModel::wan(Wan::three_sites(args.nodes)),
        path => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--network {path}: not lan, wan, or a readable file"))?;
            NetModel::wan(
                Wan::parse(&text, args.nodes)
                    .map_err(|e| anyhow::anyhow!("--network {path}: {e}"))?,
            )
        }
    };
    cfg.clock = ClockModel {
        max_offset_us: args.clock_skew_ms * 1_000,
        max_drift_ppm: args.clock_drift_ppm.min(500_000),
    };
    if !(1..=64).contains(&args.groups) {
        bail!("--groups must be between 1 and 64");
    }
    cfg.groups = args.groups;
    cfg.app = synod_sim::App::named(&args.app).with_context(|| {
        format!(
            "--app {}: known are opaque, registers, zookeeper, etcd (SconeKV: --kv)",
            args.app
        )
    })?;
    if let Some(p) = &args.plant_host {
        cfg.host_bug = synod_host::HostBug::named(p).with_context(|| {
            let known: Vec<&str> = synod_host::HostBug::ALL.iter().map(|(n, _)| *n).collect();
            format!("--plant-host {p}: known are {}", known.join(", "))
        })?;
    }
    cfg.disk.torn_writes = args.torn_writes;
    cfg.restart_check = args.restart_check;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));

    let started = Instant::now();
    let (report, seeds) = if let Some(seed) = args.seed {
        cfg.seed = seed;
        cfg.trace = args.trace;
        let (mut r, trace) =
            protocols::run_named_one(&args.protocol, &cfg).map_err(anyhow::Error::msg)?;
        if let Some(t) = trace {
            print!("{t}");
        }
        let v = std::mem::take(&mut r.violations);
        let mut total = Report {
            nodes: r.nodes,
            ..Report::default()
        };
        r.violations = v;
        total.merge(seed, r);
        (total, seed..seed + 1)
    } else {
        let seeds = parse_range(&args.seeds)?;
        let r = protocols::run_named_seeds(&args.protocol, &cfg, seeds.clone(), threads)
            .map_err(anyhow::Error::msg)?;
        (r, seeds)
    };
    let wall = started.elapsed();
    print_report(&args, &report, &seeds, wall.as_secs_f64());
    Ok(if report.failures.is_empty() { 0 } else { 1 })
}

fn print_report(args: &SimArgs, r: &Report, seeds: &std::ops::Range<u64>, wall_s: f64) {
    println!(
        "synod sim: protocol {}, {} nodes, seeds {}..{}, faults {}",
        args.protocol, args.nodes, seeds.start, seeds.end, args.faults
    );
    println!("runs            {}", r.runs);
    let faults: Vec<String> = r.faults.iter().map(|(k, v)| format!("{k} {v}")).collect();
    println!(
        "faults          {}",
        if faults.is_empty() {
            "none".to_string()
        } else {
            faults.join(", ")
        }
    );
    println!(
        "commands        submitted {}, delivered to their client {}, slots committed {}, deliveries at all replicas {}",
        r.submitted, r.completed, r.committed, r.deliveries
    );
    println!(
        "batches         {} handed to the cores, {:.2} commands each on average",
        r.batches,
        r.submitted as f64 / r.batches.max(1) as f64
    );
    let vs = r.virtual_us as f64 / 1e6;
    println!(
        "latency         p50 {} us, p90 {} us, p99 {} us, max {} us (virtual, submit to delivery at the submitting replica)",
        r.percentile_us(0.50),
        r.percentile_us(0.90),
        r.percentile_us(0.99),
        r.latency.as_ref().map_or(0, |h| h.max())
    );
    println!(
        "throughput      {:.0} commands/s of virtual time ({:.1} s simulated)",
        if vs > 0.0 {
            r.completed as f64 / vs
        } else {
            0.0
        },
        vs
    );
    let c = r.committed.max(1) as f64;
    let followers = (r.nodes.saturating_sub(1)).max(1) as f64;
    // Per role, as the protocol names its roles; followers' figures are per follower.
    let per_role: Vec<String> = r
        .msgs_in
        .keys()
        .chain(r.msgs_out.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|role| {
            let per = if *role == Role::Following.name() {
                c * followers
            } else {
                c
            };
            let get = |m: &std::collections::BTreeMap<&str, u64>| m.get(role).copied().unwrap_or(0);
            format!(
                "{role} in {:.2} out {:.2}",
                get(&r.msgs_in) as f64 / per,
                get(&r.msgs_out) as f64 / per
            )
        })
        .collect();
    println!(
        "messages/cmd    {} (following: per follower)",
        per_role.join("; ")
    );
    if !r.switches.is_empty() {
        let s: Vec<String> = r.switches.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!("mode switches   {}", s.join(", "));
    }
    if !r.gauges.is_empty() {
        // Means over the replicas reporting them at the end of each run (ZabCT's coin: p, the
        // measured λ and d; how many followers ran Zab).
        let g: Vec<String> = r
            .gauges
            .iter()
            .map(|(k, &(sum, n))| format!("{k} {:.3} ({n})", sum / n.max(1) as f64))
            .collect();
        println!("gauges          {}", g.join(", "));
    }
    if !r.settle_us.is_empty() {
        let mut s = r.settle_us.clone();
        s.sort_unstable();
        println!(
            "settle          p50 {} ms, max {} ms (from healing to one leader followed by all)",
            s[s.len() / 2] / 1000,
            s[s.len() - 1] / 1000
        );
    }
    println!(
        "wall            {:.2} s, {:.0} simulated deliveries per second of wall time",
        wall_s,
        r.deliveries as f64 / wall_s.max(1e-9)
    );
    if r.failures.is_empty() {
        println!("violations      0");
    } else {
        let seeds = r.failing_seeds();
        println!(
            "violations      {} in {} of {} runs",
            r.failures.len(),
            seeds.len(),
            r.runs
        );
        for (seed, v) in &r.failures {
            println!("  seed {seed}: {v}");
        }
        let a = args;
        let rest = format!(
            "--faults {} --groups {} --app {}{} --clients {} --think-us {} --payload {} --pipeline {} --batch {} \
             --window-ms {} --max-faults {} --max-fault-ms {} --stay-down {} --cost {} \
             --network {} --clock-skew-ms {} --clock-drift-ppm {} --torn-writes {} \
             --restart-check {} --think-max-us {} --write-ratio {}{}",
            a.faults,
            a.groups,
            a.app,
            a.plant_host
                .as_deref()
                .map_or(String::new(), |p| format!(" --plant-host {p}")),
            a.clients.unwrap_or(6),
            a.think_us,
            a.payload,
            a.pipeline,
            a.batch,
            a.window_ms.unwrap_or(4_000),
            a.max_faults.unwrap_or(8),
            a.max_fault_ms,
            a.stay_down,
            a.cost,
            a.network,
            a.clock_skew_ms,
            a.clock_drift_ppm,
            a.torn_writes,
            a.restart_check,
            a.think_max_us,
            a.write_ratio,
            if a.round_robin { " --round-robin" } else { "" }
        );
        for seed in seeds.iter().take(5) {
            println!(
                "  reproduce: synod sim --protocol {} --nodes {} {rest} --seed {seed} --trace",
                a.protocol, a.nodes
            );
        }
    }
}

/// `synod sim --kv`: SconeKV on whole nodes (every bucket a group of real replicas of the
/// chosen protocol), its transactional clients, and its checkers on every seed.
mod kv {
    use super::{parse_range, protocols, SimArgs};
    use anyhow::{bail, Context, Result};
    use std::time::Instant;
    use synod_kv::sim::Plant;
    use synod_sim::SimConfig;

    pub fn run(a: &SimArgs) -> Result<i32> {
        if a.scaling {
            return scaling(a);
        }
        if a.elastic {
            return elastic(a);
        }
        let mut app = synod_sim::KvApp::default();
        if !(1..=64).contains(&a.buckets) {
            bail!("--buckets must be between 1 and 64");
        }
        if !(1..=100_000).contains(&a.keys) {
            bail!("--keys must be between 1 and 100000");
        }
        app.workload.keys = a.keys;
        let clients = a.clients.unwrap_or(8);
        if !(1..=1024).contains(&clients) {
            bail!("--clients must be between 1 and 1024");
        }
        app.workload.clients = clients as u32;
        app.workload.txns = a.txns;
        if !(0.0..=5.0).contains(&a.zipf) {
            bail!("--zipf must be between 0 and 5");
        }
        app.workload.zipf = a.zipf;
        app.plant = match a.plant.as_deref() {
            None | Some("none") => Plant::None,
            Some("reset-on-delete") => Plant::ResetOnDelete,
            Some("skip-read-validation") => Plant::SkipReadValidation,
            Some(p) => bail!("--plant {p}: known are reset-on-delete, skip-read-validation"),
        };
        protocols::check_name(&a.protocol).map_err(anyhow::Error::msg)?;
        protocols::check_size(&a.protocol, a.nodes).map_err(anyhow::Error::msg)?;
        let mut cfg = SimConfig::new(a.nodes, 0, ());
        cfg.faults = a.faults.parse().map_err(anyhow::Error::msg)?;
        cfg.app = synod_sim::App::Kv(app);
        cfg.groups = a.buckets as usize;
        // Only the transactional clients: no protocol clients, no tracked commands.
        cfg.workload.clients = 0;
        cfg.workload.liveness_commands = 0;
        cfg.fault_window_us = a.window_ms.unwrap_or(3_000) * 1_000;
        cfg.max_faults = a.max_faults.unwrap_or(6).max(1);
        cfg.max_fault_us = a.max_fault_ms * 1_000;
        if let Some(p) = &a.plant_host {
            cfg.host_bug = synod_host::HostBug::named(p)
                .with_context(|| format!("--plant-host {p}: not a host bug"))?;
        }
        let threads = a
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let started = Instant::now();
        let (report, seeds) = match a.seed {
            Some(seed) => {
                cfg.seed = seed;
                cfg.trace = a.trace;
                let (r, trace) =
                    protocols::run_named_one(&a.protocol, &cfg).map_err(anyhow::Error::msg)?;
                if let Some(t) = trace {
                    print!("{t}");
                }
                let mut total = synod_sim::Report::default();
                total.merge(seed, r);
                (total, seed..seed + 1)
            }
            None => {
                let seeds = parse_range(&a.seeds)?;
                let r = protocols::run_named_seeds(&a.protocol, &cfg, seeds.clone(), threads)
                    .map_err(anyhow::Error::msg)?;
                (r, seeds)
            }
        };
        let wall = started.elapsed().as_secs_f64();
        println!(
            "synod sim --kv: protocol {}, {} nodes, {} buckets, {} clients x {} txns, {} keys \
             (zipf {}), seeds {}..{}, faults {}{}",
            a.protocol,
            a.nodes,
            a.buckets,
            clients,
            a.txns,
            a.keys,
            a.zipf,
            seeds.start,
            seeds.end,
            a.faults,
            a.plant
                .as_deref()
                .map_or(String::new(), |p| format!(", planted {p}"))
        );
        if let Some(kv) = &report.kv {
            println!("transactions: {}", kv.total.summary());
        }
        let failing = report.failing_seeds();
        for (seed, v) in report.failures.iter().take(20) {
            println!("  seed {seed}: {v}");
        }
        println!(
            "total: {} runs, {} failing; {} deliveries; {:.1} s wall",
            report.runs,
            failing.len(),
            report.deliveries,
            wall
        );
        if let Some(seed) = failing.first() {
            println!(
                "reproduce: synod sim --kv --protocol {} --nodes {} --buckets {} --clients {} \
                 --keys {} --txns {} --zipf {} --faults {} --window-ms {} --max-faults {}{} \
                 --seed {seed} --trace",
                a.protocol,
                a.nodes,
                a.buckets,
                clients,
                a.keys,
                a.txns,
                a.zipf,
                a.faults,
                a.window_ms.unwrap_or(3_000),
                a.max_faults.unwrap_or(6),
                a.plant
                    .as_deref()
                    .map_or(String::new(), |p| format!(" --plant {p}")),
            );
        }
        Ok(if failing.is_empty() { 0 } else { 1 })
    }

    /// `synod sim --kv --elastic [--out FILE]`.
    fn elastic(a: &SimArgs) -> Result<i32> {
        use synod_kv::sim::{elastic, scaling};
        let cfg = elastic::ElasticCfg::default();
        let started = Instant::now();
        let run = elastic::run(&cfg);
        let mut fixed_cfg = cfg.base.clone();
        fixed_cfg.cost.nodes = cfg.max_nodes;
        let fixed = scaling::point(cfg.buckets, &fixed_cfg).txns_per_s;
        let md = elastic::markdown(
            &run,
            &cfg,
            fixed,
            "synod sim --kv --elastic --out docs/results",
        );
        println!("{md}\n({:.1} s wall)", started.elapsed().as_secs_f64());
        crate::experiment::write_result(a.out.as_deref(), "sconekv-elastic.md", &md)?;
        Ok(0)
    }

    /// `synod sim --kv --scaling [--out FILE]`.
    fn scaling(a: &SimArgs) -> Result<i32> {
        use synod_kv::sim::scaling::{markdown, scaling, table, ScalingCfg};
        let cfg = ScalingCfg::default();
        let started = Instant::now();
        let points = scaling(&[1, 2, 4, 8], &cfg);
        println!(
            "synod sim --kv --scaling: {} nodes, {} clients per bucket, {} keys, {} keys per \
             txn, cross-bucket {}; {:.1} s wall",
            cfg.cost.nodes,
            cfg.clients_per_bucket,
            cfg.keys,
            cfg.ops,
            cfg.cross,
            started.elapsed().as_secs_f64()
        );
        print!("{}", table(&points));
        let md = markdown(&points, &cfg, "synod sim --kv --scaling --out docs/results");
        crate::experiment::write_result(a.out.as_deref(), "sconekv-scaling.md", &md)?;
        Ok(0)
    }
}
