//! Tenant isolation on a real Open vSwitch with real machines: two QEMU machines behind
//! ipmi_sim, each NIC a tap port of the switch (userspace datapath), and the controller
//! cabled to the provisioning VLAN (dnsmasq for DHCP and TFTP, the scheduler's API and boot
//! service). lldpd on the switch announces each port, so commissioning learns the ports.
//! One machine is leased in a pool that isolates its tenants: its deploy runs on the
//! provisioning VLAN, its ports move to the lease's tenant VLAN, and the OS it was deployed
//! (the test ramdisk on the disk, running probes from the machine's own NIC) reaches its
//! tenant network but not the boot service, the API or another host on provisioning (ping,
//! arping, wget, nc), and no frame of it reaches them (tcpdump), while the other machine
//! commissions through the same switch. The teardown erases it on the cleaning VLAN, moves it
//! back to provisioning, and it commissions again.

use std::time::{Duration, Instant};

use metal_tests::emulators::{Dnsmasq, IpmiSim};
use metal_tests::hil::{Bus, DeploySite, Guest, MIB, disk_os, filled, tftp_dir};
use metal_tests::ovs::Ovs;
use metal_tests::scheduler::{Admin as _, TestScheduler};
use serde_json::{Value, json};

/// The controller's address on the provisioning VLAN.
const CONTROLLER: &str = "10.77.0.1";
/// A host on the provisioning VLAN standing for every other machine there (captures).
const PROVISIONING_HOST: &str = "10.77.0.12";
/// A host on the lease's tenant VLAN (100, the first of the pool's range): the lessee's own
/// network, which serves the probes their targets and a rescue its address.
const TENANT_HOST: &str = "10.77.0.70";
/// The one address the tenant network's DHCP server hands out: the rescue's.
const RESCUE: &str = "10.77.0.80";

/// What the lessee's OS runs from its machine's NIC, on a static address: fetch the
/// targets (the API's and the boot service's ports) from the tenant network, then try each
/// thing on provisioning. HTTP goes through busybox's nc (its static wget crashes). Every
/// result line starts with PROBE.
fn probes(targets_path: &str) -> String {
    format!(
        r#"try() {{ what=$1; shift; if "$@" >/dev/null 2>&1 </dev/null; then echo "PROBE $what reached"; else echo "PROBE $what blocked"; fi; }}
http_get() {{ printf 'GET %s HTTP/1.0\r\n\r\n' "$3" | nc -w 3 "$1" "$2"; }}
http_ok() {{ http_get "$@" | head -1 | grep -q " 200 "; }}
mkdir -p /mnt/os
if mount -t vfat /dev/vda1 /mnt/os; then
  if [ -f /mnt/os/tenant-file ]; then echo "PROBE tenant file: $(cat /mnt/os/tenant-file)"
  else echo "written by the lessee" > /mnt/os/tenant-file && echo "PROBE tenant file written"; fi
  [ -f /mnt/os/rescued ] && echo "PROBE the rescue wrote: $(cat /mnt/os/rescued)"
  umount /mnt/os
else echo "PROBE the OS disk does not mount"; fi
ip link set eth0 up
ip addr add 10.77.0.60/24 dev eth0
sleep 1
try tenant-network http_ok {TENANT_HOST} 8080 {targets_path}
set -- $(http_get {TENANT_HOST} 8080 {targets_path} | sed '1,/^\r*$/d')
echo "PROBE targets: api $1, boot service $2"
try controller-ping ping -c 2 -W 1 {CONTROLLER}
try controller-arp arping -c 2 -w 2 -I eth0 {CONTROLLER}
try api http_ok {CONTROLLER} $1 /healthz
try boot-service nc -w 3 {CONTROLLER} $2
try provisioning-host-ping ping -c 2 -W 1 {PROVISIONING_HOST}
try provisioning-host-arp arping -c 2 -w 2 -I eth0 {PROVISIONING_HOST}
echo PROBE done"#
    )
}

fn ok(s: &TestScheduler, method: &str, path: &str, body: Value) -> Value {
    let (status, answer) = s.call(method, path, Some(body));
    assert!((200..300).contains(&status), "{method} {path}: {status} {answer}");
    answer
}

