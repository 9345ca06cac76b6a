//! What the scheduler service, `metalctl` and the simulated site share, depending on nothing
//! of the service: the API types and their rules (`model`), the one error enum and its
//! HTTP mapping (`error`), the configuration, the clock, durations and sealed secrets.

pub mod clock;
pub mod config;
pub mod duration;
pub mod error;
#[cfg(feature = "axum")]
pub mod extract;
pub mod model;
pub mod page;
pub mod secrets;
pub mod work;
