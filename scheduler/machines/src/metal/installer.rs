//! Installer deploys: for sites that must use the distribution's installer, the node
//! network-boots the installer's kernel and initrd from the site mirror instead of the
//! ramdisk, with an Ubuntu autoinstall (subiquity, read as cloud-init NoCloud over HTTP) or a
//! RHEL-family kickstart (Anaconda) rendered from the profile and served by this controller,
//! gated by the node's install token. The installed system tells the controller it is done
//! (`POST .../done`), which ends the deploy.
//!
//! The one design decision: every value is validated before rendering (the same checks as
//! the cloud-init seed) and nothing is spliced into the text unescaped: the autoinstall is
//! JSON-in-YAML, and the kickstart takes only values whose character sets cannot break a
//! kickstart line (host, user and package names, keys without their comments, hex tokens).

use metal_protocol::cloudinit::{SeedInput, cloud_config, meta_data};
use serde_json::{Value, json};

use metal_types::error::{ApiError, ApiResult};
use metal_types::model::node::Node;
use metal_types::model::profile::{InstallerKind, InstallerPlan, InstallerSpec, ProfileSpec};

/// Where the controller serves an installer's files: `INSTALLER_PATH/TOKEN/NAME`.
pub const INSTALLER_PATH: &str = "/boot/installer";

/// The inputs of a rendering, validated.
struct Inputs<'a> {
    seed: SeedInput,
    spec: &'a ProfileSpec,
    disk: String,
    serial: Option<String>,
    mac: Option<String>,
}

/// The disk an installer targets: its first `/dev/disk/by-id` link, else its kernel name.
fn disk_path(disk: &metal_protocol::inventory::Disk) -> String {
    match disk.by_id.first() {
        Some(link) => format!("/dev/disk/by-id/{}", link.trim_start_matches("/dev/disk/by-id/")),
        None => disk.name.clone(),
    }
}

fn check_disk_path(path: &str) -> ApiResult<()> {
    let ok = !path.is_empty()
        && path.len() <= 255
        && path.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._:-".contains(&b));
    if ok { Ok(()) } else { Err(ApiError::Internal(format!("disk path {path:?} cannot go into an installer config"))) }
}

/// The installer plan of `spec` for `node`, whose target disk (chosen like an image deploy's)
/// is `target`; `done_url` is where the installed system reports (it carries the token).
pub fn derive(
    spec: &ProfileSpec,
    installer: &InstallerSpec,
    node: &Node,
    instance_id: String,
    hostname: String,
    target: &metal_protocol::inventory::Disk,
) -> ApiResult<InstallerPlan> {
    let seed = spec.seed_input(instance_id, hostname);
    seed.validate().map_err(|e| ApiError::invalid(e.field.clone(), e.message.clone()))?;
    let disk = disk_path(target);
    check_disk_path(&disk)?;
    let inputs =
        Inputs { seed, spec, disk: disk.clone(), serial: target.identity.serial.clone(), mac: node.boot_mac.clone() };
    let config = match installer.kind {
        InstallerKind::Autoinstall => autoinstall(&inputs, DONE_PLACEHOLDER)?,
        InstallerKind::Kickstart => kickstart(&inputs, DONE_PLACEHOLDER),
    };
    Ok(InstallerPlan { installer: installer.clone(), config, meta_data: meta_data(&inputs.seed).to_string(), disk })
}

/// Stands for the done URL in a stored plan; the served copy has the node's real one (the
/// token exists only on the kernel line and in what is served with it).
pub const DONE_PLACEHOLDER: &str = "@METAL_DONE_URL@";

/// The plan's configuration as served to the holder of `token`, from `base` (the URL the
/// installer reached this controller at).
pub fn served_config(plan: &InstallerPlan, base: &str, token: &str) -> String {
    plan.config.replace(DONE_PLACEHOLDER, &format!("{base}{INSTALLER_PATH}/{token}/done"))
}

/// The installer's kernel command line.
pub fn kernel_args(plan: &InstallerPlan, base: &str, token: &str) -> String {
    let files = format!("{base}{INSTALLER_PATH}/{token}/");
    match plan.installer.kind {
        InstallerKind::Autoinstall => {
            format!("ip=dhcp url={} autoinstall ds=nocloud-net;s={files} ---", plan.installer.source_url)
        }
        InstallerKind::Kickstart => format!("ip=dhcp inst.repo={} inst.ks={files}ks.cfg", plan.installer.source_url),
    }
}

