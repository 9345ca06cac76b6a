//! The real scheduler with its boot service on, for tests outside the scheduler crate: its
//! own runtime on loopback, a temporary data directory (the site CA is created on start),
//! SQLite there or a fresh PostgreSQL database when `METAL_TEST_POSTGRES` is set, a manual
//! clock that starts at the real time (TLS checks certificates against the real time), and
//! blocking helpers for the admin API.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use metal_machines::app;
use metal_protocol::{Envelope, Role, Signer, SigningKey};
use metal_types::clock::ManualClock;
use metal_types::config::Config;
use serde_json::Value;

/// A new, empty PostgreSQL database when `METAL_TEST_POSTGRES` names a server's admin URL
/// (scripts/test's second pass), else None: SQLite in the data directory.
pub fn postgres_database() -> Option<String> {
    let admin = std::env::var("METAL_TEST_POSTGRES").ok()?;
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    let mut client = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
    client.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
    Some(format!("{}/{name}", admin.rsplit_once('/').unwrap().0))
}

/// Copies the files of directory `from` into a new directory `to` (the site CA for a replica).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// A running scheduler.
pub struct TestScheduler {
    /// `http://127.0.0.1:PORT`: the API and the iPXE endpoints.
    pub url: String,
    /// `https://127.0.0.1:PORT`: the ramdisk protocol.
    pub boot_url: String,
    /// The port of the TLS listener.
    pub boot_port: u16,
    /// The port of the HTTP API.
    pub port: u16,
    /// The port of the lessee's console SSH gateway.
    pub ssh_port: u16,
    /// SHA-256 of the site CA, hex (what `metal.ca=` carries).
    pub fingerprint: String,
    /// The bootstrap admin token.
    pub admin: String,
    /// The service's clock.
    pub clock: ManualClock,
    /// The service.
    pub app: metal_api::AppState,
    dir: tempfile::TempDir,
    database_url: Option<String>,
    http: reqwest::blocking::Client,
    _runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for TestScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestScheduler").field("url", &self.url).field("boot_url", &self.boot_url).finish()
    }
}

impl TestScheduler {
    /// Starts with the boot service on; `configure` adjusts the configuration first (the
    /// ramdisk files directory, auto-enrol, the controller URL a guest uses, ...).
    pub fn start(configure: impl FnOnce(&mut Config)) -> TestScheduler {
        TestScheduler::start_on([127, 0, 0, 1].into(), configure)
    }

    /// [`TestScheduler::start`], with both listeners on `bind` (guests on a switch reach
    /// it at an address of the host's; with an unspecified one, `configure` names the
    /// controller URL).
    pub fn start_on(bind: std::net::IpAddr, configure: impl FnOnce(&mut Config)) -> TestScheduler {
        TestScheduler::start_in(tempfile::tempdir().unwrap(), postgres_database(), None, bind, configure)
    }

    /// Stops this service abruptly (every task dropped mid-await, as `kill -9` would leave
    /// the database and the files) and starts a new one on the same data directory and
    /// database, configured by `configure`.
    pub fn restart(self, configure: impl FnOnce(&mut Config)) -> TestScheduler {
        let (dir, database_url) = self.kill();
        TestScheduler::start_in(dir, database_url, None, [127, 0, 0, 1].into(), configure)
    }

    /// Stops this service abruptly (as `kill -9` would); returns its data directory and
    /// database URL.
    pub fn kill(self) -> (tempfile::TempDir, Option<String>) {
        let TestScheduler { dir, database_url, _runtime, app, .. } = self;
        drop(app);
        _runtime.shutdown_background();
        (dir, database_url)
    }

