//! `synod config`: the configuration reference (`reference`, docs/configuration.md), a file
//! checked as the server loads it (`check`), and every key at its default (`default`).

use anyhow::Result;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use synod_server::config::{reference, Config};

#[derive(Args, Debug)]
pub struct ConfigArgs {
    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Print the configuration reference in markdown (docs/configuration.md is its output):
    /// every key, its type, default and description, from the configuration structures.
    Reference,
    /// Load a configuration file as `synod server` does (the file, then the overrides, then
    /// every check) and print "ok", or the error (on standard error) and exit 1.
    Check {
        /// TOML configuration file.
        file: PathBuf,
        /// Override a key, as `synod server --set key=value`. May be repeated.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// Print a commented TOML file with every key at its default (required keys and optional
    /// tables commented out).
    Default,
}

/// The exit code.
pub fn run(args: ConfigArgs) -> Result<i32> {
    match args.command {
        ConfigCommand::Reference => print!("{}", reference::markdown()),
        ConfigCommand::Default => print!("{}", reference::default_toml()),
        ConfigCommand::Check { file, set } => match Config::load(Some(&file), &set) {
            Ok(_) => println!("ok"),
            Err(e) => {
                eprintln!("{}: {e:#}", file.display());
                return Ok(1);
            }
        },
    }
    Ok(0)
}
