//! One real power round trip: sushy-tools' libvirt driver in front of a QEMU domain. What
//! Redfish reports is checked against what libvirt says the QEMU process is doing.

use std::time::Duration;

use metal_bmc::model::{PowerAction, PowerState};
use metal_bmc::redfish::{RedfishBmc, RedfishConfig, Timing};
use metal_bmc::tls::{TlsTrust, parse_fingerprint};
use metal_bmc::{Bmc, Credential};
use metal_tests::emulators::{LibvirtDomain, SUSHY_PASSWORD, Sushy};

#[tokio::test]
async fn power_round_trip_on_a_real_qemu_guest() {
    let domain = LibvirtDomain::define();
    let sushy = Sushy::start_libvirt(&domain.uuid);
    let config = RedfishConfig {
        endpoint: sushy.endpoint.clone(),
        credential: Credential::new("admin", SUSHY_PASSWORD),
        trust: TlsTrust::Fingerprint(parse_fingerprint(&sushy.pki.fingerprint).unwrap()),
        system: Some(domain.uuid.clone()),
        timing: Timing { settle: Duration::from_secs(60), request: Duration::from_secs(60), ..Timing::default() },
    };
    let bmc = RedfishBmc::connect(config).await.unwrap();
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
