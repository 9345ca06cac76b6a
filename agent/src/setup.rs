//! A joined host's setup (`protocol::join::HostSetup`), all or nothing: every item is
//! checked against the host first (parents exist, names are free, devices are whole, unused
//! disks), and only when every one passes are the networks written as systemd-networkd files
//! (`networkctl reload` applies them) and the pools made. If any item is refused, or fails
//! while being applied, what was done is undone and every item reports `applied: false`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use metal_protocol::join::{HostNetwork, HostSetup, NetworkKind, PoolKind, SetupOutcome, StoragePool};

/// Where the setup reads and writes, and how it runs commands (tests point these elsewhere).
#[derive(Debug, Clone)]
pub struct Host {
    /// systemd-networkd's configuration directory.
    pub network_dir: PathBuf,
    /// `/sys/class/net`.
    pub sys_class_net: PathBuf,
    /// `/sys/class/block`.
    pub sys_class_block: PathBuf,
    /// `/proc/net/route`.
    pub proc_net_route: PathBuf,
    /// `/proc/mounts`.
    pub proc_mounts: PathBuf,
    /// Run commands (`networkctl`, `pvcreate`...); off in tests of the logic.
    pub run_commands: bool,
    /// How long a new network may take to appear.
    pub settle: Duration,
}

impl Default for Host {
    fn default() -> Self {
        Self {
            network_dir: "/etc/systemd/network".into(),
            sys_class_net: "/sys/class/net".into(),
            sys_class_block: "/sys/class/block".into(),
            proc_net_route: "/proc/net/route".into(),
            proc_mounts: "/proc/mounts".into(),
            run_commands: true,
            settle: Duration::from_secs(30),
        }
    }
}

/// One file a network is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NetworkFile {
    path: PathBuf,
    text: String,
}

/// What an item will do, once every item passed its checks.
#[derive(Debug, Clone)]
enum Planned {
    Network { name: String, files: Vec<NetworkFile>, detail: String },
    Directory { path: PathBuf },
    Lvm { name: String, devices: Vec<String> },
}

/// The interface with the default route (`/proc/net/route`, destination 0).
fn boot_interface(host: &Host) -> Option<String> {
    let table = std::fs::read_to_string(&host.proc_net_route).ok()?;
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.len() > 2 && fields[1] == "00000000").then(|| fields[0].to_owned())
    })
}

/// The interface a parent names: `boot`, a name, or a MAC address.
fn resolve_parent(host: &Host, parent: &str) -> Result<String, String> {
    if parent == "boot" {
        return boot_interface(host).ok_or_else(|| "no interface has the default route (the boot NIC)".to_owned());
    }
    if parent.contains(':') {
        let entries = std::fs::read_dir(&host.sys_class_net).map_err(|e| e.to_string())?;
        for entry in entries.flatten() {
            let address = std::fs::read_to_string(entry.path().join("address")).unwrap_or_default();
            if address.trim().eq_ignore_ascii_case(parent) {
                return Ok(entry.file_name().to_string_lossy().into_owned());
            }
        }
        return Err(format!("no interface has MAC {parent}"));
    }
    if host.sys_class_net.join(parent).exists() {
        Ok(parent.to_owned())
    } else {
        Err(format!("there is no interface {parent}"))
    }
}

/// The `[Network]` lines of a new interface's own `.network` file.
fn addressing(net: &HostNetwork) -> String {
    let mut text = format!("DHCP={}\n", if net.dhcp4 { "ipv4" } else { "no" });
    for address in &net.addresses {
        text.push_str(&format!("Address={address}\n"));
    }
    text
}

