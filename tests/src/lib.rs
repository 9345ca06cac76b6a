//! Cross-crate and hardware-in-the-loop test support: the harness lives here, the tests in `tests/`.

pub mod bins;
pub mod console;
pub mod controller;
pub mod elf;
pub mod emulators;
pub mod hil;
pub mod identity;
pub mod images;
pub mod leases;
pub mod loopdev;
pub mod metalctl;
pub mod ovs;
pub mod scheduler;
pub mod served;
pub mod sshd;
pub mod tpm;
