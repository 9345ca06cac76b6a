//! The scheduler's service below its HTTP API: the application state and start-up (`app`),
//! the capacity side (`capacity`: pools, reservations, placement, billing) and the metal side
//! (`metal`: nodes' workflows, the boot service, BMCs, images, provisioning), which talk only
//! through work rows, the site CA's files, the HTTP server every listener uses, listener
//! certificates and metrics. It never knows the API's routes (`metal-api` sits above it).

pub mod app;
pub mod ca_files;
pub mod capacity;
pub mod console_ssh;
pub mod http_server;
pub mod lessee;
pub mod metal;
pub mod metrics;
pub mod ratelimit;
pub mod server_tls;
