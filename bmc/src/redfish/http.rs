//! The Redfish transport: requests to one BMC with its credential (a session token when
//! the BMC has a SessionService, basic auth otherwise), retries with backoff on transient
//! failures only, ETag/If-Match on PATCH, and following asynchronous tasks (202 plus a task
//! monitor) to their end.

use std::time::Duration;

use reqwest::{Method, StatusCode, header};
use serde_json::Value;
use tokio::sync::Mutex;

use crate::error::{BmcError, BmcResult};
use crate::secret::{Credential, Secret};

/// Timeouts and retries.
#[derive(Debug, Clone)]
pub struct Timing {
    /// One HTTP request.
    pub request: Duration,
    /// Attempts for a request that failed transiently.
    pub attempts: u32,
    /// First backoff (doubles each attempt).
    pub backoff: Duration,
    /// How long to follow a task or wait for a power state.
    pub settle: Duration,
    /// How often to poll while waiting.
    pub poll: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            request: Duration::from_secs(30),
            attempts: 4,
            backoff: Duration::from_millis(250),
            settle: Duration::from_secs(120),
            poll: Duration::from_millis(500),
        }
    }
}

/// An answer.
#[derive(Debug)]
pub struct Answer {
    /// Status.
    pub status: StatusCode,
    /// ETag header, if any.
    pub etag: Option<String>,
    /// Location header, if any.
    pub location: Option<String>,
    /// JSON body (Null when empty or not JSON).
    pub body: Value,
}

#[derive(Debug)]
struct Session {
    token: Secret,
    location: Option<String>,
}

/// A connection to one BMC.
#[derive(Debug)]
pub struct Transport {
    base: reqwest::Url,
    name: String,
    http: reqwest::Client,
    credential: Mutex<Credential>,
    session: Mutex<Option<Session>>,
    sessions_path: Mutex<Option<String>>,
    /// Timing.
    pub timing: Timing,
}

fn transient(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS
            | StatusCode::BAD_GATEWAY
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::GATEWAY_TIMEOUT
    )
}

/// The BMC's own error message from a Redfish error body, or the status.
pub fn error_message(status: StatusCode, body: &Value) -> String {
    let error = &body["error"];
    let mut parts: Vec<String> = Vec::new();
    if let Some(m) = error["message"].as_str() {
        parts.push(m.to_owned());
    }
    for info in error["@Message.ExtendedInfo"].as_array().into_iter().flatten() {
        if let Some(m) = info["Message"].as_str() {
            parts.push(m.to_owned());
        }
    }
    if parts.is_empty() { format!("HTTP {status}") } else { format!("HTTP {status}: {}", parts.join("; ")) }
}

impl Transport {
    /// A transport for the BMC at `base` (`https://host[:port]`).
    pub fn new(base: reqwest::Url, http: reqwest::Client, credential: Credential, timing: Timing) -> Self {
        let name = format!("{}:{}", base.host_str().unwrap_or("?"), base.port_or_known_default().unwrap_or(0));
        Self {
            base,
            name,
            http,
            credential: Mutex::new(credential),
            session: Mutex::new(None),
            sessions_path: Mutex::new(None),
            timing,
        }
    }

    /// `host:port`, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The user requests are made as.
    pub async fn user(&self) -> String {
        self.credential.lock().await.user.clone()
    }

    /// Uses sessions from now on (the service root lists a SessionService).
    pub async fn use_sessions(&self, sessions_path: String) {
        *self.sessions_path.lock().await = Some(sessions_path);
    }

    /// Another transport to the same BMC with another credential.
    pub async fn with_credential(&self, credential: Credential) -> Transport {
        let other = Transport::new(self.base.clone(), self.http.clone(), credential, self.timing.clone());
        *other.sessions_path.lock().await = self.sessions_path.lock().await.clone();
        other
    }

    /// Replaces the credential (after a verified rotation) and logs the old one's session out.
    pub async fn set_credential(&self, credential: Credential) {
        self.logout().await;
        *self.credential.lock().await = credential;
    }

    fn url(&self, path: &str) -> BmcResult<reqwest::Url> {
        self.base.join(path).map_err(|e| self.protocol("building a URL", format!("{path:?}: {e}")))
    }

    /// A protocol error for this BMC.
    pub fn protocol(&self, operation: &str, message: impl Into<String>) -> BmcError {
        BmcError::Protocol { bmc: self.name.clone(), operation: operation.to_owned(), message: message.into() }
    }

    /// A refusal by this BMC.
    pub fn refused(&self, operation: &str, answer: &Answer) -> BmcError {
        BmcError::Refused {
            bmc: self.name.clone(),
            operation: operation.to_owned(),
            message: error_message(answer.status, &answer.body),
        }
    }

