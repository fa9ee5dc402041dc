//! `synod sim --experiment mencius`: the Mencius report's evaluation (mencius.md §7, the
//! anchors of §7.8) in the simulator's WAN model, written to docs/results/mencius.md with the
//! report's figure beside each of ours: network-bound and CPU-bound throughput on the 3-site
//! clique (Fig. 4), the star of n sites (Fig. 8), asymmetric and changing bandwidth (Fig. 5,
//! 6), a crash (Fig. 7), latency without and with contention (§7.5, Fig. 9, 10) and latency
//! against throughput, with jitter (Fig. 11).
//!
//! Every run goes through [`run_protocol`], by name: Paxos is the registry's `paxos`, Mencius
//! is `mencius` once registered (the full run refuses to write the document before that).

use anyhow::{bail, Result};
use std::fmt::Write as _;
use synod_sim::faults::Scripted;
use synod_sim::{CostModel, FaultKind, FaultSet, NetModel, Report, SimConfig, Wan};

mod crash;
mod latency;
mod throughput;
use crash::crash;
use latency::{latency, load_curves};
use throughput::{asymmetric, changing, cpu_bound, network_bound, star_network};

const PAXOS: &str = "paxos";
const MENCIUS: &str = "mencius";
/// Mencius with out-of-order commit of commuting commands (M13; the report's Mencius-κ).
const MENCIUS_OOO: &str = "mencius-ooo";
/// Paxos's primary in its first view (view 1: the second member).
const PAXOS_LEADER: usize = 1;
const MBIT: u64 = 1_000_000 / 8;
/// The send queue of each WAN link when back-pressure is on (`Wan::send_buffer_bytes`): a
/// TCP socket's send buffer of the report's time (16 requests of 4,000 bytes).
const SNDBUF: u64 = 64 << 10;

/// The two ways a WAN link's queue is modelled in Fig. 5 and 6: unbounded (the simulator's
/// default), and bounded so that a full queue blocks its sender as a TCP connection does.
const QUEUES: [(Option<u64>, &str); 2] = [(None, "unbounded"), (Some(SNDBUF), "64 KiB")];
const WARMUP_US: u64 = 2_000_000;

struct Ctx {
    quick: bool,
    seeds: u64,
    threads: usize,
    /// The protocols of the comparison that are registered (Paxos always; Mencius once its
    /// crate is in the registry).
    protocols: Vec<&'static str>,
}

impl Ctx {
    fn has(&self, name: &str) -> bool {
        self.protocols.contains(&name)
    }

    /// The protocols of the comparisons other than Fig. 11's: Paxos and Mencius.
    fn compared(&self) -> Vec<&'static str> {
        let v = self.protocols.iter().copied();
        v.filter(|n| *n != MENCIUS_OOO).collect()
    }
}

/// The report's failure detector: a peer is suspected when its TCP connection breaks, and the
/// suspicion reported 5 s later (mencius.md §7.4). Both protocols get a 5 s silence timeout
/// instead of their LAN defaults, which a saturated WAN link's queue (seconds of 4 KB requests
/// ahead of a heartbeat) would trip.
const DETECT_US: u64 = 5_000_000;

/// The back-pressure of the report's TCP connections, as a window on each replica's own
/// proposals: at most this many instances it proposed and has not yet seen decided (about a
/// 512 KiB socket buffer of requests of `rho` bytes). Without it a replica whose links are
/// full would give instances to requests that then wait seconds in the simulator's unbounded
/// link queues, and hold back every later instance (in-order commit); with it they wait at the
/// replica, unnumbered, as they wait on a blocked socket.
fn window(rho: usize) -> usize {
    (512 << 10) / (rho + 64)
}

