//! A simulated machine's TPM 2.0 (`metal-sim --tpm`): swtpm, the TPM the project's QEMU
//! tests use, with its state manufactured by `swtpm_setup` (an EK and its certificate from
//! swtpm's local CA), and its raw command socket at the machine's `dev/tpmrm0`, where the
//! ramdisk's real TPM client finds it. Each boot starts it afresh (PCRs reset, as at
//! power-on) and the machine's firmware measures what it runs into it and into the event
//! log in the machine's securityfs: nothing on a clean machine; with the
//! `firmware-tampered` fault, a firmware volume the machine's baseline does not have.
//!
//! One swtpm process per powered machine, so only small sites have TPMs (the 1,000-machine
//! scale runs leave them out).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::Digest as _;

/// `EV_EFI_PLATFORM_FIRMWARE_BLOB2`: how UEFI firmware measures its volumes.
const EV_EFI_PLATFORM_FIRMWARE_BLOB2: u32 = 0x8000_000a;

/// What a tampered machine's firmware measures into PCR 0.
pub const IMPLANT: &[u8] = b"firmware volume: DXE driver with a tenant's implant";

/// One machine's TPM.
#[derive(Debug)]
pub struct SimTpm {
    state: PathBuf,
    device: PathBuf,
    control: PathBuf,
    log: PathBuf,
    running: Mutex<Option<Child>>,
}

impl SimTpm {
    /// Manufactures a TPM under `dir` for the machine whose device directory is `dev` and
    /// whose sysfs is `sys` (nothing runs until its first boot).
    pub fn manufacture(dir: &Path, dev: &Path, sys: &Path) -> anyhow::Result<SimTpm> {
        let state = dir.join("tpm-state");
        std::fs::create_dir_all(&state)?;
        let output = Command::new("swtpm_setup")
            .args(["--tpm2", "--tpmstate"])
            .arg(&state)
            .args(["--createek", "--create-ek-cert", "--create-platform-cert", "--lock-nvram"])
            .args(["--pcr-banks", "sha256", "--not-overwrite"])
            .output()
            .map_err(|e| anyhow::anyhow!("swtpm_setup (scripts/setup installs swtpm-tools): {e}"))?;
        anyhow::ensure!(
            output.status.success(),
            "swtpm_setup: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let log = sys.join("kernel/security/tpm0/binary_bios_measurements");
        if let Some(parent) = log.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::create_dir_all(dev)?;
        Ok(SimTpm {
            state,
            device: dev.join("tpmrm0"),
            control: dir.join("tpm-control.sock"),
            log,
            running: Mutex::new(None),
        })
    }

    /// A boot begins: the TPM starts afresh and the firmware measures into it, the implant
    /// too when `tampered`.
    pub fn power_on(&self, tampered: bool) -> anyhow::Result<()> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = running.take() {
            self.stop(old);
        }
        for socket in [&self.device, &self.control] {
            let _ = std::fs::remove_file(socket);
        }
        let child = Command::new("swtpm")
            .args(["socket", "--tpm2", "--tpmstate"])
            .arg(format!("dir={}", self.state.display()))
            .args(["--server", &format!("type=unixio,path={}", self.device.display())])
            .args(["--ctrl", &format!("type=unixio,path={}", self.control.display())])
            .args(["--flags", "not-need-init,startup-clear"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| anyhow::anyhow!("swtpm (scripts/setup installs it): {e}"))?;
        *running = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.device.exists() {
            anyhow::ensure!(Instant::now() < deadline, "swtpm did not open {}", self.device.display());
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut log = metal_protocol::eventlog::empty_sha256_log();
        if tampered {
            let digest: [u8; 32] = sha2::Sha256::digest(IMPLANT).into();
            let socket = std::os::unix::net::UnixStream::connect(&self.device)?;
            metal_boot::tpm::Tpm::new(socket)
                .pcr_extend(0, &digest)
                .map_err(|e| anyhow::anyhow!("measuring into the simulated TPM: {e}"))?;
            metal_protocol::eventlog::append_sha256_event(
                &mut log,
                0,
                EV_EFI_PLATFORM_FIRMWARE_BLOB2,
                &digest,
                IMPLANT,
            );
        }
        std::fs::write(&self.log, log)?;
        Ok(())
    }
}

impl SimTpm {
    /// Stops the running swtpm after an orderly `TPM2_Shutdown(CLEAR)`: a TPM counts every
    /// other stop against its dictionary-attack limit, and a simulated machine is powered off
    /// often enough to lock its TPM out (ActivateCredential then answers 0x921).
    fn stop(&self, mut child: Child) {
        use std::io::{Read as _, Write as _};
        const SHUTDOWN_CLEAR: [u8; 12] = [0x80, 0x01, 0, 0, 0, 12, 0, 0, 0x01, 0x45, 0, 0];
        if let Ok(mut socket) = std::os::unix::net::UnixStream::connect(&self.device) {
            let _ = socket.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = socket.write_all(&SHUTDOWN_CLEAR).and_then(|()| socket.read(&mut [0u8; 10]));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for SimTpm {
    fn drop(&mut self) {
        if let Some(child) = self.running.lock().unwrap_or_else(|p| p.into_inner()).take() {
            self.stop(child);
        }
    }
}
