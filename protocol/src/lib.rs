//! The protocol shared by the metal ramdisk binaries and the scheduler.
//!
//! Wire types (camelCase JSON, every field documented), canonical JSON, DSSE envelopes, the
//! site CA with its role certificates, and the rule set that accepts a wipe report. Pure Rust
//! with no network or disk I/O: callers read and write files and sockets, this crate only
//! turns bytes into verified values and back. Time is always a parameter, never read here.

#![deny(missing_docs)]

pub mod attest;
pub mod boot;
pub mod canonical;
pub mod cloudinit;
#[cfg(feature = "credential")]
pub mod credential;
pub mod deploy;
pub mod disk;
pub mod dsse;
pub mod ekcert;
pub mod eventlog;
pub mod firmware;
pub mod identity;
pub mod inventory;
pub mod join;
pub mod lldp;
pub mod measurement;
pub mod tool;
pub mod tpm;
pub mod wipe;

pub use attest::{WipeExpectation, WipeRefusal, verify_wipe_report};
pub use deploy::{
    ChunkManifest, CloudInitSeed, DeployPlan, Digest, DigestAlgorithm, ImageFormat, ImageSource, RootDeviceHints,
};
pub use disk::{DiskIdentity, Transport};
pub use dsse::{Envelope, EnvelopeSignature, Signer};
/// The Ed25519 key types every signer and verifier uses (re-exported so versions never skew).
pub use ed25519_dalek::{SigningKey, VerifyingKey};
pub use firmware::{ComponentCheck, FirmwareReport, FirmwareVersion};
pub use identity::{CaCertificate, Identity, IdentityError, Role, SigningIdentity, SiteCa, VerifiedCertificate};
pub use inventory::InventoryReport;
pub use wipe::{DiskWipe, WipeReport};
