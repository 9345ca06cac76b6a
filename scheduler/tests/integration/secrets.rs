//! No secret escapes: a whole flow on a real `metal-scheduler serve` (debug logging, a master
//! key, the boot service, and on the PostgreSQL pass a database URL with a password) drives a
//! BMC set with `metalctl` and rotated, one-time boot tokens (a ramdisk's join, an
//! installer's "done"), and a tenant-root lease (whose lessee opens the console gateway and
//! rescues its machine: the rescue's files fetched with its token) whose teardown fences
//! through fence-agents and rotates the BMC again. Then every secret of the run (the admin token, the master key,
//! the database password, each BMC password the run set, each boot token) is searched for in
//! the service's log, in every process command line seen while it ran, in every API answer
//! (a boot token only outside the iPXE script that hands it to its machine) and in the
//! database: none is found, and the BMC passwords are stored only sealed.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use metal_tests::emulators::IpmiSim;
use metal_tests::leases::{reserve, site};
use metal_tests::metalctl;
use metal_tests::scheduler::{Admin, Reporter};
use metal_tests::served::ServedAdmin;
use serde_json::{Value, json};

/// Samples every process's command line until stopped.
struct CommandLines {
    seen: Arc<Mutex<BTreeSet<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CommandLines {
    fn watch() -> CommandLines {
        let (seen, stop) = (Arc::new(Mutex::new(BTreeSet::new())), Arc::new(AtomicBool::new(false)));
        let (sink, stopped) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                    if let Ok(raw) = std::fs::read(entry.path().join("cmdline")) {
                        let line = String::from_utf8_lossy(&raw).replace('\0', " ");
                        if !line.is_empty() {
                            sink.lock().unwrap().insert(line);
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        CommandLines { seen, stop, thread: Some(thread) }
    }

    fn stop(mut self) -> BTreeSet<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        std::mem::take(&mut self.seen.lock().unwrap())
    }
}

/// The served scheduler as its admin, keeping every answer.
struct Recorded {
    admin: ServedAdmin,
    answers: Mutex<Vec<String>>,
}

impl Admin for Recorded {
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let (status, answer) = self.admin.call(method, path, body);
        self.answers.lock().unwrap().push(answer.to_string());
        (status, answer)
    }

    fn reporter(&self) -> Reporter {
        self.admin.reporter()
    }

    fn context(&self) -> String {
        self.admin.context()
    }
}

/// A random secret of `len` hex digits (unlike any word a log would hold).
fn random_hex(len: usize) -> String {
    let bytes: Vec<u8> = (0..len.div_ceil(2)).map(|_| rand::random::<u8>()).collect();
    hex::encode(bytes)[..len].to_owned()
}

/// On the PostgreSQL pass: a role with a password and its own database; the URL and the
/// password.
fn postgres_with_password() -> Option<(String, String)> {
    let admin_url = std::env::var("METAL_TEST_POSTGRES").ok()?;
    let (name, password) = (format!("s_{}", random_hex(16)), random_hex(24));
    let mut admin = postgres::Client::connect(&admin_url, postgres::NoTls).unwrap();
    admin.batch_execute(&format!("CREATE ROLE {name} LOGIN PASSWORD '{password}'")).unwrap();
    admin.batch_execute(&format!("CREATE DATABASE {name} OWNER {name}")).unwrap();
    let server = admin_url.trim_start_matches("postgres://").split_once('@').unwrap().1.rsplit_once('/').unwrap().0;
    Some((format!("postgres://{name}:{password}@{server}/{name}"), password))
}

/// Everything the database holds, as text: the SQLite files' bytes, or every row of every
/// table of the PostgreSQL database as JSON.
fn database_text(data: &Path, database: Option<&str>) -> String {
    match database {
        None => ["metal.db", "metal.db-wal", "metal.db-shm"]
            .iter()
            .map(|f| String::from_utf8_lossy(&std::fs::read(data.join(f)).unwrap_or_default()).into_owned())
            .collect(),
        Some(url) => {
            let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
            let tables = client
                .query("SELECT tablename FROM pg_tables WHERE schemaname = 'public'", &[])
                .unwrap()
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect::<Vec<_>>();
            assert!(tables.len() > 10, "{tables:?}");
            let mut text = String::new();
            for table in tables {
                for row in client.query(&format!("SELECT row_to_json(t)::text FROM {table} t"), &[]).unwrap() {
                    text.push_str(&row.get::<_, String>(0));
                    text.push('\n');
                }
            }
            text
        }
    }
}

/// The BMC password stored for n1 now (the store holds it sealed under `key`).
fn stored_bmc_password(url: &str, key: &str) -> (String, String) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let stored: String = runtime.block_on(async {
        let store = metal_store::Store::open(url).await.unwrap();
        store
            .read(|conn| -> Result<String, metal_store::DbError> {
                let row = conn.query_opt("SELECT secret FROM bmcs WHERE node_id = 'n1'", &[])?.unwrap();
                row.get("secret")
            })
            .await
            .unwrap()
    });
    let key = metal_types::secrets::MasterKey::from_hex(key).unwrap();
    let password = metal_types::secrets::open(Some(&key), "n1", &stored).unwrap().expose().to_owned();
    (stored, password)
}

