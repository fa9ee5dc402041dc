//! `synod server`: run one replica.

use anyhow::{bail, Result};
use clap::Args;
use std::io::IsTerminal;
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
    init_tracing(&cfg.log_level, &cfg.log_format)?;
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

/// Where the log's level comes from: `RUST_LOG` when it is set (the Rust convention, for one
/// run: `RUST_LOG=synod_server=debug,info`), else `log_level` from the configuration. A level
/// that does not parse is refused, never quietly replaced by `info`.
fn log_filter(level: &str, rust_log: Option<&str>) -> Result<(String, &'static str)> {
    let (text, from) = match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
        Some(env) => (env.to_string(), "RUST_LOG"),
        None => (level.trim().to_string(), "log_level"),
    };
    if text.is_empty() {
        bail!("{from} is empty: give a level (error, warn, info, debug, trace) or directives such as info,synod_server=debug");
    }
    // EnvFilter accepts any word as a target name ("verbose" would mean "the target verbose at
    // every level"), so a lone word must be a level.
    for directive in text.split(',') {
        let d = directive.trim();
        if !d.contains('=')
            && !d.contains('[')
            && d.parse::<tracing::Level>().is_err()
            && d != "off"
        {
            bail!("{from} = {d:?} is not a log level: use error, warn, info, debug, trace or off (or target=level directives)");
        }
    }
    tracing_subscriber::EnvFilter::try_new(&text)
        .map_err(|e| anyhow::anyhow!("{from} = {text:?} is not a valid log filter: {e}"))?;
    Ok((text, from))
}

/// The log: text (colour only when standard output is a terminal, never escapes in a file or a
/// pipe) or one JSON object per line (`log_format = "json"`, for log shippers).
fn init_tracing(level: &str, format: &str) -> Result<()> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let (text, _) = log_filter(level, rust_log.as_deref())?;
    let filter = tracing_subscriber::EnvFilter::try_new(&text)?;
    let ansi = std::io::stdout().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    let _ = match format {
        "json" => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
        _ => builder.with_ansi(ansi).try_init(),
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::log_filter;

    #[test]
    fn a_level_that_does_not_parse_is_refused() {
        assert!(log_filter("info", None).is_ok());
        assert!(log_filter("warn,synod_server=debug", None).is_ok());
        assert!(log_filter("off", None).is_ok());
        let e = log_filter("verbose", None).unwrap_err().to_string();
        assert!(e.contains("log_level") && e.contains("verbose"), "{e}");
        assert!(log_filter("", None).is_err());
        assert!(log_filter("info,loud", None).is_err());
    }

    #[test]
    fn rust_log_wins_over_the_configuration() {
        assert_eq!(log_filter("info", Some("debug")).unwrap().1, "RUST_LOG");
        assert_eq!(log_filter("info", Some(" ")).unwrap().1, "log_level");
        let e = log_filter("info", Some("chatty")).unwrap_err().to_string();
        assert!(e.contains("RUST_LOG"), "{e}");
    }
}
