//! Hardware in the loop: boots the test ramdisk (scripts/build-ramdisk) in QEMU under TCG
//! with a direct PVH kernel boot, with whatever disks, BMC and NICs a test asks for, runs
//! the test's shell script inside as the last step of /init, and hands back the serial
//! console. The script's files travel in a second cpio archive appended to the ramdisk.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::emulators::Guard;

/// The repository's root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The ramdisk directory (vmlinux, vmlinuz, initrd.cpio.gz), built once per test process
/// from the current tree. `METAL_RAMDISK_DIR` names a prebuilt one instead.
pub fn ramdisk() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| match std::env::var("METAL_RAMDISK_DIR") {
        Ok(dir) => workspace().join(dir),
        Err(_) => built("build-ramdisk", "ramdisk"),
    })
}

/// The arm64 ramdisk directory (`scripts/build-ramdisk --arch aarch64`: vmlinuz, an arm64
/// Image, and initrd.cpio.gz), built once per test process from the current tree.
pub fn ramdisk_aarch64() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| built_with("build-ramdisk", &["--arch", "aarch64"], "ramdisk-aarch64"))
}

/// Runs `scripts/SCRIPT target/NAME` under the lock `target/.NAME.lock`: one build at a
/// time across test processes (nextest runs each test in its own). Returns the directory.
fn built(script: &str, name: &str) -> PathBuf {
    built_with(script, &[], name)
}

/// [`built`] with `args` before the directory.
fn built_with(script: &str, args: &[&str], name: &str) -> PathBuf {
    let dir = workspace().join("target").join(name);
    let status = Command::new("flock")
        .arg(workspace().join(format!("target/.{name}.lock")))
        .arg(workspace().join("scripts").join(script))
        .args(args)
        .arg(&dir)
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("flock and scripts/{script}: {e}"));
    assert!(status.success(), "scripts/{script} failed");
    dir
}

/// A TFTP directory whose `boot.ipxe` is the repository's `ipxe/metal.ipxe` pointing at
/// the scheduler API `url` (as the guest reaches it).
pub fn tftp_dir(dir: &Path, url: &str) -> PathBuf {
    let template = std::fs::read_to_string(workspace().join("ipxe/metal.ipxe")).unwrap();
    let tftp = dir.join("tftp");
    std::fs::create_dir_all(&tftp).unwrap();
    std::fs::write(tftp.join("boot.ipxe"), template.replace("@METAL_URL@", url)).unwrap();
    tftp
}

/// [`tftp_dir`] with `grubnetaa64.efi` beside `boot.ipxe`: GRUB's arm64 EFI network loader
/// (`ipxe/build-grub-netboot.sh`) for the scheduler at `url`, what an arm64 UEFI firmware
/// gets as its boot file (`ipxe/dnsmasq.conf`, option 93 = 11).
pub fn tftp_dir_arm64(dir: &Path, url: &str) -> PathBuf {
    let tftp = tftp_dir(dir, url);
    let out = Command::new(workspace().join("ipxe/build-grub-netboot.sh"))
        .args(["--url", url, "--arch", "arm64"])
        .arg(tftp.join("grubnetaa64.efi"))
        .output()
        .unwrap();
    assert!(out.status.success(), "build-grub-netboot: {}", String::from_utf8_lossy(&out.stderr));
    tftp
}

/// The production ramdisk (`scripts/build-mkosi-ramdisk`: vmlinuz, initrd), built once per
/// test process from the current tree.
pub fn mkosi_ramdisk() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| built("build-mkosi-ramdisk", "mkosi-ramdisk"))
}

/// The static binaries (`scripts/build-static`: metal-boot, metal-erase, metal-firmware,
/// metal-agent), built once per test process from the current tree.
pub fn static_binaries() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| built("build-static", "static"))
}

/// The test OS (`scripts/build-test-os`: a cloud-init Debian 12 disk image,
/// `debian-12-metal.raw`), built once per test process (cached by its definition's digest).
pub fn test_os() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| built("build-test-os", "test-os"))
}

