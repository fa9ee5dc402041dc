//! `synod server`: run one replica.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use synod_server::config::Config;

#[derive(Args, Debug)]
pub struct ServerArgs {
    /// TOML configuration file (see docs/operations.md).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Override any configuration key: --set key=value (dotted keys for sections, e.g.
    /// --set zab.heartbeat_ms=50). May be repeated.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Shorthand for --set node_id=N.
    #[arg(long)]
    node_id: Option<u32>,
    /// Shorthand for --set data_dir=DIR.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Shorthand for --set log_level=LEVEL.
    #[arg(long)]
    log_level: Option<String>,
}

pub fn run(args: ServerArgs) -> Result<()> {
    let mut set = args.set.clone();
    if let Some(n) = args.node_id {
        set.push(format!("node_id={n}"));
    }
    if let Some(d) = &args.data_dir {
        set.push(format!("data_dir={:?}", d.display().to_string()));
    }
    if let Some(l) = &args.log_level {
        set.push(format!("log_level={l:?}"));
    }
    let cfg = Config::load(args.config.as_deref(), &set)?;
    init_tracing(&cfg.log_level);
    let rt = if cfg.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("synod")
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .worker_threads(cfg.threads.min(64))
            .thread_name("synod")
            .build()?
    };
    rt.block_on(synod_server::run(cfg))
}

fn init_tracing(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .try_init();
}
