//! Real BMC emulators for the tests: sushy-tools (Redfish, fake driver, TLS and basic auth)
//! and OpenIPMI's ipmi_sim (IPMI over LAN, with a chassis program that keeps power and boot
//! state in files). Each is started on a free loopback port and killed when dropped.
//! `scripts/setup` installs them (sushy-tools into /opt/metal-venv). Test support: every
//! failure panics with what went wrong.

use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The venv scripts/setup makes for sushy-tools.
pub const VENV: &str = "/opt/metal-venv";

pub fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Runs a command that must succeed; its standard output.
pub(crate) fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A child process killed on drop.
#[derive(Debug)]
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A test CA and a server certificate for 127.0.0.1 it issued.
#[derive(Debug)]
pub struct Pki {
    pub ca_pem: Vec<u8>,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// SHA-256 of the server certificate, as openssl prints it (colons).
    pub fingerprint: String,
}

pub fn pki(dir: &Path, name: &str) -> Pki {
    let p = |f: &str| dir.join(format!("{name}-{f}"));
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    run(Command::new("openssl")
        .args(["req", "-x509"])
        .args(ec)
        .arg("-keyout")
        .arg(p("ca.key"))
        .arg("-out")
        .arg(p("ca.pem"))
        .args(["-days", "2", "-subj", &format!("/CN={name} test CA")]));
    run(Command::new("openssl")
        .arg("req")
        .args(ec)
        .arg("-keyout")
        .arg(p("srv.key"))
        .arg("-out")
        .arg(p("srv.csr"))
        .args(["-subj", "/CN=127.0.0.1"]));
    std::fs::write(p("ext"), "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n").unwrap();
    run(Command::new("openssl")
        .args(["x509", "-req", "-in"])
        .arg(p("srv.csr"))
        .arg("-CA")
        .arg(p("ca.pem"))
        .arg("-CAkey")
        .arg(p("ca.key"))
        .args(["-CAcreateserial", "-days", "2", "-out"])
        .arg(p("srv.pem"))
        .arg("-extfile")
        .arg(p("ext")));
    let fp = run(Command::new("openssl").args(["x509", "-noout", "-fingerprint", "-sha256", "-in"]).arg(p("srv.pem")));
    Pki {
        ca_pem: std::fs::read(p("ca.pem")).unwrap(),
        cert: p("srv.pem"),
        key: p("srv.key"),
        fingerprint: fp.trim().rsplit('=').next().unwrap().to_owned(),
    }
}

fn wait_for_tcp(port: u16, child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited early: {status}");
        }
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A bcrypt hash of `password`, as sushy's basic-auth file holds it.
fn bcrypt_hash(password: &str) -> String {
    let script = format!("import bcrypt; print(bcrypt.hashpw(b'{password}', bcrypt.gensalt(4)).decode())");
    run(Command::new(format!("{VENV}/bin/python3")).args(["-c", &script])).trim().to_owned()
}

/// The password of sushy's `admin` user.
pub const SUSHY_PASSWORD: &str = "sushy-Secret-42";

/// sushy-emulator with its fake driver, over TLS, with basic auth for `admin`/[`SUSHY_PASSWORD`].
#[derive(Debug)]
pub struct Sushy {
    pub endpoint: String,
    pub pki: Pki,
    _guard: Guard,
    dir: tempfile::TempDir,
}

impl Sushy {
    /// The fake driver: machines in sushy's own memory, no QEMU.
    pub fn start() -> Sushy {
        Sushy::start_with("SUSHY_EMULATOR_FAKE_DRIVER = True\n", false)
    }

    /// The fake driver with an AccountService (`tests/data/sushy-accounts.py`): a BMC whose
    /// password can be rotated, without QEMU.
    pub fn start_with_accounts() -> Sushy {
        Sushy::start_with("SUSHY_EMULATOR_FAKE_DRIVER = True\n", true)
    }

    /// The libvirt driver, limited to the domain with this UUID: power acts on a real QEMU.
    pub fn start_libvirt(domain_uuid: &str) -> Sushy {
        Sushy::start_with(&Self::libvirt(domain_uuid), false)
    }

