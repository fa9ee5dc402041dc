//! The `synod` command.

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
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
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
