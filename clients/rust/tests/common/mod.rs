//! The conformance harness (clients/conformance/README.md): builds or finds
//! the server, starts it on a port of 127.0.0.1 that it picks itself (and
//! reports on stdout) with the conformance catalog, and records which
//! scenarios ran; beside it, the raw endpoints of [`raw`].

// Each test crate uses a part of this module: what one leaves is not dead.
#![allow(dead_code)]

mod raw;
#[allow(unused_imports)] // as above: a test crate without raw endpoints uses none
pub use raw::*;

use pigeon_client::crypto::{b64_decode, Keys};
use pigeon_client::http::HttpClient;
use pigeon_client::{Message, Session};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

pub fn conformance_dir() -> PathBuf {
    repo_root().join("clients/conformance")
}

/// The server binary: `PIGEON_BIN`, else built once into target/.
pub fn server_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(b) = std::env::var("PIGEON_BIN") {
            if !b.is_empty() {
                return PathBuf::from(b);
            }
        }
        let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/pigeon-server");
        let st = Command::new("go")
            .args(["build", "-o"])
            .arg(&out)
            .arg("./cmd/pigeon")
            .current_dir(repo_root())
            .status()
            .expect("go build (set PIGEON_BIN to a built pigeon binary instead)");
        assert!(st.success(), "go build ./cmd/pigeon failed");
        out
    })
    .clone()
}

/// A running `pigeon serve`.
pub struct Server {
    pub port: u16,
    pub data: String,
    /// a policy directory with its tokens.yaml, instead of the conformance catalog
    catalog: Option<PathBuf>,
    /// more `pigeon serve` flags (`--tls-cert`, …)
    extra: Vec<String>,
    child: Option<Child>,
}

impl Server {
    /// Starts a server in memory (`data` empty) or on a data directory, on
    /// a port the system picks.
    pub fn start(data: &str) -> Server {
        Server::spawn(0, data, None, Vec::new())
    }

    pub fn start_on(port: u16, data: &str) -> Server {
        Server::spawn(port, data, None, Vec::new())
    }

    /// Starts a server in memory serving `catalog` (subjects/, schemas/)
    /// and the tokens of its tokens.yaml.
    pub fn start_catalog(catalog: &Path) -> Server {
        Server::spawn(0, "", Some(catalog.to_path_buf()), Vec::new())
    }

    /// `start_catalog` with more flags. With `--tls-cert` the server
    /// speaks only TLS, and its URLs are `wss://` and `https://`.
    pub fn start_catalog_with(catalog: &Path, extra: &[String]) -> Server {
        Server::spawn(0, "", Some(catalog.to_path_buf()), extra.to_vec())
    }

    fn tls(&self) -> bool {
        self.extra.iter().any(|a| a == "--tls-cert")
    }

    /// Starts `pigeon serve` on `port` (0: one the system picks, so that
    /// servers started side by side never race for a port) and waits
    /// until it listens: it says so on stdout, with the address.
    fn spawn(port: u16, data: &str, catalog: Option<PathBuf>, extra: Vec<String>) -> Server {
        let (policies, tokens) = match &catalog {
            Some(c) => (c.clone(), c.join("tokens.yaml")),
            None => (conformance_dir().join("policies"), conformance_dir().join("tokens.yaml")),
        };
        let mut child = Command::new(server_bin())
            .arg("serve")
            .args(["--addr", &format!("127.0.0.1:{port}")])
            .args(["--data", data])
            .arg("--policies")
            .arg(policies)
            .arg("--tokens")
            .arg(tokens)
            .args(&extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pigeon serve");
        let port = listening_port(&mut child);
        Server { port, data: data.to_string(), catalog, extra, child: Some(child) }
    }

    pub fn url(&self) -> String {
        format!("{}://127.0.0.1:{}", if self.tls() { "wss" } else { "ws" }, self.port)
    }

    pub fn http(&self) -> String {
        format!("{}://127.0.0.1:{}", if self.tls() { "https" } else { "http" }, self.port)
    }

    /// SIGKILL, and wait for the process to go.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, and wait (SIGKILL after 5 s).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            unsafe_sigterm(c.id());
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same port and data directory.
    pub fn restart(&mut self) {
        self.kill();
        let s = Server::spawn(self.port, &self.data.clone(), self.catalog.clone(), self.extra.clone());
        *self = s;
    }
}

/// Reads the banner `pigeon serve` prints once it listens, up to the line
/// `pigeon: health     http://127.0.0.1:PORT/health`, and returns PORT;
/// a thread goes on draining stdout so that the server never blocks on
/// it. Panics when the server exits first or says nothing for 20 s.
fn listening_port(child: &mut Child) -> u16 {
    use std::io::{BufRead, BufReader};
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if let Some(url) = line.strip_prefix("pigeon: health") {
                let port = url.trim().rsplit_once(':').and_then(|(_, rest)| rest.split('/').next()?.parse::<u16>().ok());
                if let (Some(tx), Some(port)) = (tx.take(), port) {
                    let _ = tx.send(port);
                }
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(port) => return port,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("pigeon serve exited at start: {st}");
        }
    }
    let _ = child.kill();
    panic!("pigeon serve did not say it listens");
}

