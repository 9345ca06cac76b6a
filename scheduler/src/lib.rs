//! The metal control plane service (`app`, `api`, `store`, `capacity`, `metal`) and the site
//! CA's files; its types live in `metal-types`, its command line in `metalctl`.

pub mod api;
pub mod app;
pub mod ca_files;
pub mod capacity;
pub mod http_server;
pub mod metal;
pub mod metrics;
pub mod server_tls;
