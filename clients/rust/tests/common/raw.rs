//! Raw endpoints of the tests' own, playing a server that a test steers
//! (or a hostile one): a WebSocket endpoint that answers negotiate and
//! hands every other frame to the test, and HTTP endpoints that answer
//! each request as the test says, or stream what a server never sends.
//! Each records what it read.

use futures_util::{SinkExt, StreamExt};
use pigeon_client::{ConnectOptions, Session};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message as W;

// ---- WebSocket ----

/// The frames a raw endpoint recorded, each without its `id` (which the
/// client draws), for comparing with the frames a test expects.
pub fn frames_without_ids(frames: &Mutex<Vec<Value>>) -> Vec<Value> {
    frames
        .lock()
        .unwrap()
        .iter()
        .map(|f| {
            let mut f = f.clone();
            f.as_object_mut().unwrap().remove("id");
            f
        })
        .collect()
}

/// The time `ms` milliseconds from now, as the broker writes times.
pub fn in_ms(ms: i64) -> String {
    pigeon_client::time::format_rfc3339_ms(pigeon_client::time::now_ms() + ms)
}

/// How a raw endpoint behaves beside the answers of `on_frame`.
#[derive(Clone, Copy, Default)]
pub struct Behaviour {
    /// The contract of negotiate expires this many ms from now (default: 2099).
    pub expires_in_ms: Option<i64>,
    /// Read nothing after the negotiate (a server that stops reading).
    pub stop_reading: bool,
    /// Go on reading after the client's close frame, never answering it.
    pub ignore_close: bool,
}

/// What a [`raw_server`] answers a frame with.
pub type OnFrame = Arc<dyn Fn(&Value) -> Vec<Value> + Send + Sync>;

/// A raw endpoint: answers negotiate, hands every other frame to
/// `on_frame`, which returns the frames to send back; `cmd` sends frames
/// (text as given) to the latest connection at any time. Aborting the task
/// returned stops the endpoint, its connections with it.
pub async fn raw_server(b: Behaviour, on_frame: OnFrame) -> (String, mpsc::UnboundedSender<String>, JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::unbounded_channel::<String>();
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let task = tokio::spawn(async move {
        // Dropped (the task aborted): every connection ends with it.
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            while conns.try_join_next().is_some() {}
            let (on_frame, rx) = (on_frame.clone(), rx.clone());
            conns.spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else { return };
                let mut rx = rx.lock().await;
                let mut negotiated = false;
                loop {
                    tokio::select! {
                        m = ws.next(), if !(b.stop_reading && negotiated) => {
                            let t = match m {
                                Some(Ok(W::Text(t))) => t,
                                Some(Ok(W::Close(_))) if b.ignore_close => continue,
                                Some(Ok(W::Ping(_))) | Some(Ok(W::Pong(_))) => continue,
                                _ => return,
                            };
                            let f: Value = serde_json::from_str(&t).unwrap();
                            let out = if f["op"] == "negotiate" {
                                negotiated = true;
                                let exp = b.expires_in_ms.map_or("2099-01-01T00:00:00Z".to_string(), in_ms);
                                let contract = json!({"id": "ctr_raw", "subjects": [], "expiresAt": exp});
                                vec![json!({"op": "contract", "re": f["id"], "contract": contract, "maxFrame": 1 << 20})]
                            } else {
                                on_frame(&f)
                            };
                            for o in out {
                                if ws.send(W::Text(o.to_string())).await.is_err() {
                                    return;
                                }
                            }
                        }
                        Some(o) = rx.recv() => {
                            if ws.send(W::Text(o)).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    (format!("ws://127.0.0.1:{port}"), tx, task)
}

/// An `on_frame` that records every frame in `frames` and answers it:
/// subscribe with subscription `sid`, ping with pong, the rest `ok`.
pub fn ok_to_all(sid: &'static str, frames: Arc<Mutex<Vec<Value>>>) -> OnFrame {
    Arc::new(move |f| {
        frames.lock().unwrap().push(f.clone());
        match f["op"].as_str() {
            Some("subscribe") => vec![json!({"op": "subscribed", "re": f["id"], "sub": sid})],
            Some("ping") => vec![json!({"op": "pong", "re": f["id"]})],
            _ => vec![json!({"op": "ok", "re": f["id"]})],
        }
    })
}

/// A raw endpoint answering every frame whose op is one of `ops` with
/// `answer` (its `re` set), every other frame `ok`, recording the frames.
pub async fn answering(ops: &'static [&'static str], answer: Value) -> (String, Arc<Mutex<Vec<Value>>>, JoinHandle<()>) {
    let frames: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = frames.clone();
    let on_frame: OnFrame = Arc::new(move |f| {
        seen.lock().unwrap().push(f.clone());
        let mut a = if ops.iter().any(|op| f["op"] == *op) { answer.clone() } else { json!({"op": "ok"}) };
        a["re"] = f["id"].clone();
        vec![a]
    });
    let (url, _tx, task) = raw_server(Behaviour::default(), on_frame).await;
    (url, frames, task)
}

/// The options of a session on a raw endpoint: no keepalive, renewal or
/// reconnection, errors dropped.
pub fn raw_opts() -> ConnectOptions {
    ConnectOptions::default().keepalive(None).auto_renew(false).reconnect(false).on_error(|_| {})
}

/// Ends a test on a raw endpoint: stops the endpoint (aborts its `task`),
/// then closes the session (bounded: the endpoint no longer answers).
pub async fn end(s: Session, task: JoinHandle<()>) {
    task.abort();
    let _ = tokio::time::timeout(Duration::from_secs(3), s.close()).await;
}

// ---- HTTP ----

/// Reads an HTTP request's head (through its blank line) from `tcp` into
/// `read`, for the raw HTTP endpoints of the tests; false when the
/// connection ended first.
pub async fn read_request_head(tcp: &mut tokio::net::TcpStream, read: &std::sync::Arc<Mutex<Vec<u8>>>) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 4096];
    loop {
        let Ok(n) = tcp.read(&mut buf).await else { return false };
        if n == 0 {
            return false;
        }
        let mut r = read.lock().unwrap();
        r.extend_from_slice(&buf[..n]);
        if r.windows(4).any(|x| x == b"\r\n\r\n") {
            return true;
        }
    }
}

/// Reads one whole HTTP request from `tcp`, for the raw HTTP endpoints of
/// the tests: its head (request line and headers, as text) and its body as
/// JSON (`Null` when empty). The whole body is read before the caller
/// answers: closing on unread bytes would reset the connection under the
/// answer. None when the connection ended before a head came.
pub async fn read_request(tcp: &mut tokio::net::TcpStream) -> Option<(String, Value)> {
    use tokio::io::AsyncReadExt;
    let read = Arc::new(Mutex::new(Vec::new()));
    if !read_request_head(tcp, &read).await {
        return None;
    }
    let raw = read.lock().unwrap().clone();
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let len = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap()))
        .unwrap_or(0);
    let mut body = raw[end..].to_vec();
    while body.len() < len {
        let mut buf = [0u8; 4096];
        match tcp.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&buf[..n]),
        }
    }
    let body = if body.is_empty() { Value::Null } else { serde_json::from_slice(&body).unwrap() };
    Some((head, body))
}

