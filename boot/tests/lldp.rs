//! LLDP neighbours as commissioning reads them, from a real lldpd (Debian's) in a network
//! namespace of its own, across a veth pair: the "switch" end announces its system name and
//! its interface as the port id; metal-boot's listener on the host end (a raw packet socket
//! that joins the LLDP group) hears it and names both.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The namespace, the veth pair and lldpd, removed when dropped.
struct Link {
    namespace: String,
    host: String,
    lldpd: Child,
    _dir: tempfile::TempDir,
}

fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().unwrap();
    assert!(status.success(), "ip {args:?}");
}

impl Link {
    fn up() -> Link {
        let id = std::process::id() % 100_000;
        let (namespace, host, switch) = (format!("metal-lldp-{id}"), format!("ml{id}h"), format!("ml{id}s"));
        ip(&["netns", "add", &namespace]);
        ip(&["link", "add", &host, "type", "veth", "peer", "name", &switch]);
        ip(&["link", "set", &switch, "netns", &namespace]);
        ip(&["link", "set", &host, "up"]);
        ip(&["netns", "exec", &namespace, "ip", "link", "set", &switch, "up"]);
        // lldpd's unprivileged half must reach its control socket: a directory others can enter.
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let socket = dir.path().join("lldpd.sock").display().to_string();
        let lldpd = Command::new("ip")
            .args(["netns", "exec", &namespace, "lldpd", "-d", "-u", &socket, "-I", &switch])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("lldpd (scripts/setup installs it)");
        let link = Link { namespace, host, lldpd, _dir: dir };
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while !std::path::Path::new(&socket).exists() {
            assert!(std::time::Instant::now() < until, "lldpd never made its socket");
            std::thread::sleep(Duration::from_millis(50));
        }
        for config in [
            &["configure", "system", "hostname", "tor1"][..],
            &["configure", "lldp", "portidsubtype", "ifname"],
            &["configure", "lldp", "tx-interval", "1"],
            &["update"],
        ] {
            let status = Command::new("ip")
                .args(["netns", "exec", &link.namespace, "lldpcli", "-u", &socket])
                .args(config)
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success(), "lldpcli {config:?}");
        }
        link
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        // lldpd's monitor and its unprivileged child both live in the namespace (their
        // titles name no socket): every process in it goes.
        if let Ok(pids) = Command::new("ip").args(["netns", "pids", &self.namespace]).output() {
            for pid in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        }
        let _ = self.lldpd.kill();
        let _ = self.lldpd.wait();
        let _ = Command::new("ip").args(["netns", "del", &self.namespace]).status();
        let _ = Command::new("ip").args(["link", "del", &self.host]).status();
    }
}

#[test]
fn a_nic_hears_its_switch_announce_its_name_and_port() {
    let link = Link::up();
    // What lldpd sent before it was configured is gone: the next announcement is a second away.
    std::thread::sleep(Duration::from_secs(2));
    let found = metal_boot::lldp::neighbours(std::slice::from_ref(&link.host), Duration::from_secs(15));
    let neighbour = found.get(&link.host).unwrap_or_else(|| panic!("no LLDPDU heard on {}", link.host));
    assert_eq!(neighbour.system_name.as_deref(), Some("tor1"), "{neighbour:?}");
    let switch_port = format!("ml{}s", std::process::id() % 100_000);
    assert_eq!(
        (neighbour.port_name(), neighbour.port_id_subtype.as_str()),
        (Some(switch_port.as_str()), "interface-name")
    );
    assert_eq!(neighbour.chassis_id.len(), 17, "a MAC: {neighbour:?}");
    // A NIC with no switch behind it hears nothing, and says so by having no neighbour.
    assert!(metal_boot::lldp::neighbours(&["lo".into()], Duration::from_millis(600)).is_empty());
}
