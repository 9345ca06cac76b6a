//! What metal's HTTP clients share (the ramdisk's controller and image clients, the
//! scheduler's image imports): an error's whole cause chain for messages, and which failures
//! are worth a retry.

use std::io;

/// The whole cause chain of a request error, and whether the TLS handshake refused the
/// server (permanent: retrying cannot help).
pub fn describe(e: &reqwest::Error) -> (String, bool) {
    let mut parts = vec![e.to_string()];
    let mut tls = false;
    let mut next: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(cause) = next {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            // The TLS layer reports a refused handshake as InvalidData (tokio-rustls), and
            // io::Error hides its payload from source(): look inside, level by level.
            tls |= io.kind() == io::ErrorKind::InvalidData;
            if let Some(inner) = io.get_ref() {
                next = Some(inner);
                continue;
            }
        }
        let text = cause.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        next = cause.source();
    }
    (parts.join(": "), tls)
}

/// Whether an HTTP status is worth retrying (the server is busy or briefly broken).
pub fn transient(status: reqwest::StatusCode) -> bool {
    status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS
}
