//! Measured boot on a QEMU machine with UEFI firmware (OVMF) and a TPM 2.0 (swtpm with an EK
//! certificate): the firmware's event log, read by metal-boot in the ramdisk, replays to the
//! TPM's PCRs; the host's own replay and tpm2-tools' `tpm2_eventlog` (the oracle) agree with
//! both; metal-boot's quote of them verifies, binds the nonce and matches the replayed log;
//! compared with the log of a machine without a NIC, the option ROM's PCR 2 is named, and
//! without its NIC the machine matches it;
//! the boot PCRs are the same boot after boot, and a changed kernel command line moves
//! PCR 9 alone (so the firmware's PCRs can be golden values and the per-boot data cannot).

use std::collections::BTreeMap;
use std::process::Command;

use metal_protocol::eventlog::{EventLog, HashAlgorithm};
use metal_tests::hil::{Console, Guest};

const SCRIPT: &str = "metal-boot measurements --save-log /tmp/event.log; echo \"measurements-exit $?\"\n\
     echo BEGIN log; base64 /tmp/event.log; echo END log\n\
     echo BEGIN pcrs; for i in 0 1 2 3 4 5 6 7 8 9; do echo \"$i $(cat /sys/class/tpm/tpm0/pcr-sha256/$i)\"; done; echo END pcrs\n\
     metal-boot quote --extra-data 6e6f6e6365 > /tmp/evidence.json; echo \"quote-exit $?\"\n\
     echo BEGIN evidence; cat /tmp/evidence.json; echo END evidence\n\
     metal-boot measurements --baseline /baseline.log --pcrs 0,1,2,3,5,6,7; echo \"baseline-exit $?\"";

/// One boot: what metal-boot said, the raw log and the TPM's PCRs as sysfs shows them.
struct Boot {
    console: Console,
    log: Vec<u8>,
    pcrs: BTreeMap<u32, String>,
}

/// The log of a machine like these but without a NIC (the protocol's fixture): every boot
/// compares itself with it on PCRs 0-7 but 4 (the kernel QEMU's `-kernel` loads carries the
/// initrd's size, so PCR 4 differs from the fixture's). It is in every boot's initrd alike
/// (the initrd is measured).
const WITHOUT_NIC: &[u8] = include_bytes!("../../../protocol/testdata/ovmf-2022.11-swtpm.eventlog");

/// Boots the machine with this command line and these extra QEMU arguments.
fn boot(state: &std::path::Path, append: &str, args: &[&str]) -> Boot {
    let guest = Guest::new().uefi().tpm(state).args(args).append(append).file("/baseline.log", WITHOUT_NIC, 0o644);
    let console = guest.script(SCRIPT).run_again_if_stalled();
    assert!(console.finished && console.test_exit() == Some(0), "{}", console.text);
    let encoded: String = console.section("log").expect("the log section").split_whitespace().collect();
    let log = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, encoded).unwrap();
    let pcrs = console
        .section("pcrs")
        .expect("the pcrs section")
        .lines()
        .map(|line| {
            let (pcr, value) = line.trim().split_once(' ').unwrap();
            (pcr.parse().unwrap(), value.to_lowercase())
        })
        .collect();
    Boot { console, log, pcrs }
}

#[test]
fn the_firmwares_event_log_replays_to_the_tpm_and_only_pcr_9_carries_the_boots_own_data() {
    let dir = tempfile::tempdir().unwrap();
    let state = metal_tests::tpm::manufacture(&dir.path().join("tpm"));
    let first = boot(&state, "metal.note=one", &[]);

    // metal-boot in the ramdisk: every boot PCR accounted for by the log.
    let text = &first.console.text;
    assert!(text.contains("measurements-exit 0"), "{text}");
    for pcr in 0..=9 {
        assert!(text.contains(&format!("PCR {pcr:>2} sha256 ")), "PCR {pcr} missing:\n{text}");
    }
    assert!(!text.contains("DIFFERS"), "{text}");

    // The host's replay of the same bytes gives what the TPM held, and OVMF measured into it.
    let log = EventLog::parse(&first.log).unwrap();
    let replayed: BTreeMap<u32, String> =
        log.replay(HashAlgorithm::SHA256).unwrap().into_iter().map(|(pcr, v)| (pcr, hex::encode(v))).collect();
    for (pcr, value) in &replayed {
        assert_eq!(first.pcrs.get(pcr), Some(value), "PCR {pcr}");
    }
    assert!(replayed.get(&0).is_some_and(|v| v.chars().any(|c| c != '0')), "OVMF measured nothing into PCR 0");
    assert!(log.events.iter().any(|e| e.pcr == 9 && e.data.windows(12).any(|w| w == b"Linux initrd")));

    // The oracle: tpm2-tools computes the same values from the same log.
    let file = dir.path().join("event.log");
    std::fs::write(&file, &first.log).unwrap();
    let output = Command::new("tpm2_eventlog").arg(&file).output().expect("tpm2_eventlog (scripts/setup-hil)");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let yaml = String::from_utf8_lossy(&output.stdout);
    let oracle: BTreeMap<u32, String> = yaml
        .split("sha256:")
        .last()
        .unwrap()
        .lines()
        .filter_map(|line| {
            let (pcr, value) = line.split_once(':')?;
            Some((pcr.trim().parse().ok()?, value.trim().trim_start_matches("0x").to_owned()))
        })
        .collect();
    assert_eq!(oracle, replayed, "tpm2_eventlog disagrees:\n{yaml}");

    // The ramdisk's boot evidence: a quote by the TPM's attestation key of exactly these
    // values, binding the nonce, that the log replays to; the EK certificate with it.
    assert!(text.contains("quote-exit 0"), "{text}");
    let evidence: metal_protocol::measurement::BootEvidence =
        serde_json::from_str(&first.console.section("evidence").unwrap()).unwrap();
    let verified = evidence.verify(b"nonce").unwrap();
    let quoted: BTreeMap<u32, String> = verified.pcrs.iter().map(|(pcr, v)| (*pcr, hex::encode(v))).collect();
    assert_eq!(quoted, first.pcrs);
    assert!(evidence.keys.ek_certificate.is_some());

    // Against the log of a machine without a NIC, the NIC's option ROM (PCR 2) is named.
    assert!(text.contains("against the baseline: PCR 2 differs (event") && text.contains("baseline-exit 1"), "{text}");

    // The same machine booted again: the same values. Another command line: PCR 9 alone
    // moves. Without its NIC, its firmware PCRs match the NIC-less machine's baseline.
    let again = boot(&state, "metal.note=one", &[]);
    assert_eq!(again.pcrs, first.pcrs);
    let other = boot(&state, "metal.note=two", &[]);
    let moved: Vec<u32> = (0..=9).filter(|pcr| other.pcrs[pcr] != first.pcrs[pcr]).collect();
    assert_eq!(moved, vec![9], "{:?}\n{:?}", first.pcrs, other.pcrs);
    let without_nic = boot(&state, "metal.note=one", &["-net", "none"]);
    let text = &without_nic.console.text;
    assert!(text.contains("PCRs 0,1,2,3,5,6,7 match the baseline\nbaseline-exit 0"), "{text}");
}
