//! The scheduler's API types (what requests carry and responses return) and the rules on
//! them that need no database: state machines and validation. One place for all of them.

pub mod bmc;
pub mod boot;
pub mod event;
pub mod host;
pub mod image;
pub mod lessee;
pub mod node;
pub mod pool;
pub mod profile;
pub mod reservation;
pub mod switch;
pub mod tenant;
pub mod usage;
pub mod workflow;
