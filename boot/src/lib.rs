//! metal-boot: the ramdisk agent. Today: the deploy path (`plan`: an image's digests and
//! chunk manifest; `deploy`: stream, verify every chunk before writing it, first MiB last),
//! the disk choice, and the commissioning inventory with its four basic tests. As /init,
//! and the controller protocol, come next.

pub mod checks;
pub mod cli;
pub mod deploy;
pub mod digest;
pub mod format;
pub mod inventory;
pub mod plan;
pub mod report;
pub mod source;
mod sys;
pub mod target;
