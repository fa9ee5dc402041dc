//! `synod kv`: the native key-value API (SconeKV) from the command line, through
//! `synod-kv-client`.
//!
//! ```text
//! synod kv view                            # the routing view: nodes, buckets, masters
//! synod kv get KEY                         # value and version
//! synod kv put KEY VALUE                   # prints the new version
//! synod kv del KEY
//! synod kv cas KEY VERSION VALUE           # exit 1 if the version did not match
//! synod kv txn FILE|-                      # a transaction script, one op per line
//! ```
//!
//! A transaction script holds `get k`, `put k value...` (the value is the rest of the line),
//! `del k`, blank lines and `# comments`. Each read is printed as it happens, then the outcome;
//! the exit code is 0 committed, 1 aborted, 2 unknown or error. `--servers` lists seeds (the
//! default is node 1 of `synod dev --kv`, whose nodes listen on 2479, 2480, 2481, ...).

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::{Args, Subcommand};
use std::io::Read;
use std::time::Duration;
use synod_kv_client::{Client, ClientConfig, Outcome};

#[derive(Args, Debug)]
pub struct KvArgs {
    /// Seed nodes' KV gRPC addresses, host:port,... (the view names the rest). Default: the
    /// client configuration's (`synod dev` writes it), else 127.0.0.1:2479.
    #[arg(long, value_delimiter = ',')]
    servers: Option<Vec<String>>,
    /// The limit of each RPC attempt, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    timeout_ms: u64,
    /// The cluster CA (PEM): talk TLS to nodes that serve it (`[tls] kv`, on in a secure
    /// cluster). Default: the client configuration's.
    #[arg(long)]
    ca: Option<std::path::PathBuf>,
    /// A client certificate and key (PEM) to show the nodes (with --ca).
    #[arg(long, requires = "key")]
    cert: Option<std::path::PathBuf>,
    #[arg(long, requires = "cert")]
    key: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: KvCommand,
}

#[derive(Subcommand, Debug)]
enum KvCommand {
    /// Print the routing view: its version, the nodes, and each bucket's master and members.
    View,
    /// Print a key's value and version (read at its bucket's master, not validated).
    Get { key: String },
    /// Write a value; prints the key's new version.
    Put { key: String, value: String },
    /// Delete a key (it keeps a tombstone version); prints the new version.
    Del { key: String },
    /// Write a value if the key's version is VERSION (0: never written); exit 1 if not.
    Cas {
        key: String,
        version: u64,
        value: String,
    },
    /// Run a transaction script (a file, or - for standard input): `get k`, `put k v`,
    /// `del k`, `# comment`, one per line. Exit 0 committed, 1 aborted, 2 unknown or error.
    Txn { file: String },
    /// YCSB transactions against the store (the same as `synod bench kv`; `--servers` is its
    /// own option there: without it, a local cluster is started).
    Bench(crate::bench::kv::KvBenchArgs),
}

/// One line of a transaction script.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Get(String),
    Put(String, String),
    Del(String),
}

/// Parses a transaction script; errors name the line.
fn parse_script(text: &str) -> Result<Vec<Step>> {
    let mut steps = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (op, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let rest = rest.trim_start();
        let (key, value) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let step = match (op, key, value.trim_start()) {
            (_, "", _) => bail!("line {}: {op} needs a key", n + 1),
            ("get", k, "") => Step::Get(k.into()),
            ("del" | "delete", k, "") => Step::Del(k.into()),
            ("put", k, v) => Step::Put(k.into(), v.into()),
            ("get" | "del" | "delete", _, _) => bail!("line {}: {op} takes one key", n + 1),
            _ => bail!("line {}: unknown op {op:?} (get, put, del)", n + 1),
        };
        steps.push(step);
    }
    Ok(steps)
}

fn show(value: &Option<Bytes>) -> String {
    match value {
        Some(v) => String::from_utf8_lossy(v).into_owned(),
        None => "(none)".into(),
    }
}

pub fn run(args: KvArgs) -> Result<i32> {
    if let KvCommand::Bench(b) = args.command {
        return tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
            .block_on(crate::bench::kv::bench(b));
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run_async(args))
}