fn unsafe_sigterm(pid: u32) {
    let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The scenario ids of scenarios.json listed for Rust.
pub fn listed_scenarios() -> BTreeSet<String> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(conformance_dir().join("scenarios.json")).unwrap()).unwrap();
    v["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["clients"].as_array().unwrap().iter().any(|c| c == "rust"))
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

static RAN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

pub fn record(id: &str) {
    RAN.lock().unwrap().insert(id.to_string());
}

pub fn ran() -> BTreeSet<String> {
    RAN.lock().unwrap().clone()
}

/// A fresh suffix for idempotency keys, ids and names.
pub fn nonce() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{:x}-{}", t, N.fetch_add(1, Ordering::Relaxed))
}

pub fn payment(key: &str) -> Message {
    Message::new("payments.authorize", "payment.authorization.requested", "authorize_payment")
        .with_idempotency_key(key)
        .with_classification("pci")
        .with_data(
            json!({"merchantId": "m-1", "orderId": format!("o-{key}"), "amount": 42.5, "currency": "GBP", "paymentToken": "tok_abc"}),
        )
}

pub fn notification(tag: &str) -> Message {
    Message::new("notifications.send", "notification.send.requested", "send_notification")
        .with_idempotency_key(format!("n-{}", nonce()))
        .with_classification("pii")
        .with_data(json!({"recipientId": "r-1", "channel": "email", "templateId": tag}))
}

pub fn telemetry(kind: &str, site: &str, value: f64) -> Message {
    Message::new("events.telemetry", "telemetry.reading", "report")
        .with_classification("internal")
        .with_data(json!({"kind": kind, "site": site, "value": value}))
}

pub fn tag_of(m: &Message) -> &str {
    m.data.get("templateId").and_then(Value::as_str).unwrap_or("")
}

/// The fixed keys of vectors/go.json.
pub fn vector_keys() -> (Value, Keys, Keys) {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(conformance_dir().join("vectors/go.json")).unwrap()).unwrap();
    let k = |name: &str| {
        let e = &v["keys"][name];
        let seed: [u8; 32] = b64_decode(e["signingSeed"].as_str().unwrap()).unwrap().try_into().unwrap();
        let enc: [u8; 32] = b64_decode(e["encryptionPrivate"].as_str().unwrap()).unwrap().try_into().unwrap();
        let keys = Keys::from_bytes(seed, enc);
        assert_eq!(keys.signing_kid, e["signingKid"].as_str().unwrap());
        assert_eq!(keys.encryption_kid, e["encryptionKid"].as_str().unwrap());
        keys
    };
    let (a, b) = (k("alice"), k("bob"));
    (v, a, b)
}

pub const ALICE: &str = "spiffe://conformance/ns/chat/sa/alice";
pub const BOB: &str = "spiffe://conformance/ns/chat/sa/bob";

pub fn http(server: &Server, token: &str) -> HttpClient {
    HttpClient::new(&server.http(), token)
}

pub async fn connect(server: &Server, token: &str, subjects: &[&str]) -> Session {
    Session::connect(&server.url(), token, subjects, pigeon_client::ConnectOptions::default())
        .await
        .unwrap_or_else(|e| panic!("connect {token}: {e}"))
}

/// Runs `f` on a task of its own within `limit`: `Err` with the panic's
/// message when it panics, or with the timeout when it takes longer.
pub async fn run_case<F>(f: F, limit: Duration) -> Result<(), String>
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    match tokio::time::timeout(limit, tokio::spawn(f)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(match e.try_into_panic() {
            Ok(p) => p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into()),
            Err(e) => e.to_string(),
        }),
        Err(_) => Err(format!("timed out after {} s", limit.as_secs())),
    }
}

/// Waits until `f` holds, at most `within`.
pub async fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

/// Subscribes `s` to `subject` with a handler that reports each delivery
/// it starts on the receiver returned, then holds it until `gate` (the
/// `Notify` returned) is notified.
pub async fn gated_subscribe(
    s: &Session,
    subject: &str,
) -> (pigeon_client::Subscription, std::sync::Arc<tokio::sync::Notify>, tokio::sync::mpsc::UnboundedReceiver<()>) {
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let (started_tx, started) = tokio::sync::mpsc::unbounded_channel();
    let g = gate.clone();
    let sub = s
        .subscribe(subject, pigeon_client::SubscribeOptions::default(), move |_d| {
            let (g, started_tx) = (g.clone(), started_tx.clone());
            async move {
                let _ = started_tx.send(());
                g.notified().await;
                Ok(())
            }
        })
        .await
        .unwrap();
    (sub, gate, started)
}
