//! `synod dev`: a local cluster of N replicas on loopback, one process each.

use crate::client_config::{install_dev, remove_dev, ClientConfig};
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
            "  node {i}: client {}  peer 127.0.0.1:{}  admin {scheme}://{}  (pid {}, log {})",
            cl.client_addr(i),
            cl.peer_port(i),
            cl.admin_addr(i),
            cl.pid(i).unwrap_or(0),
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
    let client = client_config(&cl, n, &args);
    std::fs::write(cl.dir.join("client.toml"), client.to_dev_toml())?;
    let installed = match ClientConfig::path() {
        Some(p) => match install_dev(&p, &client) {
            Ok(true) => Some(p),
            Ok(false) => {
                println!(
                    "{} is not synod dev's: left alone (clients: --servers and --ca, or \
                     SYNOD_CLIENT_CONFIG={})",
                    p.display(),
                    cl.dir.join("client.toml").display()
                );
                None
            }
            Err(e) => {
                println!("cannot write the client configuration: {e:#}");
                None
            }
        },
        None => None,
    };
    print_try(&cl, &client, args.kv, installed.as_deref());
    println!(
        "Ctrl-C stops the cluster. A replica that is killed (kill -9 PID) starts again after 3 s."
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // Record the signal; the loop below stops the replicas.
        let _ = signal_flag(sig, stop.clone());
    }
    supervise(&mut cl, n, &stop);
    println!("synod dev: stopping");
    cl.stop_all();
    if let Some(p) = &installed {
        remove_dev(p, &client);
    }
    Ok(())
}

/// Keeps the cluster running until `stop`: a replica that exits (killed to watch the others
/// elect a leader, say) is started again after RESTART_DELAY, and rejoins from its disk. A replica
/// that exits within STARTUP of its start, at the cluster's start or again right after a restart,
/// is failing, not killed: its log is shown and the cluster stops.
fn supervise(cl: &mut Cluster, n: u32, stop: &std::sync::atomic::AtomicBool) {
    use std::sync::atomic::Ordering::Relaxed;
    use std::time::Instant;
    const STARTUP: Duration = Duration::from_secs(3);
    const RESTART_DELAY: Duration = Duration::from_secs(3);
    let mut started: Vec<Instant> = vec![Instant::now(); n as usize + 1];
    let mut down_since: Vec<Option<Instant>> = vec![None; n as usize + 1];
    while !stop.load(Relaxed) {
        for i in 1..=n {
            let k = i as usize;
            if let Some(t) = down_since[k] {
                if t.elapsed() >= RESTART_DELAY {
                    if let Err(e) = cl.start(i) {
                        eprintln!("synod dev: replica {i} does not start: {e:#}; stopping");
                        stop.store(true, Relaxed);
                    }
                    println!(
                        "synod dev: replica {i} started again (pid {}); it recovers from its disk",
                        cl.pid(i).unwrap_or(0)
                    );
                    started[k] = Instant::now();
                    down_since[k] = None;
                }
                continue;
            }
            if cl.is_running(i) {
                continue;
            }
            if started[k].elapsed() < STARTUP {
                eprintln!(
                    "synod dev: replica {i} exited {:.1} s after starting; stopping the others. \
                     Its log ends:\n{}",
                    started[k].elapsed().as_secs_f64(),
                    cl.log_tail(i, 15)
                );
                stop.store(true, Relaxed);
                break;
            }
            println!(
                "synod dev: replica {i} exited; the others carry on, and it starts again in {} s",
                RESTART_DELAY.as_secs()
            );
            down_since[k] = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What clients need to reach this cluster (written to DATA/client.toml and the user's client
/// configuration).
fn client_config(cl: &Cluster, n: u32, args: &DevArgs) -> ClientConfig {
    let all = |f: &dyn Fn(u32) -> String| (1..=n).map(f).collect::<Vec<_>>();
    let certs = cl.tls.clone();
    let scheme = if certs.is_some() { "https" } else { "http" };
    ClientConfig {
        cluster: format!(
            "synod dev: {n} nodes ({}), data in {}",
            args.protocol,
            cl.dir.display()
        ),
        zookeeper: all(&|i| cl.client_addr(i)),
        zookeeper_tls: if certs.is_some() {
            all(&|i| cl.secure_client_addr(i))
        } else {
            Vec::new()
        },
        kv: if args.kv { cl.kv_addrs() } else { Vec::new() },
        etcd: if args.kv {
            cl.etcd_addrs()
                .iter()
                .map(|a| format!("{scheme}://{a}"))
                .collect()
        } else {
            Vec::new()
        },
        admin: all(&|i| cl.admin_addr(i)),
        ca: certs.as_ref().map(|c| c.join("ca.crt")),
        cert: certs.as_ref().map(|c| c.join("client-root.crt")),
        key: certs.as_ref().map(|c| c.join("client-root.key")),
    }
}

/// The lines a newcomer copies: each client with the right addresses and certificates.
fn print_try(cl: &Cluster, c: &ClientConfig, kv: bool, installed: Option<&std::path::Path>) {
    println!();
    match installed {
        Some(p) => println!(
            "Clients find this cluster in {} (synod cli, synod kv, synod backup, synod member; \
             eval \"$(synod env)\" exports SYNOD_CA and etcdctl's variables). Try:",
            p.display()
        ),
        None => println!("Try:"),
    }
    let zk = c.zookeeper.join(",");
    println!("  synod cli create /app hello && synod cli get /app");
    println!("  /usr/share/zookeeper/bin/zkCli.sh -server {zk} ls /");
    match &c.ca {
        Some(ca) => println!(
            "  python3 -c 'from kazoo.client import KazooClient as K; z=K(\"{}\", use_ssl=True, \
             ca=\"{}\"); z.start(); print(z.get_children(\"/\"))'",
            c.zookeeper_tls.join(","),
            ca.display()
        ),
        None => println!(
            "  python3 -c 'from kazoo.client import KazooClient as K; z=K(\"{zk}\"); z.start(); \
             print(z.get_children(\"/\"))'"
        ),
    }
    let admin = &c.admin[0];
    match (&c.ca, &c.cert, &c.key) {
        (Some(ca), Some(cert), Some(key)) => println!(
            "  curl --cacert {} --cert {} --key {} https://{admin}/v1/status",
            ca.display(),
            cert.display(),
            key.display()
        ),
        _ => println!("  curl http://{admin}/v1/status"),
    }
    if kv {
        println!("  synod kv put greeting hello && synod kv get greeting");
        let cacert =
            c.ca.as_ref()
                .map_or(String::new(), |ca| format!(" --cacert {}", ca.display()));
        println!(
            "  etcdctl --endpoints {}{cacert} put greeting hello",
            c.etcd.join(",")
        );
    }
    if let Some(certs) = &cl.tls {
        println!(
            "Peers use mutual TLS (certificates in {}; --insecure turns TLS off).",
            certs.display()
        );
    }
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
