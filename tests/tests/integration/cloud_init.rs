//! The rendered cloud-init seed is valid cloud-config by cloud-init's own schema check
//! (`scripts/cloud-init-schema`, Debian's cloud-init unpacked), and the check itself fails a
//! malformed document, so it cannot pass by accident.

use std::path::Path;
use std::process::Command;

use metal_protocol::cloudinit::{FirstBootJoin, Interface, SeedExtras, SeedInput, render};
use metal_protocol::deploy::SeedVolume;

fn schema(file: &Path) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/cloud-init-schema");
    let out = Command::new(script).arg(file).output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn rendered_user_data_passes_cloud_init_schema() {
    let year = std::time::Duration::from_secs(365 * 86400);
    let ca = metal_protocol::SiteCa::create("site-a", std::time::SystemTime::now(), year).unwrap();
    let input = SeedInput {
        instance_id: "node-7-gen-3".into(),
        hostname: "gpu-07".into(),
        admin_user: "ops".into(),
        ssh_authorized_keys: vec![
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ops@example".into(),
        ],
        join: Some(FirstBootJoin {
            controller_url: "https://metal.site-a:8443".into(),
            token: "tok_0123456789abcdef".into(),
            ca_fingerprint: ca.certificate().fingerprint_sha256(),
            ca_pem: ca.certificate().pem(),
            install_sha256: "cd".repeat(32),
        }),
        network: vec![Interface {
            name: "eth0".into(),
            mac: "52:54:00:aa:bb:01".into(),
            dhcp4: true,
            addresses: vec![],
            gateway4: None,
            nameservers: vec![],
        }],
        volume: SeedVolume::VfatPartition,
        extras: SeedExtras {
            packages: vec!["qemu-guest-agent".into(), "nvidia-driver-550".into()],
            timezone: Some("Europe/Paris".into()),
            ntp_servers: vec!["ntp.site-a".into(), "10.0.0.1".into()],
        },
    };
    let seed = render(&input).unwrap();
    assert!(seed.user_data.contains("qemu-guest-agent") && seed.user_data.contains("Europe/Paris"));
    assert!(seed.user_data.contains("/etc/metal/bootstrap"), "the join's files are checked too");
    let dir = tempfile::tempdir().unwrap();
    let user_data = dir.path().join("user-data");
    std::fs::write(&user_data, &seed.user_data).unwrap();
    let (ok, output) = schema(&user_data);
    assert!(ok, "{output}\n{}", seed.user_data);
    assert!(output.contains("Valid cloud-config"), "{output}");

    let broken = dir.path().join("broken");
    std::fs::write(&broken, "#cloud-config\nusers: 5\nssh_pwauth: [1, 2]\n").unwrap();
    let (ok, output) = schema(&broken);
    assert!(!ok, "the schema check passed a malformed document: {output}");
}
