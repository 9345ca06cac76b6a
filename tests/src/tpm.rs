//! Software TPMs for QEMU machines: swtpm's state manufactured like a real TPM's (an EK and
//! its certificate from swtpm's local CA, the SHA-256 bank), and the swtpm process a boot
//! talks to over its socket.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::emulators::Guard;

/// swtpm-tools' local CA: it signs the EK certificates `manufacture` creates, through its
/// intermediate (`issuercert.pem`) under its root.
pub const LOCAL_CA: &str = "/var/lib/swtpm-localca";

/// A PEM bundle of swtpm's local CA (root and intermediate, or the root alone), written in
/// `dir`: what a site configures as its TPM makers' CAs (`boot-tpm-ca-file`).
pub fn local_ca_bundle(dir: &Path, with_intermediate: bool) -> PathBuf {
    // swtpm_setup creates the local CA when it signs its first EK certificate: on a fresh
    // machine, before any TPM was manufactured, there is none yet.
    if !Path::new(LOCAL_CA).join("swtpm-localca-rootca-cert.pem").exists() {
        manufacture(&dir.join("first-tpm"));
    }
    let read = |name: &str| std::fs::read_to_string(Path::new(LOCAL_CA).join(name)).unwrap();
    let mut pem = read("swtpm-localca-rootca-cert.pem");
    if with_intermediate {
        pem += &read("issuercert.pem");
    }
    let file = dir.join(if with_intermediate { "tpm-cas.pem" } else { "tpm-root.pem" });
    std::fs::write(&file, pem).unwrap();
    file
}

/// Manufactures a TPM's state in `dir` (which then holds it for the machine's life: the EK
/// derives from it, so a fresh one is another TPM).
pub fn manufacture(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let output = Command::new("swtpm_setup")
        .args(["--tpm2", "--tpmstate"])
        .arg(dir)
        .args(["--createek", "--create-ek-cert", "--create-platform-cert", "--lock-nvram"])
        .args(["--pcr-banks", "sha256", "--not-overwrite"])
        .output()
        .expect("swtpm_setup (scripts/setup installs swtpm-tools)");
    assert!(
        output.status.success(),
        "swtpm_setup: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    dir.to_owned()
}

/// A running swtpm on the state in `state`, for one QEMU start (it exits when QEMU closes
/// the connection, as a machine's TPM loses its volatile state at power-off).
#[derive(Debug)]
pub struct Swtpm {
    _process: Guard,
    /// The socket QEMU's `-chardev` connects to.
    pub socket: PathBuf,
}

impl Swtpm {
    /// Starts swtpm for a QEMU machine (whose firmware starts the TPM up); its control
    /// socket lives in `run_dir`.
    pub fn start(state: &Path, run_dir: &Path) -> Swtpm {
        Swtpm::spawn(state, run_dir, &["--terminate"])
    }

    /// Starts swtpm with no machine: already started up (PCRs reset), its command channel a
    /// Unix socket ([`Swtpm::connect`]) that takes raw TPM commands as `/dev/tpmrm0` does,
    /// one connection after another, until dropped.
    pub fn start_bare(state: &Path, run_dir: &Path) -> Swtpm {
        let server = format!("type=unixio,path={}", run_dir.join("swtpm-server.sock").display());
        Swtpm::spawn(state, run_dir, &["--server", &server, "--flags", "not-need-init,startup-clear"])
    }

    /// A machine's TPM of its own: a state manufactured in `dir` (made if missing) and a bare
    /// swtpm on it ([`Swtpm::start_bare`]), its sockets in `dir` too.
    pub fn fresh(dir: &Path) -> Swtpm {
        std::fs::create_dir_all(dir).unwrap();
        Swtpm::start_bare(&manufacture(&dir.join("tpm")), dir)
    }

    /// A connection to [`Swtpm::start_bare`]'s command channel.
    pub fn connect(&self) -> std::os::unix::net::UnixStream {
        let server = self.socket.with_file_name("swtpm-server.sock");
        std::os::unix::net::UnixStream::connect(&server).unwrap_or_else(|e| panic!("{}: {e}", server.display()))
    }

    fn spawn(state: &Path, run_dir: &Path, extra: &[&str]) -> Swtpm {
        let socket = run_dir.join("swtpm.sock");
        let _ = std::fs::remove_file(&socket);
        let process = Command::new("swtpm")
            .args(["socket", "--tpm2", "--tpmstate"])
            .arg(format!("dir={}", state.display()))
            .args(["--ctrl", &format!("type=unixio,path={}", socket.display())])
            .args(["--log", &format!("file={},level=1", run_dir.join("swtpm.log").display())])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("swtpm (scripts/setup installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "swtpm did not open {}", socket.display());
            std::thread::sleep(Duration::from_millis(20));
        }
        Swtpm { _process: Guard(process), socket }
    }

    /// QEMU's arguments for a TPM 2.0 on this swtpm (a CRB interface, as recent servers have).
    pub fn qemu_args(&self) -> Vec<String> {
        vec![
            "-chardev".to_owned(),
            format!("socket,id=chrtpm,path={}", self.socket.display()),
            "-tpmdev".to_owned(),
            "emulator,id=tpm0,chardev=chrtpm".to_owned(),
            "-device".to_owned(),
            "tpm-crb,tpmdev=tpm0".to_owned(),
        ]
    }
}

/// An event log with the Spec ID header of a real one (OVMF's) and no events: what a TPM
/// whose boot PCRs are all reset (a bare swtpm) replays to.
pub fn empty_event_log() -> Vec<u8> {
    let ovmf = include_bytes!("../../protocol/testdata/ovmf-2022.11-swtpm.eventlog");
    let size = u32::from_le_bytes(ovmf[28..32].try_into().unwrap()) as usize;
    ovmf[..32 + size].to_vec()
}

/// `EV_EFI_PLATFORM_FIRMWARE_BLOB2`: what UEFI firmware measures its volumes as.
pub const EV_EFI_PLATFORM_FIRMWARE_BLOB2: u32 = 0x8000_000a;

/// Measures `data` as firmware does: extends PCR `pcr` of a bare swtpm ([`Swtpm::start_bare`])
/// with its SHA-256 (`TPM2_PCR_Extend`, platform authorization empty) and appends the event
/// to `log` (a crypto-agile log whose Spec ID header declares SHA-256 alone, as
/// [`empty_event_log`]'s), so the log keeps replaying to the TPM's PCRs.
pub fn measure(swtpm: &Swtpm, log: &mut Vec<u8>, pcr: u32, event_type: u32, data: &[u8]) {
    use sha2::Digest as _;
    let digest: [u8; 32] = sha2::Sha256::digest(data).into();
    metal_boot::tpm::Tpm::new(swtpm.connect()).pcr_extend(pcr, &digest).unwrap();
    metal_protocol::eventlog::append_sha256_event(log, pcr, event_type, &digest, data);
}
