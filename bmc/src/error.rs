//! One error enum for every BMC operation. Messages name the BMC and the operation and
//! never carry a credential.

/// Why a BMC operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BmcError {
    /// The BMC could not be reached (connection, timeout, TLS).
    #[error("{bmc}: cannot reach the BMC: {message}")]
    Unreachable {
        /// The BMC address.
        bmc: String,
        /// What failed.
        message: String,
    },
    /// The BMC's certificate matched neither the pinned CA nor the pinned fingerprint.
    #[error("{bmc}: TLS: {message}")]
    Tls {
        /// The BMC address.
        bmc: String,
        /// What did not match.
        message: String,
    },
    /// The BMC rejected the credential.
    #[error("{bmc}: authentication failed for user {user}")]
    Unauthorized {
        /// The BMC address.
        bmc: String,
        /// The user.
        user: String,
    },
    /// The BMC refused the request (an HTTP error or an IPMI completion code).
    #[error("{bmc}: {operation} refused: {message}")]
    Refused {
        /// The BMC address.
        bmc: String,
        /// What was asked.
        operation: String,
        /// The BMC's own message.
        message: String,
    },
    /// The BMC does not offer this (no such resource, action or allowed value).
    #[error("{bmc}: {operation} is not supported by this BMC: {message}")]
    Unsupported {
        /// The BMC address.
        bmc: String,
        /// What was asked.
        operation: String,
        /// What is missing.
        message: String,
    },
    /// The BMC accepted the request but never reported the expected result.
    #[error("{bmc}: {operation} did not take effect within {seconds} s: {message}")]
    Timeout {
        /// The BMC address.
        bmc: String,
        /// What was asked.
        operation: String,
        /// How long we waited.
        seconds: u64,
        /// The last state seen.
        message: String,
    },
    /// The BMC answered something that could not be understood.
    #[error("{bmc}: unexpected answer to {operation}: {message}")]
    Protocol {
        /// The BMC address.
        bmc: String,
        /// What was asked.
        operation: String,
        /// What was wrong with the answer.
        message: String,
    },
    /// A long-running BMC task ended badly.
    #[error("{bmc}: task {task} ended {state}: {message}")]
    TaskFailed {
        /// The BMC address.
        bmc: String,
        /// The task's URI.
        task: String,
        /// Its final state.
        state: String,
        /// Its messages.
        message: String,
    },
    /// The local tool (ipmitool) could not be run.
    #[error("cannot run {tool}: {message}")]
    Tool {
        /// The tool.
        tool: String,
        /// What failed.
        message: String,
    },
    /// The caller asked for something invalid.
    #[error("invalid request: {0}")]
    Invalid(String),
}

/// Result of a BMC operation.
pub type BmcResult<T> = Result<T, BmcError>;
