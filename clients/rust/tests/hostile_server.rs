//! A hostile or buggy server: a raw WebSocket endpoint of the test's own
//! sends what a Pigeon server never does; the client bounds what it costs.

mod common;

use common::{end, http_canned, raw_http, raw_opts, Behaviour};
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

/// A raw endpoint ([`common::raw_server`]): answers negotiate, hands every
/// other frame to `on_frame`, which returns the frames to send back; `cmd`
/// sends frames (text as given) at any time.
async fn raw_server(
    on_frame: impl Fn(&Value) -> Vec<Value> + Send + Sync + 'static,
) -> (String, mpsc::UnboundedSender<String>, tokio::task::JoinHandle<()>) {
    common::raw_server(Behaviour::default(), Arc::new(on_frame)).await
}

/// The frames a server answers every subscribe with (sid as the
/// subscription's id) and every ack, nack and unsubscribe with (ok),
/// for `raw_server`; other ops go unanswered.
fn subscribing_as(sid: &'static str) -> impl Fn(&Value) -> Vec<Value> + Send + Sync + 'static {
    move |f| match f["op"].as_str() {
        Some("subscribe") => vec![json!({"op": "subscribed", "re": f["id"], "sub": sid})],
        Some("ack") | Some("nack") | Some("unsubscribe") => vec![json!({"op": "ok", "re": f["id"]})],
        _ => vec![],
    }
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
    let s = Session::connect(&url, "t", &["x"], raw_opts()).await.unwrap();
    s.ping().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = unsubs.lock().unwrap().len();
    assert!(n > 0 && n <= 64, "{n} unsubscribes in flight for subscriptions never opened");
    // Once answered, they are forgotten: new ones may follow, as few.
    for id in unsubs.lock().unwrap().drain(..) {
        tx.send(json!({"op": "ok", "re": id}).to_string()).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.ping().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = unsubs.lock().unwrap().len();
    assert!(n > 0 && n <= 64, "{n} unsubscribes in flight");
    end(s, task).await;
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
    let o = raw_opts().on_error(move |e| r.lock().unwrap().push(e.to_string()));
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
    end(s, task).await;
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

fn decision(re: &Value, seq: u64) -> Value {
    json!({"op": "decision", "re": re, "status": "accepted", "message": {"id": format!("msg_{seq}"), "subject": "x", "sequence": seq}})
}

#[tokio::test]
async fn a_publish_the_server_never_answers_times_out_and_does_not_hold_up_the_next() {
    let frames = Arc::new(AtomicUsize::new(0));
    let n = frames.clone();
    let (url, _tx, task) = raw_server(move |f| match f["op"].as_str() {
        Some("publish") | Some("publish_batch") => {
            // The first publish frame is never answered; the others are.
            if n.fetch_add(1, Ordering::SeqCst) == 0 {
                vec![]
            } else {
                vec![decision(&f["id"], 2)]
            }
        }
        Some("ping") => vec![json!({"op": "pong", "re": f["id"]})],
        _ => vec![],
    })
    .await;
    let s = Session::connect(&url, "t", &["x"], raw_opts().call_timeout(Duration::from_millis(300))).await.unwrap();
    let m = pigeon_client::Message::new("x", "t", "i");
    let r = tokio::time::timeout(Duration::from_secs(5), s.publish(&m)).await.expect("a publish waited past call_timeout");
    let e = r.unwrap_err();
    assert_eq!((e.code.as_str(), e.kind), ("REQUEST_TIMEOUT", pigeon_client::ErrorKind::Timeout), "{e}");
    // The frame that got no answer no longer takes the in-flight slot.
    let d = tokio::time::timeout(Duration::from_secs(5), s.publish(&m))
        .await
        .expect("the next publish waits behind the unanswered frame")
        .unwrap();
    assert_eq!(d.message.sequence, 2);
    s.ping().await.unwrap();
    end(s, task).await;
}

#[tokio::test]
async fn a_subscription_id_the_server_gives_twice_cannot_take_over_another_subscription() {
    // Every subscribe is answered with the same id.
    let (url, tx, task) = raw_server(subscribing_as("sub_same")).await;
    let s = Session::connect(&url, "t", &["x"], raw_opts().call_timeout(Duration::from_secs(2))).await.unwrap();
    let mut first = s.subscribe_stream("x", SubscribeOptions::default()).await.unwrap();
    let second = s.subscribe_stream("x", SubscribeOptions::default()).await;
    let e = second.err().expect("a second subscription was given an id another one holds");
    assert_eq!(e.kind, pigeon_client::ErrorKind::Protocol, "{e}");
    assert_eq!(first.id().as_deref(), Some("sub_same"));
    tx.send(json!({"op": "deliver", "sub": "sub_same", "attempt": 1, "message": msg(7)}).to_string()).unwrap();
    let d = tokio::time::timeout(Duration::from_secs(3), first.recv())
        .await
        .expect("the first subscription's deliveries went elsewhere")
        .unwrap()
        .unwrap();
    assert_eq!(d.message.sequence, 7);
    d.ack().await.unwrap();
    end(s, task).await;
}

/// An attempt beyond 2^31-1 is refused (see
/// `a_delivery_whose_attempt_is_not_of_1_to_2_31_minus_1_is_a_bad_frame`),
/// never wrapped to a first attempt (2^32 + 1) nor held at `u32::MAX` (it
/// was, up to 2^63-1); a frame whose attempt no JSON number parser holds
/// (1e400) is a bad frame too, and the reader goes on.
#[tokio::test]
async fn an_attempt_beyond_2_31_minus_1_is_refused_not_wrapped_or_held() {
    let (url, tx, task) = raw_server(subscribing_as("sub_1")).await;
    let s = Session::connect(&url, "t", &["x"], raw_opts()).await.unwrap();
    let mut sub = s.subscribe_stream("x", SubscribeOptions::default()).await.unwrap();
    for attempt in [(1u64 << 31), (1u64 << 32) + 1, i64::MAX as u64] {
        tx.send(json!({"op": "deliver", "sub": "sub_1", "attempt": attempt, "message": msg(1)}).to_string()).unwrap();
    }
    tx.send(format!(r#"{{"op":"deliver","sub":"sub_1","attempt":1e400,"message":{}}}"#, msg(2))).unwrap();
    tx.send(json!({"op": "deliver", "sub": "sub_1", "attempt": 3, "message": msg(3)}).to_string()).unwrap();
    let d = tokio::time::timeout(Duration::from_secs(3), sub.recv()).await.unwrap().unwrap().unwrap();
    assert_eq!((d.message.sequence, d.attempt), (3, 3), "a delivery whose attempt is beyond 2^31-1 was handed out");
    d.ack().await.unwrap();
    end(s, task).await;
}

/// The attempts a delivery may carry, and those it may not: the receive
/// rule (an integer of 1 to 2^31-1, `MAX_ATTEMPT`), with an absent one as
/// well. Each row's text is the attempt of one deliver frame and of one
/// deliver_batch entry; `Some(a)` is the attempt handed out.
const PUSHED_ATTEMPTS: [(&str, Option<u32>); 16] = [
    ("1", Some(1)),
    ("2", Some(2)),
    ("2147483647", Some(pigeon_client::MAX_ATTEMPT)),
    ("", None), // absent
    ("null", None),
    ("0", None),
    ("-1", None),
    ("-9223372036854775808", None),
    ("1.5", None),
    ("1.0", None),
    ("\"1\"", None),
    ("true", None),
    ("{}", None),
    ("2147483648", None),
    ("4294967297", None),
    ("9223372036854775807", None),
];

/// A delivery's attempt is read as a receive answer's attempts are: an
/// integer of 1 to 2^31-1 (`MAX_ATTEMPT`), which the broker writes into
/// every delivery, counted from 1. Anything else (absent, null, 0, a
/// negative, a fraction, a string, an integer beyond 2^31-1) makes the
/// delivery a bad frame, as the Python and TypeScript clients refuse it:
/// reported `BAD_FRAME`, never handed out (left unanswered), and the
/// reader goes on. Before, an absent, null or 0 attempt was handed out as
/// 0 and one of up to 2^63-1 as up to `u32::MAX`.
#[tokio::test]
async fn a_delivery_whose_attempt_is_not_of_1_to_2_31_minus_1_is_a_bad_frame() {
    let (url, tx, task) = raw_server(subscribing_as("sub_1")).await;
    let errs: Arc<Mutex<Vec<pigeon_client::Error>>> = Arc::default();
    let e = errs.clone();
    let s = Session::connect(&url, "t", &["x"], raw_opts().on_error(move |err| e.lock().unwrap().push(err))).await.unwrap();
    let mut sub = s.subscribe_stream("x", SubscribeOptions::default()).await.unwrap();
    let entry =
        |a: &str, m: &Value| if a.is_empty() { format!(r#"{{"message":{m}}}"#) } else { format!(r#"{{"attempt":{a},"message":{m}}}"#) };
    let mut want: Vec<(String, u32)> = Vec::new();
    let mut entries = Vec::new();
    for (i, (a, taken)) in PUSHED_ATTEMPTS.iter().enumerate() {
        let m = msg(100 + i as u64);
        tx.send(format!(r#"{{"op":"deliver","sub":"sub_1",{}"#, &entry(a, &m)[1..])).unwrap();
        if let Some(n) = taken {
            want.push((m["id"].as_str().unwrap().to_string(), *n));
        }
        entries.push(entry(a, &msg(200 + i as u64)));
    }
    // One bad entry of a batch is refused alone; the others are delivered.
    tx.send(format!(r#"{{"op":"deliver_batch","sub":"sub_1","deliveries":[{}]}}"#, entries.join(","))).unwrap();
    for (i, (_, taken)) in PUSHED_ATTEMPTS.iter().enumerate() {
        if let Some(n) = taken {
            want.push((format!("msg_{}", 200 + i), *n));
        }
    }
    let mut got = Vec::new();
    for _ in 0..want.len() {
        let d = tokio::time::timeout(Duration::from_secs(3), sub.recv()).await.expect("the reader stopped").unwrap().unwrap();
        got.push((d.message.id.clone(), d.attempt));
        d.ack().await.unwrap();
    }
    assert_eq!(got, want, "a delivery with a malformed attempt was handed out");
    let n_bad = 2 * PUSHED_ATTEMPTS.iter().filter(|(_, t)| t.is_none()).count();
    let errs = errs.lock().unwrap().clone();
    let frames: Vec<&pigeon_client::Error> = errs.iter().filter(|e| e.code == "BAD_FRAME").collect();
    assert_eq!(frames.len(), n_bad, "each malformed attempt is one BAD_FRAME: {errs:#?}");
    assert!(frames.iter().all(|e| e.kind == pigeon_client::ErrorKind::Protocol && e.message.contains("attempt")), "{errs:#?}");
    end(s, task).await;
}

/// A delivery whose sequence is 0 is no broker's (it numbers a subject's
/// messages from 1 and leaves 0 out): it is a bad frame, reported and
/// left unanswered, as the Python and TypeScript clients refuse it; an
/// ack of it would name no sequence and could settle a newer message
/// published under its id. So is one without a sequence (absent or
/// `null`: the broker writes the number into every delivery, each read
/// from the log), which was handed out as sequence 0 and acked by its id
/// alone (absent), or refused as a message that does not decode (`null`).
#[tokio::test]
async fn a_delivery_of_sequence_0_is_a_bad_frame_and_left_unanswered() {
    let acks: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = acks.clone();
    let answer = subscribing_as("sub_1");
    let (url, tx, task) = raw_server(move |f| {
        if f["op"] == "ack" || f["op"] == "nack" {
            seen.lock().unwrap().push(f.clone());
        }
        answer(f)
    })
    .await;
    let errs: Arc<Mutex<Vec<pigeon_client::Error>>> = Arc::default();
    let e = errs.clone();
    let s = Session::connect(&url, "t", &["x"], raw_opts().on_error(move |err| e.lock().unwrap().push(err))).await.unwrap();
    let mut sub = s.subscribe_stream("x", SubscribeOptions::default()).await.unwrap();
    let zero = json!({"id": "msg_zero", "subject": "x", "sequence": 0, "data": {}});
    let none = json!({"id": "msg_none", "subject": "x", "data": {}});
    tx.send(json!({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": zero}).to_string()).unwrap();
    tx.send(
        json!({"op": "deliver_batch", "sub": "sub_1", "deliveries": [{"attempt": 1, "message": zero}, {"attempt": 1, "message": msg(4)}]})
            .to_string(),
    )
    .unwrap();
    let null_seq = json!({"id": "msg_null", "subject": "x", "sequence": null, "data": {}});
    tx.send(json!({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": none}).to_string()).unwrap();
    tx.send(
        json!({"op": "deliver_batch", "sub": "sub_1", "deliveries": [{"attempt": 1, "message": null_seq}, {"attempt": 1, "message": none}]})
            .to_string(),
    )
    .unwrap();
    tx.send(json!({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": msg(5)}).to_string()).unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        let d = tokio::time::timeout(Duration::from_secs(3), sub.recv()).await.expect("the reader stopped").unwrap().unwrap();
        got.push((d.message.id.clone(), d.message.sequence));
        d.ack().await.unwrap();
    }
    assert_eq!(got, [("msg_4".to_string(), 4), ("msg_5".to_string(), 5)], "a delivery of sequence 0 or none was handed out");
    let errs = errs.lock().unwrap().clone();
    let frames: Vec<_> = errs.iter().filter(|e| e.code == "BAD_FRAME" && e.message.contains("sequence is 0")).collect();
    assert_eq!(frames.len(), 2, "each delivery of sequence 0 is one BAD_FRAME: {errs:#?}");
    let frames: Vec<_> = errs.iter().filter(|e| e.code == "BAD_FRAME" && e.message.contains("without a sequence")).collect();
    assert_eq!(frames.len(), 3, "each delivery without a sequence is one BAD_FRAME: {errs:#?}");
    let ids: Vec<_> =
        errs.iter().map(|e| (e.details.get("op").cloned(), e.details.get("index").cloned(), e.details.get("messageId").cloned())).collect();
    assert_eq!(ids.len(), 5, "{errs:#?}");
    assert_eq!(ids[3], (Some(json!("deliver_batch")), Some(json!(0)), Some(json!("msg_null"))), "{errs:#?}");
    let acked: Vec<String> = acks
        .lock()
        .unwrap()
        .iter()
        .flat_map(|f| match f["messageIds"].as_array() {
            Some(ids) => ids.iter().map(|i| i.as_str().unwrap().to_string()).collect(),
            None => vec![f["messageId"].as_str().unwrap().to_string()],
        })
        .collect();
    assert_eq!(acked, ["msg_4", "msg_5"], "a delivery of sequence 0 or none was answered");
    end(s, task).await;
}

/// Each report of a refused delivery names its frame in `details`, as the
/// Python and TypeScript clients' do: `op` (`deliver`, `deliver_batch`)
/// and, for a batch's entry, its `index`. Before, none named either, and
/// a delivery whose message id is empty (no answer can name it) was handed
/// out.
#[tokio::test]
async fn every_refusal_of_a_delivery_names_its_op_and_batch_entry() {
    let refused = [
        ("sequence 0", json!({"attempt": 1, "message": {"id": "msg_x", "subject": "x", "sequence": 0}})),
        ("an attempt of -1", json!({"attempt": -1, "message": msg(9)})),
        ("a numeric id", json!({"attempt": 1, "message": {"id": 5, "subject": "x", "sequence": 9}})),
        ("an empty id", json!({"attempt": 1, "message": {"id": "", "subject": "x", "sequence": 9}})),
        ("no message", json!({"attempt": 1})),
    ];
    let mut wrong = Vec::new();
    for batch in [false, true] {
        for (name, bad) in &refused {
            let (url, tx, task) = raw_server(subscribing_as("sub_1")).await;
            let errs: Arc<Mutex<Vec<pigeon_client::Error>>> = Arc::default();
            let e = errs.clone();
            let s = Session::connect(&url, "t", &["x"], raw_opts().on_error(move |err| e.lock().unwrap().push(err))).await.unwrap();
            let mut sub = s.subscribe_stream("x", SubscribeOptions::default()).await.unwrap();
            let ds = [json!({"attempt": 1, "message": msg(3)}), bad.clone(), json!({"attempt": 1, "message": msg(4)})];
            if batch {
                tx.send(json!({"op": "deliver_batch", "sub": "sub_1", "deliveries": ds}).to_string()).unwrap();
            } else {
                for mut d in ds {
                    d["op"] = json!("deliver");
                    d["sub"] = json!("sub_1");
                    tx.send(d.to_string()).unwrap();
                }
            }
            for want in ["msg_3", "msg_4"] {
                let d = tokio::time::timeout(Duration::from_secs(3), sub.recv()).await.expect("the reader stopped").unwrap().unwrap();
                assert_eq!(d.message.id, want, "{name}");
            }
            let errs = errs.lock().unwrap().clone();
            let want = if batch { json!({"op": "deliver_batch", "index": 1}) } else { json!({"op": "deliver"}) };
            let got: Vec<Value> =
                errs.iter().map(|e| json!({"code": e.code, "op": e.details.get("op"), "index": e.details.get("index")})).collect();
            let want = json!([{"code": "BAD_FRAME", "op": want["op"], "index": want.get("index")}]);
            if json!(got) != want {
                wrong.push(format!("{} {name}: {got:?}", if batch { "deliver_batch" } else { "deliver" }));
            }
            end(s, task).await;
        }
    }
    assert!(wrong.is_empty(), "not named:\n{}", wrong.join("\n"));
}

/// A receive, replay or reply answer naming a message of sequence 0 is no
/// broker's either: a reply is refused `BAD_FRAME` (kind `Protocol`,
/// status 502), and a receive or replay message is left out alone (its
/// `BAD_FRAME` to `on_error`, naming the entry: see tests/pull_refusal.rs),
/// the message beside it returned, rather than handed over as one without
/// a sequence, whose ack or resume would name none and could settle a
/// newer message published under its id. So is a receive or replay
/// message without a sequence (absent or `null`: the broker sends the
/// number with every message it reads from the log). A reply
/// without a sequence (absent or `null`) is taken, as the broker sends
/// every reply (a reply never enters the log), and so is a message of
/// sequence 1; a reply whose sequence was `null` was refused as one that
/// does not decode, where the Go, TypeScript and Python clients take it.
#[tokio::test]
async fn a_receive_replay_or_reply_of_sequence_0_is_a_bad_frame() {
    let zero = json!({"id": "msg_zero", "subject": "x", "sequence": 0, "data": {}});
    let none = json!({"id": "msg_none", "subject": "x", "data": {}});
    let null_seq = json!({"id": "msg_null", "subject": "x", "sequence": null, "data": {}});
    let reply = |m: &Value| {
        let mut r = m.clone();
        r["correlationId"] = json!("msg_ask");
        r
    };
    let good = json!({"id": "msg_r", "subject": "x", "sequence": 1, "correlationId": "msg_ask"});
    let answers = json!({
        "zero": {"messages": [msg(4), zero], "reply": reply(&zero), "why": "sequence is 0"},
        "none": {"messages": [msg(4), none], "reply": reply(&none), "why": "without a sequence"},
        "null": {"messages": [msg(4), null_seq], "reply": reply(&null_seq), "why": "without a sequence"},
        "good": {"messages": [msg(1), msg(2)], "reply": good},
    });
    let ask = pigeon_client::Message { id: "msg_ask".into(), ..pigeon_client::Message::new("x", "q", "ask") };
    let mut wrong = Vec::new();
    for case in ["zero", "none", "null", "good"] {
        let a = answers[case].clone();
        let why = a["why"].as_str().unwrap_or_default().to_string();
        let (url, _tx, task) = raw_server(move |f| match f["op"].as_str() {
            Some("receive") | Some("replay") => vec![json!({"op": "messages", "re": f["id"], "messages": a["messages"]})],
            Some("request") => vec![json!({"op": "reply", "re": f["id"], "message": a["reply"]})],
            _ => vec![json!({"op": "ok", "re": f["id"]})],
        })
        .await;
        let s = Session::connect(&url, "t", &["x"], raw_opts()).await.unwrap();
        let got = [
            ("receive", s.receive("x", 10).await.map(|ms| ms.len())),
            ("receive_attempts", s.receive_attempts("x", 10).await.map(|ms| ms.len())),
            ("replay", s.replay("x", Default::default()).await.map(|ms| ms.len())),
            ("request", s.request(&ask, Duration::from_secs(2)).await.map(|_| 1)),
        ];
        for (op, r) in got {
            let taken = case == "good" || (op == "request" && case != "zero");
            match (taken, r) {
                (true, Ok(_)) => {}
                (false, Ok(1)) if op != "request" => {} // msg(4) alone
                (true, Err(e)) => wrong.push(format!("{case} {op}: a good answer refused: {e}")),
                (false, Ok(n)) => wrong.push(format!("{case} {op}: an answer naming no broker's sequence taken ({n} messages)")),
                (false, Err(e)) => {
                    let shape = (e.code.as_str(), e.kind, e.status) == ("BAD_FRAME", pigeon_client::ErrorKind::Protocol, 502);
                    let named = e.message.contains(&why) && (op == "request" || e.message.contains("messages[1]"));
                    if !shape || !named {
                        wrong.push(format!("{case} {op}: not the HTTP receive's refusal, naming the entry: {e:?}"));
                    }
                }
            }
        }
        end(s, task).await;
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Data nested as deeply as the broker admits (pigeon.MaxJSONDepth, 64
/// levels, the data object the first) is read, in the frame that nests it
/// deepest (a deliver_batch: 4 levels more); so is data a level beyond
/// (the Go client reads it too), and data deeper than serde_json's
/// recursion limit is a bad frame, reported, without overflowing the
/// stack: the reader goes on.
#[tokio::test]
async fn data_at_the_brokers_maximum_depth_is_read() {
    const MAX_JSON_DEPTH: usize = 64; // the broker's (envelope.go)
    let (url, tx, task) = raw_server(subscribing_as("sub_1")).await;
    let errs: Arc<Mutex<Vec<pigeon_client::Error>>> = Arc::default();
    let e = errs.clone();
    let s = Session::connect(&url, "t", &["x"], raw_opts().on_error(move |err| e.lock().unwrap().push(err))).await.unwrap();
    let mut sub = s.subscribe_stream("x", SubscribeOptions::default()).await.unwrap();
    // An object holding arrays: `levels` levels in all.
    let deep = |levels: usize| format!(r#"{{"x":{}{}}}"#, "[".repeat(levels - 1), "]".repeat(levels - 1));
    let frame = |id: &str, levels: usize| {
        format!(
            r#"{{"op":"deliver_batch","sub":"sub_1","deliveries":[{{"attempt":1,"message":{{"id":"{id}","subject":"x","sequence":1,"data":{}}}}}]}}"#,
            deep(levels)
        )
    };
    for (id, levels) in [("msg_max", MAX_JSON_DEPTH), ("msg_beyond", MAX_JSON_DEPTH + 1), ("msg_far", 4 * MAX_JSON_DEPTH)] {
        let f = frame(id, levels);
        tx.send(f).unwrap();
    }
    for (id, levels) in [("msg_max", MAX_JSON_DEPTH), ("msg_beyond", MAX_JSON_DEPTH + 1)] {
        let d = tokio::time::timeout(Duration::from_secs(3), sub.recv()).await.expect("not delivered").unwrap().unwrap();
        assert_eq!(d.message.id, id);
        let mut v = &d.message.data["x"];
        let mut n = 1;
        while let Some(a) = v.as_array() {
            n += 1;
            match a.first() {
                Some(x) => v = x,
                None => break,
            }
        }
        assert_eq!(n, levels, "{id}");
        d.ack().await.unwrap();
    }
    // The reader goes on after the one too deep.
    tx.send(json!({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": msg(9)}).to_string()).unwrap();
    let d = tokio::time::timeout(Duration::from_secs(3), sub.recv()).await.expect("the reader stopped").unwrap().unwrap();
    assert_eq!(d.message.id, "msg_9");
    let errs = errs.lock().unwrap().clone();
    assert_eq!(errs.iter().filter(|e| e.code == "BAD_FRAME").count(), 1, "{errs:#?}");
    end(s, task).await;
}

/// A delivery numbered 2^64-1 (no broker numbers that far: a hostile or
/// broken server) is no resume position, as in the Go client: the
/// subscription resumes as if it had not been numbered (here where it
/// first started: no `start`), acknowledged or at most once. Before, the
/// resume saturated and asked for 2^64-1 again, a position past every
/// message a broker will ever have: the subscription got nothing more.
#[tokio::test]
async fn the_largest_sequence_cannot_make_a_resume_panic() {
    for ack in [pigeon_client::Ack::None, pigeon_client::Ack::Explicit] {
        let starts = resume_after_the_largest_sequence(ack).await;
        assert_eq!(starts.len(), 2, "{ack:?}: {starts:?}");
        assert_eq!(starts[1], Value::Null, "{ack:?}: the resume started at 2^64-1: {starts:?}");
    }
}

/// A subscription (`ack`) whose first connection delivers the largest
/// sequence and is then dropped: the `start` of each subscribe.
async fn resume_after_the_largest_sequence(ack: pigeon_client::Ack) -> Vec<Value> {
    // Answers every connection; the first delivers the largest sequence,
    // then drops the connection.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let starts: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = starts.clone();
    let task = tokio::spawn(async move {
        for n in 0.. {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else { continue };
            let seen = seen.clone();
            tokio::spawn(async move {
                while let Some(Ok(W::Text(t))) = ws.next().await {
                    let f: Value = serde_json::from_str(&t).unwrap();
                    let out = match f["op"].as_str() {
                        Some("negotiate") => {
                            let contract = json!({"id": "ctr_raw", "subjects": [], "expiresAt": "2099-01-01T00:00:00Z"});
                            vec![json!({"op": "contract", "re": f["id"], "contract": contract})]
                        }
                        Some("subscribe") => {
                            seen.lock().unwrap().push(f["start"].clone());
                            let sid = format!("sub_{n}");
                            let seq = if n == 0 { u64::MAX } else { 5 };
                            let m = json!({"id": format!("msg_{n}"), "subject": "x", "sequence": seq, "data": {}});
                            vec![
                                json!({"op": "subscribed", "re": f["id"], "sub": sid}),
                                json!({"op": "deliver", "sub": sid, "attempt": 1, "message": m}),
                            ]
                        }
                        _ => vec![json!({"op": "ok", "re": f["id"]})],
                    };
                    for o in out {
                        let _ = ws.send(W::Text(o.to_string())).await;
                    }
                    if n == 0 && f["op"] == "subscribe" {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        return; // dropped: the client reconnects and resumes
                    }
                }
            });
        }
    });
    let o = raw_opts().reconnect(true).call_timeout(Duration::from_secs(2));
    let o = ConnectOptions { backoff: (Duration::from_millis(10), Duration::from_millis(50)), ..o };
    let s = Session::connect(&url, "t", &["x"], o).await.unwrap();
    let (dtx, mut drx) = mpsc::unbounded_channel();
    let _sub = s
        .subscribe("x", SubscribeOptions::default().ack(ack), move |d| {
            let dtx = dtx.clone();
            async move {
                let _ = dtx.send(d.message.sequence);
                Ok(())
            }
        })
        .await
        .unwrap();
    assert_eq!(tokio::time::timeout(Duration::from_secs(3), drx.recv()).await.unwrap(), Some(u64::MAX));
    // After the drop the subscription resumes and goes on.
    let next = tokio::time::timeout(Duration::from_secs(5), drx.recv()).await.expect("the subscription did not resume");
    assert_eq!(next, Some(5));
    let starts = starts.lock().unwrap().clone();
    end(s, task).await;
    starts
}

#[tokio::test]
async fn an_http_answer_without_end_is_refused_rather_than_read_into_memory() {
    use pigeon_client::http::HttpClient;
    // 200 MiB without a length: what a server (or anything on a plain
    // http:// path) can stream at a client for as long as it likes.
    let raw = raw_http("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", 200 << 20, None).await;
    let (url, written) = (raw.url, raw.written);
    let h = HttpClient::new(&url, "t");
    let e = tokio::time::timeout(Duration::from_secs(20), h.fetch_keys("acct"))
        .await
        .expect("no answer in time")
        .expect_err("an answer of 200 MiB was read whole");
    assert_eq!(e.kind, pigeon_client::ErrorKind::Protocol, "{e}");
    assert!(written.load(Ordering::SeqCst) < 100 << 20, "{} bytes read", written.load(Ordering::SeqCst));
    // A Content-Length past the bound is refused too.
    let url = raw_http("HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n", 0, None).await.url;
    let e = HttpClient::new(&url, "t").call("GET", "/v1/x", None).await.unwrap_err();
    assert_eq!(e.kind, pigeon_client::ErrorKind::Protocol, "{e}");
}

#[tokio::test]
async fn a_2xx_answer_that_is_not_json_is_an_error_not_an_empty_key_list() {
    use pigeon_client::http::HttpClient;
    let (url, _) = http_canned(200, "<html>hi").await;
    let e = HttpClient::new(&url, "t").fetch_keys("acct").await.expect_err("an HTML page read as no keys");
    assert_eq!(e.kind, pigeon_client::ErrorKind::Protocol, "{e}");
}

#[tokio::test]
async fn an_http_method_or_path_cannot_add_a_header_or_a_request() {
    use pigeon_client::http::HttpClient;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let h = HttpClient::new(&format!("http://127.0.0.1:{port}"), "admin-token");
    for (method, path) in [
        ("GET", "/v1/accounts\r\nX-Injected: 1"),
        ("GET", "/v1/a HTTP/1.1\r\n\r\nDELETE /v1/contracts/c"),
        ("GET", "/v1/a\nX: 1"),
        ("GET", "v1/relative"),
        ("GET /v1/x HTTP/1.1\r\nX: 1\r\n\r\nDELETE", "/v1/contracts/c"),
        ("", "/v1/a"),
    ] {
        let e = h.call(method, path, None).await.unwrap_err();
        assert_eq!(e.code, "INVALID_ARGUMENT", "{method:?} {path:?}: {e}");
    }
    let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(accepted.is_err(), "a request was sent");
}

/// A session on a raw endpoint with one subscription whose handler holds
/// its first delivery until `gate` is notified; the frames the endpoint
/// read are in the list returned.
async fn held_handler(
) -> (Session, pigeon_client::Subscription, Arc<tokio::sync::Notify>, Arc<Mutex<Vec<Value>>>, tokio::task::JoinHandle<()>) {
    let frames: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = frames.clone();
    let (url, tx, task) = raw_server(move |f| {
        seen.lock().unwrap().push(f.clone());
        match f["op"].as_str() {
            Some("subscribe") => vec![json!({"op": "subscribed", "re": f["id"], "sub": "sub_1"})],
            Some("ack") | Some("nack") | Some("unsubscribe") | Some("ping") => vec![json!({"op": "ok", "re": f["id"]})],
            _ => vec![],
        }
    })
    .await;
    let s = Session::connect(&url, "t", &["x"], raw_opts().call_timeout(Duration::from_secs(2))).await.unwrap();
    let (sub, gate, mut started) = common::gated_subscribe(&s, "x").await;
    tx.send(json!({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": msg(1)}).to_string()).unwrap();
    tokio::time::timeout(Duration::from_secs(3), started.recv()).await.unwrap();
    (s, sub, gate, frames, task)
}

#[tokio::test]
async fn an_unsubscribe_given_up_on_still_ends_the_subscription() {
    let (s, sub, gate, frames, task) = held_handler().await;
    // The caller gives up while the handler runs.
    assert!(tokio::time::timeout(Duration::from_millis(100), sub.unsubscribe()).await.is_err());
    gate.notify_one();
    tokio::time::timeout(Duration::from_secs(3), sub.done()).await.expect("the subscription never ended");
    tokio::time::timeout(Duration::from_secs(3), sub.unsubscribe()).await.expect("a second unsubscribe hangs").unwrap();
    let ops: Vec<Value> = frames.lock().unwrap().iter().map(|f| f["op"].clone()).collect();
    assert_eq!(ops.iter().filter(|o| *o == "unsubscribe").count(), 1, "{ops:?}");
    assert!(ops.iter().position(|o| o == "ack") < ops.iter().position(|o| o == "unsubscribe"), "{ops:?}");
    end(s, task).await;
}

#[tokio::test]
async fn a_close_given_up_on_still_closes_the_session() {
    let (s, sub, gate, frames, task) = held_handler().await;
    assert!(tokio::time::timeout(Duration::from_millis(100), s.close()).await.is_err());
    gate.notify_one();
    let closed = tokio::time::timeout(Duration::from_secs(3), s.closed()).await.expect("the session never closed");
    assert!(closed.is_none(), "{closed:?}");
    assert!(sub.is_done());
    let ops: Vec<Value> = frames.lock().unwrap().iter().map(|f| f["op"].clone()).collect();
    assert!(ops.iter().position(|o| o == "ack") < ops.iter().position(|o| o == "unsubscribe"), "{ops:?}");
    task.abort();
}

#[tokio::test]
async fn an_on_error_callback_that_panics_does_not_stop_the_connection() {
    let (url, tx, task) = raw_server(move |f| match f["op"].as_str() {
        Some("ping") => vec![json!({"op": "pong", "re": f["id"]})],
        _ => vec![],
    })
    .await;
    let o = raw_opts().call_timeout(Duration::from_secs(2)).on_error(|e| panic!("a careless callback: {e}"));
    let s = Session::connect(&url, "t", &["x"], o).await.unwrap();
    tx.send(json!({"op": "what"}).to_string()).unwrap(); // reaches on_error
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.ping().await.expect("the connection stopped reading");
    end(s, task).await;
}

#[tokio::test]
async fn a_handler_that_panics_before_its_future_nacks_the_delivery() {
    let frames: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = frames.clone();
    let answer = subscribing_as("sub_1");
    let (url, tx, task) = raw_server(move |f| {
        seen.lock().unwrap().push(f.clone());
        answer(f)
    })
    .await;
    let s = Session::connect(&url, "t", &["x"], raw_opts()).await.unwrap();
    let _sub = s
        .subscribe("x", SubscribeOptions::default(), |d| {
            // Panics while making its future, not inside it.
            let id: u64 = d.message.data["n"].as_u64().expect("a number");
            async move {
                let _ = id;
                Ok(())
            }
        })
        .await
        .unwrap();
    tx.send(json!({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": msg(1)}).to_string()).unwrap();
    let nacked = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            if frames.lock().unwrap().iter().any(|f| f["op"] == "nack" && f["messageId"] == "msg_1") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(nacked.is_ok(), "no nack: {:?}", frames.lock().unwrap());
    end(s, task).await;
}

#[tokio::test]
async fn publishes_on_a_connection_whose_server_stopped_reading_end_when_it_is_dropped() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        let Some(Ok(W::Text(t))) = ws.next().await else { return };
        let f: Value = serde_json::from_str(&t).unwrap();
        let contract = json!({"id": "ctr_raw", "subjects": [], "expiresAt": "2099-01-01T00:00:00Z"});
        ws.send(W::Text(json!({"op": "contract", "re": f["id"], "contract": contract, "maxFrame": 64 << 20}).to_string())).await.unwrap();
        // Reads nothing more, and keeps the connection open.
        tokio::time::sleep(Duration::from_secs(3600)).await;
        drop(ws);
    });
    // The bound on bytes of publishes pending is not what this tests.
    let o =
        raw_opts().call_timeout(Duration::from_millis(500)).keepalive(Some(Duration::from_millis(300))).max_pending_publish_bytes(64 << 20);
    let s = Session::connect(&url, "t", &["x"], o).await.unwrap();
    // Large enough to fill the socket's buffers: the writer waits on it.
    let big = pigeon_client::Message::new("x", "t", "i").with_data(json!({"pad": "x".repeat(32 << 20)}));
    let first = s.publish_async(&big).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = s.publish_async(&pigeon_client::Message::new("x", "t", "i")).await.unwrap();
    let failed = tokio::time::timeout(Duration::from_secs(5), s.closed()).await.expect("the keepalive did not drop the connection");
    assert!(failed.is_some());
    let r = tokio::time::timeout(Duration::from_secs(5), async { (first.await, second.await) })
        .await
        .expect("a publish on the dropped connection never ended");
    assert!(r.0.is_err() && r.1.is_err(), "{r:?}");
    task.abort();
}

#[tokio::test]
async fn a_window_of_zero_set_as_a_field_is_one_not_a_subscription_that_takes_nothing() {
    let asked: Arc<Mutex<Option<Value>>> = Arc::default();
    let a = asked.clone();
    let (url, tx, task) = raw_server(move |f| match f["op"].as_str() {
        Some("subscribe") => {
            *a.lock().unwrap() = Some(f["window"].clone());
            vec![json!({"op": "subscribed", "re": f["id"], "sub": "sub_1"})]
        }
        Some("ack") | Some("nack") | Some("unsubscribe") => vec![json!({"op": "ok", "re": f["id"]})],
        _ => vec![],
    })
    .await;
    let s = Session::connect(&url, "t", &["x"], raw_opts()).await.unwrap();
    let mut sub = s.subscribe_stream("x", SubscribeOptions { window: Some(0), ..Default::default() }).await.unwrap();
    assert_eq!(asked.lock().unwrap().clone(), Some(json!(1)));
    tx.send(json!({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": msg(1)}).to_string()).unwrap();
    let d = tokio::time::timeout(Duration::from_secs(3), sub.recv()).await.expect("the delivery was left unanswered").unwrap().unwrap();
    d.ack().await.unwrap();
    end(s, task).await;
}

#[tokio::test]
async fn a_connection_lost_just_after_its_contract_is_not_taken_for_a_live_one() {
    for reconnect in [false, true] {
        // Every connection: the contract, then dropped at once (a server
        // going down as it answers).
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let dials = Arc::new(AtomicUsize::new(0));
        let counted = dials.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { return };
                counted.fetch_add(1, Ordering::SeqCst);
                let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else { continue };
                if let Some(Ok(W::Text(t))) = ws.next().await {
                    let f: Value = serde_json::from_str(&t).unwrap();
                    let contract = json!({"id": "ctr_raw", "subjects": [], "expiresAt": "2099-01-01T00:00:00Z"});
                    let _ = ws.send(W::Text(json!({"op": "contract", "re": f["id"], "contract": contract}).to_string())).await;
                }
                drop(ws);
            }
        });
        let o = ConnectOptions {
            backoff: (Duration::from_millis(20), Duration::from_millis(20)),
            reconnect_window: Duration::from_millis(300),
            ..raw_opts().reconnect(reconnect)
        };
        let s = Session::connect(&url, "t", &["x"], o).await.unwrap();
        if reconnect {
            // Each connection is lost as it comes up: the session keeps
            // redialling (with backoff), rather than wait on the first.
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert!(dials.load(Ordering::SeqCst) > 2, "{} dials", dials.load(Ordering::SeqCst));
            let _ = s.close().await;
        } else {
            let failed = tokio::time::timeout(Duration::from_secs(5), s.closed()).await;
            assert!(matches!(failed, Ok(Some(_))), "{failed:?}");
            let e = tokio::time::timeout(Duration::from_secs(2), s.ping()).await.expect("a call waits on a dead connection").unwrap_err();
            assert_eq!(e.kind, pigeon_client::ErrorKind::Transport, "{e}");
        }
        task.abort();
    }
}

#[tokio::test]
async fn a_handler_that_answers_its_delivery_itself_is_not_answered_again() {
    let frames: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = frames.clone();
    let (url, tx, task) = raw_server(move |f| {
        seen.lock().unwrap().push(f.clone());
        match f["op"].as_str() {
            Some("subscribe") => vec![json!({"op": "subscribed", "re": f["id"], "sub": "sub_1"})],
            Some("ack") | Some("nack") | Some("unsubscribe") | Some("ping") => vec![json!({"op": "ok", "re": f["id"]})],
            _ => vec![],
        }
    })
    .await;
    let s = Session::connect(&url, "t", &["x"], raw_opts()).await.unwrap();
    let sub = s
        .subscribe("x", SubscribeOptions::default(), |d| async move {
            if d.message.sequence == 1 {
                d.nack(None).await.unwrap(); // given back, then Ok: not acked after all
            } else {
                d.ack().await.unwrap(); // acked, then an error: not nacked after all
                return Err(pigeon_client::HandlerError::new("after the ack"));
            }
            Ok(())
        })
        .await
        .unwrap();
    tx.send(json!({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": msg(1)}).to_string()).unwrap();
    tx.send(json!({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": msg(2)}).to_string()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    tokio::time::timeout(Duration::from_secs(3), sub.idle()).await.unwrap();
    let answers: Vec<(Value, Value)> = frames
        .lock()
        .unwrap()
        .iter()
        .filter(|f| f["op"] == "ack" || f["op"] == "nack")
        .map(|f| (f["op"].clone(), f["messageId"].clone()))
        .collect();
    assert_eq!(answers, vec![(json!("nack"), json!("msg_1")), (json!("ack"), json!("msg_2"))]);
    end(s, task).await;
}

/// An HTTP answer holding an object with two members of one name (at any
/// depth, in a 2xx answer or an error body) is refused (`BAD_FRAME`), as a
/// WebSocket frame is, instead of serde_json's keeping the last; one with a
/// lone surrogate escape is refused as text that is not JSON.
#[tokio::test]
async fn an_http_answer_with_a_duplicate_key_or_a_lone_surrogate_is_refused() {
    use pigeon_client::http::HttpClient;
    for (status, body) in [
        (200, r#"{"sequence":8,"sequence":70}"#),
        (202, r#"{"status":"accepted","message":{"id":"m","data":{"a":[{"b":1,"\u0062":2}]}}}"#),
        (403, r#"{"error":{"code":"FORBIDDEN","code":"INTERNAL","message":"m"}}"#),
        (200, r#"{"keys":[{"kid":"\ud800"}]}"#),
        (200, r#"{"keys":[{"kid":"\udc00\ud800"}]}"#),
    ] {
        let (url, _) = http_canned(status, body).await;
        let e = HttpClient::new(&url, "t").call("GET", "/v1/x", None).await.expect_err(body);
        assert_eq!((e.code.as_str(), e.kind), ("BAD_FRAME", pigeon_client::ErrorKind::Protocol), "{body}: {e}");
    }
}

/// A handled delivery whose ack the server refused, or never answered, is
/// not asked for again by the resume, as in the Go, TypeScript and Python
/// clients: the handler succeeded, and the sequence kept in the pending set
/// made the resume start there, delivering again every message after it.
/// Before, an ack counted only once the server took it: the resume asked
/// for 5 in both cases.
#[tokio::test]
async fn a_handled_delivery_whose_ack_failed_is_not_asked_for_again() {
    for (how, want) in [("refused", json!({"sequence": 7})), ("unanswered", json!({"sequence": 6}))] {
        assert_eq!(resume_after_a_failed_ack(how).await, want, "{how}");
    }
}

/// A subscription whose first connection delivers msg_5 and answers its
/// ack by `how` ("refused": ACK_NOT_ALLOWED, then msg_6 delivered, its ack
/// taken and the connection dropped; "unanswered": the connection dropped
/// when the ack comes): the `start` of the resumed subscribe.
async fn resume_after_a_failed_ack(how: &'static str) -> Value {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let (stx, mut srx) = mpsc::unbounded_channel::<Value>();
    let task = tokio::spawn(async move {
        for n in 0.. {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else { continue };
            let stx = stx.clone();
            tokio::spawn(async move {
                while let Some(Ok(W::Text(t))) = ws.next().await {
                    let f: Value = serde_json::from_str(&t).unwrap();
                    let deliver = |seq: u64| json!({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": msg(seq)});
                    let (out, drop_after) = match f["op"].as_str() {
                        Some("negotiate") => {
                            let contract = json!({"id": "ctr_raw", "subjects": [], "expiresAt": "2099-01-01T00:00:00Z"});
                            (vec![json!({"op": "contract", "re": f["id"], "contract": contract})], false)
                        }
                        Some("subscribe") => {
                            let _ = stx.send(f["start"].clone());
                            let mut out = vec![json!({"op": "subscribed", "re": f["id"], "sub": "sub_1", "from": 1})];
                            if n == 0 {
                                out.push(deliver(5));
                            }
                            (out, false)
                        }
                        Some("ack") if n == 0 && f["messageId"] == "msg_5" => match how {
                            "unanswered" => (vec![], true),
                            _ => {
                                let refused = json!({"code": "ACK_NOT_ALLOWED", "message": "no delivery of that message is waiting"});
                                (vec![json!({"op": "error", "re": f["id"], "error": refused}), deliver(6)], false)
                            }
                        },
                        Some("ack") if n == 0 => (vec![json!({"op": "ok", "re": f["id"]})], true),
                        _ => (vec![json!({"op": "ok", "re": f["id"]})], false),
                    };
                    for o in out {
                        let _ = ws.send(W::Text(o.to_string())).await;
                    }
                    if drop_after {
                        return; // dropped: the client reconnects and resumes
                    }
                }
            });
        }
    });
    let o = raw_opts().reconnect(true).call_timeout(Duration::from_secs(2));
    let o = ConnectOptions { backoff: (Duration::from_millis(10), Duration::from_millis(50)), ..o };
    let s = Session::connect(&url, "t", &["x"], o).await.unwrap();
    let _sub = s.subscribe("x", SubscribeOptions::default(), |_| async { Ok(()) }).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(3), srx.recv()).await.unwrap().unwrap();
    assert_eq!(first, Value::Null, "{how}: the first subscribe");
    let resumed = tokio::time::timeout(Duration::from_secs(5), srx.recv()).await.expect("the subscription did not resume").unwrap();
    end(s, task).await;
    resumed
}
