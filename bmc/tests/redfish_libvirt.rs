//! One real power round trip: sushy-tools' libvirt driver in front of a QEMU domain. What
//! Redfish reports is checked against what libvirt says the QEMU process is doing.

use std::time::Duration;

use metal_bmc::model::{PowerAction, PowerState};
use metal_bmc::redfish::{RedfishBmc, RedfishConfig, Timing};
use metal_bmc::tls::{TlsTrust, parse_fingerprint};
use metal_bmc::{Bmc, Credential};
use metal_tests::emulators::{LibvirtDomain, SUSHY_PASSWORD, Sushy};

async fn bmc_of(domain: &LibvirtDomain, sushy: &Sushy) -> RedfishBmc {
    let config = RedfishConfig {
        endpoint: sushy.endpoint.clone(),
        credential: Credential::new("admin", SUSHY_PASSWORD),
        trust: TlsTrust::Fingerprint(parse_fingerprint(&sushy.pki.fingerprint).unwrap()),
        system: Some(domain.uuid.clone()),
        timing: Timing { settle: Duration::from_secs(60), request: Duration::from_secs(60), ..Timing::default() },
    };
    RedfishBmc::connect(config).await.unwrap()
}

#[tokio::test]
async fn power_round_trip_on_a_real_qemu_guest() {
    let domain = LibvirtDomain::define();
    let sushy = Sushy::start_libvirt(&domain.uuid);
    let bmc = bmc_of(&domain, &sushy).await;
    assert_eq!(bmc.power_state().await.unwrap(), PowerState::Off);
    assert_eq!(domain.state(), "shut off");
    let on = bmc.power(PowerAction::On).await.unwrap();
    assert_eq!((on.sent.as_slice(), on.after), (&["On".to_owned()][..], PowerState::On));
    assert_eq!(domain.state(), "running");
    let cycle = bmc.power(PowerAction::Cycle).await.unwrap();
    assert_eq!(cycle.after, PowerState::On);
    assert_eq!(domain.state(), "running");
    let off = bmc.power(PowerAction::Off).await.unwrap();
    assert_eq!((off.sent.as_slice(), off.after), (&["ForceOff".to_owned()][..], PowerState::Off));
    assert_eq!(domain.state(), "shut off");
}

/// sushy-tools keeps BIOS attributes in the domain's libvirt metadata and applies a PATCH at
/// once (a real BMC holds it for the next boot), so nothing reads as pending here.
#[tokio::test]
async fn bios_attributes_are_read_written_and_reset_to_defaults() {
    let domain = LibvirtDomain::define();
    let sushy = Sushy::start_libvirt(&domain.uuid);
    let bmc = bmc_of(&domain, &sushy).await;
    let defaults = bmc.bios().await.unwrap();
    assert_eq!(defaults.current["ProcTurboMode"], "Enabled", "{defaults:?}");
    assert_eq!(defaults.registry.as_deref(), Some("BiosAttributeRegistryP89.v1_0_0"));
    assert!(defaults.pending.is_empty(), "{defaults:?}");
    let changed = [("ProcTurboMode".to_owned(), serde_json::json!("Disabled"))].into();
    bmc.set_bios(&changed).await.unwrap();
    let after = bmc.bios().await.unwrap();
    assert_eq!(after.current["ProcTurboMode"], "Disabled");
    assert!(domain.xml().contains("ProcTurboMode"), "kept in the domain: {}", domain.xml());
    bmc.reset_bios().await.unwrap();
    assert_eq!(bmc.bios().await.unwrap().current, defaults.current, "the vendor's defaults again");
}

/// Secure Boot through sushy's libvirt driver: on moves the domain to VARS with keys enrolled
/// (a fresh NVRAM file from that template) and marks its loader secure; off moves it back.
#[tokio::test]
async fn secure_boot_is_turned_on_and_off_in_the_domains_firmware() {
    let domain = LibvirtDomain::define_uefi();
    let sushy = Sushy::start_libvirt(&domain.uuid);
    let bmc = bmc_of(&domain, &sushy).await;
    assert!(!bmc.secure_boot().await.unwrap().enabled);
    bmc.set_secure_boot(true).await.unwrap();
    let on = bmc.secure_boot().await.unwrap();
    assert!(on.enabled, "{on:?}");
    let xml = domain.xml();
    assert!(xml.contains("secure='yes'") && xml.contains("OVMF_VARS_4M.ms.fd"), "{xml}");
    bmc.set_secure_boot(false).await.unwrap();
    assert!(!bmc.secure_boot().await.unwrap().enabled);
    assert!(domain.xml().contains("template='/usr/share/OVMF/OVMF_VARS_4M.fd'"), "{}", domain.xml());
}
