//! metal-sim: the simulated site, the design's third test tier. The real scheduler, a
//! Redfish BMC per machine (one process hosts them all, each on its own loopback address),
//! and machines whose "ramdisk" is the real metal-boot / metal-erase / metal-firmware code
//! running in this process against the real boot service (one-time tokens, the join, mTLS,
//! DSSE-signed reports) on disks that are sparse files, all under one clock that runs as
//! fast as asked. What a QEMU boot proves for one machine in minutes, this proves for a
//! fleet in seconds.

pub mod api;
pub mod certificate;
pub mod chaos;
pub mod clock;
pub mod control;
pub mod demo;
pub mod disk;
pub mod fault;
pub mod lease;
pub mod machine;
pub mod network;
pub mod redfish;
pub mod replica;
pub mod scale;
pub mod site;
pub mod tree;
