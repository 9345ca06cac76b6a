//! metal-firmware: firmware inventory, baseline check and reflash. Today: the baseline
//! check (`baseline`); in-band and out-of-band inventory and the reflash flow come next
//! (see the firmware issue's notes).

pub mod baseline;
