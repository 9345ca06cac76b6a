//! The `metal-erase` commands: `list`, `run` and `verify`, with their exit codes.
//!
//! `run` checks everything it can before touching a disk (confirmation, signing identity,
//! report path, inventory, device selection), so a bad argument never leaves a disk
//! half-erased. The report is written even when disks fail: a failure is evidence too.

use std::fs;
use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};

use metal_protocol::inventory::InventoryReport;
use metal_protocol::wipe::{DiskWipe, WipePolicy, WipeResult};
use metal_protocol::{CaCertificate, DiskIdentity, Envelope};
use tracing::{error, info, warn};

use crate::device::{self, BlockDevice, Selection, SystemPaths};
use crate::engine::EraseOptions;
use crate::firmware;
use crate::io::BlockTarget;
use crate::plan::{self, Capabilities};
use crate::progress::{JsonProgress, ProgressSink, TerminalProgress};
use crate::report::{self, SigningIdentity};
use crate::session;

/// Every disk erased and verified (or, for `verify`, the report is valid).
pub const EXIT_OK: u8 = 0;
/// Verification found data left on a disk (or, for `verify`, the report was refused).
pub const EXIT_VERIFY_FAILED: u8 = 1;
/// Bad arguments: nothing was written.
pub const EXIT_BAD_ARGUMENTS: u8 = 2;
/// A disk could not be erased.
pub const EXIT_COULD_NOT_ERASE: u8 = 3;

/// Lets a closed stdout end the process quietly, as for any Unix filter (`metal-erase list |
/// head`), instead of a panic on the failed print. Rust ignores SIGPIPE by default.
pub fn default_sigpipe() {
    // SAFETY: setting SIGPIPE's disposition to SIG_DFL before any thread is started touches
    // no memory of ours and cannot race with another signal() call.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Logs to stderr: human-readable on a terminal, JSON lines otherwise.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("METAL_LOG").unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if std::io::stderr().is_terminal() { builder.init() } else { builder.json().init() }
}

fn bad_arguments(message: impl std::fmt::Display) -> u8 {
    eprintln!("metal-erase: {message}");
    EXIT_BAD_ARGUMENTS
}

/// Arguments of `list`.
#[derive(Debug)]
pub struct ListArgs {
    /// Disks to show the plan for; `None` shows every device with what `--all` would do.
    pub selection: Option<Selection>,
    /// Policy whose plan to show.
    pub policy: WipePolicy,
    /// JSON output.
    pub json: bool,
}

/// `metal-erase list`.
pub fn list(args: &ListArgs) -> u8 {
    let paths = SystemPaths::default();
    let devices = match device::discover(&paths) {
        Ok(d) => d,
        Err(e) => return bad_arguments(e),
    };
    let selection = args.selection.clone().unwrap_or(Selection::All { exclude: Vec::new() });
    let (chosen, skipped) = match device::select(&devices, &selection, &paths.sys) {
        Ok(pair) => pair,
        Err(device::DeviceError::NothingToErase(_)) if args.selection.is_none() => (
            Vec::new(),
            devices.iter().map(|d| device::Skipped { name: d.name().to_owned(), reason: skip_reason(d) }).collect(),
        ),
        Err(e) => return bad_arguments(e),
    };
    // One plan per disk from what its firmware says (read-only probes), shared by both outputs.
    let plans: Vec<plan::MethodPlan> =
        chosen.iter().map(|d| plan::plan(&probe(d), args.policy, plan::SoftwarePattern::Zeros, None)).collect();
    if args.json {
        let rows: Vec<serde_json::Value> = chosen
            .iter()
            .zip(&plans)
            .map(|(d, p)| {
                serde_json::json!({
                    "device": d.path, "disk": d.disk, "status": "will be erased",
                    "plan": p.candidates.iter().map(|(m, why)| serde_json::json!({"method": m, "why": why})).collect::<Vec<_>>(),
                    "rejected": p.rejected,
                })
            })
            .chain(skipped.iter().map(|s| serde_json::json!({"device": format!("/dev/{}", s.name), "status": format!("skipped: {}", s.reason)})))
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows).unwrap_or_default());
        return EXIT_OK;
    }
    println!("{:<12} {:<8} {:>12}  {:<24} {:<20} STATUS / PLAN", "DEVICE", "TRANSPORT", "SIZE", "MODEL", "SERIAL");
    for (d, p) in chosen.iter().zip(&plans) {
        let methods: Vec<String> = p.candidates.iter().map(|(m, _)| method_name(*m)).collect();
        let id = &d.disk.identity;
        println!(
            "{:<12} {:<8} {:>12}  {:<24} {:<20} will be erased: {}",
            d.name(),
            serde_json::to_value(d.disk.transport).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
            human_size(id.size_bytes),
            id.model.as_deref().unwrap_or("-"),
            id.serial.as_deref().unwrap_or("-"),
            methods.join(" -> ")
        );
        for r in &p.rejected {
            println!("{:<12}   not {}: {}", "", method_name(r.method), r.capability);
        }
    }
    for s in &skipped {
        println!("{:<12} skipped: {}", s.name, s.reason);
    }
    EXIT_OK
}