/// One request an [`http_server`] read: its head (request line and
/// headers, as text) and its body as JSON (`Null` when empty).
#[derive(Clone, Debug)]
pub struct Seen {
    pub head: String,
    pub body: Value,
}

/// What an [`http_server`] answers a request with.
pub struct HttpReply {
    pub status: u16,
    /// Header lines to send, each ending in CRLF (Content-Length is added).
    pub headers: String,
    pub body: String,
}

impl HttpReply {
    pub fn new(status: u16, body: impl ToString) -> HttpReply {
        HttpReply { status, headers: String::new(), body: body.to_string() }
    }
}

/// An HTTP endpoint answering each request as `answer(n, request)` says
/// (`n` counts the requests from 0; `None`: the connection is closed
/// unanswered), one request a connection, recording every request it read
/// before it answers.
pub async fn http_server(answer: impl Fn(usize, &Seen) -> Option<HttpReply> + Send + Sync + 'static) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let s = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else { return };
            let Some((head, body)) = read_request(&mut tcp).await else { continue };
            let req = Seen { head, body };
            let n = {
                let mut s = s.lock().unwrap();
                s.push(req.clone());
                s.len() - 1
            };
            let Some(r) = answer(n, &req) else { continue };
            let out = format!("HTTP/1.1 {} X\r\n{}Content-Length: {}\r\n\r\n{}", r.status, r.headers, r.body.len(), r.body);
            let _ = tcp.write_all(out.as_bytes()).await;
        }
    });
    (url, seen)
}

/// An [`http_server`] answering every request with `status` and `body`.
pub async fn http_canned(status: u16, body: impl ToString) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let body = body.to_string();
    http_server(move |_, _| Some(HttpReply::new(status, &body))).await
}

/// An [`http_server`] answering every request whose request line holds
/// `route` (`"/receive "`, say) with status 200 and `answer`, every other
/// request `{"ok":true}`.
pub async fn http_answering(route: &'static str, answer: Value) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let text = answer.to_string();
    http_server(move |_, r| {
        let line = r.head.lines().next().unwrap_or("");
        Some(HttpReply::new(200, if line.contains(route) { text.as_str() } else { r#"{"ok":true}"# }))
    })
    .await
}

/// A [`raw_http`] endpoint and what it saw.
pub struct RawHttp {
    pub url: String,
    /// The connections accepted.
    pub conns: Arc<AtomicUsize>,
    /// The bytes of spaces written after the heads.
    pub written: Arc<AtomicUsize>,
}

/// A raw HTTP endpoint that answers each request's head with `head` as
/// given, then `spaces` bytes of spaces: a byte every `tick` when one is
/// given, else as fast as they are read (in chunks of 1 MiB).
pub async fn raw_http(head: &'static str, spaces: usize, tick: Option<Duration>) -> RawHttp {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let raw = RawHttp {
        url: format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port()),
        conns: Arc::default(),
        written: Arc::default(),
    };
    let (c, w) = (raw.conns.clone(), raw.written.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else { return };
            c.fetch_add(1, Ordering::SeqCst);
            let w = w.clone();
            tokio::spawn(async move {
                if !read_request_head(&mut tcp, &Arc::default()).await || tcp.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b' '; if tick.is_some() { 1 } else { 1 << 20 }];
                let mut left = spaces;
                while left > 0 {
                    if let Some(t) = tick {
                        tokio::time::sleep(t).await;
                    }
                    let n = left.min(chunk.len());
                    if tcp.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    w.fetch_add(n, Ordering::SeqCst);
                    left -= n;
                }
            });
        }
    });
    raw
}