/// The lessee's hands on n1 during `reservation`: its token in a file of its own metalctl
/// configuration, its power read, a key registered and the console opened over the gateway
/// (and the session recorded). Returns the lessee's token.
fn lessee_hands(
    s: &Recorded,
    home: &Path,
    files: &Path,
    gateway: u16,
    reservation: &str,
    answers: &mut Vec<String>,
) -> (String, String) {
    // The one answer that holds the token on purpose (it is shown once) is not recorded.
    let (status, member) = s.admin.call(
        "POST",
        "/v1/credentials",
        Some(json!({"role": "tenant-member", "tenantId": "acme", "name": "ops"})),
    );
    assert_eq!(status, 201, "{member}");
    let token = member["token"].as_str().unwrap().to_owned();
    let lessee_home = metal_tests::metalctl::home(&home.join("lessee"), &s.admin.url, &token);
    answers.push(metalctl::run(&lessee_home, &["lease", "list"]));
    answers.push(metalctl::run(&lessee_home, &["lease", "power", "n1", "status"]));
    let (key, _) = metal_tests::console::ssh_key(&lessee_home, "lessee");
    let public = key.with_extension("pub");
    answers.push(metalctl::run(&lessee_home, &["tenant", "ssh-keys", "acme", "--set", public.to_str().unwrap()]));
    let ssh = metal_tests::console::Ssh::start_on(gateway, reservation, &key);
    s.until("the lessee's console session", "/v1/nodes/n1/console/sessions", |sessions| {
        sessions[0]["credentialId"].as_str().is_some_and(|c| c.starts_with("ssh-key SHA256:"))
    });
    drop(ssh);
    let rescue_token = rescue_and_back(s, &lessee_home, files, answers);
    (token, rescue_token)
}

/// The lessee's rescue and unrescue with `metalctl`, the rescue's files fetched as its
/// machine's iPXE fetches them from the boot service's files in `files` (the keys archive
/// recorded as an answer, like the ramdisk's kernel); returns the rescue's token.
fn rescue_and_back(s: &Recorded, lessee_home: &Path, files: &Path, answers: &mut Vec<String>) -> String {
    std::fs::create_dir_all(files).unwrap();
    for file in ["vmlinuz", "rescue"] {
        std::fs::write(files.join(file), format!("the {file} a rescue boots")).unwrap();
    }
    answers.push(metalctl::run(lessee_home, &["lease", "rescue", "n1"]));
    let http = reqwest::blocking::Client::new();
    let script_url = format!("{}/boot/ipxe?mac={}", s.admin.url, metal_tests::leases::MAC);
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let script = loop {
        let script = http.get(&script_url).send().unwrap().text().unwrap();
        if script.contains("rescue-keys") {
            break script;
        }
        assert!(std::time::Instant::now() < deadline, "no rescue boot: {script}");
        std::thread::sleep(Duration::from_millis(500));
    };
    let token = metal_tests::scheduler::TestScheduler::rescue_token(&script).unwrap();
    for file in ["vmlinuz", "rescue", "rescue-keys"] {
        let answer = http.get(format!("{}/boot/files/{file}?token={token}", s.admin.url)).send().unwrap();
        assert_eq!(answer.status(), 200, "{file}");
        answers.push(String::from_utf8_lossy(&answer.bytes().unwrap()).into_owned());
    }
    s.until("the rescue", "/v1/events?after=0", |e| {
        e["events"].as_array().is_some_and(|e| e.iter().any(|e| e["kind"] == "node.tenant-root.rescued"))
    });
    answers.push(metalctl::run(lessee_home, &["lease", "unrescue", "n1"]));
    s.until("the unrescue", "/v1/nodes/n1", |n| n["state"] == "deployed");
    token
}

