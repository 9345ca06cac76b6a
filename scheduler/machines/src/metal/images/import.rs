//! The background import: checksum, download, verify, convert to the served form.
//!
//! One task per image, claimed with a lease it renews (`store::images::claim`), so a
//! restart or a second replica resumes an import instead of leaving it "importing" or
//! running it twice. The download appends to `ID.part` and resumes with a Range request
//! from the file's length after a drop (a server that ignores Range restarts it from zero);
//! the digest is computed as the bytes stream past (over the kept prefix first, after a
//! restart). Attempts without progress are bounded, with backoff. Nothing is kept under the
//! image's final name unless the digest matched and the served form was written whole.

use std::io::{BufReader, BufWriter, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use metal_image::digest::Hasher;
use metal_protocol::deploy::{Digest, ImageFormat, ImageSource};
use reqwest::StatusCode;
use reqwest::header::{CONTENT_RANGE, RANGE};
use tokio::io::AsyncWriteExt as _;
use tracing::{info, warn};

use crate::app::{App, AppState};
use crate::metal::images::{CHUNK_SIZE, LEVEL, remove_quietly};
use metal_store::{self as store, images::Verdict};
use metal_types::error::ApiError;
use metal_types::model::image::{Image, ImagePlan, ImageProgress, file_name, parse_checksum_file};

/// How often progress reaches the database.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// Longest wait between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Why an import stopped without a verdict of its own.
#[derive(Debug)]
enum Stop {
    /// The import ends without an image, for this reason.
    Failed(String),
    /// Another worker holds the import now (our lease lapsed), or it was deleted.
    Lost,
}

impl From<ApiError> for Stop {
    fn from(e: ApiError) -> Self {
        Stop::Failed(e.to_string())
    }
}

/// Starts importing `id` in the background.
pub fn spawn(app: AppState, id: String) {
    tokio::spawn(async move {
        if let Err(e) = run(&app, &id).await {
            warn!(image = %id, error = %e, "image import stopped on a database error");
        }
    });
}

/// Resumes every import no live worker holds (after a restart, or a dead replica's). Returns
/// how many it started.
pub async fn resume_orphans(app: &AppState) -> Result<usize, ApiError> {
    let now = app.clock.now();
    let orphans = app.store.read(move |tx| store::images::orphaned(tx, now)).await?;
    for id in &orphans {
        info!(image = %id, "resuming an image import");
        spawn(app.clone(), id.clone());
    }
    Ok(orphans.len())
}

fn lease_until(app: &App) -> time::OffsetDateTime {
    app.clock.now() + app.config.images.lease
}

async fn run(app: &AppState, id: &str) -> Result<(), ApiError> {
    let service = &app.images;
    let _slot = service.slots.clone().acquire_owned().await.map_err(|e| ApiError::Internal(e.to_string()))?;
    let owner = service.owner.clone();
    let (now, until) = (app.clock.now(), lease_until(app));
    let claimed = {
        let (id, owner) = (id.to_owned(), owner.clone());
        app.store.write(move |tx| store::images::claim(tx, &id, &owner, now, until)).await?
    };
    if !claimed {
        return Ok(()); // another worker has it
    }
    let Some(image) = ({
        let id = id.to_owned();
        app.store.read(move |tx| store::images::get(tx, &id)).await?
    }) else {
        return Ok(());
    };
    let lost = Arc::new(AtomicBool::new(false));
    let renewer = spawn_renewer(app.clone(), id.to_owned(), lost.clone());
    let outcome = import(app, &image, &lost).await;
    renewer.abort();
    let verdict = match outcome {
        Ok(verdict) => verdict,
        Err(Stop::Lost) => {
            info!(image = %id, "image import taken over or deleted; this worker stops");
            return Ok(());
        }
        Err(Stop::Failed(reason)) => {
            warn!(image = %id, %reason, "image import failed");
            service.remove_files(id);
            Verdict::Failed(reason)
        }
    };
    let (now, id_owned) = (app.clock.now(), id.to_owned());
    let finished = {
        let verdict = verdict.clone();
        app.store.write(move |tx| store::images::finish(tx, &id_owned, &owner, &verdict, now)).await?
    };
    if finished {
        if let Verdict::Ready { plan, .. } = &verdict {
            info!(image = %id, raw_bytes = plan.chunks.raw_size_bytes, served_bytes = plan.image.size_bytes, "image imported");
        }
        app.store.events_committed();
    } else if matches!(verdict, Verdict::Ready { .. }) {
        // Deleted (or taken over) while converting: the files are not ours to keep.
        service.remove_files(id);
    }
    Ok(())
}

/// Renews the import's lease until aborted; sets `lost` when the import is not ours any more.
fn spawn_renewer(app: AppState, id: String, lost: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let every = (app.config.images.lease / 3).max(Duration::from_millis(100));
        loop {
            tokio::time::sleep(every).await;
            let (id, owner, now, until) = (id.clone(), app.images.owner.clone(), app.clock.now(), lease_until(&app));
            match app.store.write(move |tx| store::images::claim(tx, &id, &owner, now, until)).await {
                Ok(true) => {}
                Ok(false) => {
                    lost.store(true, Ordering::SeqCst);
                    return;
                }
                Err(e) => warn!(error = %e, "renewing an image import's lease failed"),
            }
        }
    })
}

