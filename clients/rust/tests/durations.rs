//! Durations beyond what a frame's `…Ms` field holds: a request with a
//! "forever" timeout neither panics nor wraps to a short one.

use futures_util::{SinkExt, StreamExt};
use pigeon_client::{ConnectOptions, Message, Session};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[tokio::test]
async fn a_request_with_the_longest_timeout_sends_the_largest_timeout_ms() {
    use tokio_tungstenite::tungstenite::Message as W;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let sent: Arc<Mutex<Vec<Value>>> = Arc::default();
    let kept = sent.clone();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        while let Some(Ok(W::Text(t))) = ws.next().await {
            let f: Value = serde_json::from_str(&t).unwrap();
            kept.lock().unwrap().push(f.clone());
            let a = match f["op"].as_str().unwrap_or("") {
                "negotiate" => {
                    json!({"op": "contract", "re": f["id"], "contract": {"id": "ctr_raw", "subjects": [], "expiresAt": "2099-01-01T00:00:00Z"}})
                }
                _ => {
                    json!({"op": "reply", "re": f["id"], "message": {"id": "msg_r", "subject": "s", "data": {}, "correlationId": f["message"]["id"]}})
                }
            };
            ws.send(W::Text(a.to_string())).await.unwrap();
        }
    });
    let opts = ConnectOptions::default().reconnect(false).keepalive(None).auto_renew(false);
    let s = Session::connect(&format!("ws://127.0.0.1:{port}"), "raw-token", &["s"], opts).await.unwrap();
    let reply = s.request(&Message::new("s", "t", "i"), Duration::MAX).await.unwrap();
    assert_eq!(reply.id, "msg_r");
    let f = sent.lock().unwrap().iter().find(|f| f["op"] == "request").cloned().unwrap();
    assert_eq!(f["timeoutMs"], json!(i64::MAX));
    let _ = s.close().await;
}
