//! A simulated machine: power, the boot override its BMC sets, a virtual CD, disks as sparse
//! files and a console. Its boot order is a metal fleet's: the network first, then the disk
//! (iPXE's `exit` when the scheduler has nothing to run); an override changes the next boot
//! or every boot. Powering it on boots it that way: a network boot
//! asks the scheduler's `/boot/ipxe` for its script, exactly as iPXE does, and when the
//! script boots the ramdisk, the real `metal_boot::init::run_task` runs the task on this
//! machine's trees and disks (join with the one-time token, mTLS, signed reports); then the
//! machine powers off or reboots as the kernel line says (a failed task powers off). A disk
//! boot finds an OS when the first disk has a boot signature, and the machine then runs it
//! (idles, powered on). A machine cabled to the site's switch gets no answer to a network
//! boot unless its port is on the provisioning or the cleaning VLAN (see [`crate::switch`]).
//!
//! A running task cannot be cut short: a power-off during one takes effect at once for
//! the BMC, and what the task does after it is ignored by the machine. Its reports still
//! reach the scheduler, and its writes still reach the disk files, which a real machine's
//! would not: the teardown never cuts a ramdisk's power while it works, so no test meets it.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use metal_protocol::inventory::SystemPaths;

use crate::disk::FileDisk;
use crate::fault::{Fault, Faults};
use crate::network::LossyRelay;
use crate::tree::Hardware;

/// The BMC firmware version every simulated BMC starts with.
pub const BMC_VERSION: &str = "5.10.0";
/// How long a sushy-flavored BMC reads the old power state after a reset (sushy's fake
/// driver took 1 to 11 s).
pub const SUSHY_POWER_LAG: Duration = Duration::from_millis(1500);

/// How a BMC speaks Redfish.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Flavor {
    /// As the DMTF schema reads.
    #[default]
    Standard,
    /// With sushy-tools' quirks.
    SushyTools,
}

/// Lines of console output kept per machine.
const CONSOLE_LINES: usize = 200;

/// Where a boot override sends the next boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum BootSource {
    /// The network (PXE / iPXE).
    Pxe,
    /// The first disk.
    Hdd,
    /// The virtual CD (an ISO with metal's iPXE chain).
    Cd,
    /// Firmware setup.
    BiosSetup,
}

impl BootSource {
    /// Redfish's name.
    pub fn redfish(self) -> &'static str {
        match self {
            BootSource::Pxe => "Pxe",
            BootSource::Hdd => "Hdd",
            BootSource::Cd => "Cd",
            BootSource::BiosSetup => "BiosSetup",
        }
    }

    /// From Redfish's name.
    pub fn from_redfish(name: &str) -> Option<BootSource> {
        [BootSource::Pxe, BootSource::Hdd, BootSource::Cd, BootSource::BiosSetup]
            .into_iter()
            .find(|b| b.redfish() == name)
    }
}

/// What the machine is doing.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "detail")]
pub enum Activity {
    /// Powered off.
    Off,
    /// Running a ramdisk task.
    Ramdisk(String),
    /// Running the OS on its disk.
    Os,
    /// Powered on with nothing to boot.
    NoBootDevice,
}