/// Run the named protocol on `cfg` over the experiment's seeds; a checker that fires is an
/// error (a number from an unsafe run is no number). Each family runs with the report's
/// setting where our defaults are tuned for a LAN: the failure detector's 5 s
/// ([`DETECT_US`]; Mencius's catch-up of a stalled commit point waits as long, as TCP loses
/// nothing, and it does not re-send suggestions), and the window of [`window`].
fn run_protocol(ctx: &Ctx, name: &str, cfg: &SimConfig<()>) -> Result<Report> {
    let seeds = 0..ctx.seeds;
    let w = window(cfg.workload.payload_bytes);
    let r = if synod_protocols::paxos::known(name) {
        synod_protocols::paxos::run_seeds_with(name, cfg, seeds, ctx.threads, &|o| {
            o.view_change_timeout_us = DETECT_US;
            o.adaptive_timeout = false;
            o.max_inflight = w as u64;
            o.batching = synod_paxos::Batching::Adaptive { window: w };
        })
    } else if synod_protocols::mencius::known(name) {
        synod_protocols::mencius::run_seeds_with(name, cfg, seeds, ctx.threads, &|o| {
            o.suspect_timeout_us = DETECT_US;
            o.catch_up_us = DETECT_US;
            o.resuggest_us = 60_000_000;
            o.max_inflight = w;
        })
    } else {
        synod_protocols::run_named_seeds(name, cfg, seeds, ctx.threads)
    }
    .map_err(anyhow::Error::msg)?;
    if let Some((seed, v)) = r.failures.first() {
        bail!("{name} N={}: a checker fired (seed {seed}): {v}", cfg.nodes);
    }
    Ok(r)
}

/// The report's testbed (mencius.md §7.2) in the simulator: one replica per site, `clients`
/// closed-loop clients spread round-robin over the sites with no think time, ρ bytes of
/// payload, no batching (every request its own instance, as in the report's protocols),
/// measured for `secs` after a 2 s warm-up. Every node's own interface is 1 Gbit/s unless
/// `nic` says otherwise.
fn testbed(wan: Wan, nic: Option<u64>, clients: usize, rho: usize, secs: u64) -> SimConfig<()> {
    let n = wan.site_of.len();
    let mut cfg = SimConfig::new(n, 0, ());
    cfg.faults = FaultSet::none();
    cfg.net = NetModel::wan(wan);
    if let Some(b) = nic {
        cfg.net.bandwidth_bytes_per_s = b;
    }
    cfg.workload.clients = clients;
    cfg.workload.payload_bytes = rho;
    cfg.workload.think_us = 0;
    cfg.workload.client_timeout_us = 10_000_000;
    cfg.batch_commands = 1;
    cfg.warmup_us = WARMUP_US;
    cfg.run_for_us = Some(WARMUP_US + secs * 1_000_000);
    cfg.restart_check = false;
    cfg.snapshot_every = 5_000;
    // The run ends at `run_for_us`, not at the end of the (unused) liveness phases.
    cfg.liveness_bound_us = 100_000_000;
    cfg
}

/// A clique of n sites, 50 ms one-way, `mbps` per directed link.
fn clique(n: usize, mbps: u64) -> Wan {
    Wan::clique(n, n, 50_000, mbps * MBIT)
}

/// The star of §7.5: 25 ms to a hub and 10 Mbit/s per site, as 50 ms between sites and each
/// site's interface (which all its outgoing messages share) at 10 Mbit/s.
fn star(n: usize, clients: usize, rho: usize, secs: u64) -> SimConfig<()> {
    testbed(clique(n, 1_000), Some(10 * MBIT), clients, rho, secs)
}

/// The CPU cost of the CPU-bound runs: the simulator's cost model as calibrated on this
/// machine's real processes (15 µs a message end, docs/results/simulator.md).
fn cpu() -> CostModel {
    CostModel::calibrated()
}

fn secs(r: &Report) -> f64 {
    (r.virtual_us as f64 / 1e6).max(1e-9)
}

fn ops(r: &Report) -> f64 {
    r.committed as f64 / secs(r)
}

/// Commands completed per second for clients of node `i`'s site.
fn site_ops(r: &Report, i: usize) -> f64 {
    r.completed_by_node.get(i).copied().unwrap_or(0) as f64 / secs(r)
}

fn mean_ms(r: &Report) -> f64 {
    r.latency.as_ref().map_or(0.0, |h| h.mean() / 1000.0)
}

