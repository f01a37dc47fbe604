//! The one error type of the client.

use serde_json::{Map, Value};
use std::fmt;

/// What kind of failure an [`Error`] is. Match on it to tell a refusal by
/// policy from a quarantined message, a contract problem or a lost
/// connection without comparing code strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The credential was missing or unknown (`UNAUTHENTICATED`), or cannot
    /// be judged now (`IDENTITY_UNAVAILABLE`, 503: its identity provider
    /// cannot be reached; retrying later may succeed).
    Unauthenticated,
    /// The contract is missing, expired, revoked, stale, or does not cover
    /// the subject or operation (`CONTRACT_*`, `SUBJECT_NOT_IN_CONTRACT`,
    /// `OPERATION_NOT_IN_CONTRACT`, `GRANT_REVOKED`, `NO_PERMITTED_SUBJECTS`).
    Contract,
    /// Refused by policy or an admission gate and not kept
    /// (`INTENT_DENIED`, `REGION_DENIED`, `REPLAY_DENIED`, `RATE_LIMITED`, …).
    /// Whether a gate's refusal also quarantines depends on the subject's
    /// `quarantine` policy: [`Error::is_denied`] is true for both.
    Denied,
    /// Refused by an admission gate and kept in quarantine: `details`
    /// carries `quarantineId` and `gate`.
    Quarantined,
    /// The request was malformed (`BAD_REQUEST`, `ENVELOPE_INVALID`,
    /// `INVALID_ARGUMENT`, `SELECTOR_INVALID`, …).
    Invalid,
    /// Something named does not exist (`SUBJECT_NOT_FOUND`, `MESSAGE_NOT_FOUND`, …).
    NotFound,
    /// No answer in time (`REQUEST_TIMEOUT`).
    Timeout,
    /// The connection was lost, could not be made, or the server is
    /// shutting down; the call may or may not have taken effect. A TLS
    /// failure is `TLS_FAILED` (`details.tls`: `unknown_issuer`,
    /// `name_mismatch`, `expired`, …); a client certificate that is missing
    /// or refused is [`Unauthenticated`](ErrorKind::Unauthenticated).
    Transport,
    /// The server sent a frame the client cannot take (not JSON, missing
    /// or ill-typed fields).
    Protocol,
    /// The session was closed with [`Session::close`](crate::Session::close);
    /// no further calls are taken.
    Closed,
    /// A signature did not verify or a sealed payload did not open.
    Crypto,
    /// The server failed (`INTERNAL`, `STORE_*`, `CLUSTER_UNCONFIRMED`), or
    /// a program handling a delivery did (`PROGRAM_TRAPPED`,
    /// `PROGRAM_TIMEOUT`, `PROGRAM_LIMIT_EXCEEDED`).
    Server,
    /// An at-most-once subscription dropped deliveries in the client
    /// because [`MAX_QUEUED`](crate::MAX_QUEUED) were already waiting for
    /// its handler or stream reader, or
    /// [`MAX_QUEUED_BYTES`](crate::MAX_QUEUED_BYTES) of their data
    /// (`DELIVERIES_DROPPED`; `details`: `subject`, `dropped`, `maxQueued`,
    /// `maxQueuedBytes`). Only reported to `on_error`.
    Dropped,
    /// A call that gathers pages stopped at the most it holds, with more
    /// recorded: [`HttpClient::all_receipts`](crate::http::HttpClient::all_receipts)
    /// past [`with_all_receipts_max`](crate::http::HttpClient::with_all_receipts_max)
    /// receipts (`RECEIPTS_TRUNCATED`; `details`: `max`, and `next`, the
    /// cursor to read on from). Nothing is wrong with the answers: raise the
    /// bound, or read page by page.
    Truncated,
}

/// An error of the Pigeon client: the server's stable `code`, its
/// `message`, the HTTP `status` that code maps to, the `details` object
/// (`gate`, `quarantineId`, `decision`, …) and a [`ErrorKind`].
#[derive(Debug, Clone)]
pub struct Error {
    pub kind: ErrorKind,
    pub code: String,
    pub message: String,
    pub status: u16,
    pub details: Map<String, Value>,
}

