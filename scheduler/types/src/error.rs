//! The one error type of the API and its one HTTP mapping.
//!
//! Every failure a client can see is an `ApiError` with a stable code; the body is always
//! `{"error": {"code": "...", "message": "...", "field": "..."}}`. Internal errors are logged
//! with their detail and answered with a generic message, so nothing internal leaks.

use http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Stable error codes of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    /// The request is malformed or breaks a validation rule.
    InvalidInput,
    /// The configuration the request relies on is missing or wrong.
    InvalidConfig,
    /// No such resource (or not visible to the caller).
    NotFound,
    /// The resource is not in a state that allows the request (including lost races).
    Conflict,
    /// The caller is authenticated but may not do this.
    Forbidden,
    /// No valid credential.
    Unauthenticated,
    /// A node's BMC failed, refused or could not be reached (502).
    BmcError,
    /// Too many requests from this client; retry later (429).
    RateLimited,
    /// The route does not take this HTTP method (405).
    MethodNotAllowed,
    /// What the request resumes from is no longer kept (410): start over from the current
    /// state.
    Gone,
    /// Something failed on the server.
    Internal,
}

/// The error body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable machine-readable code.
    pub code: ErrorCode,
    /// Human-readable message.
    pub message: String,
    /// The offending request field, when one is to blame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// An error the API answers with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A request field is invalid.
    #[error("{field}: {message}")]
    InvalidInput {
        /// The field, in the request's JSON naming.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The request body is not valid JSON of the expected shape.
    #[error("{0}")]
    BadBody(String),
    /// The request body is over the route's size limit (413, code INVALID_INPUT).
    #[error("{0}")]
    TooLarge(String),
    /// Configuration is missing or wrong.
    #[error("{0}")]
    InvalidConfig(String),
    /// Not found (or not visible).
    #[error("{0} not found")]
    NotFound(String),
    /// State conflict.
    #[error("{0}")]
    Conflict(String),
    /// A transient conflict the client should retry (409 CONFLICT; never stored as an
    /// idempotency key's answer).
    #[error("{0}")]
    Busy(String),
    /// Not allowed.
    #[error("{0}")]
    Forbidden(String),
    /// Not authenticated.
    #[error("{0}")]
    Unauthenticated(String),
    /// A node's BMC failed (the message names the BMC and what it said, never a credential).
    #[error("{0}")]
    Bmc(String),
    /// Too many requests from one client (429, code RATE_LIMITED).
    #[error("{0}")]
    RateLimited(String),
    /// The route exists but not with this method (405).
    #[error("{0}")]
    MethodNotAllowed(String),
    /// What the request resumes from is past retention (410, code GONE).
    #[error("{0}")]
    Gone(String),
    /// Server-side failure (detail is logged, not returned).
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// An invalid-input error naming `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::InvalidInput { field: field.into(), message: message.into() }
    }

    /// The stable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            ApiError::InvalidInput { .. } | ApiError::BadBody(_) | ApiError::TooLarge(_) => ErrorCode::InvalidInput,
            ApiError::InvalidConfig(_) => ErrorCode::InvalidConfig,
            ApiError::NotFound(_) => ErrorCode::NotFound,
            ApiError::MethodNotAllowed(_) => ErrorCode::MethodNotAllowed,
            ApiError::Gone(_) => ErrorCode::Gone,
            ApiError::Conflict(_) | ApiError::Busy(_) => ErrorCode::Conflict,
            ApiError::Forbidden(_) => ErrorCode::Forbidden,
            ApiError::Unauthenticated(_) => ErrorCode::Unauthenticated,
            ApiError::Bmc(_) => ErrorCode::BmcError,
            ApiError::RateLimited(_) => ErrorCode::RateLimited,
            ApiError::Internal(_) => ErrorCode::Internal,
        }
    }

    /// The HTTP status for the code.
    pub fn status(&self) -> StatusCode {
        if let ApiError::TooLarge(_) = self {
            return StatusCode::PAYLOAD_TOO_LARGE;
        }
        match self.code() {
            ErrorCode::InvalidInput | ErrorCode::InvalidConfig => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::Conflict => StatusCode::CONFLICT,
            ErrorCode::Forbidden => StatusCode::FORBIDDEN,
            ErrorCode::Unauthenticated => StatusCode::UNAUTHORIZED,
            ErrorCode::BmcError => StatusCode::BAD_GATEWAY,
            ErrorCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::Gone => StatusCode::GONE,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The body a client sees.
    pub fn body(&self) -> ErrorBody {
        let (message, field) = match self {
            ApiError::InvalidInput { field, message } => (message.clone(), Some(field.clone())),
            ApiError::Internal(_) => ("internal error; see the scheduler's log".to_owned(), None),
            other => (other.to_string(), None),
        };
        ErrorBody { error: ErrorDetail { code: self.code(), message, field } }
    }
}

impl From<metal_bmc::BmcError> for ApiError {
    fn from(e: metal_bmc::BmcError) -> Self {
        match e {
            metal_bmc::BmcError::Invalid(message) => ApiError::invalid("bmc", message),
            // The BMC works, and said it does not offer this: ask for something else.
            unsupported @ metal_bmc::BmcError::Unsupported { .. } => ApiError::invalid("bmc", unsupported.to_string()),
            other => ApiError::Bmc(other.to_string()),
        }
    }
}

impl From<crate::secrets::SecretError> for ApiError {
    fn from(e: crate::secrets::SecretError) -> Self {
        ApiError::InvalidConfig(e.to_string())
    }
}

#[cfg(feature = "axum")]
mod axum_impls {
    //! The HTTP answer, and axum's extractor rejections in the API's shape (here, where the
    //! orphan rule lets them be).

    use axum::Json;
    use axum::extract::rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection};
    use axum::response::{IntoResponse, Response};
    use http::StatusCode;

    use super::ApiError;

    impl IntoResponse for ApiError {
        fn into_response(self) -> Response {
            if let ApiError::Internal(detail) = &self {
                tracing::error!(error = %detail, "internal error");
            }
            (self.status(), Json(self.body())).into_response()
        }
    }

    impl From<QueryRejection> for ApiError {
        fn from(rejection: QueryRejection) -> Self {
            ApiError::invalid("query", rejection.body_text())
        }
    }

    impl From<PathRejection> for ApiError {
        fn from(rejection: PathRejection) -> Self {
            ApiError::invalid("path", rejection.body_text())
        }
    }

    /// A body rejection in the API's shape: over the size limit is 413, anything else a bad
    /// body, said without the JSON library's framing (what is wrong, not where its parser was).
    fn body_rejection(status: StatusCode, text: String) -> ApiError {
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            return ApiError::TooLarge(text);
        }
        let text = text.strip_prefix("Failed to deserialize the JSON body into the target type: ").unwrap_or(&text);
        let text = match text.rfind(" at line ") {
            Some(at) if text[at..].contains(" column ") => &text[..at],
            _ => text,
        };
        ApiError::BadBody(format!("the request body: {text}"))
    }

    impl From<JsonRejection> for ApiError {
        fn from(rejection: JsonRejection) -> Self {
            body_rejection(rejection.status(), rejection.body_text())
        }
    }

    impl From<BytesRejection> for ApiError {
        fn from(rejection: BytesRejection) -> Self {
            body_rejection(rejection.status(), rejection.body_text())
        }
    }
}

/// Result of an API operation.
pub type ApiResult<T> = Result<T, ApiError>;
