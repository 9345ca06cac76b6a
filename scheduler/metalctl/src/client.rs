//! The HTTP client `metalctl` uses: where the server is, who we are, one request helper that
//! turns API errors into their message, and table rendering for people.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

/// Where `metalctl` reads its defaults: `$METALCTL_CONFIG`, else `~/.config/metal/metalctl.toml`.
pub fn config_path() -> Option<PathBuf> {
    std::env::var_os("METALCTL_CONFIG")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/metal/metalctl.toml")))
}

/// The config file: `url = "https://..."`, `token-file = "/path"`, and how to trust the
/// server: `ca-file = "/path/ca.crt"` or `ca-fingerprint = "AB:CD:..."`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ClientConfig {
    /// Server URL.
    pub url: Option<String>,
    /// File holding the bearer token (keeps the token off command lines).
    pub token_file: Option<PathBuf>,
    /// CA certificates (PEM) the server's certificate must chain to (its name is checked).
    pub ca_file: Option<PathBuf>,
    /// SHA-256 fingerprint of the CA in the chain the server sends (the site CA's, as
    /// `metal-scheduler ca init` prints it); its name is checked.
    pub ca_fingerprint: Option<String>,
    /// Send the token over plain HTTP to a host other than loopback (in clear, on purpose).
    #[serde(default)]
    pub allow_plain_http: bool,
}

/// How `metalctl` trusts the server's certificate, and whether plain HTTP beyond loopback is
/// allowed.
#[derive(Debug, Clone, Default)]
pub struct Transport {
    /// A CA file or a CA pin; the public web roots when neither.
    pub trust: Option<metal_bmc::tls::TlsTrust>,
    /// Plain HTTP to a host other than loopback, on purpose.
    pub allow_plain_http: bool,
}

impl Transport {
    /// From a CA file (read here) or a CA fingerprint; both is an error.
    pub fn new(ca_file: Option<&std::path::Path>, ca_fingerprint: Option<&str>) -> Result<Self, ClientError> {
        let trust = match (ca_file, ca_fingerprint) {
            (Some(_), Some(_)) => {
                return Err(ClientError::Config("give a CA file or a CA fingerprint, not both".into()));
            }
            (Some(path), None) => Some(metal_bmc::tls::TlsTrust::Ca(
                std::fs::read(path).map_err(|e| ClientError::Config(format!("CA file {}: {e}", path.display())))?,
            )),
            (None, Some(pin)) => Some(metal_bmc::tls::TlsTrust::CaFingerprint(
                metal_bmc::tls::parse_fingerprint(pin)
                    .map_err(|e| ClientError::Config(format!("CA fingerprint: {e}")))?,
            )),
            (None, None) => None,
        };
        Ok(Self { trust, allow_plain_http: false })
    }
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an API error.
    #[error("{code}: {message}{}", field.as_ref().map(|f| format!(" (field {f})")).unwrap_or_default())]
    Api {
        /// HTTP status.
        status: u16,
        /// Stable code.
        code: String,
        /// Message.
        message: String,
        /// Offending field.
        field: Option<String>,
    },
    /// The server could not be reached or answered nonsense.
    #[error("{0}")]
    Transport(String),
    /// Local configuration problem.
    #[error("{0}")]
    Config(String),
}

/// A connection to one scheduler.
#[derive(Debug)]
pub struct Client {
    url: String,
    token: String,
    http: reqwest::blocking::Client,
    /// The TLS client configuration for `https://` (the serial console's WebSocket uses it).
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

impl Client {
    /// A client for `url` with bearer `token`. Refuses an `http://` URL whose host is not
    /// loopback unless `transport` allows it: the token would cross the network in clear.
    pub fn new(url: &str, token: &str, transport: &Transport) -> Result<Self, ClientError> {
        let parsed = reqwest::Url::parse(url).map_err(|e| ClientError::Config(format!("server URL {url:?}: {e}")))?;
        let host = parsed.host_str().unwrap_or_default().trim_matches(['[', ']']);
        let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
        let tls = match parsed.scheme() {
            "https" => Some(std::sync::Arc::new(match &transport.trust {
                Some(trust) => metal_bmc::tls::client_config(trust).map_err(|e| ClientError::Config(e.to_string()))?,
                None => web_roots(),
            })),
            _ => None,
        };
        let builder = match parsed.scheme() {
            "https" => match &transport.trust {
                Some(_) => reqwest::blocking::Client::builder()
                    .use_preconfigured_tls(tls.as_deref().cloned().unwrap_or_else(web_roots)),
                None => reqwest::blocking::Client::builder(),
            },
            "http" if loopback || transport.allow_plain_http => reqwest::blocking::Client::builder(),
            "http" => {
                return Err(ClientError::Config(format!(
                    "refusing to send the bearer token to {url} in clear: use the server's https:// URL, or set \
                     allow-plain-http = true in metalctl.toml to do so on purpose"
                )));
            }
            other => return Err(ClientError::Config(format!("server URL {url:?}: {other}:// is not http or https"))),
        };
        let http = builder.build().map_err(|e| ClientError::Config(format!("HTTP client: {e}")))?;
        Ok(Self { url: url.trim_end_matches('/').to_owned(), token: token.trim().to_owned(), http, tls })
    }

