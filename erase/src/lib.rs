//! metal-erase: erase every disk with the strongest method it really supports, prove the
//! result by reading it back, and sign a wipe report with the node's platform identity.
//!
//! Flow: `device` discovers disks and decides which may be touched; `plan` orders the
//! methods a disk supports under a policy; `engine` runs one worker per disk (erase, then
//! `verify`); `report` turns the outcomes into a signed `protocol::WipeReport`. All ioctls
//! live in `ioctl`; `passthrough` builds and parses the NVMe/ATA/SCSI commands they carry;
//! `firmware` probes what a device's firmware can erase and runs those commands.

pub mod cli;
pub mod device;
pub mod engine;
pub mod firmware;
pub mod io;
pub mod ioctl;
pub mod passthrough;
pub mod pattern;
pub mod plan;
pub mod progress;
pub mod report;
pub mod session;
pub mod verify;
