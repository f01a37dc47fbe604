//! How subscriptions end while deliveries wait in the client: a stream
//! dropped or unsubscribed with deliveries buffered or one held by its
//! reader, the session closed by a stream's reader, unsubscribe and close
//! called from inside a handler, a close with deliveries queued behind a
//! running handler, an unsubscribe racing a resubscription, a subscribe
//! given up before its answer, a connection dropped while a stream or a
//! handler has deliveries queued, a subscription ended by the server.
//!
//! The consumer sessions reach a real `pigeon serve` through a WebSocket
//! proxy the test runs: it records the frames each way, drops the
//! connections on demand and holds back the server's frames from a given op
//! on. Every wait is bounded (`within`, `until`), so a hang fails its case
//! instead of stalling the suite; the cases run one after the other against
//! one server, each bounded as a whole too.

mod common;

use common::*;
use futures_util::{SinkExt, StreamExt};
use pigeon_client::{Ack, ConnectOptions, ErrorKind, HandlerError, Session, SubscribeOptions, Subscription};
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::server::{Callback, ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message as W;

/// How long one step may take before the case calls it a hang.
const BOUND: Duration = Duration::from_secs(5);

const NOTES: &str = "notifications.send";

type Case = Pin<Box<dyn Future<Output = ()> + Send>>;

#[test]
fn subscription_endings() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(run_all());
}

async fn run_all() {
    let server = Arc::new(Server::start(""));
    let s = || server.clone();
    let mut failures = Vec::new();
    let mut ran = 0;
    let cases: Vec<(&str, Case)> = vec![
        ("stream.unsubscribe_gives_back_the_buffered", Box::pin(stream_unsubscribe_buffered(s()))),
        ("stream.dropped_with_deliveries_buffered", Box::pin(stream_dropped(s()))),
        ("stream.unsubscribe_while_the_reader_holds_one", Box::pin(stream_unsubscribe_holding(s()))),
        ("stream.close_by_the_reader_holding_one", Box::pin(stream_close_holding(s()))),
        ("stream.at_most_once_unsubscribe_drops_the_buffered", Box::pin(stream_at_most_once_unsubscribe(s()))),
        ("stream.ended_by_the_server", Box::pin(stream_ended_by_server(s()))),
        ("stream.connection_dropped_then_recovered", Box::pin(stream_connection_dropped(s()))),
        ("stream.connection_dropped_for_good", Box::pin(stream_connection_lost(s()))),
        ("handler.close_with_deliveries_queued", Box::pin(handler_close_queued(s()))),
        ("handler.unsubscribe_from_inside", Box::pin(handler_unsubscribe_inside(s()))),
        ("handler.close_from_inside", Box::pin(handler_close_inside(s()))),
        ("handler.connection_dropped_with_deliveries_queued", Box::pin(handler_connection_dropped(s()))),
        ("handler.resume_redelivers_a_lower_one_running_when_a_higher_was_acked", Box::pin(resume_lower_running(s()))),
        ("unsubscribe_racing_a_resubscription", Box::pin(unsubscribe_racing_resubscribe(s()))),
        ("unsubscribe_waiting_for_a_handler_across_a_reconnection", Box::pin(unsubscribe_across_reconnect(s()))),
        ("subscribe_given_up_before_its_answer", Box::pin(subscribe_given_up(s()))),
    ];
    for (name, f) in cases {
        if let Ok(only) = std::env::var("PIGEON_CASES") {
            if !only.split(',').any(|x| name.contains(x)) {
                continue;
            }
        }
        ran += 1;
        let t = Instant::now();
        let outcome = run_case(f, Duration::from_secs(40)).await;
        match outcome {
            Ok(()) => println!("case {name} ... ok ({:?})", t.elapsed()),
            Err(e) => {
                println!("case {name} ... FAILED: {e}");
                failures.push(format!("{name}: {e}"));
            }
        }
    }
    drop(server);
    println!("{} passed, {} failed", ran - failures.len(), failures.len());
    assert!(failures.is_empty(), "failed cases:\n{}", failures.join("\n"));
}

// ---------- bounded waits ----------

/// `f`'s output; panics when it takes longer than [`BOUND`].
async fn within<F: Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(BOUND, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what} did not finish within {BOUND:?}"),
    }
}

/// Waits until `f` gives something, at most [`BOUND`].
async fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + BOUND;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {BOUND:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------- the proxy ----------

#[derive(Default)]
struct Frames {
    /// client → server, in the order forwarded
    sent: Vec<Value>,
    /// server → client, in the order forwarded
    received: Vec<Value>,
}

/// A WebSocket proxy in front of the server: it forwards the client's
/// Authorization header, records every text frame each way, drops its
/// connections on demand and, once told to hold from an op, holds that
/// server frame and every one after it on its connection until released.
struct Proxy {
    port: u16,
    frames: Arc<Mutex<Frames>>,
    kill: watch::Sender<u64>,
    hold: watch::Sender<Option<String>>,
}

impl Proxy {
    async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let frames: Arc<Mutex<Frames>> = Arc::default();
        let kill = watch::channel(0u64).0;
        let hold = watch::channel(None).0;
        let (f, k, h) = (frames.clone(), kill.clone(), hold.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(pipe(tcp, upstream, f.clone(), k.subscribe(), h.subscribe()));
            }
        });
        Proxy { port, frames, kill, hold }
    }

    fn url(&self) -> String {
        format!("ws://127.0.0.1:{}", self.port)
    }

    /// Drops every connection open now, without a close frame.
    fn drop_connections(&self) {
        self.kill.send_modify(|n| *n += 1);
    }

    /// Holds the next server frame whose op is `op`, and everything after it on its connection.
    fn hold_from(&self, op: &str) {
        self.hold.send_replace(Some(op.to_string()));
    }

    /// Forwards what was held, and holds nothing more.
    fn release(&self) {
        self.hold.send_replace(None);
    }

    fn sent(&self) -> Vec<Value> {
        self.frames.lock().unwrap().sent.clone()
    }

    fn received(&self) -> Vec<Value> {
        self.frames.lock().unwrap().received.clone()
    }
}

