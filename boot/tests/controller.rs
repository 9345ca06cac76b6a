//! metal-boot's controller client against a test controller that speaks the same protocol
//! over real TLS: the server's certificate comes from the site CA, the ramdisk trusts only
//! that CA's fingerprint, joins with a one-time token (a reused token is refused, a busy
//! controller is retried), receives a `ramdisk` certificate for its in-memory key, and posts
//! a signed report over mutual TLS, which the controller verifies against the CA; images
//! on the controller are fetched with the ramdisk's certificate, images elsewhere without.

use std::time::Duration;

use metal_boot::controller::{ControllerError, Retry, join};
use metal_protocol::{Envelope, InventoryReport, Role, SigningKey};
use metal_tests::controller::TestController;

fn quick() -> Retry {
    Retry { attempts: 4, backoff: Duration::from_millis(20) }
}

fn report(node: &str) -> InventoryReport {
    metal_boot::report::collect(
        &metal_protocol::inventory::SystemPaths::under(std::path::Path::new("/nonexistent")),
        node,
        None,
    )
}

#[test]
fn join_then_post_a_signed_report_over_mutual_tls() {
    let controller = TestController::start(&["tok_0123456789abcdef"], 2, &[]);
    let joined = join(&controller.url, &controller.fingerprint, "tok_0123456789abcdef", quick()).unwrap();
    let identity = joined.identity().identity().clone();
    assert_eq!((identity.node.as_str(), identity.generation, identity.role), ("node-9", 2, Role::Ramdisk));
    let receipt = joined.post_report(InventoryReport::PAYLOAD_TYPE, &report("node-9")).unwrap();
    assert!(receipt.accepted);
    let state = controller.state.lock().unwrap();
    assert_eq!(state.busy_joins, 0, "the busy answers were retried");
    let (who, payload_type, payload) = &state.reports[0];
    assert_eq!(
        (who, payload_type.as_str(), payload["nodeId"].as_str()),
        (&identity, InventoryReport::PAYLOAD_TYPE, Some("node-9"))
    );
}

#[test]
fn a_used_token_a_wrong_ca_and_plain_http_are_refused() {
    let controller = TestController::start(&["tok_0123456789abcdef"], 0, &[]);
    join(&controller.url, &controller.fingerprint, "tok_0123456789abcdef", quick()).unwrap();
    let e = join(&controller.url, &controller.fingerprint, "tok_0123456789abcdef", quick()).unwrap_err();
    assert!(
        matches!(&e, ControllerError::Refused { status: 403, message, .. } if message.contains("already used")),
        "{e}"
    );
    let e = join(&controller.url, &"ab".repeat(32), "tok_0123456789abcdef", quick()).unwrap_err();
    assert!(e.to_string().contains("does not include the pinned CA"), "{e}");
    let e = join(&controller.url.replace("https", "http"), &controller.fingerprint, "t", quick()).unwrap_err();
    assert!(e.to_string().contains("must be https://"), "{e}");
    // A report without the ramdisk certificate (no mutual TLS) is refused.
    let pin = metal_bmc::tls::parse_fingerprint(&controller.fingerprint).unwrap();
    let anonymous =
        metal_bmc::tls::http_client(&metal_bmc::tls::TlsTrust::CaFingerprint(pin), Duration::from_secs(10)).unwrap();
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    let envelope = Envelope::sign_json(
        InventoryReport::PAYLOAD_TYPE,
        &report("node-9"),
        &metal_protocol::Signer::new(key, vec![]),
    )
    .unwrap();
    let status = tokio::runtime::Runtime::new().unwrap().block_on(async {
        anonymous
            .post(format!("{}{}", controller.url, metal_protocol::boot::REPORTS_PATH))
            .json(&envelope)
            .send()
            .await
            .unwrap()
            .status()
    });
    assert_eq!(status, 401);
    assert!(controller.state.lock().unwrap().reports.is_empty());
}

#[test]
fn controller_images_are_fetched_with_the_ramdisk_certificate_and_no_other_images_are() {
    use std::io::Read as _;
    let controller = TestController::start(&["tok_0123456789abcdef"], 0, &[]);
    let image: Vec<u8> = (0..300_000u32).flat_map(|i| i.to_le_bytes()).collect();
    controller.state.lock().unwrap().files.insert("disk.img".into(), image.clone());
    let joined = join(&controller.url, &controller.fingerprint, "tok_0123456789abcdef", quick()).unwrap();
    let url = format!("{}/images/disk.img", controller.url);
    let fetch = joined.image_fetch(&url);
    assert!(fetch.identity.is_some() && fetch.ca_fingerprint.is_some(), "{fetch:?}");
    let port = controller.port;
    for elsewhere in [
        "https://images.example/disk.img".to_owned(),
        format!("https://localhost:{port}/images/disk.img"),
        format!("https://127.0.0.1:{}/images/disk.img", port + 1),
        format!("http://127.0.0.1:{port}/images/disk.img"),
        format!("https://127.0.0.1:{port}@images.example/disk.img"),
        "not a URL".to_owned(),
    ] {
        let other = joined.image_fetch(&elsewhere);
        assert!(other.identity.is_none(), "{elsewhere} would get the ramdisk's certificate");
        assert_eq!(other.ca_fingerprint, fetch.ca_fingerprint, "{elsewhere}");
    }
    // Over mutual TLS, the image arrives whole.
    let mut source = metal_boot::source::HttpSource::open(&url, image.len() as u64, &fetch).unwrap();
    let mut got = Vec::new();
    source.read_to_end(&mut got).unwrap();
    assert!(got == image, "the image did not arrive whole");
}
