//! `synod certs`: make the cluster CA, node certificates and client certificates
//! (synod_server::tls::certs has the files they make).

use anyhow::Result;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use synod_server::tls::certs::{create_ca, create_client, create_node, CA_DAYS, NODE_DAYS};

#[derive(Args, Debug)]
pub struct CertsArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand, Debug)]
enum What {
    /// Create the cluster's CA (ca.crt, ca.key) in DIR; never overwrites one.
    Ca {
        #[arg(long)]
        dir: PathBuf,
        /// The cluster id (config key cluster_id).
        #[arg(long)]
        cluster_id: String,
        #[arg(long, default_value_t = CA_DAYS)]
        days: u32,
    },
    /// Create node N's certificate (node-N.crt, node-N.key) signed by the CA in DIR. Run it
    /// again to rotate it (then SIGHUP the node).
    Node {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        cluster_id: String,
        #[arg(long)]
        node_id: u32,
        /// Host names and addresses clients use to reach this node (repeatable); localhost
        /// and 127.0.0.1 are always included.
        #[arg(long = "host")]
        hosts: Vec<String>,
        #[arg(long, default_value_t = NODE_DAYS)]
        days: u32,
    },
    /// Create a client certificate (client-NAME.crt/.key, subject CN=NAME,O=synod: the ACL id
    /// x509:CN=NAME,O=synod) signed by the CA in DIR.
    Client {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        name: String,
        #[arg(long, default_value_t = NODE_DAYS)]
        days: u32,
    },
    /// Create a CA, certificates for nodes 1..=N and a client certificate `root`, for a
    /// local cluster (what `synod dev` does).
    Dev {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        cluster_id: String,
        #[arg(long, default_value_t = 3)]
        nodes: u32,
    },
}

pub fn run(args: CertsArgs) -> Result<()> {
    match args.what {
        What::Ca {
            dir,
            cluster_id,
            days,
        } => println!("{}", create_ca(&dir, &cluster_id, days)?.display()),
        What::Node {
            dir,
            cluster_id,
            node_id,
            hosts,
            days,
        } => println!(
            "{}",
            create_node(&dir, &cluster_id, node_id, &hosts, days)?.display()
        ),
        What::Client { dir, name, days } => {
            println!("{}", create_client(&dir, &name, days)?.display())
        }
        What::Dev {
            dir,
            cluster_id,
            nodes,
        } => dev_certs(&dir, &cluster_id, nodes)?,
    }
    Ok(())
}

/// A CA, nodes 1..=n and a client `root`, in `dir`.
pub fn dev_certs(dir: &std::path::Path, cluster_id: &str, nodes: u32) -> Result<()> {
    create_ca(dir, cluster_id, CA_DAYS)?;
    for id in 1..=nodes {
        create_node(dir, cluster_id, id, &[], NODE_DAYS)?;
    }
    create_client(dir, "root", NODE_DAYS)?;
    Ok(())
}
