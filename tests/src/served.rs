//! `metal-scheduler serve` as a child process, the way a user runs it: the API address read
//! from its JSON log, and every line it logs, kept by a thread for the test to search.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A running `metal-scheduler serve`.
#[derive(Debug)]
pub struct Served {
    pub child: Child,
    /// Where its API listens (`127.0.0.1:PORT`).
    pub address: String,
    log: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

/// The `message` field of one JSON log line.
fn message(line: &str) -> Option<String> {
    let entry: serde_json::Value = serde_json::from_str(line).ok()?;
    entry["fields"]["message"].as_str().map(str::to_owned)
}

impl Served {
    /// Spawns `command` (a `serve` invocation; its stderr is taken here) and waits until it
    /// listens.
    pub fn spawn(command: Command) -> Served {
        Self::try_spawn(command)
            .unwrap_or_else(|log| panic!("the service exited before listening:\n{}", log.join("\n")))
    }

    /// Spawns the command `make` builds, again with a fresh one (fresh ports) while the last
    /// exited because a port it was given was taken meanwhile (by a test running beside it).
    pub fn spawn_on_free_ports(make: impl Fn() -> Command) -> Served {
        for _ in 0..5 {
            match Self::try_spawn(make()) {
                Ok(served) => return served,
                Err(log) if log.iter().any(|l| l.contains("Address already in use")) => continue,
                Err(log) => panic!("the service exited before listening:\n{}", log.join("\n")),
            }
        }
        panic!("five tries in a row found a port taken");
    }

    /// [`Self::spawn`], or the log of a process that exited before it listened.
    fn try_spawn(mut command: Command) -> Result<Served, Vec<String>> {
        let mut child = command.stderr(Stdio::piped()).spawn().expect("metal-scheduler serve");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut log = Vec::new();
        let address = loop {
            let Some(line) = lines.next() else {
                let _ = child.wait();
                return Err(log);
            };
            let line = line.unwrap();
            log.push(line.clone());
            if message(&line).as_deref() == Some("metal-scheduler listening") {
                let entry: serde_json::Value = serde_json::from_str(&line).unwrap();
                break entry["fields"]["address"].as_str().unwrap().to_owned();
            }
        };
        let log = Arc::new(Mutex::new(log));
        let sink = log.clone();
        let reader = std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Ok(Served { child, address, log, reader: Some(reader) })
    }

    /// Its API's base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Every line logged so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// The last `n` lines logged, for failure messages.
    pub fn tail(&self, n: usize) -> String {
        let log = self.log.lock().unwrap();
        log[log.len().saturating_sub(n)..].join("\n")
    }

    /// Waits up to `limit` for a line whose message is `wanted`.
    pub fn until_logged(&self, wanted: &str, limit: Duration) {
        let until = Instant::now() + limit;
        while !self.log().iter().any(|l| message(l).as_deref() == Some(wanted)) {
            assert!(Instant::now() < until, "never logged {wanted:?}:\n{}", self.tail(30));
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM (a graceful shutdown).
    pub fn terminate(&self) {
        // SAFETY: kill(2) on our own child's pid with a valid signal number has no memory effects.
        let rc = unsafe { libc::kill(i32::try_from(self.child.id()).unwrap(), libc::SIGTERM) };
        assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
    }

    /// Waits for the process to exit, then for the end of its log.
    pub fn wait(mut self) -> (ExitStatus, Vec<String>) {
        let status = self.child.wait().unwrap();
        self.read_to_end();
        (status, self.log())
    }

    /// The exit status, if the process has exited (its log then read to the end).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        let status = self.child.try_wait().unwrap()?;
        self.read_to_end();
        Some(status)
    }

    /// Waits for the log thread to read the exited process's last lines.
    fn read_to_end(&mut self) {
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A served scheduler with its boot listener, driven as its bootstrap admin.
#[derive(Debug)]
pub struct ServedAdmin {
    /// The process.
    pub served: Served,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// `https://127.0.0.1:PORT`: the boot listener.
    pub boot_url: String,
    /// The bootstrap admin token (from `DATA_DIR/admin.token`).
    pub token: String,
    data_dir: std::path::PathBuf,
    http: reqwest::blocking::Client,
}

impl ServedAdmin {
    /// Starts the `serve` on `data_dir` that `make` builds for a boot listener on the port it
    /// is given (a free one; another if that was taken before the service bound it).
    pub fn start(make: impl Fn(u16) -> Command, data_dir: &std::path::Path) -> ServedAdmin {
        let boot_port = std::cell::Cell::new(0);
        let served = Served::spawn_on_free_ports(|| {
            boot_port.set(crate::emulators::free_tcp_port());
            make(boot_port.get())
        });
        let boot_port = boot_port.get();
        let token = std::fs::read_to_string(data_dir.join("admin.token")).unwrap().trim().to_owned();
        ServedAdmin {
            url: served.url(),
            served,
            boot_url: format!("https://127.0.0.1:{boot_port}"),
            token,
            data_dir: data_dir.to_owned(),
            http: reqwest::blocking::Client::new(),
        }
    }
}

impl crate::scheduler::Admin for ServedAdmin {
    fn call(&self, method: &str, path: &str, body: Option<serde_json::Value>) -> (u16, serde_json::Value) {
        crate::scheduler::api_call(&self.http, &self.url, &self.token, method, path, body)
    }

    fn reporter(&self) -> crate::scheduler::Reporter {
        crate::scheduler::Reporter::of(&self.data_dir, &self.boot_url)
    }

    fn context(&self) -> String {
        self.served.tail(30)
    }
}