/// The state a BMC reads and changes.
#[derive(Clone)]
pub struct State {
    /// Powered on.
    pub power_on: bool,
    /// Bumped by every power-on: a boot that belongs to an older one is over.
    pub epoch: u64,
    /// The override target and whether it is `Once` (else `Continuous`); `None`: disabled.
    pub boot_override: Option<(BootSource, bool)>,
    /// The virtual CD's image URL, when inserted.
    pub media: Option<String>,
    /// What the machine does.
    pub activity: Activity,
    /// The BMC account's password.
    pub bmc_password: String,
    /// The BMC's firmware version.
    pub bmc_version: String,
    /// Boots so far.
    pub boots: u64,
    /// When the power last changed, and what it was before the first of the changes that
    /// followed each other within a lagging BMC's lag (what such a BMC still reads).
    pub power_changed: Option<(Instant, bool)>,
    /// The BIOS attributes in effect.
    pub bios: BTreeMap<String, serde_json::Value>,
    /// BIOS attributes written through the BMC, applied at the next power-on (as a real
    /// BMC's settings object is).
    pub bios_pending: BTreeMap<String, serde_json::Value>,
    /// UEFI Secure Boot's switch (what the next boot does) and whether the last boot ran
    /// with it.
    pub secure_boot: bool,
    /// Whether the last boot verified what it booted.
    pub secure_boot_booted: bool,
    /// The BMC's open Redfish sessions (their tokens).
    pub sessions: std::collections::BTreeSet<String>,
    /// Sessions opened since the BMC started.
    pub sessions_opened: u64,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("power_on", &self.power_on)
            .field("epoch", &self.epoch)
            .field("boot_override", &self.boot_override)
            .field("media", &self.media)
            .field("activity", &self.activity)
            .field("bmc_password", &"***")
            .field("bmc_version", &self.bmc_version)
            .field("boots", &self.boots)
            .field("power_changed", &self.power_changed)
            .field("bios", &self.bios)
            .field("bios_pending", &self.bios_pending)
            .field("secure_boot", &self.secure_boot)
            .field("secure_boot_booted", &self.secure_boot_booted)
            .field("sessions", &self.sessions.len())
            .field("sessions_opened", &self.sessions_opened)
            .finish()
    }
}

impl State {
    /// Records a power change about to be made: a lagging BMC keeps reading the state from
    /// before the first change of a burst (an off and on again reads on throughout).
    fn note_power_change(&mut self) {
        let before = match self.power_changed {
            Some((at, before)) if at.elapsed() < SUSHY_POWER_LAG => before,
            _ => self.power_on,
        };
        self.power_changed = Some((Instant::now(), before));
    }

    /// The power state a BMC that lags by `lag` reads now.
    pub fn power_read_with_lag(&self, lag: std::time::Duration) -> bool {
        match self.power_changed {
            Some((at, before)) if at.elapsed() < lag => before,
            _ => self.power_on,
        }
    }

    /// Whether the boot of power-on `epoch` still runs the machine.
    fn runs(&self, epoch: u64) -> bool {
        self.power_on && self.epoch == epoch
    }
}

/// The attribute (and value) the `bios-reverts` fault keeps turning back at every boot.
pub const BIOS_REVERTED: (&str, &str) = ("ProcTurboMode", "Disabled");

