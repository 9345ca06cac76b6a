//! `metal-firmware`: parses the command line and dispatches to the library.

use clap::Parser as _;

fn main() -> std::process::ExitCode {
    let cli = metal_firmware::cli::Cli::parse();
    metal_firmware::cli::init_logging();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("metal-firmware: cannot start: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    std::process::ExitCode::from(runtime.block_on(metal_firmware::cli::run(cli)) as u8)
}
