//! The README's walkthrough, run as written: the commands of the block marked
//! `<!-- walkthrough: ... -->` are read out of README.md and typed, one by one, into one
//! shell against a fresh `metal-scheduler serve` and a Redfish BMC (sushy-tools), so the
//! README cannot drift from what works. Only what a reader must put in for their own site
//! is replaced (addresses, the data directory, the BMC's user and password file), each
//! replacement must still be found in the README, and the fingerprint placeholder gets
//! what the command before it printed, as a reader would paste it.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};

use metal_tests::emulators::{SUSHY_PASSWORD, Sushy};
use metal_tests::served::Served;

const MARKER: &str = "<!-- walkthrough:";
const PASTE: &str = "<the SHA-256 fingerprint printed above>";

/// The logical command lines (continuations joined, comments dropped) of the indented
/// block after the walkthrough marker.
fn walkthrough(readme: &str) -> Vec<String> {
    let start = readme.find(MARKER).expect("README.md has a walkthrough marker");
    let mut commands = Vec::new();
    let mut pending = String::new();
    let mut lines = readme[start..].lines().skip(1).skip_while(|l| l.trim().is_empty());
    for line in lines.by_ref().take_while(|l| l.starts_with("    ") || l.trim().is_empty()) {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && pending.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => pending.push_str(head),
            None => {
                pending.push_str(line);
                commands.push(std::mem::take(&mut pending));
            }
        }
    }
    commands
}

/// One bash reading commands from a pipe, as a person types them: the environment carries
/// from one command to the next.
struct Shell {
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    _child: metal_tests::emulators::Guard,
}

impl Shell {
    fn start(home: &Path) -> Shell {
        let mut child = Command::new("bash")
            .args(["--noprofile", "--norc"])
            .env_clear()
            .env("HOME", home)
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .current_dir(home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut shell = Shell {
            stdin: child.stdin.take().unwrap(),
            stdout: BufReader::new(child.stdout.take().unwrap()),
            _child: metal_tests::emulators::Guard(child),
        };
        writeln!(shell.stdin, "exec 2>&1").unwrap();
        shell
    }

    /// Runs one command line: its exit status and everything it printed.
    fn run(&mut self, command: &str) -> (i32, String) {
        writeln!(self.stdin, "{command}\nprintf '\\n__done__ %s\\n' \"$?\"").unwrap();
        let mut output = String::new();
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "the shell exited during {command}:\n{output}");
            if let Some(rc) = line.strip_prefix("__done__ ") {
                return (rc.trim().parse().unwrap(), output.trim_end().to_owned());
            }
            output.push_str(&line);
        }
    }
}

#[test]
fn the_readme_walkthrough_runs_as_written() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).unwrap();
    let commands = walkthrough(&readme);
    assert!(commands.len() >= 6, "{commands:#?}");

    let sushy = Sushy::start();
    let data = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_metal-scheduler"));
    command.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"]).arg(data.path());
    let served = Served::spawn(command);
    let password_file = home.path().join("bmc-n1.pass");
    std::fs::write(&password_file, SUSHY_PASSWORD).unwrap();
    let bin = metal_tests::bins::metalctl().parent().unwrap();
    let bmc_address = sushy.endpoint.trim_start_matches("https://").to_owned();

    // What a reader puts in for their own site.
    let site = [
        ("$PWD/target/release", bin.display().to_string()),
        ("127.0.0.1:7450", served.address.clone()),
        ("/var/lib/metal/", format!("{}/", data.path().display())),
        ("10.0.0.5:443", bmc_address.clone()),
        ("https://10.0.0.5", sushy.endpoint.clone()),
        ("--username root", "--username admin".to_owned()),
        ("/root/bmc-n1.pass", password_file.display().to_string()),
    ];
    for (placeholder, _) in &site {
        assert!(commands.iter().any(|c| c.contains(placeholder)), "the walkthrough no longer has {placeholder}");
    }
    assert!(commands.iter().any(|c| c.contains(PASTE)), "the walkthrough no longer asks for the fingerprint");

    let mut shell = Shell::start(home.path());
    let mut printed = String::new();
    let mut transcript = String::new();
    for command in &commands {
        let mut line = command.clone();
        for (placeholder, value) in &site {
            line = line.replace(placeholder, value);
        }
        // The reader pastes the fingerprint the line before printed (`sha256 Fingerprint=AB:...`).
        let fingerprint = printed.rsplit_once('=').map(|(_, hex)| hex.trim().to_owned()).unwrap_or_default();
        line = line.replace(PASTE, &fingerprint);
        let (rc, output) = shell.run(&line);
        transcript.push_str(&format!("$ {line}\n{output}\n"));
        assert_eq!(rc, 0, "a walkthrough command failed:\n{transcript}\nservice log:\n{}", served.tail(20));
        printed = output;
    }
    assert!(transcript.contains(&sushy.pki.fingerprint), "the fingerprint line printed the BMC's:\n{transcript}");
    let listed = transcript.lines().skip_while(|l| !l.ends_with("metalctl node list")).nth(2).unwrap_or_default();
    assert!(listed.starts_with("n1 ") && listed.contains("gpu=8"), "node list shows the enrolled node:\n{transcript}");
    assert!(!transcript.contains(SUSHY_PASSWORD), "the BMC password was printed:\n{transcript}");
}
