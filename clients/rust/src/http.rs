//! The HTTP API (docs/http.md) beside the WebSocket session: health,
//! negotiating, reading and revoking a contract, publishing,
//! request/reply and pulling messages with typed answers, settling them
//! (ack and nack), the published keys of an account (fetched and cached),
//! publishing one's own keys, an auditor's receipts of a message, page by
//! page (see [`HttpClient::receipts`]), and a plain JSON call for the rest
//! (accounts, roles, grants). A minimal HTTP/1.1 client on tokio (the
//! response head is parsed by `httparse`, TLS is the session's rustls), so
//! no HTTP stack is pulled in.
//!
//! The typed calls refuse an answer that is not of their route's shape
//! (`BAD_FRAME`, [`ErrorKind::Protocol`](crate::ErrorKind::Protocol))
//! rather than fill it in with defaults: a missing or ill-typed field, and
//! a message sequence that is not a JSON integer of 1 to 2^64-1 (`1.0`,
//! `-1`, `"7"`, `2^64`, or none: a sequence of 0 names no message to
//! [`HttpClient::ack_sequence`]). A receive refuses such a message alone,
//! the others returned (see [`HttpClient::receive`]).

use crate::conn::{parse_frame, parse_listing, Listing, ListingError};
use crate::crypto::PublicKey;
use crate::error::{Error, Result};
use crate::message::{Contract, Decision, Message};
pub use crate::receipts::{Receipt, ReceiptPages, ReceiptsPage, MAX_ALL_RECEIPTS, MAX_RECEIPTS_PAGE, RECEIPTS_MAX_WAIT, RECEIPTS_RETRIES};
use crate::tls::{self, Target, TlsConfig};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Percent-encodes one path segment (everything but unreserved characters).
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{:02X}", b));
        }
    }
    out
}

/// One path segment of a call, percent-encoded. An empty segment, `.` or
/// `..` is refused (`INVALID_ARGUMENT`): URL parsers and the server's router
/// remove dot segments, so the call would name another route (the
/// TypeScript client's fetch sent `removeRole("..", "admin")` as
/// `DELETE /v1/roles/admin`).
pub(crate) fn segment(s: &str) -> Result<String> {
    if matches!(s, "" | "." | "..") {
        return Err(Error::new("INVALID_ARGUMENT", format!("{s:?} cannot be a path segment")));
    }
    Ok(encode_segment(s))
}

/// The HTTP base (`http://host:port`) of a server URL given as `ws://`,
/// `wss://`, `http://` or `https://`, with or without a path.
pub fn http_base(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let scheme = match scheme {
        "ws" | "http" => "http",
        _ => "https",
    };
    let host = rest.split(['/', '?']).next().unwrap_or(rest);
    format!("{}://{}", scheme, host)
}

/// The largest HTTP answer (head and body) the client reads, 64 MiB: a
/// longer one is refused (`BAD_FRAME`, [`ErrorKind::Protocol`](crate::ErrorKind::Protocol))
/// rather than read into memory for as long as the server sends.
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// The most keys an account publishes (64, `pigeon.MaxAccountKeys` in
/// signature.go; the server loads no more):
/// [`fetch_keys`](HttpClient::fetch_keys) refuses an answer listing more,
/// `BAD_FRAME`, without building the keys past it.
pub const MAX_ACCOUNT_KEYS: usize = 64;

/// Whether `method` and `path` can go in a request line as they are: a
/// method of token characters, a path that starts with `/` and holds only
/// visible ASCII (percent-encode the rest, see [`encode_segment`]). A
/// space, CR or LF would add to the request line, a header or a request.
fn request_line_ok(method: &str, path: &str) -> bool {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    !method.is_empty() && method.bytes().all(token) && path.starts_with('/') && path.bytes().all(|b| b.is_ascii_graphic())
}

/// Whether a contract id can go in `x-pigeon-contract` as it is: not
/// empty, visible ASCII only (a CR or LF would add a header).
fn contract_id_ok(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(|b| b.is_ascii_graphic())
}

/// How long a request/reply waits on the server without a `timeoutMs`
/// (or with 0): 30 s (docs/http.md).
const DEFAULT_REQUEST_WAIT: Duration = Duration::from_secs(30);

/// The most milliseconds a server's duration holds (a Go `time.Duration`,
/// about 292 years): a longer `timeoutMs` is refused `INVALID_ARGUMENT`,
/// so a longer request timeout is sent as this (the server waits no longer
/// than its own bound, 5 minutes by default, either way).
const MAX_WIRE_WAIT_MS: u64 = i64::MAX as u64 / 1_000_000;

/// How long past the server's wait a request/reply call is held for its
/// answer (the reply, or `REQUEST_TIMEOUT` from the server).
const REQUEST_SLACK: Duration = Duration::from_secs(10);

/// How an HTTP receive ([`HttpClient::receive`]) settles what it returns:
/// the body's `"ack"`, on a work-queue or request/reply subject (a pubsub
/// subject moves the caller's cursor either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AckMode {
    /// `"auto"`, the server's default (as the reference broker): the
    /// messages returned are settled before the server answers, and never
    /// delivered again, even when the caller fails to handle them.
    #[default]
    Auto,
    /// `"explicit"`: the messages are leased for the subject's ack wait and
    /// come back unless settled in time with
    /// [`ack_sequence`](HttpClient::ack_sequence) or
    /// [`nack_sequence`](HttpClient::nack_sequence) (at-least-once).
    Explicit,
}

impl AckMode {
    fn wire(self) -> &'static str {
        match self {
            AckMode::Auto => "auto",
            AckMode::Explicit => "explicit",
        }
    }
}

/// The answer of `GET /health`: `{"ok":true,"service":"pigeon"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub ok: bool,
    pub service: String,
}

/// A bearer-token HTTP client of one server, `http://` or `https://`
/// (the same scope as the WebSocket transport; TLS as
/// [`with_tls`](HttpClient::with_tls) says). Each call is one HTTP/1.1
/// request on its own connection. Cheap to clone.
///
/// ```no_run
/// # async fn run() -> pigeon_client::Result<()> {
/// use pigeon_client::http::{AckMode, HttpClient};
/// let mut http = HttpClient::new("http://127.0.0.1:8787", "notifier-token");
/// http.negotiate(&["notifications.send"], None).await?; // the calls below act under it
/// for m in http.receive("notifications.send", 10, AckMode::Explicit).await? {
///     http.ack_sequence("notifications.send", &m.id, m.sequence).await?;
/// }
/// http.revoke().await
/// # }
/// ```
#[derive(Clone)]
pub struct HttpClient {
    target: Result<Target>,
    token: String,
    pub(crate) timeout: Duration,
    tls: Option<TlsConfig>,
    contract: Option<String>,
    region: Option<String>,
    on_error: Option<crate::ErrorCallback>,
    /// The most receipts [`all_receipts`](HttpClient::all_receipts) gathers.
    pub(crate) all_receipts_max: usize,
}

