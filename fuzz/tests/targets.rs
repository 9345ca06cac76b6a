//! Every parser that takes bytes from outside, fuzzed from its corpus in `fuzz/corpus/`:
//! DSSE envelopes through the wipe-report intake, canonical JSON, certificates, reports,
//! cloud-init seeds and the seed partition's GPT/MBR editing, TPM event logs, public areas
//! and quotes, image-format detection and decoding, Redfish payloads, and the scheduler's boot query strings, CSV imports, checksum
//! files and durations. No input may panic or grow the heap past `HEAP_LIMIT`.

use std::io::Read as _;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use metal_fuzz::run;
use serde_json::Value;

metal_fuzz::counting_allocator!();

const JSON: &[&[u8]] = &[
    b"null",
    b"true",
    b"-0",
    b"1e309",
    b"18446744073709551616",
    b"\"\\u0000\"",
    b"\"\\ud800\"",
    b"[]",
    b"{}",
    b"\"payload\"",
    b"\"signatures\"",
    b"\"payloadType\"",
    b"\"sig\"",
    b"\"keyid\"",
    b"\"certificates\"",
];

fn json(bytes: &[u8]) -> Option<Value> {
    serde_json::from_slice(bytes).ok()
}

/// A site CA for the intake (created once: key generation is slow).
fn ca() -> &'static metal_protocol::SiteCa {
    static CA: OnceLock<metal_protocol::SiteCa> = OnceLock::new();
    CA.get_or_init(|| metal_protocol::SiteCa::create("fuzz", SystemTime::now(), Duration::from_secs(86400)).unwrap())
}

#[test]
fn dsse_envelopes_through_the_wipe_report_intake() {
    run("dsse_envelope", JSON, |bytes| {
        let Ok(envelope) = metal_protocol::Envelope::from_json(bytes) else { return };
        let _ = envelope.payload_bytes();
        if let Ok(signature) = envelope.single_signature() {
            let _ = signature.certificate_ders();
        }
        let expect =
            metal_protocol::attest::WipeExpectation { node_id: "n1", generation: 1, disks: &[], at: SystemTime::now() };
        let _ = metal_protocol::attest::verify_wipe_report(&envelope, ca().certificate(), &expect);
    });
}

#[test]
fn canonical_json_is_stable_and_reparses_to_the_same_value() {
    run("canonical_json", JSON, |bytes| {
        let Some(value) = json(bytes) else { return };
        let mut first = Vec::new();
        if metal_protocol::canonical::write_value(&value, &mut first).is_err() {
            return;
        }
        let reparsed: Value = serde_json::from_slice(&first).expect("canonical JSON parses");
        let mut second = Vec::new();
        metal_protocol::canonical::write_value(&reparsed, &mut second).unwrap();
        assert_eq!(first, second, "canonicalization is idempotent");
    });
}

#[test]
fn certificates_in_der_and_pem() {
    run("certificate", &[b"-----BEGIN CERTIFICATE-----\n", b"-----END CERTIFICATE-----\n", b"\x30\x82"], |bytes| {
        let _ = metal_protocol::identity::CaCertificate::from_der(bytes);
        let _ = metal_protocol::identity::read_unverified(bytes);
        let _ = ca().certificate().verify(bytes, SystemTime::now());
        let text = String::from_utf8_lossy(bytes);
        let _ = metal_protocol::identity::CaCertificate::from_pem(&text);
        let _ = metal_protocol::identity::certificates_from_pem(&text);
        let _ = metal_protocol::identity::Identity::parse_uri(&text);
    });
}

#[test]
fn wipe_inventory_and_firmware_reports() {
    run("reports", JSON, |bytes| {
        if let Ok(report) = serde_json::from_slice::<metal_protocol::WipeReport>(bytes) {
            let _ = report.passed();
        }
        if let Ok(report) = serde_json::from_slice::<metal_protocol::InventoryReport>(bytes) {
            let _ = report.passed();
        }
        let _ = serde_json::from_slice::<metal_protocol::deploy::DeployPlan>(bytes).map(|p| p.validate());
    });
}