/// Ubuntu autoinstall user-data: the documented keys only, the installed system's
/// cloud-config under `user-data`, as JSON-in-YAML.
fn autoinstall(inputs: &Inputs<'_>, done_url: &str) -> ApiResult<String> {
    let user_data = cloud_config(&inputs.seed).map_err(|e| ApiError::invalid(e.field.clone(), e.message.clone()))?;
    let storage_match = match &inputs.serial {
        Some(serial) => json!({"serial": serial}),
        None => json!({"path": inputs.disk}),
    };
    let mut network = json!({"version": 2, "ethernets": {}});
    if let Some(mac) = &inputs.mac {
        network["ethernets"]["boot"] = json!({"match": {"macaddress": mac}, "dhcp4": true});
    } else {
        network["ethernets"]["all"] = json!({"match": {"name": "en*"}, "dhcp4": true});
    }
    let mut autoinstall = json!({
        "version": 1,
        "locale": "en_US.UTF-8",
        "keyboard": {"layout": "us"},
        "network": network,
        "storage": {"layout": {"name": "direct", "match": storage_match}},
        "ssh": {"install-server": true, "allow-pw": false},
        "late-commands": [format!("curl -fsS -X POST {done_url}")],
        "shutdown": "reboot",
        "user-data": user_data,
    });
    if !inputs.spec.cloud_init.packages.is_empty() {
        autoinstall["packages"] = json!(inputs.spec.cloud_init.packages);
    }
    if let Some(zone) = &inputs.spec.cloud_init.timezone {
        autoinstall["timezone"] = json!(zone);
    }
    let document: Value = json!({ "autoinstall": autoinstall });
    Ok(format!("#cloud-config\n{}\n", serde_json::to_string_pretty(&document).unwrap_or_default()))
}

/// A RHEL 9-family kickstart (Rocky 9, AlmaLinux 9).
fn kickstart(inputs: &Inputs<'_>, done_url: &str) -> String {
    let seed = &inputs.seed;
    let (user, disk) = (&seed.admin_user, &inputs.disk);
    let mut ks = vec![
        format!("# metal: kickstart for {} (validated values only)", seed.hostname),
        "text".into(),
        "lang en_US.UTF-8".into(),
        "keyboard --vckeymap=us".into(),
        format!("timezone {} --utc", inputs.spec.cloud_init.timezone.as_deref().unwrap_or("Etc/UTC")),
        match &inputs.mac {
            Some(mac) => format!("network --bootproto=dhcp --device={mac} --hostname={} --activate", seed.hostname),
            None => format!("network --bootproto=dhcp --hostname={} --activate", seed.hostname),
        },
        "rootpw --lock".into(),
        format!("user --name={user} --groups=wheel --lock"),
    ];
    for key in &seed.ssh_authorized_keys {
        // The comment is left out: only the type and the base64 blob go on the line.
        let mut parts = key.split_whitespace();
        let (kind, blob) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
        ks.push(format!("sshkey --username={user} \"{kind} {blob}\""));
    }
    for server in &inputs.spec.cloud_init.ntp_servers {
        ks.push(format!("timesource --ntp-server={server}"));
    }
    ks.extend([
        "firstboot --disable".into(),
        "selinux --enforcing".into(),
        "firewall --enabled --service=ssh".into(),
        "services --enabled=sshd".into(),
        format!("ignoredisk --only-use={disk}"),
        format!("clearpart --all --initlabel --drives={disk}"),
        "autopart --type=plain".into(),
        format!("bootloader --boot-drive={disk}"),
        "reboot".into(),
        String::new(),
        "%packages".into(),
        "@^minimal-environment".into(),
        "openssh-server".into(),
        "curl".into(),
    ]);
    ks.extend(inputs.spec.cloud_init.packages.iter().cloned());
    ks.extend([
        "%end".into(),
        String::new(),
        "%post --erroronfail".into(),
        format!("echo '{user} ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/metal-{user}"),
        format!("chmod 0440 /etc/sudoers.d/metal-{user}"),
        "printf 'PasswordAuthentication no\\nPermitRootLogin no\\n' > /etc/ssh/sshd_config.d/10-metal.conf".into(),
        format!("curl -fsS -X POST {done_url}"),
        "%end".into(),
    ]);
    ks.join("\n") + "\n"
}