impl HttpClient {
    /// A client of the server at `url` (any of the forms `http_base` takes).
    /// An empty `token` sends no `Authorization` header (mTLS: the client
    /// certificate is the credential).
    pub fn new(url: &str, token: &str) -> HttpClient {
        HttpClient {
            target: Target::parse(&http_base(url)),
            token: token.to_string(),
            timeout: Duration::from_secs(30),
            tls: None,
            contract: None,
            region: None,
            on_error: None,
            all_receipts_max: MAX_ALL_RECEIPTS,
        }
    }

    /// Receives the errors no caller can be handed, as
    /// [`ConnectOptions::on_error`](crate::ConnectOptions::on_error) does
    /// the session's: the `BAD_FRAME` of each message a
    /// [`receive`](HttpClient::receive) leaves out. Default: none.
    pub fn with_on_error(mut self, f: impl Fn(Error) + Send + Sync + 'static) -> HttpClient {
        self.on_error = Some(Arc::new(f));
        self
    }

    /// The region of every call (`x-pigeon-region`), as
    /// [`ConnectOptions::region`](crate::ConnectOptions::region) is the
    /// session's; default: the server's. A contract is negotiated for it,
    /// and a publish or request whose message names no region is given it
    /// (one naming another is refused `REGION_DENIED`). Non-empty visible
    /// ASCII only: any other region fails every call `INVALID_ARGUMENT`,
    /// nothing sent (a CR or LF would add a header).
    pub fn with_region(mut self, region: impl Into<String>) -> HttpClient {
        self.region = Some(region.into());
        self
    }

    /// The contract the calls that act under one ([`publish`](HttpClient::publish),
    /// [`request`](HttpClient::request), [`receive`](HttpClient::receive),
    /// [`ack`](HttpClient::ack), [`nack`](HttpClient::nack) and their
    /// `_sequence` forms, [`revoke`](HttpClient::revoke)) name in
    /// `x-pigeon-contract`: one this token's principal negotiated, over
    /// WebSocket (`session.contract().id`) or `POST /v1/contracts`
    /// ([`negotiate`](HttpClient::negotiate) sets it itself).
    pub fn with_contract(mut self, contract_id: &str) -> HttpClient {
        self.contract = Some(contract_id.to_string());
        self
    }

    /// Bounds each call as a whole (default 30 s): connecting, sending, and
    /// reading the whole answer; a server that answers a byte at a time
    /// cannot hold a call past it (`REQUEST_TIMEOUT`, kind
    /// [`Transport`](crate::ErrorKind::Transport)).
    pub fn with_timeout(mut self, timeout: Duration) -> HttpClient {
        self.timeout = timeout;
        self
    }

    /// The most receipts [`all_receipts`](HttpClient::all_receipts)
    /// gathers before it fails `RECEIPTS_TRUNCATED` (default
    /// [`MAX_ALL_RECEIPTS`], 100,000): each is held until the call returns,
    /// so a bound set past what memory holds lets a server (or a message
    /// delivered without end) fill it. [`receipt_pages`](HttpClient::receipt_pages)
    /// holds one page at a time, whatever the number.
    pub fn with_all_receipts_max(mut self, max: usize) -> HttpClient {
        self.all_receipts_max = max;
        self
    }

    /// How an `https://` server is verified and which client certificate
    /// is presented (mTLS); default: the platform's root certificates, no
    /// client certificate.
    pub fn with_tls(mut self, tls: TlsConfig) -> HttpClient {
        self.tls = Some(tls);
        self
    }

    /// One JSON call: `(status, body)` for a 2xx answer (`Null` when it has
    /// no body), the server's typed error otherwise (a transport error when
    /// the server cannot be reached or does not answer within 30 s;
    /// `TLS_FAILED` when its certificate does not verify, `UNAUTHENTICATED`
    /// when it refuses the TLS handshake without a client certificate or
    /// with this one; `BAD_FRAME` for a 2xx body that is not JSON, a body
    /// holding an object with two members of one name (at any depth), or an
    /// answer beyond [`MAX_RESPONSE_BYTES`]). `path` starts with `/` and is
    /// visible ASCII, and `method` a token (`INVALID_ARGUMENT` otherwise,
    /// nothing sent).
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<(u16, Value)> {
        self.call_under(method, path, body, None, self.timeout).await
    }

    /// [`call`](HttpClient::call) bounded by `timeout`, naming `contract`
    /// in `x-pigeon-contract` when given (visible ASCII only, else
    /// `INVALID_ARGUMENT` and nothing sent: a CR or LF would add a header).
    async fn call_under(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        contract: Option<&str>,
        timeout: Duration,
    ) -> Result<(u16, Value)> {
        self.call_told(method, path, body, contract, timeout, &mut None).await
    }

    /// [`call_under`](HttpClient::call_under), setting `told` to the
    /// `Retry-After` of a 429 answer that names one in seconds (the
    /// answer's header, which its error does not carry).
    pub(crate) async fn call_told(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        contract: Option<&str>,
        timeout: Duration,
        told: &mut Option<Duration>,
    ) -> Result<(u16, Value)> {
        let (status, text) = self.exchange(method, path, body, contract, timeout, told).await?;
        answer_of(method, path, status, &text, None)
    }

    /// `GET path`, a listing, as [`call_told`](HttpClient::call_told)
    /// reads it: a 2xx answer whose member `list.member` is an array of
    /// more than `list.most` entries is refused `BAD_FRAME`, the entries
    /// past the bound not built (see [`parse_listing`]).
    pub(crate) async fn get_listing(&self, path: &str, list: Listing, told: &mut Option<Duration>) -> Result<(u16, Value)> {
        let (status, text) = self.exchange("GET", path, None, None, self.timeout, told).await?;
        answer_of("GET", path, status, &text, Some(list))
    }