async fn run_async(args: KvArgs) -> Result<i32> {
    // Parse a script before connecting, so a typo costs no transaction.
    let script = match &args.command {
        KvCommand::Txn { file } => {
            let mut text = String::new();
            if file == "-" {
                std::io::stdin().read_to_string(&mut text)?;
            } else {
                text = std::fs::read_to_string(file).with_context(|| format!("read {file}"))?;
            }
            parse_script(&text)?
        }
        _ => Vec::new(),
    };
    let target = crate::client_config::Target::resolve(
        args.servers.clone(),
        |c| c.kv.clone(),
        "127.0.0.1:2479",
        (args.ca.clone(), args.cert.clone(), args.key.clone()),
    )?;
    let tls = match &target.ca {
        Some(ca) => Some(synod_kv_client::ClientTls::from_files(
            ca,
            target.cert.as_deref().zip(target.key.as_deref()),
        )?),
        None if target.cert.is_some() => anyhow::bail!("--cert needs --ca"),
        None => None,
    };
    let config = ClientConfig {
        timeout: Duration::from_millis(args.timeout_ms),
        tls,
        ..ClientConfig::default()
    };
    let client = Client::connect_with(&target.addrs, config).await?;
    match args.command {
        KvCommand::View => {
            let routing = client.routing();
            let view = routing.view();
            println!("view {}", view.version);
            for n in &view.nodes {
                println!("node {} {}", n.id, n.address);
            }
            for b in &view.buckets {
                let master = match b.master {
                    0 => "none".to_string(),
                    m => m.to_string(),
                };
                println!(
                    "bucket {} group {} master {master} members {:?}",
                    b.index, b.group, b.members
                );
            }
            Ok(0)
        }
        KvCommand::Get { key } => {
            let v = client.get_versioned(&key).await?;
            println!("{} (version {})", show(&v.value), v.version);
            Ok(0)
        }
        KvCommand::Put { key, value } => {
            println!("version {}", client.put(&key, value).await?);
            Ok(0)
        }
        KvCommand::Del { key } => {
            println!("version {}", client.delete(&key).await?);
            Ok(0)
        }
        KvCommand::Cas {
            key,
            version,
            value,
        } => {
            let (done, now) = client.compare_and_set(&key, version, value).await?;
            if done {
                println!("done, version {now}");
                Ok(0)
            } else {
                println!("mismatch: version is {now}");
                Ok(1)
            }
        }
        KvCommand::Txn { .. } => run_txn(&client, script).await,
        KvCommand::Bench(_) => unreachable!("handled before connecting"),
    }
}

async fn run_txn(client: &Client, steps: Vec<Step>) -> Result<i32> {
    let mut txn = client.begin().await?;
    for step in steps {
        let done = match &step {
            Step::Get(k) => txn.get(k).await.map(|v| println!("{k} = {}", show(&v))),
            Step::Put(k, v) => txn.put(k, v.clone()).await,
            Step::Del(k) => txn.delete(k).await,
        };
        if let Err(e) = done {
            txn.abort().await.ok();
            eprintln!("{step:?}: {e}");
            println!("aborted ({} not sent)", txn.id());
            return Ok(2);
        }
    }
    match txn.commit().await {
        Ok(Outcome::Committed) => {
            println!("committed {}", txn.id());
            Ok(0)
        }
        Ok(Outcome::Aborted { reason }) => {
            println!("aborted {}: {reason}", txn.id());
            Ok(1)
        }
        Err(e) => {
            println!("unknown {}: {e}", txn.id());
            Ok(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_parse_one_op_per_line() {
        let text = "# move 10\nget alice\n\n  put alice 90 euros \ndel bob\nput empty\n";
        assert_eq!(
            parse_script(text).unwrap(),
            [
                Step::Get("alice".into()),
                Step::Put("alice".into(), "90 euros".into()),
                Step::Del("bob".into()),
                Step::Put("empty".into(), "".into()),
            ]
        );
    }

    #[test]
    fn script_errors_name_the_line() {
        for (text, want) in [
            ("get a\nfrob x", "line 2: unknown op"),
            ("get", "line 1: get needs a key"),
            ("get a b", "line 1: get takes one key"),
        ] {
            let e = parse_script(text).unwrap_err().to_string();
            assert!(e.starts_with(want), "{text:?}: {e}");
        }
    }
}
