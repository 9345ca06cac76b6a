//! metal-boot: the ramdisk agent: init, inventory, checks, deploy (arrives with the metal-boot issue).
