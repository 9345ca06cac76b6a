//! metal-boot: the ramdisk agent. Today: the deploy path (`plan`: an image's digests and
//! chunk manifest; `deploy`: stream, verify every chunk before writing it, first MiB last)
//! and the disk choice. As /init, commissioning and the controller protocol come next.

pub mod cli;
pub mod deploy;
pub mod digest;
pub mod format;
pub mod plan;
pub mod source;
pub mod target;
