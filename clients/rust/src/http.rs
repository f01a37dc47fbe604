//! The few HTTP calls a WebSocket client needs beside its session: the
//! published keys of an account (fetched and cached), publishing one's own
//! keys, revoking a contract, settling received messages (ack and nack),
//! and a plain JSON call for the rest (accounts, roles, grants). A minimal
//! HTTP/1.1 client on tokio (the response head is parsed by `httparse`, TLS
//! is the session's rustls), so no HTTP stack is pulled in.

use crate::conn::parse_frame;
use crate::crypto::PublicKey;
use crate::error::{Error, Result};
use crate::message::Message;
use crate::tls::{self, Target, TlsConfig};
use serde_json::{json, Value};
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
fn segment(s: &str) -> Result<String> {
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

/// Whether `method` and `path` can go in a request line as they are: a
/// method of token characters, a path that starts with `/` and holds only
/// visible ASCII (percent-encode the rest, see [`encode_segment`]). A
/// space, CR or LF would add to the request line, a header or a request.
fn request_line_ok(method: &str, path: &str) -> bool {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    !method.is_empty() && method.bytes().all(token) && path.starts_with('/') && path.bytes().all(|b| b.is_ascii_graphic())
}

/// A bearer-token HTTP client of one server, `http://` or `https://`
/// (the same scope as the WebSocket transport; TLS as
/// [`with_tls`](HttpClient::with_tls) says). Each call is one HTTP/1.1
/// request on its own connection. Cheap to clone.
#[derive(Clone)]
pub struct HttpClient {
    target: Result<Target>,
    token: String,
    timeout: Duration,
    tls: Option<TlsConfig>,
    contract: Option<String>,
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
        }
    }

    /// The contract the calls that act under one ([`ack`](HttpClient::ack),
    /// [`nack`](HttpClient::nack) and their `_sequence` forms) name in
    /// `x-pigeon-contract`: one this token's principal negotiated, over
    /// WebSocket (`session.contract().id`) or `POST /v1/contracts`.
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
        self.call_under(method, path, body, None).await
    }

    /// [`call`](HttpClient::call), naming `contract` in `x-pigeon-contract`
    /// when given (visible ASCII only, else `INVALID_ARGUMENT` and nothing
    /// sent: a CR or LF would add a header).
    async fn call_under(&self, method: &str, path: &str, body: Option<Value>, contract: Option<&str>) -> Result<(u16, Value)> {
        if contract.is_some_and(|c| c.is_empty() || !c.bytes().all(|b| b.is_ascii_graphic())) {
            return Err(Error::new("INVALID_ARGUMENT", "a contract id is visible ASCII"));
        }
        if !request_line_ok(method, path) {
            return Err(Error::new(
                "INVALID_ARGUMENT",
                format!("{method:?} {path:?} is not a request line: a method token and a path of visible ASCII from /"),
            ));
        }
        let target = self.target.as_ref().map_err(Clone::clone)?;
        let (status, text) = tokio::time::timeout(self.timeout, self.round_trip(target, method, path, body, contract))
            .await
            .map_err(|_| Error::transport("REQUEST_TIMEOUT", format!("{method} {path}: no answer in time")))??;
        if (200..300).contains(&status) {
            // A body that is not JSON (a proxy's page) is no answer of the
            // server's: not read as an empty one (no keys, no fields).
            if text.iter().all(u8::is_ascii_whitespace) {
                return Ok((status, Value::Null));
            }
            // Strict as a frame is: an object with two members of one name
            // (at any depth) is refused, not read as the last of them.
            let v = parse_frame(&text)
                .map_err(|e| Error::protocol(format!("{method} {path}: HTTP {status} with a body that is not JSON ({e})")))?;
            return Ok((status, v));
        }
        let v: Value = match parse_frame(&text) {
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

    async fn round_trip(
        &self,
        target: &Target,
        method: &str,
        path: &str,
        body: Option<Value>,
        contract: Option<&str>,
    ) -> Result<(u16, Vec<u8>)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let body = body.map(|b| serde_json::to_vec(&b).expect("a JSON body encodes")).unwrap_or_default();
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", target.authority);
        if !self.token.is_empty() {
            req.push_str(&format!("Authorization: Bearer {}\r\n", self.token));
        }
        if let Some(c) = contract {
            req.push_str(&format!("X-Pigeon-Contract: {c}\r\n"));
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
        parse_response(&raw).ok_or_else(|| Error::protocol(format!("{method} {path}: an HTTP answer that does not parse")))
    }

    /// The published keys of `account` (`GET /v1/accounts/{id}/keys`).
    pub async fn fetch_keys(&self, account: &str) -> Result<Vec<PublicKey>> {
        let (_, v) = self.call("GET", &format!("/v1/accounts/{}/keys", segment(account)?), None).await?;
        serde_json::from_value(v.get("keys").cloned().unwrap_or(Value::Array(vec![]))).map_err(|e| Error::protocol(format!("keys: {e}")))
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
        self.settle("ack", subject, message_id, seq, None).await
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
        self.settle("nack", subject, message_id, seq, delay).await
    }

    async fn settle(&self, op: &str, subject: &str, message_id: &str, seq: u64, delay: Option<Duration>) -> Result<()> {
        let Some(contract) = self.contract.as_deref() else {
            return Err(Error::new("CONTRACT_REQUIRED", format!("an HTTP {op} acts under a contract: with_contract first")));
        };
        let mut body = json!({ "messageId": message_id });
        if seq > 0 {
            body["sequence"] = json!(seq);
        }
        if let Some(d) = delay {
            body["delayMs"] = json!(crate::time::retry_delay_ms(d));
        }
        let path = format!("/v1/subjects/{}/{op}", segment(subject)?);
        self.call_under("POST", &path, Some(body), Some(contract)).await.map(|_| ())
    }

    /// Revokes a contract (its holder only): `DELETE /v1/contracts/{id}`.
    pub async fn revoke_contract(&self, contract_id: &str) -> Result<()> {
        self.call("DELETE", &format!("/v1/contracts/{}", segment(contract_id)?), None).await.map(|_| ())
    }
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
