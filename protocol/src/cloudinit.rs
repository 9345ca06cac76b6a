//! Rendering the cloud-init NoCloud seed a deploy writes after the image: key-only SSH, root
//! login disabled, one named admin user with passwordless sudo, and a first-boot join with a
//! single-use token and the pinned site CA.
//!
//! Every value is validated first (hostname, user name, SSH keys, URL, token, fingerprint,
//! addresses), and the documents are rendered as JSON, which YAML reads as flow style: no
//! value from a request is ever spliced into YAML text, so none can add keys or documents.

use serde_json::{Value, json};

use crate::deploy::{CloudInitSeed, SeedVolume};

use crate::join::{
    BOOTSTRAP, BOOTSTRAP_FILE, CA_FILE, CA_SHA256_FILE, CONFIG_DIR, CONTROLLER_URL_FILE, INSTALL_SHA256_FILE,
    TOKEN_FILE,
};

/// The first-boot join (`protocol::join`): where to, with which single-use enrolment token,
/// trusting which CA, running which script. `Debug` never shows the token.
#[derive(Clone, PartialEq, Eq)]
pub struct FirstBootJoin {
    /// `https://` URL of the controller's boot listener.
    pub controller_url: String,
    /// The single-use enrolment token.
    pub token: String,
    /// The site CA certificate (PEM).
    pub ca_pem: String,
    /// SHA-256 fingerprint of the site CA (64 lower-case hex digits): the pin.
    pub ca_fingerprint: String,
    /// SHA-256 of the join script the controller serves (64 lower-case hex digits).
    pub install_sha256: String,
}

impl std::fmt::Debug for FirstBootJoin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FirstBootJoin")
            .field("controller_url", &self.controller_url)
            .field("token", &"<redacted>")
            .field("ca_fingerprint", &self.ca_fingerprint)
            .field("install_sha256", &self.install_sha256)
            .finish_non_exhaustive()
    }
}

/// One NIC's network configuration (network-config version 2), matched by MAC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Name to give it (`eth0`, `bond0`...).
    pub name: String,
    /// Its MAC address.
    pub mac: String,
    /// DHCPv4 instead of static addresses.
    pub dhcp4: bool,
    /// Static addresses in CIDR form.
    pub addresses: Vec<String>,
    /// Default IPv4 gateway.
    pub gateway4: Option<String>,
    /// DNS servers.
    pub nameservers: Vec<String>,
}

/// Size of the `cidata` partition a deploy appends after the image.
pub const SEED_PARTITION_BYTES: u64 = 16 << 20;

/// Disk bytes a deploy of a `raw_bytes` image with a seed needs: the image rounded up to a
/// MiB, the seed partition, and a MiB at the end for the backup GPT.
pub fn disk_bytes_with_seed(raw_bytes: u64) -> u64 {
    const MIB: u64 = 1 << 20;
    raw_bytes.div_ceil(MIB) * MIB + SEED_PARTITION_BYTES + MIB
}

/// What a seed says, before validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedInput {
    /// The instance id (changes with every deploy so cloud-init runs again).
    pub instance_id: String,
    /// The host name.
    pub hostname: String,
    /// The admin user's name.
    pub admin_user: String,
    /// The admin user's SSH public keys (`type base64 [comment]`), at least one.
    pub ssh_authorized_keys: Vec<String>,
    /// The first-boot join, if the node joins the controller.
    pub join: Option<FirstBootJoin>,
    /// Network configuration; `None` leaves the image's default (DHCP).
    pub network: Vec<Interface>,
    /// Where the `cidata` volume goes.
    pub volume: SeedVolume,
    /// What a profile adds: packages, time zone, NTP servers.
    pub extras: SeedExtras,
}

/// The cloud-init settings a profile may add, each validated like every other value.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SeedExtras {
    /// Distribution packages to install on first boot (`packages:`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<String>,
    /// IANA time zone, e.g. `Europe/Paris` (`timezone:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// NTP servers, host names or IP addresses (`ntp: servers:`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ntp_servers: Vec<String>,
}

