//! A server that accepts every connection and drops it at once (a broken
//! backend behind a proxy, a crash loop) is not dialled every first backoff
//! forever: the backoff goes on growing across reconnects until a
//! connection stays up as long as the largest backoff.

use futures_util::{SinkExt, StreamExt};
use pigeon_client::{ConnectOptions, Session};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn a_server_that_drops_every_connection_at_once_is_redialled_with_growing_backoff() {
    use tokio_tungstenite::tungstenite::Message as W;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let dials = Arc::new(AtomicUsize::new(0));
    let counted = dials.clone();
    let server = tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else { return };
                while let Some(Ok(W::Text(t))) = ws.next().await {
                    let f: Value = serde_json::from_str(&t).unwrap();
                    if f["op"] == "negotiate" {
                        let contract = json!({"id": "ctr_raw", "subjects": [], "expiresAt": "2099-01-01T00:00:00Z"});
                        let _ = ws.send(W::Text(json!({"op": "contract", "re": f["id"], "contract": contract}).to_string())).await;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        let _ = ws.close(None).await; // accepted, then dropped
                        return;
                    }
                }
            });
        }
    });
    let opts = ConnectOptions::default().keepalive(None).auto_renew(false).on_error(|_| {});
    let s = Session::connect(&format!("ws://127.0.0.1:{port}"), "raw-token", &["s"], opts).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _ = s.close().await;
    server.abort();
    // 100 ms doubling allows about 5 dials in 2 s; a backoff that starts
    // over after each reconnect allows 15 or more.
    let n = dials.load(Ordering::SeqCst);
    assert!(n <= 10, "{n} dials in 2 s");
}

#[tokio::test]
async fn a_backoff_of_zero_does_not_make_a_reconnect_loop_without_pause() {
    use tokio_tungstenite::tungstenite::Message as W;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let dials = Arc::new(AtomicUsize::new(0));
    let counted = dials.clone();
    let server = tokio::spawn(async move {
        // The first connection negotiates, then drops; the others are
        // dropped before the upgrade.
        let (tcp, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        if let Some(Ok(W::Text(t))) = ws.next().await {
            let f: Value = serde_json::from_str(&t).unwrap();
            let contract = json!({"id": "ctr_raw", "subjects": [], "expiresAt": "2099-01-01T00:00:00Z"});
            let _ = ws.send(W::Text(json!({"op": "contract", "re": f["id"], "contract": contract}).to_string())).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(ws);
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            counted.fetch_add(1, Ordering::SeqCst);
            drop(tcp);
        }
    });
    let opts = ConnectOptions {
        backoff: (Duration::ZERO, Duration::ZERO),
        reconnect_window: Duration::from_millis(500),
        ..ConnectOptions::default().keepalive(None).auto_renew(false).on_error(|_| {})
    };
    let s = Session::connect(&format!("ws://127.0.0.1:{port}"), "raw-token", &["s"], opts).await.unwrap();
    let failed = tokio::time::timeout(Duration::from_secs(5), s.closed()).await;
    let n = dials.load(Ordering::SeqCst);
    assert!(matches!(failed, Ok(Some(_))), "{failed:?} after {n} dials");
    server.abort();
    // At least 10 ms between dials: about 50 in the window, never thousands.
    let n = dials.load(Ordering::SeqCst);
    assert!(n <= 60, "{n} dials in 500 ms");
}
