//! Joining machines that already run an OS, from the operator's side (`metalctl host add`,
//! `metalctl host bundle`).
//!
//! `add` enrols the node (`POST /v1/hosts/enrolments`: a single-use token), fetches the join
//! script and `metal-agent` from the boot listener over the pinned site CA, checks both
//! digests here (the script's against the enrolment, the agent's against the script), and
//! sends everything over one SSH session (the operator's key, `BatchMode`) as a shell
//! script on stdin: the token never goes on a command line, here or there. On the machine
//! the digests are checked again before the script runs the agent's join. `bundle` writes
//! the same files into one tarball for machines the operator reaches only by hand.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::client::{Client, ClientError, RequestBody};

/// One machine to join: `USER@HOST[:PORT]`, and the node it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The SSH user (root, or one with passwordless sudo).
    pub user: String,
    /// The host name or address.
    pub host: String,
    /// The SSH port.
    pub port: Option<u16>,
    /// The node id.
    pub node: String,
}

impl Target {
    /// Parses `USER@HOST[:PORT]`; the node is `node`, or the host's first label.
    pub fn parse(text: &str, node: Option<&str>) -> Result<Target, String> {
        let (user, rest) = text.split_once('@').ok_or_else(|| format!("{text:?} is not USER@HOST[:PORT]"))?;
        let (host, port) = match rest.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => {
                (host, Some(port.parse::<u16>().map_err(|_| format!("{text:?}: {port:?} is not a port"))?))
            }
            _ => (rest, None),
        };
        let plain = |s: &str| {
            !s.is_empty()
                && !s.starts_with('-')
                && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'))
        };
        if !plain(user) || !plain(host) {
            return Err(format!("{text:?}: the user and host must be plain names or addresses"));
        }
        let node = node.map_or_else(|| host.split('.').next().unwrap_or(host).to_owned(), str::to_owned);
        metal_protocol::identity::validate_name("node", &node).map_err(|e| format!("{text:?}: {e}"))?;
        Ok(Target { user: user.to_owned(), host: host.to_owned(), port, node })
    }

    /// Reads a file of targets, one per line: `USER@HOST[:PORT] [NODE]`; `#` comments.
    pub fn parse_file(text: &str) -> Result<Vec<Target>, String> {
        text.lines()
            .enumerate()
            .map(|(i, line)| (i, line.split('#').next().unwrap_or_default().trim()))
            .filter(|(_, line)| !line.is_empty())
            .map(|(i, line)| {
                let mut words = line.split_whitespace();
                let target = words.next().unwrap_or_default();
                let node = words.next();
                if words.next().is_some() {
                    return Err(format!("line {}: USER@HOST[:PORT] [NODE], nothing more", i + 1));
                }
                Target::parse(target, node).map_err(|e| format!("line {}: {e}", i + 1))
            })
            .collect()
    }
}

/// How to reach the machines and the boot listener.
#[derive(Debug, Clone, Default)]
pub struct AddOptions {
    /// The SSH private key (default: ssh's own choice).
    pub ssh_key: Option<PathBuf>,
    /// Extra `ssh -o` options.
    pub ssh_options: Vec<String>,
    /// What the host sets up after it joins.
    pub setup: Value,
    /// Where this machine reaches the boot listener (default: the enrolment's controller URL).
    pub boot_url: Option<String>,
}

/// What a host needs to join, fetched and checked here.
#[derive(Debug)]
pub struct JoinFiles {
    /// The enrolment (`POST /v1/hosts/enrolments`'s answer), or the join info without a
    /// token (`GET /v1/hosts/join-info`).
    pub enrolment: Value,
    /// The join script, its digest the enrolment's `installSha256`.
    pub script: Vec<u8>,
    /// `metal-agent`, its digest in the script.
    pub agent: Vec<u8>,
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn field<'a>(value: &'a Value, name: &str) -> Result<&'a str, String> {
    value[name].as_str().ok_or_else(|| format!("the enrolment has no {name}"))
}

/// A digest or URL we put into shell text: only what cannot break out of it.
fn shell_safe(text: &str) -> Result<&str, String> {
    if text.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._:/[]".contains(&b)) {
        Ok(text)
    } else {
        Err(format!("{text:?} has characters a shell would read"))
    }
}