    /// The libvirt driver with an AccountService (`tests/data/sushy-accounts.py`), so the
    /// BMC password can be rotated through Redfish as on a real BMC.
    pub fn start_libvirt_with_accounts(domain_uuid: &str) -> Sushy {
        Sushy::start_with(&Self::libvirt(domain_uuid), true)
    }

    /// Another BMC account (sushy reads its auth file on every request): something other
    /// than the platform that can reach the BMC, as a vendor's in-band tool can.
    pub fn add_account(&self, user: &str, password: &str) {
        let hash = bcrypt_hash(password);
        let auth = self.dir.path().join("htpasswd");
        let mut accounts = std::fs::read_to_string(&auth).unwrap();
        accounts.push_str(&format!("{user}:{hash}\n"));
        std::fs::write(&auth, accounts).unwrap();
    }

    /// The libvirt driver's settings: the one domain, and Debian's 4M OVMF builds for UEFI
    /// boot and Secure Boot (sushy's defaults name files Debian does not ship).
    fn libvirt(domain_uuid: &str) -> String {
        format!(
            "SUSHY_EMULATOR_LIBVIRT_URI = 'qemu:///system'\nSUSHY_EMULATOR_ALLOWED_INSTANCES = ['{domain_uuid}']\n\
             SUSHY_EMULATOR_BOOT_LOADER_MAP = {{'UEFI': {{'x86_64': '/usr/share/OVMF/OVMF_CODE_4M.secboot.fd'}}, \
             'Legacy': {{'x86_64': None}}}}\n\
             SUSHY_EMULATOR_SECURE_BOOT_ENABLED_NVRAM = '/usr/share/OVMF/OVMF_VARS_4M.ms.fd'\n\
             SUSHY_EMULATOR_SECURE_BOOT_DISABLED_NVRAM = '/usr/share/OVMF/OVMF_VARS_4M.fd'\n"
        )
    }

    fn start_with(driver: &str, accounts: bool) -> Sushy {
        let dir = tempfile::tempdir().unwrap();
        let pki = pki(dir.path(), "sushy");
        let auth = dir.path().join("htpasswd");
        std::fs::write(&auth, format!("admin:{}\n", bcrypt_hash(SUSHY_PASSWORD))).unwrap();
        let config = dir.path().join("sushy.conf");
        std::fs::write(&config, format!("{driver}SUSHY_EMULATOR_AUTH_FILE = '{}'\n", auth.display())).unwrap();
        let port = free_tcp_port();
        let mut command = if accounts {
            let mut c = Command::new(format!("{VENV}/bin/python3"));
            c.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("data/sushy-accounts.py"));
            c
        } else {
            Command::new(format!("{VENV}/bin/sushy-emulator"))
        };
        let mut child = command
            // Its state lives in TMPDIR/sushy-emulator: one per instance, or parallel tests
            // would share machines.
            .env("TMPDIR", dir.path())
            .arg("--config")
            .arg(&config)
            .args(["-i", "127.0.0.1", "-p", &port.to_string(), "--ssl-certificate"])
            .arg(&pki.cert)
            .arg("--ssl-key")
            .arg(&pki.key)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("sushy.log")).unwrap())
            .spawn()
            .expect("sushy-emulator (scripts/setup installs it)");
        wait_for_tcp(port, &mut child, "sushy-emulator");
        Sushy { endpoint: format!("https://127.0.0.1:{port}"), pki, _guard: Guard(child), dir }
    }

    /// The virtual-media images sushy downloaded with this file name: it keeps each one in a
    /// directory of its own under its TMPDIR, as a BMC keeps the ISO it mounted.
    pub fn downloaded(&self, name: &str) -> Vec<std::path::PathBuf> {
        let Ok(entries) = std::fs::read_dir(self.dir.path()) else { return Vec::new() };
        entries.flatten().map(|e| e.path().join(name)).filter(|p| p.is_file()).collect()
    }
}