#[test]
fn no_secret_of_a_whole_lease_shows_in_logs_command_lines_answers_or_the_database() {
    let first_password = format!("Bmc{}", random_hex(13));
    let sim = IpmiSim::start_with_admin_password(&first_password);
    let master_key = random_hex(64);
    let (data, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let postgres = postgres_with_password();
    let database = postgres.as_ref().map(|(url, _)| url.clone());
    let store_url = database.clone().unwrap_or_else(|| metal_store::Store::sqlite_url(data.path()));
    let command_lines = CommandLines::watch();

    let gateway = metal_tests::emulators::free_tcp_port();
    let make = |boot: u16| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_metal-scheduler"));
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data.path())
            .env("METAL_LOG", "debug")
            .env("METAL_MASTER_KEY", &master_key)
            .env("METAL_WORKFLOW_INTERVAL", "100ms")
            .env("METAL_REAPER_INTERVAL", "200ms")
            .env("METAL_BOOT_LISTEN", format!("127.0.0.1:{boot}"))
            .env("METAL_CONSOLE_SSH_LISTEN", format!("127.0.0.1:{gateway}"));
        if let Some(url) = &database {
            command.env("METAL_DATABASE_URL", url);
        }
        command
    };
    let s = Recorded { admin: ServedAdmin::start(make, data.path()), answers: Mutex::default() };

    // The BMC, set with metalctl (its password from a file) and rotated.
    std::fs::create_dir_all(home.path().join(".config/metal")).unwrap();
    let token_file = data.path().join("admin.token");
    std::fs::write(
        home.path().join(".config/metal/metalctl.toml"),
        format!("url = \"{}\"\ntoken-file = \"{}\"\n", s.admin.url, token_file.display()),
    )
    .unwrap();
    let bmc = json!({"protocol": "ipmi", "address": format!("127.0.0.1:{}", sim.port), "username": "admin",
                     "password": first_password});
    let version = site(
        &s,
        bmc,
        json!({"agent": "none", "allowUnverifiedRelease": true,
                                        "fencing": {"driver": "fence-agents"}}),
    );
    let password_file = home.path().join("bmc.pass");
    std::fs::write(&password_file, &first_password).unwrap();
    let address = format!("127.0.0.1:{}", sim.port);
    let mut answers = vec![metalctl::run(
        home.path(),
        &["bmc", "set", "n1", "--protocol", "ipmi", "--address", &address, "--username", "admin", "--password-file"]
            .into_iter()
            .chain([password_file.to_str().unwrap()])
            .collect::<Vec<_>>(),
    )];
    let rotated_password = format!("Rot{}", random_hex(13));
    let rotated_file = home.path().join("bmc-rotated.pass");
    std::fs::write(&rotated_file, &rotated_password).unwrap();
    answers
        .push(metalctl::run(home.path(), &["bmc", "rotate", "n1", "--password-file", rotated_file.to_str().unwrap()]));
    answers.push(metalctl::run(home.path(), &["bmc", "power", "n1", "status"]));
    let (sealed, stored) = stored_bmc_password(&store_url, &master_key);
    assert!(metal_types::secrets::is_sealed(&sealed), "stored unsealed: {sealed}");
    assert_eq!(stored, rotated_password, "the rotation is stored");

    // A ramdisk's one-time token: handed out in an iPXE script, redeemed by the join.
    let (status, _) = s.call("POST", "/v1/nodes", Some(json!({"id": "n2", "bootMac": "52:54:00:00:0a:02"})));
    assert_eq!(status, 201);
    let http = reqwest::blocking::Client::new();
    let script = http.get(format!("{}/boot/ipxe?mac=52:54:00:00:0a:02", s.admin.url)).send().unwrap().text().unwrap();
    let (ramdisk_token, task) = metal_tests::scheduler::TestScheduler::script_token(&script).unwrap();
    assert_eq!(task, "commission", "{script}");
    let file = http.get(format!("{}/boot/files/vmlinuz?token={ramdisk_token}", s.admin.url)).send().unwrap();
    answers.push(file.text().unwrap());
    let ca = metal_machines::ca_files::load(&data.path().join("ca")).unwrap();
    let pin = metal_bmc::tls::parse_fingerprint(&ca.certificate().fingerprint_sha256()).unwrap();
    let tls = metal_bmc::tls::client_config(&metal_bmc::tls::TlsTrust::CaFingerprint(pin)).unwrap();
    let boot_http = reqwest::blocking::Client::builder().use_preconfigured_tls(tls).build().unwrap();
    let key = metal_protocol::SigningKey::generate(&mut rand::rngs::OsRng);
    let public_key = base64::engine::general_purpose::STANDARD.encode(key.verifying_key().to_bytes());
    let joined = boot_http
        .post(format!("{}{}", s.admin.boot_url, metal_protocol::boot::JOIN_PATH))
        .json(&json!({"token": ramdisk_token, "publicKey": public_key}))
        .send()
        .unwrap();
    assert_eq!(joined.status(), 200);
    answers.push(joined.text().unwrap());

    // The lease: deployed (the installer's token), released, torn down (fence-agents, a
    // second rotation), ready again.
    let reservation = reserve(&s, json!({"profileId": "acme-os", "profileVersion": 1}));
    let installer_token = metal_tests::leases::deploy_done(&s, &s.admin.url);
    let path = format!("/v1/reservations/{reservation}");
    s.until("the lease bound", &path, |r| r["state"] == "active");
    let files = data.path().join("boot");
    let (member_token, rescue_token) = lessee_hands(&s, home.path(), &files, gateway, &reservation, &mut answers);
    let (status, _) = s.call("POST", &format!("{path}/release"), None);
    assert_eq!(status, 200);
    s.until("the node back in ready", "/v1/nodes/n1", |n| n["state"] == "ready");
    let (_, runs) = s.call("GET", "/v1/nodes/n1/teardowns", None);
    assert_eq!(runs[0]["history"][2]["detail"]["driver"], "fence-agents", "{runs}");
    assert_eq!(runs[0]["status"], "succeeded", "{runs}");
    let (sealed, last_password) = stored_bmc_password(&store_url, &master_key);
    assert!(metal_types::secrets::is_sealed(&sealed));
    assert_ne!(last_password, rotated_password, "the teardown rotated the BMC");
    for path in ["/v1/nodes", "/v1/nodes/n1", "/v1/nodes/n1/bmc", "/v1/events?after=0", "/v1/credentials", "/metrics"] {
        s.call("GET", path, None);
    }
    let _ = version;

    let Recorded { admin, answers: recorded } = s;
    admin.served.terminate();
    let (status, log) = admin.served.wait();
    assert!(status.success(), "{status:?}");
    let log = log.join("\n");
    let command_lines = command_lines.stop();
    assert!(command_lines.iter().any(|l| l.contains("fence_ipmilan")), "fence-agents ran");
    answers.extend(recorded.into_inner().unwrap());
    let answers = answers.join("\n");
    let database_text = database_text(data.path(), database.as_deref());
    assert!(log.contains("shut down cleanly") && log.contains("\"step\":\"fence\""), "the whole log: {log}");

    let admin_token = std::fs::read_to_string(&token_file).unwrap().trim().to_owned();
    let mut secrets = vec![
        ("the admin token", admin_token.as_str()),
        ("the master key", master_key.as_str()),
        ("the first BMC password", first_password.as_str()),
        ("the rotated BMC password", rotated_password.as_str()),
        ("the teardown's BMC password", last_password.as_str()),
        ("a ramdisk token", ramdisk_token.as_str()),
        ("an installer token", installer_token.as_str()),
        ("the lessee's token", member_token.as_str()),
        ("a rescue's token", rescue_token.as_str()),
    ];
    // The console gateway's host key: every line of its body but the first, which holds the
    // public half.
    let host_key = std::fs::read_to_string(data.path().join(metal_machines::console_ssh::HOST_KEY)).unwrap();
    let body: Vec<&str> = host_key.lines().filter(|l| !l.starts_with("-----")).skip(1).collect();
    assert!(!body.is_empty(), "{host_key}");
    secrets.extend(body.iter().map(|line| ("the console gateway's host key", *line)));
    if let Some((_, password)) = &postgres {
        secrets.push(("the database password", password.as_str()));
    }
    let command_lines = command_lines.into_iter().collect::<Vec<_>>().join("\n");
    for (what, secret) in &secrets {
        assert!(!log.contains(secret), "{what} is in the service's log");
        let line = command_lines.lines().find(|l| l.contains(secret));
        assert!(line.is_none(), "{what} is on a command line: {line:?}");
        assert!(!answers.contains(secret), "{what} is in an API answer");
        assert!(!database_text.contains(secret), "{what} is in the database");
    }
}