/// A disk attached to the guest.
#[derive(Debug, Clone)]
pub enum Bus {
    /// NVMe controller with this serial.
    Nvme { serial: String },
    /// SATA disk on an AHCI controller, with this model and serial.
    Sata { model: String, serial: String },
    /// virtio-blk with this serial.
    Virtio { serial: String },
    /// A SCSI disk on a virtio-scsi controller, with this serial.
    Scsi { serial: String },
}

/// Where a guest boots from.
#[derive(Debug, Clone)]
pub enum BootFrom {
    /// The test ramdisk by a direct PVH kernel boot, with the test's files appended.
    Ramdisk,
    /// The network: QEMU's iPXE option ROM fetches `boot.ipxe` from this TFTP directory.
    Network(PathBuf),
    /// This ISO as a CD.
    Cdrom(PathBuf),
    /// The firmware's own order (disks first).
    Firmware,
}

/// A QEMU guest to boot.
#[derive(Debug, Clone)]
pub struct Guest {
    args: Vec<String>,
    files: Vec<(String, Vec<u8>, u32)>,
    timeout: Duration,
    append: String,
    disks: usize,
    boot: BootFrom,
    until: Option<String>,
    linger: Duration,
    uefi: bool,
    tpm: Option<PathBuf>,
    aarch64: bool,
}

/// What the guest printed on its serial console.
#[derive(Debug, Clone)]
pub struct Console {
    pub text: String,
    /// The guest powered off by itself or showed the `until` marker (not killed at the timeout).
    pub finished: bool,
    /// It printed nothing for `STALL` after it had started printing, or its kernel reported
    /// a CPU stall (killed then).
    pub stalled: bool,
}

impl Console {
    /// The text between a line `BEGIN <name>` and a line `END <name>`.
    pub fn section(&self, name: &str) -> Option<String> {
        let begin = format!("BEGIN {name}\n");
        let start = self.text.find(&begin)? + begin.len();
        let end = self.text[start..].find(&format!("END {name}"))?;
        Some(self.text[start..start + end].trim_end().to_owned())
    }

    /// The exit status /test.sh ended with.
    pub fn test_exit(&self) -> Option<i32> {
        self.text.lines().find_map(|l| l.trim().strip_prefix("METAL-RAMDISK test-exit ")?.parse().ok())
    }
}

impl Default for Guest {
    fn default() -> Self {
        Self::new()
    }
}

impl Guest {
    /// 512 MiB, 2 CPUs, no network, no disks.
    pub fn new() -> Guest {
        let args = ["-accel", "tcg", "-M", "q35", "-m", "512", "-smp", "2", "-display", "none", "-no-reboot"];
        Guest {
            args: args.map(String::from).to_vec(),
            files: Vec::new(),
            timeout: Duration::from_secs(180),
            append: String::new(),
            disks: 0,
            boot: BootFrom::Ramdisk,
            until: None,
            linger: Duration::ZERO,
            uefi: false,
            tpm: None,
            aarch64: false,
        }
    }

    /// An arm64 machine (QEMU's `virt` board, a `max` CPU under TCG, 512 MiB, 2 CPUs) on
    /// UEFI (AAVMF, its variables a fresh copy of the template each boot), no network, no
    /// disks. Its serial console is a PL011 (`ttyAMA0`); a ramdisk boot takes the arm64
    /// ramdisk ([`ramdisk_aarch64`]); a network boot fetches `grubnetaa64.efi`
    /// ([`tftp_dir_arm64`]).
    pub fn aarch64() -> Guest {
        let args = [
            "-accel",
            "tcg",
            "-M",
            "virt",
            "-cpu",
            "max,pauth-impdef=on",
            "-m",
            "512",
            "-smp",
            "2",
            "-display",
            "none",
            "-no-reboot",
        ];
        Guest { args: args.map(String::from).to_vec(), aarch64: true, uefi: true, ..Guest::new() }
    }

    /// Boots from somewhere other than the test ramdisk's direct kernel boot.
    pub fn boot(mut self, from: BootFrom) -> Guest {
        self.boot = from;
        self
    }

    /// A virtio NIC on QEMU's user network with this MAC (the guest reaches the host as
    /// 10.0.2.2); with `BootFrom::Network` its option ROM network-boots.
    pub fn nic(self, mac: &str) -> Guest {
        self.nic_forwarding(mac, &[])
    }

