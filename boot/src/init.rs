//! metal-boot as PID 1 of the ramdisk: mount the kernel filesystems, load the modules the
//! image lists, bring up `lo` and every NIC by DHCP (busybox's udhcpc, with the event script
//! the ramdisk ships at /etc/udhcpc/default.script, which also writes resolv.conf), read the
//! `metal.*` parameters from the kernel command line, run the task, and end with sync and
//! reboot(2). Orphans are reaped all along. On a fatal error the console says what failed,
//! and only `metal.debug=1` drops to a shell.

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use crate::inventory::SystemPaths;

/// What the ramdisk was booted to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Task {
    /// Inventory and the basic tests.
    Commission,
    /// Write the image of the plan the controller hands out.
    Deploy,
    /// Erase every disk, read it back, and post the signed wipe report.
    Erase,
    /// Read the firmware versions in band and post them (the controller checks the baseline).
    Firmware,
    /// A shell on the console (debugging).
    Shell,
    /// Anything else named on the command line (arrives with the controller protocol).
    Other(String),
}

/// How the ramdisk ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// reboot(2) RB_AUTOBOOT.
    Reboot,
    /// reboot(2) RB_POWER_OFF.
    PowerOff,
}

/// The `metal.*` kernel parameters.
#[derive(Clone, PartialEq, Eq)]
pub struct Params {
    /// `metal.controller=URL`.
    pub controller: Option<String>,
    /// `metal.token=...`: one-time join token (never logged).
    pub token: Option<String>,
    /// `metal.ca=SHA256`: the site CA's fingerprint.
    pub ca_fingerprint: Option<String>,
    /// `metal.task=commission|shell|...` (default commission).
    pub task: Task,
    /// `metal.debug=1`: a shell on a fatal error.
    pub debug: bool,
    /// `metal.end=reboot|poweroff` (default reboot): how a task that succeeded ends.
    /// A failed task always powers off (`end_after`).
    pub end: End,
    /// `metal.node=ID`.
    pub node: Option<String>,
    /// `metal.bootif=MAC`: the NIC the machine network-booted from (tried first for DHCP).
    pub boot_mac: Option<String>,
    /// `metal.erase.method=NAME`: the erase uses exactly this method on every disk (no
    /// fallback; the read-back still decides whether it worked).
    pub erase_method: Option<String>,
    /// `metal.lldp=SECONDS`: commissioning listens this long for each NIC's LLDP neighbour.
    pub lldp_wait: Option<Duration>,
}

impl std::fmt::Debug for Params {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Params")
            .field("controller", &self.controller)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("ca_fingerprint", &self.ca_fingerprint)
            .field("task", &self.task)
            .field("debug", &self.debug)
            .field("end", &self.end)
            .field("node", &self.node)
            .field("boot_mac", &self.boot_mac)
            .field("erase_method", &self.erase_method)
            .field("lldp_wait", &self.lldp_wait)
            .finish()
    }
}

impl Params {
    /// How the ramdisk ends after its task: as `metal.end` says when it succeeded, powered
    /// off when it failed. The scheduler hands one token per boot it starts, so a ramdisk
    /// that rebooted into the same boot would be a second claim on it; powered off, the step
    /// that booted it sees the boot ended and decides whether to boot it again.
    pub fn end_after(&self, failed: bool) -> End {
        if failed { End::PowerOff } else { self.end }
    }
}

/// Reads the `metal.*` parameters of a kernel command line; others are ignored.
pub fn parse_cmdline(cmdline: &str) -> Params {
    let mut p = Params {
        controller: None,
        token: None,
        ca_fingerprint: None,
        task: Task::Commission,
        debug: false,
        end: End::Reboot,
        node: None,
        boot_mac: None,
        erase_method: None,
        lldp_wait: None,
    };
    for word in cmdline.split_whitespace() {
        let Some((key, value)) = word.split_once('=') else { continue };
        let value = value.to_owned();
        match key {
            "metal.controller" => p.controller = Some(value),
            "metal.token" => p.token = Some(value),
            "metal.ca" => p.ca_fingerprint = Some(value),
            "metal.task" => {
                p.task = match value.as_str() {
                    "commission" => Task::Commission,
                    "deploy" => Task::Deploy,
                    "erase" => Task::Erase,
                    "firmware" => Task::Firmware,
                    "shell" => Task::Shell,
                    _ => Task::Other(value),
                }
            }
            "metal.debug" => p.debug = matches!(value.as_str(), "1" | "true" | "yes"),
            "metal.end" => p.end = if value == "poweroff" { End::PowerOff } else { End::Reboot },
            "metal.node" => p.node = Some(value),
            "metal.erase.method" => p.erase_method = Some(value),
            "metal.bootif" => p.boot_mac = Some(value),
            "metal.lldp" => p.lldp_wait = value.parse().ok().filter(|s| *s > 0).map(Duration::from_secs),
            _ => {}
        }
    }
    p
}