#[test]
fn cloud_init_seeds_and_the_seed_partition() {
    run("cloud_init_seed", JSON, |bytes| {
        let Ok(seed) = serde_json::from_slice::<metal_protocol::deploy::CloudInitSeed>(bytes) else { return };
        if metal_boot::seed::check(&seed).is_ok() {
            let _ = metal_boot::seed::fat_volume(&seed);
        }
    });
}

#[test]
fn profile_values_rendered_into_a_cloud_init_seed() {
    run("seed_input", &[b"\0", b"\n", b"ssh-ed25519 ", b"#cloud-config", b"\"packages\""], |bytes| {
        // NUL-separated: instance id, host name, admin user, SSH keys (one a line), extras (JSON).
        let mut parts = bytes.split(|b| *b == 0).map(|p| String::from_utf8_lossy(p).into_owned());
        let mut next = || parts.next().unwrap_or_default();
        let (instance_id, hostname, admin_user, keys, extras) = (next(), next(), next(), next(), next());
        let input = metal_protocol::cloudinit::SeedInput {
            instance_id,
            hostname,
            admin_user,
            ssh_authorized_keys: keys.lines().map(str::to_owned).collect(),
            join: None,
            network: Vec::new(),
            volume: metal_protocol::deploy::SeedVolume::VfatPartition,
            extras: serde_json::from_str(&extras).unwrap_or_default(),
        };
        if let Ok(seed) = metal_protocol::cloudinit::render(&input) {
            let _ = metal_boot::seed::check(&seed);
        }
    });
}

#[test]
fn lldp_frames_the_commissioning_ramdisk_reads() {
    run("lldp_frame", &[b"\x88\xcc", b"\x81\x00", b"\x02\x07\x04", b"\x00\x00"], |bytes| {
        if let Ok(neighbor) = metal_protocol::lldp::parse(bytes) {
            let _ = neighbor.port_name();
        }
    });
}

#[test]
fn tpm_event_logs_parsed_and_replayed() {
    use metal_protocol::eventlog::{EventLog, HashAlgorithm};
    run(
        "tpm_event_log",
        &[b"Spec ID Event03\0", b"StartupLocality\0", b"\x0b\x00\x20\x00", b"\x03\x00\x00\x00"],
        |bytes| {
            if let Ok(log) = EventLog::parse(bytes) {
                for algorithm in [HashAlgorithm::SHA256, HashAlgorithm::SHA1, HashAlgorithm(0xffff)] {
                    let _ = log.replay(algorithm);
                }
                let _: Vec<String> = log.events.iter().map(|e| e.type_name()).collect();
            }
        },
    );
}

#[test]
fn tpm_public_areas_quotes_and_signatures() {
    use metal_protocol::tpm::{PublicKey, Quote};
    // The first byte picks the structure: 0 a public area, 1 a quote, 2 a signature checked
    // against a real attestation key (swtpm's, in the corpus).
    let ak = PublicKey::parse(&include_bytes!("../corpus/tpm_structures/ak")[1..]).unwrap();
    run("tpm_structures", &[b"\x00\x23\x00\x0b", b"\xff\x54\x43\x47\x80\x18", b"\x00\x18\x00\x0b"], |bytes| {
        let Some((kind, rest)) = bytes.split_first() else { return };
        match kind % 3 {
            0 => {
                if let Ok(key) = PublicKey::parse(rest) {
                    let _ = (key.name(), key.verify(b"message", rest));
                }
            }
            1 => drop(Quote::parse(rest)),
            _ => drop(ak.verify(b"message", rest)),
        }
    });
}

#[test]
fn partition_tables_the_seed_partition_is_added_to() {
    run("partition_table", &[b"EFI PART", b"\x55\xaa", b"\xee"], |bytes| {
        // The first 24 bytes choose the sizes; the rest is the image's head (its table).
        let number =
            |at: usize| u64::from_le_bytes(bytes.get(at..at + 8).and_then(|b| b.try_into().ok()).unwrap_or([0; 8]));
        let (image, disk, sector) =
            (number(0) % (1 << 44), number(8) % (1 << 45), if number(16) % 2 == 0 { 512 } else { 4096 });
        let mut head = bytes.get(24..).unwrap_or_default().to_vec();
        let _ = metal_boot::seed::add_partition(&mut head, image, disk, sector);
    });
}