/// Enrols `node` (creating it, state new, when it is not known): the enrolment, with its
/// single-use token.
pub fn enrol(client: &Client, node: &str, setup: &Value, ttl: Option<&str>) -> Result<Value, String> {
    match client.request("GET", &format!("/v1/nodes/{node}"), None) {
        Ok(_) => {}
        Err(ClientError::Api { status: 404, .. }) => {
            client
                .request("POST", "/v1/nodes", Some(RequestBody::Json(json!({"id": node}))))
                .map_err(|e| format!("enrolling node {node}: {e}"))?;
        }
        Err(e) => return Err(format!("node {node}: {e}")),
    }
    let body = json!({"nodeId": node, "setup": setup, "ttl": ttl});
    client
        .request("POST", "/v1/hosts/enrolments", Some(RequestBody::Json(body)))
        .map_err(|e| format!("enrolment of {node}: {e}"))
}

/// Fetches the join script and `metal-agent` from the boot listener `info` names (or
/// `boot_url`), pinned to the site CA it names; checks the script's digest against `info`
/// and the agent's against the script. `info` is an enrolment or the join info.
pub fn fetch(info: Value, boot_url: Option<&str>) -> Result<JoinFiles, String> {
    let pin = metal_bmc::tls::parse_fingerprint(field(&info, "caFingerprint")?).map_err(|e| e.to_string())?;
    let tls =
        metal_bmc::tls::client_config(&metal_bmc::tls::TlsTrust::CaFingerprint(pin)).map_err(|e| e.to_string())?;
    let http = reqwest::blocking::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(std::time::Duration::from_secs(120))
        .build()
        .map_err(|e| e.to_string())?;
    let base = boot_url.map_or_else(|| field(&info, "controllerUrl").map(str::to_owned), |u| Ok(u.to_owned()))?;
    let get = |path: &str| -> Result<Vec<u8>, String> {
        let url = format!("{}{path}", base.trim_end_matches('/'));
        let response =
            http.get(&url).send().map_err(|e| format!("{url}: {}", metal_bmc::http_error::describe(&e).0))?;
        if !response.status().is_success() {
            return Err(format!("{url}: HTTP {}", response.status()));
        }
        response.bytes().map(|b| b.to_vec()).map_err(|e| format!("{url}: {e}"))
    };
    let script = get(metal_protocol::join::HOST_INSTALL_PATH)?;
    if sha256(&script) != field(&info, "installSha256")? {
        return Err("the join script's SHA-256 is not the one the controller names; not using it".into());
    }
    let agent = get(metal_protocol::join::HOST_AGENT_PATH)?;
    if !String::from_utf8_lossy(&script).contains(&sha256(&agent)) {
        return Err("metal-agent's SHA-256 is not the one the join script names; not using it".into());
    }
    Ok(JoinFiles { enrolment: info, script, agent })
}

/// The join files without an enrolment (`GET /v1/hosts/join-info`), for the offline bundle.
pub fn fetch_files(client: &Client, boot_url: Option<&str>) -> Result<JoinFiles, String> {
    let info = client.request("GET", "/v1/hosts/join-info", None).map_err(|e| format!("join info: {e}"))?;
    fetch(info, boot_url)
}

/// The shell script sent to the machine on stdin: writes the join's inputs into
/// `/etc/metal` (the token 0600), checks the script's digest there, then runs it with the
/// agent that came along. Every value is base64 or checked to be shell-safe.
pub fn stage_script(files: &JoinFiles) -> Result<String, String> {
    let b64 = |bytes: &[u8]| {
        let text = base64::engine::general_purpose::STANDARD.encode(bytes);
        text.as_bytes().chunks(76).map(|c| String::from_utf8_lossy(c).into_owned()).collect::<Vec<_>>().join("\n")
    };
    let e = &files.enrolment;
    let url = shell_safe(field(e, "controllerUrl")?)?;
    let install_sha256 = shell_safe(field(e, "installSha256")?)?;
    let ca_sha256 = shell_safe(field(e, "caFingerprint")?)?;
    Ok(format!(
        r#"set -eu
umask 077
d=${{METAL_CONFIG_DIR:-/etc/metal}}
mkdir -p "$d"
chmod 0755 "$d"
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
base64 -d > "$t/metal-agent" <<'METAL_AGENT'
{agent}
METAL_AGENT
base64 -d > "$t/join.sh" <<'METAL_SCRIPT'
{script}
METAL_SCRIPT
base64 -d > "$d/enrolment-token" <<'METAL_TOKEN'
{token}
METAL_TOKEN
base64 -d > "$d/ca.pem" <<'METAL_CA'
{ca}
METAL_CA
umask 022
chmod 0644 "$d/ca.pem"
echo '{url}' > "$d/controller-url"
echo '{ca_sha256}' > "$d/ca.sha256"
echo '{install_sha256}' > "$d/install.sha256"
if ! echo '{install_sha256}  '"$t/join.sh" | sha256sum -c --status; then
  echo "metal-join: the join script's SHA-256 is not {install_sha256}; not running it" >&2
  exit 1
fi
METAL_AGENT_SOURCE="$t/metal-agent" METAL_CONFIG_DIR="$d" sh "$t/join.sh"
"#,
        agent = b64(&files.agent),
        script = b64(&files.script),
        token = b64(field(e, "token")?.as_bytes()),
        ca = b64(field(e, "caPem")?.as_bytes()),
    ))
}

