//! `metal-boot`: parses the command line and dispatches to the library. As PID 1 (the
//! ramdisk's init) it runs `init::main` instead.

use clap::Parser as _;

/// musl's allocator maps and unmaps every large block: the HTTP client's read buffers alone
/// cost a deploy about a seventh of its CPU in page faults. mimalloc keeps them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    if std::process::id() == 1 {
        metal_boot::init::main();
    }
    let cli = metal_boot::cli::Cli::parse();
    metal_boot::cli::init_logging();
    std::process::ExitCode::from(metal_boot::cli::run(cli))
}