    /// A NIC as [`Guest::nic`] whose guest TCP ports are reachable on the host: each
    /// `(host port, guest port)` on 127.0.0.1.
    pub fn nic_forwarding(mut self, mac: &str, forwards: &[(u16, u16)]) -> Guest {
        // QEMU's x86 NICs carry iPXE, which runs boot.ipxe; an arm64 firmware's own PXE
        // runs GRUB (what ipxe/dnsmasq.conf gives option 93 = 11), first in the boot order.
        let (bootfile, first) = if self.aarch64 { ("grubnetaa64.efi", ",bootindex=0") } else { ("boot.ipxe", "") };
        let mut options = match &self.boot {
            BootFrom::Network(dir) => format!(",tftp={},bootfile={bootfile}", dir.display()),
            _ => String::new(),
        };
        for (host, guest) in forwards {
            options.push_str(&format!(",hostfwd=tcp:127.0.0.1:{host}-:{guest}"));
        }
        self.args.extend([
            "-netdev".into(),
            format!("user,id=n0{options}"),
            "-device".into(),
            format!("virtio-net-pci,netdev=n0,mac={mac}{first}"),
        ]);
        self
    }

    /// A virtio NIC with this MAC on the tap device `ifname`, which must exist where QEMU
    /// runs (a switch port: [`crate::ovs::Ovs::tap`]); with `BootFrom::Network` or a BMC's
    /// PXE boot its option ROM network-boots from whatever DHCP server is on that network.
    /// The guest computes its own checksums (`csum=off`): the switch's userspace datapath
    /// forwards frames as it reads them, and a checksum left to offload would arrive unset.
    pub fn tap(mut self, mac: &str, ifname: &str) -> Guest {
        self.args.extend([
            "-netdev".into(),
            format!("tap,id=t0,ifname={ifname},script=no,downscript=no"),
            "-device".into(),
            format!("virtio-net-pci,netdev=t0,mac={mac},csum=off,guest_csum=off"),
        ]);
        self
    }

    /// UEFI firmware (OVMF) instead of SeaBIOS.
    /// A ramdisk boot then goes through the kernel's EFI stub (the bzImage).
    pub fn uefi(mut self) -> Guest {
        self.args.extend(["-bios".into(), "/usr/share/ovmf/OVMF.fd".into()]);
        self.uefi = true;
        self
    }

    /// UEFI firmware from a split build: its code read-only and a copy of its variable store
    /// template (written in `dir`) as the machine's NVRAM, as a server's flash holds them.
    pub fn uefi_split(mut self, code: &Path, vars_template: &Path, dir: &Path) -> Guest {
        let vars = dir.join("OVMF_VARS.fd");
        std::fs::copy(vars_template, &vars).unwrap();
        for (file, readonly) in [(code, ",readonly=on"), (vars.as_path(), "")] {
            self.args.extend(["-drive".into(), format!("if=pflash,format=raw{readonly},file={}", file.display())]);
        }
        self.uefi = true;
        self
    }

    /// A TPM 2.0 (swtpm) on the manufactured state in `state` ([`crate::tpm::manufacture`]),
    /// started for each boot.
    pub fn tpm(mut self, state: &Path) -> Guest {
        self.tpm = Some(state.to_owned());
        self
    }

    /// Stops (kills the guest) as soon as the console shows `marker`.
    pub fn until(mut self, marker: &str) -> Guest {
        self.until = Some(marker.to_owned());
        self
    }

    /// Keeps the guest running this long after the `until` marker (so that what it wrote
    /// reaches its disk) before it is killed.
    pub fn linger(mut self, time: Duration) -> Guest {
        self.linger = time;
        self
    }

    /// Extra QEMU arguments.
    pub fn args(mut self, args: &[&str]) -> Guest {
        self.args.extend(args.iter().map(|a| (*a).to_owned()));
        self
    }

    /// Extra kernel command line.
    pub fn append(mut self, text: &str) -> Guest {
        self.append.push(' ');
        self.append.push_str(text);
        self
    }