/// Collects exit statuses of every child (our own and orphans re-parented to PID 1), so
/// `run` can wait for its own child without racing the reaper.
#[derive(Default)]
struct Reaper {
    exited: Mutex<HashMap<i32, i32>>,
    changed: Condvar,
}

fn reaper() -> &'static Arc<Reaper> {
    static REAPER: OnceLock<Arc<Reaper>> = OnceLock::new();
    REAPER.get_or_init(|| {
        let reaper = Arc::new(Reaper::default());
        let shared = reaper.clone();
        std::thread::spawn(move || {
            loop {
                match crate::sys::wait_any() {
                    Some((pid, status)) => {
                        shared.exited.lock().map(|mut m| m.insert(pid, status)).ok();
                        shared.changed.notify_all();
                    }
                    None => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        });
        reaper
    })
}

/// Runs a program to its end (waiting through the reaper); its exit code.
fn run(program: &str, args: &[&str]) -> Result<i32, String> {
    let reaper = reaper();
    let child = Command::new(program).args(args).spawn().map_err(|e| format!("{program}: {e}"))?;
    let pid = i32::try_from(child.id()).map_err(|_| "pid out of range".to_owned())?;
    let mut exited = reaper.exited.lock().map_err(|_| "reaper poisoned".to_owned())?;
    loop {
        if let Some(status) = exited.remove(&pid) {
            return Ok(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) });
        }
        exited = reaper.changed.wait(exited).map_err(|_| "reaper poisoned".to_owned())?;
    }
}

fn say(message: &str) {
    println!("metal-boot: {message}");
}

fn mount_all() -> Result<(), String> {
    for (source, target, fstype) in [
        ("proc", "/proc", "proc"),
        ("sys", "/sys", "sysfs"),
        ("dev", "/dev", "devtmpfs"),
        ("run", "/run", "tmpfs"),
        ("tmp", "/tmp", "tmpfs"),
    ] {
        crate::sys::mount(source, target, fstype).map_err(|e| format!("mount {fstype} on {target}: {e}"))?;
    }
    Ok(())
}

fn load_modules() {
    let list = std::fs::read_to_string("/etc/modules").unwrap_or_default();
    let (mut loaded, mut failed) = (0, Vec::new());
    for module in list.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        match run("/bin/modprobe", &[module]) {
            Ok(0) => loaded += 1,
            _ => failed.push(module.to_owned()),
        }
    }
    // A module for hardware the machine does not have fails to load; that is not fatal.
    say(&format!(
        "{loaded} modules loaded; not loaded (no such hardware?): {}",
        if failed.is_empty() { "none".into() } else { failed.join(" ") }
    ));
}

/// Brings up lo and every NIC with a device; DHCP on each until one gets a lease.
/// Brings every NIC up (so each reports its link) and takes a DHCP lease on the first that
/// answers, trying the one with `boot_mac` (the NIC the machine network-booted from) first.
fn network(boot_mac: Option<&str>) -> Result<String, String> {
    run("/bin/ip", &["link", "set", "lo", "up"])?;
    let mut nics: Vec<(bool, String)> = crate::inventory::nics(&SystemPaths::default())
        .into_iter()
        .map(|n| (boot_mac.is_none_or(|m| !m.eq_ignore_ascii_case(&n.mac)), n.name))
        .collect();
    nics.sort();
    let nics: Vec<String> = nics.into_iter().map(|(_, name)| name).collect();
    for nic in &nics {
        run("/bin/ip", &["link", "set", nic, "up"])?;
    }
    for nic in &nics {
        if run("/bin/udhcpc", &["-i", nic, "-f", "-q", "-n", "-t", "5", "-T", "2"])? == 0 {
            let lease = std::fs::read_to_string(format!("/run/metal-dhcp-{nic}")).unwrap_or_default();
            return Ok(format!("{nic}: {}", lease.trim()));
        }
    }
    Err(format!("no DHCP lease on any NIC ({})", if nics.is_empty() { "none found".into() } else { nics.join(", ") }))
}

