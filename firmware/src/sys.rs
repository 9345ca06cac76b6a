//! Every ioctl metal-firmware issues, in one place: ethtool driver info (`SIOCETHTOOL` with
//! `ETHTOOL_GDRVINFO`, `include/uapi/linux/ethtool.h`) and an IPMI request/response through
//! `/dev/ipmi0` (`IPMICTL_SEND_COMMAND`, `IPMICTL_RECEIVE_MSG_TRUNC`,
//! `include/uapi/linux/ipmi.h`). Layouts are `#[repr(C)]` copies of the kernel's, with their
//! sizes checked in the tests.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

/// `SIOCETHTOOL` (`include/uapi/linux/sockios.h`).
const SIOCETHTOOL: libc::Ioctl = request(0x8946);
/// `ETHTOOL_GDRVINFO`.
const ETHTOOL_GDRVINFO: u32 = 0x0000_0003;
/// `_IOR('i', 13, struct ipmi_req)`.
const IPMICTL_SEND_COMMAND: libc::Ioctl = request(0x8028_690d);
/// `_IOWR('i', 11, struct ipmi_recv)`.
const IPMICTL_RECEIVE_MSG_TRUNC: libc::Ioctl = request(0xc030_690b);
/// `IPMI_SYSTEM_INTERFACE_ADDR_TYPE`.
const IPMI_SYSTEM_INTERFACE_ADDR_TYPE: libc::c_int = 0x0c;
/// `IPMI_BMC_CHANNEL`.
const IPMI_BMC_CHANNEL: libc::c_short = 0x0f;

/// A 32-bit request number as this libc's ioctl request type.
#[allow(clippy::cast_possible_wrap, clippy::cast_lossless, clippy::unnecessary_cast)]
const fn request(number: u32) -> libc::Ioctl {
    number as libc::Ioctl
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// `struct ethtool_drvinfo`.
#[repr(C)]
struct EthtoolDrvinfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

/// `struct ifreq` with `ifr_data` (the union is 24 bytes on 64-bit Linux).
#[repr(C)]
struct IfreqData {
    name: [u8; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    pad: [u8; 16],
}

/// What the driver of a network interface says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverInfo {
    /// Driver name, e.g. `mlx5_core`.
    pub driver: String,
    /// Firmware version, empty when the driver reports none.
    pub firmware: String,
    /// Bus address, e.g. `0000:01:00.0`.
    pub bus_info: String,
}

fn c_text(bytes: &[u8]) -> String {
    CStr::from_bytes_until_nul(bytes).map(|s| s.to_string_lossy().trim().to_owned()).unwrap_or_default()
}

/// Driver, firmware version and bus address of interface `name`.
pub fn ethtool_driver_info(name: &str) -> io::Result<DriverInfo> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad interface name {name:?}")));
    }
    // SAFETY: socket() takes no pointers; the result is checked before use.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    check(raw)?;
    // SAFETY: `raw` is a descriptor we just opened and own from here on.
    let socket: OwnedFd = unsafe { std::os::fd::FromRawFd::from_raw_fd(raw) };
    // SAFETY: EthtoolDrvinfo is plain integers and byte arrays; all zeroes is a valid value.
    let mut info: EthtoolDrvinfo = unsafe { std::mem::zeroed() };
    info.cmd = ETHTOOL_GDRVINFO;
    let mut ifr = IfreqData { name: [0; libc::IFNAMSIZ], data: (&raw mut info).cast(), pad: [0; 16] };
    ifr.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: SIOCETHTOOL reads the NUL-terminated name from `ifr` and writes one
    // ethtool_drvinfo through `ifr.data`, which points to `info`; both live across the call.
    check(unsafe { libc::ioctl(socket.as_raw_fd(), SIOCETHTOOL, &raw mut ifr) })?;
    Ok(DriverInfo {
        driver: c_text(&info.driver),
        firmware: c_text(&info.fw_version),
        bus_info: c_text(&info.bus_info),
    })
}

/// `struct ipmi_system_interface_addr`.
#[repr(C)]
struct IpmiSystemInterfaceAddr {
    addr_type: libc::c_int,
    channel: libc::c_short,
    lun: u8,
}

/// The size of `IpmiSystemInterfaceAddr` (8 bytes; checked in the tests).
#[allow(clippy::cast_possible_truncation)]
const ADDR_LEN: libc::c_uint = std::mem::size_of::<IpmiSystemInterfaceAddr>() as libc::c_uint;

/// `struct ipmi_msg`.
#[repr(C)]
struct IpmiMsg {
    netfn: u8,
    cmd: u8,
    data_len: u16,
    data: *mut u8,
}

