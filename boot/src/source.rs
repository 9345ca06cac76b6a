//! The image stream: HTTP(S) with the trust the caller pins (and, for the controller's own
//! image endpoint, the ramdisk's client certificate), resumed with a Range request after a
//! dropped connection, and never shorter or longer than the plan says. The download
//! runs on its own thread (an async client); the deploy pipeline reads it as a plain
//! `Read`, with at most a few MiB in flight.

use std::io::{self, Read};
use std::sync::Arc;
use std::time::Duration;

use metal_bmc::tls::{ClientIdentity, TlsTrust, http_client_with_identity};

/// How images are fetched.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// Accept plain `http://` (only with an explicit flag).
    pub allow_http: bool,
    /// The site CA's SHA-256 fingerprint: HTTPS servers must send it in their chain and
    /// chain to it. Required for `https://`.
    pub ca_fingerprint: Option<[u8; 32]>,
    /// Consecutive failures (without progress) before giving up.
    pub attempts: u32,
    /// First retry delay (doubled each time).
    pub backoff: Duration,
    /// Per-request timeout for connecting and between bytes.
    pub timeout: Duration,
    /// The client certificate to present (mutual TLS): the joined ramdisk's, for images the
    /// controller serves itself.
    pub identity: Option<Arc<ClientIdentity>>,
}

impl Default for FetchOptions {
    fn default() -> Self {
        Self {
            allow_http: false,
            ca_fingerprint: None,
            attempts: 5,
            backoff: Duration::from_millis(500),
            timeout: Duration::from_secs(60),
            identity: None,
        }
    }
}

/// The bytes at a URL, as a `Read`.
#[derive(Debug)]
pub struct HttpSource {
    chunks: tokio::sync::mpsc::Receiver<io::Result<bytes::Bytes>>,
    current: bytes::Bytes,
    /// Set when the downloader reported an error or the end.
    done: bool,
}

/// Checks the URL against the options before anything is fetched.
pub fn check_url(url: &str, options: &FetchOptions) -> io::Result<reqwest::Url> {
    let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{url}: {m}"));
    let parsed = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    match parsed.scheme() {
        "https" if options.ca_fingerprint.is_some() => Ok(parsed),
        "https" => Err(bad("an https:// image needs the site CA fingerprint (--ca-fingerprint)")),
        "http" if options.allow_http => Ok(parsed),
        "http" => Err(bad("plain http:// is refused (allow it explicitly with --allow-http)")),
        _ => Err(bad("only https:// (or, when allowed, http://) images are fetched")),
    }
}

impl HttpSource {
    /// Starts fetching `url`, which must deliver exactly `size` bytes.
    pub fn open(url: &str, size: u64, options: &FetchOptions) -> io::Result<Self> {
        let parsed = check_url(url, options)?;
        let trust = match options.ca_fingerprint {
            Some(pin) => TlsTrust::CaFingerprint(pin),
            None => TlsTrust::InsecureSkipVerify, // plain http: there is no TLS to verify
        };
        let client = http_client_with_identity(&trust, options.timeout, options.identity.as_deref())
            .map_err(io::Error::other)?;
        let (tx, rx) = tokio::sync::mpsc::channel(32);
        let options = options.clone();
        std::thread::Builder::new().name("image-download".into()).spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            };
            runtime.block_on(download(client, parsed, size, options, tx));
        })?;
        Ok(Self { chunks: rx, current: bytes::Bytes::new(), done: false })
    }
}

impl Read for HttpSource {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            if self.done {
                return Ok(0);
            }
            match self.chunks.blocking_recv() {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                None => self.done = true,
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = self.current.slice(n..);
        Ok(n)
    }
}

type Sender = tokio::sync::mpsc::Sender<io::Result<bytes::Bytes>>;

/// Fetches `url` into `tx`, resuming from the last byte received after a failure, until
/// exactly `size` bytes went through or it gives up.
async fn download(client: reqwest::Client, url: reqwest::Url, size: u64, options: FetchOptions, tx: Sender) {
    let mut offset = 0u64;
    let mut failures = 0u32;
    let mut last_error = String::new();
    while offset < size {
        if failures >= options.attempts {
            let message = format!("{url}: gave up after {failures} attempts at byte {offset} of {size}: {last_error}");
            let _ = tx.send(Err(io::Error::new(io::ErrorKind::UnexpectedEof, message))).await;
            return;
        }
        if failures > 0 {
            tokio::time::sleep(options.backoff * 2u32.saturating_pow(failures - 1)).await;
            tracing::warn!(%url, offset, attempt = failures + 1, "resuming the image download: {last_error}");
        }
        let mut request = client.get(url.clone());
        if offset > 0 {
            request = request.header(reqwest::header::RANGE, format!("bytes={offset}-"));
        }
        let mut response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                let (message, tls) = metal_bmc::http_error::describe(&e);
                if tls {
                    let _ = tx.send(Err(io::Error::other(format!("{url}: TLS: {message}")))).await;
                    return;
                }
                (failures, last_error) = (failures + 1, message);
                continue;
            }
        };
        let status = response.status();
        if metal_bmc::http_error::transient(status) {
            (failures, last_error) = (failures + 1, format!("HTTP {status}"));
            continue;
        }
        let resumed = offset > 0;
        let fatal = if !status.is_success() {
            Some(refusal(status, &mut response).await)
        } else if resumed && status != reqwest::StatusCode::PARTIAL_CONTENT {
            Some(format!("the server ignored the Range request (HTTP {status}); cannot resume at byte {offset}"))
        } else {
            None
        };
        if let Some(message) = fatal {
            let _ = tx.send(Err(io::Error::other(format!("{url}: {message}")))).await;
            return;
        }
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    offset += chunk.len() as u64;
                    if offset > size {
                        let message = format!("{url}: more than the plan's {size} bytes");
                        let _ = tx.send(Err(io::Error::new(io::ErrorKind::InvalidData, message))).await;
                        return;
                    }
                    failures = 0;
                    if tx.send(Ok(chunk)).await.is_err() {
                        return; // the reader is gone (the deploy failed)
                    }
                }
                Ok(None) => {
                    if offset < size {
                        (failures, last_error) = (failures + 1, format!("the stream ended at byte {offset} of {size}"));
                    }
                    break;
                }
                Err(e) => {
                    (failures, last_error) = (failures + 1, metal_bmc::http_error::describe(&e).0);
                    break;
                }
            }
        }
    }
}

/// A refused download as the server explained it: `HTTP 403 Forbidden: why` with the
/// controller's (or any JSON API's) `error.message`, else the first line of its body; what
/// is read of the body is bounded to its first chunk.
async fn refusal(status: reqwest::StatusCode, response: &mut reqwest::Response) -> String {
    let body = response.chunk().await.ok().flatten().unwrap_or_default();
    let body = &body[..body.len().min(1024)];
    let said = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(body).lines().next().unwrap_or_default().trim().to_owned());
    if said.is_empty() { format!("HTTP {status}") } else { format!("HTTP {status}: {said}") }
}