async fn import(app: &AppState, image: &Image, lost: &AtomicBool) -> Result<Verdict, Stop> {
    let service = &app.images;
    let url = metal_types::model::image::check_url("url", &image.origin.url)?;
    let expected = match (&image.origin.checksum, &image.origin.checksum_url) {
        (Some(digest), _) => digest.clone(),
        (None, Some(checksum_url)) => {
            let text = fetch_text(app, checksum_url).await?;
            parse_checksum_file(&text, &file_name(&url)).map_err(|e| Stop::Failed(format!("{checksum_url}: {e}")))?
        }
        (None, None) => return Err(Stop::Failed("the import names no checksum".into())),
    };
    let found = download(app, image, expected.algorithm, lost).await?;
    if found != expected {
        return Err(Stop::Failed(format!(
            "checksum mismatch: expected {} {}, found {} {}: the file was not kept",
            algorithm_name(&expected),
            expected.hex,
            algorithm_name(&found),
            found.hex
        )));
    }
    info!(image = %image.id, digest = %found.hex, "download verified; writing the served form");
    let files = ImportFiles {
        part: service.file(&image.id, "part"),
        raw: service.file(&image.id, "raw"),
        tmp: service.file(&image.id, "zst.tmp"),
        served: service.served(&image.id),
    };
    let converted = tokio::task::spawn_blocking(move || convert(&files))
        .await
        .map_err(|e| Stop::Failed(format!("the conversion panicked: {e}")))?;
    if lost.load(Ordering::SeqCst) {
        return Err(Stop::Lost);
    }
    let (plan, source_format) = converted.map_err(Stop::Failed)?;
    Ok(Verdict::Ready { plan, source_format })
}

fn algorithm_name(digest: &Digest) -> &'static str {
    match digest.algorithm {
        metal_protocol::deploy::DigestAlgorithm::Sha256 => "sha256",
        metal_protocol::deploy::DigestAlgorithm::Sha512 => "sha512",
    }
}

/// Whether an HTTP status is worth another attempt (a request timeout too: a mirror under
/// load answers 408 to a slow client).
fn transient(status: StatusCode) -> bool {
    metal_bmc::http_error::transient(status) || status == StatusCode::REQUEST_TIMEOUT
}

/// Counts attempts without progress and waits before the next one; fails when they run out.
struct Retry {
    attempts: u32,
    backoff: Duration,
    failures: u32,
    total: u64,
    last_error: Option<String>,
}

impl Retry {
    fn new(app: &App) -> Self {
        Retry {
            attempts: app.config.images.attempts,
            backoff: app.config.images.backoff,
            failures: 0,
            total: 0,
            last_error: None,
        }
    }

    /// One attempt failed (after `progressed` bytes); waits, or fails the import.
    async fn failed(&mut self, what: &str, error: String, progressed: bool) -> Result<(), Stop> {
        if progressed {
            self.failures = 0;
        }
        self.failures += 1;
        warn!(%what, %error, attempt = self.failures, of = self.attempts, "image transfer failed");
        self.last_error = Some(error.clone());
        if self.failures >= self.attempts {
            return Err(Stop::Failed(format!(
                "{what}: gave up after {} attempts without progress: {error}",
                self.attempts
            )));
        }
        let wait = self.backoff.saturating_mul(1 << (self.failures - 1).min(16)).min(MAX_BACKOFF);
        tokio::time::sleep(wait).await;
        Ok(())
    }
}

