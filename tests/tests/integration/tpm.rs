//! The ramdisk's TPM client (`metal_boot::tpm`) against swtpm, a TPM manufactured like a real
//! one (an EK certificate from swtpm's local CA): the EK it recreates is the key its
//! certificate certifies, the attestation key is the same key every time, and its quotes
//! verify with `metal_protocol::tpm` and with tpm2-tools' `tpm2_checkquote` (the oracle).

use std::process::Command;

use metal_boot::tpm::{EK_CERT_RSA_INDEX, RH_ENDORSEMENT, Tpm};
use metal_protocol::tpm::{KeyMaterial, Quote, TpmError, ak_template, attributes, ek_rsa_template, pcr_digest};
use x509_parser::public_key::PublicKey as CertKey;

use metal_tests::tpm::{LOCAL_CA, local_ca_bundle};

#[test]
fn the_ek_is_the_certified_key_the_ak_is_the_same_every_time_and_its_quotes_verify() {
    let dir = tempfile::tempdir().unwrap();
    let state = metal_tests::tpm::manufacture(&dir.path().join("state"));
    let swtpm = metal_tests::tpm::Swtpm::start_bare(&state, dir.path());
    let mut tpm = Tpm::new(swtpm.connect());

    // The EK certificate from NV certifies the EK the TCG template recreates.
    let certificate = tpm.nv_read(EK_CERT_RSA_INDEX).unwrap();
    let ek = tpm.create_primary(RH_ENDORSEMENT, &ek_rsa_template()).unwrap();
    let (_, parsed) = x509_parser::parse_x509_certificate(&certificate).unwrap();
    let Ok(CertKey::RSA(certified)) = parsed.public_key().parsed() else { panic!("not an RSA EK certificate") };
    let KeyMaterial::Rsa { modulus, exponent } = &ek.public.key else { panic!("not an RSA EK") };
    assert_eq!(
        certified.modulus.iter().skip_while(|b| **b == 0).collect::<Vec<_>>(),
        modulus.iter().collect::<Vec<_>>()
    );
    assert_eq!(*exponent, 65537);
    assert!(ek.public.has(attributes::FIXED_TPM | attributes::RESTRICTED | attributes::DECRYPT));
    // ... and chains to swtpm's local CA (openssl as the oracle).
    let pem = dir.path().join("ek.pem");
    let der = dir.path().join("ek.der");
    std::fs::write(&der, &certificate).unwrap();
    let convert = Command::new("openssl")
        .args(["x509", "-inform", "der", "-in"])
        .arg(&der)
        .arg("-out")
        .arg(&pem)
        .status()
        .unwrap();
    assert!(convert.success());
    let verify = Command::new("openssl")
        .args(["verify", "-CAfile", &format!("{LOCAL_CA}/swtpm-localca-rootca-cert.pem")])
        .args(["-untrusted", &format!("{LOCAL_CA}/issuercert.pem")])
        .arg(&pem)
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );

    // ... and metal's own check agrees: the chain from the EK certificate through swtpm's
    // intermediate to its root, and it certifies this EK; without the intermediate, or for
    // another EK, it is refused.
    let bundle = std::fs::read_to_string(local_ca_bundle(dir.path(), true)).unwrap();
    let cas = metal_protocol::identity::certificates_from_pem(&bundle).unwrap();
    let chain = metal_protocol::ekcert::verify(&certificate, &ek.public, &cas).unwrap();
    assert_eq!(chain.len(), 3, "{chain:?}");
    assert!(chain[2].contains("swtpm-localca-rootca"), "{chain:?}");
    let error = metal_protocol::ekcert::verify(&certificate, &ek.public, &cas[..1]).unwrap_err();
    assert!(error.contains("no trusted TPM CA named CN=swtpm-localca"), "{error}");
    let ak_as_ek = tpm.create_primary(RH_ENDORSEMENT, &ak_template()).unwrap();
    let error = metal_protocol::ekcert::verify(&certificate, &ak_as_ek.public, &cas).unwrap_err();
    assert!(error.contains("certifies another key"), "{error}");
    tpm.flush(ak_as_ek.handle).unwrap();

    // The attestation key: the same key from the same seed, restricted to signing TPM data.
    let ak = tpm.create_primary(RH_ENDORSEMENT, &ak_template()).unwrap();
    tpm.flush(ak.handle).unwrap();
    let ak_again = tpm.create_primary(RH_ENDORSEMENT, &ak_template()).unwrap();
    assert_eq!(ak.public, ak_again.public);
    assert!(ak.public.has(attributes::FIXED_TPM | attributes::RESTRICTED | attributes::SIGN));

    // A quote of PCRs 0-9 binds the nonce and the PCRs' values (all reset on this bare TPM).
    let nonce = [7u8; 32];
    let pcrs: Vec<u32> = (0..=9).collect();
    let (attest, signature) = tpm.quote(ak_again.handle, &nonce, &pcrs).unwrap();
    ak.public.verify(&attest, &signature).unwrap();
    let quote = Quote::parse(&attest).unwrap();
    assert_eq!(quote.extra_data, nonce);
    assert_eq!(quote.signer, ak.public.primary_qualified_name(RH_ENDORSEMENT));
    assert_eq!(quote.pcrs, pcrs);
    assert_eq!(quote.pcr_digest, pcr_digest(&[&[0u8; 32][..]; 10]));
    let mut forged = attest.clone();
    *forged.last_mut().unwrap() ^= 1;
    assert_eq!(ak.public.verify(&forged, &signature), Err(TpmError::BadSignature));
    assert_eq!(ek.public.verify(&attest, &signature).map_err(|e| matches!(e, TpmError::Unsupported(_))), Err(true));

    // The oracle: tpm2_checkquote verifies the same quote, nonce and key.
    let file = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let tpm2b_public = [&u16::try_from(ak.public.bytes.len()).unwrap().to_be_bytes()[..], &ak.public.bytes].concat();
    let output = Command::new("tpm2_checkquote")
        .arg("-u")
        .arg(file("ak.pub", &tpm2b_public))
        .arg("-m")
        .arg(file("quote.msg", &attest))
        .arg("-s")
        .arg(file("quote.sig", &signature))
        .args(["-q", &hex::encode(nonce), "-g", "sha256"])
        .output()
        .expect("tpm2_checkquote (scripts/setup-hil installs tpm2-tools)");
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn boot_evidence_verifies_only_for_its_challenge_and_its_own_log() {
    use metal_protocol::measurement::{EvidenceRefusal, binding};
    let dir = tempfile::tempdir().unwrap();
    let state = metal_tests::tpm::manufacture(&dir.path().join("state"));
    let swtpm = metal_tests::tpm::Swtpm::start_bare(&state, dir.path());
    let mut tpm = Tpm::new(swtpm.connect());
    let extra = binding(b"nonce-1", b"secret", b"ramdisk-key");
    let evidence = metal_boot::measured::evidence(&mut tpm, &extra, metal_tests::tpm::empty_event_log()).unwrap();
    assert!(evidence.keys.ek_certificate.is_some());

    let verified = evidence.verify(&extra).unwrap();
    assert_eq!(verified.pcrs.len(), 10);
    assert!(verified.pcrs.values().all(|v| v == &[0u8; 32]));
    // JSON round trip (the wire form).
    let wire: metal_protocol::measurement::BootEvidence =
        serde_json::from_str(&serde_json::to_string(&evidence).unwrap()).unwrap();
    assert_eq!(wire, evidence);

    // Another challenge's binding, a log of another boot, a signature over other bytes.
    assert_eq!(
        evidence.verify(&binding(b"nonce-2", b"secret", b"ramdisk-key")).unwrap_err(),
        EvidenceRefusal::WrongChallenge
    );
    let other_log = metal_protocol::measurement::BootEvidence {
        event_log: include_bytes!("../../../protocol/testdata/ovmf-2022.11-swtpm.eventlog").to_vec(),
        ..evidence.clone()
    };
    assert_eq!(other_log.verify(&extra).unwrap_err(), EvidenceRefusal::LogDoesNotReplay);
    let mut forged = evidence.clone();
    forged.attest[20] ^= 1;
    assert_eq!(forged.verify(&extra).unwrap_err(), EvidenceRefusal::BadSignature);
    // The EK cannot stand in for the attestation key (it is a decryption key).
    let mut ek_as_ak = evidence;
    ek_as_ak.keys.ak_public = ek_as_ak.keys.ek_public.clone();
    assert!(matches!(ek_as_ak.verify(&extra).unwrap_err(), EvidenceRefusal::NotAnAttestationKey(_)));
}

