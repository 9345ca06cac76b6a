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

/// A raw packet socket on interface `ifname` that receives LLDP frames (EtherType 0x88cc,
/// sent to the nearest-bridge group 01:80:c2:00:00:0e, which the NIC is told to accept),
/// with a receive timeout of `timeout`.
pub fn lldp_socket(ifname: &str, timeout: std::time::Duration) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd as _;
    let name = std::ffi::CString::new(ifname).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `name` is a NUL-terminated string alive across the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        return Err(io::Error::last_os_error());
    }
    let protocol = metal_protocol::lldp::ETHERTYPE.to_be();
    // SAFETY: socket(2) with constant arguments; the result is checked before use.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, i32::from(protocol)) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a socket just opened and owned by nobody else.
    let socket = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    let ifindex = i32::try_from(index).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: sockaddr_ll is plain data; all zeroes is a valid value to fill in.
    let mut address: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    address.sll_family = u16::try_from(libc::AF_PACKET).unwrap_or_default();
    address.sll_protocol = protocol;
    address.sll_ifindex = ifindex;
    let size = socklen::<libc::sockaddr_ll>();
    // SAFETY: `address` is a live sockaddr_ll of `size` bytes; `fd` is our socket.
    if unsafe { libc::bind(fd, std::ptr::from_ref(&address).cast(), size) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: packet_mreq is plain data; all zeroes is a valid value to fill in.
    let mut membership: libc::packet_mreq = unsafe { std::mem::zeroed() };
    membership.mr_ifindex = ifindex;
    membership.mr_type = u16::try_from(libc::PACKET_MR_MULTICAST).unwrap_or_default();
    membership.mr_alen = 6;
    membership.mr_address[..6].copy_from_slice(&[0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e]);
    let size = socklen::<libc::packet_mreq>();
    // SAFETY: `membership` is a live packet_mreq of `size` bytes; `fd` is our socket.
    let joined = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_ADD_MEMBERSHIP,
            std::ptr::from_ref(&membership).cast(),
            size,
        )
    };
    if joined < 0 {
        return Err(io::Error::last_os_error());
    }
    let tv = libc::timeval {
        // Clamped to what a 32-bit time_t holds (68 years), so it fits on every target; the
        // type is inferred (musl's time_t alias is deprecated: its width is changing).
        tv_sec: timeout.as_secs().min(0x7fff_ffff).try_into().unwrap_or_default(),
        tv_usec: timeout.subsec_micros().into(),
    };
    let size = socklen::<libc::timeval>();
    // SAFETY: `tv` is a live timeval of `size` bytes; `fd` is our socket.
    if unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, std::ptr::from_ref(&tv).cast(), size) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(socket)
}

/// The size of a socket option or address of type `T`, as the kernel takes it.
fn socklen<T>() -> libc::socklen_t {
    libc::socklen_t::try_from(std::mem::size_of::<T>()).unwrap_or(libc::socklen_t::MAX)
}

/// Receives one frame into `buffer`; its length (an error when the receive timeout passed).
pub fn receive(socket: &std::os::fd::OwnedFd, buffer: &mut [u8]) -> io::Result<usize> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: `buffer` is writable for its whole length; the socket is open.
    let n = unsafe { libc::recv(socket.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len(), 0) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}