/// A small text file (a checksum file), with retries.
async fn fetch_text(app: &App, url: &str) -> Result<String, Stop> {
    const LIMIT: usize = 4 << 20;
    let mut retry = Retry::new(app);
    loop {
        let error = match app.images.client.get(url).send().await {
            Ok(response) if response.status().is_success() => match response.bytes().await {
                Ok(body) if body.len() > LIMIT => {
                    return Err(Stop::Failed(format!("{url}: a checksum file over {LIMIT} bytes")));
                }
                Ok(body) => return Ok(String::from_utf8_lossy(&body).into_owned()),
                Err(e) => e.to_string(),
            },
            Ok(response) if transient(response.status()) => format!("HTTP {}", response.status()),
            Ok(response) => return Err(Stop::Failed(format!("{url}: HTTP {}", response.status()))),
            Err(e) => metal_bmc::http_error::describe(&e).0,
        };
        retry.total += 1;
        retry.failed(url, error, false).await?;
    }
}

/// `bytes START-END/TOTAL` (or `bytes */TOTAL`): the start and the total.
fn content_range(response: &reqwest::Response) -> (Option<u64>, Option<u64>) {
    let Some(value) = response.headers().get(CONTENT_RANGE).and_then(|v| v.to_str().ok()) else {
        return (None, None);
    };
    let Some(rest) = value.strip_prefix("bytes ") else { return (None, None) };
    let (range, total) = rest.split_once('/').unwrap_or((rest, "*"));
    let start = range.split_once('-').and_then(|(s, _)| s.parse().ok());
    (start, total.parse().ok())
}

/// Progress as it goes to the database: at most once a second, with the rate since the last.
struct Reporter {
    last: Instant,
    last_bytes: u64,
    decile: u64,
}

impl Reporter {
    async fn report(
        &mut self,
        app: &App,
        image: &Image,
        done: u64,
        total: Option<u64>,
        retry: &Retry,
        force: bool,
    ) -> Result<(), Stop> {
        let elapsed = self.last.elapsed();
        if !force && elapsed < PROGRESS_EVERY {
            return Ok(());
        }
        let rate = done.saturating_sub(self.last_bytes) * 1000 / u64::try_from(elapsed.as_millis().max(1)).unwrap_or(1);
        (self.last, self.last_bytes) = (Instant::now(), done);
        let progress =
            ImageProgress { bytes_done: done, bytes_total: total, percent: None, rate_bytes_per_second: rate };
        let decile = total.filter(|t| *t > 0).map(|t| done * 10 / t).unwrap_or(0);
        let crossed = (decile > self.decile).then_some(decile);
        self.decile = self.decile.max(decile);
        let (id, tenant, owner, attempts, error, now) = (
            image.id.clone(),
            image.tenant_id.clone(),
            app.images.owner.clone(),
            retry.total,
            retry.last_error.clone(),
            app.clock.now(),
        );
        let until = lease_until(app);
        let ours = app
            .store
            .write(move |tx| {
                let ours = store::images::progress(tx, &id, &owner, &progress, attempts, error.as_deref(), now, until)?;
                if ours && let Some(decile) = crossed {
                    store::events::append(
                        tx,
                        "image.import.progress",
                        &format!("image/{id}"),
                        Some(&tenant),
                        &serde_json::json!({"image": id, "percent": decile * 10, "bytesDone": done, "bytesTotal": total}),
                        now,
                    )?;
                }
                Ok::<_, ApiError>(ours)
            })
            .await?;
        if crossed.is_some() {
            app.store.events_committed();
        }
        if ours { Ok(()) } else { Err(Stop::Lost) }
    }
}

