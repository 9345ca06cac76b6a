//! Real BMC emulators for the tests: sushy-tools (Redfish, fake driver, TLS and basic auth)
//! and OpenIPMI's ipmi_sim (IPMI over LAN, with a chassis program that keeps power and boot
//! state in files). Each is started on a free loopback port and killed when dropped.
//! `scripts/setup` installs them (sushy-tools into /opt/metal-venv).

#![allow(dead_code)] // each test binary uses a different part

use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The venv scripts/setup makes for sushy-tools.
pub const VENV: &str = "/opt/metal-venv";

pub fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A child process killed on drop.
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A test CA and a server certificate for 127.0.0.1 it issued.
pub struct Pki {
    pub ca_pem: Vec<u8>,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// SHA-256 of the server certificate, as openssl prints it (colons).
    pub fingerprint: String,
}

pub fn pki(dir: &Path, name: &str) -> Pki {
    let p = |f: &str| dir.join(format!("{name}-{f}"));
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    run(Command::new("openssl")
        .args(["req", "-x509"])
        .args(ec)
        .arg("-keyout")
        .arg(p("ca.key"))
        .arg("-out")
        .arg(p("ca.pem"))
        .args(["-days", "2", "-subj", &format!("/CN={name} test CA")]));
    run(Command::new("openssl")
        .arg("req")
        .args(ec)
        .arg("-keyout")
        .arg(p("srv.key"))
        .arg("-out")
        .arg(p("srv.csr"))
        .args(["-subj", "/CN=127.0.0.1"]));
    std::fs::write(p("ext"), "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n").unwrap();
    run(Command::new("openssl")
        .args(["x509", "-req", "-in"])
        .arg(p("srv.csr"))
        .arg("-CA")
        .arg(p("ca.pem"))
        .arg("-CAkey")
        .arg(p("ca.key"))
        .args(["-CAcreateserial", "-days", "2", "-out"])
        .arg(p("srv.pem"))
        .arg("-extfile")
        .arg(p("ext")));
    let fp = run(Command::new("openssl").args(["x509", "-noout", "-fingerprint", "-sha256", "-in"]).arg(p("srv.pem")));
    Pki {
        ca_pem: std::fs::read(p("ca.pem")).unwrap(),
        cert: p("srv.pem"),
        key: p("srv.key"),
        fingerprint: fp.trim().rsplit('=').next().unwrap().to_owned(),
    }
}

fn wait_for_tcp(port: u16, child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited early: {status}");
        }
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// sushy-emulator with its fake driver, over TLS, with basic auth for `admin`/`password`.
pub struct Sushy {
    pub endpoint: String,
    pub pki: Pki,
    _guard: Guard,
    _dir: tempfile::TempDir,
}

impl Sushy {
    pub fn start() -> Sushy {
        let dir = tempfile::tempdir().unwrap();
        let pki = pki(dir.path(), "sushy");
        let hash = run(Command::new(format!("{VENV}/bin/python3"))
            .args(["-c", "import bcrypt; print(bcrypt.hashpw(b'password', bcrypt.gensalt(4)).decode())"]));
        let auth = dir.path().join("htpasswd");
        std::fs::write(&auth, format!("admin:{}\n", hash.trim())).unwrap();
        let config = dir.path().join("sushy.conf");
        std::fs::write(
            &config,
            format!("SUSHY_EMULATOR_FAKE_DRIVER = True\nSUSHY_EMULATOR_AUTH_FILE = '{}'\n", auth.display()),
        )
        .unwrap();
        let port = free_tcp_port();
        let mut child = Command::new(format!("{VENV}/bin/sushy-emulator"))
            .arg("--config")
            .arg(&config)
            .args(["-i", "127.0.0.1", "-p", &port.to_string(), "--ssl-certificate"])
            .arg(&pki.cert)
            .arg("--ssl-key")
            .arg(&pki.key)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("sushy.log")).unwrap())
            .spawn()
            .expect("sushy-emulator (scripts/setup installs it)");
        wait_for_tcp(port, &mut child, "sushy-emulator");
        Sushy { endpoint: format!("https://127.0.0.1:{port}"), pki, _guard: Guard(child), _dir: dir }
    }
}

/// A static file server (python3 -m http.server) for images the BMC downloads.
pub struct Files {
    pub url: String,
    pub dir: tempfile::TempDir,
    _guard: Guard,
}

impl Files {
    pub fn start() -> Files {
        let dir = tempfile::tempdir().unwrap();
        let port = free_tcp_port();
        let mut child = Command::new("python3")
            .args(["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1", "--directory"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_tcp(port, &mut child, "http.server");
        Files { url: format!("http://127.0.0.1:{port}"), dir, _guard: Guard(child) }
    }
}
