//! The few HTTP calls a WebSocket client needs beside its session: the
//! published keys of an account (fetched and cached), publishing one's own
//! keys, revoking a contract, and a plain JSON call for the rest
//! (accounts, roles, grants). Calls are blocking `ureq` requests run on
//! tokio's blocking pool.

use crate::crypto::PublicKey;
use crate::error::{Error, Result};
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

/// A bearer-token HTTP client of one server. Cheap to clone.
#[derive(Clone)]
pub struct HttpClient {
    base: String,
    token: String,
    agent: ureq::Agent,
}

impl HttpClient {
    /// A client of the server at `url` (any of the forms `http_base` takes).
    pub fn new(url: &str, token: &str) -> HttpClient {
        let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(30)).build();
        HttpClient { base: http_base(url), token: token.to_string(), agent }
    }

    /// One JSON call: `(status, body)` for a 2xx answer, the server's typed
    /// error otherwise (a transport error when the server cannot be reached).
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<(u16, Value)> {
        let this = self.clone();
        let method = method.to_string();
        let path = path.to_string();
        tokio::task::spawn_blocking(move || this.call_blocking(&method, &path, body))
            .await
            .map_err(|e| Error::transport("INTERNAL", e.to_string()))?
    }

    fn call_blocking(&self, method: &str, path: &str, body: Option<Value>) -> Result<(u16, Value)> {
        let req = self.agent.request(method, &format!("{}{}", self.base, path)).set("Authorization", &format!("Bearer {}", self.token));
        let res = match body {
            Some(b) => req.send_json(b),
            None => req.call(),
        };
        let read = |r: ureq::Response| -> (u16, Value) {
            let status = r.status();
            let text = r.into_string().unwrap_or_default();
            (status, serde_json::from_str(&text).unwrap_or(Value::Null))
        };
        match res {
            Ok(r) => Ok(read(r)),
            Err(ureq::Error::Status(_, r)) => {
                let (status, v) = read(r);
                let mut e = match v.get("error") {
                    Some(err) => Error::from_wire(err),
                    None => Error::new("INTERNAL", format!("HTTP {}", status)),
                };
                e.status = status;
                Err(e)
            }
            Err(e) => Err(Error::transport("SESSION_CLOSED", e.to_string())),
        }
    }

    /// The published keys of `account` (`GET /v1/accounts/{id}/keys`).
    pub async fn fetch_keys(&self, account: &str) -> Result<Vec<PublicKey>> {
        let (_, v) = self.call("GET", &format!("/v1/accounts/{}/keys", encode_segment(account)), None).await?;
        serde_json::from_value(v.get("keys").cloned().unwrap_or(Value::Array(vec![]))).map_err(|e| Error::protocol(format!("keys: {e}")))
    }

    /// Publishes `keys` for `account` (`PUT /v1/accounts/{id}/keys`; the
    /// account itself or an admin).
    pub async fn publish_keys(&self, account: &str, keys: &[PublicKey]) -> Result<()> {
        self.call("PUT", &format!("/v1/accounts/{}/keys", encode_segment(account)), Some(json!({ "keys": keys }))).await?;
        Ok(())
    }

    /// Creates an account (admin); an account that exists already is not an error.
    pub async fn ensure_account(&self, account: &str) -> Result<()> {
        match self.call("POST", "/v1/accounts", Some(json!({ "id": account }))).await {
            Err(e) if e.code == "CONFLICT" => Ok(()),
            r => r.map(|_| ()),
        }
    }

    /// Revokes a contract (its holder only): `DELETE /v1/contracts/{id}`.
    pub async fn revoke_contract(&self, contract_id: &str) -> Result<()> {
        self.call("DELETE", &format!("/v1/contracts/{}", encode_segment(contract_id)), None).await.map(|_| ())
    }
}

type Cached = (Instant, Arc<Vec<PublicKey>>);

/// Fetches and caches accounts' published keys for `ttl`. Cheap to clone;
/// safe to share between tasks.
#[derive(Clone)]
pub struct KeyCache {
    http: HttpClient,
    ttl: Duration,
    cache: Arc<Mutex<HashMap<String, Cached>>>,
}

impl KeyCache {
    pub fn new(http: HttpClient, ttl: Duration) -> KeyCache {
        KeyCache { http, ttl, cache: Arc::default() }
    }

    /// The keys of `account`, from the cache while fresh.
    pub async fn keys(&self, account: &str) -> Result<Arc<Vec<PublicKey>>> {
        if let Some((at, k)) = self.cache.lock().unwrap().get(account) {
            if at.elapsed() < self.ttl {
                return Ok(k.clone());
            }
        }
        let k = Arc::new(self.http.fetch_keys(account).await?);
        self.cache.lock().unwrap().insert(account.to_string(), (Instant::now(), k.clone()));
        Ok(k)
    }

    /// Forgets `account`'s keys (after a rotation, or a failed verification).
    pub fn invalidate(&self, account: &str) {
        self.cache.lock().unwrap().remove(account);
    }
}