/// The host of `node` when it has joined already (its current identity generation's): its
/// role and generation, as `ROLE, identity generation N`.
fn joined_already(client: &Client, node: &str) -> Result<Option<String>, String> {
    match client.request("GET", &format!("/v1/hosts/{node}"), None) {
        Ok(host) if host["state"] == "joined" => {
            Ok(Some(format!("{}, identity generation {}", field(&host, "role")?, host["identityGeneration"])))
        }
        Ok(_) | Err(ClientError::Api { status: 404, .. }) => Ok(None),
        Err(e) => Err(format!("host {node}: {e}")),
    }
}

/// Joins one machine over SSH; returns what the join printed there. A node whose host has
/// joined already is left as it is, with no enrolment token issued: its agent keeps the
/// identity it has, so a token would only lie about unused.
pub fn add(client: &Client, target: &Target, options: &AddOptions) -> Result<String, String> {
    if let Some(joined) = joined_already(client, &target.node)? {
        return Ok(format!(
            "already joined ({joined}); no enrolment token issued (metalctl host forget {} first to join it anew)",
            target.node
        ));
    }
    let enrolment = enrol(client, &target.node, &options.setup, None)?;
    let files = fetch(enrolment, options.boot_url.as_deref())?;
    let script = stage_script(&files)?;
    let mut ssh = Command::new("ssh");
    ssh.args(["-o", "BatchMode=yes", "-o", "ConnectTimeout=20"]);
    if let Some(key) = &options.ssh_key {
        ssh.arg("-i").arg(key);
    }
    if let Some(port) = target.port {
        ssh.args(["-p", &port.to_string()]);
    }
    for option in &options.ssh_options {
        ssh.args(["-o", option]);
    }
    let remote = if target.user == "root" { "sh -s" } else { "sudo -n sh -s" };
    ssh.arg(format!("{}@{}", target.user, target.host)).arg(remote);
    let mut child = ssh
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("ssh: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("ssh: no stdin")?;
    let writer = std::thread::spawn(move || stdin.write_all(script.as_bytes()));
    let out = child.wait_with_output().map_err(|e| format!("ssh: {e}"))?;
    let _ = writer.join();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() && text.contains("metal-join: joined") {
        Ok(text)
    } else {
        Err(format!("the join on {} failed ({}):\n{}", target.host, out.status, text.trim_end()))
    }
}

/// Joins every target, `parallel` at a time; one that fails is reported and the rest go on.
/// Returns each target's outcome, in the targets' order.
pub fn add_all(
    client: &Client,
    targets: &[Target],
    options: &AddOptions,
    parallel: usize,
) -> Vec<(Target, Result<String, String>)> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..parallel.clamp(1, targets.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(target) = targets.get(i) else { break };
                    let outcome = add(client, target, options);
                    results.lock().unwrap_or_else(|e| e.into_inner()).push((i, target.clone(), outcome));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by_key(|(i, _, _)| *i);
    results.into_iter().map(|(_, target, outcome)| (target, outcome)).collect()
}

/// The offline bundle's `install`: `install --join URL --token-file FILE` (or `--token-file -`
/// for stdin) writes the join's inputs and runs the bundled script with the bundled agent.
const BUNDLE_INSTALL: &str = r#"#!/bin/sh
# metal's offline join: ./install --join URL --token-file FILE   (FILE - reads stdin)
# URL is the controller's boot listener (https://HOST:PORT); the token comes from
# `metalctl host enrol NODE`. The site CA and its pin, the join script and metal-agent are in
# this bundle; the script checks the agent's SHA-256 before running it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
url= token_file=
while [ $# -gt 0 ]; do
  case "$1" in
    --join) url=${2:-}; shift 2 ;;
    --token-file) token_file=${2:-}; shift 2 ;;
    --token) echo "install: the token never goes on a command line; use --token-file FILE (or - for stdin)" >&2; exit 2 ;;
    *) echo "install: unknown argument $1 (use --join URL --token-file FILE)" >&2; exit 2 ;;
  esac
