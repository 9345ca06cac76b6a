//! The QEMU, emulator and tool tests of the whole product (metal-tests), one test target:
//! every target links the whole workspace below it, and that link is what dominates an
//! incremental build. Each module here was a target of its own; its tests keep their names
//! under the module's, which is what nextest filters and `scripts/test` select on.

mod boot_service;
mod cloud_init;
mod dhcp_boot;
mod hil_arm64;
mod hil_boot_service;
mod hil_commission;
mod hil_deploy;
mod hil_erase;
mod hil_firmware;
mod hil_isolation;
mod hil_join;
mod hil_measured_boot;
mod hil_tenant_root;
mod host_join;
mod identity_tools;
mod images;
mod installer;
mod static_binaries;
mod tenant_root;
mod tpm;