impl SeedExtras {
    /// Checks every value: package names, the time zone's form, NTP host names or addresses.
    pub fn validate(&self) -> Result<(), SeedError> {
        for (i, package) in self.packages.iter().enumerate() {
            let ok = (1..=128).contains(&package.len())
                && package.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-' | b'_'))
                && package.as_bytes()[0].is_ascii_alphanumeric();
            if !ok {
                return Err(bad(format!("packages[{i}]"), format!("{package:?} is not a package name")));
            }
        }
        if let Some(zone) = &self.timezone {
            let ok = (1..=64).contains(&zone.len())
                && zone.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'+' | b'-'))
                && zone.split('/').all(|part| !part.is_empty() && part.as_bytes()[0].is_ascii_alphabetic());
            if !ok {
                return Err(bad("timezone", format!("{zone:?} is not an IANA time zone name (Area/City)")));
            }
        }
        for (i, server) in self.ntp_servers.iter().enumerate() {
            if server.parse::<std::net::IpAddr>().is_err() {
                check_hostname(server).map_err(|e| bad(format!("ntpServers[{i}]"), e.message))?;
            }
        }
        Ok(())
    }
}

/// A value that may not go into a seed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cloud-init seed: {field}: {message}")]
pub struct SeedError {
    /// The offending field.
    pub field: String,
    /// Why.
    pub message: String,
}

fn bad(field: impl Into<String>, message: impl Into<String>) -> SeedError {
    SeedError { field: field.into(), message: message.into() }
}

/// RFC 1123 host name (labels of letters, digits and hyphens, at most 253 characters).
fn check_hostname(name: &str) -> Result<(), SeedError> {
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(bad("hostname", format!("{name:?} is not an RFC 1123 host name")));
    }
    Ok(())
}

/// A POSIX-portable user name that is not a system account.
fn check_user(name: &str) -> Result<(), SeedError> {
    let first = name.bytes().next();
    let ok = (1..=32).contains(&name.len())
        && first.is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if !ok {
        return Err(bad("adminUser", format!("{name:?} is not a valid user name ([a-z_][a-z0-9_-]{{0,31}})")));
    }
    if matches!(name, "root" | "daemon" | "bin" | "sys" | "nobody" | "sshd") {
        return Err(bad("adminUser", format!("{name:?} is a system account")));
    }
    Ok(())
}

const KEY_TYPES: [&str; 7] = [
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
];

/// An OpenSSH public key line: a known type, base64 that decodes and names the same type,
/// and an optional printable comment. Options (`command=...`) are refused. `field` names it
/// in the error.
pub fn check_ssh_key(field: &str, key: &str) -> Result<(), SeedError> {
    use base64::Engine as _;
    let field = field.to_owned();
    let mut parts = key.trim().splitn(3, ' ');
    let (kind, blob, comment) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next());
    if !KEY_TYPES.contains(&kind) {
        return Err(bad(field, format!("key type {kind:?} is not one of {}", KEY_TYPES.join(", "))));
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(blob)
        .map_err(|_| bad(field.clone(), "the key is not valid base64"))?;
    let named = decoded
        .get(..4)
        .and_then(|l| usize::try_from(u32::from_be_bytes([l[0], l[1], l[2], l[3]])).ok())
        .and_then(|n| decoded.get(4..4 + n));
    if named != Some(kind.as_bytes()) {
        return Err(bad(field, format!("the key data does not hold a {kind} key")));
    }
    if comment.is_some_and(|c| c.chars().any(|ch| ch.is_control())) {
        return Err(bad(field, "the comment holds control characters"));
    }
    Ok(())
}

fn check_ip(field: &str, text: &str) -> Result<std::net::IpAddr, SeedError> {
    text.parse().map_err(|_| bad(field, format!("{text:?} is not an IP address")))
}