/// The vendor's BIOS defaults of every simulated machine (what `Bios.ResetBios` restores).
pub fn bios_defaults() -> BTreeMap<String, serde_json::Value> {
    [
        ("BootMode", serde_json::json!("Uefi")),
        ("ProcTurboMode", serde_json::json!("Enabled")),
        ("ProcVirtualization", serde_json::json!("Enabled")),
        ("SriovGlobalEnable", serde_json::json!("Enabled")),
        ("NumaNodesPerSocket", serde_json::json!(1)),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect()
}

/// A real machine's power-on self test, at least: no machine reboots in no time.
const POST: Duration = Duration::from_millis(20);
/// How often iPXE asks the scheduler for its script before it gives up and boots the disk
/// (metal.ipxe retries every 10 s; the simulation every 200 ms of real time).
const SCRIPT_ATTEMPTS: u32 = 5;

/// One simulated machine.
#[derive(Debug)]
pub struct Machine {
    /// Its node id.
    pub id: String,
    /// What it is made of.
    pub hardware: Hardware,
    /// Its system trees.
    pub paths: SystemPaths,
    /// The disks' backing files.
    pub disk_files: Vec<PathBuf>,
    /// Its faults now.
    pub faults: Arc<Faults>,
    /// The scheduler's API (where iPXE chains to).
    pub api_url: String,
    /// How its BMC speaks Redfish.
    pub flavor: Flavor,
    /// The switch its NIC is cabled to (port `NODE-p0`), when the site has one: its port's
    /// VLAN decides whether a network boot reaches the boot service.
    pub switch: Option<Arc<crate::switch::SimSwitch>>,
    /// Its TPM 2.0, when the site gives machines one (`--tpm`).
    pub tpm: Option<crate::tpm::SimTpm>,
    state: Mutex<State>,
    console: Mutex<VecDeque<String>>,
}

impl Machine {
    /// A machine, powered off, whose BMC takes `bmc_password`.
    pub fn new(
        id: String,
        hardware: Hardware,
        paths: SystemPaths,
        disk_files: Vec<PathBuf>,
        api_url: String,
        bmc_password: String,
    ) -> Machine {
        Machine {
            id,
            hardware,
            paths,
            disk_files,
            faults: Arc::default(),
            api_url,
            flavor: Flavor::default(),
            switch: None,
            tpm: None,
            state: Mutex::new(State {
                power_on: false,
                epoch: 0,
                boot_override: None,
                media: None,
                activity: Activity::Off,
                bmc_password,
                bmc_version: BMC_VERSION.into(),
                boots: 0,
                power_changed: None,
                bios: bios_defaults(),
                bios_pending: BTreeMap::new(),
                secure_boot: true,
                secure_boot_booted: true,
                sessions: Default::default(),
                sessions_opened: 0,
            }),
            console: Mutex::new(VecDeque::new()),
        }
    }

    /// The state, locked.
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The BIOS version it reports, in band and out of band.
    pub fn bios_version(&self) -> String {
        if self.faults.has(Fault::FirmwareDrift) {
            format!("{}-drifted", self.hardware.bios_version)
        } else {
            self.hardware.bios_version.clone()
        }
    }

    /// Writes a line to the console.
    pub fn say(&self, line: &str) {
        let mut console = self.console.lock().unwrap_or_else(|p| p.into_inner());
        if console.len() == CONSOLE_LINES {
            console.pop_front();
        }
        console.push_back(line.to_owned());
        tracing::debug!(machine = %self.id, "{line}");
    }

    /// The console's last lines.
    pub fn console(&self) -> Vec<String> {
        self.console.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }

    /// Powers on (and boots) when off.
    pub fn power_on(self: &Arc<Self>) {
        let epoch = {
            let mut state = self.state();
            if state.power_on {
                return;
            }
            state.note_power_change();
            state.power_on = true;
            state.epoch += 1;
            // The firmware applies what the BMC holds for it as it starts.
            let pending = std::mem::take(&mut state.bios_pending);
            state.bios.extend(pending);
            state.secure_boot_booted = state.secure_boot;
            if self.faults.has(Fault::BiosReverts) {
                state.bios.insert(BIOS_REVERTED.0.into(), BIOS_REVERTED.1.into());
            }
            state.epoch
        };
        let machine = self.clone();
        // Named for the host's tools (top -H, perf): a machine's own work is told apart from
        // the scheduler's and the BMCs' on the runtime threads.
        let spawned =
            std::thread::Builder::new().name(format!("machine-{}", self.id)).spawn(move || machine.boot(epoch));
        if let Err(e) = spawned {
            self.say(&format!("cannot start the boot: {e}"));
        }
    }

    /// Cuts the power.
    pub fn power_off(&self) {
        self.power_off_if(None);
    }

    /// Cuts the power when it is on (and, with `epoch`, only while that boot still runs it:
    /// a task that ends after a power cycle does not cut the next boot's power).
    fn power_off_if(&self, epoch: Option<u64>) {
        let mut state = self.state();
        if state.power_on && epoch.is_none_or(|e| state.epoch == e) {
            state.note_power_change();
            state.power_on = false;
            state.activity = Activity::Off;
            drop(state);
            self.say("power off");
        }
    }

    /// Boots again and again (a reboot is a boot) until the machine settles in an OS, finds
    /// nothing to boot, or is powered off.
    fn boot(self: Arc<Self>, epoch: u64) {
        for boot in 0.. {
            if boot > 0 {
                std::thread::sleep(POST);
            }
            let source = {
                let mut state = self.state();
                if !state.runs(epoch) {
                    return;
                }
                state.boots += 1;
                let source = match state.boot_override {
                    Some((source, once)) => {
                        if once {
                            state.boot_override = None;
                        }
                        source
                    }
                    // The boot order of a metal fleet: the network first; iPXE's "exit" goes on to the disk.
                    None => BootSource::Pxe,
                };
                if source == BootSource::Cd && state.media.is_none() { BootSource::Hdd } else { source }
            };
            if let Some(tpm) = &self.tpm
                && let Err(e) = tpm.power_on(self.faults.has(Fault::FirmwareTampered))
            {
                self.say(&format!("the TPM did not start: {e}"));
            }
            self.say(&format!("booting from {}", source.redfish()));
            let settled = match source {
                BootSource::Pxe | BootSource::Cd => self.network_boot(epoch),
                BootSource::Hdd | BootSource::BiosSetup => self.disk_boot(epoch),
            };
            if settled {
                return;
            }
        }
    }

    /// The scheduler's iPXE script, asked for a few times as iPXE does while it does not
    /// answer.
    fn script(&self) -> Result<String, String> {
        let url = format!("{}/boot/ipxe?mac={}", self.api_url, self.hardware.mac);
        let mut last = String::new();
        for attempt in 0..SCRIPT_ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(POST * 10);
            }
            match reqwest::blocking::get(&url).and_then(reqwest::blocking::Response::error_for_status) {
                Ok(answer) => return answer.text().map_err(|e| format!("{url}: {e}")),
                Err(e) => last = format!("{url}: {e}"),
            }
        }
        Err(last)
    }

    /// A lessee's rescue: its keys fetched as iPXE fetches them (which spends the boot's
    /// token and lets the scheduler move the ports on), then it runs until the power
    /// changes. The simulation runs no sshd.
    fn rescue(&self, epoch: u64, keys: &str) -> bool {
        let url = format!("{}{keys}", self.api_url);
        match reqwest::blocking::get(&url).and_then(reqwest::blocking::Response::error_for_status) {
            Ok(_) => {
                self.say("METAL-RESCUE ready (simulated: no sshd)");
                self.set_activity(epoch, Activity::Ramdisk("rescue".into()));
            }
            Err(e) => {
                self.say(&format!("iPXE: {url}: {e}; nothing to boot"));
                self.set_activity(epoch, Activity::NoBootDevice);
            }
        }
        true
    }

    /// iPXE's chain to the scheduler, then the ramdisk task; false when the machine reboots.
    fn network_boot(self: &Arc<Self>, epoch: u64) -> bool {
        if self.flavor == Flavor::SushyTools {
            // sushy-tools' machines take longer to boot than their BMC's lag: a ramdisk that
            // ended (and powered off) within it would leave the BMC's read-back of the power-on
            // waiting for a state that came and went. Twice the lag leaves a poll's margin.
            let changed = self.state().power_changed.map(|(at, _)| at);
            if let Some(wait) = changed.map(|at| (at + SUSHY_POWER_LAG * 2).saturating_duration_since(Instant::now())) {
                std::thread::sleep(wait);
            }
        }
        if let Some(switch) = &self.switch
            && let Err(e) = switch.reaches_boot_service(&crate::switch::port_of(&self.id))
        {
            self.say(&format!("PXE: {e}; booting the next device"));
            return self.disk_boot(epoch);
        }
        let script = match self.script() {
            Ok(script) => script,
            Err(e) => {
                self.say(&format!("iPXE: {e}; booting the next device"));
                return self.disk_boot(epoch);
            }
        };
        for line in script.lines().filter_map(|l| l.strip_prefix("echo ")) {
            self.say(line);
        }
        if let Some(keys) = script.lines().find_map(|l| l.strip_prefix("initrd --name keys ")) {
            return self.rescue(epoch, keys);
        }
        let Some(kernel) = script.lines().find(|l| l.starts_with("kernel ")) else {
            return self.disk_boot(epoch);
        };
        let mut params = metal_boot::init::parse_cmdline(kernel);
        let _network = match self.lossy_network(&mut params) {
            Ok(relay) => relay,
            Err(e) => {
                self.say(&format!("network: {e}"));
                None
            }
        };
        if params.controller.is_none() {
            self.say("the script boots an installer, which the simulation does not run");
            self.set_activity(epoch, Activity::NoBootDevice);
            return true;
        }
        let task = format!("{:?}", params.task).to_lowercase();
        self.set_activity(epoch, Activity::Ramdisk(task));
        // The BIOS reports its version in band through DMI: as it is now (drift included).
        let bios = self.paths.sys.join("class/dmi/id/bios_version");
        if let Err(e) = std::fs::write(&bios, format!("{}\n", self.bios_version())) {
            self.say(&format!("cannot write {}: {e}", bios.display()));
        }
        let console = |line: &str| self.say(line);
        let (faults, serial) = (self.faults.clone(), self.hardware.serial.clone());
        let open =
            move |device: &metal_erase::device::BlockDevice| -> std::io::Result<Box<dyn metal_erase::io::Target>> {
                let disk_serial = crate::tree::disk_serial(&serial, &device.disk.name);
                Ok(Box::new(FileDisk::open(&device.path, &disk_serial, faults.clone())?))
            };
        let machine = metal_boot::init::Machine {
            paths: self.paths.clone(),
            open: &open,
            console: &console,
            progress: &metal_erase::progress::NoProgress,
        };
        let failed = match metal_boot::init::run_task(&params, &machine) {
            Ok(()) => {
                self.say("metal-boot: task done");
                false
            }
            Err(e) => {
                self.say(&format!("metal-boot: FATAL: {e}"));
                true
            }
        };
        if !self.state().runs(epoch) {
            return true;
        }
        match params.end_after(failed) {
            metal_boot::init::End::PowerOff => {
                self.power_off_if(Some(epoch));
                true
            }
            metal_boot::init::End::Reboot => {
                self.say("rebooting");
                false
            }
        }
    }

    /// With the `report-lost` fault, the ramdisk reaches the controller through a relay that
    /// carries its join and loses the rest; the relay lasts as long as the value.
    fn lossy_network(&self, params: &mut metal_boot::init::Params) -> Result<Option<LossyRelay>, String> {
        if !self.faults.has(Fault::ReportLost) {
            return Ok(None);
        }
        let Some(controller) = params.controller.as_deref() else { return Ok(None) };
        let mut url = reqwest::Url::parse(controller).map_err(|e| format!("{controller}: {e}"))?;
        let target = url
            .socket_addrs(|| None)
            .map_err(|e| format!("{controller}: {e}"))?
            .into_iter()
            .next()
            .ok_or_else(|| format!("{controller}: no address"))?;
        let relay = LossyRelay::start(target).map_err(|e| format!("starting the lossy relay: {e}"))?;
        url.set_port(Some(relay.address().port())).map_err(|()| format!("{controller}: cannot set a port"))?;
        params.controller = Some(url.as_str().trim_end_matches('/').to_owned());
        self.say("network: the ramdisk's reports will be lost");
        Ok(Some(relay))
    }

    /// The first `len` bytes of disk `index` (nvme0n1 is 0).
    pub fn disk_head(&self, index: usize, len: usize) -> std::io::Result<Vec<u8>> {
        let path = self.disk_files.get(index).ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
        let mut head = vec![0u8; len];
        std::os::unix::fs::FileExt::read_exact_at(&std::fs::File::open(path)?, &mut head, 0)?;
        Ok(head)
    }

    /// The first disk's boot sector: an OS when it carries the boot signature.
    fn disk_boot(&self, epoch: u64) -> bool {
        let bootable = self.disk_head(0, 512).is_ok_and(|sector| sector[510..] == [0x55, 0xaa]);
        if bootable {
            self.say("booting the OS on the first disk");
            self.set_activity(epoch, Activity::Os);
        } else {
            self.say("no bootable device");
            self.set_activity(epoch, Activity::NoBootDevice);
        }
        true
    }

    fn set_activity(&self, epoch: u64, activity: Activity) {
        let mut state = self.state();
        if state.runs(epoch) {
            state.activity = activity;
        }
    }
}