/// Writes a server's text for a log or a terminal: C0 controls, DEL and
/// C1 controls as `\xNN`, U+2028 and U+2029 as `\u2028` / `\u2029`, the
/// rest as it is.
/// A newline can then not forge a log line, nor an ANSI escape drive the
/// terminal.
pub fn escape_text(s: &str) -> String {
    use fmt::Write;
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

impl fmt::Display for Error {
    /// `pigeon: CODE: message`, the code and message escaped with
    /// [`escape_text`]: they may be a server's text, and an error is what
    /// applications print and log. The fields keep the text as sent.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pigeon: {}: {}", escape_text(&self.code), escape_text(&self.message))
    }
}

impl std::error::Error for Error {}

impl Error {
    /// Builds an error from a code and message; the kind and status follow
    /// from the code.
    pub fn new(code: &str, message: impl Into<String>) -> Error {
        Error::with_details(code, message, Map::new())
    }

    /// Builds an error from a code, message and details; a `decision` or
    /// `gate` in the details makes it a denial, a `quarantineId` (or a
    /// decision whose outcome is quarantine) a quarantine.
    pub fn with_details(code: &str, message: impl Into<String>, details: Map<String, Value>) -> Error {
        let kind = kind_of(code, &details);
        Error { kind, code: code.to_string(), message: message.into(), status: http_status(code), details }
    }

    /// A connection-level failure (kind [`ErrorKind::Transport`]).
    pub fn transport(code: &str, message: impl Into<String>) -> Error {
        let mut e = Error::new(code, message);
        e.kind = ErrorKind::Transport;
        e
    }

    /// A frame the client cannot take (kind [`ErrorKind::Protocol`]).
    pub fn protocol(message: impl Into<String>) -> Error {
        let mut e = Error::new("BAD_FRAME", message);
        e.kind = ErrorKind::Protocol;
        e.status = 502;
        e
    }

    /// The error of every call on a closed session.
    pub fn closed() -> Error {
        let mut e = Error::new("SESSION_CLOSED", "the session is closed");
        e.kind = ErrorKind::Closed;
        e
    }

    pub(crate) fn crypto(code: &str, message: impl Into<String>) -> Error {
        let mut e = Error::new(code, message);
        e.kind = ErrorKind::Crypto;
        e
    }

    /// Decodes the `{"code","message","details"}` object of an error frame
    /// or HTTP error body.
    pub fn from_wire(v: &Value) -> Error {
        let code = v.get("code").and_then(Value::as_str).unwrap_or("INTERNAL");
        let message = v.get("message").and_then(Value::as_str).unwrap_or("");
        let details = v.get("details").and_then(Value::as_object).cloned().unwrap_or_default();
        Error::with_details(code, message, details)
    }

    /// `details.quarantineId`, when the message was quarantined.
    pub fn quarantine_id(&self) -> Option<&str> {
        self.details.get("quarantineId").and_then(Value::as_str)
    }

    /// `details.gate`, the admission gate that refused the message.
    pub fn gate(&self) -> Option<&str> {
        self.details.get("gate").and_then(Value::as_str)
    }

    /// Refused by policy or an admission gate, whether or not the message
    /// was also quarantined (a quarantine is a denial that keeps the message).
    pub fn is_denied(&self) -> bool {
        matches!(self.kind, ErrorKind::Denied | ErrorKind::Quarantined)
    }
    pub fn is_quarantined(&self) -> bool {
        self.kind == ErrorKind::Quarantined
    }
    pub fn is_contract(&self) -> bool {
        self.kind == ErrorKind::Contract
    }
    pub fn is_transport(&self) -> bool {
        self.kind == ErrorKind::Transport
    }
}