    /// Attaches `image` (raw). `discard`: `unmap` (discarded blocks read zero) or `ignore`
    /// (the guest's discards succeed and change nothing).
    pub fn disk(mut self, bus: &Bus, image: &Path, discard: &str) -> Guest {
        let id = format!("disk{}", self.disks);
        self.disks += 1;
        let drive = format!("file={},format=raw,if=none,id={id},discard={discard},cache=unsafe", image.display());
        let device = match bus {
            Bus::Nvme { serial } => format!("nvme,serial={serial},drive={id}"),
            Bus::Sata { model, serial } => {
                self.args.extend(["-device".into(), format!("ahci,id=ahci{id}")]);
                format!("ide-hd,drive={id},bus=ahci{id}.0,model={model},serial={serial}")
            }
            Bus::Virtio { serial } => format!("virtio-blk-pci,drive={id},serial={serial}"),
            Bus::Scsi { serial } => {
                self.args.extend(["-device".into(), format!("virtio-scsi-pci,id=scsi{id}")]);
                format!("scsi-hd,drive={id},bus=scsi{id}.0,serial={serial}")
            }
        };
        // An arm64 machine's firmware boots its disks after the network, in attach order.
        let order = if self.aarch64 { format!(",bootindex={}", self.disks) } else { String::new() };
        self.args.extend(["-drive".into(), drive, "-device".into(), device + &order]);
        self
    }

    /// A file in the guest (absolute path) with this mode.
    pub fn file(mut self, path: &str, bytes: &[u8], mode: u32) -> Guest {
        self.files.push((path.to_owned(), bytes.to_vec(), mode));
        self
    }

    /// The script /init runs last (busybox sh).
    pub fn script(self, body: &str) -> Guest {
        self.file("/test.sh", format!("#!/bin/sh\n{body}\n").as_bytes(), 0o755)
    }

    /// Stop waiting after this long.
    pub fn timeout(mut self, timeout: Duration) -> Guest {
        self.timeout = timeout;
        self
    }

    /// The QEMU arguments for a machine someone else starts (a BMC emulator's chassis
    /// program adds `-boot`): the devices, and the serial console to `console`.
    pub fn machine_args(&self, console: &Path) -> Vec<String> {
        let mut args = self.args.clone();
        args.extend(["-serial".into(), format!("file:{}", console.display())]);
        args
    }

    /// [`Guest::machine_args`] with the serial line on ipmi_sim's Serial-over-LAN as well
    /// (for [`crate::emulators::IpmiSim::machine`]): QEMU listens on the SOL port, ipmi_sim
    /// connects to it, and `console` logs everything, across restarts.
    pub fn machine_args_on_sol(&self, console: &Path) -> Vec<String> {
        let mut args = self.args.clone();
        let sol = format!(
            "socket,id=sol,host=127.0.0.1,port={},server=on,wait=off,logfile={},logappend=on",
            crate::emulators::SOL_PORT,
            console.display()
        );
        args.extend(["-chardev".into(), sol, "-serial".into(), "chardev:sol".into()]);
        args
    }

    /// [`Guest::run`], booted once more when the first boot stalled or QEMU aborted on its
    /// own assertion (under TCG on a loaded machine: QEMU's failure, not the guest's).
    pub fn run_again_if_stalled(self) -> Console {
        self.run_again_if_stalled_after(|| {})
    }

    /// [`Guest::run_again_if_stalled`], calling `before_again` before the second boot (to
    /// give back a one-time token the first boot may have spent).
    pub fn run_again_if_stalled_after(self, before_again: impl FnOnce()) -> Console {
        let again = self.clone();
        let console = self.run();
        if !console.stalled {
            return console;
        }
        eprintln!("the guest stalled; booting it again. Its console:\n{}", console.text);
        before_again();
        again.run()
    }

