//! `metal-agent`: parses the command line and dispatches to the library.

use clap::Parser as _;

fn main() -> std::process::ExitCode {
    let cli = metal_agent::cli::Cli::parse();
    metal_boot::cli::init_logging();
    std::process::ExitCode::from(metal_agent::cli::run(cli))
}