/// The kind of a code: the one of its group on the server (tests/codes.rs
/// holds it to clients/conformance/codes.json); a code not listed here is
/// [`ErrorKind::Denied`].
/// The server's stable codes (errors.go at the repository's root); a unit
/// test of conn.rs holds them to clients/conformance/codes.json.
pub(crate) const SERVER_CODES: &[&str] = &[
    "ACK_NOT_ALLOWED",
    "AUDIT_TAMPERED",
    "BAD_REQUEST",
    "CLASSIFICATION_DENIED",
    "CLUSTER_UNCONFIRMED",
    "CONFLICT",
    "CONTRACT_EXPIRED",
    "CONTRACT_NOT_FOUND",
    "CONTRACT_PRINCIPAL_MISMATCH",
    "CONTRACT_REQUIRED",
    "CONTRACT_REVOKED",
    "CONTRACT_STALE",
    "DATA_QUALITY_FAILED",
    "DELIVERY_EXHAUSTED",
    "DUPLICATE_KEY",
    "ENCRYPTION_REQUIRED",
    "ENVELOPE_INVALID",
    "FILTER_INVALID",
    "FORBIDDEN",
    "GRANT_REVOKED",
    "HOPS_EXCEEDED",
    "IDEMPOTENCY_REQUIRED",
    "IDENTITY_UNAVAILABLE",
    "INTENT_DENIED",
    "INTERNAL",
    "INVALID_ARGUMENT",
    "INVALID_UTF8",
    "MESSAGE_ID_TAKEN",
    "MESSAGE_NOT_FOUND",
    "METHOD_NOT_ALLOWED",
    "NOT_FOUND",
    "NO_PERMITTED_SUBJECTS",
    "OPERATION_NOT_IN_CONTRACT",
    "PAYLOAD_TOO_LARGE",
    "POLICY_DENIED",
    "POLICY_INVALID",
    "PROGRAM_INVALID",
    "PROGRAM_LIMIT_EXCEEDED",
    "PROGRAM_NOT_FOUND",
    "PROGRAM_TIMEOUT",
    "PROGRAM_TRAPPED",
    "PROGRAM_VERSION_PRUNED",
    "QUARANTINE_NOT_FOUND",
    "RATE_LIMITED",
    "RAW_PAN_DETECTED",
    "REGION_DENIED",
    "REPLAY_DENIED",
    "REQUEST_TIMEOUT",
    "SCHEMA_INVALID",
    "SELECTOR_INVALID",
    "SENSITIVE_FIELD_DENIED",
    "SESSION_CLOSED",
    "SHUTTING_DOWN",
    "SIGNATURE_INVALID",
    "SIGNATURE_REQUIRED",
    "STORE_CORRUPT",
    "STORE_FULL",
    "STORE_NO_QUORUM",
    "STORE_UNAVAILABLE",
    "SUBJECT_NOT_FOUND",
    "SUBJECT_NOT_IN_CONTRACT",
    "TOO_MANY_CONTRACTS",
    "TOO_MANY_GROUPS",
    "TOO_MANY_SUBSCRIPTIONS",
    "UNAUTHENTICATED",
];

/// Whether `code` is one of the server's stable codes (not the client's own).
pub(crate) fn is_server_code(code: &str) -> bool {
    SERVER_CODES.contains(&code)
}

fn kind_of(code: &str, details: &Map<String, Value>) -> ErrorKind {
    match code {
        "UNAUTHENTICATED" | "IDENTITY_UNAVAILABLE" => return ErrorKind::Unauthenticated,
        "CONTRACT_REQUIRED"
        | "CONTRACT_NOT_FOUND"
        | "CONTRACT_EXPIRED"
        | "CONTRACT_PRINCIPAL_MISMATCH"
        | "CONTRACT_STALE"
        | "CONTRACT_REVOKED"
        | "SUBJECT_NOT_IN_CONTRACT"
        | "OPERATION_NOT_IN_CONTRACT"
        | "GRANT_REVOKED"
        | "NO_PERMITTED_SUBJECTS"
        | "TOO_MANY_CONTRACTS" => return ErrorKind::Contract,
        _ => {}
    }
    let outcome = details.get("decision").and_then(|d| d.get("outcome")).and_then(Value::as_str);
    if details.contains_key("quarantineId") || outcome == Some("quarantine") {
        return ErrorKind::Quarantined;
    }
    if details.contains_key("decision") {
        return ErrorKind::Denied;
    }
    match code {
        "SUBJECT_NOT_FOUND"
        | "MESSAGE_NOT_FOUND"
        | "QUARANTINE_NOT_FOUND"
        | "NOT_FOUND"
        | "PROGRAM_NOT_FOUND"
        | "PROGRAM_VERSION_PRUNED" => ErrorKind::NotFound,
        "BAD_REQUEST" | "ENVELOPE_INVALID" | "SELECTOR_INVALID" | "FILTER_INVALID" | "POLICY_INVALID" | "PAYLOAD_TOO_LARGE"
        | "INVALID_ARGUMENT" | "METHOD_NOT_ALLOWED" | "CONFLICT" | "DUPLICATE_KEY" | "INVALID_UTF8" | "MESSAGE_ID_TAKEN"
        | "PROGRAM_INVALID" => ErrorKind::Invalid,
        "REQUEST_TIMEOUT" => ErrorKind::Timeout,
        "SHUTTING_DOWN" | "SESSION_CLOSED" | "TLS_FAILED" => ErrorKind::Transport,
        "STORE_CORRUPT"
        | "AUDIT_TAMPERED"
        | "STORE_UNAVAILABLE"
        | "STORE_FULL"
        | "STORE_NO_QUORUM"
        | "CLUSTER_UNCONFIRMED"
        | "INTERNAL"
        | "PROGRAM_TRAPPED"
        | "PROGRAM_TIMEOUT"
        | "PROGRAM_LIMIT_EXCEEDED" => ErrorKind::Server,
        "DELIVERY_EXHAUSTED" => ErrorKind::Quarantined,
        "DELIVERIES_DROPPED" => ErrorKind::Dropped,
        "RECEIPTS_TRUNCATED" => ErrorKind::Truncated,
        _ => ErrorKind::Denied,
    }
}