    /// One request and its answer's status and body, unread, within
    /// `timeout`; `told` as [`call_told`](HttpClient::call_told) sets it.
    async fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        contract: Option<&str>,
        timeout: Duration,
        told: &mut Option<Duration>,
    ) -> Result<(u16, Vec<u8>)> {
        if contract.is_some_and(|c| !contract_id_ok(c)) {
            return Err(Error::new("INVALID_ARGUMENT", "a contract id is visible ASCII"));
        }
        if self.region.as_deref().is_some_and(|r| !contract_id_ok(r)) {
            return Err(Error::new("INVALID_ARGUMENT", "a region is visible ASCII"));
        }
        if !request_line_ok(method, path) {
            return Err(Error::new(
                "INVALID_ARGUMENT",
                format!("{method:?} {path:?} is not a request line: a method token and a path of visible ASCII from /"),
            ));
        }
        let target = self.target.as_ref().map_err(Clone::clone)?;
        let (status, text, retry_after) = tokio::time::timeout(timeout, self.round_trip(target, method, path, body, contract))
            .await
            .map_err(|_| Error::transport("REQUEST_TIMEOUT", format!("{method} {path}: no answer in time")))??;
        if status == 429 {
            *told = retry_after;
        }
        Ok((status, text))
    }

    async fn round_trip(
        &self,
        target: &Target,
        method: &str,
        path: &str,
        body: Option<Value>,
        contract: Option<&str>,
    ) -> Result<(u16, Vec<u8>, Option<Duration>)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let body = body.map(|b| serde_json::to_vec(&b).expect("a JSON body encodes")).unwrap_or_default();
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", target.authority);
        if !self.token.is_empty() {
            req.push_str(&format!("Authorization: Bearer {}\r\n", self.token));
        }
        if let Some(c) = contract {
            req.push_str(&format!("X-Pigeon-Contract: {c}\r\n"));
        }
        if let Some(r) = &self.region {
            req.push_str(&format!("X-Pigeon-Region: {r}\r\n"));
        }
        req.push_str(&format!("Accept: application/json\r\nConnection: close\r\nContent-Length: {}\r\n", body.len()));
        if !body.is_empty() {
            req.push_str("Content-Type: application/json\r\n");
        }
        req.push_str("\r\n");
        let (mut conn, ctx) = tls::connect(target, self.tls.as_ref()).await?;
        // A TLS failure (the server's alert: with TLS 1.3 a refused client
        // certificate shows at the first read) is typed; the rest is a
        // lost connection.
        let lost = |e: std::io::Error| {
            let ctx = ctx.as_ref();
            ctx.and_then(|_| tls::tls_error(&e, ctx)).unwrap_or_else(|| Error::transport("SESSION_CLOSED", format!("{method} {path}: {e}")))
        };
        conn.write_all(req.as_bytes()).await.map_err(lost)?;
        conn.write_all(&body).await.map_err(lost)?;
        conn.flush().await.map_err(lost)?;
        let mut raw = Vec::with_capacity(4096);
        // One byte past the bound tells an answer too long from one of it.
        let read = (&mut conn).take(MAX_RESPONSE_BYTES as u64 + 1).read_to_end(&mut raw).await;
        if raw.len() > MAX_RESPONSE_BYTES {
            return Err(Error::protocol(format!("{method} {path}: an HTTP answer longer than {} MiB", MAX_RESPONSE_BYTES >> 20)));
        }
        match read {
            Ok(_) => {}
            // A TLS server that closes without close_notify: the answer
            // still has to parse whole (Content-Length or chunked).
            Err(e) if ctx.is_some() && e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
            Err(e) => return Err(lost(e)),
        }
        let (status, body) =
            parse_response(&raw).ok_or_else(|| Error::protocol(format!("{method} {path}: an HTTP answer that does not parse")))?;
        Ok((status, body, retry_after(&raw)))
    }

    /// The published keys of `account` (`GET /v1/accounts/{id}/keys`),
    /// read as every client reads them (docs/protocol.md, "Published
    /// keys"). The answer is the object the server sends, `{"keys":[…]}`
    /// (`[]` for an account without keys, or no account): any other
    /// answer (`keys` null, absent or not a list; a bare list, a number,
    /// null; an empty body) is refused, `BAD_FRAME`, not read as no keys;
    /// so is a list of more than [`MAX_ACCOUNT_KEYS`] entries (the entries
    /// past it not built). The list is read entry by entry: an entry that
    /// is no key as the server lists one (not an object; a `kid`, `use`,
    /// `alg` or `key` absent or not a string; a key that is not
    /// [`sound`](PublicKey::is_sound)) is left out, and costs the caller
    /// none of the other keys, as in the TypeScript and Python clients.
    pub async fn fetch_keys(&self, account: &str) -> Result<Vec<PublicKey>> {
        let list = Listing { member: "keys", most: MAX_ACCOUNT_KEYS };
        let path = format!("/v1/accounts/{}/keys", segment(account)?);
        let (_, v) = self.get_listing(&path, list, &mut None).await?;
        match v {
            Value::Object(mut o) => match o.remove("keys") {
                Some(Value::Array(entries)) => Ok(read_keys(entries)),
                Some(_) => Err(malformed("GET", &path, "keys that is not a list".into())),
                None => Err(malformed("GET", &path, "no \"keys\"".into())),
            },
            _ => Err(malformed("GET", &path, "a value that is not a JSON object".into())),
        }
    }

    /// Publishes `keys` for `account` (`PUT /v1/accounts/{id}/keys`; the
    /// account itself or an admin).
    pub async fn publish_keys(&self, account: &str, keys: &[PublicKey]) -> Result<()> {
        self.call("PUT", &format!("/v1/accounts/{}/keys", segment(account)?), Some(json!({ "keys": keys }))).await?;
        Ok(())
    }

    /// Creates an account (admin); an account that exists already is not an error.
    pub async fn ensure_account(&self, account: &str) -> Result<()> {
        match self.call("POST", "/v1/accounts", Some(json!({ "id": account }))).await {
            Err(e) if e.code == "CONFLICT" => Ok(()),
            r => r.map(|_| ()),
        }
    }

    /// Acknowledges a message taken with an explicit receive
    /// (`POST /v1/subjects/{name}/ack`, under the contract of
    /// [`with_contract`](HttpClient::with_contract)), whichever message
    /// holds the id now; [`ack_sequence`](HttpClient::ack_sequence) names
    /// the one received. `CONTRACT_REQUIRED` without a contract, nothing
    /// sent; the server's refusals as typed errors with their status
    /// (`MESSAGE_NOT_FOUND` 404, `ACK_NOT_ALLOWED` 403, …).
    pub async fn ack(&self, subject: &str, message_id: &str) -> Result<()> {
        self.ack_sequence(subject, message_id, 0).await
    }

    /// Acknowledges the message `message_id` received at sequence `seq`
    /// (its [`Message::sequence`](crate::Message::sequence); 0 names none,
    /// as [`ack`](HttpClient::ack)), as `Session::ack_sequence` does over
    /// WebSocket: once retention trims a message a newer one may be
    /// published under its id, and a late ack naming the sequence never
    /// settles it (`ACK_NOT_ALLOWED`).
    pub async fn ack_sequence(&self, subject: &str, message_id: &str, seq: u64) -> Result<()> {
        self.settle("ack", subject, message_id, seq, 0, None).await
    }

    /// Acknowledges the message `message_id` received at sequence `seq`
    /// under the lease attempt `attempt` that
    /// [`receive_attempts`](HttpClient::receive_attempts) gave it (0 names
    /// none, as [`ack_sequence`](HttpClient::ack_sequence)), as
    /// `Session::ack_attempt` does over WebSocket: once that lease ran out
    /// and the message was leased again, to any worker of the principal,
    /// the server refuses it (`ACK_NOT_ALLOWED`, 403) and settles nothing.
    /// An attempt beyond [`MAX_ATTEMPT`](crate::MAX_ATTEMPT) (2^31-1) is
    /// no lease's: `INVALID_ARGUMENT`, nothing sent.
    pub async fn ack_attempt(&self, subject: &str, message_id: &str, seq: u64, attempt: u32) -> Result<()> {
        self.settle("ack", subject, message_id, seq, attempt, None).await
    }

    /// Gives a message taken with an explicit receive back
    /// (`POST /v1/subjects/{name}/nack`), due again after `delay` (default:
    /// the subject's backoff; a longer one than 12 hours, the most the
    /// server takes, is shortened to it), whichever message holds the id now;
    /// [`nack_sequence`](HttpClient::nack_sequence) names the one received.
    pub async fn nack(&self, subject: &str, message_id: &str, delay: Option<Duration>) -> Result<()> {
        self.nack_sequence(subject, message_id, 0, delay).await
    }

    /// Gives the message `message_id` received at sequence `seq` back (see
    /// [`ack_sequence`](HttpClient::ack_sequence)): a late nack never hands
    /// out a newer message published under the id.
    pub async fn nack_sequence(&self, subject: &str, message_id: &str, seq: u64, delay: Option<Duration>) -> Result<()> {
        self.settle("nack", subject, message_id, seq, 0, delay).await
    }

    /// Gives the message `message_id` received at sequence `seq` under
    /// the lease attempt `attempt` back (see
    /// [`ack_attempt`](HttpClient::ack_attempt); 0 names none): a late
    /// nack of an older attempt is refused (`ACK_NOT_ALLOWED`) and does not
    /// hand the message out again while another worker runs it.
    pub async fn nack_attempt(&self, subject: &str, message_id: &str, seq: u64, attempt: u32, delay: Option<Duration>) -> Result<()> {
        self.settle("nack", subject, message_id, seq, attempt, delay).await
    }

    async fn settle(&self, op: &str, subject: &str, message_id: &str, seq: u64, attempt: u32, delay: Option<Duration>) -> Result<()> {
        let attempt = crate::message::sent_attempt(attempt)?;
        let contract = self.held(op)?;
        let mut body = json!({ "messageId": message_id });
        if seq > 0 {
            body["sequence"] = json!(seq);
        }
        if attempt > 0 {
            body["attempt"] = json!(attempt);
        }
        if let Some(d) = delay {
            body["delayMs"] = json!(crate::time::retry_delay_ms(d));
        }
        let path = format!("/v1/subjects/{}/{op}", segment(subject)?);
        self.call_under("POST", &path, Some(body), Some(contract), self.timeout).await.map(|_| ())
    }

    /// Revokes a contract (its holder only): `DELETE /v1/contracts/{id}`.
    /// Every later use of it fails `CONTRACT_REVOKED`. Done only when the
    /// server says so (`{"id": contract_id, "revoked": true}`); any other
    /// 2xx answer (a proxy's empty page) is `BAD_FRAME`, not a revocation.
    pub async fn revoke_contract(&self, contract_id: &str) -> Result<()> {
        let path = format!("/v1/contracts/{}", segment(contract_id)?);
        let (_, v) = self.call("DELETE", &path, None).await?;
        let answer = || -> std::result::Result<(), String> {
            match (member(&v, "id")?, member(&v, "revoked")?) {
                (Value::String(id), Value::Bool(true)) if id == contract_id => Ok(()),
                (Value::String(_), Value::Bool(true)) => Err("the revocation of another contract".into()),
                _ => Err("no revocation (an id and \"revoked\": true)".into()),
            }
        };
        answer().map_err(|e| malformed("DELETE", &path, e))
    }

    /// The contract the calls that act under one name: the one of
    /// [`negotiate`](HttpClient::negotiate) or
    /// [`with_contract`](HttpClient::with_contract).
    pub fn contract_id(&self) -> Option<&str> {
        self.contract.as_deref()
    }

    /// The contract the calls that act under one name, or
    /// `CONTRACT_REQUIRED` (nothing sent) for `what`.
    fn held(&self, what: &str) -> Result<&str> {
        self.contract.as_deref().ok_or_else(|| {
            Error::new("CONTRACT_REQUIRED", format!("an HTTP {what} acts under a contract: negotiate or with_contract first"))
        })
    }

    /// `GET /health`: whether the server answers. `BAD_FRAME` for an
    /// answer without a boolean `ok` and a string `service`.
    pub async fn health(&self) -> Result<Health> {
        let (_, v) = self.call("GET", "/health", None).await?;
        let health = || -> std::result::Result<Health, String> {
            let ok = member(&v, "ok")?.as_bool().ok_or("an ok that is not a boolean")?;
            let service = member(&v, "service")?.as_str().ok_or("a service that is not a string")?.to_string();
            Ok(Health { ok, service })
        };
        health().map_err(|e| malformed("GET", "/health", e))
    }

    /// Negotiates a contract on `subjects` for this token's principal in
    /// the server's region (`POST /v1/contracts`), for `ttl` (`None`: the
    /// server's default, 15 minutes; sent in whole milliseconds, rounded
    /// up, so that no `ttl` but zero asks for the default; beyond the
    /// server's maximum, 24 hours by default, `INVALID_ARGUMENT`, never
    /// shortened). The client then acts under it, as after
    /// [`with_contract`](HttpClient::with_contract); a refusal
    /// (`NO_PERMITTED_SUBJECTS`, `SUBJECT_NOT_FOUND`, …) leaves the
    /// contract it held. `BAD_FRAME` for an answer without a contract of
    /// an id (visible ASCII), subjects and an expiry.
    #[doc(alias = "connect")]
    pub async fn negotiate(&mut self, subjects: &[&str], ttl: Option<Duration>) -> Result<Contract> {
        let mut body = json!({ "subjects": subjects });
        if let Some(t) = ttl {
            body["ttlMs"] = json!(ceil_ms(t));
        }
        let (_, v) = self.call("POST", "/v1/contracts", Some(body)).await?;
        let k = contract_of(&v).map_err(|e| malformed("POST", "/v1/contracts", e))?;
        self.contract = Some(k.id.clone());
        Ok(k)
    }

    /// Reads a contract this token holds (`GET /v1/contracts/{id}`):
    /// `CONTRACT_NOT_FOUND`, `CONTRACT_PRINCIPAL_MISMATCH` (403) otherwise.
    pub async fn get_contract(&self, contract_id: &str) -> Result<Contract> {
        let path = format!("/v1/contracts/{}", segment(contract_id)?);
        let (_, v) = self.call("GET", &path, None).await?;
        contract_of(&v).map_err(|e| malformed("GET", &path, e))
    }

    /// Revokes the contract the client acts under (see
    /// [`revoke_contract`](HttpClient::revoke_contract)); the client still
    /// names it, and the calls under it then fail `CONTRACT_REVOKED`.
    /// `CONTRACT_REQUIRED` without one, nothing sent.
    pub async fn revoke(&self) -> Result<()> {
        let id = self.held("revoke")?.to_string();
        self.revoke_contract(&id).await
    }

    /// Publishes `m` under the contract (`POST /v1/messages`, through every
    /// gate): the decision, `accepted` (202) or `duplicate` (200, the
    /// original message), with the message's id and its sequence exactly.
    /// A refusal is the gate's typed error with its status (`details.gate`,
    /// `details.decision`, `details.quarantineId` when quarantined):
    /// `SUBJECT_NOT_IN_CONTRACT` 403, `SENSITIVE_FIELD_DENIED` 422, ….
    /// `CONTRACT_REQUIRED` without a contract, nothing sent; `BAD_FRAME`,
    /// saying that the message may have been accepted, for an answer that
    /// does not read as Go reads a decision (a member of another type, a
    /// `sequence` or `hops` spelled `-0` or `5.0`, a status no broker
    /// answers with: see the module's documentation) or whose message has
    /// no id or no sequence: the broker judged the message and may have
    /// stored it, so it is not to be published again without an
    /// idempotency key.
    pub async fn publish(&self, m: &Message) -> Result<Decision> {
        let contract = self.held("publish")?;
        let body = serde_json::to_value(m).map_err(|e| Error::new("ENVELOPE_INVALID", e.to_string()))?;
        let (_, v) = self.call_under("POST", "/v1/messages", Some(body), Some(contract), self.timeout).await?;
        decision_of(&v)
    }

    /// Publishes `m` as a request on a request/reply subject and waits for
    /// the reply (`POST /v1/requests`): the message a responder published
    /// with `correlationId` the request's id. The server waits `timeout`
    /// (whole milliseconds rounded up; zero: its default, 30 s; at most its
    /// bound, 5 minutes by default) and then answers `REQUEST_TIMEOUT` (504,
    /// kind [`Timeout`](crate::ErrorKind::Timeout); the request stays in
    /// the log); the call is bounded by that wait and 10 s more, or the
    /// client's timeout when longer. The request's refusal is that of
    /// [`publish`](HttpClient::publish). `CONTRACT_REQUIRED` without a
    /// contract, nothing sent; `BAD_FRAME` for an answer whose status is
    /// not `replied` or without a message, a reply whose `sequence` is 0
    /// (no broker's; a reply has none), and for a reply to another
    /// request: one without a `correlationId`, or naming another id than
    /// the request's (a request without an id, a signature or an
    /// idempotency key is sent with one drawn here, so that it can be
    /// checked; with an idempotency key the request may repeat an earlier
    /// one of another id, whose reply is then taken).
    pub async fn request(&self, m: &Message, timeout: Duration) -> Result<Message> {
        let contract = self.held("request")?;
        let ms = ceil_ms(timeout).min(MAX_WIRE_WAIT_MS);
        let req = crate::message::request_of(m);
        let body = json!({ "message": &*req, "timeoutMs": ms });
        let wait = if ms == 0 { DEFAULT_REQUEST_WAIT } else { timeout };
        let bound = self.timeout.max(wait.saturating_add(REQUEST_SLACK));
        let (_, v) = self.call_under("POST", "/v1/requests", Some(body), Some(contract), bound).await?;
        let reply = reply_of(&v).map_err(|e| malformed("POST", "/v1/requests", e))?;
        crate::message::check_reply(&req, &reply).map_err(|e| malformed("POST", "/v1/requests", e))?;
        Ok(reply)
    }

    /// Pulls up to `max` messages of `subject` (`POST
    /// /v1/subjects/{name}/receive`; 0: the server's default and cap,
    /// 1000), settled as `ack` says: with [`AckMode::Explicit`] each is
    /// leased until settled with
    /// [`ack_sequence`](HttpClient::ack_sequence)`(subject, &m.id,
    /// m.sequence)`. Every message returned has its id and its sequence
    /// exactly. `CONTRACT_REQUIRED` without a contract, nothing sent;
    /// `BAD_FRAME` for an answer without a `messages` array. A message in
    /// it without an id or a sequence (see the module's documentation), or
    /// an entry that is no message object, is refused alone: left out,
    /// never answered (its lease's ack wait gives it back), its `BAD_FRAME`
    /// handed to [`with_on_error`](HttpClient::with_on_error)'s callback;
    /// the others are returned, as the session's receive does.
    pub async fn receive(&self, subject: &str, max: u32, ack: AckMode) -> Result<Vec<Message>> {
        Ok(self.receive_attempts(subject, max, ack).await?.into_iter().map(|(m, _)| m).collect())
    }

    /// Sends a receive; its path and the answer.
    async fn pull(&self, subject: &str, max: u32, ack: AckMode) -> Result<(String, Value)> {
        let contract = self.held("receive")?;
        let path = format!("/v1/subjects/{}/receive", segment(subject)?);
        let mut body = json!({ "ack": ack.wire() });
        if max > 0 {
            body["max"] = json!(max);
        }
        let (_, v) = self.call_under("POST", &path, Some(body), Some(contract), self.timeout).await?;
        Ok((path, v))
    }

    /// [`receive`](HttpClient::receive) that also returns, with each
    /// message, the attempt of its lease (1 for its first delivery), which
    /// an explicit receive answers (`attempts`): send it back with
    /// [`ack_attempt`](HttpClient::ack_attempt) or
    /// [`nack_attempt`](HttpClient::nack_attempt). A lease is held by the
    /// principal: once the one received runs out, another worker of the
    /// principal may lease the message again, and an answer naming the
    /// older attempt is then refused instead of settling that worker's
    /// lease. 0 when nothing is leased ([`AckMode::Auto`], a pubsub
    /// subject) or the server does not tell it. `BAD_FRAME` as `receive`,
    /// and for `attempts` that are not an array of one per message (never
    /// matched to the messages otherwise); a message whose attempt is not
    /// an integer of 1 to 2^31-1 ([`MAX_ATTEMPT`](crate::MAX_ATTEMPT)) is
    /// refused alone, as `receive` refuses a message it cannot take.
    pub async fn receive_attempts(&self, subject: &str, max: u32, ack: AckMode) -> Result<Vec<(Message, u32)>> {
        let (path, v) = self.pull(subject, max, ack).await?;
        let ms = messages_of(&v).map_err(|e| malformed("POST", &path, e))?;
        let attempts = crate::message::attempts_of(&v, ms.len()).map_err(|e| malformed("POST", &path, e))?;
        let report = |e: Error| {
            if let Some(cb) = &self.on_error {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cb(e)));
            }
        };
        Ok(crate::message::pulled("receive", &format!("POST {path}"), ms, attempts, stored_message, report))
    }
}

