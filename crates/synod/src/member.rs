//! `synod member`: a group's configuration over the admin port (docs/membership.md).
//!
//! ```text
//! synod member list --admin 127.0.0.1:9181
//! synod member promote 4 --admin 127.0.0.1:9181,127.0.0.1:9182,127.0.0.1:9183
//! synod member remove 1 --group 0 --admin node2:9181 --ca ca.crt --cert client-root.crt --key client-root.key
//! ```
//!
//! A change goes to each admin address in turn until the group's leader takes it (the others
//! answer "not the established leader").

use crate::backup::http;
use anyhow::{anyhow, bail, Result};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct MemberArgs {
    #[command(subcommand)]
    action: Action,
    /// Admin addresses (host:port, comma-separated) of the cluster's nodes. Default: the client
    /// configuration's (`synod dev` writes it), else 127.0.0.1:9181.
    #[arg(long, global = true)]
    admin: Option<String>,
    /// The group (0: the ZooKeeper group).
    #[arg(long, global = true, default_value_t = 0)]
    group: u32,
    /// Refuse the change unless the configuration's version is still this (hex or decimal;
    /// ZooKeeper's `reconfig -v`).
    #[arg(long, global = true)]
    expect_version: Option<String>,
    /// How long to wait for each node.
    #[arg(long, global = true, default_value_t = 30)]
    timeout_s: u64,
    /// The cluster CA (PEM): speak HTTPS to an admin port with `[tls]`.
    #[arg(long, global = true, requires_all = ["cert", "key"])]
    ca: Option<PathBuf>,
    /// A client certificate of the cluster CA (`synod certs client`), PEM.
    #[arg(long, global = true, requires = "ca")]
    cert: Option<PathBuf>,
    /// Its private key, PEM.
    #[arg(long, global = true, requires = "ca")]
    key: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Action {
    /// Show the group's configuration as each node knows it.
    List,
    /// Add a node as a voter (it must be one of the peers and run the group).
    Add {
        node: u32,
        /// Add it as a learner (ZooKeeper's observer) instead: it receives the log and serves
        /// clients, and never votes; `promote` it once it has caught up.
        #[arg(long)]
        learner: bool,
    },
    /// Make a learner a voter.
    Promote { node: u32 },
    /// Make a voter a learner.
    Demote { node: u32 },
    /// Remove a node from the group (demote it first to keep the quorum's size while it goes).
    Remove { node: u32 },
}

fn parse_version(v: &str) -> Result<u64> {
    let r = match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => v.parse(),
    };
    r.map_err(|_| anyhow!("--expect-version {v}: not a number"))
}

pub fn run(a: MemberArgs) -> Result<i32> {
    let timeout = Duration::from_secs(a.timeout_s);
    let (admin, tls) = crate::backup::admin_target(
        a.admin.as_deref(),
        (a.ca.clone(), a.cert.clone(), a.key.clone()),
    )?;
    let addrs: Vec<&str> = admin.iter().map(String::as_str).collect();
    if addrs.is_empty() {
        bail!("--admin: no address");
    }
    let (action, node) = match a.action {
        Action::List => {
            let mut ok = false;
            for addr in &addrs {
                let path = format!("/v1/members/{}", a.group);
                match http("GET", addr, &path, 1 << 20, timeout, tls.as_ref()) {
                    Ok((200, body)) => {
                        ok = true;
                        println!("{addr}: {}", String::from_utf8_lossy(&body).trim());
                    }
                    Ok((code, body)) => {
                        eprintln!("{addr}: {code} {}", String::from_utf8_lossy(&body).trim())
                    }
                    Err(e) => eprintln!("{addr}: {e:#}"),
                }
            }
            return Ok(if ok { 0 } else { 1 });
        }
        Action::Add { node, learner } => (if learner { "add-learner" } else { "add" }, node),
        Action::Promote { node } => ("promote", node),
        Action::Demote { node } => ("demote", node),
        Action::Remove { node } => ("remove", node),
    };
    let mut path = format!("/v1/members/{}/{action}/{node}", a.group);
    if let Some(v) = &a.expect_version {
        path.push_str(&format!("?expect_version={}", parse_version(v)?));
    }
    let mut last = String::new();
    for addr in &addrs {
        match http("POST", addr, &path, 1 << 20, timeout, tls.as_ref()) {
            Ok((200, body)) => {
                println!("{}", String::from_utf8_lossy(&body).trim());
                return Ok(0);
            }
            Ok((code, body)) => {
                let why = String::from_utf8_lossy(&body).trim().to_string();
                // Another node may lead: try it.
                if code == 409 && why.contains("not the established leader") {
                    last = format!("{addr}: {why}");
                    continue;
                }
                eprintln!("{addr}: {code} {why}");
                return Ok(1);
            }
            Err(e) => {
                last = format!("{addr}: {e:#}");
                eprintln!("{last}");
            }
        }
    }
    eprintln!("no node took the change (last: {last})");
    Ok(1)
}