/// `struct ipmi_req`.
#[repr(C)]
struct IpmiReq {
    addr: *mut u8,
    addr_len: libc::c_uint,
    msgid: libc::c_long,
    msg: IpmiMsg,
}

/// `struct ipmi_recv`.
#[repr(C)]
struct IpmiRecv {
    recv_type: libc::c_int,
    addr: *mut u8,
    addr_len: libc::c_uint,
    msgid: libc::c_long,
    msg: IpmiMsg,
}

/// Sends one request to the local BMC through an open `/dev/ipmiN` and returns the response
/// data (completion code first).
pub fn ipmi_request(device: &std::fs::File, netfn: u8, cmd: u8, data: &[u8], timeout: Duration) -> io::Result<Vec<u8>> {
    let mut addr =
        IpmiSystemInterfaceAddr { addr_type: IPMI_SYSTEM_INTERFACE_ADDR_TYPE, channel: IPMI_BMC_CHANNEL, lun: 0 };
    let mut payload = data.to_vec();
    let data_len = u16::try_from(payload.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut req = IpmiReq {
        addr: (&raw mut addr).cast(),
        addr_len: ADDR_LEN,
        msgid: 1,
        msg: IpmiMsg { netfn, cmd, data_len, data: payload.as_mut_ptr() },
    };
    // SAFETY: IPMICTL_SEND_COMMAND reads `req`, the address it points to and `data_len`
    // bytes of `payload`; all three live across the call and are not otherwise borrowed.
    check(unsafe { libc::ioctl(device.as_raw_fd(), IPMICTL_SEND_COMMAND, &raw mut req) })?;
    let mut poll = libc::pollfd { fd: device.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let millis = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: poll() reads and writes exactly one pollfd, which lives on our stack.
    let ready = unsafe { libc::poll(&raw mut poll, 1, millis) };
    check(ready)?;
    if ready == 0 {
        return Err(io::Error::new(io::ErrorKind::TimedOut, "the BMC did not answer"));
    }
    let mut answer = vec![0u8; 256];
    let mut from = IpmiSystemInterfaceAddr { addr_type: 0, channel: 0, lun: 0 };
    let mut recv = IpmiRecv {
        recv_type: 0,
        addr: (&raw mut from).cast(),
        addr_len: ADDR_LEN,
        msgid: 0,
        msg: IpmiMsg { netfn: 0, cmd: 0, data_len: 256, data: answer.as_mut_ptr() },
    };
    // SAFETY: IPMICTL_RECEIVE_MSG_TRUNC writes the sender address into `from` (at most
    // addr_len bytes) and at most data_len (256) bytes into `answer`, then updates `recv`;
    // all of them live across the call.
    check(unsafe { libc::ioctl(device.as_raw_fd(), IPMICTL_RECEIVE_MSG_TRUNC, &raw mut recv) })?;
    answer.truncate(usize::from(recv.msg.data_len));
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_kernel() {
        assert_eq!(std::mem::size_of::<EthtoolDrvinfo>(), 196);
        assert_eq!(std::mem::size_of::<IfreqData>(), 40);
        assert_eq!(std::mem::size_of::<IpmiReq>(), 40, "_IOR('i', 13) encodes size 0x28");
        assert_eq!(std::mem::size_of::<IpmiRecv>(), 48, "_IOWR('i', 11) encodes size 0x30");
        assert_eq!(std::mem::size_of::<IpmiSystemInterfaceAddr>(), 8);
    }

    #[test]
    fn a_real_nic_names_its_driver() {
        // Every interface with a device behind it: the ioctl's driver is sysfs's driver.
        let mut asked = 0;
        for entry in std::fs::read_dir("/sys/class/net").unwrap().flatten() {
            let Ok(driver) = std::fs::read_link(entry.path().join("device/driver")) else { continue };
            let name = entry.file_name().into_string().unwrap();
            let info = ethtool_driver_info(&name).unwrap();
            assert_eq!(info.driver, driver.file_name().unwrap().to_str().unwrap(), "{name}");
            assert!(!info.bus_info.is_empty(), "{name}: {info:?}");
            asked += 1;
        }
        eprintln!("asked {asked} interfaces");
    }

    #[test]
    fn loopback_has_no_driver_info_and_bad_names_are_refused() {
        // `lo` has no ethtool driver: the ioctl itself answers (EOPNOTSUPP), nothing panics.
        assert!(ethtool_driver_info("lo").is_err());
        assert_eq!(ethtool_driver_info("").unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert_eq!(ethtool_driver_info("a-name-far-too-long").unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }
}
