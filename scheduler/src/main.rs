//! `metal-scheduler`: parses the command line and dispatches to the crates below it (`metal-machines`
//! starts the service, `metal-api` serves it).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use metal_machines::ca_files::{self, IssueRequest};
use metal_protocol::Role;
use metal_types::clock::SystemClock;
use metal_types::config::{Config, ConfigLayer};
use metal_types::duration::parse_duration;

/// glibc's allocator took a quarter of a placement's CPU (`perf`, 100,000 nodes); with
/// mimalloc the in-process placement runs 23% faster (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The metal control plane: nodes, pools, reservations, whole-node leases, teardown and billing.
#[derive(Parser, Debug)]
#[command(name = "metal-scheduler", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Manage the site CA that signs every ramdisk, node and agent identity.
    #[command(subcommand)]
    Ca(CaCommand),
    /// Run the control plane service: the HTTP API on --listen, data in --data-dir.
    ///
    /// With boot-listen set, the boot service runs too: iPXE scripts at /boot/ipxe on the API
    /// port, the ramdisk protocol over TLS on boot-listen (certificate from the site CA in
    /// DATA_DIR/ca, created on first start), the ramdisk files from DATA_DIR/boot.
    ///
    /// Settings come from defaults, then --config FILE (TOML), then METAL_* environment
    /// variables, then these flags. With no database URL the service embeds SQLite in the data
    /// directory. On first start it creates a platform admin credential and writes its token
    /// to DATA_DIR/admin.token (mode 0600).
    Serve(ServeArgs),
    /// Print the OpenAPI document of the HTTP API.
    Openapi,
}

#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// TOML configuration file (keys: listen, data-dir, database-url, *-deadline, reaper-interval,
    /// site; for HTTPS on the API tls-names (a certificate from the site CA) or tls-cert-file and
    /// tls-key-file, and allow-plain-http (plain HTTP on an address other than loopback is
    /// refused without it); for the boot service boot-listen, boot-http-listen, boot-controller-url, boot-files-dir,
    /// boot-auto-enrol, boot-token-ttl, boot-certificate-validity, boot-rate-limit,
    /// boot-kernel-args (boot-kernel-args-aarch64 for arm64 machines), boot-lldp-wait, boot-media-url (teardowns boot per-boot ISOs by virtual media),
    /// boot-tpm-ca-file (PEM: the TPM makers' CAs a node's EK certificate must chain to, for measured boot),
    /// host-token-ttl, host-certificate-validity (a deployed OS's join), and for the image store image-dir, image-catalog, image-ca-file,
    /// image-import-attempts, image-import-backoff, image-import-lease; lessee-rate-limit (what a lessee may do
    /// to its leased machine per lease per minute, default 12), console-ssh-listen (the lessee's serial
    /// console over SSH: ssh RESERVATION@HOST with a key of the lease's profile); each also as METAL_<KEY> with dashes as
    /// underscores). Environment only: METAL_MASTER_KEY (64 hex digits, seals BMC passwords at
    /// rest; without it they are stored unsealed, with a warning) and METAL_LOG (log filter,
    /// e.g. info or metal_machines=debug; default info).
    #[arg(long, env = "METAL_CONFIG")]
    config: Option<PathBuf>,
    /// Address and port to listen on [default: 127.0.0.1:7450].
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Data directory [default: /var/lib/metal].
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum CaCommand {
    /// Create a new site CA: DIR/ca.crt (share it) and DIR/ca.key (mode 0600, keep it secret).
    ///
    /// Refuses to overwrite an existing CA. The SHA-256 fingerprint it prints is what ramdisks
    /// pin on their kernel command line (metal.ca=...).
    Init {
        /// Directory for the CA files (created if missing).
        #[arg(long)]
        dir: PathBuf,
        /// Site name: the SPIFFE trust domain in every certificate (A-Z a-z 0-9 . _ -).
        #[arg(long, default_value = "metal")]
        site: String,
        /// How long the CA certificate is valid (s, m, h or d).
        #[arg(long, default_value = "3650d", value_parser = parse_duration)]
        valid_for: Duration,
    },
    /// Issue a role certificate with a fresh Ed25519 key: writes PREFIX.key and PREFIX.crt.
    ///
    /// PREFIX.crt holds the chain (role certificate, then CA certificate). The identity is
    /// spiffe://SITE/node/NODE/gen/GENERATION/ROLE.
    Issue {
        /// Directory holding ca.crt and ca.key.
        #[arg(long)]
        dir: PathBuf,
        /// Role: ramdisk, node, node-tenant or agent.
        #[arg(long)]
        role: Role,
        /// Node id the certificate speaks for.
        #[arg(long)]
        node: String,
        /// The node's current identity generation.
        #[arg(long)]
        generation: u64,
        /// Output prefix: PREFIX.key and PREFIX.crt are written (never overwritten).
        #[arg(long)]
        out: PathBuf,
        /// How long the certificate is valid (s, m, h or d). Role certificates are short-lived.
        #[arg(long, default_value = "12h", value_parser = parse_duration)]
        valid_for: Duration,
    },
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut config = Config::default();
    if let Some(path) = &args.config {
        ConfigLayer::from_file(path)?.apply(&mut config)?;
    }
    ConfigLayer::from_env(|k| std::env::var(k).ok())?.apply(&mut config)?;
    ConfigLayer { listen: args.listen, data_dir: args.data_dir, ..ConfigLayer::default() }.apply(&mut config)?;
    init_logging();
    raise_open_files_limit();
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let bind = |address: std::net::SocketAddr, setting: &'static str| async move {
            tokio::net::TcpListener::bind(address)
                .await
                .map_err(|e| anyhow::anyhow!("cannot listen on {address} ({setting}): {e}"))
        };
        let api = bind(config.listen, "listen").await?;
        let boot = match config.boot.listen {
            Some(address) => Some(bind(address, "boot-listen").await?),
            None => None,
        };
        let firmware = match config.boot.http_listen {
            Some(address) => Some(bind(address, "boot-http-listen").await?),
            None => None,
        };
        let console_ssh = match config.console_ssh_listen {
            Some(address) => Some(bind(address, "console-ssh-listen").await?),
            None => None,
        };
        let app = metal_api::start(config, std::sync::Arc::new(SystemClock)).await?;
        metal_api::serve(app, metal_api::Listeners { api, boot, firmware, console_ssh }).await?;
        anyhow::Ok(())
    })
}