    /// A second replica of this service: its own data directory and listeners, the same
    /// database (this one's SQLite file, or its PostgreSQL database), the same image
    /// directory (replicas serve images from shared storage) and the same clock (replicas'
    /// clocks agree), configured by `configure`.
    pub fn replica(&self, configure: impl FnOnce(&mut Config)) -> TestScheduler {
        let database = self.database_url.clone().unwrap_or_else(|| metal_store::Store::sqlite_url(self.dir.path()));
        let images = self.dir.path().join("images");
        let ca = self.dir.path().join(metal_machines::metal::boot::CA_DIR);
        let dir = tempfile::tempdir().unwrap();
        copy_dir(&ca, &dir.path().join(metal_machines::metal::boot::CA_DIR));
        std::fs::copy(self.dir.path().join(app::ADMIN_TOKEN_FILE), dir.path().join(app::ADMIN_TOKEN_FILE)).unwrap();
        TestScheduler::start_in(dir, Some(database), Some(self.clock.clone()), [127, 0, 0, 1].into(), move |config| {
            config.images.dir = Some(images);
            configure(config);
        })
    }

    fn start_in(
        dir: tempfile::TempDir,
        database_url: Option<String>,
        clock: Option<ManualClock>,
        bind: std::net::IpAddr,
        configure: impl FnOnce(&mut Config),
    ) -> TestScheduler {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let (api, boot, ssh) = runtime.block_on(async {
            let api = tokio::net::TcpListener::bind((bind, 0)).await.unwrap();
            let boot = tokio::net::TcpListener::bind((bind, 0)).await.unwrap();
            let ssh = tokio::net::TcpListener::bind((bind, 0)).await.unwrap();
            (api, boot, ssh)
        });
        let ssh_port = ssh.local_addr().unwrap().port();
        let (port, boot_port) = (api.local_addr().unwrap().port(), boot.local_addr().unwrap().port());
        let mut config =
            Config { data_dir: dir.path().to_path_buf(), database_url: database_url.clone(), ..Config::default() };
        config.listen = api.local_addr().unwrap();
        config.boot.listen = Some(boot.local_addr().unwrap());
        configure(&mut config);
        let started_here = clock.is_none();
        let clock = clock.unwrap_or_else(|| ManualClock::new(time::OffsetDateTime::now_utc()));
        let app = runtime.block_on(metal_api::start(config, Arc::new(clock.clone()))).unwrap();
        if started_here {
            // The site CA was just made on the real clock: a manual clock left a second boundary
            // behind would find it, and every certificate it issues, not yet valid (CI met it).
            clock.set(time::OffsetDateTime::now_utc());
        }
        let admin = std::fs::read_to_string(dir.path().join(app::ADMIN_TOKEN_FILE)).unwrap().trim().to_owned();
        let fingerprint = app.boot.as_ref().unwrap().ca_fingerprint.clone();
        let router = metal_api::router(app.clone());
        runtime.spawn(metal_api::http_server::serve(api, router, std::future::pending()));
        let boot_app = app.machines.clone();
        runtime.spawn(
            async move { metal_api::boot_service::serve(boot_app, boot, std::future::pending()).await.unwrap() },
        );
        runtime.spawn(metal_machines::console_ssh::serve(app.machines.clone(), ssh, std::future::pending()));
        TestScheduler {
            url: format!("http://127.0.0.1:{port}"),
            boot_url: format!("https://127.0.0.1:{boot_port}"),
            boot_port,
            port,
            ssh_port,
            fingerprint,
            admin,
            clock,
            app,
            dir,
            database_url,
            http: reqwest::blocking::Client::new(),
            _runtime: runtime,
        }
    }

