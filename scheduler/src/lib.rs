//! The metal control plane: the service (`app`, `api`, `store`, `model`), its clock and
//! configuration, the site CA's files, and the HTTP client `metalctl` uses.

pub mod api;
pub mod app;
pub mod ca_files;
pub mod capacity;
pub mod client;
pub mod clock;
pub mod config;
pub mod duration;
pub mod error;
pub mod host_add;
pub mod http_server;
pub mod metal;
pub mod metrics;
pub mod model;
pub mod secrets;
pub mod server_tls;
pub mod store;
