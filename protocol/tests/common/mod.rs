//! Sample values of every wire type and a test site, shared by the protocol's tests.

#![allow(dead_code)] // each test binary uses a different part

use std::time::{Duration, SystemTime};

use ed25519_dalek::SigningKey;
use metal_protocol::deploy::SeedVolume;
use metal_protocol::firmware::{Comparison, ComponentCheck};
use metal_protocol::inventory::{Cpu, Dimm, Disk, Dmi, Memory, Nic, TestKind, TestResult};
use metal_protocol::tool::Tool;
use metal_protocol::wipe::{
    DeviceCommand, NistCategory, RejectedMethod, SanitizeMethod, Verification, VerifyMode, WipePolicy, WipeResult,
};
use metal_protocol::*;
use time::macros::datetime;

/// A fixed instant all samples use, so golden files never change by themselves.
pub fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000)
}

pub fn tool() -> Tool {
    Tool { name: "metal-erase".into(), version: "0.1.0".into() }
}

pub fn nvme_disk() -> DiskIdentity {
    DiskIdentity {
        serial: Some("NVME0001".into()),
        model: Some("QEMU NVMe Ctrl".into()),
        wwn: Some("eui.0123456789abcdef".into()),
        by_path: Some("pci-0000:00:04.0-nvme-1".into()),
        size_bytes: 1 << 30,
    }
}

pub fn sata_disk() -> DiskIdentity {
    DiskIdentity {
        serial: Some("SATA0002".into()),
        model: Some("QEMU HARDDISK".into()),
        wwn: None,
        by_path: Some("pci-0000:00:1f.2-ata-1".into()),
        size_bytes: 2 << 30,
    }
}

pub fn disk_wipe(identity: DiskIdentity, device: &str) -> DiskWipe {
    DiskWipe {
        device: device.into(),
        identity,
        method: Some(SanitizeMethod::OverwriteZeros),
        method_reason: "no firmware sanitize advertised; software overwrite".into(),
        rejected_methods: vec![RejectedMethod {
            method: SanitizeMethod::NvmeSanitizeCrypto,
            capability: "SANICAP.CES=0".into(),
            reason: "controller does not support crypto erase sanitize".into(),
        }],
        commands: vec![DeviceCommand {
            command: "BLKSECDISCARD".into(),
            status: "0x5f".into(),
            ok: false,
            started_at: datetime!(2026-11-20 10:00:00 UTC),
            finished_at: datetime!(2026-11-20 10:00:01 UTC),
        }],
        started_at: datetime!(2026-11-20 10:00:00 UTC),
        finished_at: datetime!(2026-11-20 10:05:00 UTC),
        verification: Some(Verification {
            mode: VerifyMode::Full,
            coverage_percent: 100.0,
            sample_seed: None,
            bytes_read: 1 << 30,
            expected: "zeros".into(),
        }),
        result: WipeResult::Pass,
        first_bad_offset: None,
        failure: None,
        nist_category: Some(NistCategory::Clear),
    }
}

pub fn wipe_report(node: &str) -> WipeReport {
    WipeReport {
        node_id: node.into(),
        inventory_disks: vec![nvme_disk(), sata_disk()],
        policy: WipePolicy::Purge,
        disks: vec![disk_wipe(nvme_disk(), "/dev/nvme0n1"), disk_wipe(sata_disk(), "/dev/sda")],
        started_at: datetime!(2026-11-20 10:00:00 UTC),
        finished_at: datetime!(2026-11-20 10:05:00 UTC),
        tool: tool(),
    }
}

