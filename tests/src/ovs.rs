//! A real Open vSwitch for tests: its own `ovsdb-server` and `ovs-vswitchd` in a temporary
//! directory, with the userspace (`netdev`) datapath, since this kernel has no openvswitch
//! module. `ovs-vswitchd` runs in a network namespace of its own (`unshare --net`), so its
//! ports' tap devices of one test never meet another test's. Dropped, both daemons end.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::emulators::Guard;

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
    _vswitchd: Guard,
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
        let mut ovs =
            Ovs { database: Some(database), _vswitchd: Guard(Command::new("true").spawn().unwrap()), db, dir };
        ovs.vsctl(&["--no-wait", "init"]);
        ovs._vswitchd = daemon(
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
}