fn check_cidr(field: &str, text: &str) -> Result<(), SeedError> {
    let (ip, prefix) = text.split_once('/').ok_or_else(|| bad(field, format!("{text:?} is not address/prefix")))?;
    let max = if check_ip(field, ip)?.is_ipv4() { 32 } else { 128 };
    match prefix.parse::<u8>() {
        Ok(p) if p <= max => Ok(()),
        _ => Err(bad(field, format!("prefix {prefix:?} is not 0..={max}"))),
    }
}

fn check_mac(field: &str, mac: &str) -> Result<(), SeedError> {
    let ok = mac.len() == 17
        && mac.split(':').count() == 6
        && mac.split(':').all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()));
    if ok { Ok(()) } else { Err(bad(field, format!("{mac:?} is not a MAC address"))) }
}

fn check_join(join: &FirstBootJoin) -> Result<(), SeedError> {
    let url = &join.controller_url;
    let rest = url.strip_prefix("https://").ok_or_else(|| bad("join.controllerUrl", "must be an https:// URL"))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty() || url.chars().any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '\\') {
        return Err(bad("join.controllerUrl", format!("{url:?} is not a plain https URL")));
    }
    let token_ok = (16..=256).contains(&join.token.len())
        && join.token.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !token_ok {
        return Err(bad("join.token", "must be 16 to 256 characters of [A-Za-z0-9._-]"));
    }
    let is_digest = |d: &str| d.len() == 64 && d.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !is_digest(&join.ca_fingerprint) {
        return Err(bad("join.caFingerprint", "must be 64 lower-case hex digits (SHA-256)"));
    }
    if !is_digest(&join.install_sha256) {
        return Err(bad("join.installSha256", "must be 64 lower-case hex digits (SHA-256)"));
    }
    let ca = crate::CaCertificate::from_pem(&join.ca_pem)
        .map_err(|e| bad("join.caPem", format!("not a site CA certificate: {e}")))?;
    if ca.fingerprint_sha256() != join.ca_fingerprint {
        return Err(bad("join.caPem", "the certificate's SHA-256 is not the pinned fingerprint"));
    }
    Ok(())
}

impl SeedInput {
    /// Checks every value.
    pub fn validate(&self) -> Result<(), SeedError> {
        let id_ok = (1..=128).contains(&self.instance_id.len())
            && self.instance_id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !id_ok {
            return Err(bad("instanceId", "must be 1 to 128 characters of [A-Za-z0-9._-]"));
        }
        check_hostname(&self.hostname)?;
        check_user(&self.admin_user)?;
        if self.ssh_authorized_keys.is_empty() {
            return Err(bad("sshAuthorizedKeys", "at least one key: login is key-only"));
        }
        for (i, key) in self.ssh_authorized_keys.iter().enumerate() {
            check_ssh_key(&format!("sshAuthorizedKeys[{i}]"), key)?;
        }
        if let Some(join) = &self.join {
            check_join(join)?;
        }
        self.extras.validate()?;
        for (i, nic) in self.network.iter().enumerate() {
            let f = |name: &str| format!("network[{i}].{name}");
            let name_ok = (1..=15).contains(&nic.name.len())
                && nic.name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
            if !name_ok {
                return Err(bad(f("name"), format!("{:?} is not an interface name", nic.name)));
            }
            check_mac(&f("mac"), &nic.mac)?;
            for a in &nic.addresses {
                check_cidr(&f("addresses"), a)?;
            }
            if let Some(g) = &nic.gateway4
                && !check_ip(&f("gateway4"), g)?.is_ipv4()
            {
                return Err(bad(f("gateway4"), "must be IPv4"));
            }
            for n in &nic.nameservers {
                check_ip(&f("nameservers"), n)?;
            }
            if !nic.dhcp4 && nic.addresses.is_empty() {
                return Err(bad(f("addresses"), "a NIC without DHCP needs an address"));
            }
        }
        Ok(())
    }
}