pub fn inventory_report() -> InventoryReport {
    InventoryReport {
        node_id: "node-1".into(),
        collected_at: datetime!(2026-11-20 09:00:00 UTC),
        cpu: Cpu {
            architecture: "x86_64".into(),
            model: "AMD EPYC 9654 96-Core Processor".into(),
            sockets: 2,
            cores: 192,
            threads: 384,
            flags: vec!["aes".into(), "avx512f".into(), "svm".into()],
        },
        memory: Memory {
            total_bytes: 1_649_267_441_664,
            dimms: vec![Dimm {
                locator: "DIMM_A1".into(),
                size_bytes: 68_719_476_736,
                kind: Some("DDR5".into()),
                speed_mts: Some(4800),
                manufacturer: Some("Samsung".into()),
                serial: Some("S123".into()),
            }],
        },
        disks: vec![Disk {
            name: "nvme0n1".into(),
            identity: nvme_disk(),
            by_id: vec!["nvme-QEMU_NVMe_Ctrl_NVME0001".into()],
            logical_block_size: 512,
            physical_block_size: 512,
            rotational: false,
            transport: Transport::Nvme,
            removable: false,
            read_only: false,
        }],
        nics: vec![Nic {
            name: "enp1s0".into(),
            mac: "52:54:00:12:34:56".into(),
            driver: Some("virtio_net".into()),
            link: true,
            speed_mbps: Some(10_000),
            pci_address: Some("0000:01:00.0".into()),
            lldp: None,
        }],
        dmi: Dmi {
            system_vendor: Some("QEMU".into()),
            system_product: Some("Standard PC (Q35 + ICH9, 2009)".into()),
            system_uuid: Some("0b6e2f53-4e0c-4a8b-9f0a-2f3c5d6e7f80".into()),
            bios_vendor: Some("SeaBIOS".into()),
            bios_version: Some("1.16.3".into()),
            bios_date: Some("04/01/2014".into()),
            ..Dmi::default()
        },
        firmware: vec![FirmwareVersion { component: "bios".into(), version: "1.16.3".into(), source: "dmi".into() }],
        tests: vec![TestResult {
            kind: TestKind::Memory,
            passed: true,
            details: "pattern test of 256 MiB (10% of free memory): no errors".into(),
            duration_ms: 812,
        }],
        tool: Tool { name: "metal-boot".into(), version: "0.1.0".into() },
    }
}

/// The SHA-256 of 1 MiB of zeros.
pub const ZERO_MIB_SHA256: &str = "30e14955ebf1352266dc2ff8067e68104607e750abb9d3b36582b8af909fcb58";

pub fn deploy_plan() -> DeployPlan {
    let digest = Digest { algorithm: DigestAlgorithm::Sha256, hex: "ab".repeat(32) };
    DeployPlan {
        image: ImageSource {
            url: "https://images.site-a/debian-13.raw.zst".into(),
            size_bytes: 123_456,
            format: ImageFormat::Zstd,
            digest: digest.clone(),
            frames: vec![40_000, 51, 60_000, 23],
        },
        chunks: ChunkManifest {
            image_digest: digest,
            raw_size_bytes: 3 * 1024 * 1024 + 5,
            chunk_size: 1024 * 1024,
            // Chunk 1 is all zeros: its digest is the SHA-256 of 1 MiB of zeros.
            sha256: vec!["01".repeat(32), ZERO_MIB_SHA256.into(), "03".repeat(32), "04".repeat(32)],
            zero_chunks: vec![1],
        },
        target: RootDeviceHints {
            serial: Some("NVME0001".into()),
            min_size_bytes: Some(1 << 30),
            ..Default::default()
        },
        cloud_init: Some(CloudInitSeed {
            meta_data: "instance-id: node-1\nlocal-hostname: node-1\n".into(),
            user_data: "#cloud-config\ndisable_root: true\n".into(),
            network_config: None,
            volume: SeedVolume::VfatPartition,
        }),
    }
}

pub fn firmware_report() -> FirmwareReport {
    FirmwareReport {
        node_id: "node-1".into(),
        baseline: [("bios".to_string(), "2.4.1".to_string()), ("bmc".to_string(), "1.12.0".to_string())].into(),
        comparison: Comparison::Exact,
        components: vec![
            ComponentCheck {
                component: "bios".into(),
                found: Some("2.4.0".into()),
                expected: "2.4.1".into(),
                drift: true,
            },
            ComponentCheck {
                component: "bmc".into(),
                found: Some("1.12.0".into()),
                expected: "1.12.0".into(),
                drift: false,
            },
        ],
        compliant: false,
        checked_at: datetime!(2026-11-20 11:00:00 UTC),
        tool: Tool { name: "metal-firmware".into(), version: "0.1.0".into() },
    }
}

/// A site with its CA, valid for a year from [`t0`].
pub fn site(name: &str) -> SiteCa {
    SiteCa::create(name, t0(), Duration::from_secs(365 * 24 * 3600)).unwrap()
}

/// A key pair with a one-hour role certificate from `ca`.
pub fn identity(ca: &SiteCa, node: &str, generation: u64, role: Role) -> Signer {
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    let cert = ca.issue(&key.verifying_key(), node, generation, role, t0(), Duration::from_secs(3600)).unwrap();
    Signer::new(key, vec![cert, ca.certificate().der().to_vec()])
}
