//! What `metalctl` does beyond parsing its command line: the HTTP client for the scheduler's
//! API (`client`), a leased machine's serial console in the terminal (`console`), joining machines that already run an OS (`host_add`), and how results
//! print and input is read (`output`).

pub mod client;
pub mod console;
pub mod host_add;
pub mod output;
