//! Firmware image download: streamed into memory (bounded), hashed on the way, and handed
//! out only when its SHA-256 matches the one the pool pinned. Nothing reaches a BMC before
//! that check.

use sha2::{Digest as _, Sha256};

/// Why an image is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The URL is not one we fetch from.
    #[error("{url}: {message}")]
    BadUrl {
        /// The image URL.
        url: String,
        /// What is wrong with it.
        message: String,
    },
    /// The download failed.
    #[error("{url}: download failed: {message}")]
    Download {
        /// The image URL.
        url: String,
        /// What failed.
        message: String,
    },
    /// The image is larger than the limit.
    #[error("{url}: larger than {limit} bytes")]
    TooLarge {
        /// The image URL.
        url: String,
        /// The limit.
        limit: u64,
    },
    /// The image's SHA-256 differs from the pinned one.
    #[error("{url}: SHA-256 mismatch: expected {expected}, got {found}")]
    Checksum {
        /// The image URL.
        url: String,
        /// The pinned digest.
        expected: String,
        /// The digest of what was downloaded.
        found: String,
    },
}

/// How images are fetched.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// Accept plain `http://` URLs.
    pub allow_http: bool,
    /// Trust HTTPS servers issued by this CA (PEM). Without one the server certificate is
    /// not verified and the image's integrity rests on the pinned SHA-256 alone.
    pub ca_pem: Option<Vec<u8>>,
    /// Largest image accepted.
    pub max_bytes: u64,
    /// Per-request timeout.
    pub timeout: std::time::Duration,
}

impl Default for FetchOptions {
    fn default() -> Self {
        Self { allow_http: false, ca_pem: None, max_bytes: 512 << 20, timeout: std::time::Duration::from_secs(600) }
    }
}

/// A downloaded, checked image.
#[derive(Debug, Clone)]
pub struct Image {
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// The last path segment of its URL.
    pub file_name: String,
}

/// Checks that `url` is one we fetch from, before anything is downloaded.
pub fn check_url(url: &str, options: &FetchOptions) -> Result<reqwest::Url, ImageError> {
    let bad = |message: &str| ImageError::BadUrl { url: url.to_owned(), message: message.to_owned() };
    let parsed = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    match parsed.scheme() {
        "https" => Ok(parsed),
        "http" if options.allow_http => Ok(parsed),
        "http" => Err(bad("plain http:// is refused (allow it explicitly)")),
        _ => Err(bad("only https:// (or, when allowed, http://) images are fetched")),
    }
}

/// Downloads `url` and checks it against `sha256` (hex).
pub async fn fetch(url: &str, sha256: &str, options: &FetchOptions) -> Result<Image, ImageError> {
    let parsed = check_url(url, options)?;
    let failed = |message: String| ImageError::Download { url: url.to_owned(), message };
    let trust = match &options.ca_pem {
        Some(pem) => metal_bmc::tls::TlsTrust::Ca(pem.clone()),
        None => metal_bmc::tls::TlsTrust::InsecureSkipVerify,
    };
    let client = metal_bmc::tls::http_client(&trust, options.timeout).map_err(|e| failed(e.to_string()))?;
    let mut response = client.get(parsed.clone()).send().await.map_err(|e| failed(e.to_string()))?;
    if !response.status().is_success() {
        return Err(failed(format!("HTTP {}", response.status())));
    }
    let too_large = || ImageError::TooLarge { url: url.to_owned(), limit: options.max_bytes };
    if response.content_length().is_some_and(|n| n > options.max_bytes) {
        return Err(too_large());
    }
    let mut hasher = Sha256::new();
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| failed(e.to_string()))? {
        if bytes.len() as u64 + chunk.len() as u64 > options.max_bytes {
            return Err(too_large());
        }
        hasher.update(&chunk);
        bytes.extend_from_slice(&chunk);
    }
    let found = hex::encode(hasher.finalize());
    if !found.eq_ignore_ascii_case(sha256) {
        return Err(ImageError::Checksum { url: url.to_owned(), expected: sha256.to_owned(), found });
    }
    let file_name = parsed.path_segments().and_then(|mut s| s.next_back()).unwrap_or("firmware.bin").to_owned();
    Ok(Image { bytes, file_name })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_unless_http_is_allowed() {
        let strict = FetchOptions::default();
        assert!(check_url("https://fw.site-a/bios.bin", &strict).is_ok());
        let e = check_url("http://fw.site-a/bios.bin", &strict).unwrap_err();
        assert!(e.to_string().contains("plain http:// is refused"), "{e}");
        assert!(check_url("ftp://fw.site-a/bios.bin", &strict).is_err());
        assert!(check_url("not a url", &strict).is_err());
        let lax = FetchOptions { allow_http: true, ..FetchOptions::default() };
        assert!(check_url("http://fw.site-a/bios.bin", &lax).is_ok());
    }
}