/// Downloads the image to `ID.part`, resuming what is there; returns the digest of the whole
/// file as streamed.
async fn download(
    app: &AppState,
    image: &Image,
    algorithm: metal_protocol::deploy::DigestAlgorithm,
    lost: &AtomicBool,
) -> Result<Digest, Stop> {
    let path = app.images.file(&image.id, "part");
    let io = |what: &str, e: std::io::Error| Stop::Failed(format!("{what} {}: {e}", path.display()));
    // The digest of what an earlier attempt (or run) kept.
    let kept = {
        let path = path.clone();
        tokio::task::spawn_blocking(move || prefix_hasher(&path, algorithm))
            .await
            .map_err(|e| Stop::Failed(e.to_string()))?
            .map_err(|e| io("reading", e))?
    };
    let (mut hasher, mut offset) = kept;
    let mut file =
        tokio::fs::OpenOptions::new().create(true).append(true).open(&path).await.map_err(|e| io("opening", e))?;
    let mut retry = Retry::new(app);
    let mut reporter = Reporter { last: Instant::now(), last_bytes: offset, decile: 0 };
    let mut total = None;
    if offset > 0 {
        info!(image = %image.id, offset, "resuming the download");
    }
    loop {
        if lost.load(Ordering::SeqCst) {
            return Err(Stop::Lost);
        }
        retry.total += 1;
        let mut request = app.images.client.get(&image.origin.url);
        if offset > 0 {
            request = request.header(RANGE, format!("bytes={offset}-"));
        }
        let started_at = offset;
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) => {
                retry.failed(&image.origin.url, metal_bmc::http_error::describe(&e).0, false).await?;
                continue;
            }
        };
        let status = response.status();
        let (range_start, range_total) = content_range(&response);
        if status == StatusCode::RANGE_NOT_SATISFIABLE && offset > 0 && range_total == Some(offset) {
            break; // everything was already here
        }
        let restart = match status {
            StatusCode::PARTIAL_CONTENT if range_start == Some(offset) => false,
            StatusCode::PARTIAL_CONTENT | StatusCode::RANGE_NOT_SATISFIABLE => true,
            StatusCode::OK if offset > 0 => {
                warn!(image = %image.id, "the server ignores Range requests; restarting the download from zero");
                true
            }
            s if s.is_success() => false,
            s if transient(s) => {
                retry.failed(&image.origin.url, format!("HTTP {s}"), false).await?;
                continue;
            }
            s => return Err(Stop::Failed(format!("{}: HTTP {s}", image.origin.url))),
        };
        if restart {
            file.set_len(0).await.map_err(|e| io("truncating", e))?;
            (hasher, offset) = (Hasher::new(algorithm), 0);
            if status != StatusCode::OK {
                continue; // ask again, from zero
            }
        }
        total = match status {
            StatusCode::PARTIAL_CONTENT => range_total,
            _ => response.content_length(),
        };
        let mut response = response;
        let ended = loop {
            match response.chunk().await {
                Ok(Some(bytes)) => {
                    file.write_all(&bytes).await.map_err(|e| io("writing", e))?;
                    hasher.update(&bytes);
                    offset += bytes.len() as u64;
                    reporter.report(app, image, offset, total, &retry, false).await?;
                }
                Ok(None) => break None,
                Err(e) => break Some(metal_bmc::http_error::describe(&e).0),
            }
        };
        file.flush().await.map_err(|e| io("writing", e))?;
        let error = match (ended, total) {
            (Some(error), _) => error,
            (None, Some(total)) if offset < total => format!("the transfer ended at byte {offset} of {total}"),
            (None, Some(total)) if offset > total => {
                return Err(Stop::Failed(format!(
                    "the server sent {offset} bytes, more than the {total} it announced"
                )));
            }
            (None, _) => break,
        };
        retry.failed(&image.origin.url, error, offset > started_at).await?;
    }
    file.sync_all().await.map_err(|e| io("syncing", e))?;
    reporter.report(app, image, offset, total.or(Some(offset)), &retry, true).await?;
    Ok(hasher.finish())
}

/// A hasher over the file's current contents, and its length (0 when there is no file).
fn prefix_hasher(
    path: &std::path::Path,
    algorithm: metal_protocol::deploy::DigestAlgorithm,
) -> std::io::Result<(Hasher, u64)> {
    let mut hasher = Hasher::new(algorithm);
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((hasher, 0)),
        Err(e) => return Err(e),
    };
    let mut buf = vec![0u8; 1 << 20];
    let mut length = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok((hasher, length));
        }
        hasher.update(&buf[..n]);
        length += n as u64;
    }
}

/// qcow2's magic bytes.
const QCOW2_MAGIC: &[u8] = b"QFI\xfb";

/// The files of one import's conversion (named by `ImageService::file`).
struct ImportFiles {
    /// The verified download.
    part: std::path::PathBuf,
    /// A qcow2's raw conversion.
    raw: std::path::PathBuf,
    /// The served form while it is written.
    tmp: std::path::PathBuf,
    /// The served form.
    served: std::path::PathBuf,
}

