//! `metal-firmware`: parses the command line and dispatches to the library.

use clap::Parser;

/// Firmware inventory, baseline drift check and reflash through the BMC.
///
/// Its commands (inventory, check, reflash) arrive with the firmware issue.
#[derive(Parser, Debug)]
#[command(name = "metal-firmware", version, about, long_about)]
struct Cli {}

fn main() -> std::process::ExitCode {
    let _ = Cli::parse();
    eprintln!(
        "metal-firmware: no commands yet. Its commands (inventory, check, reflash) arrive with the firmware issue."
    );
    std::process::ExitCode::from(2)
}