/// dnsmasq as a provisioning network's DHCP and TFTP server on one interface of this host:
/// addresses from a range, the boot files the repository's `ipxe/dnsmasq.conf` names by
/// client architecture and user class (iPXE gets `boot.ipxe`), served from `tftp`. No DNS.
/// Stopped when dropped.
#[derive(Debug)]
pub struct Dnsmasq {
    /// Its log (every DHCP and TFTP exchange).
    pub log: std::path::PathBuf,
    _guard: Guard,
    _dir: tempfile::TempDir,
}

impl Dnsmasq {
    /// Serves `interface` addresses `first`..`last` (/24) and the boot files in `tftp`.
    pub fn start(interface: &str, first: &str, last: &str, tftp: &Path) -> Dnsmasq {
        Dnsmasq::spawn(Command::new("dnsmasq"), interface, first, last, tftp)
    }

    /// [`Dnsmasq::start`] in network namespace `namespace` (a host's own DHCP server).
    pub fn start_in(namespace: &str, interface: &str, first: &str, last: &str, tftp: &Path) -> Dnsmasq {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", namespace, "dnsmasq"]);
        Dnsmasq::spawn(command, interface, first, last, tftp)
    }

    fn spawn(mut command: Command, interface: &str, first: &str, last: &str, tftp: &Path) -> Dnsmasq {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("dnsmasq.log");
        let child = command
            .args(["--keep-in-foreground", "--port=0", "--bind-interfaces", "--log-dhcp"])
            .arg(format!("--conf-file={}", crate::hil::workspace().join("ipxe/dnsmasq.conf").display()))
            .arg(format!("--interface={interface}"))
            .arg(format!("--dhcp-range={first},{last},255.255.255.0,1h"))
            .arg("--enable-tftp")
            .arg(format!("--tftp-root={}", tftp.display()))
            .arg(format!("--dhcp-leasefile={}", dir.path().join("leases").display()))
            .arg(format!("--pid-file={}", dir.path().join("pid").display()))
            .arg(format!("--log-facility={}", log.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dnsmasq (scripts/setup installs dnsmasq-base)");
        let guard = Guard(child);
        let until = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&log).unwrap_or_default().contains("TFTP root") {
            assert!(
                Instant::now() < until,
                "dnsmasq did not start: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Dnsmasq { log, _guard: guard, _dir: dir }
    }
}

/// A static file server (python3 -m http.server) for images the BMC downloads.
#[derive(Debug)]
pub struct Files {
    pub url: String,
    pub dir: tempfile::TempDir,
    _guard: Guard,
}

impl Files {
    pub fn start() -> Files {
        let dir = tempfile::tempdir().unwrap();
        let port = free_tcp_port();
        let mut child = Command::new("python3")
            .args(["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1", "--directory"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_tcp(port, &mut child, "http.server");
        Files { url: format!("http://127.0.0.1:{port}"), dir, _guard: Guard(child) }
    }
}

/// ipmi_sim on a loopback UDP port with users `admin`/`password` (administrator) and
/// `viewer`/`viewpass` (user privilege), a chassis program keeping power and the boot
/// device in files, and Serial-over-LAN to whatever listens on `serial_port` (the machine's
/// serial line; ipmi_sim keeps trying to connect to it).
#[derive(Debug)]
pub struct IpmiSim {
    pub port: u16,
    pub serial_port: u16,
    pub dir: tempfile::TempDir,
    _guard: Guard,
}

const CHASSIS: &str = r#"#!/bin/sh
# ipmi_sim chassis program: power and boot device kept in files next to this script.
D=$(dirname "$0"); op=$2; shift 2
case $op in
  get) for p in "$@"; do case $p in
         power) echo "power:$(cat $D/power 2>/dev/null || echo 0)";;
         boot) echo "boot:$(cat $D/bootdev 2>/dev/null || echo default)";;
         *) echo "bad $p"; exit 1;; esac; done;;
  set) while [ $# -ge 2 ]; do p=$1; v=$2; shift 2; case $p in
         power) echo "$v" > $D/power; echo "power $v" >> $D/chassis.log;;
         reset|shutdown|identify) echo "$p $v" >> $D/chassis.log;;
         boot) echo "$v" > $D/bootdev;;
         *) echo "bad $p"; exit 1;; esac; done;;
  *) exit 1;;
