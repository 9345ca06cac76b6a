//! The metal control plane: the service (`app`, `api`, `store`, `model`), its clock and
//! configuration, the site CA's files, and the HTTP client `metalctl` uses.

pub mod api;
pub mod app;
pub mod billing;
pub mod bmcs;
pub mod boot;
pub mod ca_files;
pub mod capacity;
pub mod client;
pub mod clock;
pub mod config;
pub mod console;
pub mod discovery;
pub mod duration;
pub mod error;
pub mod http_server;
pub mod images;
pub mod installer;
pub mod metal;
pub mod metrics;
pub mod model;
pub mod placement;
pub mod provision;
pub mod secrets;
pub mod store;