/// A nonzero duration in whole milliseconds, rounded up (a fraction of a
/// millisecond is not 0, which the server reads as its default).
fn ceil_ms(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).map_or(i64::MAX as u64, |ms| ms.min(i64::MAX as u64))
}

/// The JSON of the answer of `method` `path` with `status` and body `text`
/// (`Null` for a 2xx answer without one), or the server's error of any
/// other status; with `list`, a 2xx answer listing more than `list.most`
/// entries in `list.member` is refused `BAD_FRAME` (see [`parse_listing`]).
fn answer_of(method: &str, path: &str, status: u16, text: &[u8], list: Option<Listing>) -> Result<(u16, Value)> {
    if (200..300).contains(&status) {
        // A body that is not JSON (a proxy's page) is no answer of the
        // server's: not read as an empty one (no keys, no fields).
        if text.iter().all(u8::is_ascii_whitespace) {
            return Ok((status, Value::Null));
        }
        // Strict as a frame is: an object with two members of one name
        // (at any depth) is refused, not read as the last of them.
        let not_json = |e: serde_json::Error| Error::protocol(format!("{method} {path}: HTTP {status} with a body that is not JSON ({e})"));
        let v = match list {
            None => parse_frame(text).map_err(not_json)?,
            Some(list) => parse_listing(text, list).map_err(|e| match e {
                ListingError::Json(e) => not_json(e),
                ListingError::Longer => malformed(
                    method,
                    path,
                    format!("more than {} entries in {}, more than the server sends in one answer", list.most, list.member),
                ),
            })?,
        };
        return Ok((status, v));
    }
    let v: Value = match parse_frame(text) {
        Ok(v) => v,
        // JSON, but with a duplicate key: neither of the two is the
        // server's error.
        Err(e) if e.is_data() => {
            let mut e = Error::protocol(format!("{method} {path}: HTTP {status} with an ambiguous body ({e})"));
            e.status = status;
            return Err(e);
        }
        Err(_) => Value::Null,
    };
    let mut e = match v.get("error") {
        Some(err) => Error::from_wire(err),
        None => Error::new("INTERNAL", format!("{method} {path}: HTTP {status}")),
    };
    e.status = status;
    Err(e)
}

