//! Durations beyond what a frame's `…Ms` field holds: a request with a
//! "forever" timeout neither panics nor wraps to a short one.

mod common;

use common::{end, raw_opts, raw_server, Behaviour};
use pigeon_client::{Message, Session};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[tokio::test]
async fn a_request_with_the_longest_timeout_sends_the_largest_timeout_ms() {
    let sent: Arc<Mutex<Vec<Value>>> = Arc::default();
    let kept = sent.clone();
    let (url, _tx, task) = raw_server(
        Behaviour::default(),
        Arc::new(move |f| {
            kept.lock().unwrap().push(f.clone());
            vec![json!({"op": "reply", "re": f["id"], "message": {"id": "msg_r", "subject": "s", "data": {}, "correlationId": f["message"]["id"]}})]
        }),
    )
    .await;
    let s = Session::connect(&url, "raw-token", &["s"], raw_opts()).await.unwrap();
    let reply = s.request(&Message::new("s", "t", "i"), Duration::MAX).await.unwrap();
    assert_eq!(reply.id, "msg_r");
    let f = sent.lock().unwrap().iter().find(|f| f["op"] == "request").cloned().unwrap();
    assert_eq!(f["timeoutMs"], json!(i64::MAX));
    end(s, task).await;
}