#[test]
fn a_credential_made_for_the_ak_and_ek_activates_only_in_their_tpm() {
    use metal_protocol::credential::make_credential;
    let dir = tempfile::tempdir().unwrap();
    let state = metal_tests::tpm::manufacture(&dir.path().join("state"));
    let swtpm = metal_tests::tpm::Swtpm::start_bare(&state, dir.path());
    let mut tpm = Tpm::new(swtpm.connect());
    let ek = tpm.create_primary(RH_ENDORSEMENT, &ek_rsa_template()).unwrap();
    let ak = tpm.create_primary(RH_ENDORSEMENT, &ak_template()).unwrap();
    let mut rng = rand::thread_rng();

    // Ours: the TPM recovers the secret for the AK beside this EK.
    let secret = [0x5au8; 32];
    let credential = make_credential(&ek.public, &ak.public.name(), &secret, &mut rng).unwrap();
    let recovered =
        tpm.activate_credential(ak.handle, ek.handle, &credential.blob, &credential.encrypted_seed).unwrap();
    assert_eq!(recovered, secret);

    // Made for another key's name (the EK's own here): the TPM refuses it.
    let for_other_key = make_credential(&ek.public, &ek.public.name(), &secret, &mut rng).unwrap();
    let refused = tpm.activate_credential(ak.handle, ek.handle, &for_other_key.blob, &for_other_key.encrypted_seed);
    assert!(
        matches!(refused, Err(metal_boot::tpm::CommandError::Tpm { command: "ActivateCredential", .. })),
        "{refused:?}"
    );

    // Made for another TPM's EK: refused as well.
    let other = metal_tests::tpm::Swtpm::fresh(&dir.path().join("other"));
    let other_ek = Tpm::new(other.connect()).create_primary(RH_ENDORSEMENT, &ek_rsa_template()).unwrap();
    assert_ne!(other_ek.public, ek.public);
    let for_other_tpm = make_credential(&other_ek.public, &ak.public.name(), &secret, &mut rng).unwrap();
    assert!(tpm.activate_credential(ak.handle, ek.handle, &for_other_tpm.blob, &for_other_tpm.encrypted_seed).is_err());

    // The oracle: a credential tpm2_makecredential made offline activates through our client.
    let tpm2b_public = [&u16::try_from(ek.public.bytes.len()).unwrap().to_be_bytes()[..], &ek.public.bytes].concat();
    let (ek_file, secret_file, out) = (dir.path().join("ek.pub"), dir.path().join("secret"), dir.path().join("cred"));
    std::fs::write(&ek_file, tpm2b_public).unwrap();
    std::fs::write(&secret_file, b"from tpm2-tools").unwrap();
    let output = Command::new("tpm2_makecredential")
        .args(["--tcti", "none", "-u"])
        .arg(&ek_file)
        .arg("-s")
        .arg(&secret_file)
        .args(["-n", &hex::encode(ak.public.name())])
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    // tpm2-tools' file: a magic and a version, then TPM2B_ID_OBJECT and TPM2B_ENCRYPTED_SECRET.
    let file = std::fs::read(&out).unwrap();
    let mut r = metal_protocol::tpm::Reader::new(&file[8..]);
    let (blob, seed) = (r.sized().unwrap().to_vec(), r.sized().unwrap().to_vec());
    assert_eq!(tpm.activate_credential(ak.handle, ek.handle, &blob, &seed).unwrap(), b"from tpm2-tools");
}