    /// Runs `future` on the service's runtime (store reads, the service's own passes).
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self._runtime.block_on(future)
    }

    /// The data directory (the site CA is in `ca/`).
    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// `DATA_DIR/boot`, where the service looks for `vmlinuz` and `initrd` by default.
    pub fn files_dir(&self) -> PathBuf {
        self.dir.path().join("boot")
    }

    /// The site CA (to issue test certificates of other roles).
    pub fn ca(&self) -> metal_protocol::SiteCa {
        metal_machines::ca_files::load(&self.data_dir().join(metal_machines::metal::boot::CA_DIR)).unwrap()
    }

    /// An admin API call: status and JSON body (or the text as a JSON string).
    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call_as(&self.admin, method, path, body)
    }

    /// An API call with `token`: status and JSON body (or the text as a JSON string).
    pub fn call_as(&self, token: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        api_call(&self.http, &self.url, token, method, path, body)
    }

    /// One round of both sides' periodic passes, as the service runs them: lease ticks,
    /// metal's work, the workflows, capacity's work.
    pub fn passes(&self) {
        use metal_machines::metal;
        self.block_on(metal_capacity::leases::tick(&self.app.store, &*self.app.clock)).unwrap();
        self.block_on(metal::work::drain_once(&self.app.machines)).unwrap();
        self.block_on(metal::workflow::drive_once(&self.app.machines)).unwrap();
        self.block_on(metal_capacity::leases::drain_once(&self.app.store, &*self.app.clock)).unwrap();
    }

    /// [`TestScheduler::passes`] with the service's clock first brought up to the real one
    /// (real guests' certificates are checked against the real clock).
    pub fn passes_on_real_time(&self) {
        let now = time::OffsetDateTime::now_utc();
        if now > metal_types::clock::Clock::now(&self.clock) {
            self.clock.set(now);
        }
        self.passes();
    }

    /// An unauthenticated GET: status and body text.
    pub fn get_text(&self, path: &str) -> (u16, String) {
        let response = self.http.get(format!("{}{path}", self.url)).send().unwrap();
        (response.status().as_u16(), response.text().unwrap())
    }

    /// An unauthenticated GET of bytes, with a Range header when `range` is given: status
    /// and body.
    pub fn get_bytes(&self, path: &str, range: Option<&str>) -> (u16, Vec<u8>) {
        let mut request = self.http.get(format!("{}{path}", self.url));
        if let Some(range) = range {
            request = request.header("Range", range);
        }
        let response = request.send().unwrap();
        (response.status().as_u16(), response.bytes().unwrap().to_vec())
    }

    /// Enrols a node with this boot MAC (state new).
    pub fn enrol(&self, id: &str, mac: &str) {
        let (status, body) = self.call("POST", "/v1/nodes", Some(serde_json::json!({"id": id, "bootMac": mac})));
        assert_eq!(status, 201, "{body}");
    }

    /// Events of `kind` so far.
    pub fn events(&self, kind: &str) -> Vec<Value> {
        let (status, body) = self.call("GET", "/v1/events?after=0", None);
        assert_eq!(status, 200, "{body}");
        body["events"].as_array().unwrap().iter().filter(|e| e["kind"] == kind).cloned().collect()
    }

    /// Signs `report` with a fresh `role` certificate of `node` (identity generation
    /// `generation`) from the site CA and posts it over a connection authenticated by the
    /// same certificate; returns the receipt.
    pub fn post_report_as<T: serde::Serialize>(
        &self,
        role: Role,
        node: &str,
        generation: u64,
        payload_type: &str,
        report: &T,
    ) -> Value {
        self.reporter().post(role, node, generation, payload_type, report)
    }

    /// A client of the boot listener authenticated by a fresh `role` certificate of `node`
    /// (identity generation `generation`) from the site CA, and a signer with that identity.
    pub fn boot_client_as(&self, role: Role, node: &str, generation: u64) -> (reqwest::Client, Signer) {
        boot_client(&self.ca(), role, node, generation)
    }

    /// A ramdisk of a boot started by hand: arms a boot of `node`, takes its token from the
    /// iPXE script for `mac`, and joins with a fresh key; returns a client with the `ramdisk`
    /// certificate the join gave (what a deploy's plan and image are served to).
    pub fn ramdisk_client(&self, node: &str, mac: &str) -> (reqwest::Client, Signer) {
        self.arm_boot(node);
        join_boot(&self.ca(), &self.url, &self.boot_url, mac)
    }

    /// The token and task on the kernel line of an iPXE script.
    pub fn script_token(script: &str) -> Option<(String, String)> {
        let line = script.lines().find(|l| l.starts_with("kernel "))?;
        let value = |key: &str| line.split_whitespace().find_map(|w| w.strip_prefix(key)).map(str::to_owned);
        Some((value("metal.token=")?, value("metal.task=")?))
    }

    /// The token of a rescue's script: only on its file URLs (`...?token=`), never on the
    /// kernel command line.
    pub fn rescue_token(script: &str) -> Option<String> {
        let line = script.lines().find(|l| l.starts_with("kernel "))?;
        Some(line.split("token=").nth(1)?.split_whitespace().next()?.to_owned())
    }
}