#[test]
fn image_formats_detected_and_decoded_with_bounded_output() {
    run("image_format", &[b"\x28\xb5\x2f\xfd", b"\xfd7zXZ\x00", b"\x1f\x8b\x08", b"\x5e\x2a\x4d\x18"], |bytes| {
        let format = metal_image::format::detect(bytes);
        if let Ok(decoder) = metal_image::format::decoder(format, std::io::Cursor::new(bytes)) {
            let mut sink = Vec::new();
            let _ = decoder.take(4 << 20).read_to_end(&mut sink);
        }
        let _ = metal_image::seekable::read_seek_table(&mut std::io::Cursor::new(bytes));
    });
}

#[test]
fn redfish_payloads() {
    run("redfish", JSON, |bytes| {
        use metal_bmc::redfish::parse;
        let Some(v) = json(bytes) else { return };
        let _ = (parse::odata_id(&v), parse::members(&v), parse::text(&v), parse::power_state(&v));
        let _ = (parse::reset_action(&v), parse::action_info_reset_types(&v), parse::boot_targets(&v));
        let _ = (parse::identity(&v, Some(&v)), parse::health(&v), parse::temperatures(&v), parse::power_watts(&v));
        let _ = (parse::firmware_component(&v, "/redfish/v1/x"), parse::log_entries(&v, 50), parse::is_cd(&v));
        let _ = (parse::media_status(&v), parse::media_action(&v, "InsertMedia"), parse::needs_reset(&v));
        let _ = parse::task_messages(&v);
    });
}

#[test]
fn boot_query_strings() {
    run("boot_query", &[b"mac=", b"claim=", b"token=", b"%", b"%ff", b"&", b":"], |bytes| {
        let text = String::from_utf8_lossy(bytes);
        let _ = metal_types::model::node::normalize_mac(&text);
        let uri: Result<axum::http::Uri, _> = format!("/boot/ipxe?{text}").parse();
        if let Ok(uri) = uri {
            use axum::extract::Query;
            if let Ok(Query(query)) = Query::<metal_machines::metal::boot::ipxe::ScriptQuery>::try_from_uri(&uri) {
                if let Some(mac) = &query.mac {
                    let _ = metal_types::model::node::normalize_mac(mac);
                }
                if let Some(claim) = &query.claim {
                    let _ =
                        metal_machines::metal::boot::media::claim_in(&format!("http://c/boot/media/{claim}/metal.iso"));
                }
            }
            let _ = Query::<metal_machines::metal::boot::ipxe::FileQuery>::try_from_uri(&uri);
        }
    });
}

#[test]
fn node_imports_checksum_files_and_durations() {
    run("text_inputs", &[b",", b"\"", b"\n", b";", b"=", b"  ", b"SHA256 (", b") = "], |bytes| {
        let text = String::from_utf8_lossy(bytes);
        let _ = metal_api::parse_csv(&text);
        let _ = metal_types::model::image::parse_checksum_file(&text, "image.qcow2");
        let _ = metal_types::duration::parse_duration(&text);
    });
}

/// The harness itself: a panicking input and an unbounded allocation are both caught.
#[test]
#[should_panic(expected = "a panic on the input saved as")]
fn the_harness_reports_a_panicking_input() {
    metal_fuzz::run_seeds("harness-panic", &[b"safe".to_vec()], &[b"boom"], |bytes| {
        assert!(!bytes.windows(4).any(|w| w == b"boom"), "found the bug");
    });
}

#[test]
#[should_panic(expected = "a heap growth of")]
fn the_harness_reports_an_unbounded_allocation() {
    metal_fuzz::run_seeds("harness-heap", &[vec![0xff; 8]], &[], |bytes| {
        // A length field believed as it came: 510 MiB reserved (never touched) for 0xff.
        let claimed = usize::from(bytes.first().copied().unwrap_or(0)) << 21;
        std::hint::black_box(Vec::<u8>::with_capacity(claimed));
    });
}