/// The machine a task runs on: where its system trees are, how its disks open for writing,
/// and where it says what it does. PID 1 runs on [`Machine::real`]; metal-sim runs the same
/// tasks on simulated machines (fake trees, disks backed by sparse files, a console log).
pub struct Machine<'a> {
    /// `/sys`, `/proc` and `/dev`.
    pub paths: SystemPaths,
    /// Opens a disk for writing (erase and deploy).
    pub open: metal_erase::session::Opener<'a>,
    /// The console: one line at a time.
    pub console: &'a (dyn Fn(&str) + Sync),
    /// Where an erase says how far it got.
    pub progress: &'a dyn metal_erase::progress::ProgressSink,
}

impl std::fmt::Debug for Machine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Machine").field("paths", &self.paths).finish_non_exhaustive()
    }
}

fn print_line(line: &str) {
    println!("{line}");
}

impl Machine<'static> {
    /// This machine: the real trees, block devices opened with O_DIRECT | O_EXCL, stdout.
    pub fn real() -> Self {
        static PROGRESS: OnceLock<metal_erase::progress::JsonProgress> = OnceLock::new();
        Machine {
            paths: SystemPaths::default(),
            open: &metal_erase::session::open_block_device,
            console: &print_line,
            progress: PROGRESS.get_or_init(Default::default),
        }
    }
}

impl Machine<'_> {
    fn say(&self, message: &str) {
        (self.console)(&format!("metal-boot: {message}"));
    }
}

/// Joins the controller when the command line names one (controller, token and CA go
/// together); `None` for an offline run.
fn join(params: &Params, machine: &Machine) -> Result<Option<crate::controller::Joined>, String> {
    match (&params.controller, &params.token, &params.ca_fingerprint) {
        (None, None, None) => Ok(None),
        (Some(url), Some(token), Some(ca)) => {
            let joined = crate::controller::join(url, ca, token, crate::controller::Retry::default())
                .map_err(|e| e.to_string())?;
            machine.say(&format!("joined the controller as {}", joined.identity().identity().to_uri()));
            Ok(Some(joined))
        }
        _ => Err("metal.controller, metal.token and metal.ca go together".into()),
    }
}

/// Measured boot: on a machine with a TPM 2.0, attests to the controller (the TPM's quote of
/// what booted, with the firmware's event log) right after joining, in commissioning, erase
/// and deploy boots. What a refusal means is the controller's call (a pool that enforces
/// measured boot fails the teardown, and serves a deploy nothing); here it is only said.
fn attest(joined: &crate::controller::Joined, machine: &Machine) {
    let paths = crate::measured::Paths::of(&machine.paths);
    if !paths.device.exists() {
        machine.say(&format!("measured boot: no TPM 2.0 ({}), nothing to attest", paths.device.display()));
        return;
    }
    let attested =
        crate::measured::this_machine(&paths).and_then(|(mut tpm, log)| crate::measured::attest(&mut tpm, joined, log));
    machine.say(&match attested {
        Ok(receipt) if receipt.accepted => "measured boot: attestation accepted".to_owned(),
        Ok(receipt) => format!("measured boot: attestation refused: {}", receipt.reason.unwrap_or_default()),
        Err(e) => format!("measured boot: cannot attest: {e}"),
    });
}