fn site_ms(r: &Report, i: usize) -> Option<f64> {
    r.latency_by_node
        .get(i)
        .and_then(|h| h.as_ref())
        .map(|h| h.mean() / 1000.0)
}

/// Share of the requests that took at most `ms`.
fn share_within(r: &Report, ms: u64) -> f64 {
    r.latency.as_ref().map_or(0.0, |h| {
        if h.is_empty() {
            0.0
        } else {
            h.count_between(0, ms * 1000) as f64 / h.len() as f64
        }
    })
}

/// Per bucket of the timeline (`len` of them: a bucket in which nothing happened is zero),
/// what `f` takes from the nodes' (completed, delivered), as a rate per second and run.
fn series(r: &Report, bucket_us: u64, len: usize, f: impl Fn(&[(u64, u64)]) -> u64) -> Vec<f64> {
    let per_s = 1e6 / bucket_us as f64 / r.runs.max(1) as f64;
    (0..len)
        .map(|t| r.timeline.get(t).map_or(0, |b| f(b)) as f64 * per_s)
        .collect()
}

fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or("—".into(), |v| format!("{v:.0}"))
}

pub fn mencius_experiment(
    quick: bool,
    threads: usize,
    out: Option<&std::path::Path>,
) -> Result<()> {
    let mut protocols = vec![PAXOS];
    if synod_protocols::names().contains(&MENCIUS) {
        protocols.push(MENCIUS);
        if synod_protocols::names().contains(&MENCIUS_OOO) {
            protocols.push(MENCIUS_OOO);
        }
    } else if !quick {
        bail!(
            "the protocol '{MENCIUS}' is not registered in crates/protocols yet: the full \
             experiment (which writes docs/results/mencius.md) needs it; --quick runs Paxos alone"
        );
    }
    let ctx = Ctx {
        quick,
        seeds: if quick { 1 } else { 2 },
        threads,
        protocols,
    };
    let mut doc = String::new();
    writeln!(
        doc,
        "# Mencius in the simulator: the report's evaluation (§7.8)\n\nSource: the evaluation (section 7) of Y. Mao, F. P. Junqueira and K. Marzullo, \"Mencius: Building Efficient Replicated State Machines for WANs\", UC San Diego technical report, 2008 ([references](../references.md#mao-junqueira-and-marzullo-2008)).\n\n\
         Generated by `synod sim --experiment mencius --out docs/results` (crates/synod/src/experiment/mencius.rs). \
         The report (mencius.md §7) measured C++ over TCP on DETER, with DummyNet links; ours \
         are the simulator's WAN model (crates/sim/src/wan.rs): one replica per site, a one-way \
         latency and a bandwidth per directed pair of sites, each node's own interface, FIFO \
         links whose queues are unbounded unless said (§4 and §5 also run with back-pressure), \
         no TCP/IP headers, no Nagle. Clients are closed-loop (the report's sent at a \
         fixed rate or after a random delay), no think time unless said, spread round-robin \
         over the sites; every request is its own instance (no batching, as in the report \
         before §7.6); {} seed(s) per row, measured after a {} s warm-up. Paxos is the \
         registry's `paxos` (PFT Multi-Paxos: backups forward requests to the primary, which \
         sends them with its ACCEPT; the primary of the first view is the second site, B). \
         Only requests (FORWARD, ACCEPT/SUGGEST) carry the ρ bytes in both protocols (M14).\n",
        ctx.seeds,
        WARMUP_US / 1_000_000
    )?;
    network_bound(&ctx, &mut doc)?;
    cpu_bound(&ctx, &mut doc)?;
    star_network(&ctx, &mut doc)?;
    asymmetric(&ctx, &mut doc)?;
    changing(&ctx, &mut doc)?;
    crash(&ctx, &mut doc)?;
    latency(&ctx, &mut doc)?;
    load_curves(&ctx, &mut doc)?;
    print!("{doc}");
    if !quick {
        crate::experiment::write_result(out, "mencius.md", &doc)?;
    }
    Ok(())
}
