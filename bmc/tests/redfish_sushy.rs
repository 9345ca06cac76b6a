//! The Redfish client against sushy-tools (fake driver, TLS, basic auth): discovery, power
//! with read-back and reset types chosen from what the BMC allows, boot override, virtual
//! media, the read model with absent sections, TLS pinning and authentication failures.

use std::time::Duration;

use metal_bmc::model::{BootPersistence, BootTarget, PowerAction, PowerState, Section};
use metal_bmc::redfish::{RedfishBmc, RedfishConfig, Timing};
use metal_bmc::tls::{TlsTrust, parse_fingerprint};
use metal_bmc::{Bmc, BmcError, Credential};
use metal_tests::emulators::{Files, SUSHY_PASSWORD, Sushy};

fn config(sushy: &Sushy, trust: TlsTrust, password: &str) -> RedfishConfig {
    RedfishConfig {
        endpoint: sushy.endpoint.clone(),
        credential: Credential::new("admin", password),
        trust,
        system: None,
        timing: Timing { settle: Duration::from_secs(40), poll: Duration::from_millis(250), ..Timing::default() },
    }
}

async fn connect(sushy: &Sushy) -> RedfishBmc {
    let pin = parse_fingerprint(&sushy.pki.fingerprint).unwrap();
    RedfishBmc::connect(config(sushy, TlsTrust::Fingerprint(pin), SUSHY_PASSWORD)).await.unwrap()
}

#[tokio::test]
async fn power_round_trip_reads_back_and_cycles_without_power_cycle() {
    let sushy = Sushy::start();
    let bmc = connect(&sushy).await;
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::Off);
    let on = bmc.power(PowerAction::On).await.unwrap();
    assert_eq!((on.before, on.after, on.sent.as_slice()), (PowerState::Off, PowerState::On, &["On".to_owned()][..]));
    // Idempotent: on for a running machine sends nothing.
    assert!(bmc.power(PowerAction::On).await.unwrap().sent.is_empty());
    // sushy lists no PowerCycle: a cycle is ForceOff then On, each read back.
    let cycle = bmc.power(PowerAction::Cycle).await.unwrap();
    assert_eq!(cycle.sent, ["ForceOff", "On"]);
    assert_eq!(cycle.after, PowerState::On);
    let reset = bmc.power(PowerAction::Reset).await.unwrap();
    assert_eq!((reset.sent.as_slice(), reset.after), (&["ForceRestart".to_owned()][..], PowerState::On));
    let off = bmc.power(PowerAction::Off).await.unwrap();
    assert_eq!((off.sent.as_slice(), off.after), (&["ForceOff".to_owned()][..], PowerState::Off));
    assert!(bmc.power(PowerAction::Off).await.unwrap().sent.is_empty());
}

#[tokio::test]
async fn boot_override_is_read_back_and_unlisted_targets_are_refused() {
    let sushy = Sushy::start();
    let bmc = connect(&sushy).await;
    bmc.set_boot(BootTarget::Pxe, BootPersistence::Once).await.unwrap();
    bmc.set_boot(BootTarget::Cd, BootPersistence::Persistent).await.unwrap();
    let e = bmc.set_boot(BootTarget::Bios, BootPersistence::Once).await.unwrap_err();
    assert!(matches!(e, BmcError::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("BiosSetup is not allowed (Pxe, Cd, Hdd"), "{e}");
}

#[tokio::test]
async fn virtual_media_inserts_reads_back_and_ejects() {
    let sushy = Sushy::start();
    let files = Files::start();
    std::fs::write(files.dir.path().join("boot.iso"), vec![0u8; 64 << 10]).unwrap();
    let url = format!("{}/boot.iso", files.url);
    let bmc = connect(&sushy).await;
    assert!(!bmc.media_status().await.unwrap().inserted);
    bmc.insert_media(&url).await.unwrap();
    let status = bmc.media_status().await.unwrap();
    assert!(status.inserted);
    assert_eq!(status.image.as_deref(), Some(url.as_str()));
    // Inserting the same image again is a no-op; ejecting twice too.
    bmc.insert_media(&url).await.unwrap();
    bmc.eject_media().await.unwrap();
    assert!(!bmc.media_status().await.unwrap().inserted);
    bmc.eject_media().await.unwrap();
}

#[tokio::test]
async fn the_read_model_lists_what_the_bmc_lacks_as_absent() {
    let sushy = Sushy::start();
    let bmc = connect(&sushy).await;
    let model = bmc.read_model().await.unwrap();
    let identity = model.identity.present().unwrap();
    assert_eq!(identity.manufacturer.as_deref(), Some("Sushy Emulator"));
    assert_eq!(identity.bmc_version.as_deref(), Some("1.00"));
    assert_eq!(model.health, Section::Present("OK".into()));
    assert_eq!(model.power, Section::Present(PowerState::Off));
    let temps = model.temperatures.present().unwrap();
    assert!(temps.iter().any(|t| t.name == "CPU Temp" && t.celsius == 41.0), "{temps:?}");
    assert!(matches!(model.power_watts, Section::Absent(_)), "{:?}", model.power_watts);
    assert!(matches!(&model.firmware, Section::Absent(m) if m.contains("FirmwareInventory")), "{:?}", model.firmware);
    assert!(matches!(model.logs, Section::Absent(_)));
    // No AccountService on this BMC: rotation is unsupported, not a crash.
    let e = bmc.rotate_password("admin", &metal_bmc::Secret::new("new-password")).await.unwrap_err();
    assert!(e.to_string().contains("no AccountService"), "{e}");
    // A finished task is followed to its end.
    bmc.transport().follow_task("probe", "/redfish/v1/TaskService/Tasks/42").await.unwrap();
}

#[tokio::test]
async fn tls_trust_is_pinned_and_bad_credentials_are_named() {
    let sushy = Sushy::start();
    // The CA that issued the BMC's certificate: accepted (hostname 127.0.0.1 checked).
    RedfishBmc::connect(config(&sushy, TlsTrust::Ca(sushy.pki.ca_pem.clone()), SUSHY_PASSWORD)).await.unwrap();
    // Another CA, or another fingerprint: refused as a TLS error.
    let dir = tempfile::tempdir().unwrap();
    let other = metal_tests::emulators::pki(dir.path(), "other");
    let e = RedfishBmc::connect(config(&sushy, TlsTrust::Ca(other.ca_pem), SUSHY_PASSWORD)).await.unwrap_err();
    assert!(matches!(e, BmcError::Tls { .. }), "{e}");
    let e = RedfishBmc::connect(config(&sushy, TlsTrust::Fingerprint([7; 32]), SUSHY_PASSWORD)).await.unwrap_err();
    assert!(matches!(e, BmcError::Tls { .. }) && e.to_string().contains("not the pinned"), "{e}");
    // Explicitly insecure works, and a wrong password is Unauthorized without the password.
    RedfishBmc::connect(config(&sushy, TlsTrust::InsecureSkipVerify, SUSHY_PASSWORD)).await.unwrap();
    let e = RedfishBmc::connect(config(&sushy, TlsTrust::InsecureSkipVerify, "wrong-secret")).await.unwrap_err();
    assert!(matches!(e, BmcError::Unauthorized { .. }), "{e}");
    assert!(!e.to_string().contains("wrong-secret"));
}