    /// The server's URL, without a trailing `/`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The bearer token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The TLS configuration for the server (`None` over plain HTTP).
    pub fn tls(&self) -> Option<std::sync::Arc<rustls::ClientConfig>> {
        self.tls.clone()
    }

    /// Sends a request; returns the JSON answer or the API's error.
    pub fn request(&self, method: &str, path: &str, body: Option<RequestBody>) -> Result<Value, ClientError> {
        let method: reqwest::Method =
            method.parse().map_err(|_| ClientError::Config(format!("bad method {method}")))?;
        self.send(method, path, &[], body).map(|(value, _)| value)
    }

    /// Every item of a paged list (`GET path?query`), following each page's
    /// `Link: <...>; rel="next"`; at most `limit` items when given.
    pub fn list(&self, path: &str, query: &[(&str, String)], limit: Option<u32>) -> Result<Value, ClientError> {
        let mut query = query.to_vec();
        if let Some(limit) = limit {
            query.push(("limit", limit.min(metal_types::page::MAX_LIMIT).to_string()));
        }
        let wanted = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        let mut items = Vec::new();
        self.pages(path, &query, |page| match page {
            Value::Array(page) => {
                items.extend(page);
                Ok(items.len() < wanted)
            }
            other => Err(ClientError::Transport(format!("GET {path} answered {other} where a list was due"))),
        })?;
        items.truncate(wanted);
        Ok(Value::Array(items))
    }

    /// Hands each page of `GET path?query` to `each`, following `Link: <...>; rel="next"`
    /// while there is one and `each` says to go on.
    pub fn pages(
        &self,
        path: &str,
        query: &[(&str, String)],
        mut each: impl FnMut(Value) -> Result<bool, ClientError>,
    ) -> Result<(), ClientError> {
        let mut query = query.to_vec();
        loop {
            let (page, link) = self.send(reqwest::Method::GET, path, &query, None)?;
            let go_on = each(page)?;
            match link.as_deref().and_then(metal_types::page::next_cursor) {
                Some(cursor) if go_on => {
                    query.retain(|(name, _)| *name != "cursor");
                    query.push(("cursor", cursor));
                }
                _ => return Ok(()),
            }
        }
    }

    /// Sends a request; the JSON answer and its `Link` header, or the API's error.
    fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<RequestBody>,
    ) -> Result<(Value, Option<String>), ClientError> {
        let mut request = self.http.request(method, format!("{}{path}", self.url)).bearer_auth(&self.token);
        if !query.is_empty() {
            request = request.query(query);
        }
        request = match body {
            Some(RequestBody::Json(v)) => request.json(&v),
            Some(RequestBody::Csv(text)) => request.header("content-type", "text/csv").body(text),
            None => request,
        };
        let response = request.send().map_err(|e| {
            // The cause (a refused connection, an untrusted certificate) is in the chain.
            let mut message = format!("cannot reach {}: {e}", self.url);
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                message.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            ClientError::Transport(message)
        })?;
        let status = response.status().as_u16();
        let link = response.headers().get("link").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let text = response.text().map_err(|e| ClientError::Transport(e.to_string()))?;
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if (200..300).contains(&status) {
            return Ok((value, link));
        }
        let error = &value["error"];
        Err(ClientError::Api {
            status,
            code: error["code"].as_str().unwrap_or("HTTP_ERROR").to_owned(),
            message: error["message"].as_str().map(str::to_owned).unwrap_or_else(|| format!("HTTP {status}: {value}")),
            field: error["field"].as_str().map(str::to_owned),
        })
    }
}

/// A request body.
#[derive(Debug)]
pub enum RequestBody {
    /// JSON.
    Json(Value),
    /// CSV text.
    Csv(String),
}

fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(cell).collect::<Vec<_>>().join(","),
        Value::Object(map) => map.iter().map(|(k, v)| format!("{k}={}", cell(v))).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// Renders rows (JSON objects) as an aligned table of the named columns (JSON keys).
pub fn table(rows: &[Value], columns: &[(&str, &str)]) -> String {
    let cells: Vec<Vec<String>> =
        rows.iter().map(|r| columns.iter().map(|(_, key)| cell(&r[*key])).collect()).collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, (title, _))| cells.iter().map(|c| c[i].chars().count()).chain([title.len()]).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    let line = |values: Vec<&str>| {
        values.iter().zip(&widths).map(|(v, w)| format!("{v:<w$}")).collect::<Vec<_>>().join("  ").trim_end().to_owned()
            + "\n"
    };
    out.push_str(&line(columns.iter().map(|(t, _)| *t).collect()));
    for row in &cells {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// A TLS client trusting the public web roots (a server behind a public certificate).
fn web_roots() -> rustls::ClientConfig {
    let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_flatten() {
        let rows = vec![
            serde_json::json!({"id": "n1", "state": "ready", "labels": {"rack": "r1"}}),
            serde_json::json!({"id": "node-22", "state": "new", "labels": {}}),
        ];
        let text = table(&rows, &[("ID", "id"), ("STATE", "state"), ("LABELS", "labels")]);
        assert_eq!(text, "ID       STATE  LABELS\nn1       ready  rack=r1\nnode-22  new\n");
    }
}
