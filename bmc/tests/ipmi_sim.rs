//! The IPMI client against OpenIPMI's ipmi_sim: power round trips read back, boot device,
//! read model, password rotation (proved by logging in with it; a refused one leaves the
//! old password current), authentication errors, and the password never in ipmitool's argv.

use std::os::unix::fs::PermissionsExt as _;

use metal_bmc::ipmi::{IpmiBmc, IpmiConfig};
use metal_bmc::model::{BootPersistence, BootTarget, PowerAction, PowerState, Section};
use metal_bmc::{Bmc, BmcError, Credential, Secret};
use metal_tests::emulators::IpmiSim;

fn bmc(sim: &IpmiSim, user: &str, password: &str) -> IpmiBmc {
    let mut config = IpmiConfig::new("127.0.0.1", sim.port, Credential::new(user, password));
    config.settle = std::time::Duration::from_secs(10);
    if user == "viewer" {
        config.privilege = "USER".into();
    }
    IpmiBmc::new(config)
}

#[tokio::test]
async fn power_round_trips_are_idempotent_and_read_back() {
    let sim = IpmiSim::start();
    let bmc = bmc(&sim, "admin", "password");
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::Off);
    // Reset of a stopped machine powers it on.
    let reset = bmc.power(PowerAction::Reset).await.unwrap();
    assert_eq!((reset.sent.as_slice(), reset.after), (&["on".to_owned()][..], PowerState::On));
    assert!(bmc.power(PowerAction::On).await.unwrap().sent.is_empty());
    let cycle = bmc.power(PowerAction::Cycle).await.unwrap();
    assert_eq!(cycle.sent, ["cycle"]);
    assert_eq!(cycle.after, PowerState::On);
    let off = bmc.power(PowerAction::Off).await.unwrap();
    assert_eq!((off.sent.as_slice(), off.after), (&["off".to_owned()][..], PowerState::Off));
    assert!(bmc.power(PowerAction::Off).await.unwrap().sent.is_empty());
    let log = sim.chassis_log();
    assert!(log.starts_with("power 1\n"), "{log}");
    assert!(log.ends_with("power 0\n"), "{log}");
}

#[tokio::test]
async fn boot_device_and_read_model() {
    let sim = IpmiSim::start();
    let bmc = bmc(&sim, "admin", "password");
    bmc.set_boot(BootTarget::Pxe, BootPersistence::Once).await.unwrap();
    assert_eq!(std::fs::read_to_string(sim.dir.path().join("bootdev")).unwrap().trim(), "pxe");
    bmc.set_boot(BootTarget::Disk, BootPersistence::Persistent).await.unwrap();
    let e = bmc.insert_media("http://x/y.iso").await.unwrap_err();
    assert!(matches!(e, BmcError::Unsupported { .. }), "{e}");
    let model = bmc.read_model().await.unwrap();
    assert_eq!(model.identity.present().unwrap().bmc_version.as_deref(), Some("9.08"));
    assert_eq!(model.firmware.present().unwrap()[0].version, "9.08");
    assert!(matches!(model.health, Section::Absent(_)));
    assert!(matches!(model.power_watts, Section::Absent(_)), "{:?}", model.power_watts);
    assert_eq!(model.power, Section::Present(PowerState::Off));
}

#[tokio::test]
async fn rotation_is_proved_and_a_refused_one_keeps_the_old_password() {
    let sim = IpmiSim::start();
    let admin = bmc(&sim, "admin", "password");
    admin.rotate_password("admin", &Secret::new("n3w-Passw0rd")).await.unwrap();
    // The handle now uses the new password, and the old one no longer logs in.
    admin.power_state().await.unwrap();
    let e = bmc(&sim, "admin", "password").power_state().await.unwrap_err();
    assert!(matches!(e, BmcError::Unauthorized { .. }), "{e}");
    // A user-privilege account may not set passwords: the BMC refuses, the old one stays.
    let viewer = bmc(&sim, "viewer", "viewpass");
    let e = viewer.rotate_password("viewer", &Secret::new("other-pass")).await.unwrap_err();
    assert!(matches!(e, BmcError::Refused { .. }), "{e}");
    assert!(!e.to_string().contains("other-pass"), "{e}");
    bmc(&sim, "viewer", "viewpass").power_state().await.unwrap();
    // Unknown users and unusable passwords are named before anything is sent.
    let e = admin.rotate_password("nobody", &Secret::new("x")).await.unwrap_err();
    assert!(e.to_string().contains("no IPMI user named nobody"), "{e}");
    let e = admin.rotate_password("admin", &Secret::new("has space")).await.unwrap_err();
    assert!(matches!(e, BmcError::Invalid(_)), "{e}");
}

/// A wrapper around the real ipmitool (`body` runs first with the arguments in "$@").
fn wrapper(dir: &std::path::Path, body: &str) -> std::path::PathBuf {
    let path = dir.join("ipmitool");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\nexec ipmitool \"$@\"\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test]
async fn a_bmc_that_rejects_cycle_and_reset_is_cycled_off_and_on() {
    let sim = IpmiSim::start();
    let dir = tempfile::tempdir().unwrap();
    let refuse = r#"case "$*" in *"power cycle"*|*"power reset"*) echo "Chassis Power Control: failed: Invalid command" >&2; exit 1;; esac"#;
    let mut config = IpmiConfig::new("127.0.0.1", sim.port, Credential::new("admin", "password"));
    config.tool = wrapper(dir.path(), refuse);
    let bmc = IpmiBmc::new(config);
    bmc.power(PowerAction::On).await.unwrap();
    let cycle = bmc.power(PowerAction::Cycle).await.unwrap();
    assert_eq!(cycle.sent, ["cycle (refused)", "reset (refused)", "off", "on"]);
    assert_eq!(cycle.after, PowerState::On);
    assert_eq!(sim.chassis_log(), "power 1\npower 0\npower 1\n");
}

#[tokio::test]
async fn passwords_never_reach_ipmitools_argv() {
    let sim = IpmiSim::start();
    let dir = tempfile::tempdir().unwrap();
    // A wrapper that records each run's argv, then runs the real ipmitool.
    let record = dir.path().join("argv.log");
    let mut config = IpmiConfig::new("127.0.0.1", sim.port, Credential::new("admin", "password"));
    config.tool = wrapper(dir.path(), &format!("echo \"$@\" >> {}", record.display()));
    let bmc = IpmiBmc::new(config);
    bmc.power(PowerAction::On).await.unwrap();
    bmc.rotate_password("admin", &Secret::new("s3cret-rotated")).await.unwrap();
    bmc.power(PowerAction::Off).await.unwrap();
    let argv = std::fs::read_to_string(&record).unwrap();
    assert!(argv.lines().count() >= 6, "{argv}");
    assert!(argv.lines().all(|l| l.contains(" -E ")), "{argv}");
    assert!(!argv.contains("password") && !argv.contains("s3cret-rotated"), "{argv}");
}
