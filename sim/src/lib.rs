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
pub mod config;
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
pub mod switch;
pub mod tpm;
pub mod tree;

/// Has the C allocator hand every buffer of 128 KiB or more straight back to the system when
/// it is freed. Each simulated machine runs a real ramdisk task on its own threads, whose
/// deploy and erase buffers are a few MiB apiece; under glibc's default, which raises its
/// mmap threshold after the first such buffer is freed, later ones come from per-thread
/// arenas that keep their pages once touched, and a thousand deploys at once held 18 GiB
/// (the kernel killed the 5,000-node scale bench). With the threshold fixed: 4.5 to 5.4 GiB.
pub fn return_freed_buffers() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets a tunable of glibc's allocator; called at start-up, before
    // any thread that allocates is spawned.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
    }
}