fn plan_network(host: &Host, net: &HostNetwork) -> Result<Planned, String> {
    if host.sys_class_net.join(&net.name).exists() {
        return Err(format!("an interface {} exists already", net.name));
    }
    let parent = net.parent.as_deref().map(|p| resolve_parent(host, p)).transpose()?;
    if net.kind == NetworkKind::Bridge
        && parent.is_some()
        && parent == boot_interface(host)
        && !net.dhcp4
        && net.addresses.is_empty()
    {
        return Err(format!(
            "bridge {} would take the boot NIC {} with no address of its own (DHCP or addresses): the host \
             would lose its way to the controller",
            net.name,
            parent.unwrap_or_default()
        ));
    }
    let file = |suffix: &str, text: String| NetworkFile {
        path: host.network_dir.join(format!("60-metal-{}{suffix}", net.name)),
        text: format!("# Written by metal-agent at the host's join (its enrolment token's setup).\n{text}"),
    };
    let own = file(
        ".network",
        format!("[Match]\nName={}\n\n[Network]\nConfigureWithoutCarrier=yes\n{}", net.name, addressing(net)),
    );
    let (files, detail) = match net.kind {
        NetworkKind::Bridge => {
            let netdev = file(".netdev", format!("[NetDev]\nName={}\nKind=bridge\n", net.name));
            let mut files = vec![netdev, own];
            let detail = match &parent {
                Some(port) => {
                    // Sorted before the distribution's and cloud-init's files, which would
                    // match the port first otherwise.
                    files.push(NetworkFile {
                        path: host.network_dir.join(format!("05-metal-{}-port-{port}.network", net.name)),
                        text: format!("[Match]\nName={port}\n\n[Network]\nBridge={}\n", net.name),
                    });
                    format!("bridge {} with port {port}", net.name)
                }
                None => format!("bridge {} (no port)", net.name),
            };
            (files, detail)
        }
        NetworkKind::Vlan => {
            let parent = parent.ok_or_else(|| "a VLAN needs its parent".to_owned())?;
            let id = net.vlan_id.ok_or_else(|| "a VLAN needs its id".to_owned())?;
            let netdev = file(".netdev", format!("[NetDev]\nName={}\nKind=vlan\n\n[VLAN]\nId={id}\n", net.name));
            // A drop-in on whatever .network file configures the parent now, in the
            // administrator's directory wherever that file is (next to a file in /run or
            // /usr/lib it would be lost, or in the vendor's tree).
            let parent_file = network_file_of(host, &parent)?;
            let base = parent_file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let dropin = NetworkFile {
                path: host.network_dir.join(format!("{base}.d")).join(format!("metal-vlan-{}.conf", net.name)),
                text: format!("# Written by metal-agent: VLAN {} on {parent}.\n[Network]\nVLAN={}\n", id, net.name),
            };
            (vec![netdev, own, dropin], format!("VLAN {id} on {parent} as {}", net.name))
        }
    };
    if let Some(f) = files.iter().find(|f| f.path.exists()) {
        return Err(format!("{} exists already", f.path.display()));
    }
    let addresses = if net.addresses.is_empty() { String::new() } else { format!(", {}", net.addresses.join(", ")) };
    let dhcp = if net.dhcp4 { ", DHCPv4" } else { "" };
    Ok(Planned::Network { name: net.name.clone(), files, detail: format!("{detail}{addresses}{dhcp}") })
}

