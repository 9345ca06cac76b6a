//! `metal-boot`: parses the command line and dispatches to the library.

use clap::Parser;

/// The metal ramdisk agent: PID 1 of the ramdisk; commissions machines and deploys verified images.
///
/// Runs as /init of the ramdisk or as a plain command. Its tasks (commission, deploy, inventory, plan) arrive with the metal-boot issue.
#[derive(Parser, Debug)]
#[command(name = "metal-boot", version, about, long_about)]
struct Cli {}

fn main() -> std::process::ExitCode {
    let _ = Cli::parse();
    eprintln!(
        "metal-boot: no commands yet. Runs as /init of the ramdisk or as a plain command. Its tasks (commission, deploy, inventory, plan) arrive with the metal-boot issue."
    );
    std::process::ExitCode::from(2)
}
