//! `metal-erase`: parses the command line and dispatches to the library.

use clap::Parser;

/// Secure erase of every disk, verified by read-back, with a signed wipe report.
///
/// Its commands (list, run, verify) arrive with the metal-erase issue.
#[derive(Parser, Debug)]
#[command(name = "metal-erase", version, about, long_about)]
struct Cli {}

fn main() -> std::process::ExitCode {
    let _ = Cli::parse();
    eprintln!("metal-erase: no commands yet. Its commands (list, run, verify) arrive with the metal-erase issue.");
    std::process::ExitCode::from(2)
}
