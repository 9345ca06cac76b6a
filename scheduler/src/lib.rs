//! The metal control plane service, `metal-scheduler`: its binary's start-up (`main.rs`) and
//! the names the simulator, the tests and the fuzzers use, re-exported from the crates the
//! service is made of: `metal-types` (API types, the error, config, clock), `metal-store`
//! (persistence), `metal-service` (state, capacity and metal sides) and `metal-api` (routes,
//! handlers, the OpenAPI document, serving). Its command line is `metalctl`.

pub use metal_api as api;
pub use metal_service::{ca_files, capacity, http_server, metal, metrics, server_tls};

/// The application state and its start-up (`metal-service`), and serving it (`metal-api`).
pub mod app {
    pub use metal_api::{Listeners, serve};
    pub use metal_service::app::*;
}
