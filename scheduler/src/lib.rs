//! The metal control plane: today the site CA's files; the service (nodes, pools,
//! reservations, placement, leases, billing, events) arrives with the scheduler core issue.

pub mod ca_files;
pub mod duration;
