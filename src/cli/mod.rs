//! The `wgpu-attention` command line: argument grammar, `.npy` input and output, the
//! subcommands, and the mapping of errors to exit codes.

mod args;
mod bench;
mod demo;
mod embed;
mod exit;
mod heatmap;
mod info;
mod io;
mod mha;
mod model;
mod model_common;
mod model_patterns;
mod npy;
mod progress;
mod raster;
mod run;
mod runtime_dir;
mod token_json;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};

/// Parses the arguments, runs the command and turns its outcome into an exit code.
pub fn main() -> ExitCode {
    // Before anything could start the Vulkan loader.
    let _runtime_dir = runtime_dir::RuntimeDir::ensure();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return exit::clap_error(&e),
    };
    let quiet = cli.quiet;
    let outcome = match &cli.command {
        None => demo::run(quiet),
        Some(Command::Info) => info::run(),
        Some(Command::Run(args)) => run::run(args, quiet),
        Some(Command::Bench(args)) => bench::run(args, quiet),
        Some(Command::Mha(args)) => mha::run(args, quiet),
        Some(Command::Heatmap(args)) => heatmap::run(args),
        Some(Command::Model(cmd)) => model::run(cmd),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            e.report();
            e.exit_code()
        }
    }
}
