//! OpenSSH's own `sshd` for tests, on a free loopback port, with a host key made for it and
//! one authorized client key, logging in as the user the tests run as. Dropped, it ends.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::emulators::Guard;

/// One sshd.
#[derive(Debug)]
pub struct Sshd {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its public host key (`ssh-ed25519 AAAA...`).
    pub host_key: String,
    /// The authorized client's private key (OpenSSH format).
    pub client_key: String,
    /// Its directory (keys, log).
    pub dir: tempfile::TempDir,
    _guard: Guard,
}

fn keygen(path: &std::path::Path) {
    let made = Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-f"]).arg(path).status().unwrap();
    assert!(made.success(), "ssh-keygen");
}

impl Sshd {
    /// Starts sshd (scripts/setup installs openssh-server).
    pub fn start() -> Sshd {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| -> PathBuf { dir.path().join(name) };
        keygen(&path("host"));
        keygen(&path("client"));
        std::fs::copy(path("client.pub"), path("authorized_keys")).unwrap();
        std::fs::create_dir_all("/run/sshd").unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = std::fs::File::create(path("sshd.log")).unwrap();
        let child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f", "/dev/null", "-p", &port.to_string(), "-h"])
            .arg(path("host"))
            .args(["-o", "ListenAddress=127.0.0.1", "-o", "PidFile=none", "-o", "StrictModes=no", "-o", "UsePAM=no"])
            .arg("-o")
            .arg(format!("AuthorizedKeysFile={}", path("authorized_keys").display()))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("/usr/sbin/sshd: {e} (scripts/setup installs openssh-server)"));
        let guard = Guard(child);
        let until = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < until,
                "sshd never listened: {}",
                std::fs::read_to_string(path("sshd.log")).unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let host = std::fs::read_to_string(path("host.pub")).unwrap();
        let host_key = host.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
        let client_key = std::fs::read_to_string(path("client")).unwrap();
        Sshd { port, host_key, client_key, dir, _guard: guard }
    }

    /// `USER@127.0.0.1` for the user the tests run as.
    pub fn destination(&self) -> String {
        format!("{}@127.0.0.1", std::env::var("USER").unwrap_or_else(|_| "root".into()))
    }
}