/// The `BAD_FRAME` error of a 2xx answer of `method` `path` that is not of
/// its route's shape.
pub(crate) fn malformed(method: &str, path: &str, why: String) -> Error {
    Error::protocol(format!("{method} {path}: an answer with {why}"))
}

/// The member `name` of the answer `v`, which must be an object.
pub(crate) fn member<'a>(v: &'a Value, name: &str) -> std::result::Result<&'a Value, String> {
    let o: &Map<String, Value> = v.as_object().ok_or("a value that is not a JSON object")?;
    o.get(name).ok_or_else(|| format!("no {name:?}"))
}

/// A message the broker holds: an object with a non-empty string `id` and
/// a `sequence` that is a JSON integer of 1 to 2^64-1, its other fields of
/// the envelope's types.
fn stored_message(v: &Value) -> std::result::Result<Message, String> {
    if member(v, "id")?.as_str().is_none_or(str::is_empty) {
        return Err("a message whose id is not a non-empty string".into());
    }
    // as_u64 is None for a float (1.0, 1e2, and integers past 2^64, which
    // serde_json reads as floats) and a negative integer.
    if member(v, "sequence")?.as_u64().is_none_or(|s| s == 0) {
        return Err("a message whose sequence is not an integer of 1 to 2^64-1".into());
    }
    Message::deserialize(v).map_err(|e| format!("a message that does not decode ({e})"))
}

