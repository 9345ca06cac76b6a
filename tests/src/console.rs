//! The serial console's clients, as a lessee meets them: the WebSocket (`ws_console`) and
//! OpenSSH's own `ssh` on the console gateway (`Ssh`), with keys made by `ssh-keygen`.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{SinkExt as _, StreamExt as _};
use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest as _};

use crate::scheduler::TestScheduler;

/// A console WebSocket.
pub type Console = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens `node`'s console with `token`: the socket, or the refusal's text.
pub fn open_console(s: &TestScheduler, node: &str, token: &str) -> Result<Console, String> {
    let url = format!("{}/v1/nodes/{node}/console", s.url.replace("http://", "ws://"));
    let mut request = url.into_client_request().unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    s.block_on(tokio_tungstenite::connect_async(request)).map(|(socket, _)| socket).map_err(|e| e.to_string())
}

/// What the console shows within `wait`, typing `typed` every half second until `want` shows.
pub fn read_console(
    s: &TestScheduler,
    socket: &mut Console,
    typed: Option<&str>,
    want: &str,
    wait: Duration,
) -> String {
    s.block_on(async {
        let deadline = Instant::now() + wait;
        let mut seen = Vec::new();
        while !String::from_utf8_lossy(&seen).contains(want) && Instant::now() < deadline {
            if let Some(typed) = typed {
                let _ = socket.send(Message::Text(typed.into())).await;
            }
            while let Ok(Some(Ok(message))) = tokio::time::timeout(Duration::from_millis(500), socket.next()).await {
                seen.extend_from_slice(&message.into_data());
            }
        }
        String::from_utf8_lossy(&seen).into_owned()
    })
}

/// A fresh Ed25519 key pair made by OpenSSH's `ssh-keygen`: the private key's path and the
/// public key's line.
pub fn ssh_key(dir: &Path, name: &str) -> (PathBuf, String) {
    let path = dir.join(name);
    let made = Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"]).arg(&path).status();
    assert!(made.unwrap().success());
    let public = std::fs::read_to_string(path.with_extension("pub")).unwrap();
    (path, public.trim().to_owned())
}

/// OpenSSH's `ssh` on the console gateway, everything it prints collected.
#[derive(Debug)]
pub struct Ssh {
    child: Child,
    printed: Arc<Mutex<Vec<u8>>>,
}

impl Ssh {
    /// Starts `ssh -tt USER@127.0.0.1` on `s`'s gateway with `key`.
    pub fn start(s: &TestScheduler, user: &str, key: &Path) -> Ssh {
        Ssh::start_on(s.ssh_port, user, key)
    }

    /// Starts `ssh -tt USER@127.0.0.1 -p PORT` with `key`.
    pub fn start_on(port: u16, user: &str, key: &Path) -> Ssh {
        let mut child = Command::new("ssh")
            .args([
                "-tt",
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
            ])
            .args(["-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR", "-p", &port.to_string(), "-i"])
            .arg(key)
            .arg(format!("{user}@127.0.0.1"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("OpenSSH's ssh (scripts/setup installs openssh-client)");
        let printed = Arc::new(Mutex::new(Vec::new()));
        for mut stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let printed = printed.clone();
            std::thread::spawn(move || {
                let mut buffer = [0u8; 1024];
                while let Ok(n) = stream.read(&mut buffer) {
                    if n == 0 {
                        break;
                    }
                    printed.lock().unwrap().extend_from_slice(&buffer[..n]);
                }
            });
        }
        Ssh { child, printed }
    }

    /// Everything it printed so far.
    pub fn printed(&self) -> String {
        String::from_utf8_lossy(&self.printed.lock().unwrap()).into_owned()
    }

    /// What it printed once `want` shows (typing `typed` every half second) or `wait` passed.
    pub fn until(&mut self, typed: Option<&str>, want: &str, wait: Duration) -> String {
        let deadline = Instant::now() + wait;
        while !self.printed().contains(want) && Instant::now() < deadline {
            if let Some(typed) = typed {
                let _ = self.child.stdin.as_mut().unwrap().write_all(typed.as_bytes());
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        self.printed()
    }

    /// Whether `ssh` exited within `wait`.
    pub fn exits(&mut self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            if self.child.try_wait().unwrap().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

impl Drop for Ssh {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