/// Runs the task `params` name on `machine`: what PID 1 does once the network is up.
pub fn run_task(params: &Params, machine: &Machine) -> Result<(), String> {
    let say = |message: &str| machine.say(message);
    match &params.task {
        Task::Commission => {
            let joined = join(params, machine)?;
            if let Some(joined) = &joined {
                attest(joined, machine);
            }
            let node = match &joined {
                Some(j) => j.identity().identity().node.clone(),
                None => params.node.clone().unwrap_or_else(|| "unknown".into()),
            };
            let lldp = params.lldp_wait.map(|wait| crate::lldp::start(&machine.paths, wait));
            let mut report = crate::report::collect(&machine.paths, &node, Some((0.05, 64)));
            if let Some(neighbours) = lldp.and_then(|listening| listening.join().ok()) {
                for nic in &mut report.nics {
                    nic.lldp = neighbours.get(&nic.name).cloned();
                }
                say(&format!("LLDP: {} of {} NICs heard their switch", neighbours.len(), report.nics.len()));
            }
            (machine.console)("BEGIN inventory-report");
            (machine.console)(&serde_json::to_string(&report).map_err(|e| e.to_string())?);
            (machine.console)("END inventory-report");
            for t in report.tests.iter().filter(|t| !t.passed) {
                say(&format!("{:?} test FAILED: {}", t.kind, t.details));
            }
            if let Some(joined) = &joined {
                let receipt = joined
                    .post_report(metal_protocol::InventoryReport::PAYLOAD_TYPE, &report)
                    .map_err(|e| format!("reporting: {e}"))?;
                say(&format!(
                    "report sent; accepted: {}{}",
                    receipt.accepted,
                    receipt.reason.map(|r| format!(" ({r})")).unwrap_or_default()
                ));
            }
            if report.passed() { Ok(()) } else { Err("a commissioning test failed".into()) }
        }
        Task::Deploy => {
            let joined = join(params, machine)?
                .ok_or("a deploy needs the controller: metal.controller, metal.token, metal.ca")?;
            attest(&joined, machine);
            let result = deploy(&joined, machine);
            finish(&joined, machine, "deploy", "deploy", result)
        }
        Task::Erase => {
            let joined = join(params, machine)?
                .ok_or("an erase needs the controller: metal.controller, metal.token, metal.ca")?;
            attest(&joined, machine);
            let result = erase(&joined, machine, params.erase_method.as_deref());
            finish(&joined, machine, "erase", "erase", result)
        }
        Task::Firmware => {
            let joined = join(params, machine)?
                .ok_or("a firmware check needs the controller: metal.controller, metal.token, metal.ca")?;
            let node = joined.identity().identity().node.clone();
            let report = crate::report::collect(&machine.paths, &node, None);
            for v in &report.firmware {
                say(&format!("firmware {} {} ({})", v.component, v.version, v.source));
            }
            let result = joined
                .post_report(metal_protocol::InventoryReport::PAYLOAD_TYPE, &report)
                .map_err(|e| format!("reporting: {e}"))
                .and_then(|receipt| match receipt.reason {
                    None => Ok(format!("{} versions reported; compliant", report.firmware.len())),
                    Some(reason) => Err(reason),
                });
            finish(&joined, machine, "firmware", "firmware check", result)
        }
        Task::Shell => run("/bin/sh", &[]).map(|_| ()),
        Task::Other(name) => {
            Err(format!("task {name:?} needs the controller protocol, which this build does not speak yet"))
        }
    }
}

/// Says how a joined task ended and reports it, signed, to the controller.
fn finish(
    joined: &crate::controller::Joined,
    machine: &Machine,
    task: &str,
    label: &str,
    result: Result<String, String>,
) -> Result<(), String> {
    let (ok, detail) = match &result {
        Ok(done) => (true, done.clone()),
        Err(e) => (false, e.clone()),
    };
    machine.say(&format!("{label} {}: {detail}", if ok { "done" } else { "FAILED" }));
    joined.report_task(task, ok, detail).map_err(|e| format!("reporting: {e}"))?;
    result.map(|_| ())
}

/// Erases every disk, posts the signed wipe report and says whether the controller took it.
fn erase(joined: &crate::controller::Joined, machine: &Machine, method: Option<&str>) -> Result<String, String> {
    use metal_protocol::wipe::{WipeReport, WipeResult};
    let options = metal_erase::engine::EraseOptions {
        forced_method: method.map(metal_erase::plan::parse_method).transpose()?,
        ..Default::default()
    };
    let selection = metal_erase::device::Selection::All { exclude: Vec::new() };
    let report = metal_erase::session::erase_with(
        &machine.paths,
        machine.open,
        &selection,
        &options,
        joined.identity(),
        None,
        machine.progress,
    )
    .map_err(|e| e.to_string())?;
    for disk in &report.disks {
        let outcome = match disk.result {
            WipeResult::Pass => "erased and verified".to_owned(),
            WipeResult::Fail => format!("FAILED: {}", disk.failure.as_deref().unwrap_or("?")),
        };
        let method = disk.method.and_then(|m| serde_json::to_value(m).ok());
        let method = method.as_ref().and_then(|m| m.as_str()).unwrap_or("no method");
        machine.say(&format!("{} by {method}: {outcome}", disk.device));
    }
    let receipt = joined.post_report(WipeReport::PAYLOAD_TYPE, &report).map_err(|e| format!("reporting: {e}"))?;
    let passed = report.disks.iter().filter(|d| d.result == WipeResult::Pass).count();
    let summary = format!("{passed} of {} disks erased and verified", report.disks.len());
    match receipt.reason {
        None if receipt.accepted => Ok(format!("{summary}; wipe report accepted")),
        reason => Err(format!("{summary}; wipe report refused: {}", reason.unwrap_or_default())),
    }
}

