//! A simulated machine: power, the boot override its BMC sets, a virtual CD, disks as sparse
//! files and a console. Its boot order is a metal fleet's: the network first, then the disk
//! (iPXE's `exit` when the scheduler has nothing to run); an override changes the next boot
//! or every boot. Powering it on boots it that way: a network boot
//! asks the scheduler's `/boot/ipxe` for its script, exactly as iPXE does, and when the
//! script boots the ramdisk, the real `metal_boot::init::run_task` runs the task on this
//! machine's trees and disks (join with the one-time token, mTLS, signed reports); then the
//! machine powers off or reboots as the kernel line says. A disk boot finds an OS when the
//! first disk has a boot signature, and the machine then runs it (idles, powered on).
//!
//! A running task cannot be cut short: a power-off during one takes effect at once for
//! the BMC, and what the task does after it is ignored by the machine (its reports still
//! reach the scheduler, as a real machine's packets in flight might).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use metal_protocol::inventory::SystemPaths;

use crate::disk::FileDisk;
use crate::fault::{Fault, Faults};
use crate::tree::Hardware;

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
#[derive(Debug, Clone)]
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
}

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
            state: Mutex::new(State {
                power_on: false,
                epoch: 0,
                boot_override: None,
                media: None,
                activity: Activity::Off,
                bmc_password,
                bmc_version: crate::redfish::BMC_VERSION.into(),
                boots: 0,
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
            state.power_on = true;
            state.epoch += 1;
            state.epoch
        };
        let machine = self.clone();
        std::thread::spawn(move || machine.boot(epoch));
    }

    /// Cuts the power.
    pub fn power_off(&self) {
        let mut state = self.state();
        if state.power_on {
            state.power_on = false;
            state.activity = Activity::Off;
            drop(state);
            self.say("power off");
        }
    }

    /// Whether a boot of power-on `epoch` still runs the machine.
    fn current(&self, epoch: u64) -> bool {
        let state = self.state();
        state.power_on && state.epoch == epoch
    }

    /// Boots again and again (a reboot is a boot) until the machine settles in an OS, finds
    /// nothing to boot, or is powered off.
    fn boot(self: Arc<Self>, epoch: u64) {
        loop {
            let source = {
                let mut state = self.state();
                if !(state.power_on && state.epoch == epoch) {
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

    /// iPXE's chain to the scheduler, then the ramdisk task; false when the machine reboots.
    fn network_boot(self: &Arc<Self>, epoch: u64) -> bool {
        let url = format!("{}/boot/ipxe?mac={}", self.api_url, self.hardware.mac);
        let script = match reqwest::blocking::get(&url).and_then(reqwest::blocking::Response::text) {
            Ok(script) => script,
            Err(e) => {
                self.say(&format!("iPXE: {url}: {e}; booting the next device"));
                return self.disk_boot(epoch);
            }
        };
        for line in script.lines().filter_map(|l| l.strip_prefix("echo ")) {
            self.say(line);
        }
        let Some(kernel) = script.lines().find(|l| l.starts_with("kernel ")) else {
            return self.disk_boot(epoch);
        };
        let params = metal_boot::init::parse_cmdline(kernel);
        if params.controller.is_none() {
            self.say("the script boots an installer, which the simulation does not run");
            self.set_activity(epoch, Activity::NoBootDevice);
            return true;
        }
        let task = format!("{:?}", params.task).to_lowercase();
        self.set_activity(epoch, Activity::Ramdisk(task.clone()));
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
        match metal_boot::init::run_task(&params, &machine) {
            Ok(()) => self.say("metal-boot: task done"),
            Err(e) => self.say(&format!("metal-boot: FATAL: {e}")),
        }
        if !self.current(epoch) {
            return true;
        }
        match params.end {
            metal_boot::init::End::PowerOff => {
                self.power_off();
                true
            }
            metal_boot::init::End::Reboot => {
                self.say("rebooting");
                false
            }
        }
    }

    /// The first disk's boot sector: an OS when it carries the boot signature.
    fn disk_boot(&self, epoch: u64) -> bool {
        let mut sector = [0u8; 512];
        let bootable = self.disk_files.first().is_some_and(|path| {
            std::fs::File::open(path)
                .and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut sector, 0))
                .is_ok()
                && sector[510..] == [0x55, 0xaa]
        });
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
        if state.power_on && state.epoch == epoch {
            state.activity = activity;
        }
    }
}
