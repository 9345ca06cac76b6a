//! `metal-boot plan` and `deploy` on loop devices, fetching from a test image server on
//! loopback: raw, gzip, zstd and xz images land bit-exact; a tampered chunk, a truncated
//! stream or a wrong digest fail and leave a disk that cannot boot (the first MiB zero);
//! a dropped connection is resumed with a Range request; a deploy killed halfway leaves
//! the first MiB unwritten; http:// needs its flag; a GPT image gets its cloud-init seed
//! partition (valid table, `cidata` FAT volume found by blkid). A seekable image (`plan
//! --seekable`) lands bit-exact through parallel frames; a frame of the wrong length, a
//! corrupted frame and frames that do not match the stream are refused.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metal_tests::loopdev::{LoopDevice, OLD_DATA};
use serde_json::{Value, json};

const MIB: usize = 1 << 20;

/// What the image server does.
#[derive(Default)]
struct Server {
    files: HashMap<String, Vec<u8>>,
    /// Cut the connection after this many bytes, once.
    drop_once_after: Option<usize>,
    /// Send this many bytes, then nothing more (the connection stays open).
    stall_after: Option<usize>,
    /// Every request: (name, Range header).
    log: Vec<(String, Option<String>)>,
}

type Shared = Arc<Mutex<Server>>;

async fn serve(State(s): State<Shared>, UrlPath(name): UrlPath<String>, headers: HeaderMap) -> Response {
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut server = s.lock().unwrap();
    server.log.push((name.clone(), range.clone()));
    let Some(bytes) = server.files.get(&name).cloned() else { return StatusCode::NOT_FOUND.into_response() };
    let start = range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|r| r.parse::<usize>().ok())
        .unwrap_or(0);
    if start > 0 && start >= bytes.len() {
        return StatusCode::RANGE_NOT_SATISFIABLE.into_response();
    }
    let body = bytes[start..].to_vec();
    let status = if range.is_some() { StatusCode::PARTIAL_CONTENT } else { StatusCode::OK };
    let content_range = format!("bytes {start}-{}/{}", bytes.len() - 1, bytes.len());
    if let Some(cut) = server.drop_once_after.take() {
        // Send `cut` bytes, then fail the body: the connection drops mid-stream.
        let first = bytes::Bytes::from(body[..cut.min(body.len())].to_vec());
        let stream = futures::stream::iter(vec![Ok(first), Err(std::io::Error::other("cut"))]);
        let headers = [(header::CONTENT_LENGTH, body.len().to_string())];
        return (status, headers, axum::body::Body::from_stream(stream)).into_response();
    }
    if let Some(cut) = server.stall_after {
        use futures::StreamExt as _;
        let first = bytes::Bytes::from(body[..cut.min(body.len())].to_vec());
        let stream = futures::stream::iter(vec![Ok::<_, std::io::Error>(first)]).chain(futures::stream::pending());
        let headers = [(header::CONTENT_LENGTH, body.len().to_string())];
        return (status, headers, axum::body::Body::from_stream(stream)).into_response();
    }
    let mut response = (status, body).into_response();
    if range.is_some() {
        response.headers_mut().insert(header::CONTENT_RANGE, content_range.parse().unwrap());
    }
    response
}

/// The image server on its own runtime.
struct ImageServer {
    url: String,
    state: Shared,
    _runtime: tokio::runtime::Runtime,
}

impl ImageServer {
    fn start() -> ImageServer {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let state: Shared = Arc::new(Mutex::new(Server::default()));
        let router = Router::new().route("/{name}", get(serve)).with_state(state.clone());
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        runtime.spawn(async move { axum::serve(listener, router).await.unwrap() });
        ImageServer { url, state, _runtime: runtime }
    }

    fn put(&self, name: &str, bytes: Vec<u8>) -> String {
        self.state.lock().unwrap().files.insert(name.to_owned(), bytes);
        format!("{}/{name}", self.url)
    }
}

/// A small "bootable" disk image: a boot signature, data, a run of zeros, more data.
fn disk_image(size: usize) -> Vec<u8> {
    let mut image: Vec<u8> = (0..size).map(|i| u8::try_from(i % 251).unwrap() ^ 0x5a).collect();
    image[510] = 0x55;
    image[511] = 0xaa;
    if size >= 5 * MIB {
        image[3 * MIB..5 * MIB].fill(0);
    }
    image
}

