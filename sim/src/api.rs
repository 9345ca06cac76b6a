//! The simulator's own client of the scheduler's HTTP API: it enrols the fleet and drives
//! leases the way an operator or a tenant would (`metalctl` speaks the same API).

use serde_json::Value;

/// A refused or failed API call.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The call did not get an answer.
    #[error("{method} {path}: {source}")]
    Transport {
        /// The method.
        method: String,
        /// The path.
        path: String,
        /// What failed.
        source: reqwest::Error,
    },
    /// The scheduler answered with an error.
    #[error("{method} {path}: {status}: {message}")]
    Refused {
        /// The method.
        method: String,
        /// The path.
        path: String,
        /// The HTTP status.
        status: u16,
        /// The API's message (or the body).
        message: String,
    },
}

/// How long a call keeps trying to reach a scheduler that is not there (one being started
/// again after a kill), in real time.
const UNREACHABLE: std::time::Duration = std::time::Duration::from_secs(30);

/// An API client with one bearer token.
#[derive(Clone)]
pub struct Api {
    base: String,
    token: String,
    http: reqwest::Client,
    writes: std::sync::Arc<tokio::sync::RwLock<()>>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api").field("base", &self.base).field("token", &"***").finish()
    }
}

impl Api {
    /// A client of the API at `base` (e.g. `http://127.0.0.1:7450`) with `token`.
    pub fn new(base: &str, token: &str) -> Api {
        Api {
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            http: reqwest::Client::new(),
            writes: std::sync::Arc::default(),
        }
    }

    /// Holds every write of this client (and its clones) back until the guard drops: chaos
    /// kills the scheduler only between writes, so each write the client made was either
    /// acknowledged or never sent.
    pub async fn hold_writes(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.writes.write().await
    }

    /// Holds [`Api::hold_writes`] (and so chaos' kills) off until the guard drops: for a
    /// check that needs the scheduler's own periodic passes to run meanwhile.
    pub async fn hold_off_kills(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        self.writes.read().await
    }

    /// The API's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Calls `method path` with `body` (JSON, when not null); the answer's JSON (null when
    /// empty).
    pub async fn call(&self, method: &str, path: &str, body: &Value) -> Result<Value, ApiError> {
        self.send(method, path, body).await.map(|(json, _)| json)
    }

    /// Every item of the paged list at `path`, following each page's `Link: <...>; rel="next"`.
    pub async fn list(&self, path: &str) -> Result<Vec<Value>, ApiError> {
        Ok(self.pages(path).await?.into_iter().flat_map(|page| page.as_array().cloned().unwrap_or_default()).collect())
    }

    /// Every page of `GET path` (a list, or an object holding one, as usage holds its
    /// records), following each page's `Link: <...>; rel="next"`.
    pub async fn pages(&self, path: &str) -> Result<Vec<Value>, ApiError> {
        let mut pages = Vec::new();
        let mut page_path = path.to_owned();
        loop {
            let (page, link) = self.send("GET", &page_path, &Value::Null).await?;
            pages.push(page);
            let Some(cursor) = link.as_deref().and_then(metal_types::page::next_cursor) else { return Ok(pages) };
            page_path = format!("{path}{}cursor={cursor}", if path.contains('?') { '&' } else { '?' });
        }
    }

    /// Calls `method path`; the answer's JSON and its `Link` header.
    async fn send(&self, method: &str, path: &str, body: &Value) -> Result<(Value, Option<String>), ApiError> {
        let verb = match method {
            "GET" => reqwest::Method::GET,
            "POST" => reqwest::Method::POST,
            "PUT" => reqwest::Method::PUT,
            "PATCH" => reqwest::Method::PATCH,
            "DELETE" => reqwest::Method::DELETE,
            other => {
                return Err(ApiError::Refused {
                    method: other.to_owned(),
                    path: path.to_owned(),
                    status: 405,
                    message: "not a method of the API".into(),
                });
            }
        };
        let _writing = if verb == reqwest::Method::GET { None } else { Some(self.writes.read().await) };
        let transport = |source| ApiError::Transport { method: method.to_owned(), path: path.to_owned(), source };
        let started = std::time::Instant::now();
        let (status, link, text) = loop {
            let mut request = self.http.request(verb.clone(), format!("{}{path}", self.base)).bearer_auth(&self.token);
            if !body.is_null() {
                request = request.json(body);
            }
            let answered = async {
                let answer = request.send().await?;
                let status = answer.status();
                let link = answer.headers().get("link").and_then(|v| v.to_str().ok()).map(str::to_owned);
                Ok::<_, reqwest::Error>((status, link, answer.text().await?))
            };
            match answered.await {
                Ok(answer) => break answer,
                // A read is asked again; a write only when it was never sent (no connection).
                Err(e) if (verb == reqwest::Method::GET || e.is_connect()) && started.elapsed() < UNREACHABLE => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(e) => return Err(transport(e)),
            }
        };
        let json: Value =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        if status.is_success() {
            Ok((json, link))
        } else {
            let message = json["error"]["message"].as_str().map_or_else(|| json.to_string(), str::to_owned);
            Err(ApiError::Refused {
                method: method.to_owned(),
                path: path.to_owned(),
                status: status.as_u16(),
                message,
            })
        }
    }

    /// GET `path`.
    pub async fn get(&self, path: &str) -> Result<Value, ApiError> {
        self.call("GET", path, &Value::Null).await
    }

    /// POST `body` to `path`.
    pub async fn post(&self, path: &str, body: Value) -> Result<Value, ApiError> {
        self.call("POST", path, &body).await
    }
}
