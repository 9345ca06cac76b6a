//! `ipxe/dnsmasq.conf`: the provisioning network's dnsmasq, run with the repository's
//! configuration in one network namespace, gives each kind of network-booting client the
//! boot file it can run, by the client architecture (DHCP option 93) and user class
//! (option 77) it sends. The clients are busybox's udhcpc in a second namespace, cabled to
//! the first by a veth pair, sending what an arm64 UEFI firmware, an x86-64 UEFI firmware,
//! a BIOS PXE ROM and iPXE send.

use std::process::Command;

use metal_tests::emulators::Dnsmasq;

/// Two network namespaces whose `eth0`s are the ends of one veth pair; deleted on drop.
struct Cable {
    server: String,
    client: String,
}

impl Cable {
    fn new() -> Cable {
        let id = std::process::id();
        let cable = Cable { server: format!("metal-dhcp-s-{id}"), client: format!("metal-dhcp-c-{id}") };
        for ns in [&cable.server, &cable.client] {
            ip(&["netns", "add", ns]);
        }
        ip(&[
            "link",
            "add",
            "eth0",
            "netns",
            &cable.server,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &cable.client,
        ]);
        ip(&["-n", &cable.server, "addr", "add", "10.99.0.1/24", "dev", "eth0"]);
        for ns in [&cable.server, &cable.client] {
            ip(&["-n", ns, "link", "set", "eth0", "up"]);
        }
        cable
    }

    /// The boot file the server offers a client that sends `options` (udhcpc's `-x OPT:HEX`).
    fn boot_file(&self, options: &[&str]) -> String {
        let script = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(script.path(), "#!/bin/sh\n[ \"$1\" = bound ] && echo \"BOOTFILE=$boot_file\"\nexit 0\n")
            .unwrap();
        std::fs::set_permissions(script.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let script = script.into_temp_path();
        let mut udhcpc = Command::new("ip");
        udhcpc.args(["netns", "exec", &self.client, "busybox", "udhcpc", "-i", "eth0", "-f", "-q", "-n"]);
        udhcpc.args(["-t", "5", "-T", "1", "-s"]).arg(&script);
        for option in options {
            udhcpc.args(["-x", option]);
        }
        let out = udhcpc.output().expect("busybox (scripts/setup installs busybox-static)");
        let printed = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        printed
            .lines()
            .find_map(|l| l.strip_prefix("BOOTFILE="))
            .unwrap_or_else(|| panic!("no lease for {options:?}: {printed}"))
            .to_owned()
    }
}

impl Drop for Cable {
    fn drop(&mut self) {
        for ns in [&self.server, &self.client] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn each_client_architecture_gets_the_boot_file_it_can_run() {
    let cable = Cable::new();
    let tftp = tempfile::tempdir().unwrap();
    let dnsmasq = Dnsmasq::start_in(&cable.server, "eth0", "10.99.0.50", "10.99.0.60", tftp.path());
    const ARM64_UEFI: &str = "0x5d:000b";
    const IPXE: &str = "0x4d:69505845";
    for (who, options, file) in [
        ("arm64 UEFI firmware", &[ARM64_UEFI][..], "grubnetaa64.efi"),
        ("x86-64 UEFI firmware", &["0x5d:0007"], "ipxe.efi"),
        ("x86-64 UEFI firmware (EBC id)", &["0x5d:0009"], "ipxe.efi"),
        ("BIOS PXE ROM", &["0x5d:0000"], "undionly.kpxe"),
        ("a client naming no architecture", &[], "undionly.kpxe"),
        ("iPXE (QEMU's option ROM, or the chained ipxe.efi)", &["0x5d:0007", IPXE], "boot.ipxe"),
        ("iPXE on BIOS", &["0x5d:0000", IPXE], "boot.ipxe"),
    ] {
        let got = cable.boot_file(options);
        assert_eq!(got, file, "{who}: {}", std::fs::read_to_string(&dnsmasq.log).unwrap_or_default());
    }
}
