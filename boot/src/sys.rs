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

/// Mounts `source` of type `fstype` at `target`; an already mounted target is fine.
pub fn mount(source: &str, target: &str, fstype: &str) -> io::Result<()> {
    let c = |s: &str| std::ffi::CString::new(s).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
    let (source, target_c, fstype) = (c(source)?, c(target)?, c(fstype)?);
    std::fs::create_dir_all(target)?;
    // SAFETY: every pointer is a NUL-terminated string that lives across the call; flags 0
    // and a null data pointer are valid for these pseudo filesystems.
    let ret = unsafe { libc::mount(source.as_ptr(), target_c.as_ptr(), fstype.as_ptr(), 0, std::ptr::null()) };
    if ret == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EBUSY) { Ok(()) } else { Err(e) }
}

/// Flushes every filesystem and powers off (`power_off`) or reboots. Never returns.
pub fn end(power_off: bool) -> ! {
    // SAFETY: sync takes no arguments and cannot fail.
    unsafe { libc::sync() };
    let command = if power_off { libc::RB_POWER_OFF } else { libc::RB_AUTOBOOT };
    // SAFETY: reboot(2) with a valid command; as PID 1 with CAP_SYS_BOOT it does not return.
    unsafe { libc::reboot(command) };
    // Only reached without the capability (not PID 1): there is nothing else to do.
    std::process::exit(1)
}

/// Waits for any child; `None` when there are none.
pub fn wait_any() -> Option<(i32, i32)> {
    let mut status: libc::c_int = 0;
    // SAFETY: waitpid writes one int through a pointer to a live c_int.
    let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
    (pid > 0).then_some((pid, status))
}

/// This process's peak resident set size in bytes (0 if unknown).
pub fn peak_rss_bytes() -> u64 {
    // SAFETY: rusage is plain integers; all zeroes is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage through a pointer to a live value.
    let ret = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if ret == 0 { u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024 } else { 0 }
}
