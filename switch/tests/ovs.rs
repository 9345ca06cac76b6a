//! The Open vSwitch driver against a real Open vSwitch (its own ovsdb-server and
//! ovs-vswitchd, userspace datapath), here and over SSH through OpenSSH's sshd: a port moves
//! to an access VLAN and reads back on it; an unknown port is refused; a switch whose
//! database is down, or whose SSH host key is not the pinned one, is unreachable.

use metal_switch::ovs::{OvsSwitch, Transport};
use metal_switch::{PortState, Switch, SwitchError};
use metal_tests::ovs::Ovs;
use metal_tests::sshd::Sshd;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn local(ovs: &Ovs) -> OvsSwitch {
    OvsSwitch::new("tor1", Transport::Local { db: Some(ovs.db.clone()) })
}

#[test]
fn a_port_moves_to_an_access_vlan_and_reads_back_on_it() {
    let ovs = Ovs::start();
    ovs.add_port("n1-p0");
    let switch = local(&ovs);
    let rt = runtime();
    assert_eq!(rt.block_on(switch.port("n1-p0")).unwrap(), PortState { vlan: None, mode: None });
    rt.block_on(switch.set_access_vlan("n1-p0", 100)).unwrap();
    let port = rt.block_on(switch.port("n1-p0")).unwrap();
    assert!(port.is_access(100), "{port:?}");
    assert_eq!(ovs.tag("n1-p0"), Some(100), "OVS itself has the tag");
    assert_eq!(ovs.vsctl(&["get", "port", "n1-p0", "vlan_mode"]).trim(), "access");
    rt.block_on(switch.set_access_vlan("n1-p0", 20)).unwrap();
    assert_eq!(ovs.tag("n1-p0"), Some(20));
}

#[test]
fn an_unknown_port_is_refused_and_a_switch_whose_database_is_down_is_unreachable() {
    let mut ovs = Ovs::start();
    let switch = local(&ovs);
    let rt = runtime();
    match rt.block_on(switch.set_access_vlan("nope", 100)) {
        Err(SwitchError::Refused { switch, message }) => {
            assert_eq!(switch, "tor1");
            assert!(message.contains("no row \"nope\" in table Port"), "{message}");
        }
        other => panic!("an unknown port must be refused: {other:?}"),
    }
    assert!(matches!(rt.block_on(switch.port("bad;port")), Err(SwitchError::Invalid(_))));
    ovs.stop_database();
    match rt.block_on(switch.port("n1-p0")) {
        Err(SwitchError::Unreachable { message, .. }) => {
            assert!(message.contains("database connection failed"), "{message}")
        }
        other => panic!("a switch without its database must be unreachable: {other:?}"),
    }
}

#[test]
fn over_ssh_the_same_commands_run_on_the_switch_with_its_pinned_host_key() {
    let ovs = Ovs::start();
    ovs.add_port("n2-p0");
    let sshd = Sshd::start();
    // On "the switch", ovs-vsctl talks to this test's database.
    let wrapper = sshd.dir.path().join("ovs-vsctl");
    std::fs::write(&wrapper, format!("#!/bin/sh\nexec ovs-vsctl --db={} \"$@\"\n", ovs.db)).unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let over_ssh = |host_key: &str| {
        let transport = Transport::Ssh {
            destination: sshd.destination(),
            port: sshd.port,
            key: zeroize::Zeroizing::new(sshd.client_key.clone()),
            host_key: host_key.to_owned(),
        };
        OvsSwitch::new("tor2", transport).with_program(&wrapper)
    };
    let rt = runtime();
    let switch = over_ssh(&sshd.host_key);
    rt.block_on(switch.set_access_vlan("n2-p0", 300)).unwrap();
    assert!(rt.block_on(switch.port("n2-p0")).unwrap().is_access(300));
    assert_eq!(ovs.tag("n2-p0"), Some(300));
    // Another host key: the connection is refused before any command runs.
    let other = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";
    match rt.block_on(over_ssh(other).set_access_vlan("n2-p0", 301)) {
        Err(SwitchError::Unreachable { message, .. }) => {
            assert!(message.contains("Host key verification failed"), "{message}")
        }
        other => panic!("a switch with another host key must be unreachable: {other:?}"),
    }
    assert_eq!(ovs.tag("n2-p0"), Some(300), "nothing ran");
}
