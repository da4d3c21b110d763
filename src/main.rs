//! The `wgpu-attention` binary: see `wgpu-attention --help` and the README.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
