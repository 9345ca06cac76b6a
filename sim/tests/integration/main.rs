//! The simulated site's tests (metal-sim), one test target: every target links the whole
//! workspace below it, and that link is what dominates an incremental build. Each module
//! here was a target of its own; its tests keep their names under the module's, which is
//! what nextest filters and `scripts/test` select on.
//!
//! The simulation installs the process clock once per process, so these tests need nextest,
//! which runs each test in a process of its own (`scripts/test` does).

mod bmc_sessions;
mod chaos;
mod chaos_kill;
mod console;
mod demo;
mod faults;
mod mixed_fleet;
mod report_lost;