done
case "$url" in https://*) ;; *) echo "install: --join needs the controller's https:// URL" >&2; exit 2 ;; esac
[ -n "$token_file" ] || { echo "install: --token-file FILE (or -) is required" >&2; exit 2; }
d=${METAL_CONFIG_DIR:-/etc/metal}
mkdir -p "$d"
chmod 0755 "$d"
(umask 077; if [ "$token_file" = - ]; then cat; else cat "$token_file"; fi > "$d/enrolment-token")
printf '%s\n' "$url" > "$d/controller-url"
cp "$here/ca.pem" "$d/ca.pem"
cp "$here/ca.sha256" "$d/ca.sha256"
cp "$here/install.sha256" "$d/install.sha256"
pin=$(openssl x509 -in "$d/ca.pem" -outform DER | sha256sum | cut -d' ' -f1)
[ "$pin" = "$(cat "$d/ca.sha256")" ] || { echo "metal-join: the bundle's CA is not its pinned one" >&2; exit 1; }
echo "$(cat "$d/install.sha256")  $here/join.sh" | sha256sum -c --status \
  || { echo "metal-join: the bundle's join script is not the one it pins; not running it" >&2; exit 1; }
METAL_AGENT_SOURCE="$here/metal-agent" METAL_CONFIG_DIR="$d" sh "$here/join.sh"
"#;

/// Writes the offline bundle (`metal-join/` with install, join.sh, metal-agent, ca.pem,
/// ca.sha256, install.sha256) as a gzip'd tarball at `out`, with the files of `files`.
pub fn bundle(files: &JoinFiles, out: &Path) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = dir.path().join("metal-join");
    std::fs::create_dir(&root).map_err(|e| e.to_string())?;
    let e = &files.enrolment;
    let write = |name: &str, bytes: &[u8], mode: u32| -> Result<(), String> {
        use std::os::unix::fs::PermissionsExt as _;
        let path = root.join(name);
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).map_err(|e| e.to_string())
    };
    write("install", BUNDLE_INSTALL.as_bytes(), 0o755)?;
    write("join.sh", &files.script, 0o644)?;
    write("metal-agent", &files.agent, 0o755)?;
    write("ca.pem", field(e, "caPem")?.as_bytes(), 0o644)?;
    write("ca.sha256", format!("{}\n", field(e, "caFingerprint")?).as_bytes(), 0o644)?;
    write("install.sha256", format!("{}\n", field(e, "installSha256")?).as_bytes(), 0o644)?;
    let status = Command::new("tar")
        .arg("-czf")
        .arg(out)
        .arg("-C")
        .arg(dir.path())
        .arg("metal-join")
        .status()
        .map_err(|e| format!("tar: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("tar failed ({status})")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_with_ports_nodes_and_files() {
        let t = Target::parse("ops@web-7.site-a:2222", None).unwrap();
        assert_eq!(
            (t.user.as_str(), t.host.as_str(), t.port, t.node.as_str()),
            ("ops", "web-7.site-a", Some(2222), "web-7")
        );
        assert_eq!(Target::parse("root@10.0.0.7", Some("n7")).unwrap().node, "n7");
        for bad in ["web-7", "ops@-oProxyCommand=x", "ops@host:port", "o ps@host", "ops@h;reboot"] {
            assert!(Target::parse(bad, None).is_err(), "{bad}");
        }
        let file = "# rack 7\nops@a:22 n-a\n\nroot@b\n";
        let targets = Target::parse_file(file).unwrap();
        assert_eq!(targets.iter().map(|t| t.node.as_str()).collect::<Vec<_>>(), ["n-a", "b"]);
        assert!(Target::parse_file("ops@a n1 extra\n").unwrap_err().contains("line 1"));
    }

    #[test]
    fn the_stage_script_carries_the_token_only_as_base64_and_refuses_unsafe_values() {
        let enrolment = json!({"controllerUrl": "https://10.0.0.1:7451", "installSha256": "ab".repeat(32),
                               "caFingerprint": "cd".repeat(32), "token": "tok-secret-0123456789", "caPem": "PEM"});
        let files = JoinFiles { enrolment, script: b"script".to_vec(), agent: b"agent".to_vec() };
        let script = stage_script(&files).unwrap();
        assert!(!script.contains("tok-secret-0123456789"));
        assert!(script.contains(&base64::engine::general_purpose::STANDARD.encode("tok-secret-0123456789")));
        let mut bad = files;
        bad.enrolment["controllerUrl"] = json!("https://x'; reboot; '");
        assert!(stage_script(&bad).unwrap_err().contains("shell"));
    }
}