/// Turns virtual-media boots on in `config`: per-boot ISOs served at `url` (as BMCs and the
/// ISO's iPXE reach the service), from a template `ipxe/build-ipxe-iso.sh --claim-template`
/// builds now (isolinux: BIOS) into the boot files directory.
pub fn with_media(config: &mut Config, url: &str) {
    let files = config.boot.files_dir.clone().unwrap_or_else(|| config.data_dir.join("boot"));
    std::fs::create_dir_all(&files).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ipxe/build-ipxe-iso.sh");
    let output = std::process::Command::new(script)
        .args(["--url", url, "--claim-template"])
        .arg(files.join(metal_machines::metal::boot::media::TEMPLATE))
        .output()
        .unwrap();
    assert!(output.status.success(), "build-ipxe-iso.sh: {}", String::from_utf8_lossy(&output.stderr));
    config.boot.media_url = Some(url.to_owned());
}

/// The claim a per-boot ISO's script carries (as the machine's iPXE finds it in the ISO).
pub fn claim_in_iso(iso: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(iso);
    let at = text.find("/boot/ipxe?claim=")? + "/boot/ipxe?claim=".len();
    Some(text[at..].split('&').next()?.to_owned())
}

/// What the lease fixtures need of a running scheduler, in this process ([`TestScheduler`])
/// or a `metal-scheduler serve` process (`served::ServedAdmin`).
pub trait Admin {
    /// An admin API call: status and JSON body (or the text as a JSON string).
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value);

    /// Posts reports to its boot listener with certificates from its site CA.
    fn reporter(&self) -> Reporter;

    /// What to show beside a failure (a served process's last log lines).
    fn context(&self) -> String {
        String::new()
    }

    /// The node as the API shows it.
    fn node(&self, id: &str) -> Value {
        let (status, body) = self.call("GET", &format!("/v1/nodes/{id}"), None);
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Starts a boot of the node by hand (`POST /v1/nodes/{id}/boots`), as an operator does
    /// before powering on a machine without a BMC: its next script request takes one token.
    fn arm_boot(&self, id: &str) -> Value {
        let (status, body) = self.call("POST", &format!("/v1/nodes/{id}/boots"), None);
        assert_eq!(status, 201, "{body}");
        body
    }

    /// Walks a node through admin transitions (`owner` "test" for in-progress states).
    fn walk(&self, id: &str, states: &[&str]) {
        for pair in states.windows(2) {
            let body = serde_json::json!({"from": pair[0], "to": pair[1], "owner": "test"});
            let (status, answer) = self.call("POST", &format!("/v1/nodes/{id}/transitions"), Some(body));
            assert_eq!(status, 200, "{} -> {}: {answer}", pair[0], pair[1]);
        }
    }

    /// Polls GET `path` (for at most 90 s) until `done` holds for its answer; `what` says
    /// what was awaited when it never does.
    fn until(&self, what: &str, path: &str, done: impl Fn(&Value) -> bool) -> Value {
        let until = std::time::Instant::now() + Duration::from_secs(90);
        loop {
            let (status, body) = self.call("GET", path, None);
            if status == 200 && done(&body) {
                return body;
            }
            assert!(std::time::Instant::now() < until, "{what}: still {body}\n{}", self.context());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Admin for TestScheduler {
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        TestScheduler::call(self, method, path, body)
    }

    fn reporter(&self) -> Reporter {
        Reporter::of(self.data_dir(), &self.boot_url)
    }
}

/// An API call to `url` with bearer `token`: status and JSON body (or the text as a JSON
/// string); status 0 when the service cannot be reached (it died, as a crash test asked).
pub fn api_call(
    http: &reqwest::blocking::Client,
    url: &str,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = http.request(method.parse().unwrap(), format!("{url}{path}")).bearer_auth(token);
    if let Some(b) = body {
        request = request.json(&b);
    }
    match request.send() {
        Ok(response) => {
            let status = response.status().as_u16();
            let text = response.text().unwrap_or_default();
            (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
        }
        Err(_) => (0, Value::Null),
    }
}

/// Posts signed reports to any service's boot listener with certificates from its site CA
/// (a test playing a ramdisk, or a tenant's OS, without joining).
#[derive(Debug)]
pub struct Reporter {
    /// The site CA (`DATA_DIR/ca`).
    pub ca: metal_protocol::SiteCa,
    /// `https://127.0.0.1:PORT`.
    pub boot_url: String,
}

impl Reporter {
    /// The CA of the service whose data directory is `data_dir`, reached at `boot_url`.
    pub fn of(data_dir: &Path, boot_url: &str) -> Reporter {
        let ca = metal_machines::ca_files::load(&data_dir.join(metal_machines::metal::boot::CA_DIR)).unwrap();
        Reporter { ca, boot_url: boot_url.to_owned() }
    }

    /// Signs `report` with a fresh `role` certificate of `node` at `generation` and posts it
    /// over a connection authenticated by the same certificate; returns the receipt.
    pub fn post<T: serde::Serialize>(
        &self,
        role: Role,
        node: &str,
        generation: u64,
        payload_type: &str,
        report: &T,
    ) -> Value {
        let (client, signer) = boot_client(&self.ca, role, node, generation);
        post_signed(&client, &signer, &self.boot_url, payload_type, report)
    }

    /// The ramdisk of the boot the scheduler started for the machine with `mac`: it takes the
    /// boot's token from the iPXE script of the service at `url` and joins with a fresh key.
    pub fn ramdisk(&self, url: &str, mac: &str) -> Ramdisk {
        let (client, signer) = join_boot(&self.ca, url, &self.boot_url, mac);
        Ramdisk { client, signer, boot_url: self.boot_url.clone() }
    }
}

/// A ramdisk that joined a boot (its key is the boot's: a wipe report it signs counts).
#[derive(Debug)]
pub struct Ramdisk {
    client: reqwest::Client,
    signer: Signer,
    boot_url: String,
}

impl Ramdisk {
    /// Signs `report` with the joined identity and posts it; returns the receipt.
    pub fn post<T: serde::Serialize>(&self, payload_type: &str, report: &T) -> Value {
        post_signed(&self.client, &self.signer, &self.boot_url, payload_type, report)
    }
}

/// Signs `report` as `signer` and posts it over `client` to the boot listener at `boot_url`.
fn post_signed<T: serde::Serialize>(
    client: &reqwest::Client,
    signer: &Signer,
    boot_url: &str,
    payload_type: &str,
    report: &T,
) -> Value {
    let envelope = Envelope::sign_json(payload_type, report, signer).unwrap();
    let url = format!("{boot_url}{}", metal_protocol::boot::REPORTS_PATH);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let response = client.post(url).json(&envelope).send().await.unwrap();
        assert_eq!(response.status(), 200);
        response.json::<Value>().await.unwrap()
    })
}

/// Takes the token of the boot started for `mac` from the iPXE script of the service at `url`
/// and joins its boot listener at `boot_url` with a fresh key: a client with the `ramdisk`
/// certificate the join gave, and a signer with it.
fn join_boot(ca: &metal_protocol::SiteCa, url: &str, boot_url: &str, mac: &str) -> (reqwest::Client, Signer) {
    let http = reqwest::blocking::Client::builder().danger_accept_invalid_certs(true).build().unwrap();
    let script = http.get(format!("{url}/boot/ipxe?mac={mac}")).send().unwrap().text().unwrap();
    let (token, _) = TestScheduler::script_token(&script).unwrap_or_else(|| panic!("no ramdisk boot: {script}"));
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    let public_key = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, key.verifying_key().as_bytes());
    let answer = http
        .post(format!("{boot_url}{}", metal_protocol::boot::JOIN_PATH))
        .json(&serde_json::json!({"token": token, "publicKey": public_key}))
        .send()
        .unwrap();
    assert_eq!(answer.status(), 200);
    let joined: metal_protocol::boot::JoinResponse = answer.json().unwrap();
    let chain = metal_protocol::identity::certificates_from_pem(&joined.certificate_chain).unwrap();
    mtls_client(ca, key, chain)
}

