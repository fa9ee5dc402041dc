//! `synod bench protocols`: synod's own replication protocols on real processes, beside the
//! simulator's figures for the same configurations.

use anyhow::{bail, Result};
use clap::Args;
use serde::{Deserialize, Serialize};
use std::time::Duration;

use super::compare::{run_matrix, template};
use super::cost::{ServerCost, COST_HEADER};
use super::{machine, parse_duration, print_table_with, RunResult};
use crate::procs::Kind;

#[derive(Args, Debug)]
pub(super) struct ProtocolArgs {
    /// Protocols to compare.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "zab,zab-ac,zab-aa,zab-aa-leader-first,zab-ct"
    )]
    protocols: Vec<String>,
    /// Cluster sizes.
    #[arg(long, value_delimiter = ',', default_value = "3,5")]
    nodes: Vec<u32>,
    #[arg(long, value_delimiter = ',', default_value = "50,100")]
    write_ratios: Vec<u32>,
    #[arg(long, value_delimiter = ',', default_value = "1,32")]
    clients: Vec<usize>,
    #[arg(long, default_value = "8s", value_parser = parse_duration)]
    duration: Duration,
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    warmup: Duration,
    /// Where to write protocols.{md,json}: target/results unless named (`--out docs/results`
    /// replaces the committed documents).
    #[arg(long, default_value = "target/results")]
    out: std::path::PathBuf,
    #[arg(long, default_value_t = 23200)]
    base_port: u16,
    /// Emulated one-way delay of every peer link, in ms (each server's
    /// `link_emulation.delay_ms`; 0: loopback as it is).
    #[arg(long, default_value_t = 0.0)]
    link_delay_ms: f64,
    /// Emulated extra delay per message, uniform in [0, this] ms (links stay FIFO).
    #[arg(long, default_value_t = 0.0)]
    link_jitter_ms: f64,
    /// Emulated outgoing bandwidth of every node in Mbit/s, one interface shared by all its
    /// peer links (0: unlimited).
    #[arg(long, default_value_t = 0.0)]
    link_mbit: f64,
    /// Server settings for every server, KEY=VALUE, repeatable (e.g. `zab.window=16`, so that
    /// every protocol keeps as many batches in flight as the coin variants do).
    #[arg(long = "set")]
    set: Vec<String>,
}

/// The peer links the servers emulated (`--link-*`, the servers' `[link_emulation]`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkEmulation {
    pub delay_ms: f64,
    pub jitter_ms: f64,
    /// Per node, shared by its outgoing links; 0 is unlimited.
    pub mbit: f64,
}

impl LinkEmulation {
    pub fn is_on(&self) -> bool {
        *self != LinkEmulation::default()
    }

    /// The server configuration overrides that set it up.
    pub fn sets(&self) -> Vec<String> {
        if !self.is_on() {
            return vec![];
        }
        vec![
            format!("link_emulation.delay_ms={}", self.delay_ms),
            format!("link_emulation.jitter_ms={}", self.jitter_ms),
            format!("link_emulation.bandwidth_mbit={}", self.mbit),
        ]
    }

    pub fn describe(&self) -> String {
        if !self.is_on() {
            return "none (loopback as it is)".into();
        }
        let bw = if self.mbit > 0.0 {
            format!(
                "{} Mbit/s per node (one interface for all its peer links)",
                self.mbit
            )
        } else {
            "unlimited bandwidth".into()
        };
        format!(
            "{} ms one-way delay + uniform [0, {}] ms jitter per peer message, {bw}",
            self.delay_ms, self.jitter_ms
        )
    }
}