    /// An unsupported operation on this BMC.
    pub fn unsupported(&self, operation: &str, message: impl Into<String>) -> BmcError {
        BmcError::Unsupported { bmc: self.name.clone(), operation: operation.to_owned(), message: message.into() }
    }

    async fn login(&self) -> BmcResult<Option<Secret>> {
        let Some(path) = self.sessions_path.lock().await.clone() else { return Ok(None) };
        // Held while logging in: calls sharing this transport wait for the one session
        // instead of each opening their own.
        let mut session = self.session.lock().await;
        if let Some(s) = session.as_ref() {
            return Ok(Some(s.token.clone()));
        }
        let credential = self.credential.lock().await.clone();
        let body = serde_json::json!({"UserName": credential.user, "Password": credential.password.expose()});
        let response = self.http.post(self.url(&path)?).json(&body).send().await.map_err(|e| self.unreachable(&e))?;
        if response.status() == StatusCode::UNAUTHORIZED || response.status() == StatusCode::FORBIDDEN {
            return Err(BmcError::Unauthorized { bmc: self.name.clone(), user: credential.user });
        }
        if !response.status().is_success() {
            return Err(self.protocol("creating a session", format!("HTTP {}", response.status())));
        }
        let token = response
            .headers()
            .get("x-auth-token")
            .and_then(|v| v.to_str().ok())
            .map(Secret::new)
            .ok_or_else(|| self.protocol("creating a session", "no X-Auth-Token in the answer"))?;
        let location = response.headers().get(header::LOCATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
        *session = Some(Session { token: token.clone(), location });
        Ok(Some(token))
    }

    /// Ends the session, if one is open (BMCs have few session slots).
    pub async fn logout(&self) {
        let session = self.session.lock().await.take();
        if let Some(Session { token, location: Some(location) }) = session
            && let Ok(url) = self.url(&location)
        {
            let _ = self.http.delete(url).header("x-auth-token", token.expose()).send().await;
        }
    }

    fn unreachable(&self, e: &reqwest::Error) -> BmcError {
        let mut message = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            message = format!("{message}: {s}");
            source = s.source();
        }
        if message.contains("certificate") || message.contains("fingerprint") || message.contains("UnknownIssuer") {
            BmcError::Tls { bmc: self.name.clone(), message }
        } else {
            BmcError::Unreachable { bmc: self.name.clone(), message }
        }
    }

