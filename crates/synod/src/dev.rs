//! `synod dev`: a local cluster of N replicas on loopback, one process each.

use crate::procs::{Cluster, Kind};
use anyhow::{bail, Result};
use clap::Args;
use nix::sys::signal::Signal;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct DevArgs {
    /// Number of replicas.
    #[arg(long, default_value_t = 3)]
    nodes: u32,
    /// Ports of replica i (1-based): client BASE+i, peer BASE+700+i, admin BASE+7000+i.
    #[arg(long, default_value_t = 2180)]
    base_port: u16,
    /// Data directory (default: a temporary directory, removed on exit).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Replication protocol of the cluster: zab, a Zab variant (zab-ct, zab-aa, …), PFT
    /// Multi-Paxos (paxos, paxos-mbq, paxos-none), or mencius.
    #[arg(long, default_value = "zab")]
    protocol: String,
    /// fsync policy: always, or never (benchmarks of everything but the disk).
    #[arg(long, default_value = "always")]
    fsync: String,
    /// Log level of the replicas.
    #[arg(long, default_value = "info")]
    log_level: String,
    /// Also serve SconeKV's transactional store (3 buckets of 3 replicas unless `--set
    /// kv.buckets=N` / `kv.replicas=N`), with node i's KV gRPC API on port KV_PORT + i - 1.
    #[arg(long)]
    kv: bool,
    /// Port of node 1's KV gRPC API (with --kv).
    #[arg(long, default_value_t = 2479)]
    kv_port: u16,
    /// Port of node 1's etcd API (with --kv): node i serves etcd's v3 gRPC API on etcd's
    /// Procfile ports, 2379, 22379, 32379, …
    #[arg(long, default_value_t = 2379)]
    etcd_port: u16,
    /// Run without TLS: peers in plain text, no secure client port, plain HTTP admin port.
    /// By default `synod dev` makes a CA and certificates (in DATA/certs) and runs the peers
    /// over mutual TLS, as a production cluster must.
    #[arg(long)]
    insecure: bool,
    /// Configuration overrides for every replica (`--set key=value`, repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
}

pub fn run(args: DevArgs) -> Result<()> {
    if !(1..=9).contains(&args.nodes) {
        bail!("--nodes must be between 1 and 9");
    }
    crate::procs::check_protocol(&args.protocol)?;
    let n = args.nodes;
    let base = args.base_port as u32;
    if base + 7000 + n > 65535 {
        bail!("--base-port {base} is too high for {n} nodes");
    }
    let mut sets = vec![
        "cluster_id=\"synod-dev\"".to_string(),
        format!("fsync={:?}", args.fsync),
        format!("log_level={:?}", args.log_level),
    ];
    sets.extend(args.sets.iter().cloned());
    let kind = Kind::Synod {
        protocol: args.protocol.clone(),
        sets,
    };
    let mut cl = Cluster::new(kind, n, args.base_port, args.data.clone())?;
    cl.admin_offset = 7000;
    if !args.insecure {
        let certs = cl.dir.join("certs");
        if !certs.join("ca.crt").exists() {
            crate::certs::dev_certs(&certs, "synod-dev", n)?;
        }
        cl.tls = Some(certs);
    }
    if args.kv {
        cl.kv_port = Some(args.kv_port);
        cl.etcd_port = Some(args.etcd_port);
    }
    println!(
        "synod dev: {n} replicas ({}), data in {}",
        args.protocol,
        cl.dir.display()
    );
    cl.start_all()?;
    let scheme = if cl.tls.is_some() { "https" } else { "http" };
    for i in 1..=n {
        println!(
            "  node {i}: client {}  peer 127.0.0.1:{}  admin {scheme}://{}  (log {})",
            cl.client_addr(i),
            cl.peer_port(i),
            cl.admin_addr(i),
            cl.dir.join(format!("node{i}.log")).display()
        );
        if cl.tls.is_some() {
            println!("          client over TLS {}", cl.secure_client_addr(i));
        }
        if args.kv {
            println!(
                "          kv  {} (gRPC, proto/synod_kv.proto)",
                cl.kv_addr(i)
            );
            println!("          etcd {} (etcd's v3 gRPC API)", cl.etcd_addr(i));
        }
    }
    if args.kv {
        let tls = cl.tls.as_ref().map_or(String::new(), |c| {
            format!(" --ca {}", c.join("ca.crt").display())
        });
        println!(
            "Try: synod kv --servers {}{tls} put greeting hello",
            cl.kv_addrs().join(",")
        );
        let scheme = if cl.tls.is_some() { "https" } else { "http" };
        let endpoints: Vec<String> = cl
            .etcd_addrs()
            .iter()
            .map(|a| format!("{scheme}://{a}"))
            .collect();
        let cacert = cl.tls.as_ref().map_or(String::new(), |c| {
            format!(" --cacert {}", c.join("ca.crt").display())
        });
        println!(
            "     etcdctl --endpoints {}{cacert} put greeting hello",
            endpoints.join(",")
        );
    }
    if let Some(certs) = &cl.tls {
        let c = certs.display();
        println!(
            "Peers use mutual TLS (certificates in {c}; --insecure turns TLS off). Try:\n  \
             curl --cacert {c}/ca.crt --cert {c}/client-root.crt --key {c}/client-root.key \
             https://{}/v1/status",
            cl.admin_addr(1)
        );
    }
    println!("Ctrl-C stops the cluster.");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // Record the signal; the loop below stops the replicas.
        let _ = signal_flag(sig, stop.clone());
    }
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        for i in 1..=n {
            if !cl.is_running(i) {
                eprintln!(
                    "synod dev: replica {i} exited; stopping the others. Its log ends:\n{}",
                    cl.log_tail(i, 15)
                );
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("synod dev: stopping");
    cl.stop_all();
    Ok(())
}

/// Set `flag` when `sig` arrives (a tokio runtime on a helper thread listens for it).
fn signal_flag(sig: Signal, flag: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Result<()> {
    let kind = match sig {
        Signal::SIGINT => tokio::signal::unix::SignalKind::interrupt(),
        _ => tokio::signal::unix::SignalKind::terminate(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::spawn(move || {
        rt.block_on(async move {
            if let Ok(mut s) = tokio::signal::unix::signal(kind) {
                s.recv().await;
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        })
    });
    Ok(())
}