/// The `meta-data` document of an input (validate it first).
pub fn meta_data(input: &SeedInput) -> Value {
    json!({"instance-id": input.instance_id, "local-hostname": input.hostname})
}

/// The cloud-config (the `user-data` document as a JSON value) of an input, after validating
/// every value. An installer's configuration embeds it for the installed system.
pub fn cloud_config(input: &SeedInput) -> Result<Value, SeedError> {
    input.validate()?;
    let mut config = json!({
        "hostname": input.hostname,
        "preserve_hostname": false,
        "disable_root": true,
        "ssh_pwauth": false,
        "users": [{
            "name": input.admin_user,
            "shell": "/bin/bash",
            "lock_passwd": true,
            "sudo": "ALL=(ALL) NOPASSWD:ALL",
            "ssh_authorized_keys": input.ssh_authorized_keys.iter().map(|k| k.trim()).collect::<Vec<_>>(),
        }],
    });
    let extras = &input.extras;
    if !extras.packages.is_empty() {
        config["packages"] = json!(extras.packages);
    }
    if let Some(zone) = &extras.timezone {
        config["timezone"] = json!(zone);
    }
    if !extras.ntp_servers.is_empty() {
        config["ntp"] = json!({"enabled": true, "servers": extras.ntp_servers});
    }
    if let Some(join) = &input.join {
        insert_join(&mut config, join);
    }
    Ok(config)
}

/// Puts the join's files (`protocol::join`'s layout in `CONFIG_DIR`) and the bootstrap's run
/// into a cloud-config.
fn insert_join(config: &mut Value, join: &FirstBootJoin) {
    let file = |name: &str, mode: &str, content: &str| json!({"path": format!("{CONFIG_DIR}/{name}"), "permissions": mode, "owner": "root:root", "content": content});
    config["write_files"] = json!([
        file(CONTROLLER_URL_FILE, "0644", &format!("{}\n", join.controller_url)),
        file(CA_FILE, "0644", &join.ca_pem),
        file(CA_SHA256_FILE, "0644", &format!("{}\n", join.ca_fingerprint)),
        file(INSTALL_SHA256_FILE, "0644", &format!("{}\n", join.install_sha256)),
        file(TOKEN_FILE, "0600", &format!("{}\n", join.token)),
        file(BOOTSTRAP_FILE, "0700", BOOTSTRAP),
    ]);
    config["runcmd"] = json!([["/bin/sh", format!("{CONFIG_DIR}/{BOOTSTRAP_FILE}")]]);
}

/// A rendered seed with the first-boot join added (the controller adds it when a deploying
/// ramdisk fetches its plan, so the stored plan never holds a token).
pub fn with_join(seed: &CloudInitSeed, join: &FirstBootJoin) -> Result<CloudInitSeed, SeedError> {
    check_join(join)?;
    let mut config = rendered_config(seed).ok_or_else(|| bad("userData", "not a cloud-config metal rendered"))?;
    insert_join(&mut config, join);
    Ok(CloudInitSeed { user_data: user_data(&config), ..seed.clone() })
}

/// The cloud-config of a seed metal rendered (`render`); `None` for one written by hand (a
/// plan an operator set), which a join cannot be added to.
pub fn rendered_config(seed: &CloudInitSeed) -> Option<Value> {
    let text = seed.user_data.strip_prefix("#cloud-config\n")?;
    serde_json::from_str::<Value>(text).ok().filter(Value::is_object)
}

/// The `user-data` document of a cloud-config.
fn user_data(config: &Value) -> String {
    format!("#cloud-config\n{}\n", serde_json::to_string_pretty(config).unwrap_or_default())
}