/// A client of a boot listener of `ca`'s site with a fresh `role` certificate of `node` at
/// `generation`, and a signer with that identity.
fn boot_client(ca: &metal_protocol::SiteCa, role: Role, node: &str, generation: u64) -> (reqwest::Client, Signer) {
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    let now = std::time::SystemTime::now();
    let der = ca
        .issue(&key.verifying_key(), node, generation, role, now - Duration::from_secs(60), Duration::from_secs(600))
        .unwrap();
    mtls_client(ca, key, vec![der, ca.certificate().der().to_vec()])
}

/// A boot listener client that presents `chain` (leaf first) for `key`, trusting `ca`.
fn mtls_client(ca: &metal_protocol::SiteCa, key: SigningKey, chain: Vec<Vec<u8>>) -> (reqwest::Client, Signer) {
    let key_pkcs8 = zeroize::Zeroizing::new(
        ed25519_dalek::pkcs8::EncodePrivateKey::to_pkcs8_der(&key).unwrap().as_bytes().to_vec(),
    );
    let pin = metal_bmc::tls::parse_fingerprint(&ca.certificate().fingerprint_sha256()).unwrap();
    let client = metal_bmc::tls::http_client_with_identity(
        &metal_bmc::tls::TlsTrust::CaFingerprint(pin),
        Duration::from_secs(10),
        Some(&metal_bmc::tls::ClientIdentity { chain: chain.clone(), key_pkcs8 }),
    )
    .unwrap();
    (client, Signer::new(key, chain))
}