esac
exit 0
"#;

/// The chassis program of a machine: power on starts QEMU (`qemu.sh` next to it) booting
/// from the device last set (`-boot once=n` for pxe), power off kills it; a QEMU that ended
/// by itself (the guest rebooted under `-no-reboot`) is powered off.
const MACHINE_CHASSIS: &str = r#"#!/bin/sh
D=$(dirname "$0"); op=$2; shift 2
alive() { [ -f $D/qemu.pid ] && kill -0 $(cat $D/qemu.pid) 2>/dev/null; }
start_vm() { alive && return 0
  case $(cat $D/bootdev 2>/dev/null || echo default) in pxe) B="once=n";; cdrom) B="once=d";; *) B="c";; esac
  echo "start -boot $B" >> $D/chassis.log
  rm -f $D/qemu.pid
  setsid $D/qemu.sh -boot $B < /dev/null > $D/qemu.out 2>&1 &
  i=0; while [ $i -lt 50 ] && ! [ -s $D/qemu.pid ]; do sleep 0.1; i=$((i+1)); done; }
stop_vm() { alive || return 0; kill $(cat $D/qemu.pid)
  i=0; while alive && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
  alive && kill -9 $(cat $D/qemu.pid); rm -f $D/qemu.pid; }
case $op in
  get) for p in "$@"; do case $p in
         power) if alive; then echo power:1; else echo power:0; fi;;
         boot) echo "boot:$(cat $D/bootdev 2>/dev/null || echo default)";;
         *) echo "bad $p"; exit 1;; esac; done;;
  set) while [ $# -ge 2 ]; do p=$1; v=$2; shift 2; case $p in
         power) echo "power $v" >> $D/chassis.log; if [ "$v" = 1 ]; then start_vm; else stop_vm; fi;;
         reset) echo "reset $v" >> $D/chassis.log; stop_vm; start_vm;;
         shutdown|identify) echo "$p $v" >> $D/chassis.log;;
         boot) echo "$v" > $D/bootdev;;
         *) echo "bad $p"; exit 1;; esac; done;;
  *) exit 1;;
esac
exit 0
"#;

/// In [`IpmiSim::machine`]'s QEMU arguments, the port of ipmi_sim's Serial-over-LAN line
/// (`Guest::machine_args_on_sol`).
pub const SOL_PORT: &str = "@SOL_PORT@";

/// Plays a machine on an ipmi_sim serial line (`IpmiSim::serial_port`): answers `answer`
/// to every `question` that arrives, until the test's runtime ends.
pub async fn answer_on_serial_line(port: u16, question: &'static [u8], answer: &'static [u8]) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut line, _)) = listener.accept().await else { return };
            let mut seen = Vec::new();
            let mut buf = [0u8; 256];
            while let Ok(n) = line.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
                if seen.windows(question.len()).any(|w| w == question) {
                    seen.clear();
                    let _ = line.write_all(answer).await;
                }
            }
        }
    });
}

impl IpmiSim {
    /// A BMC whose chassis only keeps power and boot device in files.
    pub fn start() -> IpmiSim {
        Self::start_with(CHASSIS, "password")
    }

    /// [`IpmiSim::start`] with another firmware revision than 9.08: `major.minor` (a
    /// machine whose firmware was updated).
    pub fn start_with_firmware(major: u8, minor: u8) -> IpmiSim {
        Self::start_full(CHASSIS, "password", (major, minor))
    }

    /// The same with `password` (at most 20 characters) for `admin` instead of `password`:
    /// a secret a test can search for without matching the word.
    pub fn start_with_admin_password(password: &str) -> IpmiSim {
        assert!(password.len() <= 20, "IPMI passwords have at most 20 bytes");
        Self::start_with(CHASSIS, password)
    }