fn op_of(m: &W) -> Option<Value> {
    match m {
        W::Text(t) => serde_json::from_str(t).ok(),
        _ => None,
    }
}

/// The handshake callback of `pipe`: keeps the client's Authorization
/// header, to send it on upstream. A type of its own, not a closure: the
/// error type is tungstenite's (`ErrorResponse`, a whole HTTP response),
/// which clippy's `result_large_err` flags in a closure but not in the
/// trait's implementation.
struct KeepAuth(Arc<Mutex<Option<HeaderValue>>>);

impl Callback for KeepAuth {
    fn on_request(self, req: &Request, resp: Response) -> Result<Response, ErrorResponse> {
        *self.0.lock().unwrap() = req.headers().get("authorization").cloned();
        Ok(resp)
    }
}

async fn pipe(
    tcp: TcpStream,
    upstream: u16,
    frames: Arc<Mutex<Frames>>,
    mut kill: watch::Receiver<u64>,
    mut hold: watch::Receiver<Option<String>>,
) {
    let auth: Arc<Mutex<Option<HeaderValue>>> = Arc::default();
    let Ok(client) = tokio_tungstenite::accept_hdr_async(tcp, KeepAuth(auth.clone())).await else { return };
    let mut req = format!("ws://127.0.0.1:{upstream}/v1/ws").into_client_request().unwrap();
    if let Some(v) = auth.lock().unwrap().clone() {
        req.headers_mut().insert("authorization", v);
    }
    let Ok(up) = TcpStream::connect(("127.0.0.1", upstream)).await else { return };
    let Ok((server, _)) = tokio_tungstenite::client_async(req, up).await else { return };
    let (mut c_tx, mut c_rx) = client.split();
    let (mut s_tx, mut s_rx) = server.split();
    let mut held: Vec<W> = Vec::new();
    let mut holding = false;
    loop {
        tokio::select! {
            _ = kill.changed() => return,
            m = c_rx.next() => {
                let Some(Ok(m)) = m else { return };
                if let Some(v) = op_of(&m) {
                    frames.lock().unwrap().sent.push(v);
                }
                if s_tx.send(m).await.is_err() {
                    return;
                }
            }
            m = s_rx.next() => {
                let Some(Ok(m)) = m else { return };
                let v = op_of(&m);
                if !holding {
                    let op = v.as_ref().and_then(|v| v["op"].as_str().map(String::from));
                    holding = op.is_some() && hold.borrow().as_deref() == op.as_deref();
                }
                if holding {
                    held.push(m);
                    continue;
                }
                if let Some(v) = v {
                    frames.lock().unwrap().received.push(v);
                }
                if c_tx.send(m).await.is_err() {
                    return;
                }
            }
            r = hold.changed(), if holding => {
                if r.is_err() {
                    return;
                }
                if hold.borrow().is_none() {
                    holding = false;
                    for m in held.drain(..) {
                        if let Some(v) = op_of(&m) {
                            frames.lock().unwrap().received.push(v);
                        }
                        if c_tx.send(m).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    }
}

// ---------- frames ----------

fn ops<'a>(frames: &'a [Value], op: &'a str) -> impl Iterator<Item = (usize, &'a Value)> + 'a {
    frames.iter().enumerate().filter(move |(_, f)| f["op"] == op)
}

/// The message ids the ack frames name, in order.
fn acked(sent: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for (_, f) in ops(sent, "ack") {
        match f["messageIds"].as_array() {
            Some(ids) => out.extend(ids.iter().filter_map(|x| x.as_str().map(String::from))),
            None => out.extend(f["messageId"].as_str().map(String::from)),
        }
    }
    out
}

fn nacked(sent: &[Value]) -> Vec<String> {
    ops(sent, "nack").filter_map(|(_, f)| f["messageId"].as_str().map(String::from)).collect()
}

/// Where the first frame answering `id` (ack or nack) is in `sent`.
fn answer_at(sent: &[Value], id: &str) -> Option<usize> {
    sent.iter().position(|f| {
        (f["op"] == "ack" || f["op"] == "nack")
            && (f["messageId"] == id || f["messageIds"].as_array().is_some_and(|a| a.iter().any(|x| x == id)))
    })
}

/// Where the first unsubscribe frame is in `sent` (of `sid` when given).
fn unsubscribe_at(sent: &[Value], sid: Option<&str>) -> Option<usize> {
    ops(sent, "unsubscribe").find(|(_, f)| sid.is_none_or(|s| f["sub"] == s)).map(|(i, _)| i)
}

/// The message ids the server delivered through the proxy, in order.
fn delivered(received: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for f in received {
        match f["op"].as_str() {
            Some("deliver") => out.extend(f["message"]["id"].as_str().map(String::from)),
            Some("deliver_batch") => {
                for d in f["deliveries"].as_array().into_iter().flatten() {
                    out.extend(d["message"]["id"].as_str().map(String::from));
                }
            }
            _ => {}
        }
    }
    out
}

/// The `sub` of each subscribed answer the client received, in order.
fn subscribed(received: &[Value]) -> Vec<String> {
    ops(received, "subscribed").filter_map(|(_, f)| f["sub"].as_str().map(String::from)).collect()
}

/// Waits until the proxy passed every delivery of `ids` to the client, and
/// a little more for the client to queue them.
async fn until_delivered(p: &Proxy, ids: &[String]) {
    until("the deliveries reaching the client", || {
        let got = delivered(&p.received());
        ids.iter().all(|id| got.contains(id)).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(150)).await;
}

/// Waits until the client has sent an unsubscribe (of `sid` when given); the frames sent then.
async fn until_unsubscribe(p: &Proxy, what: &str, sid: Option<&str>) -> Vec<Value> {
    until(what, || {
        let sent = p.sent();
        unsubscribe_at(&sent, sid).map(|_| sent)
    })
    .await
}

/// The ops each way, for a failure's message.
fn summary(p: &Proxy) -> String {
    let brief = |fs: Vec<Value>| {
        fs.iter()
            .map(|f| match f["op"].as_str() {
                Some("deliver_batch") => format!("deliver_batch({})", f["deliveries"].as_array().map_or(0, |a| a.len())),
                Some(op) => op.to_string(),
                None => "?".into(),
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!("sent: {}; received: {}", brief(p.sent()), brief(p.received()))
}

// ---------- setup ----------

/// A work-queue group of its own, with a selector only this case's messages match.
struct WorkQueue {
    tag: String,
    group: String,
}

impl WorkQueue {
    fn new() -> WorkQueue {
        WorkQueue { tag: format!("t{}", nonce().replace('-', "")), group: format!("g-{}", nonce()) }
    }

    fn opts(&self) -> SubscribeOptions {
        SubscribeOptions::default().group(&self.group).selector(format!("/templateId={}", self.tag))
    }

    async fn publish(&self, orders: &Session, n: usize) -> Vec<String> {
        let mut ids = Vec::new();
        for _ in 0..n {
            ids.push(orders.publish(&notification(&self.tag)).await.unwrap().id().to_string());
        }
        ids
    }
}

/// Reconnects after 50 ms (at most 200 ms between tries).
fn quick() -> ConnectOptions {
    ConnectOptions { backoff: (Duration::from_millis(50), Duration::from_millis(200)), ..ConnectOptions::default() }
}

async fn via(p: &Proxy, token: &str, subjects: &[&str], opts: ConnectOptions) -> Session {
    Session::connect(&p.url(), token, subjects, opts).await.unwrap_or_else(|e| panic!("connect {token} through the proxy: {e}"))
}

/// The consumer (through a proxy) and the publisher of a work-queue case.
async fn work_queue_case(srv: &Server, opts: ConnectOptions) -> (Proxy, Session, Session, WorkQueue) {
    let p = Proxy::start(srv.port).await;
    let consumer = via(&p, "notifier-token", &[NOTES], opts).await;
    let orders = connect(srv, "orders-token", &[NOTES]).await;
    (p, consumer, orders, WorkQueue::new())
}

/// Another consumer of the group: the attempts it sees of each message,
/// once every id of `want` came (and 300 ms more, for anything else).
async fn redelivered(srv: &Server, wq: &WorkQueue, want: &[String]) -> HashMap<String, Vec<u32>> {
    let other = connect(srv, "notifier-token", &[NOTES]).await;
    let seen: Arc<Mutex<HashMap<String, Vec<u32>>>> = Arc::default();
    let s2 = seen.clone();
    other
        .subscribe(NOTES, wq.opts().max_in_flight(8), move |d| {
            let s = s2.clone();
            async move {
                s.lock().unwrap().entry(d.message.id.clone()).or_default().push(d.attempt);
                Ok(())
            }
        })
        .await
        .unwrap();
    let all = eventually(BOUND, || {
        let s = seen.lock().unwrap();
        want.iter().all(|id| s.contains_key(id))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    within("closing the other consumer", other.close()).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert!(all, "the messages given back did not all reach another consumer: want {want:?}, got {seen:?}");
    seen
}

/// Checks what another consumer of the group got: `fresh` with attempt 1
/// (given back without an attempt spent), `again` with attempt 2, and none
/// of `kept` (answered for good).
async fn check_group(srv: &Server, wq: &WorkQueue, fresh: &[String], again: &[String], kept: &[String]) {
    let want: Vec<String> = fresh.iter().chain(again).cloned().collect();
    let seen = redelivered(srv, wq, &want).await;
    for id in fresh {
        assert_eq!(seen[id], vec![1], "{id}: not given back at once without an attempt spent ({seen:?})");
    }
    for id in again {
        assert_eq!(seen[id], vec![2], "{id}: not redelivered once after its nack ({seen:?})");
    }
    for id in kept {
        assert!(!seen.contains_key(id), "{id} was answered, yet it came again ({seen:?})");
    }
}

async fn close_all(sessions: &[&Session]) {
    for s in sessions {
        // Bounded, unchecked: a failure of the case itself is the one to report.
        let _ = tokio::time::timeout(BOUND, s.close()).await;
    }
}

fn next_of(sub: &mut Subscription) -> impl Future<Output = Option<pigeon_client::Result<pigeon_client::Delivery>>> + '_ {
    sub.next()
}

// ---------- stream subscriptions ----------

/// Six deliveries reach a stream; its reader acks the first and
/// unsubscribes. The other five, buffered, are not handed out after the
/// unsubscribe; they go back to the group with the unsubscribe, unanswered.
async fn stream_unsubscribe_buffered(srv: Arc<Server>) {
    let (p, consumer, orders, wq) = work_queue_case(&srv, ConnectOptions::default()).await;
    let mut sub = consumer.subscribe_stream(NOTES, wq.opts()).await.unwrap();
    let ids = wq.publish(&orders, 6).await;
    until_delivered(&p, &ids).await;
    let d = within("the first delivery", next_of(&mut sub)).await.expect("a delivery").unwrap();
    assert_eq!(d.message.id, ids[0]);
    within("the ack", d.ack()).await.unwrap();
    within("unsubscribe", sub.unsubscribe()).await.unwrap();
    assert!(sub.is_done());
    let after = within("next() after unsubscribe", next_of(&mut sub)).await;
    assert!(after.is_none(), "handed out after unsubscribe: {after:?}");
    let sent = p.sent();
    assert_eq!(acked(&sent), vec![ids[0].clone()]);
    assert_eq!(nacked(&sent), Vec::<String>::new());
    check_group(&srv, &wq, &ids[1..], &[], &ids[..1]).await;
    close_all(&[&consumer, &orders]).await;
}

/// The reader takes the first of six deliveries, leaves it unanswered and
/// drops the stream: the delivery it held is nacked, the stream's
/// subscription ends on the server, and the five never handed out go back
/// unanswered.
async fn stream_dropped(srv: Arc<Server>) {
    let (p, consumer, orders, wq) = work_queue_case(&srv, ConnectOptions::default()).await;
    let mut sub = consumer.subscribe_stream(NOTES, wq.opts()).await.unwrap();
    let ids = wq.publish(&orders, 6).await;
    until_delivered(&p, &ids).await;
    let first = within("the first delivery", next_of(&mut sub)).await.map(|d| d.unwrap().message.id.clone());
    drop(sub);
    assert_eq!(first.as_ref(), Some(&ids[0]));
    let sent = until_unsubscribe(&p, "the unsubscribe of the dropped stream", None).await;
    assert_eq!(acked(&sent), Vec::<String>::new());
    assert_eq!(nacked(&sent), vec![ids[0].clone()]);
    assert!(answer_at(&sent, &ids[0]) < unsubscribe_at(&sent, None), "the nack before the unsubscribe: {sent:?}");
    check_group(&srv, &wq, &ids[1..], &ids[..1], &[]).await;
    close_all(&[&consumer, &orders]).await;
}

/// The reader takes the first of six deliveries and unsubscribes before it
/// answers it: unsubscribe does not wait for the delivery (the caller
/// holds it), the stream hands out nothing more, the ack still goes
/// through, and the unsubscribe follows it.
async fn stream_unsubscribe_holding(srv: Arc<Server>) {
    let (p, consumer, orders, wq) = work_queue_case(&srv, ConnectOptions::default()).await;
    let mut sub = consumer.subscribe_stream(NOTES, wq.opts()).await.unwrap();
    let ids = wq.publish(&orders, 6).await;
    until_delivered(&p, &ids).await;
    let d = within("the first delivery", next_of(&mut sub)).await.expect("a delivery").unwrap();
    assert_eq!(d.message.id, ids[0]);
    within("unsubscribe while holding a delivery", sub.unsubscribe()).await.unwrap();
    let after = within("next() after unsubscribe", next_of(&mut sub)).await;
    assert!(after.is_none(), "handed out after unsubscribe: {after:?}");
    within("the ack of the delivery held", d.ack()).await.expect("the delivery held across unsubscribe is acked");
    assert_eq!(within("the end of the subscription", sub.done()).await.map(|e| e.code), None);
    let sent = until_unsubscribe(&p, "the unsubscribe", None).await;
    assert_eq!(acked(&sent), vec![ids[0].clone()]);
    assert_eq!(nacked(&sent), Vec::<String>::new());
    assert!(answer_at(&sent, &ids[0]) < unsubscribe_at(&sent, None), "the ack before the unsubscribe: {sent:?}");
    check_group(&srv, &wq, &ids[1..], &[], &ids[..1]).await;
    close_all(&[&consumer, &orders]).await;
}

/// The reader of a stream closes its session while it holds a delivery:
/// close returns without waiting for it, the stream ends, the delivery is
/// still acked, and the session closes after; the buffered ones go back to
/// the group unanswered (close unsubscribes).
async fn stream_close_holding(srv: Arc<Server>) {
    let (p, consumer, orders, wq) = work_queue_case(&srv, ConnectOptions::default()).await;
    let mut sub = consumer.subscribe_stream(NOTES, wq.opts()).await.unwrap();
    let ids = wq.publish(&orders, 6).await;
    until_delivered(&p, &ids).await;
    let d = within("the first delivery", next_of(&mut sub)).await.expect("a delivery").unwrap();
    within("close while holding a delivery", consumer.close()).await.unwrap();
    let after = within("next() after close", next_of(&mut sub)).await;
    assert!(after.is_none(), "handed out after close: {after:?}");
    within("the ack of the delivery held", d.ack()).await.expect("the delivery held across close is acked");
    assert!(within("the session's end", consumer.closed()).await.is_none());
    let sent = p.sent();
    assert_eq!(acked(&sent), vec![ids[0].clone()]);
    assert_eq!(nacked(&sent), Vec::<String>::new());
    assert!(answer_at(&sent, &ids[0]) < unsubscribe_at(&sent, None), "the ack, then the unsubscribe: {sent:?}");
    check_group(&srv, &wq, &ids[1..], &[], &ids[..1]).await;
    close_all(&[&orders]).await;
}

/// At most once: the deliveries buffered when the reader unsubscribes are
/// dropped, not handed out; nothing is answered.
async fn stream_at_most_once_unsubscribe(srv: Arc<Server>) {
    let p = Proxy::start(srv.port).await;
    let monitor = via(&p, "monitor-token", &["events.telemetry"], ConnectOptions::default()).await;
    let sensor = connect(&srv, "sensor-token", &["events.telemetry"]).await;
    let site = format!("s{}", nonce().replace('-', ""));
    let opts = SubscribeOptions::default().ack(Ack::None).selector(format!("/kind=amo/site={site}"));
    let mut sub = monitor.subscribe_stream("events.telemetry", opts).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(sensor.publish(&telemetry("amo", &site, i as f64)).await.unwrap().id().to_string());
    }
    until_delivered(&p, &ids).await;
    let d = within("the first delivery", next_of(&mut sub)).await.expect("a delivery").unwrap();
    assert_eq!(d.message.id, ids[0]);
    within("unsubscribe", sub.unsubscribe()).await.unwrap();
    let after = within("next() after unsubscribe", next_of(&mut sub)).await;
    assert!(after.is_none(), "handed out after unsubscribe: {after:?}");
    let sent = p.sent();
    assert!(acked(&sent).is_empty() && nacked(&sent).is_empty(), "answers sent: {sent:?}");
    assert!(unsubscribe_at(&sent, None).is_some());
    close_all(&[&monitor, &sensor]).await;
}

/// The server ends a stream's subscription (its contract is revoked) while
/// deliveries wait in it: the reader gets the error at once, not the
/// deliveries that can no longer be answered.
async fn stream_ended_by_server(srv: Arc<Server>) {
    let (p, consumer, orders, wq) = work_queue_case(&srv, ConnectOptions::default()).await;
    let mut sub = consumer.subscribe_stream(NOTES, wq.opts()).await.unwrap();
    let ids = wq.publish(&orders, 3).await;
    until_delivered(&p, &ids).await;
    http(&srv, "notifier-token").revoke_contract(&consumer.contract().id).await.unwrap();
    let ended = within("the end of the subscription", sub.done()).await;
    assert_eq!(ended.map(|e| e.code), Some("CONTRACT_REVOKED".into()));
    match within("next() after the end", next_of(&mut sub)).await {
        Some(Err(e)) => assert_eq!(e.code, "CONTRACT_REVOKED", "{e:?}"),
        other => panic!("the error first, nothing buffered: got {other:?}"),
    }
    assert!(within("next() after the error", next_of(&mut sub)).await.is_none());
    close_all(&[&consumer, &orders]).await;
}

/// Three deliveries wait in a stream when its connection drops; the
/// session reconnects and resubscribes. The reader gets each message once,
/// as redelivered on the new connection (its ack goes through), not the
/// stale copies of the lost connection. A reader waiting in next() while
/// the connection drops gets what comes after the reconnection.
async fn stream_connection_dropped(srv: Arc<Server>) {
    let (p, consumer, orders, wq) = work_queue_case(&srv, quick()).await;
    let mut sub = consumer.subscribe_stream(NOTES, wq.opts()).await.unwrap();
    let ids = wq.publish(&orders, 3).await;
    until_delivered(&p, &ids).await;
    p.drop_connections();
    until("the resubscription", || (subscribed(&p.received()).len() >= 2).then_some(())).await;
    // The lost connection's unanswered deliveries reached the client: they
    // come back as a spent attempt, 2. A redelivery that races into the
    // subscription of the connection the server is ending is never written
    // there, so it spends no attempt: it comes as 2 all the same.
    let mut got = Vec::new();
    while got.len() < 3 {
        let d = within("a delivery after the reconnection", next_of(&mut sub)).await.expect("a delivery").unwrap();
        let acked = within("an ack", d.ack()).await.map_err(|e| e.code);
        got.push((d.message.id.clone(), d.attempt, acked));
    }
    let mut want: Vec<_> = ids.iter().map(|id| (id.clone(), 2, Ok(()))).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "each message once, redelivered as attempt 2 on the new connection; frames {}", summary(&p));
    let more = tokio::time::timeout(Duration::from_millis(500), next_of(&mut sub)).await;
    assert!(more.is_err(), "nothing more: {more:?}");

    // next() pending across a drop.
    let waiting = tokio::spawn(async move {
        let d = within("next() across a dropped connection", sub.next()).await;
        (sub, d)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    p.drop_connections();
    until("the second resubscription", || (subscribed(&p.received()).len() >= 3).then_some(())).await;
    let later = wq.publish(&orders, 1).await;
    let (sub, d) = waiting.await.unwrap();
    let d = d.expect("a delivery").unwrap();
    assert_eq!((d.message.id.as_str(), d.attempt), (later[0].as_str(), 1));
    within("its ack", d.ack()).await.unwrap();
    within("unsubscribe", sub.unsubscribe()).await.unwrap();
    close_all(&[&consumer, &orders]).await;
}

/// The connection of a stream drops and the session does not reconnect:
/// once the session has failed, the reader gets the transport error, not
/// the deliveries of the lost connection, then the end.
async fn stream_connection_lost(srv: Arc<Server>) {
    let (p, consumer, orders, wq) = work_queue_case(&srv, ConnectOptions::default().reconnect(false)).await;
    let mut sub = consumer.subscribe_stream(NOTES, wq.opts()).await.unwrap();
    let ids = wq.publish(&orders, 2).await;
    until_delivered(&p, &ids).await;
    p.drop_connections();
    let e = within("the session's failure", consumer.closed()).await.expect("the session failed");
    assert_eq!(e.kind, ErrorKind::Transport, "{e:?}");
    match within("next() after the drop", next_of(&mut sub)).await {
        Some(Err(e)) => assert_eq!(e.kind, ErrorKind::Transport, "{e:?}"),
        Some(Ok(d)) => panic!("a delivery of the lost connection was handed out: {d:?}"),
        None => panic!("the stream ended without the error"),
    }
    assert!(within("next() after the error", next_of(&mut sub)).await.is_none());
    close_all(&[&consumer, &orders]).await;
}

// ---------- handler subscriptions ----------

type Handled = Arc<Mutex<Vec<(String, u32)>>>;

fn ids_handled(h: &Handled) -> Vec<String> {
    h.lock().unwrap().iter().map(|(id, _)| id.clone()).collect()
}

/// A handler (max_in_flight 1) works on the first of three deliveries when
/// the session is closed: close waits for it and sends its ack, then
/// unsubscribes, so the two queued behind go back to the group without an
/// attempt spent.
async fn handler_close_queued(srv: Arc<Server>) {
    let (p, consumer, orders, wq) = work_queue_case(&srv, ConnectOptions::default()).await;
    let handled: Handled = Arc::default();
    let h = handled.clone();
    consumer
        .subscribe(NOTES, wq.opts(), move |d| {
            let h = h.clone();
            async move {
                h.lock().unwrap().push((d.message.id.clone(), d.attempt));
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok(())
            }
        })
        .await
        .unwrap();
    let ids = wq.publish(&orders, 3).await;
    until_delivered(&p, &ids).await;
    until("the first handler call", || (!handled.lock().unwrap().is_empty()).then_some(())).await;
    within("close", consumer.close()).await.unwrap();
    assert_eq!(ids_handled(&handled), ids[..1].to_vec(), "close waits for the running handler, and starts no other");
    let sent = p.sent();
    assert_eq!(acked(&sent), ids[..1].to_vec());
    assert!(answer_at(&sent, &ids[0]) < unsubscribe_at(&sent, None), "the ack, then the unsubscribe: {sent:?}");
    check_group(&srv, &wq, &ids[1..], &[], &ids[..1]).await;
    close_all(&[&orders]).await;
}

/// What a handler's call of unsubscribe or close came to.
type Outcome = Arc<Mutex<Option<String>>>;

fn outcome_of(r: std::result::Result<pigeon_client::Result<()>, tokio::time::error::Elapsed>) -> String {
    match r {
        Ok(Ok(())) => "ok".into(),
        Ok(Err(e)) => format!("error {e}"),
        Err(_) => format!("hung (more than {BOUND:?})"),
    }
}

/// The first handler call unsubscribes its own subscription (three
/// delivered, max_in_flight 1): unsubscribe returns at once instead of
/// waiting for the very handler that calls it; the handler's ack is sent,
/// then the unsubscribe, and the two queued go back to the group.
async fn handler_unsubscribe_inside(srv: Arc<Server>) {
    let (p, consumer, orders, wq) = work_queue_case(&srv, ConnectOptions::default()).await;
    let handled: Handled = Arc::default();
    let outcome: Outcome = Arc::default();
    let slot: Arc<OnceLock<Subscription>> = Arc::default();
    let first = Arc::new(AtomicBool::new(true));
    let (h, o, sl) = (handled.clone(), outcome.clone(), slot.clone());
    let sub = consumer
        .subscribe(NOTES, wq.opts(), move |d| {
            let (h, o, sl, first) = (h.clone(), o.clone(), sl.clone(), first.clone());
            async move {
                h.lock().unwrap().push((d.message.id.clone(), d.attempt));
                if first.swap(false, Ordering::AcqRel) {
                    let sub = until("the subscription", || sl.get()).await;
                    let r = tokio::time::timeout(BOUND, sub.unsubscribe()).await;
                    *o.lock().unwrap() = Some(outcome_of(r));
                }
                Ok::<(), HandlerError>(())
            }
        })
        .await
        .unwrap();
    assert!(slot.set(sub).is_ok());
    let ids = wq.publish(&orders, 3).await;
    let got = tokio::time::timeout(BOUND + BOUND, async {
        loop {
            if let Some(o) = outcome.lock().unwrap().clone() {
                return o;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the handler never got to unsubscribe");
    assert_eq!(got, "ok", "unsubscribe from inside the handler");
    let ended = within("the end of the subscription", slot.get().unwrap().done()).await;
    assert!(ended.is_none(), "{ended:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(ids_handled(&handled), ids[..1].to_vec());
    let sent = until_unsubscribe(&p, "the unsubscribe", None).await;
    assert_eq!(acked(&sent), ids[..1].to_vec());
    assert!(answer_at(&sent, &ids[0]) < unsubscribe_at(&sent, None), "the handler's ack, then the unsubscribe: {sent:?}");
    check_group(&srv, &wq, &ids[1..], &[], &ids[..1]).await;
    close_all(&[&consumer, &orders]).await;
}

/// The first handler call closes the session (three delivered,
/// max_in_flight 1): close returns at once instead of waiting (up to its
/// timeout) for the handler that calls it; the handler's ack is sent, then
/// the unsubscribe, and the session closes.
async fn handler_close_inside(srv: Arc<Server>) {
    let (p, consumer, orders, wq) = work_queue_case(&srv, ConnectOptions::default()).await;
    let handled: Handled = Arc::default();
    let outcome: Outcome = Arc::default();
    let first = Arc::new(AtomicBool::new(true));
    let (h, o, session) = (handled.clone(), outcome.clone(), consumer.clone());
    consumer
        .subscribe(NOTES, wq.opts(), move |d| {
            let (h, o, session, first) = (h.clone(), o.clone(), session.clone(), first.clone());
            async move {
                h.lock().unwrap().push((d.message.id.clone(), d.attempt));
                if first.swap(false, Ordering::AcqRel) {
                    let r = tokio::time::timeout(BOUND, session.close()).await;
                    *o.lock().unwrap() = Some(outcome_of(r));
                }
                Ok::<(), HandlerError>(())
            }
        })
        .await
        .unwrap();
    let ids = wq.publish(&orders, 3).await;
    let got = tokio::time::timeout(BOUND + BOUND, async {
        loop {
            if let Some(o) = outcome.lock().unwrap().clone() {
                return o;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the handler never got to close");
    assert_eq!(got, "ok", "close from inside the handler");
    assert!(within("the session's end", consumer.closed()).await.is_none());
    assert_eq!(ids_handled(&handled), ids[..1].to_vec());
    let sent = p.sent();
    assert_eq!(acked(&sent), ids[..1].to_vec());
    assert!(answer_at(&sent, &ids[0]) < unsubscribe_at(&sent, None), "the handler's ack, then the unsubscribe: {sent:?}");
    check_group(&srv, &wq, &ids[1..], &[], &ids[..1]).await;
    close_all(&[&orders]).await;
}

/// A handler (max_in_flight 1) works on the first of three deliveries when
/// the connection drops; the two queued behind it came on the lost
/// connection and cannot be answered. After the reconnection the handler
/// sees each message as redelivered (attempt 2), and never runs the stale
/// copies.
async fn handler_connection_dropped(srv: Arc<Server>) {
    let (p, consumer, orders, wq) = work_queue_case(&srv, quick()).await;
    let handled: Handled = Arc::default();
    let gate = watch::channel(false).0;
    let (h, g) = (handled.clone(), gate.subscribe());
    let first = Arc::new(AtomicBool::new(true));
    let sub = consumer
        .subscribe(NOTES, wq.opts(), move |d| {
            let (h, first) = (h.clone(), first.clone());
            let mut g = g.clone();
            async move {
                h.lock().unwrap().push((d.message.id.clone(), d.attempt));
                if first.swap(false, Ordering::AcqRel) {
                    let _ = tokio::time::timeout(BOUND, g.wait_for(|open| *open)).await;
                }
                Ok::<(), HandlerError>(())
            }
        })
        .await
        .unwrap();
    let ids = wq.publish(&orders, 3).await;
    until_delivered(&p, &ids).await;
    until("the first handler call", || (!handled.lock().unwrap().is_empty()).then_some(())).await;
    p.drop_connections();
    until("the resubscription", || (subscribed(&p.received()).len() >= 2).then_some(())).await;
    gate.send_replace(true);
    until("the redeliveries handled", || {
        let h = handled.lock().unwrap();
        ids.iter().all(|id| h.iter().any(|(x, a)| x == id && *a >= 2)).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut by_id: HashMap<String, Vec<u32>> = HashMap::new();
    for (id, a) in handled.lock().unwrap().iter() {
        by_id.entry(id.clone()).or_default().push(*a);
    }
    // Redelivered as a spent attempt: 2 (see stream_connection_dropped on 3).
    let h0 = &by_id[&ids[0]];
    assert!(h0.len() == 2 && h0[0] == 1 && h0[1] >= 2, "{by_id:?}");
    for id in &ids[1..] {
        let h = &by_id[id];
        assert!(h.len() == 1 && h[0] >= 2, "{id}: a stale delivery of the lost connection ran ({by_id:?})");
    }
    within("unsubscribe", sub.unsubscribe()).await.unwrap();
    close_all(&[&consumer, &orders]).await;
}

/// Pub/sub, max_in_flight 2: 0's handler still runs when 1 is acked; the
/// connection drops and 0's handler then finishes (its ack cannot reach the
/// server). The server redelivers only on the subscription it sent on, so
/// the resume must start at 0, not after 1: 0 is delivered again.
async fn resume_lower_running(srv: Arc<Server>) {
    let p = Proxy::start(srv.port).await;
    let losses: Arc<Mutex<Vec<ErrorKind>>> = Arc::default();
    let l = losses.clone();
    let monitor = via(&p, "monitor-token", &["events.telemetry"], quick().on_error(move |e| l.lock().unwrap().push(e.kind))).await;
    let sensor = connect(&srv, "sensor-token", &["events.telemetry"]).await;
    let site = format!("rsm-{}", nonce());
    let calls: Arc<Mutex<Vec<i64>>> = Arc::default();
    let gate = watch::channel(false).0;
    let (c, g, s) = (calls.clone(), gate.subscribe(), site.clone());
    let opts = SubscribeOptions::default().selector("/kind=resume_inflight").max_in_flight(2);
    let sub = monitor
        .subscribe("events.telemetry", opts, move |d| {
            let (c, s) = (c.clone(), s.clone());
            let mut g = g.clone();
            async move {
                if d.message.data["site"] != s.as_str() {
                    return Ok(());
                }
                let v = d.message.data["value"].as_f64().unwrap() as i64;
                let first = {
                    let mut c = c.lock().unwrap();
                    c.push(v);
                    v == 0 && c.iter().filter(|x| **x == 0).count() == 1
                };
                if first {
                    let _ = tokio::time::timeout(BOUND, g.wait_for(|open| *open)).await;
                    // across the drop
                }
                Ok::<(), HandlerError>(())
            }
        })
        .await
        .unwrap();
    let d0 = sensor.publish(&telemetry("resume_inflight", &site, 0.0)).await.unwrap();
    let d1 = sensor.publish(&telemetry("resume_inflight", &site, 1.0)).await.unwrap();
    let id1 = d1.id().to_string();
    until("the ack of 1 answered while 0 runs", || {
        let sent = p.sent();
        let i = answer_at(&sent, &id1)?;
        let fid = sent[i]["id"].clone();
        p.received().iter().any(|f| f["re"] == fid).then_some(())
    })
    .await;
    let mut before = calls.lock().unwrap().clone();
    before.sort();
    assert_eq!(before, vec![0, 1], "{}", summary(&p));
    p.drop_connections();
    until("the lost connection", || losses.lock().unwrap().contains(&ErrorKind::Transport).then_some(())).await;
    gate.send_replace(true); // 0's handler finishes once its connection is gone
    until("the resubscription", || (subscribed(&p.received()).len() >= 2).then_some(())).await;
    let sent = p.sent();
    let resub = ops(&sent, "subscribe").nth(1).map(|(_, f)| f.clone()).expect("a second subscribe");
    assert_eq!(resub["start"]["sequence"], d0.sequence(), "resumed from the lower sequence: {resub}");
    until("message 0 delivered again", || (calls.lock().unwrap().iter().filter(|x| **x == 0).count() == 2).then_some(())).await;
    within("unsubscribe", sub.unsubscribe()).await.unwrap();
    close_all(&[&monitor, &sensor]).await;
}

// ---------- orphans ----------

/// The connection drops; the session resubscribes, and the answer is slow
/// to come. Unsubscribe meanwhile ends the subscription; when the answer
/// comes, the server subscription it names on the new connection is ended
/// too (unsubscribed), so it takes no message from the group.
async fn unsubscribe_racing_resubscribe(srv: Arc<Server>) {
    let (p, consumer, orders, wq) = work_queue_case(&srv, quick()).await;
    let sub = consumer.subscribe_stream(NOTES, wq.opts()).await.unwrap();
    p.hold_from("subscribed");
    p.drop_connections();
    until("the resubscription sent", || (ops(&p.sent(), "subscribe").count() >= 2).then_some(())).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    within("unsubscribe while the resubscription waits for its answer", sub.unsubscribe()).await.unwrap();
    assert!(sub.is_done());
    p.release();
    let sid = until("the resubscription's answer", || subscribed(&p.received()).get(1).cloned()).await;
    until_unsubscribe(&p, "the unsubscribe of the subscription made on the new connection", Some(&sid)).await;
    let ids = wq.publish(&orders, 1).await;
    check_group(&srv, &wq, &ids, &[], &[]).await;
    close_all(&[&consumer, &orders]).await;
}

/// An unsubscribe waits for a running handler while the connection drops
/// and the session reconnects: it ends the subscription for good, and
/// leaves no server subscription on the new connection to take messages
/// from the group.
async fn unsubscribe_across_reconnect(srv: Arc<Server>) {
    let (p, consumer, orders, wq) = work_queue_case(&srv, quick()).await;
    let handled: Handled = Arc::default();
    let gate = watch::channel(false).0;
    let (h, g) = (handled.clone(), gate.subscribe());
    let sub = consumer
        .subscribe(NOTES, wq.opts(), move |d| {
            let h = h.clone();
            let mut g = g.clone();
            async move {
                h.lock().unwrap().push((d.message.id.clone(), d.attempt));
                let _ = tokio::time::timeout(BOUND, g.wait_for(|open| *open)).await;
                Ok::<(), HandlerError>(())
            }
        })
        .await
        .unwrap();
    let first = wq.publish(&orders, 1).await;
    until("the handler call", || (!handled.lock().unwrap().is_empty()).then_some(())).await;
    let unsubscribing = tokio::spawn(async move {
        let r = within("unsubscribe across a reconnection", sub.unsubscribe()).await;
        (sub, r)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    p.drop_connections();
    until("the reconnection", || (ops(&p.sent(), "negotiate").count() >= 2).then_some(())).await;
    tokio::time::sleep(Duration::from_millis(200)).await; // a resubscription would be on its way
    gate.send_replace(true);
    let (sub, r) = unsubscribing.await.unwrap();
    r.unwrap();
    assert!(sub.is_done());
    let sent = p.sent();
    let subscribes = ops(&sent, "subscribe").count();
    let unsubscribes = ops(&sent, "unsubscribe").count();
    assert!(subscribes == 1 || unsubscribes >= 1, "a subscription left on the new connection: {sent:?}");
    // The first message was worked on when its connection dropped: it comes again, counted.
    let later = wq.publish(&orders, 1).await;
    check_group(&srv, &wq, &later, &first, &[]).await;
    close_all(&[&consumer, &orders]).await;
}

/// A subscribe whose caller gives up before the answer comes: the server
/// subscription the late answer names is ended, so it takes no message
/// from the group.
async fn subscribe_given_up(srv: Arc<Server>) {
    let (p, consumer, orders, wq) = work_queue_case(&srv, ConnectOptions::default()).await;
    p.hold_from("subscribed");
    let r = tokio::time::timeout(Duration::from_millis(300), consumer.subscribe_stream(NOTES, wq.opts())).await;
    assert!(r.is_err(), "the subscribe was answered although its answer was held");
    p.release();
    let sid = until("the late answer", || subscribed(&p.received()).first().cloned()).await;
    until_unsubscribe(&p, "the unsubscribe of the subscription given up", Some(&sid)).await;
    let ids = wq.publish(&orders, 1).await;
    check_group(&srv, &wq, &ids, &[], &[]).await;
    close_all(&[&consumer, &orders]).await;
}