pub(super) async fn protocols(a: ProtocolArgs) -> Result<i32> {
    let tmpl = template(a.duration, a.warmup, 1024, 1000);
    let link = LinkEmulation {
        delay_ms: a.link_delay_ms,
        jitter_ms: a.link_jitter_ms,
        mbit: a.link_mbit,
    };
    for (flag, v) in [
        ("--link-delay-ms", link.delay_ms),
        ("--link-jitter-ms", link.jitter_ms),
        ("--link-mbit", link.mbit),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            bail!("{flag}: {v} is not a non-negative number");
        }
    }
    let m = machine();
    println!(
        "machine: {} cores ({}), Linux {}; every node, client and the load generator share them",
        m.cores, m.cpu, m.kernel
    );
    println!("emulated peer links: {}", link.describe());
    if !a.set.is_empty() {
        println!("server settings: {}", a.set.join(", "));
    }
    let mut results = Vec::new();
    for &n in &a.nodes {
        for p in &a.protocols {
            let kind = Kind::Synod {
                protocol: p.clone(),
                sets: link
                    .sets()
                    .into_iter()
                    .chain(a.set.iter().cloned())
                    .collect(),
            };
            let label = format!("{p} N={n}");
            match run_matrix(
                kind,
                n,
                a.base_port,
                &a.write_ratios,
                &a.clients,
                &tmpl,
                &label,
            )
            .await
            {
                Ok(r) => results.extend(r.into_iter().map(|mut r| {
                    r.link = link.is_on().then_some(link);
                    r
                })),
                Err(e) => eprintln!("{label}: {e:#}"),
            }
        }
    }
    print_table_with(&results, &COST_HEADER, |r| {
        ServerCost::cells(r.server.as_ref())
    });
    // The simulator's figures for the same configurations (LAN network, or the emulated links'
    // delay, jitter and bandwidth, and SSD disk models, no faults, closed-loop clients without
    // think time, the same payload, 3 seeds of 5 s of virtual time under load), with messages
    // free and with the calibrated cost model.
    let sim_of = |r: &RunResult, cost: synod_sim::CostModel| -> Option<(f64, f64)> {
        let (proto, n) = r.system.split_once(" N=")?;
        let n: usize = n.parse().ok()?;
        let mut cfg = synod_sim::SimConfig::new(n, 0, ());
        cfg.faults = "none".parse().ok()?;
        if link.is_on() {
            cfg.net.latency_min_us = (link.delay_ms * 1e3) as u64;
            cfg.net.latency_max_us = ((link.delay_ms + link.jitter_ms) * 1e3) as u64;
            if link.mbit > 0.0 {
                cfg.net.bandwidth_bytes_per_s = (link.mbit * 1e6 / 8.0) as u64;
            }
        }
        cfg.workload.clients = r.clients;
        cfg.workload.think_us = 0;
        cfg.workload.payload_bytes = r.value_size;
        cfg.workload.write_ratio = r.write_ratio as f64 / 100.0;
        cfg.cost = cost;
        cfg.run_for_us = Some(5_000_000);
        cfg.restart_check = false;
        let rep = synod_protocols::run_named_seeds(proto, &cfg, 0..3, 2).ok()?;
        let p50 = rep.percentile_us(0.5) as f64;
        let tput = rep.completed as f64 / (rep.virtual_us.max(1) as f64 / 1e6);
        Some((p50, tput))
    };
    std::fs::create_dir_all(&a.out)?;
    let mut s = String::from(
        "# synod's protocols on real processes\n\nGenerated by `synod bench protocols`; the \
         discussion against the simulator's figures is in docs/results/protocols-notes.md.\n\n",
    );
    s += &format!(
        "Machine: {} cores ({}), Linux {}; run at {}. Loopback, fsync always, 1 KiB values, \
         1000 keys, {:?} measured after {:?} warm-up per cell.\n\n",
        m.cores, m.cpu, m.kernel, m.date, a.duration, a.warmup
    );
    s += &format!(
        "Emulated peer links (`--link-delay-ms {} --link-jitter-ms {} --link-mbit {}`, the \
         servers' `[link_emulation]`): {}.{}\n\n",
        link.delay_ms,
        link.jitter_ms,
        link.mbit,
        link.describe(),
        if link.is_on() {
            " Each hop also takes loopback's own time and the link clock's wake-up, about \
             0.1 ms in all (a round trip over 2 ms links measured 4.2 ms); the simulator's \
             columns use the delay, jitter and bandwidth as given."
        } else {
            ""
        }
    );
    if !a.set.is_empty() {
        s += &format!(
            "Server settings on every server (`--set`): `{}`.\n\n",
            a.set.join("`, `")
        );
    }
    s += COST_PARAGRAPH;
    s += &format!(
        "| protocol | clients | writes | ops/s | p50 µs | p99 µs | errors | {} | sim p50 µs | sim ops/s | sim p50 µs, calibrated cost | sim ops/s, calibrated cost |\n|---|{}\n",
        COST_HEADER.join(" | "),
        "---:|".repeat(6 + COST_HEADER.len() + 4)
    );
    for r in &results {
        let (sp50, stput) = sim_of(r, synod_sim::CostModel::free()).unwrap_or((f64::NAN, f64::NAN));
        let (cp50, ctput) =
            sim_of(r, synod_sim::CostModel::calibrated()).unwrap_or((f64::NAN, f64::NAN));
        s += &format!(
            "| {} | {} | {}% | {:.0} | {:.0} | {:.0} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} |\n",
            r.system,
            r.clients,
            r.write_ratio,
            r.throughput,
            r.p50_us,
            r.p99_us,
            r.errors,
            ServerCost::cells(r.server.as_ref()).join(" | "),
            sp50,
            stput,
            cp50,
            ctput
        );
    }
    std::fs::write(a.out.join("protocols.md"), s)?;
    std::fs::write(
        a.out.join("protocols.json"),
        serde_json::to_string_pretty(&results)?,
    )?;
    println!("wrote {}", a.out.join("protocols.md").display());
    Ok(0)
}

/// How the server-side columns are measured, for the generated file.
const COST_PARAGRAPH: &str = "The server-side columns come from the servers themselves, \
     snapshotted when each cell's measured window opens (after the warm-up) and when it closes. \
     *msgs/op*: peer-transport frames received plus frames sent by all replicas together \
     (`synod_peer_frames_received_total` and `synod_peer_frames_sent_total` of every node's admin \
     `/metrics`), so each peer message counts once at its sender and once at its receiver, \
     over the operations completed in the window. *msgs/write*: the same frames over the \
     writes committed in the window (the most commands any node delivered in the ZooKeeper \
     group, `synod_group_delivered_total{group=\"0\"}`; reads are served locally). *peer bytes/op*: the same for \
     `synod_peer_received_bytes_total` + `synod_peer_sent_bytes_total`. *CPU µs/op*: user + system CPU time of every server process \
     (utime + stime of `/proc/<pid>/stat`, in `sysconf(_SC_CLK_TCK)` ticks, so 10 ms \
     granularity per process at 100 Hz) over the same operations, heartbeats and timers \
     included. *CPU µs/msg*: CPU µs/op \
     divided by (msgs/op + 2), the 2 being the client's request received and its reply sent \
     by a replica: an average over all the work of a message, fsync and state machine \
     included, not a marginal cost. The servers share the machine's cores with the clients \
     and the load generator. A dash (—) marks a figure whose counters could not be read.\n\n";