/// One machine: its BMC (QEMU in the switch's namespace on tap `port`), disk and console.
struct Machine {
    id: &'static str,
    mac: &'static str,
    port: &'static str,
    bmc: IpmiSim,
    console: std::path::PathBuf,
}

impl Machine {
    fn new(ovs: &Ovs, dir: &std::path::Path, id: &'static str, mac: &'static str, port: &'static str) -> Machine {
        let (disk, console) = (dir.join(format!("{id}.img")), dir.join(format!("{id}.log")));
        filled(&disk, 64 * MIB);
        ovs.tap(port, 10);
        let args = Guest::new()
            .tap(mac, port)
            .disk(&Bus::Virtio { serial: format!("ISO-{id}") }, &disk, "unmap")
            .args(&["-m", "1024"])
            .args(&["-device", "ipmi-bmc-sim,id=bmc0,fwrev1=9,fwrev2=0x08", "-device", "isa-ipmi-kcs,bmc=bmc0"])
            .machine_args(&console);
        Machine { id, mac, port, bmc: IpmiSim::machine_in(ovs.pid(), &args), console }
    }

    fn console(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.console).unwrap_or_default()).replace('\r', "")
    }

    /// Enrols it with its BMC, network-boots it and drives it through commissioning.
    fn commission(&self, s: &TestScheduler) {
        let (status, _) = s.call("GET", &format!("/v1/nodes/{}", self.id), None);
        if status == 404 {
            ok(
                s,
                "POST",
                "/v1/nodes",
                json!({"id": self.id, "bootMac": self.mac,
                                             "devices": [{"id": "gpu0", "class": "gpu", "healthy": true}]}),
            );
            let bmc = json!({"protocol": "ipmi", "address": format!("127.0.0.1:{}", self.bmc.port),
                             "username": "admin", "password": "password"});
            ok(s, "PUT", &format!("/v1/nodes/{}/bmc", self.id), bmc);
        }
        ok(s, "POST", &format!("/v1/nodes/{}/boot", self.id), json!({"target": "pxe"}));
        ok(s, "POST", &format!("/v1/nodes/{}/power", self.id), json!({"action": "cycle"}));
    }
}

