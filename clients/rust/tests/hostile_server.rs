//! A hostile or buggy server: a raw WebSocket endpoint of the test's own
//! sends what a Pigeon server never does; the client bounds what it costs.

use futures_util::{SinkExt, StreamExt};
use pigeon_client::{ConnectOptions, Session, SubscribeOptions};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message as W;

fn msg(i: u64) -> Value {
    json!({"id": format!("msg_{i}"), "subject": "x", "sequence": i, "data": {}})
}

/// A raw endpoint for one connection: answers negotiate, hands every other
/// frame to `on_frame`, which returns the frames to send back; `cmd` sends
/// frames at any time.
async fn raw_server(
    on_frame: impl Fn(&Value) -> Vec<Value> + Send + 'static,
) -> (String, mpsc::UnboundedSender<Value>, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
    let task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else { return };
        loop {
            tokio::select! {
                m = ws.next() => {
                    let Some(Ok(W::Text(t))) = m else { return };
                    let f: Value = serde_json::from_str(&t).unwrap();
                    let out = if f["op"] == "negotiate" {
                        let contract = json!({"id": "ctr_raw", "subjects": [], "expiresAt": "2099-01-01T00:00:00Z"});
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
                    if ws.send(W::Text(o.to_string())).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    (format!("ws://127.0.0.1:{port}"), tx, task)
}

fn opts() -> ConnectOptions {
    ConnectOptions::default().keepalive(None).auto_renew(false).reconnect(false).on_error(|_| {})
}

#[tokio::test]
async fn deliveries_for_subscriptions_never_opened_cost_a_bounded_number_of_unsubscribes() {
    let unsubs: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = unsubs.clone();
    let (url, tx, task) = raw_server(move |f| {
        match f["op"].as_str() {
            Some("unsubscribe") => seen.lock().unwrap().push(f["id"].clone()), // never answered, at first
            Some("ping") => {
                let mut out: Vec<Value> =
                    (0..1000).map(|i| json!({"op": "deliver", "sub": format!("sub_never_{i}"), "attempt": 1, "message": msg(i)})).collect();
                out.push(json!({"op": "deliver_batch", "sub": "sub_never_batch", "deliveries": [{"attempt": 1, "message": msg(1)}]}));
                out.push(json!({"op": "pong", "re": f["id"]}));
                return out;
            }
            _ => {}
        }
        vec![]
    })
    .await;
    let s = Session::connect(&url, "t", &["x"], opts()).await.unwrap();
    s.ping().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = unsubs.lock().unwrap().len();
    assert!(n > 0 && n <= 64, "{n} unsubscribes in flight for subscriptions never opened");
    // Once answered, they are forgotten: new ones may follow, as few.
    for id in unsubs.lock().unwrap().drain(..) {
        tx.send(json!({"op": "ok", "re": id})).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.ping().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = unsubs.lock().unwrap().len();
    assert!(n > 0 && n <= 64, "{n} unsubscribes in flight");
    task.abort();
    let _ = tokio::time::timeout(Duration::from_secs(2), s.close()).await;
}

#[tokio::test]
async fn a_server_that_ignores_the_window_cannot_make_a_subscription_queue_without_end() {
    let acks = Arc::new(AtomicUsize::new(0));
    let counted = acks.clone();
    let window: Arc<Mutex<Option<Value>>> = Arc::default();
    let asked = window.clone();
    let (url, _tx, task) = raw_server(move |f| match f["op"].as_str() {
        Some("subscribe") => {
            *asked.lock().unwrap() = Some(f["window"].clone());
            let ds: Vec<Value> = (1..=1000).map(|i| json!({"attempt": 1, "message": msg(i)})).collect();
            vec![
                json!({"op": "subscribed", "re": f["id"], "sub": "sub_1"}),
                json!({"op": "deliver_batch", "sub": "sub_1", "deliveries": ds}),
            ]
        }
        Some("ack") => {
            let n = f["messageIds"].as_array().map_or(1, |a| a.len());
            counted.fetch_add(n, Ordering::SeqCst);
            vec![json!({"op": "ok", "re": f["id"]})]
        }
        Some("nack") | Some("unsubscribe") => vec![json!({"op": "ok", "re": f["id"]})],
        _ => vec![],
    })
    .await;
    let reported: Arc<Mutex<Vec<String>>> = Arc::default();
    let r = reported.clone();
    let o = opts().on_error(move |e| r.lock().unwrap().push(e.to_string()));
    let s = Session::connect(&url, "t", &["x"], o).await.unwrap();
    let gate = Arc::new(tokio::sync::Notify::new());
    let handled = Arc::new(AtomicUsize::new(0));
    let (g, h) = (gate.clone(), handled.clone());
    let _sub = s
        .subscribe("x", SubscribeOptions::default().window(4), move |_d| {
            let (g, h) = (g.clone(), h.clone());
            async move {
                h.fetch_add(1, Ordering::SeqCst);
                g.notified().await;
                Ok(())
            }
        })
        .await
        .unwrap();
    assert_eq!(window.lock().unwrap().clone(), Some(json!(4)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..200 {
        gate.notify_waiters();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let n = handled.load(Ordering::SeqCst);
    // One running and the window's four queued (one of them waiting for the
    // handler's slot): the rest were left unanswered.
    assert!(n > 0 && n <= 5, "{n} deliveries handled with a window of 4");
    assert!(reported.lock().unwrap().iter().any(|e| e.contains("beyond the subscription's window")), "{:?}", reported.lock().unwrap());
    task.abort();
    let _ = tokio::time::timeout(Duration::from_secs(2), s.close()).await;
}

#[tokio::test]
async fn an_id_of_dots_cannot_move_an_http_call_to_another_route() {
    use pigeon_client::http::HttpClient;
    // A listener that records whether anything reaches it: nothing should.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let h = HttpClient::new(&format!("http://127.0.0.1:{port}"), "admin-token");
    for id in ["..", ".", ""] {
        let e = h.fetch_keys(id).await.unwrap_err();
        assert_eq!(e.code, "INVALID_ARGUMENT", "fetch_keys({id:?}): {e}");
        let e = h.publish_keys(id, &[]).await.unwrap_err();
        assert_eq!(e.code, "INVALID_ARGUMENT", "publish_keys({id:?}): {e}");
        let e = h.revoke_contract(id).await.unwrap_err();
        assert_eq!(e.code, "INVALID_ARGUMENT", "revoke_contract({id:?}): {e}");
    }
    let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(accepted.is_err(), "a call was sent");
}