/// The decision of a publish, read as a WebSocket decision is
/// ([`read_decision`](crate::message::read_decision): each member of its
/// type, a known `status`, a message), the message one the broker holds
/// (see [`stored_message`]). One that does not read fails `BAD_FRAME`
/// saying that the message may have been accepted.
fn decision_of(v: &Value) -> Result<Decision> {
    let d = crate::message::read_decision(v, None).map_err(|mut e| {
        if e.code == "BAD_FRAME" {
            e.message = format!("POST /v1/messages: {}", e.message);
        }
        e
    })?;
    if let Err(why) = stored_message(&v["message"]) {
        let mut e = Error::protocol(format!(
            "POST /v1/messages: the server's answer for this message could not be read ({why}): the message may have been accepted"
        ));
        e.details.insert("status".into(), json!(v["status"]));
        return Err(e);
    }
    Ok(d)
}

/// The reply of a request/reply: status `replied` and the reply message.
fn reply_of(v: &Value) -> std::result::Result<Message, String> {
    if member(v, "status")?.as_str() != Some("replied") {
        return Err("a status that is not \"replied\"".into());
    }
    let m = member(v, "message")?;
    if !m.is_object() {
        return Err("a reply that is not an object".into());
    }
    crate::message::handed_over(m, false).map_err(|e| format!("a reply that is {e}"))
}