/// The HTTP status the server gives a code (as `internal/wire` maps it;
/// tests/codes.rs holds it to clients/conformance/codes.json), 500 for a
/// code not listed.
pub fn http_status(code: &str) -> u16 {
    match code {
        "" => 200,
        "UNAUTHENTICATED" => 401,
        "FORBIDDEN"
        | "POLICY_DENIED"
        | "REPLAY_DENIED"
        | "REGION_DENIED"
        | "INTENT_DENIED"
        | "CONTRACT_REQUIRED"
        | "CONTRACT_NOT_FOUND"
        | "CONTRACT_EXPIRED"
        | "CONTRACT_PRINCIPAL_MISMATCH"
        | "CONTRACT_STALE"
        | "CONTRACT_REVOKED"
        | "SUBJECT_NOT_IN_CONTRACT"
        | "OPERATION_NOT_IN_CONTRACT"
        | "NO_PERMITTED_SUBJECTS"
        | "ACK_NOT_ALLOWED"
        | "GRANT_REVOKED" => 403,
        "RATE_LIMITED" | "TOO_MANY_CONTRACTS" | "TOO_MANY_SUBSCRIPTIONS" | "TOO_MANY_GROUPS" => 429,
        "SENSITIVE_FIELD_DENIED"
        | "RAW_PAN_DETECTED"
        | "IDEMPOTENCY_REQUIRED"
        | "CLASSIFICATION_DENIED"
        | "ENVELOPE_INVALID"
        | "SCHEMA_INVALID"
        | "DATA_QUALITY_FAILED"
        | "SIGNATURE_REQUIRED"
        | "SIGNATURE_INVALID"
        | "ENCRYPTION_REQUIRED"
        | "DELIVERY_EXHAUSTED"
        | "PROGRAM_INVALID"
        | "PROGRAM_LIMIT_EXCEEDED"
        | "HOPS_EXCEEDED" => 422,
        "SUBJECT_NOT_FOUND" | "MESSAGE_NOT_FOUND" | "QUARANTINE_NOT_FOUND" | "NOT_FOUND" | "PROGRAM_NOT_FOUND" => 404,
        "BAD_REQUEST" | "SELECTOR_INVALID" | "FILTER_INVALID" | "POLICY_INVALID" | "INVALID_ARGUMENT" | "DUPLICATE_KEY"
        | "INVALID_UTF8" => 400,
        // RECEIPTS_TRUNCATED, the client's own: more than a call gathers,
        // as PAYLOAD_TOO_LARGE is the other clients' answer longer than
        // they read.
        "PAYLOAD_TOO_LARGE" | "RECEIPTS_TRUNCATED" => 413,
        "METHOD_NOT_ALLOWED" => 405,
        "CONFLICT" | "MESSAGE_ID_TAKEN" => 409,
        "PROGRAM_VERSION_PRUNED" => 410,
        "REQUEST_TIMEOUT" | "PROGRAM_TIMEOUT" => 504,
        "SHUTTING_DOWN" | "SESSION_CLOSED" | "STORE_UNAVAILABLE" | "STORE_NO_QUORUM" | "CLUSTER_UNCONFIRMED" | "IDENTITY_UNAVAILABLE" => {
            503
        }
        "STORE_FULL" => 507,
        // INTERNAL, STORE_CORRUPT, AUDIT_TAMPERED, PROGRAM_TRAPPED
        _ => 500,
    }
}

/// The result of every fallible call of the client.
pub type Result<T, E = Error> = std::result::Result<T, E>;
