//! `synod dev`: a local cluster of N replicas on loopback, one process each.

use anyhow::{bail, Context, Result};
use clap::Args;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

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
    /// Replication protocol.
    #[arg(long, default_value = "zab")]
    protocol: String,
    /// fsync policy: always, or never (benchmarks of everything but the disk).
    #[arg(long, default_value = "always")]
    fsync: String,
    /// Log level of the replicas.
    #[arg(long, default_value = "info")]
    log_level: String,
}

pub fn run(args: DevArgs) -> Result<()> {
    if !(1..=9).contains(&args.nodes) {
        bail!("--nodes must be between 1 and 9");
    }
    let n = args.nodes;
    let base = args.base_port as u32;
    if base + 7000 + n > 65535 {
        bail!("--base-port {base} is too high for {n} nodes");
    }
    let temp;
    let root = match &args.data {
        Some(d) => d.clone(),
        None => {
            temp = tempfile::Builder::new().prefix("synod-dev-").tempdir()?;
            temp.path().to_path_buf()
        }
    };
    std::fs::create_dir_all(&root)?;
    let exe = std::env::current_exe().context("cannot find the synod executable")?;
    let mut peers = toml::Table::new();
    for i in 1..=n {
        peers.insert(
            i.to_string(),
            format!("127.0.0.1:{}", base + 700 + i).into(),
        );
    }
    let mut children: Vec<(u32, Child)> = Vec::new();
    println!(
        "synod dev: {n} replicas ({}), data in {}",
        args.protocol,
        root.display()
    );
    for i in 1..=n {
        let mut cfg = toml::Table::new();
        cfg.insert("cluster_id".into(), "synod-dev".into());
        cfg.insert("node_id".into(), (i as i64).into());
        cfg.insert("protocol".into(), args.protocol.clone().into());
        cfg.insert("peers".into(), peers.clone().into());
        cfg.insert(
            "client_addr".into(),
            format!("127.0.0.1:{}", base + i).into(),
        );
        cfg.insert(
            "admin_addr".into(),
            format!("127.0.0.1:{}", base + 7000 + i).into(),
        );
        cfg.insert(
            "data_dir".into(),
            root.join(format!("node{i}")).display().to_string().into(),
        );
        cfg.insert("fsync".into(), args.fsync.clone().into());
        cfg.insert("log_level".into(), args.log_level.clone().into());
        let path = root.join(format!("node{i}.toml"));
        std::fs::write(&path, toml::to_string(&cfg)?)?;
        let child = Command::new(&exe)
            .arg("server")
            .arg("--config")
            .arg(&path)
            .spawn()
            .with_context(|| format!("cannot start replica {i}"))?;
        println!(
            "  node {i}: client 127.0.0.1:{}  peer 127.0.0.1:{}  admin http://127.0.0.1:{}  (config {})",
            base + i,
            base + 700 + i,
            base + 7000 + i,
            path.display()
        );
        children.push((i, child));
    }
    println!("Ctrl-C stops the cluster.");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        let stop = stop.clone();
        // Record the signal; the loop below forwards it to the replicas.
        let _ = signal_flag(sig, stop);
    }
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        for (i, c) in children.iter_mut() {
            if let Some(status) = c.try_wait()? {
                eprintln!("synod dev: replica {i} exited ({status}); stopping the others");
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("synod dev: stopping");
    for (_, c) in &children {
        let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    for (i, c) in children.iter_mut() {
        loop {
            if c.try_wait()?.is_some() {
                break;
            }
            if Instant::now() > deadline {
                eprintln!("synod dev: replica {i} did not stop in time; killing it");
                let _ = c.kill();
                let _ = c.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
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