/// The firmware capabilities of a disk, probed through a read-only descriptor.
fn probe(device: &BlockDevice) -> Capabilities {
    match BlockTarget::open(&device.path, false) {
        Ok(target) => firmware::probe(&target, device.disk.transport),
        Err(e) => {
            warn!(disk = %device.path.display(), error = %e, "cannot open to probe its firmware; planning without it");
            Capabilities::default()
        }
    }
}

fn skip_reason(d: &BlockDevice) -> String {
    d.in_use.clone().unwrap_or_else(|| format!("{:?} device", d.kind).to_lowercase())
}

fn method_name(m: metal_protocol::wipe::SanitizeMethod) -> String {
    serde_json::to_value(m).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut unit = 0;
    let mut whole = bytes;
    while whole >= 1024 && unit < UNITS.len() - 1 && whole.is_multiple_of(1024) {
        whole /= 1024;
        unit += 1;
    }
    format!("{whole} {}", UNITS[unit])
}

/// Arguments of `run`.
#[derive(Debug)]
pub struct RunArgs {
    /// Which disks.
    pub selection: Option<Selection>,
    /// `--yes-destroy-data` was given.
    pub confirmed: bool,
    /// Signing key file.
    pub key: PathBuf,
    /// Certificate (chain) file.
    pub cert: PathBuf,
    /// Report output path.
    pub report: PathBuf,
    /// Platform inventory file.
    pub inventory: Option<PathBuf>,
    /// Erase options.
    pub options: EraseOptions,
}

fn read_text(path: &Path, what: &str) -> Result<String, String> {
    fs::read_to_string(path).map_err(|e| format!("cannot read {what} {}: {e}", path.display()))
}

/// Reads a platform inventory: an `InventoryReport`, or a JSON list of disk identities.
pub fn read_inventory(path: &Path) -> Result<Vec<DiskIdentity>, String> {
    let text = read_text(path, "inventory")?;
    if let Ok(disks) = serde_json::from_str::<Vec<DiskIdentity>>(&text) {
        return Ok(disks);
    }
    serde_json::from_str::<InventoryReport>(&text)
        .map(|r| r.disks.into_iter().map(|d| d.identity).collect())
        .map_err(|e| format!("{} is neither an inventory report nor a list of disk identities: {e}", path.display()))
}