fn compress(raw: &[u8], tool: &str, dir: &Path) -> Vec<u8> {
    let path = dir.join("image.raw");
    std::fs::write(&path, raw).unwrap();
    let out = Command::new(tool).arg("-c").arg(&path).output().unwrap();
    assert!(out.status.success());
    out.stdout
}

fn boot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_metal-boot")).args(args).env("METAL_LOG", "warn").output().unwrap()
}

fn make_plan(dir: &Path, image: &[u8], url: &str) -> PathBuf {
    let file = dir.join("served.img");
    std::fs::write(&file, image).unwrap();
    let out = boot(&["plan", file.to_str().unwrap(), "--url", url, "--chunk-size", "1048576"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan_file = dir.join("plan.json");
    std::fs::write(&plan_file, &out.stdout).unwrap();
    plan_file
}

fn deploy(plan: &Path, disk: &LoopDevice, extra: &[&str]) -> (Option<i32>, Value, String) {
    let mut args = vec!["deploy", "--plan", plan.to_str().unwrap(), "--device", disk.path.to_str().unwrap()];
    args.extend(extra);
    let out = boot(&args);
    let outcome = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code(), outcome, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn every_format_lands_bit_exact() {
    let server = ImageServer::start();
    let dir = tempfile::tempdir().unwrap();
    let raw = disk_image(7 * MIB + 4096);
    for (name, bytes) in [
        ("image.raw", raw.clone()),
        ("image.gz", compress(&raw, "gzip", dir.path())),
        ("image.zst", compress(&raw, "zstd", dir.path())),
        ("image.xz", compress(&raw, "xz", dir.path())),
    ] {
        let url = server.put(name, bytes.clone());
        let plan = make_plan(dir.path(), &bytes, &url);
        let disk = LoopDevice::new(16 << 20);
        let (status, outcome, stderr) = deploy(&plan, &disk, &["--allow-http", "--read-back"]);
        assert_eq!(status, Some(0), "{name}: {stderr}");
        assert_eq!(outcome["readBack"], true);
        let peak = outcome["peakMemoryBytes"].as_u64().unwrap();
        assert!(peak > 0 && peak < 256 << 20, "{name}: peak memory {peak} bytes");
        let written = disk.read_all();
        assert!(written[..raw.len()] == raw[..], "{name} did not land bit-exact");
    }
}

#[test]
fn a_tampered_chunk_is_never_written_and_the_disk_cannot_boot() {
    let server = ImageServer::start();
    let dir = tempfile::tempdir().unwrap();
    let raw = disk_image(6 * MIB);
    let plan = make_plan(dir.path(), &raw, &server.put("image.raw", raw.clone()));
    let mut tampered = raw.clone();
    tampered[4 * MIB + 17] ^= 0xff;
    server.put("image.raw", tampered);
    let disk = LoopDevice::new(8 << 20);
    let (status, _, stderr) = deploy(&plan, &disk, &["--allow-http"]);
    assert_eq!(status, Some(1), "{stderr}");
    assert!(stderr.contains("chunk 4 (bytes 4194304..5242880) fails its SHA-256"), "{stderr}");
    assert!(stderr.contains("was left unbootable"), "{stderr}");
    let written = disk.read_all();
    assert!(written[..MIB].iter().all(|b| *b == 0), "the first MiB must be zero");
    assert!(written[4 * MIB..5 * MIB].iter().all(|b| *b == OLD_DATA), "the tampered chunk was written");
    assert!(written[7 * MIB..].iter().all(|b| *b == 0), "the last MiB must be zero");
}

#[test]
fn a_wrong_image_digest_or_a_truncated_stream_fails() {
    let server = ImageServer::start();
    let dir = tempfile::tempdir().unwrap();
    let raw = disk_image(3 * MIB);
    let url = server.put("image.raw", raw.clone());
    let plan_file = make_plan(dir.path(), &raw, &url);

    // The chunks match but the plan's whole-image digest does not: the first MiB stays zero.
    let mut plan: Value = serde_json::from_slice(&std::fs::read(&plan_file).unwrap()).unwrap();
    let wrong = "0".repeat(64);
    plan["image"]["digest"]["hex"] = wrong.clone().into();
    plan["chunks"]["imageDigest"]["hex"] = wrong.into();
    let wrong_plan = dir.path().join("wrong.json");
    std::fs::write(&wrong_plan, plan.to_string()).unwrap();
    let disk = LoopDevice::new(4 << 20);
    let (status, _, stderr) = deploy(&wrong_plan, &disk, &["--allow-http"]);
    assert_eq!(status, Some(1), "{stderr}");
    assert!(stderr.contains("the image's digest differs from the plan"), "{stderr}");
    assert!(disk.read_all()[..MIB].iter().all(|b| *b == 0));

    // The server has only part of the image: a truncated stream is an error, never success.
    server.put("image.raw", raw[..2 * MIB + 100].to_vec());
    let disk = LoopDevice::new(4 << 20);
    let (status, _, stderr) = deploy(&plan_file, &disk, &["--allow-http"]);
    assert_ne!(status, Some(0), "{stderr}");
    assert!(stderr.contains("was left unbootable"), "{stderr}");
    assert!(disk.read_all()[..MIB].iter().all(|b| *b == 0));
}

#[test]
fn a_dropped_connection_resumes_with_range() {
    let server = ImageServer::start();
    let dir = tempfile::tempdir().unwrap();
    let raw = disk_image(5 * MIB);
    let url = server.put("image.raw", raw.clone());
    let plan = make_plan(dir.path(), &raw, &url);
    server.state.lock().unwrap().drop_once_after = Some(MIB + 12345);
    let disk = LoopDevice::new(8 << 20);
    let (status, _, stderr) = deploy(&plan, &disk, &["--allow-http"]);
    assert_eq!(status, Some(0), "{stderr}");
    assert!(disk.read_all()[..raw.len()] == raw[..]);
    let log = server.state.lock().unwrap().log.clone();
    assert_eq!(log.len(), 2, "{log:?}");
    let resumed = log[1].1.as_deref().unwrap();
    let at: usize = resumed.trim_start_matches("bytes=").trim_end_matches('-').parse().unwrap();
    assert!(at > 0 && at <= MIB + 12345, "resumed at {resumed}");
}

#[test]
fn plain_http_needs_its_flag_and_nothing_is_written_without_it() {
    let server = ImageServer::start();
    let dir = tempfile::tempdir().unwrap();
    let raw = disk_image(2 * MIB);
    let plan = make_plan(dir.path(), &raw, &server.put("image.raw", raw.clone()));
    let disk = LoopDevice::new(4 << 20);
    let (status, _, stderr) = deploy(&plan, &disk, &[]);
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("plain http:// is refused"), "{stderr}");
    assert!(disk.read_all().iter().all(|b| *b == OLD_DATA), "the disk was touched");
}

#[test]
fn zero_chunks_are_skipped_on_a_zeroed_target() {
    let server = ImageServer::start();
    let dir = tempfile::tempdir().unwrap();
    let raw = disk_image(6 * MIB);
    let plan = make_plan(dir.path(), &raw, &server.put("image.raw", raw.clone()));
    let disk = LoopDevice::new(8 << 20);
    // Zero the device as an erase would.
    std::fs::write(&disk.path, vec![0u8; 8 << 20]).unwrap();
    let (status, outcome, stderr) = deploy(&plan, &disk, &["--allow-http", "--target-zeroed", "--read-back"]);
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(outcome["chunksSkipped"], 2, "{outcome}");
    assert!(disk.read_all()[..raw.len()] == raw[..]);
}

#[test]
fn a_deploy_killed_halfway_leaves_the_head_unwritten() {
    let server = ImageServer::start();
    let dir = tempfile::tempdir().unwrap();
    let raw = disk_image(6 * MIB);
    let plan = make_plan(dir.path(), &raw, &server.put("image.raw", raw.clone()));
    server.state.lock().unwrap().stall_after = Some(5 * MIB);
    let disk = LoopDevice::new(8 << 20);
    let mut child = Command::new(env!("CARGO_BIN_EXE_metal-boot"))
        .args(["deploy", "--allow-http", "--plan", plan.to_str().unwrap(), "--device", disk.path.to_str().unwrap()])
        .env("METAL_LOG", "warn")
        .spawn()
        .unwrap();
    // Wait until the chunks before the stall are on the disk, then pull the plug.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while disk.read_all()[2 * MIB..3 * MIB] != raw[2 * MIB..3 * MIB] {
        assert!(std::time::Instant::now() < deadline, "nothing was written");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let written = disk.read_all();
    assert!(written[..MIB].iter().all(|b| *b == 0), "the head was written before the image checked out");
    assert!(written[MIB..2 * MIB] == raw[MIB..2 * MIB], "the chunks before the stall were written");
}

/// A python HTTPS file server whose chain (leaf + CA) comes from a test CA.
struct HttpsFiles {
    url: String,
    ca_fingerprint: String,
    _guard: metal_tests::emulators::Guard,
    _dir: tempfile::TempDir,
}

impl HttpsFiles {
    fn start(name: &str, bytes: &[u8]) -> HttpsFiles {
        let dir = tempfile::tempdir().unwrap();
        let pki = metal_tests::emulators::pki(dir.path(), "images");
        let chain = dir.path().join("chain.pem");
        let mut pem = std::fs::read(&pki.cert).unwrap();
        pem.extend_from_slice(&pki.ca_pem);
        std::fs::write(&chain, pem).unwrap();
        let files = dir.path().join("files");
        std::fs::create_dir(&files).unwrap();
        std::fs::write(files.join(name), bytes).unwrap();
        let ca_der =
            metal_protocol::identity::certificates_from_pem(std::str::from_utf8(&pki.ca_pem).unwrap()).unwrap();
        let port = metal_tests::emulators::free_tcp_port();
        let script = "import functools, http.server, ssl, sys\n\
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[1], sys.argv[2])\n\
            handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[3])\n\
            server = http.server.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[4])), handler)\n\
            server.socket = ctx.wrap_socket(server.socket, server_side=True)\n\
            server.serve_forever()\n";
        let child = Command::new("python3")
            .args(["-c", script])
            .arg(&chain)
            .arg(&pki.key)
            .arg(&files)
            .arg(port.to_string())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let guard = metal_tests::emulators::Guard(child);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "the https server did not start");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        HttpsFiles {
            url: format!("https://127.0.0.1:{port}/{name}"),
            ca_fingerprint: hex::encode(metal_bmc::tls::fingerprint(&ca_der[0])),
            _guard: guard,
            _dir: dir,
        }
    }
}

#[test]
fn https_is_trusted_only_through_the_pinned_ca() {
    let dir = tempfile::tempdir().unwrap();
    let raw = disk_image(2 * MIB);
    let server = HttpsFiles::start("image.raw", &raw);
    let plan = make_plan(dir.path(), &raw, &server.url);

    let disk = LoopDevice::new(4 << 20);
    let (status, _, stderr) = deploy(&plan, &disk, &[]);
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("needs the site CA fingerprint"), "{stderr}");

    let (status, _, stderr) = deploy(&plan, &disk, &["--ca-fingerprint", &"ab".repeat(32)]);
    assert_eq!(status, Some(3), "{stderr}");
    assert!(stderr.contains("does not include the pinned CA"), "{stderr}");
    assert!(!stderr.contains("resuming"), "a refused certificate is not retried: {stderr}");
    assert!(disk.read_all()[..MIB].iter().all(|b| *b == 0), "a failed deploy leaves the head zeroed");

    let (status, _, stderr) = deploy(&plan, &disk, &["--ca-fingerprint", &server.ca_fingerprint]);
    assert_eq!(status, Some(0), "{stderr}");
    assert!(disk.read_all()[..raw.len()] == raw[..]);
}

