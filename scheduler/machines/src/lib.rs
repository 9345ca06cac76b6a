//! The scheduler's metal side below its HTTP API: the running state and start-up (`app`),
//! nodes' workflows, the boot service, BMCs, images and provisioning (`metal`), the lessee's
//! actions on a leased machine, the site CA's files, listener certificates and metrics. It
//! serves nothing itself: `metal-api`, above it, holds every route and the HTTP server, so
//! this crate builds without axum. It never sees the capacity side (`metal-capacity`, beside
//! it: the two talk only through work rows).

pub mod app;
pub mod ca_files;
pub mod console_ssh;
pub mod lessee;
pub mod metal;
pub mod metrics;
pub mod ratelimit;
pub mod server_tls;