/// Fetches the plan and writes it to the disk the plan's hints choose.
fn deploy(joined: &crate::controller::Joined, machine: &Machine) -> Result<String, String> {
    let plan = joined.fetch_plan().map_err(|e| e.to_string())?;
    let devices = metal_erase::device::discover(&machine.paths).map_err(|e| e.to_string())?;
    let raw = plan.chunks.raw_size_bytes;
    let chosen = crate::target::choose(&devices, &plan.target, raw).map_err(|e| e.to_string())?;
    machine.say(&format!("deploying {} ({raw} raw bytes) to {}", plan.image.url, chosen.path.display()));
    let disk = (machine.open)(chosen).map_err(|e| format!("{}: {e}", chosen.path.display()))?;
    // The controller's own image endpoint wants the ramdisk's certificate; others get none.
    let fetch = joined.image_fetch(&plan.image.url);
    let stream =
        crate::source::HttpSource::open(&plan.image.url, plan.image.size_bytes, &fetch).map_err(|e| e.to_string())?;
    let options = crate::deploy::DeployOptions { read_back: true, ..Default::default() };
    let outcome = crate::deploy::deploy(&plan, Box::new(stream), disk.as_ref(), &options)
        .map_err(|e| format!("{e}; {} was left unbootable", chosen.path.display()))?;
    Ok(format!(
        "{} raw bytes to {} ({} bytes written, read back, cloud-init seed {}) in {:.1} s",
        outcome.raw_bytes,
        chosen.path.display(),
        outcome.bytes_written,
        if plan.cloud_init.is_some() { "written" } else { "none" },
        outcome.seconds
    ))
}

/// PID 1: never returns.
pub fn main() -> ! {
    let params = match mount_all() {
        Ok(()) => parse_cmdline(&std::fs::read_to_string("/proc/cmdline").unwrap_or_default()),
        Err(e) => {
            say(&format!("FATAL: {e}"));
            crate::sys::end(false);
        }
    };
    say(&format!("PID 1, {params:?}"));
    load_modules();
    let result = network(params.boot_mac.as_deref()).and_then(|lease| {
        say(&format!("network up, {lease}"));
        run_task(&params, &Machine::real())
    });
    let failed = match result {
        Ok(()) => {
            say("task done");
            false
        }
        Err(e) => {
            say(&format!("FATAL: {e}"));
            if params.debug {
                say("metal.debug is set: a shell on the console; exit it to end");
                let _ = run("/bin/sh", &[]);
            }
            true
        }
    };
    let end = params.end_after(failed);
    say(match end {
        End::PowerOff => "powering off",
        End::Reboot => "rebooting",
    });
    crate::sys::end(end == End::PowerOff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metal_parameters_are_read_and_the_token_never_printed() {
        let p = parse_cmdline(
            "console=ttyS0 quiet metal.controller=https://10.0.2.2:8443 metal.token=s3cr3t-tok metal.ca=ab12 metal.task=commission metal.end=poweroff metal.node=n7\n",
        );
        assert_eq!(p.controller.as_deref(), Some("https://10.0.2.2:8443"));
        assert_eq!(
            (p.task.clone(), p.end, p.debug, p.node.as_deref()),
            (Task::Commission, End::PowerOff, false, Some("n7"))
        );
        assert!(!format!("{p:?}").contains("s3cr3t"), "{p:?}");
        assert_eq!(parse_cmdline("metal.task=deploy").task, Task::Deploy);
        // A controller needs all three; none is an offline run.
        let partial = parse_cmdline("metal.token=tok_0123456789abcdef metal.ca=ab12");
        let machine = Machine::real();
        assert_eq!(join(&partial, &machine).unwrap_err(), "metal.controller, metal.token and metal.ca go together");
        assert!(join(&parse_cmdline("quiet"), &machine).unwrap().is_none());
        let q = parse_cmdline("metal.task=erase metal.debug=1 metal.erase.method=discard");
        assert_eq!((q.task, q.debug, q.end), (Task::Erase, true, End::Reboot));
        assert_eq!(q.erase_method.as_deref(), Some("discard"));
        assert_eq!(parse_cmdline("metal.bootif=52:54:00:AA:BB:CC").boot_mac.as_deref(), Some("52:54:00:AA:BB:CC"));
        assert_eq!(parse_cmdline("metal.task=firmware").task, Task::Firmware);
        assert_eq!(parse_cmdline("metal.task=dance").task, Task::Other("dance".into()));
    }
}