/// Converts the verified `ID.part` into the served form `ID.zst`; returns its plan and the
/// downloaded file's format.
fn convert(files: &ImportFiles) -> Result<(ImagePlan, String), String> {
    let ImportFiles { part, raw, tmp, served } = files;
    let open = |path: &std::path::Path| std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()));
    let mut head = [0u8; 8];
    let n = metal_image::manifest::read_full(&mut open(part)?, &mut head).map_err(|e| e.to_string())?;
    let (mut input, format): (Box<dyn Read + Send>, String) = if head[..n].starts_with(QCOW2_MAGIC) {
        qcow2_to_raw(part, raw)?;
        (Box::new(BufReader::with_capacity(1 << 20, open(raw)?)), "qcow2".into())
    } else {
        let format = metal_image::format::detect(&head[..n]);
        let input = BufReader::with_capacity(1 << 20, open(part)?);
        let decoded =
            metal_image::format::decoder(format, input).map_err(|e| format!("decoding the {format:?} image: {e}"))?;
        (decoded, format!("{format:?}").to_lowercase())
    };
    // The partition table first, before a byte is compressed: an image without one can never
    // deploy (the deploy adds the cloud-init seed as a partition of the image's own table).
    let mut head = vec![0u8; metal_image::layout::HEAD_BYTES];
    let n = metal_image::manifest::read_full(&mut input, &mut head).map_err(|e| format!("reading the image: {e}"))?;
    head.truncate(n);
    if n > 0 && metal_image::layout::partition_table(&head).is_none() {
        return Err("the image has no partition table (neither GPT nor MBR): a deploy adds the cloud-init seed \
                    as a partition of the image's own table, so this image could never deploy"
            .into());
    }
    let input = std::io::Cursor::new(head).chain(input);
    let out = std::fs::File::create(tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let mut writer = BufWriter::with_capacity(1 << 20, out);
    let seekable = metal_image::seekable::write_seekable(input, &mut writer, CHUNK_SIZE, LEVEL)
        .map_err(|e| format!("writing the served form: {e}"))?;
    let out = writer.into_inner().map_err(|e| format!("writing the served form: {}", e.error()))?;
    out.sync_all().map_err(|e| format!("syncing the served form: {e}"))?;
    drop(out);
    if seekable.manifest.raw_size_bytes == 0 {
        remove_quietly(tmp);
        return Err("the image is empty".into());
    }
    std::fs::rename(tmp, served).map_err(|e| format!("{}: {e}", served.display()))?;
    remove_quietly(part);
    remove_quietly(raw);
    let plan = ImagePlan {
        image: ImageSource {
            url: String::new(),
            size_bytes: seekable.served_size,
            format: ImageFormat::Zstd,
            digest: seekable.served,
            frames: seekable.frames,
        },
        chunks: seekable.manifest,
    };
    Ok((plan, format))
}

/// `qemu-img convert` of a qcow2 without a backing file (a backing file would make
/// qemu-img read whatever host path the image names).
fn qcow2_to_raw(qcow2: &std::path::Path, raw: &std::path::Path) -> Result<(), String> {
    let info = std::process::Command::new("qemu-img")
        .args(["info", "--output=json", "-f", "qcow2"])
        .arg(qcow2)
        .output()
        .map_err(|e| format!("qemu-img (install qemu-utils to import qcow2 images): {e}"))?;
    if !info.status.success() {
        return Err(format!("qemu-img info: {}", String::from_utf8_lossy(&info.stderr).trim()));
    }
    let info: serde_json::Value = serde_json::from_slice(&info.stdout).map_err(|e| format!("qemu-img info: {e}"))?;
    if let Some(backing) = info.get("backing-filename") {
        return Err(format!(
            "the qcow2 image names a backing file ({backing}); only self-contained images are imported"
        ));
    }
    let convert = std::process::Command::new("qemu-img")
        .args(["convert", "-f", "qcow2", "-O", "raw"])
        .arg(qcow2)
        .arg(raw)
        .output()
        .map_err(|e| format!("qemu-img: {e}"))?;
    if !convert.status.success() {
        return Err(format!("qemu-img convert: {}", String::from_utf8_lossy(&convert.stderr).trim()));
    }
    Ok(())
}