    /// Boots, waits for the guest to power off (or the `until` marker, or the timeout) and
    /// returns its console.
    pub fn run(self) -> Console {
        let dir = tempfile::tempdir().unwrap();
        let console = dir.path().join("console.log");
        let qemu = if self.aarch64 { "qemu-system-aarch64" } else { "qemu-system-x86_64" };
        let mut command = Command::new(qemu);
        command.args(&self.args);
        if self.aarch64 {
            let vars = dir.path().join("AAVMF_VARS.fd");
            std::fs::copy("/usr/share/AAVMF/AAVMF_VARS.fd", &vars)
                .expect("AAVMF (scripts/setup-hil installs qemu-efi-aarch64)");
            for (file, readonly) in
                [(Path::new("/usr/share/AAVMF/AAVMF_CODE.fd"), ",readonly=on"), (vars.as_path(), "")]
            {
                command.arg("-drive").arg(format!("if=pflash,format=raw{readonly},file={}", file.display()));
            }
        }
        match &self.boot {
            BootFrom::Ramdisk => {
                let ramdisk = if self.aarch64 { ramdisk_aarch64() } else { ramdisk() };
                let initrd = dir.path().join("initrd");
                let mut combined = std::fs::read(ramdisk.join("initrd.cpio.gz")).unwrap();
                combined.extend(overlay(dir.path(), &self.files));
                std::fs::write(&initrd, combined).unwrap();
                // vmlinux boots through PVH (fast under TCG); UEFI firmware needs the EFI stub
                // (the bzImage, or arm64's Image). An arm64 serial console is a PL011.
                let (kernel, serial) = match (self.aarch64, self.uefi) {
                    (true, _) => ("vmlinuz", "ttyAMA0"),
                    (false, true) => ("vmlinuz", "ttyS0"),
                    (false, false) => ("vmlinux", "ttyS0"),
                };
                command
                    .arg("-kernel")
                    .arg(ramdisk.join(kernel))
                    .arg("-initrd")
                    .arg(&initrd)
                    .args(["-append", &format!("console={serial} panic=-1 quiet{}", self.append)]);
            }
            // The arm64 NIC is first in the boot order already (`bootindex`).
            BootFrom::Network(_) if self.aarch64 => {}
            BootFrom::Network(_) => {
                command.args(["-boot", "n"]);
            }
            BootFrom::Cdrom(iso) => {
                command.arg("-cdrom").arg(iso).args(["-boot", "d"]);
            }
            BootFrom::Firmware => {}
        }
        let swtpm = self.tpm.as_deref().map(|state| crate::tpm::Swtpm::start(state, dir.path()));
        if let Some(swtpm) = &swtpm {
            command.args(swtpm.qemu_args());
        }
        command
            .arg("-serial")
            .arg(format!("file:{}", console.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut guard =
            Guard(command.spawn().unwrap_or_else(|e| panic!("{qemu} (scripts/setup-hil installs it): {e}")));
        let deadline = Instant::now() + self.timeout;
        let (mut finished, mut stalled) = (false, false);
        let (mut printed, mut last_output) = (0u64, Instant::now());
        while Instant::now() < deadline {
            let size = std::fs::metadata(&console).map_or(0, |m| m.len());
            if size != printed {
                (printed, last_output) = (size, Instant::now());
                if std::fs::read(&console).is_ok_and(|text| reports_a_cpu_stall(&String::from_utf8_lossy(&text))) {
                    eprintln!("the guest's kernel reports a CPU stall (its vCPUs are not being run)");
                    stalled = true;
                    break;
                }
            } else if printed > 0 && last_output.elapsed() > STALL {
                stalled = true;
                break;
            }
            if let Some(marker) = &self.until
                && std::fs::read(&console).is_ok_and(|text| String::from_utf8_lossy(&text).contains(marker.as_str()))
            {
                finished = true;
                std::thread::sleep(self.linger);
                break;
            }
            if let Some(status) = guard.0.try_wait().unwrap() {
                let mut stderr = String::new();
                std::io::Read::read_to_string(guard.0.stderr.as_mut().unwrap(), &mut stderr).unwrap();
                // QEMU's own assertions (seen under TCG on a loaded machine: iotlb_to_section)
                // are QEMU's failure, not the guest's: counted as a stall, booted once more.
                if !status.success() && stderr.contains("Assertion") {
                    eprintln!("QEMU aborted on its own assertion ({status}): {stderr}");
                    stalled = true;
                    break;
                }
                assert!(status.success(), "QEMU failed ({status}): {stderr}");
                finished = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(guard);
        let text = String::from_utf8_lossy(&std::fs::read(&console).unwrap_or_default()).replace('\r', "");
        Console { text, finished, stalled }
    }
}

/// A guest that printed something and then nothing more for this long has stalled (seen
/// rarely under TCG on a loaded machine: the kernel stops mid-probe).
const STALL: Duration = Duration::from_secs(150);

/// The guest's kernel says its CPUs stopped running (RCU's stall detector: seen under TCG on a
/// loaded machine, the timer interrupt never delivered). Such a guest keeps printing the
/// warning every 21 s and never gets further, so silence alone does not catch it.
fn reports_a_cpu_stall(console: &str) -> bool {
    console.contains("rcu: INFO: rcu_") && console.contains("detected stalls on CPUs")
}

/// A gzip'd newc cpio archive holding `files` (the kernel unpacks it over the ramdisk).
fn overlay(dir: &Path, files: &[(String, Vec<u8>, u32)]) -> Vec<u8> {
    use std::os::unix::fs::PermissionsExt as _;
    let stage = dir.join("overlay");
    std::fs::create_dir_all(&stage).unwrap();
    for (path, bytes, mode) in files {
        let target = stage.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(&target, bytes).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(*mode)).unwrap();
    }
    let output = Command::new("sh")
        // Reproducible (fixed times, order and inode numbers): the same files give the same
        // bytes, so the initrd a measured boot extends into PCR 9 is the same boot after boot.
        .args([
            "-c",
            "find . -mindepth 1 -exec touch -h -d @0 {} + && find . -mindepth 1 | LC_ALL=C sort \
             | cpio -o -H newc --quiet --reproducible | gzip -1 -n",
        ])
        .current_dir(&stage)
        .output()
        .expect("cpio and gzip");
    assert!(output.status.success(), "cpio: {}", String::from_utf8_lossy(&output.stderr));
    output.stdout
}

/// One mebibyte.
pub const MIB: usize = 1 << 20;

/// What the deployed disk's boot sector prints on COM1 before it halts.
pub const DISK_MARKER: &str = "METAL-DEPLOYED-DISK-BOOTED";

/// A bootable 8 MiB MBR disk image: a 16-bit boot sector that writes `DISK_MARKER` to the
/// first serial port and halts, and one Linux partition from 1 MiB full of a pattern.
pub fn bootable_image() -> Vec<u8> {
    #[rustfmt::skip]
    let code: [u8; 22] = [
        0xfa,             // cli
        0x31, 0xc0,       // xor ax, ax
        0x8e, 0xd8,       // mov ds, ax
        0xbe, 0x16, 0x7c, // mov si, 0x7c16 (the message, right after this code)
        0xba, 0xf8, 0x03, // mov dx, 0x3f8 (COM1)
        0xac,             // next: lodsb
        0x84, 0xc0,       // test al, al
        0x74, 0x03,       // jz done
        0xee,             // out dx, al
        0xeb, 0xf8,       // jmp next
        0xf4,             // done: hlt
        0xeb, 0xfd,       // jmp done
    ];
    let mut image: Vec<u8> = (0..8 * MIB).map(|i| u8::try_from(i % 253).unwrap()).collect();
    image[..MIB].fill(0);
    image[..code.len()].copy_from_slice(&code);
    let message = format!("{DISK_MARKER}\r\n\0");
    image[code.len()..code.len() + message.len()].copy_from_slice(message.as_bytes());
    crate::images::with_mbr(image)
}

/// A bootable MBR disk image whose OS is the test ramdisk running `script` as its last step
/// (then it powers off): syslinux on a FAT partition at 1 MiB, with the ramdisk's kernel and
/// its initrd plus `/test.sh`. A deployed OS that does something on the machine it boots on.
pub fn disk_os(script: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let ramdisk = ramdisk();
    let initrd = initrd_running(ramdisk, dir.path(), script);
    std::fs::write(
        dir.path().join("syslinux.cfg"),
        "SERIAL 0 115200\nDEFAULT os\nTIMEOUT 1\nLABEL os\n  KERNEL vmlinuz\n  INITRD initrd\n  \
         APPEND console=ttyS0 panic=-1 quiet\n",
    )
    .unwrap();
    let kernel = ramdisk.join("vmlinuz");
    let kib = (std::fs::metadata(&kernel).unwrap().len() + initrd as u64) / 1024 + 8 * 1024;
    let build = format!(
        "set -e; mkfs.vfat -C -n METALOS part.img {kib} >/dev/null; mcopy -i part.img '{}' ::vmlinuz; \
         mcopy -i part.img initrd ::initrd; mcopy -i part.img syslinux.cfg ::syslinux.cfg; syslinux --install part.img",
        kernel.display()
    );
    let output = Command::new("sh").args(["-c", &build]).current_dir(dir.path()).output().unwrap();
    assert!(
        output.status.success(),
        "the disk OS (dosfstools, mtools, syslinux): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut disk = vec![0u8; MIB];
    disk.extend(std::fs::read(dir.path().join("part.img")).unwrap());
    std::fs::write(dir.path().join("disk.img"), &disk).unwrap();
    let output = Command::new("sh")
        .args(["-c", "echo 'start=2048, type=c, bootable' | sfdisk -q disk.img"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "sfdisk: {}", String::from_utf8_lossy(&output.stderr));
    let mut disk = std::fs::read(dir.path().join("disk.img")).unwrap();
    let mbr = std::fs::read("/usr/lib/syslinux/mbr/mbr.bin").expect("syslinux's mbr.bin (syslinux-common)");
    disk[..440].copy_from_slice(&mbr[..440]);
    disk
}

/// Writes `dir/initrd`: the ramdisk in `ramdisk` with `/test.sh` running `script`; its length.
fn initrd_running(ramdisk: &Path, dir: &Path, script: &str) -> usize {
    let mut initrd = std::fs::read(ramdisk.join("initrd.cpio.gz")).unwrap();
    let test = format!("#!/bin/sh\n{script}\n");
    initrd.extend(overlay(dir, &[("/test.sh".into(), test.into_bytes(), 0o755)]));
    std::fs::write(dir.join("initrd"), &initrd).unwrap();
    initrd.len()
}

/// [`disk_os`] for arm64 UEFI machines: a GPT disk image whose EFI system partition holds
/// GRUB's arm64 EFI as the removable-media loader (`EFI/BOOT/BOOTAA64.EFI`, modules from
/// `ipxe/grub-net.sh`'s `grub_modules`), which boots the arm64 ramdisk's kernel and initrd
/// (with `/test.sh` running `script`) from the same partition.
pub fn disk_os_arm64(script: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let ramdisk = ramdisk_aarch64();
    let initrd = initrd_running(ramdisk, dir.path(), script);
    std::fs::write(
        dir.path().join("grub.cfg"),
        "search --no-floppy --file --set=root /metal-os/vmlinuz\n\
         linux /metal-os/vmlinuz console=ttyAMA0 panic=-1 quiet\ninitrd /metal-os/initrd\nboot\n",
    )
    .unwrap();
    let kernel = ramdisk.join("vmlinuz");
    let kib = (std::fs::metadata(&kernel).unwrap().len() + initrd as u64) / 1024 + 4 * 1024;
    let build = format!(
        "set -e; modules=$(bash -c '. {grub_net}; grub_modules arm64'); \
         grub-mkstandalone -O arm64-efi -d \"$modules\" -o BOOTAA64.EFI --locales= --fonts= --themes= \
           --install-modules='normal configfile echo part_gpt fat search search_fs_file linux' \
           --modules='part_gpt fat search_fs_file normal linux' boot/grub/grub.cfg=grub.cfg; \
         mkfs.vfat -C -n METALOS part.img {kib} >/dev/null; mmd -i part.img ::EFI ::EFI/BOOT ::metal-os; \
         mcopy -i part.img BOOTAA64.EFI ::EFI/BOOT/BOOTAA64.EFI; mcopy -i part.img '{kernel}' ::metal-os/vmlinuz; \
         mcopy -i part.img initrd ::metal-os/initrd; \
         truncate -s 1M disk.img; cat part.img >> disk.img; truncate -s +1M disk.img; \
         printf 'label: gpt\nstart=2048, size={sectors}, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=\"ESP\"\n' \
           | sfdisk -q disk.img",
        grub_net = workspace().join("ipxe/grub-net.sh").display(),
        kernel = kernel.display(),
        sectors = kib * 2,
    );
    let output = Command::new("sh").args(["-c", &build]).current_dir(dir.path()).output().unwrap();
    assert!(
        output.status.success(),
        "the arm64 disk OS (grub-common, dosfstools, mtools, fdisk): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::read(dir.path().join("disk.img")).unwrap()
}

/// A disk image of `size` bytes full of a nonzero pattern (so an erase is seen).
pub fn filled(path: &Path, size: usize) {
    let block: Vec<u8> = (0..MIB).map(|i| u8::try_from(i % 251).unwrap() | 1).collect();
    std::fs::write(path, block.repeat(size / MIB)).unwrap();
}

/// A scheduler for deploys on QEMU guests: its boot service reached at 10.0.2.2, serving
/// the test ramdisk with metal-boot as PID 1, and trusting the CA of `mirror`, an image
/// server of its own CA holding [`bootable_image`] as `disk.img`.
pub struct DeploySite {
    /// The scheduler.
    pub scheduler: crate::scheduler::TestScheduler,
    /// The mirror the image is imported from.
    pub mirror: crate::images::Mirror,
    /// The image's bytes.
    pub image: Vec<u8>,
}

impl std::fmt::Debug for DeploySite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeploySite")
            .field("scheduler", &self.scheduler)
            .field("mirror", &self.mirror.server.port)
            .finish()
    }
}

impl DeploySite {
    /// Starts both, with the test's bootable image as the mirror's `disk.img`.
    pub fn start() -> DeploySite {
        DeploySite::serving(bootable_image(), |_| {})
    }

    /// Starts both, with `image` as the mirror's `disk.img`; `configure` adjusts the
    /// scheduler's configuration.
    pub fn serving(image: Vec<u8>, configure: impl FnOnce(&mut metal_types::config::Config)) -> DeploySite {
        DeploySite::serving_on([127, 0, 0, 1].into(), image, configure)
    }

    /// [`DeploySite::serving`], with the scheduler's listeners on `bind` (the configuration
    /// must then name the controller URL when it is unspecified).
    pub fn serving_on(
        bind: std::net::IpAddr,
        image: Vec<u8>,
        configure: impl FnOnce(&mut metal_types::config::Config),
    ) -> DeploySite {
        let mirror = crate::images::Mirror::start([("disk.img".to_owned(), image.clone())].into(), Default::default());
        let ramdisk = ramdisk();
        let ca_file = mirror.ca_file.clone();
        let scheduler = crate::scheduler::TestScheduler::start_on(bind, move |c: &mut metal_types::config::Config| {
            let port = c.boot.listen.unwrap().port();
            c.boot.controller_url = Some(format!("https://10.0.2.2:{port}"));
            c.boot.kernel_args = "console=ttyS0 panic=-1 rdinit=/bin/metal-boot".into();
            c.images.ca_file = Some(ca_file);
            configure(c);
        });
        let files = scheduler.files_dir();
        std::fs::create_dir_all(&files).unwrap();
        std::os::unix::fs::symlink(ramdisk.join("vmlinuz"), files.join("vmlinuz")).unwrap();
        std::os::unix::fs::symlink(ramdisk.join("initrd.cpio.gz"), files.join("initrd")).unwrap();
        std::os::unix::fs::symlink(ramdisk.join("rescue.cpio.gz"), files.join("rescue")).unwrap();
        DeploySite { scheduler, mirror, image }
    }

    /// Imports `disk.img` from the mirror as `name` (verified by its SHA-256) and waits until
    /// it is ready; returns the image id.
    pub fn import(&self, name: &str) -> String {
        self.mirror.import(&self.scheduler, "disk.img", &self.image, name, Duration::from_secs(300))
    }

    /// [`DeploySite::import`] as an arm64 image.
    pub fn import_arm64(&self, name: &str) -> String {
        self.mirror.import_for(&self.scheduler, "disk.img", &self.image, name, Some("arm64"), Duration::from_secs(300))
    }
}
