//! metal-firmware: firmware inventory (out of band through the BMC, in band from the
//! running machine), the baseline check, and reflash through the BMC's update service.

pub mod baseline;
pub mod bios;
pub mod cli;
pub mod image;
pub mod inband;
pub mod inventory;
pub mod reflash;
mod sys;
