//! `metal-erase`: parses the command line and dispatches to the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use metal_erase::cli::{self, ListArgs, RunArgs, VerifyArgs};
use metal_protocol::wipe::{SanitizeMethod, VerifyMode, WipePolicy};

/// Secure erase of every disk, verified by reading back, with a signed wipe report.
///
/// Picks the strongest erase each disk really supports (NVMe/ATA/SCSI sanitize, crypto
/// erase, format, then a software overwrite), proves the result by reading the disk back,
/// and signs a wipe report with the node's platform identity. `verify` checks a report
/// offline with nothing but the site CA certificate.
///
/// Exit codes of `run`: 0 every disk erased and verified; 1 verification found data left on
/// a disk; 3 a disk could not be erased; 2 bad arguments (nothing was written).
#[derive(Parser, Debug)]
#[command(name = "metal-erase", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List disks, their erase capabilities and the plan that would run (writes nothing).
    List {
        #[command(flatten)]
        select: Select,
        /// Policy whose plan to show.
        #[arg(long, value_enum, default_value_t = Policy::Purge)]
        policy: Policy,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Erase disks, verify them and write a signed wipe report.
    Run(Run),
    /// Verify a signed wipe report offline and print a NIST SP 800-88 style summary.
    ///
    /// Exit 0 only when the report is valid: signed by a ramdisk or node certificate of the
    /// site CA, valid when the report finished, every inventoried disk present and passed.
    Verify {
        /// The site CA certificate (PEM).
        #[arg(long)]
        ca: PathBuf,
        /// The platform inventory (JSON: an inventory report or a list of disk identities);
        /// defaults to the disk list the report itself answers to.
        #[arg(long)]
        inventory: Option<PathBuf>,
        /// The report (DSSE envelope JSON).
        report: PathBuf,
    },
}

#[derive(Args, Debug)]
#[group(required = false, multiple = false)]
struct Select {
    /// Erase this whole disk (repeatable). Loop devices are allowed; the boot medium never is.
    #[arg(long = "device", value_name = "PATH", conflicts_with = "all")]
    devices: Vec<PathBuf>,
    /// Every whole disk except loop/RAM/optical devices, read-only and removable media,
    /// anything mounted or held, the boot medium and --exclude.
    #[arg(long)]
    all: bool,
    /// With --all: leave this disk alone (kernel name or path; repeatable).
    #[arg(long, value_name = "NAME", requires = "all")]
    exclude: Vec<String>,
}

#[derive(Args, Debug)]
struct Run {
    #[command(flatten)]
    select: Select,
    /// Required: confirms that every selected disk is to be destroyed.
    #[arg(long)]
    yes_destroy_data: bool,
    /// The signing key (PKCS#8 PEM, Ed25519).
    #[arg(long)]
    key: PathBuf,
    /// The signing certificate, optionally followed by its chain (PEM, leaf first).
    #[arg(long)]
    cert: PathBuf,
    /// Where to write the signed report (must not exist).
    #[arg(long)]
    report: PathBuf,
    /// purge: strongest firmware sanitize first; clear: overwrite-class only; overwrite:
    /// software overwrite only.
    #[arg(long, value_enum, default_value_t = Policy::Purge)]
    policy: Policy,
    /// How to read back: full (every byte), sampled, markers. Default: full after an
    /// overwrite, markers after a device erase.
    #[arg(long, value_enum)]
    verify: Option<Verify>,
    /// Share of each disk read back in sampled and markers modes, in percent.
    #[arg(long, default_value_t = 1.0)]
    coverage: f64,
    /// Pattern of the software overwrite.
    #[arg(long, value_enum, default_value_t = PatternArg::Zeros)]
    pattern: PatternArg,
    /// Use exactly this method (no fallback), e.g. secure-discard or overwrite-random.
    #[arg(long, value_parser = metal_erase::plan::parse_method)]
    method: Option<SanitizeMethod>,
    /// Markers planted before a device erase.
    #[arg(long, default_value_t = 1024)]
    markers: u64,
    /// The platform inventory the report answers to (JSON: inventory report or disk list).
    #[arg(long)]
    inventory: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Policy {
    Purge,
    Clear,
    Overwrite,
}

impl From<Policy> for WipePolicy {
    fn from(p: Policy) -> Self {
        match p {
            Policy::Purge => WipePolicy::Purge,
            Policy::Clear => WipePolicy::Clear,
            Policy::Overwrite => WipePolicy::Overwrite,
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Verify {
    Full,
    Sampled,
    Markers,
}

impl From<Verify> for VerifyMode {
    fn from(v: Verify) -> Self {
        match v {
            Verify::Full => VerifyMode::Full,
            Verify::Sampled => VerifyMode::Sampled,
            Verify::Markers => VerifyMode::Markers,
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum PatternArg {
    Zeros,
    Random,
}

fn main() -> ExitCode {
    cli::default_sigpipe();
    let cli = Cli::parse();
    cli::init_logging();
    let code = match cli.command {
        Command::List { select, policy, json } => {
            cli::list(&ListArgs { selection: selection(select), policy: policy.into(), json })
        }
        Command::Run(run) => cli::run(&RunArgs {
            selection: selection(run.select),
            confirmed: run.yes_destroy_data,
            key: run.key,
            cert: run.cert,
            report: run.report,
            inventory: run.inventory,
            options: metal_erase::engine::EraseOptions {
                policy: run.policy.into(),
                verify: run.verify.map(Into::into),
                coverage_percent: run.coverage,
                pattern: match run.pattern {
                    PatternArg::Zeros => metal_erase::plan::SoftwarePattern::Zeros,
                    PatternArg::Random => metal_erase::plan::SoftwarePattern::Random,
                },
                forced_method: run.method,
                markers: run.markers,
                ..Default::default()
            },
        }),
        Command::Verify { ca, inventory, report } => cli::verify(&VerifyArgs { ca, inventory, report }),
    };
    ExitCode::from(code)
}

fn selection(select: Select) -> Option<metal_erase::device::Selection> {
    if select.all {
        Some(metal_erase::device::Selection::All { exclude: select.exclude })
    } else if !select.devices.is_empty() {
        Some(metal_erase::device::Selection::Named(select.devices))
    } else {
        None
    }
}
