//! A real Open vSwitch for tests: its own `ovsdb-server` and `ovs-vswitchd` in a temporary
//! directory, with the userspace (`netdev`) datapath, since this kernel has no openvswitch
//! module. `ovs-vswitchd` runs in a network namespace of its own (`unshare --net`), so its
//! ports' tap devices of one test never meet another test's. Dropped, both daemons end.
//!
//! [`Ovs::wire`] cables a host to a port: a network namespace of its own whose `eth0` is one
//! end of a veth pair, the other end the switch's port, so that tests can try to reach one
//! host from another (ping, arping, curl) and capture what crosses (tcpdump).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::emulators::{Guard, run};

/// The bridge every port is on.
pub const BRIDGE: &str = "br-metal";

/// One Open vSwitch.
#[derive(Debug)]
pub struct Ovs {
    /// Its directory (database, sockets, logs).
    pub dir: tempfile::TempDir,
    /// Its OVSDB remote (`unix:PATH`), the `--db` of `ovs-vsctl`.
    pub db: String,
    database: Option<Guard>,
    vswitchd: Guard,
}

fn daemon(dir: &Path, program: &str, args: &[String], wrap: &[&str]) -> Guard {
    let mut command = match wrap.split_first() {
        Some((first, rest)) => {
            let mut command = Command::new(first);
            command.args(rest).arg(program);
            command
        }
        None => Command::new(program),
    };
    let child = command
        .args(args)
        .envs([("OVS_RUNDIR", dir), ("OVS_LOGDIR", dir), ("OVS_DBDIR", dir)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e} (scripts/setup installs openvswitch-switch)"));
    Guard(child)
}

impl Ovs {
    /// Starts the database and the switch daemon and adds the bridge.
    pub fn start() -> Ovs {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_owned();
        let path = |name: &str| root.join(name).display().to_string();
        let schema = "/usr/share/openvswitch/vswitch.ovsschema";
        let created = Command::new("ovsdb-tool").args(["create", &path("conf.db"), schema]).status().unwrap();
        assert!(created.success(), "ovsdb-tool create");
        let database = daemon(
            dir.path(),
            "ovsdb-server",
            &[
                path("conf.db"),
                format!("--remote=punix:{}", path("db.sock")),
                format!("--unixctl={}", path("ovsdb.ctl")),
                format!("--log-file={}", path("ovsdb.log")),
            ],
            &[],
        );
        let db = format!("unix:{}", path("db.sock"));
        let until = Instant::now() + Duration::from_secs(10);
        while !dir.path().join("db.sock").exists() {
            assert!(Instant::now() < until, "ovsdb-server never made its socket");
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut ovs = Ovs { database: Some(database), vswitchd: Guard(Command::new("true").spawn().unwrap()), db, dir };
        ovs.vsctl(&["--no-wait", "init"]);
        ovs.vswitchd = daemon(
            ovs.dir.path(),
            "ovs-vswitchd",
            &[
                ovs.db.clone(),
                format!("--unixctl={}", path("vswitchd.ctl")),
                format!("--log-file={}", path("vswitchd.log")),
            ],
            &["unshare", "--net"],
        );
        ovs.vsctl(&["add-br", BRIDGE, "--", "set", "bridge", BRIDGE, "datapath_type=netdev"]);
        ovs
    }

    /// Runs `ovs-vsctl --db=... ARGS` (waiting for the switch daemon to apply a change);
    /// its output. Panics when it fails.
    pub fn vsctl(&self, args: &[&str]) -> String {
        let output =
            Command::new("ovs-vsctl").arg(format!("--db={}", self.db)).arg("--timeout=10").args(args).output().unwrap();
        assert!(output.status.success(), "ovs-vsctl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    }

    /// Adds a port (an internal one: a tap device in the switch daemon's namespace).
    pub fn add_port(&self, port: &str) {
        self.vsctl(&["add-port", BRIDGE, port, "--", "set", "interface", port, "type=internal"]);
    }

    /// The port's access VLAN as OVS has it (`None`: no tag).
    pub fn tag(&self, port: &str) -> Option<u16> {
        let tag = self.vsctl(&["get", "port", port, "tag"]);
        match tag.trim() {
            "[]" => None,
            number => Some(number.parse().unwrap()),
        }
    }

    /// Stops the database: the switch is then unreachable to `ovs-vsctl`.
    pub fn stop_database(&mut self) {
        self.database = None;
    }

    /// A wrapper of `ovs-vsctl` (written in this switch's directory) that does what it is
    /// asked but reads every port back on VLAN `tag`: a switch that answers another tag.
    pub fn lying_vsctl(&self, tag: u16) -> PathBuf {
        let script = self.dir.path().join("lying-ovs-vsctl");
        let body = format!(
            "#!/bin/sh\ncase \"$*\" in *' get port '*) printf '{tag}\\naccess\\n';; *) exec ovs-vsctl \"$@\";; esac\n"
        );
        std::fs::write(&script, body).unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        script
    }

    /// The switch daemon's process id: `nsenter --net=/proc/PID/ns/net` runs a program in its
    /// network namespace, where the ports' devices are.
    pub fn pid(&self) -> u32 {
        self.vswitchd.0.id()
    }

    /// Runs `program ARGS` in the switch daemon's network namespace; panics when it fails.
    fn in_switch(&self, program: &str, args: &[&str]) -> String {
        run(Command::new("nsenter").arg(format!("--net=/proc/{}/ns/net", self.pid())).arg(program).args(args))
    }

    /// Adds port `port` on access VLAN `vlan`: a persistent tap device in the switch daemon's
    /// namespace, which a QEMU started there takes as its NIC ([`crate::hil::Guest::tap`])
    /// and keeps through power cycles.
    pub fn tap(&self, port: &str, vlan: u16) {
        self.in_switch("ip", &["tuntap", "add", "dev", port, "mode", "tap"]);
        self.in_switch("ip", &["link", "set", port, "up"]);
        self.vsctl(&["add-port", BRIDGE, port, &format!("tag={vlan}"), "vlan_mode=access"]);
    }

    /// Cables this host (the test's own network namespace, where a scheduler listens) to
    /// port `port` on access VLAN `vlan`: a veth pair whose end here is `local` at `address`
    /// (`A.B.C.D/N`). Removed when dropped.
    pub fn wire_local(&self, port: &str, local: &str, address: &str, vlan: u16) -> LocalLink {
        let pid = self.pid().to_string();
        run(Command::new("ip").args(["link", "add", local, "type", "veth", "peer", "name", port, "netns", &pid]));
        let link = LocalLink { name: local.to_owned() };
        self.in_switch("ip", &["link", "set", port, "up"]);
        run(Command::new("ip").args(["addr", "add", address, "dev", local]));
        run(Command::new("ip").args(["link", "set", local, "up"]));
        // Checksums in software, as for a wired host (see `wire`).
        run(Command::new("ethtool").args(["-K", local, "tx", "off"]));
        self.vsctl(&["add-port", BRIDGE, port, &format!("tag={vlan}"), "vlan_mode=access"]);
        link
    }

    /// lldpd in the switch daemon's namespace, announcing `system_name` with each of `ports`
    /// as its port id every second: what a top-of-rack switch tells the machines cabled to
    /// it. Stopped when dropped.
    pub fn lldpd(&self, system_name: &str, ports: &[&str]) -> Guard {
        // lldpd's unprivileged half must reach its control socket: a directory others can enter.
        let socket = self.dir.path().join("lldpd.sock").display().to_string();
        std::fs::set_permissions(self.dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let child = Command::new("nsenter")
            .arg(format!("--net=/proc/{}/ns/net", self.pid()))
            .args(["lldpd", "-d", "-u", &socket, "-I", &ports.join(",")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("lldpd (scripts/setup installs it)");
        let guard = Guard(child);
        let until = Instant::now() + Duration::from_secs(10);
        while !Path::new(&socket).exists() {
            assert!(Instant::now() < until, "lldpd never made its socket");
            std::thread::sleep(Duration::from_millis(50));
        }
        for config in [
            &["configure", "system", "hostname", system_name][..],
            &["configure", "lldp", "portidsubtype", "ifname"],
            &["configure", "lldp", "tx-interval", "1"],
            &["update"],
        ] {
            let mut args = vec!["-u", socket.as_str()];
            args.extend_from_slice(config);
            self.in_switch("lldpcli", &args);
        }
        guard
    }

    /// Cables a new host to port `port` on access VLAN `vlan`: a network namespace whose
    /// `eth0`, at `address` (`A.B.C.D/N`), is a veth pair's end; the other end is the port,
    /// made in the switch daemon's namespace (no name is ever made in this one).
    pub fn wire(&self, port: &str, address: &str, vlan: u16) -> WiredHost {
        static HOSTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = HOSTS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let namespace = format!("metal-host-{}-{n}", std::process::id());
        run(Command::new("ip").args(["netns", "add", &namespace]));
        let mut host =
            WiredHost { namespace, address: address.split('/').next().unwrap().to_owned(), mac: String::new() };
        let switch_side = self.vswitchd.0.id().to_string();
        let ns = host.namespace.as_str();
        run(Command::new("ip").args([
            "-n",
            ns,
            "link",
            "add",
            "eth0",
            "type",
            "veth",
            "peer",
            "name",
            port,
            "netns",
            &switch_side,
        ]));
        run(Command::new("nsenter")
            .arg(format!("--net=/proc/{switch_side}/ns/net"))
            .args(["ip", "link", "set", port, "up"]));
        run(Command::new("ip").args(["-n", ns, "addr", "add", address, "dev", "eth0"]));
        run(Command::new("ip").args(["-n", ns, "link", "set", "eth0", "up"]));
        // A veth leaves TCP and UDP checksums to the receiving NIC; OVS's userspace datapath
        // forwards the frame as it is, and the host at the other end drops it (ping, whose
        // checksum is in software, would still pass). Checksums in software, as on a wire.
        run(Command::new("ip").args(["netns", "exec", ns, "ethtool", "-K", "eth0", "tx", "off"]));
        run(Command::new("ip").args(["-n", ns, "link", "set", "lo", "up"]));
        self.vsctl(&["add-port", BRIDGE, port, &format!("tag={vlan}"), "vlan_mode=access"]);
        let shown = host.exec("cat", &["/sys/class/net/eth0/address"]);
        host.mac = String::from_utf8(shown.stdout).unwrap().trim().to_owned();
        host
    }
}

/// This host's end of a veth pair cabled to a switch port ([`Ovs::wire_local`]).
#[derive(Debug)]
pub struct LocalLink {
    /// The device's name here.
    pub name: String,
}

impl LocalLink {
    /// Captures the frames this end receives from `mac` until [`Capture::frames`].
    pub fn capture_from(&self, mac: &str) -> Capture {
        capture(&["env"], &self.name, mac)
    }
}

impl Drop for LocalLink {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.name]).status();
    }
}

/// A host cabled to a switch port ([`Ovs::wire`]). Dropped, its namespace goes, and its
/// veth pair with it.
#[derive(Debug)]
pub struct WiredHost {
    /// Its network namespace.
    pub namespace: String,
    /// Its address (without the prefix length).
    pub address: String,
    /// Its NIC's MAC.
    pub mac: String,
}

impl WiredHost {
    /// Runs `program ARGS` in the host's namespace; its output.
    pub fn exec(&self, program: &str, args: &[&str]) -> std::process::Output {
        Command::new("ip")
            .args(["netns", "exec", &self.namespace, program])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("ip netns exec {program}: {e}"))
    }

    /// Whether `address` answers one ping within a second.
    pub fn pings(&self, address: &str) -> bool {
        self.exec("ping", &["-c", "1", "-W", "1", "-n", address]).status.success()
    }

    /// Whether `address` answers an ARP request (a broadcast: reaches whatever shares the
    /// VLAN) within a second.
    pub fn arpings(&self, address: &str) -> bool {
        self.exec("arping", &["-c", "1", "-w", "1", "-I", "eth0", address]).status.success()
    }

    /// Whether an HTTP GET of `url` gets an answer within two seconds.
    pub fn fetches(&self, url: &str) -> bool {
        self.exec("curl", &["-sf", "--noproxy", "*", "-o", "/dev/null", "--max-time", "2", url]).status.success()
    }

    /// Serves HTTP on `port` at the host's address until dropped (Python's http.server).
    pub fn serve_http(&self, port: u16) -> Guard {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.namespace, "python3", "-m", "http.server", "--bind", &self.address])
            .arg(port.to_string())
            .current_dir(std::env::temp_dir())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let guard = Guard(child);
        let until = Instant::now() + Duration::from_secs(10);
        while !self.fetches(&format!("http://{}:{port}/", self.address)) {
            assert!(Instant::now() < until, "http.server in {} never answered", self.namespace);
            std::thread::sleep(Duration::from_millis(100));
        }
        guard
    }

    /// Captures the frames `eth0` receives from `mac` until [`Capture::frames`].
    pub fn capture_from(&self, mac: &str) -> Capture {
        capture(&["ip", "netns", "exec", &self.namespace], "eth0", mac)
    }
}

/// Captures the frames `interface` receives from `mac` with tcpdump run through `prefix`
/// (which names where the interface is).
fn capture(prefix: &[&str], interface: &str, mac: &str) -> Capture {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("frames"), dir.path().join("tcpdump.err"));
    let (program, prefix) = prefix.split_first().unwrap();
    let child = Command::new(program)
        .args(prefix)
        .args(["tcpdump", "-i", interface, "-n", "-e", "-l", "-Q", "in", "ether", "src", mac])
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let capture = Capture { tcpdump: Some(Guard(child)), out, _dir: dir };
    let until = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&err).unwrap_or_default().contains("listening on") {
        assert!(Instant::now() < until, "tcpdump never listened: {}", std::fs::read_to_string(&err).unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    capture
}

impl Drop for WiredHost {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.namespace]).status();
    }
}

/// A running tcpdump ([`WiredHost::capture_from`]).
#[derive(Debug)]
pub struct Capture {
    tcpdump: Option<Guard>,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Capture {
    /// Stops the capture; the frames it saw, one line each.
    pub fn frames(mut self) -> Vec<String> {
        // tcpdump writes each frame's line as it sees it (-l); a moment for the last one.
        std::thread::sleep(Duration::from_millis(300));
        self.tcpdump = None;
        std::fs::read_to_string(&self.out).unwrap().lines().map(str::to_owned).collect()
    }
}