/// The entries of a receive's `messages` array, each a stored message
/// (see [`stored_message`]) or one left out (see
/// [`crate::message::pulled`]).
fn messages_of(v: &Value) -> std::result::Result<&[Value], String> {
    let Value::Array(a) = member(v, "messages")? else {
        return Err("messages that are not an array".into());
    };
    Ok(a)
}

/// The contract of an answer: an object with an id that can go in
/// `x-pigeon-contract`, a `subjects` array and an `expiresAt` string.
fn contract_of(v: &Value) -> std::result::Result<Contract, String> {
    let c = member(v, "contract")?;
    if !member(c, "id")?.as_str().is_some_and(contract_id_ok) {
        return Err("a contract whose id is not a non-empty string of visible ASCII".into());
    }
    if !member(c, "subjects")?.is_array() {
        return Err("a contract whose subjects are not an array".into());
    }
    if !member(c, "expiresAt")?.is_string() {
        return Err("a contract whose expiresAt is not a string".into());
    }
    Contract::deserialize(c).map_err(|e| format!("a contract that does not decode ({e})"))
}

/// The keys of an account's key list, read entry by entry, as the
/// TypeScript and Python clients read it: an entry is a key when it is an
/// object whose `kid`, `use`, `alg` and `key` are strings and that is
/// [`sound`](PublicKey::is_sound); any other entry (one of them absent,
/// `null` or of another type, the entry not an object, or a key the
/// server never lists) is left out, so that nothing verifies with it and
/// nothing is sealed for it, and the other keys of the list are read as
/// listed. A key whose window does not read is kept, valid at no time
/// (see [`PublicKey`]). Go's client reads no key list: decoding the
/// answer into `[]pigeon.PublicKey` with `encoding/json` would refuse the
/// whole list for one entry of the wrong type (and read an absent or
/// `null` member as the empty string).
fn read_keys(entries: Vec<Value>) -> Vec<PublicKey> {
    entries.into_iter().filter_map(|e| serde_json::from_value(e).ok()).filter(PublicKey::is_sound).collect()
}

type Cached = (Instant, Arc<Vec<PublicKey>>);

/// How old a cached key list may be when [`KeyCache::encryption_key`]
/// picks the key to seal for (10 s, whatever the cache's `ttl`): an account
/// that removes an encryption key from its list (its private half leaked)
/// is sealed for under it by a cache's users for at most this long after
/// the change (and the round trip of a fetch), not for the cache's `ttl`.
/// Verification has its own bound, [`VERIFY_MAX_AGE`].
pub const SEAL_MAX_AGE: Duration = Duration::from_secs(10);

/// How old a cached key list may be when [`KeyCache::verify`] checks a
/// signature with it (10 s, whatever the cache's `ttl`): an account that
/// removes a signing key from its list (its private half leaked) has
/// signatures made with it accepted by a cache's users for at most this
/// long after the change (and the round trip of a fetch), not for the
/// cache's `ttl`. [`KeyCache::keys`] keeps the list for the `ttl`: verify
/// through [`KeyCache::verify`], not with the list `keys` returns.
pub const VERIFY_MAX_AGE: Duration = Duration::from_secs(10);

/// Fetches and caches accounts' published keys for `ttl`. Cheap to clone;
/// safe to share between tasks.
#[derive(Clone)]
pub struct KeyCache {
    http: HttpClient,
    ttl: Duration,
    seal_max_age: Duration,
    verify_max_age: Duration,
    cache: Arc<Mutex<HashMap<String, Cached>>>,
}

impl KeyCache {
    pub fn new(http: HttpClient, ttl: Duration) -> KeyCache {
        KeyCache { http, ttl, seal_max_age: SEAL_MAX_AGE, verify_max_age: VERIFY_MAX_AGE, cache: Arc::default() }
    }

    /// How old a cached list [`encryption_key`](KeyCache::encryption_key)
    /// takes (default [`SEAL_MAX_AGE`]; the cache's `ttl` when shorter).
    pub fn with_seal_max_age(mut self, max_age: Duration) -> KeyCache {
        self.seal_max_age = max_age;
        self
    }

    /// How old a cached list [`verify`](KeyCache::verify) takes (default
    /// [`VERIFY_MAX_AGE`]; the cache's `ttl` when shorter).
    pub fn with_verify_max_age(mut self, max_age: Duration) -> KeyCache {
        self.verify_max_age = max_age;
        self
    }

    /// The keys of `account`, from the cache while younger than the `ttl`.
    /// Not for verifying signatures: a key the account removed stays in the
    /// list returned for the `ttl`; [`verify`](KeyCache::verify) bounds
    /// that.
    pub async fn keys(&self, account: &str) -> Result<Arc<Vec<PublicKey>>> {
        if let Some(k) = self.cached(account, self.ttl) {
            return Ok(k);
        }
        self.fetch(account).await
    }

    /// The key to seal for `account` now: its valid X25519 encryption key
    /// with the latest `notBefore` ([`select_key`](crate::crypto::select_key)
    /// without a kid). Taken from a cached list no older than
    /// [`SEAL_MAX_AGE`] (see [`with_seal_max_age`](KeyCache::with_seal_max_age)),
    /// else the list is read again; so is a cached list in which no key is
    /// valid now (the one cached is past its window). `INVALID_ARGUMENT`
    /// when the list read holds none.
    pub async fn encryption_key(&self, account: &str) -> Result<PublicKey> {
        if let Some(k) = self.cached(account, self.ttl.min(self.seal_max_age)) {
            if let Some(key) = sealing_key(&k, crate::time::now_ms()) {
                return Ok(key);
            }
        }
        let k = self.fetch(account).await?;
        sealing_key(&k, crate::time::now_ms())
            .ok_or_else(|| Error::new("INVALID_ARGUMENT", "the recipient publishes no encryption key valid now"))
    }