/// `metal-erase run`.
pub fn run(args: &RunArgs) -> u8 {
    if !args.confirmed {
        return bad_arguments("refusing to erase without --yes-destroy-data (every selected disk will be destroyed)");
    }
    let Some(selection) = &args.selection else {
        return bad_arguments("name the disks to erase with --device PATH (repeatable) or --all");
    };
    if !(args.options.coverage_percent > 0.0 && args.options.coverage_percent <= 100.0) {
        return bad_arguments(format!(
            "--coverage {} must be more than 0 and at most 100",
            args.options.coverage_percent
        ));
    }
    let identity = match read_text(&args.key, "key")
        .and_then(|key| Ok((key, read_text(&args.cert, "certificate")?)))
        .and_then(|(key, cert)| SigningIdentity::from_pem(&key, &cert).map_err(|e| e.to_string()))
    {
        Ok(identity) => identity,
        Err(e) => return bad_arguments(e),
    };
    if args.report.exists() {
        return bad_arguments(format!("{} already exists (refusing to overwrite a report)", args.report.display()));
    }
    let inventory = match args.inventory.as_deref().map(read_inventory).transpose() {
        Ok(inventory) => inventory,
        Err(e) => return bad_arguments(e),
    };
    let progress: Box<dyn ProgressSink> = if std::io::stderr().is_terminal() {
        Box::new(TerminalProgress::default())
    } else {
        Box::new(JsonProgress::default())
    };
    let report = match session::erase(
        &SystemPaths::default(),
        selection,
        &args.options,
        &identity,
        inventory,
        progress.as_ref(),
    ) {
        Ok(report) => report,
        Err(e) => return bad_arguments(e),
    };
    let code = exit_code(&report.disks);
    match report::sign(&identity, &report)
        .and_then(|env| write_report(&args.report, &env).map_err(report::ReportError::Sign))
    {
        Ok(()) => info!(report = %args.report.display(), "signed wipe report written"),
        Err(e) => {
            error!(error = %e, "could not write the report");
            return EXIT_COULD_NOT_ERASE;
        }
    }
    for d in &report.disks {
        match d.result {
            WipeResult::Pass => info!(disk = %d.device, method = ?d.method, "erased and verified"),
            WipeResult::Fail => {
                warn!(disk = %d.device, first_bad_offset = ?d.first_bad_offset, failure = ?d.failure, "FAILED")
            }
        }
    }
    code
}

/// 0 when all passed; 1 when any verification found data; else 3.
pub fn exit_code(disks: &[DiskWipe]) -> u8 {
    if disks.iter().all(|d| d.result == WipeResult::Pass) {
        EXIT_OK
    } else if disks.iter().any(|d| d.first_bad_offset.is_some()) {
        EXIT_VERIFY_FAILED
    } else {
        EXIT_COULD_NOT_ERASE
    }
}

fn write_report(path: &Path, envelope: &Envelope) -> Result<(), String> {
    let mut json = serde_json::to_vec_pretty(envelope).map_err(|e| e.to_string())?;
    json.push(b'\n');
    let tmp = path.with_extension("partial");
    let write = || -> std::io::Result<()> {
        let mut file = fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        file.write_all(&json)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    };
    write().map_err(|e| format!("{}: {e}", path.display()))
}

/// Arguments of `verify`.
#[derive(Debug)]
pub struct VerifyArgs {
    /// Site CA certificate file.
    pub ca: PathBuf,
    /// Platform inventory file.
    pub inventory: Option<PathBuf>,
    /// Report file.
    pub report: PathBuf,
}

/// `metal-erase verify`.
pub fn verify(args: &VerifyArgs) -> u8 {
    let ca = match read_text(&args.ca, "CA certificate")
        .and_then(|pem| CaCertificate::from_pem(&pem).map_err(|e| e.to_string()))
    {
        Ok(ca) => ca,
        Err(e) => return bad_arguments(e),
    };
    let envelope = match fs::read(&args.report)
        .map_err(|e| format!("cannot read report {}: {e}", args.report.display()))
        .and_then(|bytes| Envelope::from_json(&bytes).map_err(|e| format!("{}: {e}", args.report.display())))
    {
        Ok(envelope) => envelope,
        Err(e) => return bad_arguments(e),
    };
    let inventory = match args.inventory.as_deref().map(read_inventory).transpose() {
        Ok(inventory) => inventory,
        Err(e) => return bad_arguments(e),
    };
    match report::verify_offline(&envelope, &ca, inventory.as_deref()) {
        Ok(report) => {
            let signer = envelope
                .signatures
                .first()
                .and_then(|s| s.certificate_ders().ok())
                .and_then(|chain| chain.into_iter().next())
                .and_then(|leaf| metal_protocol::identity::read_unverified(&leaf).ok())
                .map(|(identity, _)| identity);
            print!("{}", report::summary(&report, signer.as_ref()));
            println!("VALID: signature, certificate chain and every disk check out against {}", args.ca.display());
            EXIT_OK
        }
        Err(refusal) => {
            println!("INVALID ({}): {refusal}", refusal.code());
            EXIT_VERIFY_FAILED
        }
    }
}