/// Renders the seed after validating every value.
pub fn render(input: &SeedInput) -> Result<CloudInitSeed, SeedError> {
    let config = cloud_config(input)?;
    let meta_data = meta_data(input);
    let network_config = (!input.network.is_empty()).then(|| {
        let ethernets: serde_json::Map<String, Value> = input
            .network
            .iter()
            .map(|nic| {
                let mut entry =
                    json!({"match": {"macaddress": nic.mac.to_lowercase()}, "set-name": nic.name, "dhcp4": nic.dhcp4});
                if !nic.addresses.is_empty() {
                    entry["addresses"] = json!(nic.addresses);
                }
                if let Some(g) = &nic.gateway4 {
                    entry["routes"] = json!([{"to": "default", "via": g}]);
                }
                if !nic.nameservers.is_empty() {
                    entry["nameservers"] = json!({"addresses": nic.nameservers});
                }
                (nic.name.clone(), entry)
            })
            .collect();
        json!({"version": 2, "ethernets": ethernets}).to_string()
    });
    Ok(CloudInitSeed {
        meta_data: meta_data.to_string(),
        user_data: user_data(&config),
        network_config,
        volume: input.volume,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real ed25519 public key line.
    pub const KEY: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ops@example";

    fn join() -> FirstBootJoin {
        use std::sync::OnceLock;
        static CA: OnceLock<String> = OnceLock::new();
        let ca_pem = CA
            .get_or_init(|| {
                let year = std::time::Duration::from_secs(365 * 86400);
                crate::SiteCa::create("site-a", std::time::SystemTime::now(), year).unwrap().certificate().pem()
            })
            .clone();
        FirstBootJoin {
            controller_url: "https://metal.site-a:8443".into(),
            token: "tok_0123456789abcdef".into(),
            ca_fingerprint: crate::CaCertificate::from_pem(&ca_pem).unwrap().fingerprint_sha256(),
            ca_pem,
            install_sha256: "cd".repeat(32),
        }
    }

    fn input() -> SeedInput {
        SeedInput {
            instance_id: "node-7-gen-3".into(),
            hostname: "gpu-07.site-a".into(),
            admin_user: "ops".into(),
            ssh_authorized_keys: vec![KEY.into()],
            join: Some(join()),
            network: vec![Interface {
                name: "eth0".into(),
                mac: "52:54:00:AA:BB:01".into(),
                dhcp4: false,
                addresses: vec!["10.0.0.7/24".into()],
                gateway4: Some("10.0.0.1".into()),
                nameservers: vec!["10.0.0.2".into()],
            }],
            volume: SeedVolume::VfatPartition,
            extras: SeedExtras::default(),
        }
    }

    #[test]
    fn a_valid_seed_renders_key_only_ssh_sudo_and_the_join() {
        let seed = render(&input()).unwrap();
        assert!(seed.user_data.starts_with("#cloud-config\n"));
        let config: Value = serde_json::from_str(seed.user_data.trim_start_matches("#cloud-config\n")).unwrap();
        assert_eq!((&config["disable_root"], &config["ssh_pwauth"]), (&json!(true), &json!(false)));
        assert_eq!(config["users"][0]["sudo"], "ALL=(ALL) NOPASSWD:ALL");
        assert_eq!(config["users"][0]["lock_passwd"], true);
        let files = config["write_files"].as_array().unwrap();
        let file = |name: &str| files.iter().find(|f| f["path"] == format!("/etc/metal/{name}")).unwrap();
        assert_eq!(file("enrolment-token")["permissions"], "0600");
        assert_eq!(file("enrolment-token")["content"], "tok_0123456789abcdef\n");
        assert_eq!(file("bootstrap")["content"], crate::join::BOOTSTRAP);
        assert_eq!(file("ca.sha256")["content"], format!("{}\n", join().ca_fingerprint));
        assert_eq!(config["runcmd"], json!([["/bin/sh", "/etc/metal/bootstrap"]]));
        let meta: Value = serde_json::from_str(&seed.meta_data).unwrap();
        assert_eq!(meta["local-hostname"], "gpu-07.site-a");
        let net: Value = serde_json::from_str(seed.network_config.as_deref().unwrap()).unwrap();
        assert_eq!(net["ethernets"]["eth0"]["match"]["macaddress"], "52:54:00:aa:bb:01");
    }

    #[test]
    fn a_join_added_to_a_rendered_seed_is_the_join_rendered_with_it() {
        let mut without = input();
        without.join = None;
        let plain = render(&without).unwrap();
        assert!(!plain.user_data.contains("enrolment-token"));
        assert_eq!(with_join(&plain, &join()).unwrap(), render(&input()).unwrap());
        let mut bad_join = join();
        bad_join.token = "x\"; reboot".into();
        assert_eq!(with_join(&plain, &bad_join).unwrap_err().field, "join.token");
    }

    #[test]
    fn nothing_from_a_request_reaches_the_yaml_unchecked() {
        /// A change that makes the input invalid, and the field the error must name.
        type Case = (Box<dyn Fn(&mut SeedInput)>, &'static str);
        let cases: Vec<Case> = vec![
            (Box::new(|i| i.hostname = "evil\nruncmd: [reboot]".into()), "hostname"),
            (Box::new(|i| i.hostname = "-bad.example".into()), "hostname"),
            (Box::new(|i| i.admin_user = "root".into()), "adminUser"),
            (Box::new(|i| i.admin_user = "Ops".into()), "adminUser"),
            (Box::new(|i| i.ssh_authorized_keys = vec![]), "sshAuthorizedKeys"),
            (
                Box::new(|i| i.ssh_authorized_keys = vec!["command=\"sh\" ssh-ed25519 AAAA".into()]),
                "sshAuthorizedKeys[0]",
            ),
            (
                Box::new(|i| {
                    i.ssh_authorized_keys =
                        vec!["ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl".into()]
                }),
                "sshAuthorizedKeys[0]",
            ),
            (Box::new(|i| i.ssh_authorized_keys = vec![format!("{KEY}\u{7}")]), "sshAuthorizedKeys[0]"),
            (Box::new(|i| i.join.as_mut().unwrap().controller_url = "http://metal".into()), "join.controllerUrl"),
            (Box::new(|i| i.join.as_mut().unwrap().token = "short".into()), "join.token"),
            (Box::new(|i| i.join.as_mut().unwrap().token = "tok_0123456789abcdef\"; x".into()), "join.token"),
            (Box::new(|i| i.join.as_mut().unwrap().ca_fingerprint = "AB".repeat(32)), "join.caFingerprint"),
            (Box::new(|i| i.join.as_mut().unwrap().ca_fingerprint = "ab".repeat(32)), "join.caPem"),
            (Box::new(|i| i.join.as_mut().unwrap().ca_pem = "-----BEGIN".into()), "join.caPem"),
            (Box::new(|i| i.join.as_mut().unwrap().install_sha256 = "ab".into()), "join.installSha256"),
            (Box::new(|i| i.network[0].mac = "52:54:00:aa:bb".into()), "network[0].mac"),
            (Box::new(|i| i.network[0].addresses = vec!["10.0.0.7/33".into()]), "network[0].addresses"),
            (Box::new(|i| i.network[0].gateway4 = Some("fe80::1".into())), "network[0].gateway4"),
            (Box::new(|i| i.instance_id = "a b".into()), "instanceId"),
            (Box::new(|i| i.extras.packages = vec!["vim; reboot".into()]), "packages[0]"),
            (Box::new(|i| i.extras.packages = vec!["-o".into()]), "packages[0]"),
            (Box::new(|i| i.extras.timezone = Some("../../etc/shadow".into())), "timezone"),
            (Box::new(|i| i.extras.timezone = Some("Europe/Paris\nruncmd".into())), "timezone"),
            (Box::new(|i| i.extras.ntp_servers = vec!["ok.example".into(), "bad host".into()]), "ntpServers[1]"),
        ];
        for (change, field) in cases {
            let mut bad_input = input();
            change(&mut bad_input);
            let e = render(&bad_input).unwrap_err();
            assert_eq!(e.field, field, "{e}");
        }
    }
}
