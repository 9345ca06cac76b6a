//! `metal-boot` commands for an ordinary shell: `plan IMAGE --url URL` prints the deploy
//! plan the controller would compute (`--seekable OUT` first converts the image into the
//! served seekable form); `deploy --plan FILE` writes an image the way the
//! ramdisk does; `inventory [--tests]` prints the commissioning report; `measurements`
//! replays the TPM event log against the TPM's PCRs; `quote` prints the boot evidence.
//! Exit codes: 0 done;
//! 1 the image failed verification (the disk was left unbootable) or a test failed; 2 bad
//! arguments; 3 the disk or the download failed.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand, ValueEnum};
use metal_erase::device::{self, SystemPaths};
use metal_erase::io::BlockTarget;
use metal_protocol::deploy::{DeployPlan, DigestAlgorithm};

use crate::deploy::{self, DeployError, DeployOptions};
use crate::plan;
use crate::source::{FetchOptions, HttpSource};
use crate::target;

/// The metal ramdisk agent: commissions machines and deploys images no one can boot
/// half-verified.
///
/// As a plain command: `plan` computes an image's deploy plan (digests and chunk manifest);
/// `deploy` streams an image (https:// pinned to the site CA, or http:// when allowed),
/// verifies every chunk before writing it, checks the whole-image digest, and writes the
/// first MiB last, so a failed or tampered deploy never boots.
///
/// Exit codes: 0 done; 1 the image failed verification (the disk is left unbootable);
/// 2 bad arguments; 3 the disk or the download failed.
#[derive(Parser, Debug)]
#[command(name = "metal-boot", version, about, long_about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Algorithm {
    Sha256,
    Sha512,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the deploy plan (JSON) for an image file: the digest of the file as served,
    /// its format (from its magic bytes), the SHA-256 of every raw chunk and which chunks
    /// are all zero, and for a file in zstd's seekable format whose frames line up with the
    /// chunks, every frame's size (the ramdisk then decompresses frames in parallel).
    ///
    /// With --seekable OUT, the image is first converted into the controller's served form
    /// (zstd's seekable format, one frame per chunk, then the seek table; any zstd tool still
    /// decompresses it) and the plan printed is that of OUT.
    Plan {
        /// The image file (raw, gzip, zstd or xz).
        image: PathBuf,
        /// Where the image (or, with --seekable, OUT) will be served.
        #[arg(long)]
        url: String,
        /// Chunk size in bytes (a power of two, 64 KiB to 256 MiB).
        #[arg(long, default_value_t = 4 << 20)]
        chunk_size: u64,
        /// Digest of the served file (--seekable: SHA-256 only).
        #[arg(long, value_enum, default_value_t = Algorithm::Sha256)]
        digest: Algorithm,
        /// Write the image in zstd's seekable form, one frame per chunk, to this file and
        /// print its plan.
        #[arg(long, value_name = "OUT")]
        seekable: Option<PathBuf>,
        /// zstd level of the --seekable frames.
        #[arg(long, default_value_t = 3, requires = "seekable")]
        level: i32,
    },
    /// Print this machine's inventory (JSON InventoryReport): CPU, memory and DIMMs, DMI,
    /// disks, NICs, in-band firmware; with --tests, also the four basic tests (exit 1 when
    /// one fails).
    Inventory {
        /// Node id to name in the report.
        #[arg(long, default_value = "unknown")]
        node: String,
        /// Run the memory, disk, NIC and CPU tests.
        #[arg(long)]
        tests: bool,
        /// Share of the available memory the memory test covers.
        #[arg(long, default_value_t = 0.05)]
        memory_fraction: f64,
        /// Sampled reads per disk.
        #[arg(long, default_value_t = 64)]
        disk_samples: u64,
    },
    /// Check what this machine's firmware measured: replay the TPM event log (from
    /// securityfs) and compare it with the TPM's SHA-256 PCRs 0 to 9 (from sysfs), one line
    /// per PCR. With --baseline, also compare the firmware's PCRs (0 to 7, or --pcrs) with a
    /// known-good boot's log and name the first differing PCR and event. Exit 1 when a PCR
    /// holds a value the log does not account for or differs from the baseline, 3 when the
    /// machine has no TPM 2.0 or did not boot through UEFI.
    Measurements {
        /// Also write the raw event log here (for `tpm2_eventlog`, a support case, or as the
        /// baseline of machines like this one).
        #[arg(long, value_name = "FILE")]
        save_log: Option<PathBuf>,
        /// A known-good boot's event log (`--save-log` there) to compare with.
        #[arg(long, value_name = "FILE")]
        baseline: Option<PathBuf>,
        /// The PCRs compared with the baseline (comma-separated).
        #[arg(long, value_delimiter = ',', default_values_t = crate::measured::FIRMWARE_PCRS, requires = "baseline",
              value_parser = clap::value_parser!(u32).range(0..24))]
        pcrs: Vec<u32>,
    },
    /// Print this machine's boot evidence (JSON): a TPM quote of SHA-256 PCRs 0 to 9 by
    /// its attestation key (a primary key of the endorsement hierarchy, the same every
    /// boot), binding EXTRA_DATA; the EK and its certificate; and the firmware's event log.
    Quote {
        /// The data the quote binds (hex, at most 64 bytes): a verifier's nonce.
        #[arg(long, value_name = "HEX")]
        extra_data: String,
    },
    /// Check an attestation envelope offline (as `GET /v1/nodes/ID/attestations/A/envelope`
    /// downloads it): signed by a ramdisk certificate of the site CA, its quote a TPM
    /// attestation key's over SHA-256 PCRs 0 to 9, its event log replaying to it; print each
    /// PCR. With --baseline (another envelope, or a raw event log), name the first differing
    /// PCR and event. Exit 1 when it does not verify or differs from the baseline.
    VerifyAttestation {
        /// The envelope (JSON).
        envelope: PathBuf,
        /// The site CA certificate (PEM) its signer must chain to.
        #[arg(long, value_name = "FILE")]
        ca: PathBuf,
        /// TPM makers' CA certificates (PEM bundle) to check the EK certificate against.
        #[arg(long, value_name = "FILE")]
        tpm_ca: Option<PathBuf>,
        /// A known-good boot: its attestation envelope, or its event log.
        #[arg(long, value_name = "FILE")]
        baseline: Option<PathBuf>,
        /// The PCRs compared with the baseline (comma-separated).
        #[arg(long, value_delimiter = ',', default_values_t = crate::measured::FIRMWARE_PCRS, requires = "baseline",
              value_parser = clap::value_parser!(u32).range(0..24))]
        pcrs: Vec<u32>,
    },
    /// Deploy an image by its plan onto a disk.
    Deploy {
        /// The plan (JSON).
        #[arg(long)]
        plan: PathBuf,
        /// The disk to write; default: the plan's root device hints, else the smallest disk
        /// that fits (never removable, read-only, in use or the boot medium).
        #[arg(long)]
        device: Option<PathBuf>,
        /// SHA-256 fingerprint of the site CA an https:// server must chain to.
        #[arg(long)]
        ca_fingerprint: Option<String>,
        /// Accept a plain http:// image URL.
        #[arg(long)]
        allow_http: bool,
        /// The disk reads zero everywhere (just erased): all-zero chunks are not written.
        #[arg(long)]
        target_zeroed: bool,
        /// Read the whole image back after writing and check it.
        #[arg(long)]
        read_back: bool,
    },
}

