//! The few system calls metal-boot makes directly, each with its `// SAFETY:` reasoning.

use std::io;

/// Pins the calling thread to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("CPU {cpu} is beyond cpu_set_t")));
    }
    // SAFETY: CPU_SET writes one bit inside `set`, checked in range above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: sched_setaffinity reads `size_of::<cpu_set_t>()` bytes from `set`, a live value;
    // pid 0 is the calling thread.
    let ret = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}
