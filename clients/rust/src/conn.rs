//! One WebSocket connection: a reader task that routes answers and pushes,
//! a writer task that corks frames and batches publishes.

use crate::error::{Error, ErrorKind, Result};
use crate::message::{Decision, Message, Status};
use crate::session::Inner;
use crate::subscription::SubShared;
use crate::tls::{self, Stream, Target, TlsContext};
use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::cell::Cell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::WebSocketStream;

type Ws = WebSocketStream<Counted>;

/// The connection's stream, counting the bytes written to it: the write
/// bound is on progress, not on a whole write (see [`written`]).
struct Counted {
    inner: Stream,
    wrote: Arc<AtomicU64>,
}

impl Counted {
    fn count(&self, r: &std::task::Poll<std::io::Result<usize>>) {
        if let std::task::Poll::Ready(Ok(n)) = r {
            self.wrote.fetch_add(*n as u64, Ordering::Release);
        }
    }
}

impl tokio::io::AsyncRead for Counted {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Counted {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        self.count(&r);
        r
    }
    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.count(&r);
        r
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The most messages the client puts in one publish_batch frame.
pub const MAX_PUBLISH_BATCH: usize = 1000;
const MAX_BATCH_BYTES: usize = 256 << 10;

/// The most bytes of call frames (not pings) queued for the writer and not
/// yet written, 16 MiB: beyond, a call fails at once `RATE_LIMITED` and is
/// not sent, so that a server that stops reading cannot make the client
/// hold every call made meanwhile (those that timed out included) until
/// the connection ends. Nothing queued is dropped.
pub const MAX_BUFFERED_BYTES: usize = 16 << 20;

/// A frame's (or an HTTP answer's) JSON as a [`Value`], refusing what the
/// broker never sends and serde_json would take silently: a duplicate key
/// (serde_json keeps the last, another reader the first). Numbers out of
/// range (`1e400`) and nesting deeper than 128 fail as in serde_json, and so
/// do lone surrogate escapes (`"\ud800"`) and text that is not UTF-8.
pub(crate) fn parse_frame(text: &[u8]) -> std::result::Result<Value, serde_json::Error> {
    serde_json::from_slice::<Strict>(text).map(|s| s.0)
}

/// The list of a listing answer: the member of the answer (an object)
/// holding it, and the most entries the server ever sends there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Listing {
    pub(crate) member: &'static str,
    pub(crate) most: usize,
}

/// Why [`parse_listing`] read no answer.
#[derive(Debug)]
pub(crate) enum ListingError {
    /// The text is not JSON as [`parse_frame`] takes it.
    Json(serde_json::Error),
    /// The listing's array holds an entry past its `most`.
    Longer,
}

/// [`parse_frame`] of a listing answer: when `text` is an object whose
/// member `list.member` is an array, the entries of that array are built
/// one at a time, and the reading ends ([`ListingError::Longer`]) at an
/// entry past `list.most`, which is skipped over, not built, as nothing
/// after it is. So an answer of millions of `{}` entries costs the entries
/// up to the bound, not a `Value` each.
pub(crate) fn parse_listing(text: &[u8], list: Listing) -> std::result::Result<Value, ListingError> {
    use serde::de::DeserializeSeed;
    let longer = Cell::new(false);
    let mut de = serde_json::Deserializer::from_slice(text);
    let read = Seeded(StrictVisitor { top: Some((list, &longer)), most: None }).deserialize(&mut de).and_then(|s| de.end().map(|()| s.0));
    match read {
        Ok(v) => Ok(v),
        Err(_) if longer.get() => Err(ListingError::Longer),
        Err(e) => Err(ListingError::Json(e)),
    }
}

/// A JSON value read strictly (see [`parse_frame`]).
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor { top: None, most: None })
    }
}

/// A [`StrictVisitor`] as a seed: the value it reads.
struct Seeded<'a>(StrictVisitor<'a>);

impl<'de> serde::de::DeserializeSeed<'de> for Seeded<'_> {
    type Value = Strict;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<Strict, D::Error> {
        d.deserialize_any(self.0)
    }
}