const EXIT_OK: u8 = 0;
const EXIT_VERIFY: u8 = 1;
const EXIT_BAD_ARGUMENTS: u8 = 2;
const EXIT_FAILED: u8 = 3;

/// Logs to stderr (JSON unless stderr is a terminal), filtered by `METAL_LOG`.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("METAL_LOG").unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if std::io::stderr().is_terminal() { builder.init() } else { builder.json().init() }
}

fn fail(code: u8, message: impl std::fmt::Display) -> u8 {
    eprintln!("metal-boot: {message}");
    code
}

/// Runs a parsed command line; returns the exit code.
pub fn run(cli: Cli) -> u8 {
    match cli.command {
        Command::Plan { image, url, chunk_size, digest, seekable, level } => {
            let algorithm = match digest {
                Algorithm::Sha256 => DigestAlgorithm::Sha256,
                Algorithm::Sha512 => DigestAlgorithm::Sha512,
            };
            let made = match (seekable, algorithm) {
                (None, _) => plan::make_plan(&image, &url, chunk_size, algorithm),
                (Some(out), DigestAlgorithm::Sha256) => plan::make_seekable(&image, &out, &url, chunk_size, level),
                (Some(_), DigestAlgorithm::Sha512) => {
                    return fail(EXIT_BAD_ARGUMENTS, "--seekable writes a SHA-256 plan (leave out --digest sha512)");
                }
            };
            match made {
                Ok(plan) => {
                    println!("{}", serde_json::to_string_pretty(&plan).unwrap_or_default());
                    EXIT_OK
                }
                Err(e) => fail(EXIT_BAD_ARGUMENTS, e),
            }
        }
        Command::Inventory { node, tests, memory_fraction, disk_samples } => {
            let report = crate::report::collect(
                &crate::inventory::SystemPaths::default(),
                &node,
                tests.then_some((memory_fraction, disk_samples)),
            );
            println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
            for t in report.tests.iter().filter(|t| !t.passed) {
                eprintln!("metal-boot: {:?} test FAILED: {}", t.kind, t.details);
            }
            if report.passed() { EXIT_OK } else { EXIT_VERIFY }
        }
        Command::Measurements { save_log, baseline, pcrs } => {
            let (log, checks) = match crate::measured::check(&Default::default(), save_log.as_deref()) {
                Ok(checked) => checked,
                Err(e) => return fail(EXIT_FAILED, e),
            };
            print!("{}", crate::measured::render(&checks));
            let differing = checks.iter().filter(|c| !c.replays()).count();
            if differing > 0 {
                return fail(EXIT_VERIFY, format!("{differing} PCRs hold values the event log does not account for"));
            }
            match baseline.map(|file| crate::measured::against_baseline(&log, &file, &pcrs)) {
                None => EXIT_OK,
                Some(Ok(None)) => {
                    let pcrs: Vec<String> = pcrs.iter().map(u32::to_string).collect();
                    println!("PCRs {} match the baseline", pcrs.join(","));
                    EXIT_OK
                }
                Some(Ok(Some(difference))) => fail(EXIT_VERIFY, format!("against the baseline: {difference}")),
                Some(Err(e)) => fail(EXIT_BAD_ARGUMENTS, e),
            }
        }
        Command::Quote { extra_data } => {
            let extra_data = match hex::decode(&extra_data) {
                Ok(bytes) if bytes.len() <= 64 => bytes,
                _ => return fail(EXIT_BAD_ARGUMENTS, "--extra-data: at most 64 bytes, in hex"),
            };
            let evidence = crate::measured::this_machine(&Default::default()).and_then(|(mut tpm, log)| {
                crate::measured::evidence(&mut tpm, &extra_data, log).map_err(|e| e.to_string())
            });
            match evidence {
                Ok(evidence) => {
                    println!("{}", serde_json::to_string_pretty(&evidence).unwrap_or_default());
                    EXIT_OK
                }
                Err(e) => fail(EXIT_FAILED, e),
            }
        }
        Command::VerifyAttestation { envelope, ca, tpm_ca, baseline, pcrs } => {
            use crate::attestation::{Failure, verify};
            match verify(&envelope, &ca, tpm_ca.as_deref(), baseline.as_deref(), &pcrs) {
                Ok(checked) => {
                    print!("{}", checked.summary);
                    match checked.difference {
                        None => EXIT_OK,
                        Some(difference) => fail(EXIT_VERIFY, format!("against the baseline: {difference}")),
                    }
                }
                Err(Failure::Arguments(e)) => fail(EXIT_BAD_ARGUMENTS, e),
                Err(Failure::Refused(e)) => fail(EXIT_VERIFY, e),
            }
        }
        Command::Deploy { plan, device, ca_fingerprint, allow_http, target_zeroed, read_back } => {
            let fetch = match ca_fingerprint.as_deref().map(metal_bmc::tls::parse_fingerprint).transpose() {
                Ok(ca_fingerprint) => FetchOptions { allow_http, ca_fingerprint, ..FetchOptions::default() },
                Err(e) => return fail(EXIT_BAD_ARGUMENTS, e),
            };
            deploy_command(&plan, device.as_deref(), &fetch, &DeployOptions { target_zeroed, read_back, hashers: 0 })
        }
    }
}

