//! metal-boot: the ramdisk agent. The deploy path (`plan`: an image's digests and chunk
//! manifest; `deploy`: stream, verify every chunk before writing it, first MiB last), the
//! disk choice, the commissioning inventory with its four basic tests, the controller
//! protocol (`controller`: join, reports, tasks), measured boot (`tpm`, `measured`: the
//! event log, the TPM's keys and quote; `attestation`: an envelope checked offline), and
//! PID 1 of the ramdisk (`init`).

pub mod attestation;
pub mod checks;
pub mod cli;
pub mod controller;
pub mod deploy;
pub mod init;
pub mod inventory;
pub mod lldp;
pub mod measured;
pub mod plan;
pub mod report;
pub mod seed;
pub mod source;
pub(crate) mod sys;
pub mod target;
pub mod tpm;