/// Reads a [`Strict`] value; `top`: the value is a listing answer, whose
/// member of the listing's name is read with `most` its bound; `most`: an
/// array holds at most that many entries, else the flag is set and the
/// reading fails.
struct StrictVisitor<'a> {
    top: Option<(Listing, &'a Cell<bool>)>,
    most: Option<(usize, &'a Cell<bool>)>,
}

impl<'de> serde::de::Visitor<'de> for StrictVisitor<'_> {
    type Value = Strict;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, b: bool) -> std::result::Result<Strict, E> {
        Ok(Strict(Value::Bool(b)))
    }
    fn visit_i64<E>(self, n: i64) -> std::result::Result<Strict, E> {
        Ok(Strict(Value::from(n)))
    }
    fn visit_u64<E>(self, n: u64) -> std::result::Result<Strict, E> {
        Ok(Strict(Value::from(n)))
    }
    fn visit_f64<E: serde::de::Error>(self, n: f64) -> std::result::Result<Strict, E> {
        serde_json::Number::from_f64(n).map(|n| Strict(Value::Number(n))).ok_or_else(|| E::custom("a number out of range"))
    }
    fn visit_str<E>(self, v: &str) -> std::result::Result<Strict, E> {
        Ok(Strict(Value::String(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> std::result::Result<Strict, E> {
        Ok(Strict(Value::String(v)))
    }
    fn visit_unit<E>(self) -> std::result::Result<Strict, E> {
        Ok(Strict(Value::Null))
    }
    fn visit_none<E>(self) -> std::result::Result<Strict, E> {
        Ok(Strict(Value::Null))
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<Strict, D::Error> {
        Strict::deserialize(d)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> std::result::Result<Strict, A::Error> {
        let mut v = Vec::new();
        loop {
            if let Some((most, longer)) = self.most {
                if v.len() == most {
                    // One more entry is skipped over, not built.
                    if a.next_element::<serde::de::IgnoredAny>()?.is_some() {
                        longer.set(true);
                        return Err(serde::de::Error::custom(format!("more than {most} entries")));
                    }
                    break;
                }
            }
            match a.next_element::<Strict>()? {
                Some(Strict(x)) => v.push(x),
                None => break,
            }
        }
        Ok(Strict(Value::Array(v)))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> std::result::Result<Strict, A::Error> {
        let mut m = Map::new();
        while let Some(k) = a.next_key::<String>()? {
            if m.contains_key(&k) {
                return Err(serde::de::Error::custom(format!("duplicate key {k:?}")));
            }
            let Strict(v) = match self.top {
                Some((list, longer)) if k == list.member => {
                    a.next_value_seed(Seeded(StrictVisitor { top: None, most: Some((list.most, longer)) }))?
                }
                _ => a.next_value()?,
            };
            m.insert(k, v);
        }
        Ok(Strict(Value::Object(m)))
    }
}

/// A queued publish: the message's JSON text, where its data is in it
/// (None when it has none), and where its decision goes. It stays until
/// the answer: a brief answer leaves the data of an accepted message out,
/// and the data sent is put back (see `decision_of`).
pub(crate) struct PubItem {
    pub json: String,
    pub data: Option<Range<usize>>,
    pub tx: oneshot::Sender<Result<Decision>>,
    /// Its place among the session's pending publishes, given back when
    /// the item goes (answered, failed, or its connection ended), not when
    /// its `PendingPublish` is dropped.
    pub _slot: PubSlot,
}

/// A publish's place among those pending: one of
/// `max_pending_publishes`, and its bytes among
/// `max_pending_publish_bytes` ([`ConnectOptions`](crate::ConnectOptions)),
/// both given back when it is dropped.
#[derive(Default)]
pub(crate) struct PubSlot {
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    bytes: usize,
    held: Option<Arc<std::sync::atomic::AtomicUsize>>,
}

impl PubSlot {
    /// Takes `bytes` of `held` (the bytes pending), at most `max` in all,
    /// except that one publish of any size is taken when none is pending;
    /// beyond, `RATE_LIMITED` at once, and the publish is not sent.
    pub(crate) fn take(
        permit: tokio::sync::OwnedSemaphorePermit,
        held: &Arc<std::sync::atomic::AtomicUsize>,
        bytes: usize,
        max: usize,
    ) -> Result<PubSlot> {
        let mut cur = held.load(Ordering::Acquire);
        loop {
            if cur > 0 && cur.saturating_add(bytes) > max {
                let mut details = Map::new();
                details.insert("maxPendingPublishBytes".into(), json!(max));
                return Err(Error::with_details(
                    "RATE_LIMITED",
                    format!(
                        "{cur} bytes of publishes wait for their decision, and this one's {bytes} would take them past max_pending_publish_bytes ({max}): it was not sent"
                    ),
                    details,
                ));
            }
            match held.compare_exchange_weak(cur, cur + bytes, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(PubSlot { permit: Some(permit), bytes, held: Some(held.clone()) }),
                Err(now) => cur = now,
            }
        }
    }
}

impl Drop for PubSlot {
    fn drop(&mut self) {
        if let Some(h) = &self.held {
            h.fetch_sub(self.bytes, Ordering::AcqRel);
        }
        self.permit.take();
    }
}

/// Where the data member's value is in `json`, a message as serde_json
/// writes it (compact, the members in `Message`'s order), or None when it
/// has none (null data is left out). The members before data are strings,
/// which hold no unescaped quote, so the first `"data":` is its name; its
/// value ends at the first comma or closing bracket outside strings and
/// nesting.
pub(crate) fn data_span(json: &str) -> Option<Range<usize>> {
    let start = json.find("\"data\":")? + 7;
    let (mut depth, mut in_str, mut esc) = (0usize, false, false);
    for (i, &c) in json.as_bytes().iter().enumerate().skip(start) {
        if in_str {
            match c {
                _ if esc => esc = false,
                b'\\' => esc = true,
                b'"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            b'"' => in_str = true,
            b'{' | b'[' => depth += 1,
            b',' | b'}' | b']' if depth == 0 => return Some(start..i),
            b'}' | b']' => depth -= 1,
            _ => {}
        }
    }
    None
}

pub(crate) enum Out {
    Text(String),
    Publish(PubItem),
    Close,
}

enum Pending {
    One(oneshot::Sender<Result<Value>>, Option<Arc<SubShared>>),
    Batch(Vec<PubItem>),
}

/// The most unsubscribes a connection has in flight for server
/// subscriptions that deliveries name and no subscription owns (the Go
/// client's bound).
pub(crate) const MAX_ORPHAN_ENDS: usize = 64;

pub(crate) struct Conn {
    out: mpsc::UnboundedSender<Out>,
    pending: Mutex<HashMap<String, Pending>>,
    next_id: AtomicU64,
    ended: Mutex<Option<Error>>,
    dead: AtomicBool,
    done_tx: watch::Sender<bool>,
    kill_tx: watch::Sender<bool>,
    kill_reason: Mutex<Option<String>>,
    pub subs: Mutex<HashMap<String, Arc<SubShared>>>,
    /// Server subscriptions no subscription owns whose unsubscribe is in
    /// flight (see [`Conn::end_orphan`]).
    orphans: Mutex<HashSet<String>>,
    call_timeout: Duration,
    pub max_frame: AtomicU64,
    pub_done: mpsc::UnboundedSender<()>,
    /// The bytes of call frames queued for the writer, not yet written
    /// (see [`MAX_BUFFERED_BYTES`]).
    out_bytes: std::sync::atomic::AtomicUsize,
    /// The largest frame read ([`ConnectOptions::max_frame_bytes`](crate::ConnectOptions::max_frame_bytes)).
    max_read: usize,
    /// The bytes written to the socket so far ([`Counted`]).
    wrote: Arc<AtomicU64>,
}

/// Forgets a call's pending entry when the call ends, answered or not: a
/// caller that gives up (a timeout around the call, a dropped future)
/// leaves nothing behind, and the late answer finds no one.
struct Forget<'a> {
    conn: &'a Conn,
    id: &'a str,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.conn.pending.lock().unwrap().remove(self.id);
    }
}

/// Builds the WebSocket URL: ws and wss as given, http mapped to ws and
/// https to wss, `/v1/ws` added when the URL has no path.
pub(crate) fn ws_url(url: &str) -> Result<String> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| Error::new("INVALID_ARGUMENT", format!("url {url:?} has no scheme")))?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "ws" | "http" => "ws",
        "wss" | "https" => "wss",
        s => return Err(Error::new("INVALID_ARGUMENT", format!("url scheme {s:?} is not ws, wss, http or https"))),
    };
    let (host, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let path = if path.is_empty() || path == "/" { "/v1/ws" } else { path };
    Ok(format!("{scheme}://{host}{path}"))
}

fn handshake_error(e: tokio_tungstenite::tungstenite::Error, ctx: Option<&TlsContext>) -> Error {
    use tokio_tungstenite::tungstenite::Error as WE;
    match e {
        WE::Http(resp) => {
            let status = resp.status().as_u16();
            let body = resp.body().as_deref().unwrap_or(&[]);
            let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            let mut err = match v.get("error") {
                Some(e) => Error::from_wire(e),
                None => Error::transport("SESSION_CLOSED", format!("the upgrade was refused with HTTP {status}")),
            };
            err.status = status;
            if status == 429 || status >= 500 {
                // At its connection limit or shutting down: worth another try.
                err.kind = ErrorKind::Transport;
            }
            err
        }
        // With TLS 1.3 a refused client certificate shows at the first
        // read, the upgrade's answer: the server's alert.
        WE::Io(io) if ctx.is_some() => {
            tls::tls_error(&io, ctx).unwrap_or_else(|| Error::transport("SESSION_CLOSED", format!("cannot connect: {io}")))
        }
        e => Error::transport("SESSION_CLOSED", format!("cannot connect: {e}")),
    }
}

impl Conn {
    /// Dials `url` and starts the connection's reader and writer.
    pub(crate) async fn dial(inner: &Arc<Inner>) -> Result<Arc<Conn>> {
        let url = ws_url(&inner.url)?;
        let max_read = inner.opts.max_frame_bytes;
        if max_read == 0 {
            return Err(Error::new("INVALID_ARGUMENT", "max_frame_bytes is 0: no frame could be read"));
        }
        let mut req = url.as_str().into_client_request().map_err(|e| Error::new("INVALID_ARGUMENT", e.to_string()))?;
        let h = req.headers_mut();
        let bad = |_| Error::new("INVALID_ARGUMENT", "the token or region is not a valid header value");
        // No token: the client certificate is the credential (mTLS).
        if inner.opts.subprotocol_auth {
            let protocols =
                if inner.token.is_empty() { "pigeon.v1".to_string() } else { format!("pigeon.v1, pigeon.bearer.{}", inner.token) };
            h.insert("Sec-WebSocket-Protocol", HeaderValue::from_str(&protocols).map_err(bad)?);
        } else if !inner.token.is_empty() {
            h.insert("Authorization", HeaderValue::from_str(&format!("Bearer {}", inner.token)).map_err(bad)?);
        }
        if let Some(r) = &inner.opts.region {
            h.insert("x-pigeon-region", HeaderValue::from_str(r).map_err(bad)?);
        }
        let target = Target::parse(&url)?;
        let tls_config = if target.secure { Some(inner.opts.tls.as_ref().unwrap_or_else(|| tls::TlsConfig::default_ref())) } else { None };
        let wrote = Arc::new(AtomicU64::new(0));
        let dial = async {
            let (stream, tls) = tls::connect(&target, tls_config).await?;
            let stream = Counted { inner: stream, wrote: wrote.clone() };
            // The read limit, explicit: tungstenite's defaults (64 MiB a
            // message, 16 MiB a frame) would drop the connection on a
            // broker's replay answer above 16 MiB sent as one frame.
            let cfg = WebSocketConfig { max_message_size: Some(max_read), max_frame_size: Some(max_read), ..WebSocketConfig::default() };
            tokio_tungstenite::client_async_with_config(req, stream, Some(cfg)).await.map_err(|e| handshake_error(e, tls.as_ref()))
        };
        let (ws, _) = tokio::time::timeout(inner.opts.dial_timeout, dial)
            .await
            .map_err(|_| Error::transport("SESSION_CLOSED", "timed out connecting"))??;
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let (pub_done_tx, pub_done_rx) = mpsc::unbounded_channel();
        let mut conn = Conn::new(out_tx, pub_done_tx, inner.opts.call_timeout);
        let c = Arc::get_mut(&mut conn).expect("a new connection");
        c.max_read = max_read;
        c.wrote = wrote;
        let (sink, stream) = ws.split();
        tokio::spawn(writer(conn.clone(), sink, out_rx, pub_done_rx, inner.opts.publish_frames_in_flight.max(1)));
        tokio::spawn(reader(conn.clone(), Arc::downgrade(inner), stream));
        Ok(conn)
    }

    pub(crate) fn next_id(&self) -> String {
        self.next_id.fetch_add(1, Ordering::Relaxed).to_string()
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Why the connection ended (a transport error), once it has.
    pub(crate) fn failed(&self) -> Error {
        self.ended.lock().unwrap().clone().unwrap_or_else(|| Error::transport("SESSION_CLOSED", "the connection is closed"))
    }

    /// Waits until the connection has ended.
    pub(crate) async fn wait_done(&self) {
        let mut rx = self.done_tx.subscribe();
        let _ = rx.wait_for(|d| *d).await;
    }

    /// Sends a frame (an object with `op`) and waits for its answer, at
    /// most `timeout`. An `error` answer is returned as the typed error.
    pub(crate) async fn call(&self, frame: Map<String, Value>, timeout: Duration) -> Result<Value> {
        self.call_hook(frame, None, timeout).await
    }

    /// `call` of a subscribe frame: the reader registers `sub` under its
    /// new id before it reads the next frame, so no delivery is missed.
    pub(crate) async fn call_sub(&self, frame: Map<String, Value>, sub: Arc<SubShared>, timeout: Duration) -> Result<Value> {
        self.call_hook(frame, Some(sub), timeout).await
    }

    async fn call_hook(&self, mut frame: Map<String, Value>, sub: Option<Arc<SubShared>>, timeout: Duration) -> Result<Value> {
        let id = self.next_id();
        frame.insert("id".into(), Value::String(id.clone()));
        let text = serde_json::to_string(&frame).expect("a frame encodes");
        // Pings are not held to the bound: they find a server that stopped reading.
        let len = text.len();
        if frame.get("op").and_then(Value::as_str) != Some("ping") && self.out_bytes.load(Ordering::Acquire) + len > MAX_BUFFERED_BYTES {
            let mut details = Map::new();
            details.insert("maxBufferedBytes".into(), json!(MAX_BUFFERED_BYTES));
            return Err(Error::with_details(
                "RATE_LIMITED",
                format!("{} MiB of frames wait unsent (the server is not reading): the call was not sent", MAX_BUFFERED_BYTES >> 20),
                details,
            ));
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut p = self.pending.lock().unwrap();
            if self.is_dead() {
                return Err(self.failed());
            }
            p.insert(id.clone(), Pending::One(tx, sub));
        }
        let _forget = Forget { conn: self, id: &id };
        self.out_bytes.fetch_add(len, Ordering::AcqRel);
        if self.out.send(Out::Text(text)).is_err() {
            return Err(self.failed());
        }
        let ans = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(r)) => r?,
            Ok(Err(_)) => return Err(self.failed()),
            Err(_) => return Err(Error::new("REQUEST_TIMEOUT", format!("no answer within {timeout:?}"))),
        };
        if ans.get("op").and_then(Value::as_str) == Some("error") {
            return Err(match ans.get("error") {
                Some(e) if e.is_object() => Error::from_wire(e),
                _ => Error::protocol("an error frame without an error object"),
            });
        }
        Ok(ans)
    }

    /// Queues a publish for the writer: `json` is the message, `data`
    /// where its data is in it (see `data_span`).
    pub(crate) fn publish(&self, json: String, data: Option<Range<usize>>, slot: PubSlot) -> Result<oneshot::Receiver<Result<Decision>>> {
        let (tx, rx) = oneshot::channel();
        if self.is_dead() {
            return Err(self.failed());
        }
        self.out.send(Out::Publish(PubItem { json, data, tx, _slot: slot })).map_err(|_| self.failed())?;
        Ok(rx)
    }

    /// Ends a server subscription that no subscription owns (its subscribe
    /// call gave up before the answer, or it was unsubscribed while the
    /// answer was on its way): sends it an unsubscribe, once, in the
    /// background. What it delivered meanwhile was left unanswered, so the
    /// server gives it back without an attempt spent.
    ///
    /// `bounded` (a server subscription only a delivery names): a server
    /// (or anything writing on the connection) may name any number of
    /// them, so at most [`MAX_ORPHAN_ENDS`] of their unsubscribes are in
    /// flight, each forgotten once answered (as in the Go client); beyond,
    /// the delivery is left unanswered, for the server's ack wait. A
    /// subscribe answered after its subscription ended is always ended.
    pub(crate) fn end_orphan(self: &Arc<Self>, sid: &str, bounded: bool) {
        if self.is_dead() {
            return;
        }
        {
            let mut o = self.orphans.lock().unwrap();
            if o.contains(sid) || (bounded && o.len() >= MAX_ORPHAN_ENDS) {
                return;
            }
            o.insert(sid.to_string());
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.orphans.lock().unwrap().remove(sid);
            return;
        };
        let (c, sid) = (self.clone(), sid.to_string());
        rt.spawn(async move {
            let f = json!({"op": "unsubscribe", "sub": sid});
            let _ = c.call(f.as_object().cloned().unwrap_or_default(), c.call_timeout).await;
            // The server sends no deliver of it after its answer.
            c.orphans.lock().unwrap().remove(&sid);
        });
    }

    /// Closes the connection normally (1000) after what is queued.
    pub(crate) fn close(&self) {
        let _ = self.out.send(Out::Close);
    }

    /// Drops the connection at once (a keepalive that got no answer).
    pub(crate) fn kill(&self, reason: &str) {
        self.kill_reason.lock().unwrap().get_or_insert_with(|| reason.to_string());
        let _ = self.kill_tx.send_replace(true);
    }

    fn end(&self, err: Error) -> bool {
        let pending = {
            let mut p = self.pending.lock().unwrap();
            if self.dead.swap(true, Ordering::AcqRel) {
                return false;
            }
            *self.ended.lock().unwrap() = Some(err.clone());
            std::mem::take(&mut *p)
        };
        for (_, p) in pending {
            match p {
                Pending::One(tx, _) => {
                    let _ = tx.send(Err(err.clone()));
                }
                Pending::Batch(items) => {
                    for p in items {
                        let _ = p.tx.send(Err(err.clone()));
                    }
                }
            }
        }
        let _ = self.done_tx.send_replace(true);
        let _ = self.kill_tx.send_replace(true);
        true
    }

    /// A connection to nowhere, for tests of what holds one: frames sent
    /// on it go nowhere; `lose` ends it.
    #[cfg(test)]
    pub(crate) fn detached() -> Arc<Conn> {
        Conn::new(mpsc::unbounded_channel().0, mpsc::unbounded_channel().0, Duration::from_secs(1))
    }

    /// A connection that sends its frames to `out` and tells `pub_done`
    /// each time a publish frame is answered (a place in the writer's
    /// window of publish frames frees).
    fn new(out: mpsc::UnboundedSender<Out>, pub_done: mpsc::UnboundedSender<()>, call_timeout: Duration) -> Arc<Conn> {
        Arc::new(Conn {
            out,
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            ended: Mutex::new(None),
            dead: AtomicBool::new(false),
            done_tx: watch::channel(false).0,
            kill_tx: watch::channel(false).0,
            kill_reason: Mutex::new(None),
            subs: Mutex::new(HashMap::new()),
            orphans: Mutex::new(HashSet::new()),
            call_timeout,
            max_frame: AtomicU64::new(1 << 20),
            pub_done,
            out_bytes: std::sync::atomic::AtomicUsize::new(0),
            max_read: crate::session::DEFAULT_MAX_FRAME_BYTES,
            wrote: Arc::default(),
        })
    }

    #[cfg(test)]
    pub(crate) fn lose(&self) {
        self.end(Error::transport("SESSION_CLOSED", "lost"));
    }

    fn take_pending(&self, re: &str) -> Option<Pending> {
        self.pending.lock().unwrap().remove(re)
    }
}

/// The decision `v` on the publish `p`, read as Go reads it
/// ([`read_decision`](crate::message::read_decision); `at`: its slot in a
/// `decisions` answer). Publish frames ask for brief answers: an accepted
/// message without data gets the data sent, parsed from the text sent as
/// the server's would be (`{}` when the message had none). An answer that
/// carries data (a duplicate, whose data is the original's; a server that
/// ignores brief) keeps it.
fn decision_of(v: &Value, p: &PubItem, at: crate::message::SlotAt) -> Result<Decision> {
    let mut d = crate::message::read_decision(v, at)?;
    if d.status == Status::Accepted && v.get("message").and_then(|m| m.get("data")).is_none() {
        d.message.data = match &p.data {
            Some(r) => serde_json::from_str(&p.json[r.clone()]).map_err(|e| Error::protocol(format!("the data sent: {e}")))?,
            None => Value::Object(Map::new()),
        };
    }
    Ok(d)
}

/// Resolves the publishes one frame carried with its answer `f`: an error
/// frame fails them all with its error; a lone publish's `decision` and
/// each slot of a batch's `decisions` are read as Go reads them (see
/// [`decision_of`]), a slot that does not read failing its own publish
/// alone. A `decisions` answer of another number of results than the
/// messages sent cannot be told to them: each publish fails `BAD_FRAME`,
/// saying that its message may have been accepted, as any other answer.
fn answer_batch(items: Vec<PubItem>, f: &Value) {
    let n = items.len();
    match f.get("op").and_then(Value::as_str) {
        Some("error") => {
            let e = f.get("error").map(Error::from_wire).unwrap_or_else(|| Error::protocol("an error frame without an error"));
            for p in items {
                let _ = p.tx.send(Err(e.clone()));
            }
        }
        Some("decision") if n == 1 => {
            // The decision's own members; an error frame's `error` is no
            // member of a decision.
            let mut d = Map::new();
            for k in ["status", "message"] {
                if let Some(v) = f.get(k) {
                    d.insert(k.into(), v.clone());
                }
            }
            for p in items {
                let r = decision_of(&Value::Object(d.clone()), &p, None);
                let _ = p.tx.send(r);
            }
        }
        Some("decisions") if f.get("results").and_then(Value::as_array).is_some_and(|r| r.len() == n) => {
            let results = f["results"].as_array().unwrap();
            for (i, (p, slot)) in items.into_iter().zip(results).enumerate() {
                let r = decision_of(slot, &p, Some((i, n)));
                let _ = p.tx.send(r);
            }
        }
        op => {
            let said =
                op.map_or_else(|| "a frame without an op".to_string(), |op| format!("{:?}", op.chars().take(64).collect::<String>()));
            let what = if n == 1 {
                "the message may have been accepted".to_string()
            } else {
                format!("each of the {n} messages may have been accepted")
            };
            let e = Error::protocol(format!("the server answered a publish with {said}, which does not answer it: {what}"));
            for p in items {
                let _ = p.tx.send(Err(e.clone()));
            }
        }
    }
}

fn close_error(frame: Option<&CloseFrame<'_>>) -> Error {
    match frame {
        Some(f) if f.code == CloseCode::Away => Error::transport("SHUTTING_DOWN", "the server is shutting down"),
        // The server's refusal, as its code (UNAUTHENTICATED: the credential
        // refused when the server checked it again): the calls waiting fail
        // with it, as an error frame would fail them.
        Some(f) if f.code == CloseCode::Policy && crate::error::is_server_code(&f.reason) => {
            let mut e = Error::new(&f.reason, format!("the server closed the connection (1008: {})", f.reason));
            e.details.insert("closeCode".into(), json!(1008));
            e
        }
        Some(f) => Error::transport("SESSION_CLOSED", format!("the server closed the connection ({}: {})", u16::from(f.code), f.reason)),
        None => Error::transport("SESSION_CLOSED", "the server closed the connection"),
    }
}

async fn reader(conn: Arc<Conn>, inner: Weak<Inner>, mut stream: futures_util::stream::SplitStream<Ws>) {
    let mut kill = conn.kill_tx.subscribe();
    let err = loop {
        let msg = tokio::select! {
            m = stream.next() => m,
            _ = kill.wait_for(|k| *k) => {
                let why = conn.kill_reason.lock().unwrap().clone().unwrap_or_else(|| "the connection was dropped".into());
                break Error::transport("SESSION_CLOSED", why);
            }
        };
        let text = match msg {
            Some(Ok(WsMessage::Text(t))) => t,
            Some(Ok(WsMessage::Binary(_))) => {
                report(&inner, Error::protocol("a binary frame"));
                continue;
            }
            Some(Ok(WsMessage::Close(f))) => break close_error(f.as_ref()),
            Some(Ok(_)) => continue,
            Some(Err(tokio_tungstenite::tungstenite::Error::Capacity(e))) => {
                let mut err = Error::transport(
                    "SESSION_CLOSED",
                    format!("a frame larger than max_frame_bytes ({} bytes) ended the connection: {e}", conn.max_read),
                );
                err.details.insert("maxFrameBytes".into(), json!(conn.max_read));
                break err;
            }
            Some(Err(e)) => break Error::transport("SESSION_CLOSED", format!("the connection failed: {e}")),
            None => break Error::transport("SESSION_CLOSED", "the connection ended"),
        };
        let f: Value = match parse_frame(text.as_bytes()) {
            Ok(v @ Value::Object(_)) => v,
            r => {
                let shown: String = text.chars().take(80).collect();
                let why = r.err().map(|e| format!(" ({e})")).unwrap_or_default();
                report(&inner, Error::protocol(format!("a frame that is not a JSON object{why}: {shown:?}")));
                continue;
            }
        };
        if f.get("re").is_some_and(|re| !re.is_string()) {
            // No call's id (the client's ids are strings): neither an
            // answer nor a push.
            report(&inner, Error::protocol("a frame whose re is not a string"));
            continue;
        }
        if let Some(re) = f.get("re").and_then(Value::as_str) {
            match conn.take_pending(re) {
                Some(Pending::One(tx, sub)) => {
                    let mut refused = None;
                    if let (Some(sub), Some("subscribed"), Some(sid)) =
                        (sub, f.get("op").and_then(Value::as_str), f.get("sub").and_then(Value::as_str))
                    {
                        let held = conn.subs.lock().unwrap().get(sid).is_some_and(|o| !Arc::ptr_eq(o, &sub));
                        if held {
                            // An id another subscription of this connection
                            // holds: taking it would hand that one's
                            // deliveries (and its acks) to this one. Its
                            // owner keeps it; the subscribe fails, and no
                            // unsubscribe is sent, which would end the owner's.
                            refused =
                                Some(Error::protocol(format!("a subscribed answer naming {sid:?}, which another subscription holds")));
                        } else if sub.is_stopping() || inner.upgrade().is_none_or(|i| i.is_closing()) {
                            // Unsubscribed while the answer was on its way,
                            // or the session's close() has begun: not bound,
                            // so no delivery reaches its handler; the
                            // subscribe sees it stopped and ends its server
                            // subscription, and fails SESSION_CLOSED.
                            sub.stop();
                            conn.end_orphan(sid, false);
                        } else {
                            sub.subscribed(&f);
                            conn.subs.lock().unwrap().insert(sid.to_string(), sub);
                        }
                    }
                    let _ = tx.send(refused.map_or(Ok(f), Err));
                }
                Some(Pending::Batch(items)) => {
                    answer_batch(items, &f);
                    let _ = conn.pub_done.send(());
                }
                None => {
                    // A subscribe whose caller gave up: its subscription has no owner.
                    if let (Some("subscribed"), Some(sid)) = (f.get("op").and_then(Value::as_str), f.get("sub").and_then(Value::as_str)) {
                        conn.end_orphan(sid, false);
                    }
                }
            }
            continue;
        }
        match f.get("op").and_then(Value::as_str) {
            Some("deliver") => deliver(&conn, &inner, &f, f.get("message"), f.get("attempt"), None),
            Some("deliver_batch") => match f.get("deliveries").and_then(Value::as_array) {
                Some(ds) => {
                    for (i, d) in ds.iter().enumerate() {
                        deliver(&conn, &inner, &f, d.get("message"), d.get("attempt"), Some(i));
                    }
                }
                None => report(&inner, refused("a deliver_batch without deliveries", &json!({"op": "deliver_batch"}))),
            },
            Some("unsubscribed") => {
                let sid = f.get("sub").and_then(Value::as_str).unwrap_or("");
                let sub = conn.subs.lock().unwrap().remove(sid);
                if let Some(sub) = sub {
                    let err = f.get("error").map(Error::from_wire);
                    sub.end(err);
                }
            }
            Some("error") => report(&inner, f.get("error").map(Error::from_wire).unwrap_or_else(|| Error::protocol("an error frame"))),
            _ => report(&inner, Error::protocol(format!("an unexpected frame: {}", f.get("op").unwrap_or(&Value::Null)))),
        }
    };
    conn.end(err.clone());
    if let Some(inner) = inner.upgrade() {
        inner.conn_lost(&conn, err);
    }
}

/// The `BAD_FRAME` of a refused delivery, its `details` naming where it
/// was (`at`: `op`, and `index` for a deliver_batch's entry), as the
/// Python and TypeScript clients' reports do.
fn refused(why: &str, at: &Value) -> Error {
    let mut e = Error::protocol(why);
    if let Value::Object(m) = at {
        e.details = m.clone();
    }
    e
}

/// Hands over the delivery of `message` (entry `index` of a deliver_batch
/// `f`; `None`: the deliver frame `f`'s), or reports why it cannot.
fn deliver(conn: &Arc<Conn>, inner: &Weak<Inner>, f: &Value, message: Option<&Value>, attempt: Option<&Value>, index: Option<usize>) {
    let at = match index {
        Some(i) => json!({"op": "deliver_batch", "index": i}),
        None => json!({"op": "deliver"}),
    };
    let Some(sid) = f.get("sub").and_then(Value::as_str) else {
        report(inner, refused("a delivery whose sub is not a string", &at));
        return;
    };
    let sub = conn.subs.lock().unwrap().get(sid).cloned();
    let Some(sub) = sub else {
        // A server subscription the client does not know: end it. The
        // delivery is left unanswered, so it goes back without an attempt spent.
        if !sid.is_empty() {
            conn.end_orphan(sid, true);
        }
        return;
    };
    // Each refusal names the message too, when it has a string id, as the
    // Python and TypeScript clients' reports do.
    let mut at = at;
    if let Some(id) = message.and_then(|m| m.get("id")).and_then(Value::as_str) {
        at["messageId"] = json!(id);
    }
    let Some(attempt) = attempt_of(attempt) else {
        // Left unanswered, as one without a valid message: the server's
        // ack wait gives it back.
        sub.report(refused("a delivery whose attempt is not an integer of 1 to 2^31-1", &at));
        return;
    };
    match message.filter(|m| m.is_object()).map(|m| m.get("sequence")) {
        // No broker's: it numbers every message it stores from 1 and
        // writes the number into every delivery (each read from the
        // log). An answer naming 0, or none, names no sequence, and would
        // settle whichever message holds the id: left unanswered, as the
        // Python and TypeScript clients leave it, for the server's ack wait.
        Some(Some(s)) if s.as_u64() == Some(0) => {
            sub.report(refused("a delivery whose sequence is 0, no broker's (it numbers messages from 1)", &at));
            return;
        }
        Some(None | Some(Value::Null)) => {
            sub.report(refused("a delivery without a sequence, no broker's (it numbers every message it stores)", &at));
            return;
        }
        _ => {}
    }
    match message.map(Message::deserialize) {
        // No answer could name it: left unanswered, as the Python and
        // TypeScript clients leave it.
        Some(Ok(m)) if m.id.is_empty() => sub.report(refused("a delivery whose message id is empty", &at)),
        Some(Ok(m)) => {
            if !sub.dispatch(conn.clone(), sid, m, attempt) {
                // Ended, yet its server subscription still delivers (a
                // subscribe given up just after its answer came): end that.
                conn.subs.lock().unwrap().remove(sid);
                conn.end_orphan(sid, false);
            }
        }
        _ => sub.report(refused("a delivery without a valid message", &at)),
    }
}

/// A delivery's `attempt` as a receive answer's attempts are read (see
/// [`crate::message::attempt_held`]): a JSON integer of 1 to
/// [`MAX_ATTEMPT`](crate::MAX_ATTEMPT), 2^31-1 (`1.0`, `1e0`, `"1"` and
/// `true` are not). The broker writes one into every delivery, counted
/// from 1. None refuses the delivery as a bad frame: absent or null (no
/// broker's; it was read as 0, the Go zero value), 0, a negative, not an
/// integer, or one beyond 2^31-1 (it was held at `u32::MAX`), as the
/// Python and TypeScript clients refuse it.
fn attempt_of(v: Option<&Value>) -> Option<u32> {
    v.and_then(Value::as_u64).and_then(|a| u32::try_from(a).ok()).filter(|a| (1..=crate::MAX_ATTEMPT).contains(a))
}

fn report(inner: &Weak<Inner>, e: Error) {
    if let Some(inner) = inner.upgrade() {
        inner.report(e);
    }
}

/// The frame of `n` publishes whose messages, comma-separated, are `body`:
/// a publish for one, a publish_batch for more. Both ask for brief answers.
fn publish_frame(id: &str, n: usize, body: &str) -> String {
    if n == 1 {
        format!(r#"{{"op":"publish","id":"{id}","brief":true,"message":{body}}}"#)
    } else {
        format!(r#"{{"op":"publish_batch","id":"{id}","brief":true,"messages":[{body}]}}"#)
    }
}

async fn writer(
    conn: Arc<Conn>,
    mut sink: futures_util::stream::SplitSink<Ws, WsMessage>,
    mut rx: mpsc::UnboundedReceiver<Out>,
    mut pub_done: mpsc::UnboundedReceiver<()>,
    max_frames: usize,
) {
    let mut queue: VecDeque<PubItem> = VecDeque::new();
    let mut in_flight = 0usize;
    // The publish frames on the wire, in the order sent, with when each
    // times out (call_timeout after it left: so in order too).
    let mut deadlines: VecDeque<(tokio::time::Instant, String)> = VecDeque::new();
    let mut kill = conn.kill_tx.subscribe();
    'outer: loop {
        {
            // Forget the frames answered already (the reader took them).
            let p = conn.pending.lock().unwrap();
            while deadlines.front().is_some_and(|(_, id)| !p.contains_key(id)) {
                deadlines.pop_front();
            }
        }
        let deadline = deadlines.front().map(|(at, _)| *at);
        let expire = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let first = tokio::select! {
            o = rx.recv() => o,
            Some(()) = pub_done.recv() => { in_flight = in_flight.saturating_sub(1); None }
            _ = expire => {
                // A publish frame the server did not answer within
                // call_timeout: its publishes fail as any call does, and
                // it gives up its in-flight slot, so the publishes after
                // it are not held up (a late answer finds no one).
                let now = tokio::time::Instant::now();
                while let Some((at, id)) = deadlines.front() {
                    if *at > now {
                        break;
                    }
                    if let Some(Pending::Batch(items)) = conn.take_pending(id) {
                        in_flight = in_flight.saturating_sub(1);
                        let e = Error::new("REQUEST_TIMEOUT", format!("no decision within {:?}", conn.call_timeout));
                        for p in items {
                            let _ = p.tx.send(Err(e.clone()));
                        }
                    }
                    deadlines.pop_front();
                }
                None
            }
            _ = kill.wait_for(|k| *k) => break,
        };
        let mut items: Vec<Out> = Vec::new();
        if let Some(o) = first {
            items.push(o);
        }
        while items.len() < 4096 {
            match rx.try_recv() {
                Ok(o) => items.push(o),
                Err(_) => break,
            }
        }
        while let Ok(()) = pub_done.try_recv() {
            in_flight = in_flight.saturating_sub(1);
        }
        let mut wrote = false;
        for o in items {
            match o {
                Out::Text(t) => {
                    let len = t.len();
                    let fed = written(&conn, &mut kill, sink.feed(WsMessage::Text(t))).await;
                    conn.out_bytes.fetch_sub(len, Ordering::AcqRel);
                    if !fed {
                        break 'outer;
                    }
                    wrote = true;
                }
                Out::Publish(p) => queue.push_back(p),
                Out::Close => {
                    let bye = sink.send(WsMessage::Close(Some(CloseFrame { code: CloseCode::Normal, reason: "".into() })));
                    let _ = tokio::time::timeout(CLOSE_WAIT, unless_killed(&mut kill, bye)).await;
                    break 'outer;
                }
            }
        }
        while in_flight < max_frames && !queue.is_empty() {
            // By default one publish frame is in flight at a time: what
            // queued meanwhile leaves together, and sequences follow the
            // publish order (the server admits concurrent frames in any order).
            let max_bytes = (conn.max_frame.load(Ordering::Relaxed) as usize / 2).clamp(4096, MAX_BATCH_BYTES);
            let id = conn.next_id();
            let mut items = Vec::new();
            let mut body = String::new();
            while let Some(p) = queue.front() {
                if !items.is_empty() && (items.len() >= MAX_PUBLISH_BATCH || body.len() + p.json.len() > max_bytes) {
                    break;
                }
                let p = queue.pop_front().unwrap();
                if !body.is_empty() {
                    body.push(',');
                }
                body.push_str(&p.json);
                items.push(p);
            }
            let text = publish_frame(&id, items.len(), &body);
            {
                let mut p = conn.pending.lock().unwrap();
                if conn.is_dead() {
                    drop(p);
                    for p in items {
                        let _ = p.tx.send(Err(conn.failed()));
                    }
                    break;
                }
                p.insert(id.clone(), Pending::Batch(items));
            }
            // A call_timeout too long to add (Duration::MAX: never) waits for ever.
            let now = tokio::time::Instant::now();
            let at = now.checked_add(conn.call_timeout).unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400));
            deadlines.push_back((at, id));
            in_flight += 1;
            if !written(&conn, &mut kill, sink.feed(WsMessage::Text(text))).await {
                break;
            }
            wrote = true;
        }
        if wrote && !written(&conn, &mut kill, sink.flush()).await {
            break;
        }
    }
    let err = conn.failed();
    for p in queue {
        let _ = p.tx.send(Err(err.clone()));
    }
    let _ = tokio::time::timeout(CLOSE_WAIT, unless_killed(&mut kill, sink.close())).await;
    conn.kill("the connection was closed");
}

/// `io`, a write on the socket, as [`unless_killed`], as long as it makes
/// progress: a server that stops reading (its socket buffers full) would
/// hold the writer, and every call and publish queued behind it, for as
/// long as the connection stays open, pings off. A write that wrote no
/// byte to the socket for a whole `call_timeout` (checked each
/// `call_timeout`: so it ends between one and two of them after the last
/// byte) drops the connection as a lost one; a large frame a server reads
/// slowly but steadily is written however long it takes in all, as in the
/// Go client (WithWriteTimeout).
async fn written<E>(
    conn: &Conn,
    kill: &mut watch::Receiver<bool>,
    io: impl std::future::Future<Output = std::result::Result<(), E>>,
) -> bool {
    let mut io = std::pin::pin!(io);
    let mut seen = conn.wrote.load(Ordering::Acquire);
    loop {
        match tokio::time::timeout(conn.call_timeout, unless_killed(kill, io.as_mut())).await {
            Ok(ok) => return ok,
            Err(_) => {
                let now = conn.wrote.load(Ordering::Acquire);
                if now != seen {
                    seen = now;
                    continue;
                }
                conn.kill(&format!("a write made no progress for {:?}: the server stopped reading", conn.call_timeout));
                return false;
            }
        }
    }
}

/// How long a closing connection waits to write its close frame.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// `io`, a write on the socket, unless the connection is dropped first
/// (`false` then, or when it fails): a server that stops reading fills the
/// socket's buffers, and the write would wait on them for ever, keeping
/// the publishes queued behind it from their answer.
async fn unless_killed<E>(kill: &mut watch::Receiver<bool>, io: impl std::future::Future<Output = std::result::Result<(), E>>) -> bool {
    tokio::select! {
        r = io => r.is_ok(),
        _ = kill.wait_for(|k| *k) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Signature;
    use serde_json::json;

    /// A 1008 whose reason is one of the server's stable codes (the
    /// credential refused when the server checked it again, as
    /// UNAUTHENTICATED) is that code, as an error frame would give it, not
    /// SESSION_CLOSED with the code in its message; any other reason, or
    /// another close, is SESSION_CLOSED as before.
    #[test]
    fn a_policy_close_with_a_code_is_that_code() {
        let close = |code: CloseCode, reason: &'static str| close_error(Some(&CloseFrame { code, reason: reason.into() }));
        let e = close(CloseCode::Policy, "UNAUTHENTICATED");
        assert_eq!((e.code.as_str(), e.kind), ("UNAUTHENTICATED", ErrorKind::Unauthenticated), "{e:?}");
        assert!(e.message.contains("UNAUTHENTICATED"));
        assert_eq!(close(CloseCode::Policy, "GRANT_REVOKED").code, "GRANT_REVOKED");
        for (code, reason) in [
            (CloseCode::Policy, "write stalled"),
            (CloseCode::Policy, "unauthenticated"),
            (CloseCode::Policy, ""),
            (CloseCode::Normal, "UNAUTHENTICATED"),
        ] {
            let e = close(code, reason);
            assert_eq!((e.code.as_str(), e.kind), ("SESSION_CLOSED", ErrorKind::Transport), "{code:?} {reason:?}: {e:?}");
        }
    }

    /// The codes a close's reason is taken as are the server's
    /// (clients/conformance/codes.json), and none of the client's own.
    #[test]
    fn server_codes_are_codes_json() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../conformance/codes.json");
        let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let codes: Vec<&str> = v["codes"].as_array().unwrap().iter().map(|c| c["code"].as_str().unwrap()).collect();
        assert!(codes.len() > 50);
        for c in &codes {
            assert!(crate::error::is_server_code(c), "{c}");
        }
        assert_eq!(crate::error::SERVER_CODES.len(), codes.len());
        for c in ["BAD_FRAME", "TIMEOUT", "CLOSED", "", "unauthenticated"] {
            assert!(!crate::error::is_server_code(c), "{c}");
        }
    }

    /// data_span finds the data serde_json writes for a message, whatever
    /// its other members hold.
    #[test]
    fn data_span_is_the_data() {
        let tricky = r#"x","data":{"no":1},"y\"data\":[}]{"#;
        let full = Message {
            specversion: "1.0".into(),
            id: tricky.into(),
            type_: "data".into(),
            source: "\"data\":".into(),
            subject: "s".into(),
            time: "2026-01-01T00:00:00Z".into(),
            intent: tricky.into(),
            idempotency_key: "data\\".into(),
            classification: "c".into(),
            region: "uk".into(),
            data: Value::Null,
            signature: Some(Signature { kid: "k".into(), alg: "ed25519".into(), sig: tricky.into(), v: Some(2) }),
            reply_to: tricky.into(),
            correlation_id: "c".into(),
            reason: "r".into(),
            sequence: 7,
            contract_id: "ctr".into(),
            subject_id: "s".into(),
            schema_id: "x".into(),
            accepted_at: "t".into(),
            hops: 3,
        };
        let datas = [
            json!({"a": 1}),
            json!({}),
            json!([]),
            json!([1, [2, {"data": [3]}], "],}{\"\\"]),
            json!("a \"string\" with , } ] and \\"),
            json!("\\"),
            json!(1.5e300),
            json!(-0.0),
            json!(true),
            json!({"text": "café ✓ 😀 \n\u{1}", "data": {"data": null}}),
        ];
        for m in [full.clone(), Message::new("s", "t", "i")] {
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(data_span(&json), None, "{json}");
            for d in &datas {
                let m = Message { data: d.clone(), ..m.clone() };
                let json = serde_json::to_string(&m).unwrap();
                let span = data_span(&json).unwrap_or_else(|| panic!("no data in {json}"));
                assert_eq!(&json[span], serde_json::to_string(d).unwrap(), "{json}");
            }
        }
    }

    /// The attempts a receive answer may name, and only those (see
    /// `attempt_of`).
    #[test]
    fn a_delivered_attempt_is_an_integer_of_1_to_2_31_minus_1() {
        let read = |t: &str| attempt_of(Some(&parse_frame(t.as_bytes()).unwrap()));
        for (t, want) in [("1", 1), ("2", 2), ("2147483647", crate::MAX_ATTEMPT)] {
            assert_eq!(read(t), Some(want), "{t}");
        }
        assert_eq!(attempt_of(None), None);
        for t in [
            "0",
            "null",
            "-1",
            "-0",
            "1.5",
            "1.0",
            "1e0",
            "\"1\"",
            "true",
            "[1]",
            "{}",
            "2147483648",
            "4294967295",
            "4294967297",
            "9223372036854775807",
            "18446744073709551615",
        ] {
            assert_eq!(read(t), None, "{t}");
        }
    }

    #[test]
    fn publish_frames_ask_for_brief_answers() {
        let one = publish_frame("7", 1, r#"{"subject":"s"}"#);
        assert_eq!(one, r#"{"op":"publish","id":"7","brief":true,"message":{"subject":"s"}}"#);
        let two = publish_frame("8", 2, r#"{"subject":"s"},{"subject":"t"}"#);
        assert_eq!(two, r#"{"op":"publish_batch","id":"8","brief":true,"messages":[{"subject":"s"},{"subject":"t"}]}"#);
        for f in [one, two] {
            assert_eq!(serde_json::from_str::<Value>(&f).unwrap()["brief"], json!(true));
        }
    }

    /// An accepted message without data gets the data sent; one with data,
    /// and a duplicate, keep theirs.
    #[test]
    fn decision_puts_the_data_sent_back() {
        let item = |m: &Message| {
            let json = serde_json::to_string(m).unwrap();
            PubItem { data: data_span(&json), json, tx: oneshot::channel().0, _slot: PubSlot::default() }
        };
        let sent = Message::new("s", "t", "i").with_data(json!({"text": "café \"q\"", "n": [1.5, null]}));
        let answer = |status: &str, data: Option<Value>| {
            let mut m = json!({"id": "msg_1", "subject": "s", "sequence": 3});
            if let Some(d) = data {
                m["data"] = d;
            }
            json!({"status": status, "message": m})
        };
        let d = decision_of(&answer("accepted", None), &item(&sent), None).unwrap();
        assert_eq!((d.status, d.message.sequence, &d.message.data), (Status::Accepted, 3, &sent.data));
        let d = decision_of(&answer("accepted", None), &item(&Message::new("s", "t", "i")), None).unwrap();
        assert_eq!(d.message.data, json!({}));
        let d = decision_of(&answer("accepted", Some(json!({"server": 1}))), &item(&sent), None).unwrap();
        assert_eq!(d.message.data, json!({"server": 1}));
        let d = decision_of(&answer("duplicate", Some(json!({"original": 1}))), &item(&sent), None).unwrap();
        assert_eq!((d.status, d.message.data), (Status::Duplicate, json!({"original": 1})));
    }
}
