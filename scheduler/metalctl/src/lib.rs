//! What `metalctl` does beyond parsing its command line: the HTTP client for the scheduler's
//! API (`client`) and joining machines that already run an OS (`host_add`).

pub mod client;
pub mod host_add;