    /// The BMC of a QEMU machine: QEMU runs with `qemu_args` (and `-boot` from the boot
    /// device) while the chassis is powered on. The machine is killed on drop.
    pub fn machine(qemu_args: &[String]) -> IpmiSim {
        Self::machine_wrapped(&[], qemu_args)
    }

    /// [`IpmiSim::machine`], with QEMU in the network namespace of process `pid` (a switch's,
    /// where its tap ports are: [`crate::ovs::Ovs::pid`]).
    pub fn machine_in(pid: u32, qemu_args: &[String]) -> IpmiSim {
        Self::machine_wrapped(&["nsenter".into(), format!("--net=/proc/{pid}/ns/net")], qemu_args)
    }

    fn machine_wrapped(wrap: &[String], qemu_args: &[String]) -> IpmiSim {
        use std::os::unix::fs::PermissionsExt as _;
        let sim = Self::start_with(MACHINE_CHASSIS, "password");
        let port = sim.serial_port.to_string();
        let quote = |a: &String| format!("'{}'", a.replace(SOL_PORT, &port).replace('\'', "'\\''"));
        let quoted: Vec<String> = qemu_args.iter().map(quote).collect();
        let wrap: Vec<String> = wrap.iter().map(quote).collect();
        let script = sim.dir.path().join("qemu.sh");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nexec {} qemu-system-x86_64 {} -pidfile {} \"$@\"\n",
                wrap.join(" "),
                quoted.join(" "),
                sim.dir.path().join("qemu.pid").display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        sim
    }

    fn start_with(chassis_program: &str, admin_password: &str) -> IpmiSim {
        Self::start_full(chassis_program, admin_password, (9, 8))
    }

    fn start_full(chassis_program: &str, admin_password: &str, (major, minor): (u8, u8)) -> IpmiSim {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let port = free_udp_port();
        let serial_port = free_tcp_port();
        let chassis = dir.path().join("chassis.sh");
        std::fs::write(&chassis, chassis_program).unwrap();
        std::fs::set_permissions(&chassis, std::fs::Permissions::from_mode(0o755)).unwrap();
        let auths = "none md2 md5 straight";
        let lan = format!(
            "name \"testbmc\"\nset_working_mc 0x20\n  startlan 1\n    addr 127.0.0.1 {port}\n    priv_limit admin\n    \
             allowed_auths_callback {auths}\n    allowed_auths_user {auths}\n    allowed_auths_operator {auths}\n    \
             allowed_auths_admin {auths}\n    guid a123456789abcdefa123456789abcdef\n  endlan\n  \
             chassis_control \"{} 0x20\"\n  sol \"tcp:127.0.0.1:{serial_port}\" 115200\n  user 1 true \"\" \"test\" user 10 {auths}\n  \
             user 2 true \"admin\" \"{admin_password}\" admin 10 {auths}\n  user 3 true \"viewer\" \"viewpass\" user 10 {auths}\n",
            chassis.display()
        );
        std::fs::write(dir.path().join("lan.conf"), lan).unwrap();
        std::fs::write(
            dir.path().join("sim.emu"),
            format!(
                "mc_setbmc 0x20\nmc_add 0x20 0 no-device-sdrs 0x23 {major} {minor} 0x9f 0x1291 0xf02 persist_sdr\n\
                 sel_enable 0x20 1000 0x0a\nmc_enable 0x20\n"
            ),
        )
        .unwrap();
        std::fs::create_dir(dir.path().join("state")).unwrap();
        let child = Command::new("ipmi_sim")
            .arg("-c")
            .arg(dir.path().join("lan.conf"))
            .arg("-f")
            .arg(dir.path().join("sim.emu"))
            .arg("-s")
            .arg(dir.path().join("state"))
            .arg("-n")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("ipmi_sim.log")).unwrap())
            .spawn()
            .expect("ipmi_sim (scripts/setup installs openipmi)");
        let sim = IpmiSim { port, serial_port, dir, _guard: Guard(child) };
        // Ready when it answers a Get Device ID.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ok = Command::new("ipmitool")
                .args(["-I", "lanplus", "-C", "3", "-H", "127.0.0.1", "-p", &port.to_string(), "-U", "admin", "-E"])
                .args(["-N", "1", "-R", "1", "mc", "info"])
                .env("IPMI_PASSWORD", admin_password)
                .output()
                .is_ok_and(|o| o.status.success());
            if ok {
                return sim;
            }
            assert!(Instant::now() < deadline, "ipmi_sim did not answer on {port}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// What the chassis program was asked to do, in order.
    pub fn chassis_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("chassis.log")).unwrap_or_default()
    }
}

