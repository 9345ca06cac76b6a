//! The scheduler's metal side below its HTTP API: the running state and start-up (`app`),
//! nodes' workflows, the boot service, BMCs, images and provisioning (`metal`), the lessee's
//! actions on a leased machine, the site CA's files, the HTTP server every listener uses,
//! listener certificates and metrics. It never sees the capacity side (`metal-capacity`,
//! beside it: the two talk only through work rows) nor the API's routes (`metal-api` sits
//! above both).

pub mod app;
pub mod ca_files;
pub mod console_ssh;
pub mod lessee;
pub mod metal;
pub mod metrics;
pub mod ratelimit;
pub mod server_tls;
