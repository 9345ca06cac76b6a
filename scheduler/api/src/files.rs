//! A file as an HTTP response with Range support (one range: `bytes=A-B`, `bytes=A-` or
//! `bytes=-N`), streamed from disk: what the boot listener serves images with, so a ramdisk
//! whose connection dropped resumes where it was.

use std::path::Path;

use axum::body::Body;
use axum::http::response::Builder;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};

use metal_types::error::ApiError;

/// A Range header this server cannot satisfy (416).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsatisfiable;

/// The byte range `[start, end)` a `Range` header asks of a `size`-byte file: `None` for the
/// whole file.
pub fn parse_range(header: Option<&str>, size: u64) -> Result<Option<(u64, u64)>, Unsatisfiable> {
    let Some(value) = header else { return Ok(None) };
    let Some(spec) = value.trim().strip_prefix("bytes=") else { return Err(Unsatisfiable) };
    if spec.contains(',') {
        return Err(Unsatisfiable); // several ranges: not offered
    }
    let (first, last) = spec.split_once('-').ok_or(Unsatisfiable)?;
    let (first, last) = (first.trim(), last.trim());
    let range = if first.is_empty() {
        let suffix: u64 = last.parse().map_err(|_| Unsatisfiable)?;
        if suffix == 0 {
            return Err(Unsatisfiable);
        }
        (size.saturating_sub(suffix), size)
    } else {
        let start: u64 = first.parse().map_err(|_| Unsatisfiable)?;
        let end = if last.is_empty() {
            size
        } else {
            last.parse::<u64>().map_err(|_| Unsatisfiable)?.saturating_add(1).min(size)
        };
        (start, end)
    };
    if range.0 >= range.1 {
        return Err(Unsatisfiable);
    }
    Ok(Some(range))
}

/// The response head for the part of a `size`-byte body that `headers`' Range asks for,
/// and that part `[start, end)`.
fn ranged(headers: &HeaderMap, size: u64, content_type: &str) -> Result<(Builder, u64, u64), Unsatisfiable> {
    let asked = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    let response =
        Response::builder().header(header::CONTENT_TYPE, content_type).header(header::ACCEPT_RANGES, "bytes");
    Ok(match parse_range(asked, size)? {
        None => (response.header(header::CONTENT_LENGTH, size), 0, size),
        Some((start, end)) => (
            response
                .status(StatusCode::PARTIAL_CONTENT)
                .header(header::CONTENT_RANGE, format!("bytes {start}-{}/{size}", end - 1))
                .header(header::CONTENT_LENGTH, end - start),
            start,
            end,
        ),
    })
}

/// The answer to a Range of a `size`-byte body that cannot be served (416).
fn unsatisfiable(size: u64) -> Result<Response, ApiError> {
    Response::builder()
        .status(StatusCode::RANGE_NOT_SATISFIABLE)
        .header(
            header::CONTENT_RANGE,
            HeaderValue::from_str(&format!("bytes */{size}")).unwrap_or(HeaderValue::from_static("bytes */0")),
        )
        .body(Body::empty())
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// The file at `path` (or the part `headers`' Range asks for), as `content_type`.
pub async fn file_response(path: &Path, headers: &HeaderMap, content_type: &str) -> Result<Response, ApiError> {
    let mut file = tokio::fs::File::open(path)
        .await
        .map_err(|e| ApiError::Internal(format!("opening {}: {e}", path.display())))?;
    let size = file.metadata().await.map_err(|e| ApiError::Internal(e.to_string()))?.len();
    let Ok((response, start, end)) = ranged(headers, size, content_type) else { return unsatisfiable(size) };
    file.seek(std::io::SeekFrom::Start(start)).await.map_err(|e| ApiError::Internal(e.to_string()))?;
    let stream = tokio_util::io::ReaderStream::with_capacity(file.take(end - start), 1 << 20);
    response.body(Body::from_stream(stream)).map_err(|e| ApiError::Internal(e.to_string()))
}

/// A `size`-byte body built in memory (or the part `headers`' Range asks for: `part(start,
/// end)` makes bytes `[start, end)`), as `content_type`.
pub fn bytes_response(
    size: usize,
    part: impl FnOnce(usize, usize) -> Vec<u8>,
    headers: &HeaderMap,
    content_type: &str,
) -> Result<Response, ApiError> {
    let Ok((response, start, end)) = ranged(headers, size as u64, content_type) else {
        return unsatisfiable(size as u64);
    };
    // The range lies within the body: parse_range clips it to the size.
    let (start, end) = (usize::try_from(start).unwrap_or(size), usize::try_from(end).unwrap_or(size));
    response.body(Body::from(part(start, end))).map_err(|e| ApiError::Internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::{Unsatisfiable, parse_range};

    #[test]
    fn ranges() {
        assert_eq!(parse_range(None, 100), Ok(None));
        assert_eq!(parse_range(Some("bytes=0-"), 100), Ok(Some((0, 100))));
        assert_eq!(parse_range(Some("bytes=10-19"), 100), Ok(Some((10, 20))));
        assert_eq!(parse_range(Some("bytes=90-200"), 100), Ok(Some((90, 100))), "clipped to the end");
        assert_eq!(parse_range(Some("bytes=-10"), 100), Ok(Some((90, 100))));
        assert_eq!(parse_range(Some("bytes=100-"), 100), Err(Unsatisfiable), "past the end");
        assert_eq!(parse_range(Some("bytes=5-2"), 100), Err(Unsatisfiable));
        assert_eq!(parse_range(Some("bytes=0-1,5-6"), 100), Err(Unsatisfiable));
        assert_eq!(parse_range(Some("items=0-1"), 100), Err(Unsatisfiable));
        assert_eq!(parse_range(Some("bytes=x-"), 100), Err(Unsatisfiable));
    }
}
