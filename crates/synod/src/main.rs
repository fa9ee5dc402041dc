//! The `synod` command.

mod backup;
mod bench;
mod certs;
mod chaos;
mod chaos_kv;
mod cli;
mod cli_shell;
mod client_config;
mod config_cmd;
mod dev;
mod experiment;
mod kv_cli;
mod member;
mod plot;
mod procs;
mod restore;
mod server;
mod sim;
mod soak;
mod zkclient;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "synod",
    version = synod_server::version::DESCRIBE,
    about = "synod: a replicated coordination service"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run protocol cores in the deterministic simulator and check every history.
    Sim(sim::SimArgs),
    /// Run one replica.
    Server(server::ServerArgs),
    /// Run a local cluster on loopback (one process per replica) until Ctrl-C.
    Dev(dev::DevArgs),
    /// A small ZooKeeper client: ls, get, set, create, delete, stat, watch.
    Cli(cli::CliArgs),
    /// Load generator (ZooKeeper protocol, etcd v3) and comparisons with ZooKeeper and etcd.
    Bench(bench::BenchArgs),
    /// Fault injection on a real cluster, with a linearizability check of the history.
    Chaos(chaos::ChaosArgs),
    /// Hold a steady load with many sessions for a long time, reporting latency and memory.
    Soak(soak::SoakArgs),
    /// The native key-value API (SconeKV): view, get, put, del, cas, and transaction scripts.
    Kv(kv_cli::KvArgs),
    /// Take a consistent backup of a running cluster's ZooKeeper tree over its admin port.
    Backup(backup::BackupArgs),
    /// Seed a new node's data directory from a backup, before its first start.
    Restore(backup::RestoreArgs),
    /// Read an Apache ZooKeeper data directory into a backup file (or a node's data directory).
    Import(backup::ImportArgs),
    /// A group's configuration: list, add (as voter or learner), promote, demote, remove.
    Member(member::MemberArgs),
    /// Make TLS certificates: the cluster CA, node and client certificates.
    Certs(certs::CertsArgs),
    /// Print shell exports for the cluster in the client configuration (`eval "$(synod env)"`):
    /// SYNOD_CA, SYNOD_ZOOKEEPER, … and etcdctl's ETCDCTL_ENDPOINTS and ETCDCTL_CACERT.
    Env,
    /// Print a shell completion script: `synod completions bash > /etc/bash_completion.d/synod`
    /// (bash, zsh, fish, elvish, powershell).
    Completions { shell: clap_complete::Shell },
    /// The configuration: its reference (markdown), a file checked, every key at its default.
    Config(config_cmd::ConfigArgs),
    /// Print ZooKeeper's digest identity of `user:password` (for `[zookeeper] super_digest`
    /// and digest ACLs).
    Digest {
        /// The credential, `user:password`.
        credential: String,
    },
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Digest { credential } => {
            println!("{}", synod_server::front::digest_id(&credential));
            0
        }
        Command::Certs(args) => report("certs", certs::run(args)),
        Command::Env => report("env", client_config::run_env()),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "synod", &mut std::io::stdout());
            0
        }
        Command::Config(args) => config_cmd::run(args).unwrap_or_else(|e| {
            eprintln!("synod config: {e:#}");
            1
        }),
        Command::Member(args) => match member::run(args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("synod member: {e:#}");
                1
            }
        },
        Command::Backup(args) => report("backup", backup::run_backup(args)),
        Command::Restore(args) => report("restore", backup::run_restore(args)),
        Command::Import(args) => report("import", backup::run_import(args)),
        Command::Server(args) => match server::run(args) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("synod server: {e:#}");
                1
            }
        },
        Command::Cli(args) => match cli::run(args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("synod cli: {e:#}");
                1
            }
        },
        Command::Bench(args) => match bench::run(args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("synod bench: {e:#}");
                1
            }
        },
        Command::Chaos(args) => match chaos::run(args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("synod chaos: {e:#}");
                2
            }
        },
        Command::Soak(args) => match soak::run(args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("synod soak: {e:#}");
                2
            }
        },
        Command::Kv(args) => match kv_cli::run(args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("synod kv: {e:#}");
                2
            }
        },
        Command::Dev(args) => match dev::run(args) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("synod dev: {e:#}");
                1
            }
        },
        Command::Sim(args) => match sim::run(args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("synod sim: {e}");
                2
            }
        },
    };
    std::process::exit(code);
}

/// A command's exit code, its error printed.
fn report(name: &str, r: anyhow::Result<()>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("synod {name}: {e:#}");
            1
        }
    }
}