/// Where the other host on the provisioning network asks from: another loopback address
/// than the machine's (127.0.0.1).
pub const INTRUDER: &str = "127.0.0.66";

/// A client whose requests come from `address` (a loopback address).
fn client_from(address: &str) -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .local_address(address.parse::<std::net::IpAddr>().unwrap())
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap()
}

/// The intruder's iPXE script for `mac` from the service at `url`.
pub fn intruder_script(url: &str, mac: &str) -> String {
    let answer = client_from(INTRUDER).get(format!("{url}/boot/ipxe?mac={mac}")).send().unwrap();
    assert_eq!(answer.status(), 200);
    answer.text().unwrap()
}

/// A join at the boot listener `boot_url` with `token`, from `address`, with the public key
/// of the Ed25519 seed `[seed; 32]`: the status and the body.
pub fn join_from(boot_url: &str, token: &str, address: &str, seed: u8) -> (u16, Value) {
    let key = metal_protocol::SigningKey::from_bytes(&[seed; 32]).verifying_key();
    let body = serde_json::json!({"token": token,
                      "publicKey": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, key.as_bytes())});
    let answer =
        client_from(address).post(format!("{boot_url}{}", metal_protocol::boot::JOIN_PATH)).json(&body).send().unwrap();
    (answer.status().as_u16(), answer.json().unwrap())
}

/// The intruder's join with `token` and a key of its own.
pub fn intruder_join(boot_url: &str, token: &str) -> (u16, Value) {
    join_from(boot_url, token, INTRUDER, 9)
}
