//! A pull answer (receive, replay) holding, beside well-formed messages, an
//! entry no broker sends (a message whose attempt is not an integer of 1 to
//! 2^31-1, one without a sequence, an entry that is not a message) refuses
//! that entry alone, over WebSocket and HTTP, as the TypeScript and Python
//! clients do: its `BAD_FRAME` goes to `on_error` naming the entry, it is
//! not handed over and never acked (the server's ack wait gives it back),
//! and the well-formed messages are returned, each with its own attempt,
//! so that they can be acked. Before, the whole answer failed `BAD_FRAME`:
//! the messages the server had leased were invisible to the caller until
//! their ack wait passed, and a server sending the bad entry again starved
//! the consumer. An answer malformed as a whole is still refused whole.

mod common;

use common::{end, Seen};
use pigeon_client::http::{AckMode, HttpClient};
use pigeon_client::{ConnectOptions, Error, ErrorKind, ReplayOptions, Session};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

const SUBJECT: &str = "jobs.run";

fn msg(id: &str, seq: Option<u64>) -> Value {
    let mut m = json!({"id": id, "subject": SUBJECT, "data": {}});
    if let Some(s) = seq {
        m["sequence"] = json!(s);
    }
    m
}

/// [good, bad attempt, good, no sequence], with the bad attempt `bad`.
fn mixed(bad: Value) -> Value {
    json!({
        "messages": [msg("msg_good1", Some(1)), msg("msg_attempt", Some(2)), msg("msg_good2", Some(3)), msg("msg_unsequenced", None)],
        "attempts": [1, bad, 2, 1],
    })
}

/// The bad attempts of a leased message a hostile server may send: 0, a
/// negative, null, a fraction, a string, past 2^31-1 and past 2^63-1.
fn bad_attempts() -> Vec<Value> {
    vec![json!(0), json!(-1), json!(null), json!(1.5), json!("2"), json!(2_147_483_648u64), json!(9_223_372_036_854_775_808u64)]
}

/// The refusals `on_error` received: each one's code, kind, op, index and
/// messageId.
type Refusals = Arc<Mutex<Vec<(String, ErrorKind, Value, Value, Value)>>>;

fn recorder() -> (Refusals, impl Fn(Error) + Send + Sync + 'static) {
    let got: Refusals = Arc::default();
    let g = got.clone();
    (got, move |e: Error| {
        let d = |k: &str| e.details.get(k).cloned().unwrap_or(Value::Null);
        g.lock().unwrap().push((e.code.clone(), e.kind, d("op"), d("index"), d("messageId")));
    })
}

fn refusal(op: &str, index: u64, id: Option<&str>) -> (String, ErrorKind, Value, Value, Value) {
    ("BAD_FRAME".into(), ErrorKind::Protocol, json!(op), json!(index), id.map_or(Value::Null, |i| json!(i)))
}

/// A raw WebSocket endpoint answering every receive and replay with
/// `answer` (op `messages`), every other frame `ok`, recording the frames.
async fn ws_answering(mut answer: Value) -> (String, Arc<Mutex<Vec<Value>>>, tokio::task::JoinHandle<()>) {
    answer["op"] = json!("messages");
    common::answering(&["receive", "replay"], answer).await
}

async fn connect(url: &str, on_error: impl Fn(Error) + Send + Sync + 'static) -> Session {
    let o = ConnectOptions::default().keepalive(None).auto_renew(false).reconnect(false).on_error(on_error);
    Session::connect(url, "t", &[SUBJECT], o).await.unwrap()
}

/// The acks among `frames`: (messageId, sequence, attempt).
fn acks(frames: &Mutex<Vec<Value>>) -> Vec<(Value, Value, Value)> {
    frames
        .lock()
        .unwrap()
        .iter()
        .filter(|f| f["op"] == "ack")
        .map(|f| (f["messageId"].clone(), f["sequence"].clone(), f["attempt"].clone()))
        .collect()
}

fn ids_and_attempts(got: &[(pigeon_client::Message, u32)]) -> Vec<(&str, u32)> {
    got.iter().map(|(m, a)| (m.id.as_str(), *a)).collect()
}

#[tokio::test]
async fn ws_receive_refuses_a_bad_entry_alone() {
    for bad in bad_attempts() {
        let (url, frames, task) = ws_answering(mixed(bad.clone())).await;
        let (refused, on_error) = recorder();
        let s = connect(&url, on_error).await;
        let got = s.receive_attempts(SUBJECT, 4).await.unwrap_or_else(|e| panic!("attempt {bad}: {e}"));
        assert_eq!(ids_and_attempts(&got), vec![("msg_good1", 1), ("msg_good2", 2)], "attempt {bad}");
        assert_eq!(
            *refused.lock().unwrap(),
            vec![refusal("receive", 1, Some("msg_attempt")), refusal("receive", 3, Some("msg_unsequenced"))],
            "attempt {bad}"
        );
        for (m, a) in &got {
            s.ack_attempt(SUBJECT, &m.id, m.sequence, *a).await.unwrap();
        }
        assert_eq!(
            acks(&frames),
            vec![(json!("msg_good1"), json!(1), json!(1)), (json!("msg_good2"), json!(3), json!(2))],
            "the messages kept are acked, the refused ones never"
        );
        end(s, task).await;
    }
}

