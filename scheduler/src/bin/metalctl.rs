//! `metalctl`: the command-line client of metal-scheduler.

use clap::Parser;

/// Command-line client of the metal-scheduler HTTP API.
///
/// Not built yet: its operations arrive with the scheduler core issue, together with the API.
#[derive(Parser, Debug)]
#[command(name = "metalctl", version, about, long_about)]
struct Cli {}

fn main() -> std::process::ExitCode {
    let _ = Cli::parse();
    eprintln!("metalctl: no operations yet; they arrive with the scheduler core issue (see --help)");
    std::process::ExitCode::from(2)
}