fn deploy_command(plan_file: &Path, device: Option<&Path>, fetch: &FetchOptions, options: &DeployOptions) -> u8 {
    let plan: DeployPlan = match std::fs::read_to_string(plan_file)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
    {
        Ok(p) => p,
        Err(e) => return fail(EXIT_BAD_ARGUMENTS, format!("{}: {e}", plan_file.display())),
    };
    if let Err(e) = plan.validate() {
        return fail(EXIT_BAD_ARGUMENTS, e);
    }
    if let Err(e) = crate::source::check_url(&plan.image.url, fetch) {
        return fail(EXIT_BAD_ARGUMENTS, e);
    }
    let paths = SystemPaths::default();
    let devices = match device::discover(&paths) {
        Ok(d) => d,
        Err(e) => return fail(EXIT_FAILED, e),
    };
    let raw = plan.chunks.raw_size_bytes;
    let chosen = match device {
        Some(path) => {
            let Some(found) =
                devices.iter().find(|d| d.path == path || Some(d.name()) == path.file_name().and_then(|n| n.to_str()))
            else {
                return fail(EXIT_BAD_ARGUMENTS, format!("{}: not a whole disk", path.display()));
            };
            if let Some(why) = target::unfit(found, raw) {
                return fail(EXIT_BAD_ARGUMENTS, format!("{}: {why}", path.display()));
            }
            found
        }
        None => match target::choose(&devices, &plan.target, raw) {
            Ok(d) => d,
            Err(e) => return fail(EXIT_BAD_ARGUMENTS, e),
        },
    };
    tracing::info!(disk = %chosen.path.display(), image = %plan.image.url, raw_bytes = raw, "deploying");
    let disk = match BlockTarget::open(&chosen.path, true) {
        Ok(t) => t,
        Err(e) => return fail(EXIT_FAILED, format!("{}: {e}", chosen.path.display())),
    };
    let stream = match HttpSource::open(&plan.image.url, plan.image.size_bytes, fetch) {
        Ok(s) => s,
        Err(e) => return fail(EXIT_FAILED, e),
    };
    match deploy::deploy(&plan, Box::new(stream), &disk, options) {
        Ok(outcome) => {
            println!("{}", serde_json::to_string_pretty(&outcome).unwrap_or_default());
            tracing::info!(disk = %chosen.path.display(), seconds = outcome.seconds, "deployed and verified");
            EXIT_OK
        }
        Err(e) => {
            let code = match e {
                DeployError::Chunk { .. }
                | DeployError::Frame { .. }
                | DeployError::Image { .. }
                | DeployError::Format { .. }
                | DeployError::Truncated { .. }
                | DeployError::TooLong { .. }
                | DeployError::ReadBack { .. } => EXIT_VERIFY,
                DeployError::Plan(_) | DeployError::TooLarge { .. } | DeployError::Seed(_) => EXIT_BAD_ARGUMENTS,
                DeployError::Source(_) | DeployError::Disk { .. } => EXIT_FAILED,
            };
            fail(code, format!("{e}; {} was left unbootable", chosen.path.display()))
        }
    }
}