#[tokio::test]
async fn ws_receive_and_replay_refuse_an_entry_without_sequence_alone() {
    let answer =
        json!({"messages": [msg("msg_good1", Some(1)), null, msg("msg_good2", Some(3)), msg("msg_zero", Some(0)), msg("msg_null", None)]});
    let mut answer_null = answer.clone();
    answer_null["messages"][4]["sequence"] = Value::Null;
    let (url, _, task) = ws_answering(answer_null).await;
    let (refused, on_error) = recorder();
    let s = connect(&url, on_error).await;
    let want = |op: &str| vec![refusal(op, 1, None), refusal(op, 3, Some("msg_zero")), refusal(op, 4, Some("msg_null"))];

    let got = s.receive(SUBJECT, 10).await.unwrap();
    assert_eq!(got.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), vec!["msg_good1", "msg_good2"]);
    assert_eq!(std::mem::take(&mut *refused.lock().unwrap()), want("receive"));

    let got = s.receive_attempts(SUBJECT, 10).await.unwrap();
    assert_eq!(ids_and_attempts(&got), vec![("msg_good1", 0), ("msg_good2", 0)], "no attempts named: none leased");
    assert_eq!(std::mem::take(&mut *refused.lock().unwrap()), want("receive"));

    let got = s.replay(SUBJECT, ReplayOptions::default()).await.unwrap();
    assert_eq!(got.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), vec!["msg_good1", "msg_good2"]);
    assert_eq!(std::mem::take(&mut *refused.lock().unwrap()), want("replay"));
    end(s, task).await;
}

/// Answers malformed as a whole: their attempts cannot be told to their
/// messages, or they hold no list of messages.
fn malformed() -> Vec<(&'static str, Value)> {
    let two = json!([msg("msg_a", Some(1)), msg("msg_b", Some(2))]);
    vec![
        ("fewer attempts", json!({"messages": two, "attempts": [1]})),
        ("more attempts", json!({"messages": two, "attempts": [1, 1, 1]})),
        ("no attempts for messages", json!({"messages": two, "attempts": []})),
        ("attempts not an array", json!({"messages": two, "attempts": 1})),
        ("attempts null", json!({"messages": two, "attempts": null})),
        ("messages not an array", json!({"messages": {"id": "msg_a"}, "attempts": [1]})),
    ]
}

#[tokio::test]
async fn ws_receive_refuses_an_answer_malformed_as_a_whole() {
    let mut wrong = Vec::new();
    for (name, answer) in malformed() {
        let (url, frames, task) = ws_answering(answer).await;
        let s = connect(&url, |_| {}).await;
        match s.receive_attempts(SUBJECT, 2).await {
            Err(e) if e.code == "BAD_FRAME" && e.kind == ErrorKind::Protocol => {}
            r => wrong.push(format!("{name}: {:?}", r.map(|g| g.len()))),
        }
        assert!(acks(&frames).is_empty());
        end(s, task).await;
    }
    assert!(wrong.is_empty(), "not refused whole:\n{}", wrong.join("\n"));
}

// ---- HTTP ----

/// An HTTP endpoint answering every receive with `answer`, every other
/// request `{"ok":true}`, recording what it read.
async fn http_answering(answer: Value) -> (String, Arc<Mutex<Vec<Seen>>>) {
    common::http_answering("/receive ", answer).await
}

#[tokio::test]
async fn http_receive_refuses_a_bad_entry_alone() {
    for bad in bad_attempts() {
        let (url, seen) = http_answering(mixed(bad.clone())).await;
        let (refused, on_error) = recorder();
        let h = HttpClient::new(&url, "t").with_contract("ctr_1").with_on_error(on_error);
        let got = h.receive_attempts(SUBJECT, 4, AckMode::Explicit).await.unwrap_or_else(|e| panic!("attempt {bad}: {e}"));
        assert_eq!(ids_and_attempts(&got), vec![("msg_good1", 1), ("msg_good2", 2)], "attempt {bad}");
        assert_eq!(
            *refused.lock().unwrap(),
            vec![refusal("receive", 1, Some("msg_attempt")), refusal("receive", 3, Some("msg_unsequenced"))],
            "attempt {bad}"
        );
        seen.lock().unwrap().clear();
        for (m, a) in &got {
            h.ack_attempt(SUBJECT, &m.id, m.sequence, *a).await.unwrap();
        }
        let acked: Vec<(Value, Value, Value)> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|r| (r.body["messageId"].clone(), r.body["sequence"].clone(), r.body["attempt"].clone()))
            .collect();
        assert_eq!(acked, vec![(json!("msg_good1"), json!(1), json!(1)), (json!("msg_good2"), json!(3), json!(2))]);
    }
    // receive (without the attempts) leaves out an entry that is not a
    // message the same way.
    let (url, _) = http_answering(json!({"messages": [msg("msg_good1", Some(1)), null, msg("msg_zero", Some(0))]})).await;
    let (refused, on_error) = recorder();
    let h = HttpClient::new(&url, "t").with_contract("ctr_1").with_on_error(on_error);
    let got = h.receive(SUBJECT, 4, AckMode::Auto).await.unwrap();
    assert_eq!(got.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), vec!["msg_good1"]);
    assert_eq!(*refused.lock().unwrap(), vec![refusal("receive", 1, None), refusal("receive", 2, Some("msg_zero"))]);
}

#[tokio::test]
async fn http_receive_refuses_an_answer_malformed_as_a_whole() {
    let mut wrong = Vec::new();
    for (name, answer) in malformed() {
        let (url, _) = http_answering(answer).await;
        let h = HttpClient::new(&url, "t").with_contract("ctr_1");
        match h.receive_attempts(SUBJECT, 2, AckMode::Explicit).await {
            Err(e) if e.code == "BAD_FRAME" && e.kind == ErrorKind::Protocol => {}
            r => wrong.push(format!("{name}: {:?}", r.map(|g| g.len()))),
        }
    }
    assert!(wrong.is_empty(), "not refused whole:\n{}", wrong.join("\n"));
}