#[test]
fn a_gpt_image_gets_its_cloud_init_seed_partition() {
    let server = ImageServer::start();
    let dir = tempfile::tempdir().unwrap();
    let image = metal_tests::images::gpt_image(dir.path());
    let plan_file = make_plan(dir.path(), &image, &server.put("gpt.img", image.clone()));
    let seed = metal_tests::images::seed("node-7-gen-3", "gpu-07");
    let mut plan: Value = serde_json::from_slice(&std::fs::read(&plan_file).unwrap()).unwrap();
    plan["cloudInit"] = serde_json::to_value(&seed).unwrap();
    std::fs::write(&plan_file, plan.to_string()).unwrap();

    let disk = LoopDevice::new(64 << 20);
    let (status, _, stderr) = deploy(&plan_file, &disk, &["--allow-http", "--read-back"]);
    assert_eq!(status, Some(0), "{stderr}");
    let written = disk.read_all();
    assert!(written[MIB..7 * MIB] == image[MIB..7 * MIB], "the root partition is not bit-exact");

    // The table is valid and names both partitions; the seed starts right after the image.
    let verify = Command::new("sfdisk").arg("--verify").arg(&disk.path).output().unwrap();
    assert!(
        verify.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    let json = Command::new("sfdisk").arg("--json").arg(&disk.path).output().unwrap();
    let table: Value = serde_json::from_slice(&json.stdout).unwrap();
    let partitions = table["partitiontable"]["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), 2, "{table:#}");
    assert_eq!(
        (&partitions[1]["name"], &partitions[1]["start"], &partitions[1]["size"]),
        (&json!("cidata"), &json!(16384), &json!(32768))
    );

    // blkid finds the NoCloud volume by its label; its files are the seed.
    let blkid = Command::new("blkid")
        .args(["-p", "-o", "export", "-O", &(8 * MIB).to_string()])
        .arg(&disk.path)
        .output()
        .unwrap();
    let found = String::from_utf8_lossy(&blkid.stdout);
    assert!(found.contains("TYPE=vfat") && found.contains("LABEL=cidata"), "{found}");
    let volume = written[8 * MIB..24 * MIB].to_vec();
    let fs = fatfs::FileSystem::new(std::io::Cursor::new(volume), fatfs::FsOptions::new()).unwrap();
    let mut user_data = String::new();
    std::io::Read::read_to_string(&mut fs.root_dir().open_file("user-data").unwrap(), &mut user_data).unwrap();
    assert_eq!(user_data, seed.user_data);
}

/// Converts `raw` into the served seekable form with `plan --seekable` (1 MiB chunks),
/// serves it as `name`, and returns the plan file and the served bytes.
fn seekable_plan(dir: &Path, raw: &[u8], server: &ImageServer, name: &str) -> (PathBuf, Vec<u8>) {
    let raw_file = dir.join("image.raw");
    std::fs::write(&raw_file, raw).unwrap();
    let served_file = dir.join(name);
    let url = format!("{}/{name}", server.url);
    let out = boot(&[
        "plan",
        raw_file.to_str().unwrap(),
        "--url",
        &url,
        "--chunk-size",
        "1048576",
        "--seekable",
        served_file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let served = std::fs::read(&served_file).unwrap();
    server.put(name, served.clone());
    let plan_file = dir.join("plan.json");
    std::fs::write(&plan_file, &out.stdout).unwrap();
    (plan_file, served)
}

fn read_plan(file: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap()
}

fn frames(plan: &Value) -> Vec<usize> {
    plan["image"]["frames"].as_array().unwrap().iter().map(|f| usize::try_from(f.as_u64().unwrap()).unwrap()).collect()
}

#[test]
fn a_seekable_image_lands_bit_exact_through_parallel_frames() {
    let server = ImageServer::start();
    let dir = tempfile::tempdir().unwrap();
    let raw = disk_image(7 * MIB + 4096);
    let (plan_file, served) = seekable_plan(dir.path(), &raw, &server, "image.zst");
    let plan = read_plan(&plan_file);
    assert_eq!(frames(&plan).len(), 8, "{plan}");
    assert_eq!(plan["chunks"]["zeroChunks"], json!([3, 4]));
    // Any zstd tool reads the served form as one stream.
    let served_file = dir.path().join("served.zst");
    std::fs::write(&served_file, &served).unwrap();
    let out = Command::new("zstd").arg("-dc").arg(&served_file).output().unwrap();
    assert!(out.status.success() && out.stdout == raw, "zstd -dc does not give back the image");
    // And `plan` of the served file finds the same frames.
    let again = boot(&["plan", served_file.to_str().unwrap(), "--url", "http://x/y", "--chunk-size", "1048576"]);
    let again: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!((&again["image"]["frames"], &again["chunks"]), (&plan["image"]["frames"], &plan["chunks"]));

    let disk = LoopDevice::new(16 << 20);
    let (status, outcome, stderr) = deploy(&plan_file, &disk, &["--allow-http", "--read-back"]);
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!((&outcome["readBack"], &outcome["chunksSkipped"]), (&json!(true), &json!(0)), "{outcome}");
    let peak = outcome["peakMemoryBytes"].as_u64().unwrap();
    assert!(peak > 0 && peak < 256 << 20, "peak memory {peak} bytes");
    assert!(disk.read_all()[..raw.len()] == raw[..], "the seekable image did not land bit-exact");

    // On a zeroed target the two zero chunks are verified but not written.
    let disk = LoopDevice::new(16 << 20);
    std::fs::write(&disk.path, vec![0u8; 16 << 20]).unwrap();
    let (status, outcome, stderr) = deploy(&plan_file, &disk, &["--allow-http", "--target-zeroed", "--read-back"]);
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(outcome["chunksSkipped"], 2, "{outcome}");
    assert!(disk.read_all()[..raw.len()] == raw[..]);
}

#[test]
fn a_zero_chunk_is_written_from_the_manifest_not_from_its_frame() {
    let server = ImageServer::start();
    let dir = tempfile::tempdir().unwrap();
    let raw = disk_image(7 * MIB + 4096);
    let (plan_file, mut served) = seekable_plan(dir.path(), &raw, &server, "image.zst");
    let sizes = frames(&read_plan(&plan_file));
    // Chunk 3 is a manifest zero chunk: its frame is garbage now, and nothing reads it.
    let start: usize = sizes[..3].iter().sum();
    served[start..start + sizes[3]].fill(0xee);
    server.put("image.zst", served);
    let disk = LoopDevice::new(16 << 20);
    let (status, outcome, stderr) = deploy(&plan_file, &disk, &["--allow-http", "--read-back"]);
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(outcome["readBack"], true, "{outcome}");
    assert!(disk.read_all()[..raw.len()] == raw[..], "the image did not land bit-exact");
}

/// A seekable file of `frames` by hand: the frames, then their seek table.
fn seekable_file(frames: &[(Vec<u8>, usize)]) -> Vec<u8> {
    let word = |n: usize| u32::try_from(n).unwrap().to_le_bytes();
    let mut file: Vec<u8> = frames.iter().flat_map(|(frame, _)| frame.clone()).collect();
    file.extend_from_slice(&0x184D_2A5Eu32.to_le_bytes());
    file.extend_from_slice(&word(frames.len() * 8 + 9));
    for (frame, raw_len) in frames {
        file.extend_from_slice(&word(frame.len()));
        file.extend_from_slice(&word(*raw_len));
    }
    file.extend_from_slice(&word(frames.len()));
    file.push(0);
    file.extend_from_slice(&0x8F92_EAB1u32.to_le_bytes());
    file
}

#[test]
fn a_frame_that_decompresses_to_the_wrong_length_is_refused() {
    let server = ImageServer::start();
    let dir = tempfile::tempdir().unwrap();
    let raw = disk_image(4 * MIB);
    let (plan_file, _) = seekable_plan(dir.path(), &raw, &server, "image.zst");
    let chunk = |i: usize| &raw[i * MIB..(i + 1) * MIB];
    for (wrong, problem) in [
        (raw[2 * MIB..3 * MIB - 4096].to_vec(), "decompresses to 1044480 bytes, its chunk has 1048576"),
        (raw[2 * MIB..3 * MIB + 4096].to_vec(), "does not decompress into its 1048576-byte chunk"),
    ] {
        // Chunk 2's frame holds 4 KiB less (or more) than its chunk; the rest are right.
        let pieces: Vec<(Vec<u8>, usize)> = [chunk(0).to_vec(), chunk(1).to_vec(), wrong.clone(), chunk(3).to_vec()]
            .iter()
            .map(|piece| (compress(piece, "zstd", dir.path()), piece.len()))
            .collect();
        let served = seekable_file(&pieces);
        let mut plan = read_plan(&plan_file);
        let digest = metal_image::digest::chunk_sha256(&served);
        plan["image"]["url"] = server.put("wrong.zst", served.clone()).into();
        plan["image"]["sizeBytes"] = served.len().into();
        plan["image"]["digest"]["hex"] = digest.clone().into();
        plan["chunks"]["imageDigest"]["hex"] = digest.into();
        plan["image"]["frames"] = pieces.iter().map(|(frame, _)| frame.len()).collect::<Vec<_>>().into();
        let wrong_plan = dir.path().join("wrong.json");
        std::fs::write(&wrong_plan, plan.to_string()).unwrap();
        let disk = LoopDevice::new(8 << 20);
        let (status, _, stderr) = deploy(&wrong_plan, &disk, &["--allow-http"]);
        assert_eq!(status, Some(1), "{stderr}");
        assert!(stderr.contains("chunk 2: its zstd frame (served bytes") && stderr.contains(problem), "{stderr}");
        let written = disk.read_all();
        assert!(written[..MIB].iter().all(|b| *b == 0), "the first MiB must be zero");
        assert!(written[2 * MIB..3 * MIB].iter().all(|b| *b == OLD_DATA), "the wrong chunk was written");
    }
}

#[test]
fn a_corrupted_frame_is_refused_and_nothing_bootable_is_left() {
    let server = ImageServer::start();
    let dir = tempfile::tempdir().unwrap();
    let raw = disk_image(6 * MIB);
    let (plan_file, mut served) = seekable_plan(dir.path(), &raw, &server, "image.zst");
    let mut plan = read_plan(&plan_file);
    let sizes = frames(&plan);
    let start: usize = sizes[..2].iter().sum();
    served[start + sizes[2] / 2] ^= 0xff;
    server.put("image.zst", served.clone());
    // Even with a whole-file digest that vouches for the corrupted file, the chunk's own
    // check refuses it (the whole-file check alone may win the race on a small file).
    let digest = metal_image::digest::chunk_sha256(&served);
    plan["image"]["digest"]["hex"] = digest.clone().into();
    plan["chunks"]["imageDigest"]["hex"] = digest.into();
    let vouched = dir.path().join("vouched.json");
    std::fs::write(&vouched, plan.to_string()).unwrap();
    for (plan, message) in [(&plan_file, "differs from the plan"), (&vouched, "chunk 2")] {
        let disk = LoopDevice::new(8 << 20);
        let (status, _, stderr) = deploy(plan, &disk, &["--allow-http"]);
        assert_eq!(status, Some(1), "{stderr}");
        assert!(stderr.contains(message) || stderr.contains("chunk 2"), "{stderr}");
        assert!(stderr.contains("was left unbootable"), "{stderr}");
        let written = disk.read_all();
        assert!(written[..MIB].iter().all(|b| *b == 0), "the first MiB must be zero");
        assert!(written[2 * MIB..3 * MIB].iter().all(|b| *b == OLD_DATA), "the corrupted chunk was written");
        assert!(written[7 * MIB..].iter().all(|b| *b == 0), "the last MiB must be zero");
    }
}

#[test]
fn frames_that_do_not_match_the_stream_are_refused() {
    let server = ImageServer::start();
    let dir = tempfile::tempdir().unwrap();
    let raw = disk_image(6 * MIB);
    let (plan_file, _) = seekable_plan(dir.path(), &raw, &server, "image.zst");
    // The same total, cut in the wrong place: frame 1 takes frame 2's first 100 bytes.
    let mut plan = read_plan(&plan_file);
    let mut sizes = frames(&plan);
    sizes[1] += 100;
    sizes[2] -= 100;
    plan["image"]["frames"] = sizes.into();
    let shifted = dir.path().join("shifted.json");
    std::fs::write(&shifted, plan.to_string()).unwrap();
    let disk = LoopDevice::new(8 << 20);
    let (status, _, stderr) = deploy(&shifted, &disk, &["--allow-http"]);
    assert_eq!(status, Some(1), "{stderr}");
    assert!(stderr.contains("chunk 1: its zstd frame") || stderr.contains("chunk 2: its zstd frame"), "{stderr}");
    assert!(disk.read_all()[..MIB].iter().all(|b| *b == 0), "the first MiB must be zero");

    // A plan whose frames claim more than a chunk's frame can be is refused before buffering.
    let mut plan = read_plan(&plan_file);
    let mut sizes = frames(&plan);
    let total: usize = sizes.iter().sum();
    sizes[0] = 3 * MIB;
    plan["image"]["frames"] = sizes.into();
    plan["image"]["sizeBytes"] = (total + 3 * MIB).into();
    std::fs::write(&shifted, plan.to_string()).unwrap();
    let (status, _, stderr) = deploy(&shifted, &disk, &["--allow-http"]);
    assert_eq!(status, Some(1), "{stderr}");
    assert!(stderr.contains("chunk 0: its zstd frame (served bytes 0..3145728) is larger than any"), "{stderr}");
}
