//! The scheduler's integration tests, one test target: every target links the whole
//! metal-scheduler library and its dependencies, and that link is what dominates an
//! incremental build (omicron keeps one target, `nexus/tests/test_all.rs`, for the same
//! reason). Each module here was a target of its own; its tests keep their names under the
//! module's (`crash::…`), which is what nextest filters and `scripts/test` select on.

mod common;

mod api_billing;
mod api_bmc;
mod api_console;
mod api_errors;
mod api_nodes;
mod api_paging;
mod api_reservations;
mod ca_cli;
mod crash;
mod hil_host_add;
mod https;
mod layout;
mod lessee;
mod metalctl;
mod openapi;
mod readme;
mod replicas;
mod schemathesis;
mod secrets;
mod serve_cli;
mod state_machine;
mod workflows;