    /// Verifies `m`'s signature with `account`'s published keys
    /// ([`verify_message_with_keys`](crate::crypto::verify_message_with_keys):
    /// the key of the signature's kid, use `sig`, valid at the message
    /// time), from a cached list no older than [`VERIFY_MAX_AGE`] (see
    /// [`with_verify_max_age`](KeyCache::with_verify_max_age); and the
    /// `ttl`), else the list is read again first: a signing key the account
    /// removed (leaked) verifies for at most that long after its removal,
    /// not for the `ttl`. A failure does not read the list again (a stream
    /// of bad kids costs at most one fetch per bound): a key published less
    /// than that ago may not verify yet, so publish a new key ahead of its
    /// `notBefore` (docs/security.md, "Rotation"). `SIGNATURE_REQUIRED` or
    /// `SIGNATURE_INVALID` as `verify_message_with_keys`; a failed fetch
    /// gives its error.
    pub async fn verify(&self, account: &str, m: &Message) -> Result<()> {
        let keys = match self.cached(account, self.ttl.min(self.verify_max_age)) {
            Some(k) => k,
            None => self.fetch(account).await?,
        };
        crate::crypto::verify_message_with_keys(m, &keys)
    }

    /// Forgets `account`'s keys (after a rotation, or a failed verification).
    pub fn invalidate(&self, account: &str) {
        self.cache.lock().unwrap().remove(account);
    }

    fn cached(&self, account: &str, max_age: Duration) -> Option<Arc<Vec<PublicKey>>> {
        let cache = self.cache.lock().unwrap();
        let (at, k) = cache.get(account)?;
        (at.elapsed() < max_age).then(|| k.clone())
    }

    async fn fetch(&self, account: &str) -> Result<Arc<Vec<PublicKey>>> {
        let k = Arc::new(self.http.fetch_keys(account).await?);
        self.cache.lock().unwrap().insert(account.to_string(), (Instant::now(), k.clone()));
        Ok(k)
    }
}

/// The key of `keys` to seal for at `t`: the valid `enc` key with the
/// latest `notBefore`, when it is an X25519 key.
fn sealing_key(keys: &[PublicKey], t: i64) -> Option<PublicKey> {
    crate::crypto::select_key(keys, "", "enc", t).filter(|k| k.x25519_key().is_some()).cloned()
}

/// Parses a whole HTTP/1.1 response read to the end of the connection:
/// the status and the body (by Content-Length, chunked, or to the end).
fn parse_response(raw: &[u8]) -> Option<(u16, Vec<u8>)> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    let head = match resp.parse(raw).ok()? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => return None,
    };
    let status = resp.code?;
    let header = |name: &str| resp.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value);
    let rest = &raw[head..];
    if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case(b"chunked")) {
        let mut body = Vec::new();
        let mut at = 0;
        loop {
            let line_end = at + rest.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
            let size_text = std::str::from_utf8(&rest[at..line_end]).ok()?;
            let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
            at = line_end + 2;
            if size == 0 {
                return Some((status, body));
            }
            // A response cut short or a size past the end is refused, never a panic.
            let end = at.checked_add(size)?;
            body.extend_from_slice(rest.get(at..end)?);
            at = end.checked_add(2)?;
        }
    }
    match header("content-length").and_then(|v| std::str::from_utf8(v).ok()?.trim().parse::<usize>().ok()) {
        Some(n) => Some((status, rest.get(..n)?.to_vec())),
        None => Some((status, rest.to_vec())),
    }
}

/// The `Retry-After` of an answer's head when it is delay-seconds (RFC
/// 9110: digits alone); `None` for any other (absent, an HTTP date).
fn retry_after(raw: &[u8]) -> Option<Duration> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    resp.parse(raw).ok()?;
    let v = resp.headers.iter().find(|h| h.name.eq_ignore_ascii_case("retry-after"))?.value;
    let v = std::str::from_utf8(v).ok()?.trim();
    if v.is_empty() || v.len() > 10 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(Duration::from_secs(v.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn responses() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}").unwrap();
        assert_eq!(r, (200, b"{}".to_vec()));
        let r = parse_response(b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4\r\n\":1}\r\n0\r\n\r\n").unwrap();
        assert_eq!(r, (409, br#"{"a":1}"#.to_vec()));
        assert_eq!(encode_segment("spiffe://a/b c"), "spiffe%3A%2F%2Fa%2Fb%20c");
        assert_eq!(http_base("ws://127.0.0.1:9/v1/ws?region=uk"), "http://127.0.0.1:9");
    }

    #[test]
    fn retry_after_is_read_as_delay_seconds_alone() {
        let head = |v: &str| format!("HTTP/1.1 429 Too Many Requests\r\nRetry-After: {v}\r\nContent-Length: 0\r\n\r\n");
        for (v, want) in [("1", Some(1)), ("0", Some(0)), (" 30 ", Some(30)), ("0086400", Some(86_400))] {
            assert_eq!(retry_after(head(v).as_bytes()), want.map(Duration::from_secs), "{v:?}");
        }
        for v in ["", "-1", "1.5", "1e3", "+1", "Fri, 31 Dec 2099 23:59:59 GMT", "99999999999"] {
            assert_eq!(retry_after(head(v).as_bytes()), None, "{v:?}");
        }
        assert_eq!(retry_after(b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\n\r\n"), None);
    }

    #[test]
    fn a_ttl_is_whole_milliseconds_rounded_up() {
        assert_eq!(ceil_ms(Duration::ZERO), 0);
        assert_eq!(ceil_ms(Duration::from_micros(1)), 1, "not 0, the server's default");
        assert_eq!(ceil_ms(Duration::from_millis(1500)), 1500);
        assert_eq!(ceil_ms(Duration::from_micros(1500)), 2);
        assert_eq!(ceil_ms(Duration::MAX), i64::MAX as u64);
    }

    #[test]
    fn truncated_or_hostile_chunked_responses_are_refused_without_a_panic() {
        for raw in [
            // Cut after a chunk's data, before its CRLF.
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}"[..],
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r"[..],
            // A size that overflows the offset.
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n{}\r\n0\r\n\r\n"[..],
            // Cut inside a chunk.
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{}"[..],
        ] {
            assert_eq!(parse_response(raw), None, "{:?}", String::from_utf8_lossy(raw));
        }
    }
}
