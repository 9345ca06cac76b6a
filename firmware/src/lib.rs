//! metal-firmware: firmware inventory, baseline check and reflash (arrive with the firmware issue).