    /// One request with authentication and retries; error statuses are returned, not raised
    /// (except 401, which is `Unauthorized`).
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        if_match: Option<&str>,
    ) -> BmcResult<Answer> {
        let idempotent = method == Method::GET || method == Method::DELETE;
        let mut delay = self.timing.backoff;
        let mut relogged = false;
        let mut attempt = 1;
        loop {
            let token = self.login().await?;
            let mut request = self.http.request(method.clone(), self.url(path)?);
            request = match &token {
                Some(t) => request.header("x-auth-token", t.expose()),
                None => {
                    let c = self.credential.lock().await;
                    request.basic_auth(&c.user, Some(c.password.expose()))
                }
            };
            if let Some(b) = body {
                request = request.json(b);
            }
            if let Some(tag) = if_match {
                request = request.header(header::IF_MATCH, tag);
            }
            match request.send().await {
                Err(e) if attempt < self.timing.attempts && (idempotent || e.is_connect()) => {
                    tracing::debug!(bmc = %self.name, %path, error = %e, attempt, "transient failure; retrying");
                }
                Err(e) => return Err(self.unreachable(&e)),
                Ok(response) if response.status() == StatusCode::UNAUTHORIZED => {
                    // A session can expire: log in again once.
                    if token.is_some() && !relogged {
                        *self.session.lock().await = None;
                        relogged = true;
                        continue;
                    }
                    return Err(BmcError::Unauthorized { bmc: self.name.clone(), user: self.user().await });
                }
                Ok(response) if transient(response.status()) && attempt < self.timing.attempts => {
                    tracing::debug!(bmc = %self.name, %path, status = %response.status(), attempt, "BMC busy; retrying");
                }
                Ok(response) => {
                    let status = response.status();
                    let headers = response.headers().clone();
                    let text = response.text().await.map_err(|e| self.unreachable(&e))?;
                    let header_text =
                        |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
                    let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                    let etag = header_text(header::ETAG).or_else(|| json["@odata.etag"].as_str().map(str::to_owned));
                    return Ok(Answer { status, etag, location: header_text(header::LOCATION), body: json });
                }
            }
            tokio::time::sleep(delay).await;
            delay *= 2;
            attempt += 1;
        }
    }

    /// GET a resource that must exist.
    pub async fn get(&self, path: &str) -> BmcResult<Answer> {
        let answer = self.request(Method::GET, path, None, None).await?;
        if !answer.status.is_success() {
            return Err(self.refused(&format!("GET {path}"), &answer));
        }
        Ok(answer)
    }

    /// GET a resource that may be missing (404 is `None`).
    pub async fn get_optional(&self, path: &str) -> BmcResult<Option<Answer>> {
        let answer = self.request(Method::GET, path, None, None).await?;
        match answer.status {
            s if s.is_success() => Ok(Some(answer)),
            StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED | StatusCode::NOT_IMPLEMENTED => Ok(None),
            _ => Err(self.refused(&format!("GET {path}"), &answer)),
        }
    }

    /// POSTs an action and follows its task when the BMC answers 202.
    pub async fn post_action(&self, operation: &str, target: &str, body: &Value) -> BmcResult<Answer> {
        let answer = self.request(Method::POST, target, Some(body), None).await?;
        self.finish(operation, answer).await
    }

    /// POSTs a multipart form (a firmware image push) once, and follows its task.
    pub async fn post_multipart(
        &self,
        operation: &str,
        path: &str,
        form: reqwest::multipart::Form,
    ) -> BmcResult<Answer> {
        let token = self.login().await?;
        let mut request = self.http.post(self.url(path)?).multipart(form);
        request = match &token {
            Some(t) => request.header("x-auth-token", t.expose()),
            None => {
                let c = self.credential.lock().await;
                request.basic_auth(&c.user, Some(c.password.expose()))
            }
        };
        let response = request.send().await.map_err(|e| self.unreachable(&e))?;
        if response.status() == StatusCode::UNAUTHORIZED {
            return Err(BmcError::Unauthorized { bmc: self.name.clone(), user: self.user().await });
        }
        let status = response.status();
        let location = response.headers().get(header::LOCATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let body =
            serde_json::from_str(&response.text().await.map_err(|e| self.unreachable(&e))?).unwrap_or(Value::Null);
        self.finish(operation, Answer { status, etag: None, location, body }).await
    }

    /// PATCHes a resource with If-Match when the BMC gave an ETag; on 412 (changed meanwhile)
    /// it reads the new ETag and tries once more.
    pub async fn patch(&self, operation: &str, path: &str, body: &Value) -> BmcResult<Answer> {
        let mut etag = self.get(path).await?.etag;
        for _ in 0..2 {
            let answer = self.request(Method::PATCH, path, Some(body), etag.as_deref()).await?;
            if answer.status == StatusCode::PRECONDITION_FAILED {
                etag = self.get(path).await?.etag;
                continue;
            }
            return self.finish(operation, answer).await;
        }
        Err(self.protocol(operation, "the resource kept changing (412 Precondition Failed twice)"))
    }

    async fn finish(&self, operation: &str, answer: Answer) -> BmcResult<Answer> {
        if answer.status == StatusCode::ACCEPTED
            && let Some(monitor) = answer.location.clone()
        {
            return self.follow_task(operation, &monitor).await;
        }
        if !answer.status.is_success() {
            return Err(self.refused(operation, &answer));
        }
        Ok(answer)
    }

    /// Polls a task monitor (or task resource) until the task ends; errors when it ends in
    /// anything but Completed, or takes longer than `timing.settle`.
    pub async fn follow_task(&self, operation: &str, monitor: &str) -> BmcResult<Answer> {
        let deadline = tokio::time::Instant::now() + self.timing.settle;
        loop {
            let answer = self.request(Method::GET, monitor, None, None).await?;
            let state = answer.body["TaskState"].as_str().map(str::to_owned);
            let running =
                answer.status == StatusCode::ACCEPTED || state.as_deref().is_some_and(super::parse::task_running);
            if !running {
                return match state.as_deref() {
                    None | Some("Completed") if answer.status.is_success() => Ok(answer),
                    None => Err(self.refused(operation, &answer)),
                    Some(other) => Err(BmcError::TaskFailed {
                        bmc: self.name.clone(),
                        task: monitor.to_owned(),
                        state: other.to_owned(),
                        message: super::parse::task_messages(&answer.body),
                    }),
                };
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(BmcError::Timeout {
                    bmc: self.name.clone(),
                    operation: operation.to_owned(),
                    seconds: self.timing.settle.as_secs(),
                    message: format!("task {monitor} still {}", state.as_deref().unwrap_or("running")),
                });
            }
            tokio::time::sleep(self.timing.poll).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_come_from_the_redfish_error_body() {
        let body = serde_json::json!({"error": {"code": "Base.1.0.GeneralError", "message": "A general error has occurred.",
            "@Message.ExtendedInfo": [{"MessageId": "Base.1.0.PropertyValueNotInList", "Message": "The value Foo is not in the list."}]}});
        assert_eq!(
            error_message(StatusCode::BAD_REQUEST, &body),
            "HTTP 400 Bad Request: A general error has occurred.; The value Foo is not in the list."
        );
        assert_eq!(error_message(StatusCode::NOT_FOUND, &Value::Null), "HTTP 404 Not Found");
    }
}