/// The `.network` file networkd configured `interface` with (`networkctl status`).
fn network_file_of(host: &Host, interface: &str) -> Result<PathBuf, String> {
    if !host.run_commands {
        return Ok(host.network_dir.join(format!("10-{interface}.network")));
    }
    let out = Command::new("networkctl")
        .args(["status", "--no-pager", interface])
        .output()
        .map_err(|e| format!("networkctl: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|line| line.trim().strip_prefix("Network File:").map(|p| PathBuf::from(p.trim())))
        .filter(|p| p.is_absolute())
        .ok_or_else(|| format!("networkd does not manage {interface} (no .network file configures it)"))
}

fn plan_pool(host: &Host, pool: &StoragePool) -> Result<Planned, String> {
    match pool.kind {
        PoolKind::Directory => {
            let path = PathBuf::from(pool.path.as_deref().ok_or("a directory pool names its path")?);
            if path.exists() && !path.is_dir() {
                return Err(format!("{} exists and is not a directory", path.display()));
            }
            Ok(Planned::Directory { path })
        }
        PoolKind::Lvm => {
            let mounts = std::fs::read_to_string(&host.proc_mounts).unwrap_or_default();
            let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
            let mut devices: Vec<String> = Vec::new();
            for device in &pool.devices {
                // `/dev/disk/by-id/...` names the disk that stays; the kernel's name may not.
                let device =
                    &std::fs::canonicalize(device).map(|p| p.display().to_string()).unwrap_or_else(|_| device.clone());
                if !device.starts_with("/dev/") {
                    return Err(format!("{device} is not under /dev"));
                }
                if devices.contains(device) {
                    return Err(format!("{device} is named twice"));
                }
                devices.push(device.clone());
                if host.run_commands {
                    if swaps.lines().any(|l| l.split_whitespace().next() == Some(device.as_str())) {
                        return Err(format!("{device} is in use as swap"));
                    }
                    blank(device)?;
                }
                let name = device.trim_start_matches("/dev/");
                let sys = host.sys_class_block.join(name);
                if !sys.exists() {
                    return Err(format!("{device} is not a block device here"));
                }
                if sys.join("partition").exists() {
                    return Err(format!("{device} is a partition; an LVM pool takes whole disks"));
                }
                let has_partitions = std::fs::read_dir(&sys)
                    .map(|entries| entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with(name)))
                    .unwrap_or(false);
                if has_partitions {
                    return Err(format!("{device} has partitions; it is in use"));
                }
                if mounts.lines().any(|l| l.split_whitespace().next() == Some(device.as_str())) {
                    return Err(format!("{device} is mounted"));
                }
                let holders = std::fs::read_dir(sys.join("holders")).map(|d| d.count()).unwrap_or(0);
                if holders > 0 {
                    return Err(format!("{device} is held by another device (LVM, RAID or dm)"));
                }
            }
            Ok(Planned::Lvm { name: pool.name.clone(), devices })
        }
    }
}

/// Refuses a device that holds anything: `blkid -p` exits 2 when it finds no signature; a
/// filesystem, RAID member or partition table means data, which a pool never overwrites.
fn blank(device: &str) -> Result<(), String> {
    let out = Command::new("blkid").args(["-p", "-o", "export", device]).output().map_err(|e| format!("blkid: {e}"))?;
    match out.status.code() {
        Some(2) => Ok(()),
        Some(0) => {
            let text = String::from_utf8_lossy(&out.stdout);
            let found: Vec<&str> = text.lines().filter(|l| l.contains("TYPE=")).collect();
            Err(format!("{device} holds data ({}); an LVM pool takes empty disks only", found.join(", ")))
        }
        _ => Err(format!("blkid -p {device}: {}", String::from_utf8_lossy(&out.stderr).trim())),
    }
}

fn run(host: &Host, program: &str, args: &[&str]) -> Result<(), String> {
    if !host.run_commands {
        return Ok(());
    }
    // No stdin: a tool that would ask (pvcreate before wiping a signature) reads "no".
    let out = Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// What was done so far, to undo.
#[derive(Debug, Default)]
struct Done {
    files: Vec<PathBuf>,
    links: Vec<String>,
    directories: Vec<PathBuf>,
    groups: Vec<(String, Vec<String>)>,
}

impl Done {
    fn undo(self, host: &Host) {
        for file in self.files.iter().rev() {
            let _ = std::fs::remove_file(file);
            if let Some(dir) = file.parent().filter(|d| d.extension().is_some_and(|e| e == "d")) {
                let _ = std::fs::remove_dir(dir);
            }
        }
        if !self.files.is_empty() {
            let _ = run(host, "networkctl", &["reload"]);
        }
        for link in &self.links {
            let _ = run(host, "ip", &["link", "delete", link]);
        }
        for dir in self.directories.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
        for (group, devices) in &self.groups {
            let _ = run(host, "vgremove", &["-y", group]);
            for device in devices {
                let _ = run(host, "pvremove", &["-y", device]);
            }
        }
    }
}

fn write_file(file: &NetworkFile, done: &mut Done) -> Result<(), String> {
    if let Some(dir) = file.path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let temporary = file.path.with_extension("metal-part");
    std::fs::write(&temporary, &file.text).map_err(|e| format!("{}: {e}", temporary.display()))?;
    std::fs::rename(&temporary, &file.path).map_err(|e| format!("{}: {e}", file.path.display()))?;
    done.files.push(file.path.clone());
    Ok(())
}

/// Creates `path` and every missing directory above it, recording each one made.
fn make_directories(path: &Path, done: &mut Done) -> Result<(), String> {
    let mut missing = Vec::new();
    let mut at = Some(path);
    while let Some(dir) = at.filter(|d| !d.exists()) {
        missing.push(dir.to_path_buf());
        at = dir.parent();
    }
    for dir in missing.into_iter().rev() {
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        done.directories.push(dir);
    }
    Ok(())
}

/// Waits until networkd made the interface `name`.
fn await_link(host: &Host, name: &str) -> Result<(), String> {
    if !host.run_commands {
        return Ok(());
    }
    let start = Instant::now();
    while start.elapsed() < host.settle {
        if host.sys_class_net.join(name).exists() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Err(format!("networkd did not create {name} within {} s", host.settle.as_secs()))
}

fn apply_all(host: &Host, planned: &[(String, Planned)], done: &mut Done) -> Result<Vec<String>, (usize, String)> {
    let mut details = Vec::new();
    let networks: Vec<usize> =
        planned.iter().enumerate().filter(|(_, (_, p))| matches!(p, Planned::Network { .. })).map(|(i, _)| i).collect();
    for &i in &networks {
        if let Planned::Network { files, .. } = &planned[i].1 {
            for file in files {
                write_file(file, done).map_err(|e| (i, e))?;
            }
        }
    }
    if let Some(&first) = networks.first() {
        // The reload makes every new netdev at once: each is undone if any fails.
        for &i in &networks {
            if let Planned::Network { name, .. } = &planned[i].1 {
                done.links.push(name.clone());
            }
        }
        run(host, "networkctl", &["reload"]).map_err(|e| (first, e))?;
    }
    for (i, (_, item)) in planned.iter().enumerate() {
        match item {
            Planned::Network { name, detail, .. } => {
                await_link(host, name).map_err(|e| (i, e))?;
                details.push(format!("{detail}: written to {} and up", host.network_dir.display()));
            }
            Planned::Directory { path } => {
                make_directories(path, done).map_err(|e| (i, e))?;
                details.push(format!("directory pool at {}", path.display()));
            }
            Planned::Lvm { name, devices } => {
                let devs: Vec<&str> = devices.iter().map(String::as_str).collect();
                done.groups.push((name.clone(), devices.clone()));
                run(host, "pvcreate", &devs).map_err(|e| (i, e))?;
                run(host, "vgcreate", &[&[name.as_str()], devs.as_slice()].concat()).map_err(|e| (i, e))?;
                details.push(format!("LVM volume group {name} on {}", devices.join(", ")));
            }
        }
    }
    Ok(details)
}

/// Sets the host up as `setup` asks, all or nothing; one outcome per item, in order.
pub fn apply(host: &Host, setup: &HostSetup) -> Vec<SetupOutcome> {
    let items = setup.items();
    if let Err(e) = setup.validate() {
        return refused_all(&items, None, &format!("the setup is invalid: {e}"));
    }
    let mut planned = Vec::new();
    let checks = setup
        .networks
        .iter()
        .map(|n| plan_network(host, n))
        .chain(setup.storage_pools.iter().map(|p| plan_pool(host, p)));
    for (i, check) in checks.enumerate() {
        match check {
            Ok(plan) => planned.push((items[i].clone(), plan)),
            Err(reason) => return refused_all(&items, Some(i), &reason),
        }
    }
    let mut done = Done::default();
    match apply_all(host, &planned, &mut done) {
        Ok(details) => items
            .iter()
            .zip(details)
            .map(|(item, detail)| SetupOutcome { item: item.clone(), applied: true, detail })
            .collect(),
        Err((i, reason)) => {
            done.undo(host);
            refused_all(&items, Some(i), &format!("failed while applying, everything undone: {reason}"))
        }
    }
}

/// Every item not applied: `culprit` with `reason`, the others because of it.
fn refused_all(items: &[String], culprit: Option<usize>, reason: &str) -> Vec<SetupOutcome> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| SetupOutcome {
            item: item.clone(),
            applied: false,
            detail: match culprit {
                Some(c) if c == i => format!("refused: {reason}"),
                Some(c) => format!("not applied: {} was refused, and the setup is all or nothing", items[c]),
                None => format!("refused: {reason}"),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_host(dir: &Path) -> Host {
        let net = dir.join("sys/class/net");
        std::fs::create_dir_all(net.join("ens3")).unwrap();
        std::fs::write(net.join("ens3/address"), "52:54:00:12:34:56\n").unwrap();
        std::fs::create_dir_all(dir.join("proc/net")).unwrap();
        std::fs::write(
            dir.join("proc/net/route"),
            "Iface\tDestination\tGateway\nens3\t00000000\t0202000A\nens3\t0002000A\t00000000\n",
        )
        .unwrap();
        std::fs::create_dir_all(dir.join("network")).unwrap();
        Host {
            network_dir: dir.join("network"),
            sys_class_net: net,
            sys_class_block: dir.join("sys/class/block"),
            proc_net_route: dir.join("proc/net/route"),
            proc_mounts: dir.join("proc/mounts"),
            run_commands: false,
            settle: Duration::from_secs(1),
        }
    }

    fn bridge(name: &str, parent: Option<&str>) -> HostNetwork {
        HostNetwork {
            name: name.into(),
            kind: NetworkKind::Bridge,
            parent: parent.map(Into::into),
            vlan_id: None,
            dhcp4: false,
            addresses: vec!["192.168.77.1/24".into()],
        }
    }

    #[test]
    fn a_bridge_a_vlan_and_a_directory_are_written_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let host = fake_host(dir.path());
        let pool_dir = dir.path().join("srv/metal/scratch");
        let setup = HostSetup {
            networks: vec![
                bridge("br0", Some("52:54:00:12:34:56")),
                HostNetwork {
                    name: "vlan100".into(),
                    kind: NetworkKind::Vlan,
                    parent: Some("boot".into()),
                    vlan_id: Some(100),
                    dhcp4: true,
                    addresses: vec![],
                },
            ],
            storage_pools: vec![StoragePool {
                name: "scratch".into(),
                kind: PoolKind::Directory,
                path: Some(pool_dir.display().to_string()),
                devices: vec![],
            }],
        };
        let outcomes = apply(&host, &setup);
        assert!(outcomes.iter().all(|o| o.applied), "{outcomes:?}");
        assert!(outcomes[0].detail.contains("bridge br0 with port ens3"), "{outcomes:?}");
        assert!(outcomes[1].detail.contains("VLAN 100 on ens3"), "{outcomes:?}");
        let netdev = std::fs::read_to_string(host.network_dir.join("60-metal-br0.netdev")).unwrap();
        assert!(netdev.contains("Kind=bridge"));
        let own = std::fs::read_to_string(host.network_dir.join("60-metal-br0.network")).unwrap();
        assert!(own.contains("Address=192.168.77.1/24") && own.contains("DHCP=no"));
        let port = std::fs::read_to_string(host.network_dir.join("05-metal-br0-port-ens3.network")).unwrap();
        assert!(port.contains("Name=ens3") && port.contains("Bridge=br0"));
        let dropin = host.network_dir.join("10-ens3.network.d/metal-vlan-vlan100.conf");
        assert!(std::fs::read_to_string(dropin).unwrap().contains("VLAN=vlan100"));
        assert!(pool_dir.is_dir());
    }

    #[test]
    fn one_refused_item_applies_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let host = fake_host(dir.path());
        let pool_dir = dir.path().join("srv/pool");
        let setup = HostSetup {
            networks: vec![bridge("br0", None), bridge("br1", Some("eth9"))],
            storage_pools: vec![StoragePool {
                name: "p".into(),
                kind: PoolKind::Directory,
                path: Some(pool_dir.display().to_string()),
                devices: vec![],
            }],
        };
        let outcomes = apply(&host, &setup);
        assert!(outcomes.iter().all(|o| !o.applied), "{outcomes:?}");
        assert!(outcomes[1].detail.contains("there is no interface eth9"), "{outcomes:?}");
        assert!(outcomes[0].detail.contains("network/br1 was refused"), "{outcomes:?}");
        assert_eq!(std::fs::read_dir(&host.network_dir).unwrap().count(), 0, "no file was written");
        assert!(!pool_dir.exists());
    }

    #[test]
    fn a_failure_while_applying_undoes_what_was_done() {
        let dir = tempfile::tempdir().unwrap();
        let host = fake_host(dir.path());
        // The pool's parent is a file: creating the pool fails after the bridge was written.
        std::fs::write(dir.path().join("blocker"), "").unwrap();
        let setup = HostSetup {
            networks: vec![bridge("br0", None)],
            storage_pools: vec![StoragePool {
                name: "p".into(),
                kind: PoolKind::Directory,
                path: Some(dir.path().join("blocker/pool").display().to_string()),
                devices: vec![],
            }],
        };
        let outcomes = apply(&host, &setup);
        assert!(outcomes.iter().all(|o| !o.applied), "{outcomes:?}");
        assert!(outcomes[1].detail.contains("everything undone"), "{outcomes:?}");
        assert_eq!(std::fs::read_dir(&host.network_dir).unwrap().count(), 0, "the bridge's files were removed");
    }

    #[test]
    fn a_bridge_that_would_take_the_boot_nic_without_an_address_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let host = fake_host(dir.path());
        let mut net = bridge("br0", Some("boot"));
        net.addresses.clear();
        let outcomes = apply(&host, &HostSetup { networks: vec![net.clone()], storage_pools: vec![] });
        assert!(outcomes[0].detail.contains("lose its way to the controller"), "{outcomes:?}");
        net.dhcp4 = true;
        let outcomes = apply(&host, &HostSetup { networks: vec![net], storage_pools: vec![] });
        assert!(outcomes[0].applied, "{outcomes:?}");
    }

    #[test]
    fn an_lvm_pool_refuses_a_disk_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let host = fake_host(dir.path());
        std::fs::create_dir_all(dir.path().join("sys/class/block/vdb/vdb1")).unwrap();
        let pool = |device: &str| HostSetup {
            networks: vec![],
            storage_pools: vec![StoragePool {
                name: "vg0".into(),
                kind: PoolKind::Lvm,
                path: None,
                devices: vec![device.into()],
            }],
        };
        let outcomes = apply(&host, &pool("/dev/vdb"));
        assert!(outcomes[0].detail.contains("has partitions"), "{outcomes:?}");
        let outcomes = apply(&host, &pool("/dev/vdz"));
        assert!(outcomes[0].detail.contains("not a block device"), "{outcomes:?}");
    }
}