/// Raises the soft limit on open files to the hard one (systemd's soft default is 1,024):
/// a kept connection to each of 10,000 BMCs is a socket each.
fn raise_open_files_limit() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit through a pointer to a live, aligned value.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 || limit.rlim_cur >= limit.rlim_max {
        return;
    }
    let soft = limit.rlim_cur;
    limit.rlim_cur = limit.rlim_max;
    // SAFETY: setrlimit reads one rlimit through a pointer to a live, aligned value.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } == 0 {
        tracing::info!(from = soft, to = limit.rlim_max, "raised the open files limit");
    } else {
        tracing::warn!(soft, "cannot raise the open files limit: {}", std::io::Error::last_os_error());
    }
}

/// Logs to stderr: human-readable on a terminal, JSON lines otherwise.
fn init_logging() {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("METAL_LOG").unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if std::io::stderr().is_terminal() { builder.init() } else { builder.json().init() }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("metal-scheduler: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Ca(CaCommand::Init { dir, site, valid_for }) => {
            let ca = ca_files::init(&dir, &site, valid_for)?;
            println!("site CA for {site:?} created in {}", dir.display());
            println!("fingerprint (sha256): {}", ca.certificate().fingerprint_sha256());
        }
        Command::Ca(CaCommand::Issue { dir, role, node, generation, out, valid_for }) => {
            let ca = ca_files::load(&dir)?;
            let request = IssueRequest { role, node: &node, generation, validity: valid_for };
            let files = ca_files::issue(&ca, &request, &out)?;
            println!("{role} certificate for node {node} generation {generation}");
            let ca_end = ca.certificate().not_after();
            if std::time::SystemTime::now() + valid_for > ca_end {
                let end = time::OffsetDateTime::from(ca_end);
                println!("valid until: {end} (the CA's own end: a certificate never outlives its CA)");
            }
            println!("key:         {}", files.key.display());
            println!("certificate: {}", files.cert.display());
        }
        Command::Serve(args) => serve(args)?,
        Command::Openapi => print!("{}", metal_api::openapi_json()),
    }
    Ok(())
}
