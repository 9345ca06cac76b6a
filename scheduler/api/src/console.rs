//! The operator console's files (console/dist, embedded by build.rs) at `/console`. A path
//! that is not a file answers index.html, since the console routes in the browser. Every
//! answer carries a content security policy that lets the page load only this site's own
//! scripts, styles and API: nothing from outside, no inline script, no framing. Inline
//! styles are allowed: xterm.js writes its terminal's theme into a `<style>` element.

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

include!(concat!(env!("OUT_DIR"), "/console_assets.rs"));

const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
    connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// `GET /console`: the console's page.
pub async fn index() -> Response {
    file("index.html")
}

/// `GET /console/{*path}`: a file of the console, or its page for any other path.
pub async fn path(Path(path): Path<String>) -> Response {
    if ASSETS.iter().any(|(name, _)| *name == path) {
        file(&path)
    } else if path.starts_with("assets/") {
        (StatusCode::NOT_FOUND, "no such console file\n").into_response()
    } else {
        file("index.html")
    }
}

fn file(name: &str) -> Response {
    let Some((_, bytes)) = ASSETS.iter().find(|(n, _)| *n == name) else {
        let text =
            "the console was not built: run scripts/setup (npm ci and npm run build in console/), then rebuild\n";
        return (StatusCode::SERVICE_UNAVAILABLE, text).into_response();
    };
    let kind = match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("woff2") => "font/woff2",
        Some("json" | "map") => "application/json",
        _ => "application/octet-stream",
    };
    let headers = [
        (header::CONTENT_TYPE, kind),
        (header::CONTENT_SECURITY_POLICY, POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-cache"),
    ];
    (headers, *bytes).into_response()
}