impl Drop for IpmiSim {
    /// Kills the machine a chassis program started (it runs in its own session).
    fn drop(&mut self) {
        if let Some(pid) =
            std::fs::read_to_string(self.dir.path().join("qemu.pid")).ok().and_then(|p| p.trim().parse::<i32>().ok())
        {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

fn virsh(args: &[&str]) -> std::process::Output {
    Command::new("virsh")
        .args(["-c", "qemu:///system"])
        .args(args)
        .output()
        .expect("virsh (scripts/setup-hil installs it)")
}

/// A throwaway QEMU domain under libvirt (whose daemons are started here unless already
/// running): no disk and no NIC, so when on it sits in its firmware, which is all a power
/// round trip needs. Destroyed and undefined on drop.
#[derive(Debug)]
pub struct LibvirtDomain {
    pub name: String,
    pub uuid: String,
    _daemons: Vec<Guard>,
    dir: tempfile::TempDir,
}

/// A machine for `LibvirtDomain::machine`: one virtio disk (the default boot device) and a
/// NIC on QEMU's user network whose TFTP directory network-boots it when the boot device is
/// set to the network.
#[derive(Debug)]
pub struct LibvirtMachine<'a> {
    /// The raw disk image.
    pub disk: &'a Path,
    /// Its serial.
    pub serial: &'a str,
    /// The NIC's MAC.
    pub mac: &'a str,
    /// The TFTP directory holding `boot.ipxe`.
    pub tftp: &'a Path,
}

impl LibvirtDomain {
    /// A domain with no disk and no NIC: it sits in its firmware when on.
    pub fn define() -> LibvirtDomain {
        Self::define_xml("<os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os>", "", "")
    }

    /// A UEFI domain (q35 with SMM, OVMF's Secure Boot capable code, split pflash), no disk
    /// and no NIC, with Secure Boot off: its VARS come from the template without keys. What
    /// sushy's libvirt driver needs to turn Secure Boot on and off ([`Sushy`] maps it to
    /// the 4M OVMF builds, the VARS with Microsoft's keys enrolled for on).
    pub fn define_uefi() -> LibvirtDomain {
        Self::define_xml(
            "<os><type arch='x86_64' machine='q35'>hvm</type>\
             <loader readonly='yes' secure='no' type='pflash'>/usr/share/OVMF/OVMF_CODE_4M.secboot.fd</loader>\
             <nvram template='/usr/share/OVMF/OVMF_VARS_4M.fd'/><boot dev='hd'/></os>\
             <features><acpi/><smm state='on'/></features>",
            "",
            "",
        )
    }

    /// A domain with a disk and two NICs. libvirt cannot give QEMU's user network a TFTP
    /// directory, so the NIC that network-boots is passed to QEMU directly, first in the boot
    /// order (index 0), as a machine set to network-boot first is: the scheduler's iPXE script
    /// sends it on to its disk when it has nothing to run (a bootable disk later in the order
    /// would otherwise win over a network boot the BMC asked for). The libvirt NIC is there
    /// for sushy's boot override to name. Its reboot powers it off. Its SMBIOS BIOS
    /// version is sushy's default BiosVersion (1.0.0), so what the ramdisk reads in band and
    /// what Redfish reports agree. Everything it reads must be readable by libvirt's QEMU user.
    pub fn machine(spec: &LibvirtMachine<'_>) -> LibvirtDomain {
        let devices = format!(
            "<disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='{}'/>\
             <target dev='vda' bus='virtio'/><serial>{}</serial></disk>\
             <interface type='user'><model type='virtio'/></interface>",
            spec.disk.display(),
            spec.serial
        );
        let commandline = format!(
            "<qemu:commandline><qemu:arg value='-netdev'/><qemu:arg value='user,id=hostnet9,tftp={},bootfile=boot.ipxe'/>\
             <qemu:arg value='-device'/><qemu:arg value='virtio-net-pci,netdev=hostnet9,mac={},bootindex=0,bus=pci.0,addr=0x10'/>\
             <qemu:arg value='-smbios'/><qemu:arg value='type=0,version=1.0.0'/></qemu:commandline>",
            spec.tftp.display(),
            spec.mac
        );
        Self::define_xml(
            "<os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os><on_reboot>destroy</on_reboot>",
            &devices,
            &commandline,
        )
    }

    fn define_xml(os: &str, devices: &str, commandline: &str) -> LibvirtDomain {
        let mut daemons = Vec::new();
        let socket = Path::new("/run/libvirt/libvirt-sock");
        // A socket file left by a daemon that is gone refuses connections: start our own.
        if std::os::unix::net::UnixStream::connect(socket).is_err() {
            let _ = std::fs::remove_file(socket);
            std::fs::create_dir_all("/run/libvirt").unwrap();
            for daemon in ["virtlogd", "libvirtd"] {
                let child = Command::new(daemon)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap_or_else(|e| panic!("{daemon} (scripts/setup-hil installs it): {e}"));
                daemons.push(Guard(child));
            }
            let deadline = Instant::now() + Duration::from_secs(30);
            while std::os::unix::net::UnixStream::connect(socket).is_err() {
                assert!(Instant::now() < deadline, "libvirtd did not create {}", socket.display());
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let name = format!("metal-test-{}-{}", std::process::id(), free_tcp_port());
        let xml = format!(
            "<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'><name>{name}</name>\
             <memory unit='MiB'>{}</memory><vcpu>{}</vcpu>{os}\
             <devices>{devices}<serial type='file'><source path='{}'/></serial></devices>{commandline}</domain>",
            if devices.is_empty() { 64 } else { 512 },
            if devices.is_empty() { 1 } else { 2 },
            dir.path().join("console.log").display()
        );
        let file = dir.path().join("domain.xml");
        std::fs::write(&file, xml).unwrap();
        let out = virsh(&["define", file.to_str().unwrap()]);
        assert!(out.status.success(), "virsh define: {}", String::from_utf8_lossy(&out.stderr));
        let uuid = String::from_utf8_lossy(&virsh(&["domuuid", &name]).stdout).trim().to_owned();
        LibvirtDomain { name, uuid, _daemons: daemons, dir }
    }

    /// The domain's XML as libvirt has it now.
    pub fn xml(&self) -> String {
        String::from_utf8_lossy(&virsh(&["dumpxml", &self.name]).stdout).into_owned()
    }

    /// What the domain printed on its serial console (since it last started: libvirt
    /// truncates the file then).
    pub fn console(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("console.log")).unwrap_or_default()
    }

    /// When the serial console's file was last written (or truncated by a start).
    pub fn console_written(&self) -> Option<std::time::SystemTime> {
        std::fs::metadata(self.dir.path().join("console.log")).and_then(|m| m.modified()).ok()
    }

    /// What libvirt says (`running`, `shut off`).
    pub fn state(&self) -> String {
        String::from_utf8_lossy(&virsh(&["domstate", &self.name]).stdout).trim().to_owned()
    }

    /// Waits up to `limit` for the domain to reach `wanted` (a guest that powers itself
    /// off passes through `in shutdown`), returning the last state seen.
    pub fn settle(&self, wanted: &str, limit: std::time::Duration) -> String {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let state = self.state();
            if state == wanted || std::time::Instant::now() > deadline {
                return state;
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
    }
}

impl Drop for LibvirtDomain {
    fn drop(&mut self) {
        let _ = virsh(&["destroy", &self.name]);
        let _ = virsh(&["undefine", &self.name]);
    }
}
