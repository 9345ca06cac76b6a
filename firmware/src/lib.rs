//! metal-firmware: firmware inventory (out of band through the BMC today; in band in the
//! ramdisk next), the baseline check, and (next) reflash through the BMC.

pub mod baseline;
pub mod cli;
pub mod inventory;
