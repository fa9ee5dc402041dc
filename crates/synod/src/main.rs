//! The `synod` command.

mod cli;
mod dev;
mod experiment;
mod server;
mod sim;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "synod",
    version,
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
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
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