/// Runs both sides' passes, the service's clock following the real one, calling `each`
/// every round, until `done` holds (or `timeout`, when it fails with what `machine` shows:
/// its node, teardowns and boots, and its console; and dnsmasq's log).
fn drive(
    s: &TestScheduler,
    dhcp: &Dnsmasq,
    machine: &Machine,
    what: &str,
    timeout: Duration,
    mut each: impl FnMut(),
    done: impl Fn() -> bool,
) {
    let deadline = Instant::now() + timeout;
    loop {
        s.passes_on_real_time();
        each();
        if done() {
            return;
        }
        if Instant::now() >= deadline {
            let id = machine.id;
            let (_, runs) = s.call("GET", &format!("/v1/nodes/{id}/teardowns"), None);
            let (_, boots) = s.call("GET", &format!("/v1/nodes/{id}/boots"), None);
            panic!(
                "{what}: not done in {timeout:?}\nnode: {}\nruns: {runs}\nboots: {boots}\nconsole:\n{}\ndnsmasq:\n{}",
                s.node(id),
                machine.console(),
                std::fs::read_to_string(&dhcp.log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn state(s: &TestScheduler, id: &str) -> String {
    s.node(id)["state"].as_str().unwrap_or_default().to_owned()
}

/// Whether the node's commissioning is over (a new node is commissioning from its first
/// network boot on).
fn commissioned(s: &TestScheduler, id: &str) -> bool {
    !["new", "commissioning"].contains(&state(s, id).as_str())
}

#[test]
fn a_leased_machine_on_open_vswitch_reaches_nothing_of_provisioning_while_the_other_commissions() {
    let dir = tempfile::tempdir().unwrap();
    let ovs = Ovs::start();
    let link = ovs.wire_local("ctl-p0", &format!("mctl{}", std::process::id() % 100_000), "10.77.0.1/24", 10);
    let provisioning_host = ovs.wire("prov-p0", &format!("{PROVISIONING_HOST}/24"), 10);
    let tenant_host = ovs.wire("tnt-p0", &format!("{TENANT_HOST}/24"), 100);
    let served = tempfile::tempdir().unwrap();
    let _http = tenant_host.serve_http(8080);
    let targets = served.path().join("targets");
    let targets_path = format!("/{}/targets", served.path().file_name().unwrap().to_str().unwrap());
    let site = DeploySite::serving_on([0, 0, 0, 0].into(), disk_os(&probes(&targets_path)), |c| {
        let port = c.boot.listen.unwrap().port();
        c.boot.controller_url = Some(format!("https://{CONTROLLER}:{port}"));
        c.boot.lldp_wait = Duration::from_secs(5);
        // PXE firmware speaks plain HTTP, on the test's own switch.
        c.tls.allow_plain_http = true;
    });
    let s = &site.scheduler;
    std::fs::write(&targets, format!("{} {}\n", s.port, s.boot_port)).unwrap();
    let tftp = tftp_dir(dir.path(), &format!("http://{CONTROLLER}:{}", s.port));
    let dhcp = Dnsmasq::start(&link.name, "10.77.0.100", "10.77.0.150", &tftp);
    let a = Machine::new(&ovs, dir.path(), "iso-a", "52:54:00:00:0b:01", "tapa");
    let b = Machine::new(&ovs, dir.path(), "iso-b", "52:54:00:00:0b:02", "tapb");
    let _lldpd = ovs.lldpd("tor1", &[a.port, b.port]);
    let log = || format!("dnsmasq:\n{}", std::fs::read_to_string(&dhcp.log).unwrap_or_default());
    ok(s, "POST", "/v1/switches", json!({"id": "tor1", "driver": "ovs", "address": format!("ovsdb:{}", ovs.db)}));

    // Commissioning through the switch: PXE from dnsmasq, the scheduler's script and ramdisk;
    // the ramdisk hears lldpd on its NIC, so the node learns its port.
    a.commission(s);
    drive(s, &dhcp, &a, "a's commissioning", Duration::from_secs(480), || {}, || commissioned(s, a.id));
    assert_eq!(state(s, a.id), "ready", "{}\n{}", a.console(), log());
    let ports = ok(s, "GET", &format!("/v1/nodes/{}/ports", a.id), Value::Null);
    assert_eq!(
        (ports[0]["switchId"].as_str(), ports[0]["port"].as_str(), ports[0]["source"].as_str()),
        (Some("tor1"), Some(a.port), Some("lldp")),
        "{ports}\nthe ramdisk's console (its LLDP line):\n{}",
        a.console()
    );

    // A pool that isolates its tenants (cleaning on the provisioning VLAN: the controller is
    // on that one), the lessee, the probe OS as its image.
    ok(
        s,
        "POST",
        "/v1/pools",
        json!({"id": "p1", "tenantId": "root", "siteId": "site-a", "class": "metal-dedicated",
               "policy": {"tenantRoot": true, "firmwareBaseline": {"bmc": "9.08"},
                          "network": {"provisioningVlan": 10, "cleaningVlan": 10, "tenantVlans": {"first": 100, "last": 101}}}}),
    );
    ok(s, "PATCH", &format!("/v1/nodes/{}", a.id), json!({"poolId": "p1"}));
    ok(s, "POST", "/v1/tenants", json!({"id": "acme"}));
    ok(s, "POST", "/v1/pools/p1/offers", json!({"tenantId": "acme"}));
    let image = site.import("probe-os");
    ok(s, "POST", &format!("/v1/images/{image}/promote"), Value::Null);
    let (lessee_key, lessee_public) = metal_tests::console::ssh_key(dir.path(), "lessee");
    ok(
        s,
        "POST",
        "/v1/profiles",
        json!({"id": "probes", "tenantId": "acme", "image": image, "adminUser": "ops", "role": "lessee",
               "sshAuthorizedKeys": [lessee_public]}),
    );
    let reservation = ok(
        s,
        "POST",
        "/v1/reservations",
        json!({"tenantId": "acme", "poolId": "p1", "devices": [{"class": "gpu", "count": 1}], "duration": "1d",
               "binding": "node", "node": {"profileId": "probes", "profileVersion": 1}}),
    )["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // The deploy, then the ports move, then the OS boots and probes. Captures start as soon
    // as the port is on the tenant VLAN, before the OS can send anything; the other machine
    // commissions meanwhile.
    let mut captures = None;
    drive(
        s,
        &dhcp,
        &a,
        "the lease and the lessee's probes",
        Duration::from_secs(600),
        || {
            if captures.is_none() && ovs.tag(a.port) == Some(100) {
                captures = Some([link.capture_from(a.mac), provisioning_host.capture_from(a.mac)]);
                b.commission(s);
            }
        },
        || a.console().contains("PROBE done"),
    );
    let text = a.console();
    let reached = |what: &str| text.contains(&format!("PROBE {what} reached"));
    assert!(reached("tenant-network"), "the lessee's OS reaches its own network:\n{text}");
    let ports = format!("PROBE targets: api {}, boot service {}", s.port, s.boot_port);
    assert!(text.contains(&ports), "and gets its targets there:\n{text}");
    for what in
        ["controller-ping", "controller-arp", "api", "boot-service", "provisioning-host-ping", "provisioning-host-arp"]
    {
        assert!(text.contains(&format!("PROBE {what} blocked")), "{what}:\n{text}");
    }
    for capture in captures.unwrap() {
        let frames = capture.frames();
        assert!(frames.is_empty(), "frames from the lessee crossed: {frames:?}");
    }
    let (_, r) = s.call("GET", &format!("/v1/reservations/{reservation}"), None);
    assert_eq!(r["state"], "active", "{r}");
    drive(s, &dhcp, &b, "b's commissioning", Duration::from_secs(480), || {}, || commissioned(s, b.id));
    assert_eq!(state(s, b.id), "ready", "{}\n{}", b.console(), log());
    let ports = ok(s, "GET", &format!("/v1/nodes/{}/ports", b.id), Value::Null);
    assert_eq!((ports[0]["port"].as_str(), ports[0]["source"].as_str()), (Some(b.port), Some("lldp")), "{ports}");

    assert!(text.contains("PROBE tenant file written"), "the lessee's OS writes on its disk:\n{text}");
    rescue_and_unrescue(s, &ovs, &dhcp, &a, &tenant_host, &lessee_key);

    // The teardown erases on the cleaning VLAN and hands the node back on provisioning.
    ok(s, "POST", &format!("/v1/reservations/{reservation}/release"), Value::Null);
    drive(
        s,
        &dhcp,
        &a,
        "the teardown",
        Duration::from_secs(420),
        || {},
        || !["deployed", "releasing"].contains(&state(s, a.id).as_str()),
    );
    let (_, runs) = s.call("GET", &format!("/v1/nodes/{}/teardowns", a.id), None);
    assert_eq!(state(s, a.id), "ready", "{runs}\n{}", a.console());
    assert_eq!(ovs.tag(a.port), Some(10), "back on provisioning");

    // ... where it commissions again.
    s.walk(a.id, &["ready", "commissioning"]);
    a.commission(s);
    drive(s, &dhcp, &a, "a's second commissioning", Duration::from_secs(480), || {}, || commissioned(s, a.id));
    assert_eq!(state(s, a.id), "ready", "{}\n{}", a.console(), log());
}

/// The lessee rescues its machine: the rescue ramdisk boots from provisioning, its ports
/// move to the tenant VLAN, it takes its address from the tenant network's DHCP server
/// (never the provisioning one it booted from), and the lessee logs in over SSH with its
/// key from a host on that network, mounts the deployed OS's disk, finds the file its OS
/// wrote there and leaves one; the rescue holds no boot token. Then it unrescues: the disk
/// boots on the tenant VLAN and the OS finds both files.
fn rescue_and_unrescue(
    s: &TestScheduler,
    ovs: &Ovs,
    dhcp: &Dnsmasq,
    machine: &Machine,
    tenant: &metal_tests::ovs::WiredHost,
    key: &std::path::Path,
) {
    let member = ok(s, "POST", "/v1/credentials", json!({"role": "tenant-member", "tenantId": "acme", "name": "ops"}));
    let token = member["token"].as_str().unwrap().to_owned();
    let tftp = tempfile::tempdir().unwrap();
    let tenant_dhcp = Dnsmasq::start_in(&tenant.namespace, "eth0", RESCUE, RESCUE, tftp.path());
    let path = format!("/v1/nodes/{}/rescue", machine.id);
    let (status, started) = s.call_as(&token, "POST", &path, None);
    assert_eq!((status, started["action"].as_str()), (202, Some("rescue")), "{started}");
    assert_eq!(state(s, machine.id), "rescue");
    let (status, again) = s.call_as(&token, "POST", &path, None);
    assert_eq!(status, 409, "one rescue at a time: {again}");
    let mark = machine.console().matches("METAL-RESCUE ready").count();
    drive(
        s,
        dhcp,
        machine,
        "the rescue",
        Duration::from_secs(300),
        || {},
        || machine.console().matches("METAL-RESCUE ready").count() > mark && rescued(s, machine.id),
    );
    let text = machine.console();
    assert!(text.contains(&format!("METAL-RESCUE address={RESCUE}/24")), "the tenant network's address:\n{text}");
    assert_eq!(ovs.tag(machine.port), Some(100), "the rescue runs on the tenant VLAN");
    let log = std::fs::read_to_string(&tenant_dhcp.log).unwrap_or_default();
    assert!(log.contains(RESCUE), "{log}");

    // The lessee's SSH session: OpenSSH's client from its own network.
    let ssh = |key: &std::path::Path, command: &str| {
        let (key, target) = (key.to_str().unwrap(), format!("root@{RESCUE}"));
        let options =
            ["StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null", "BatchMode=yes", "ConnectTimeout=10"];
        let mut args = vec!["-i", key];
        args.extend(options.iter().flat_map(|o| ["-o", *o]));
        args.extend([target.as_str(), command]);
        tenant.exec("ssh", &args)
    };
    let session = ssh(
        key,
        "lsblk -n -o NAME; mdadm --version 2>&1; cryptsetup --version; mkdir -p /mnt/os && mount /dev/vda1 /mnt/os \
         && cat /mnt/os/tenant-file && echo 'the rescue was here' > /mnt/os/rescued && umount /mnt/os; \
         grep -c 'metal.token' /proc/cmdline; ls /etc/metal-rescue; \
         echo \"platform files: $(find / -xdev \\( -name '*.pem' -o -name 'metal-[abef]*' \\) | wc -l)\"",
    );
    let out = String::from_utf8_lossy(&session.stdout);
    let err = String::from_utf8_lossy(&session.stderr);
    assert!(session.status.success(), "ssh into the rescue: {out}\n{err}\n{}", machine.console());
    assert!(out.contains("vda1") && out.contains("mdadm") && out.contains("cryptsetup"), "{out}\n{err}");
    assert!(out.contains("written by the lessee"), "the deployed disk, untouched:\n{out}\n{err}");
    assert!(out.lines().any(|l| l == "0"), "no token on the rescue's kernel command line:\n{out}");
    assert!(out.contains("platform files: 0"), "no certificate, key or metal binary in the rescue:\n{out}");
    // Another key is not let in.
    let stranger = metal_tests::console::ssh_key(key.parent().unwrap(), "stranger").0;
    let refused = ssh(&stranger, "true");
    assert!(!refused.status.success(), "a key the lessee did not give is refused");

    // Unrescue: the disk boots again, with the lessee's file and the rescue's.
    let runs = machine.console().matches("PROBE done").count();
    let (status, started) = s.call_as(&token, "POST", &format!("/v1/nodes/{}/unrescue", machine.id), None);
    assert_eq!((status, started["action"].as_str()), (202, Some("unrescue")), "{started}");
    drive(
        s,
        dhcp,
        machine,
        "the unrescue",
        Duration::from_secs(300),
        || {},
        || machine.console().matches("PROBE done").count() > runs,
    );
    assert_eq!(state(s, machine.id), "deployed");
    let text = machine.console();
    let boot = &text[text.rfind("PROBE tenant file").unwrap_or(0)..];
    assert!(boot.contains("PROBE tenant file: written by the lessee"), "{boot}");
    assert!(boot.contains("PROBE the rescue wrote: the rescue was here"), "{boot}");
    let events = s.events("lessee.rescue");
    let on_node: Vec<_> = events.iter().filter(|e| e["subject"] == format!("node/{}", machine.id)).collect();
    assert_eq!(on_node.len(), 1, "one rescue, recorded on the node (and the lease): {events:?}");
}

/// Whether the node's rescue run is over and it is still in a rescue.
fn rescued(s: &TestScheduler, id: &str) -> bool {
    state(s, id) == "rescue" && s.events("node.tenant-root.rescued").iter().any(|e| e["data"]["node"] == id)
}
