//! A publish decision is read as the Go client reads it (transport/ws,
//! `decodeFromServer` and `resolvePublishes`): each member of its type
//! first (`status` a string; the message an envelope, each member of the
//! type `pigeon.Message` gives it, `sequence` and `hops` unsigned integers,
//! `null` read as absent; a slot's `error` an error object), and only then
//! what it says (the error, when there is one; else the message, with
//! status `accepted` or `duplicate`). A decision that does not read so
//! fails its publish `BAD_FRAME`, saying that the message may have been
//! accepted (the broker judged it and may have stored it: it is not to be
//! published again without an idempotency key); in a `publish_batch`'s
//! `decisions` only that slot's publish fails, the others resolve.
//!
//! Before, none of these failures said that the message may have been
//! accepted; a slot's `error` was taken for the server's refusal whatever
//! it was (a string, `null`, an object of a number code) and beside a
//! message that does not decode; a `decisions` answer of more results than
//! messages resolved them; and a decision whose message had `hops` or
//! `sequence` `null`, or a signature without `kid`, `alg` or `sig`, which
//! Go reads, failed.

mod common;

use common::{http_canned, raw_opts};
use futures_util::{SinkExt, StreamExt};
use pigeon_client::http::HttpClient;
use pigeon_client::{Message, Session, Status};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message as W;

/// The message of a decision, id msg_x at sequence 5, as the broker writes it.
macro_rules! message_text {
    () => {
        r#"{"specversion":"1.0","id":"msg_x","type":"job","source":"p","subject":"x","time":"2026-01-01T00:00:00Z","sequence":5,"data":{}}"#
    };
}
const MESSAGE: &str = message_text!();

/// How a row changes the decision: `old` replaced by `new` in it, or a
/// whole `slot` of a decisions answer in its place (a slot row is no
/// decision of a lone publish).
enum Change {
    Replace(&'static str, &'static str),
    Slot(&'static str),
}
use Change::{Replace as R, Slot};

/// What a row's publish comes to: `Unread` (BAD_FRAME, the message may
/// have been accepted), the code of the server's error, or resolved.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Want {
    Unread,
    Code(&'static str),
    Taken,
}
use Want::{Code, Taken, Unread};

const ROWS: &[(&str, Change, Want)] = &[
    ("status a number", R(r#""status":"accepted""#, r#""status":5"#), Unread),
    ("status a bool", R(r#""status":"accepted""#, r#""status":true"#), Unread),
    ("status an object", R(r#""status":"accepted""#, r#""status":{"s":"accepted"}"#), Unread),
    ("status null", R(r#""status":"accepted""#, r#""status":null"#), Unread),
    ("status absent", R(r#""status":"accepted","#, ""), Unread),
    ("status no broker's", R(r#""status":"accepted""#, r#""status":"quarantined""#), Unread),
    ("message a string", R(MESSAGE, r#""msg_x""#), Unread),
    ("message a list", R(MESSAGE, concat!("[", message_text!(), "]")), Unread),
    ("message a number", R(MESSAGE, "5"), Unread),
    ("message null", R(MESSAGE, "null"), Unread),
    ("id a number", R(r#""id":"msg_x""#, r#""id":7"#), Unread),
    ("time a number", R(r#""time":"2026-01-01T00:00:00Z""#, r#""time":20260101"#), Unread),
    ("type an object", R(r#""type":"job""#, r#""type":{"name":"job"}"#), Unread),
    ("source a bool", R(r#""source":"p""#, r#""source":true"#), Unread),
    ("correlationId a list", R(r#""data":{}"#, r#""data":{},"correlationId":["c"]"#), Unread),
    ("sequence a string", R(r#""sequence":5"#, r#""sequence":"5""#), Unread),
    ("sequence negative", R(r#""sequence":5"#, r#""sequence":-5"#), Unread),
    ("sequence a fraction", R(r#""sequence":5"#, r#""sequence":5.5"#), Unread),
    ("sequence spelled 5.0", R(r#""sequence":5"#, r#""sequence":5.0"#), Unread),
    ("sequence spelled 5e0", R(r#""sequence":5"#, r#""sequence":5e0"#), Unread),
    ("sequence spelled -0", R(r#""sequence":5"#, r#""sequence":-0"#), Unread),
    ("sequence spelled -0.0", R(r#""sequence":5"#, r#""sequence":-0.0"#), Unread),
    ("sequence beyond 2^64-1", R(r#""sequence":5"#, r#""sequence":18446744073709551616"#), Unread),
    ("hops negative", R(r#""data":{}"#, r#""data":{},"hops":-1"#), Unread),
    ("hops beyond 2^32-1", R(r#""data":{}"#, r#""data":{},"hops":4294967296"#), Unread),
    ("hops a fraction", R(r#""data":{}"#, r#""data":{},"hops":1.5"#), Unread),
    ("hops spelled 1.0", R(r#""data":{}"#, r#""data":{},"hops":1.0"#), Unread),
    ("hops spelled -0", R(r#""data":{}"#, r#""data":{},"hops":-0"#), Unread),
    ("hops escaped, spelled 1e0", R(r#""data":{}"#, r#""data":{},"\u0068ops":1e0"#), Unread),
    ("hops a string", R(r#""data":{}"#, r#""data":{},"hops":"1""#), Unread),
    ("signature a string", R(r#""data":{}"#, r#""data":{},"signature":"sig""#), Unread),
    ("signature kid a number", R(r#""data":{}"#, r#""data":{},"signature":{"kid":7,"alg":"ed25519","sig":"x","v":2}"#), Unread),
    ("signature form a fraction", R(r#""data":{}"#, r#""data":{},"signature":{"kid":"k","alg":"ed25519","sig":"x","v":2.5}"#), Unread),
    ("signature form spelled 2.0", R(r#""data":{}"#, r#""data":{},"signature":{"kid":"k","alg":"ed25519","sig":"x","v":2.0}"#), Unread),
    ("slot a number", Slot("7"), Unread),
    ("slot a string", Slot(r#""accepted""#), Unread),
    ("slot a list", Slot(r#"[{"status":"accepted"}]"#), Unread),
    ("slot null", Slot("null"), Unread),
    ("slot without a message", Slot(r#"{"status":"accepted"}"#), Unread),
    ("error a string", Slot(r#"{"error":"REFUSED"}"#), Unread),
    ("error a list", Slot(r#"{"error":[{"code":"X"}]}"#), Unread),
    ("error code a number", Slot(r#"{"error":{"code":5,"message":"m"}}"#), Unread),
    ("error message a number", Slot(r#"{"error":{"code":"INTENT_DENIED","message":5}}"#), Unread),
    ("error details a list", Slot(r#"{"error":{"code":"INTENT_DENIED","message":"m","details":[]}}"#), Unread),
    (
        "error beside a message whose hops is negative",
        Slot(r#"{"error":{"code":"INTENT_DENIED","message":"m"},"message":{"id":"msg_x","hops":-1}}"#),
        Unread,
    ),
    // Go reads the error first: such a slot fails with it, whatever else it holds.
    (
        "error beside a decision",
        Slot(r#"{"error":{"code":"INTENT_DENIED","message":"m"},"status":"accepted","message":{"id":"msg_x","sequence":5}}"#),
        Code("INTENT_DENIED"),
    ),
    ("error of null members", Slot(r#"{"error":{"code":"INTENT_DENIED","message":null,"details":null}}"#), Code("INTENT_DENIED")),
    // Decisions the broker does send, with members the rows above spoil.
    ("members null", R(r#""type":"job""#, r#""type":null,"signature":null,"hops":null,"reason":null"#), Taken),
    ("sequence null", R(r#""sequence":5"#, r#""sequence":null"#), Taken),
    ("hops 2^32-1", R(r#""data":{}"#, r#""data":{},"hops":4294967295"#), Taken),
    ("sequence 2^64-1", R(r#""sequence":5"#, r#""sequence":18446744073709551615"#), Taken),
    ("sequence beyond 2^53", R(r#""sequence":5"#, r#""sequence":9007199254740993"#), Taken),
    ("sequence 0", R(r#""sequence":5"#, r#""sequence":0"#), Taken),
    ("sequence absent", R(r#""sequence":5,"#, ""), Taken),
    ("a signature form no client signs", R(r#""data":{}"#, r#""data":{},"signature":{"kid":"k","alg":"ed25519","sig":"x","v":3}"#), Taken),
    ("a signature of no members", R(r#""data":{}"#, r#""data":{},"signature":{}"#), Taken),
    ("a signature of null members", R(r#""data":{}"#, r#""data":{},"signature":{"kid":null,"alg":null,"sig":null}"#), Taken),
    ("data's own 5.0, -0 and -1", R(r#""data":{}"#, r#""data":{"sequence":5.0,"hops":-0,"time":1}"#), Taken),
    ("a member the envelope does not name", R(r#""data":{}"#, r#""data":{},"extra":{"n":1.0}"#), Taken),
    ("duplicate", R(r#""status":"accepted""#, r#""status":"duplicate""#), Taken),
    ("error null", R(r#""status":"accepted""#, r#""error":null,"status":"accepted""#), Taken),
];

/// The decision text of row `i` (the broker's when `None`) for message `id`.
fn decision_text(id: &str, row: Option<usize>) -> String {
    let mut d = format!(r#"{{"status":"accepted","message":{MESSAGE}}}"#);
    match row.map(|i| &ROWS[i].1) {
        None => {}
        Some(Slot(s)) => d = s.to_string(),
        Some(R(old, new)) => {
            assert!(d.contains(old), "{}", ROWS[row.unwrap()].0);
            d = d.replacen(old, new, 1);
        }
    }
    d.replace(r#""msg_x""#, &serde_json::to_string(id).unwrap())
}

/// The row an id names (`m_<row>` or `m_<row>_<what>`).
fn row_of(id: &str) -> Option<usize> {
    id.strip_prefix("m_")?.split('_').next()?.parse().ok()
}

/// Whether `r`, the outcome of row `i`'s publish of `id` (`at`: its slot
/// and the batch's size), is what the row wants.
fn as_row_wants(r: &pigeon_client::Result<pigeon_client::Decision>, i: usize, id: &str, at: Option<(usize, usize)>) -> bool {
    match (ROWS[i].2, r) {
        (Taken, Ok(d)) => d.message.id == id && d.status == if ROWS[i].0 == "duplicate" { Status::Duplicate } else { Status::Accepted },
        (Code(c), Err(e)) => e.code == c,
        (Unread, Err(e)) => {
            e.code == "BAD_FRAME"
                && e.kind == pigeon_client::ErrorKind::Protocol
                && e.message.contains("the message may have been accepted")
                && at.is_none_or(|(index, of)| {
                    e.details.get("index") == Some(&Value::from(index))
                        && e.details.get("results") == Some(&Value::from(of))
                        && e.message.contains(&format!("index {index} of the {of}"))
                })
        }
        _ => false,
    }
}

fn outcome(r: &pigeon_client::Result<pigeon_client::Decision>) -> String {
    match r {
        Ok(d) => format!("resolved {:?} {}", d.status, d.message.id),
        Err(e) => format!("{}: {}", e.code, e.message),
    }
}

/// A WebSocket endpoint answering each publish with its row's decision,
/// and each publish_batch with a decisions answer whose slot `_bad` is
/// its row's; a publish of id `hold` is answered when the test sends its
/// text on the channel returned (its `re` comes on the other).
async fn decisions_server() -> (String, mpsc::UnboundedSender<String>, mpsc::UnboundedReceiver<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let (send, mut to_send) = mpsc::unbounded_channel::<String>();
    let (held, held_rx) = mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        loop {
            let out = tokio::select! {
                m = ws.next() => {
                    let Some(Ok(W::Text(t))) = m else { return };
                    let f: Value = serde_json::from_str(&t).unwrap();
                    let re = serde_json::to_string(&f["id"]).unwrap();
                    match f["op"].as_str().unwrap() {
                        "negotiate" => format!(r#"{{"op":"contract","re":{re},"maxFrame":1048576,"contract":{{"id":"ctr_raw","subjects":[],"expiresAt":"2099-01-01T00:00:00Z"}}}}"#),
                        "publish" if f["message"]["id"] == "hold" => {
                            held.send(re).unwrap();
                            continue;
                        }
                        "publish" => {
                            let id = f["message"]["id"].as_str().unwrap();
                            format!(r#"{{"op":"decision","re":{re},{}"#, &decision_text(id, row_of(id))[1..])
                        }
                        "publish_batch" => {
                            let results: Vec<String> = f["messages"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .map(|m| {
                                    let id = m["id"].as_str().unwrap();
                                    decision_text(id, if id.ends_with("_bad") { row_of(id) } else { None })
                                })
                                .collect();
                            format!(r#"{{"op":"decisions","re":{re},"results":[{}]}}"#, results.join(","))
                        }
                        _ => format!(r#"{{"op":"ok","re":{re}}}"#),
                    }
                }
                Some(o) = to_send.recv() => o,
            };
            if ws.send(W::Text(out)).await.is_err() {
                return;
            }
        }
    });
    (url, send, held_rx)
}

fn message(id: &str) -> Message {
    let mut m = Message::new("x", "job", "do").with_data(serde_json::json!({}));
    m.id = id.into();
    m
}

#[tokio::test]
async fn a_publish_whose_decision_does_not_read_as_go_reads_it_fails_saying_the_message_may_have_been_accepted() {
    let (url, _send, _held) = decisions_server().await;
    let s = Session::connect(&url, "t", &["x"], raw_opts()).await.unwrap();
    let mut wrong = Vec::new();
    for (i, row) in ROWS.iter().enumerate() {
        if matches!(row.1, Slot(_)) {
            continue;
        }
        let id = format!("m_{i}");
        let r = s.publish(&message(&id)).await;
        if !as_row_wants(&r, i, &id, None) {
            wrong.push(format!("{}: {}", row.0, outcome(&r)));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let _ = s.close().await;
}

#[tokio::test]
async fn in_a_decisions_answer_a_slot_that_does_not_read_fails_its_own_publish_alone() {
    let (url, send, mut held) = decisions_server().await;
    let s = Session::connect(&url, "t", &["x"], raw_opts()).await.unwrap();
    let mut wrong = Vec::new();
    for (i, row) in ROWS.iter().enumerate() {
        for pos in 0..3 {
            // A publish held unanswered, so that the three after it are
            // queued meanwhile and leave together as one publish_batch.
            let hold = s.publish_async(&message("hold")).await.unwrap();
            let re = held.recv().await.unwrap();
            let ids: Vec<String> = (0..3).map(|j| if j == pos { format!("m_{i}_bad") } else { format!("m_{i}_{j}") }).collect();
            let mut pending = Vec::new();
            for id in &ids {
                pending.push(s.publish_async(&message(id)).await.unwrap());
            }
            send.send(format!(r#"{{"op":"decision","re":{re},{}"#, &decision_text("hold", None)[1..])).unwrap();
            hold.await.unwrap();
            for (j, (p, id)) in pending.into_iter().zip(&ids).enumerate() {
                let r = p.await;
                let ok = if j == pos { as_row_wants(&r, i, id, Some((pos, 3))) } else { r.as_ref().is_ok_and(|d| &d.message.id == id) };
                if !ok {
                    wrong.push(format!("{} at {pos}, slot {j}: {}", row.0, outcome(&r)));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let _ = s.close().await;
}

/// A decisions answer of another number of results than the messages
/// sent cannot be told to them: each publish fails, saying that its
/// message may have been accepted (Go fails them all).
#[tokio::test]
async fn a_decisions_answer_of_another_number_of_results_fails_every_publish_of_the_batch() {
    for results in [1usize, 2, 4] {
        let answers: Arc<Mutex<Option<String>>> = Arc::default();
        let a = answers.clone();
        let on_frame: common::OnFrame = Arc::new(move |f| {
            if f["op"] == "publish" && f["message"]["id"] == "hold" {
                *a.lock().unwrap() = Some(f["id"].as_str().unwrap().to_string());
                return vec![];
            }
            if f["op"] == "publish_batch" {
                let slots: Vec<Value> =
                    (0..results).map(|i| serde_json::from_str(&decision_text(&format!("m_{i}"), None)).unwrap()).collect();
                return vec![serde_json::json!({"op": "decisions", "re": f["id"], "results": slots})];
            }
            vec![serde_json::json!({"op": "ok", "re": f["id"]})]
        });
        let (url, tx, task) = common::raw_server(common::Behaviour::default(), on_frame).await;
        let s = Session::connect(&url, "t", &["x"], raw_opts()).await.unwrap();
        let hold = s.publish_async(&message("hold")).await.unwrap();
        assert!(common::eventually(std::time::Duration::from_secs(5), || answers.lock().unwrap().is_some()).await);
        let mut pending = Vec::new();
        for i in 0..3 {
            pending.push(s.publish_async(&message(&format!("m_{i}"))).await.unwrap());
        }
        let re = answers.lock().unwrap().clone().unwrap();
        tx.send(format!(r#"{{"op":"decision","re":"{re}",{}"#, &decision_text("hold", None)[1..])).unwrap();
        hold.await.unwrap();
        for p in pending {
            let e = p.await.expect_err("a decisions answer of another number of results");
            assert_eq!(e.code, "BAD_FRAME", "{results} results: {e}");
            assert!(e.message.contains("may have been accepted"), "{results} results: {e}");
        }
        common::end(s, task).await;
    }
}

#[tokio::test]
async fn an_http_publish_whose_decision_does_not_read_as_go_reads_it_fails_saying_the_message_may_have_been_accepted() {
    let mut wrong = Vec::new();
    for (i, row) in ROWS.iter().enumerate() {
        if matches!(row.1, Slot(_)) {
            continue;
        }
        let id = format!("m_{i}");
        let (url, _) = http_canned(202, decision_text(&id, Some(i))).await;
        let h = HttpClient::new(&url, "t").with_contract("ctr_raw");
        let r = h.publish(&message(&id)).await;
        // The HTTP client holds a publish's message to the broker's: one
        // of sequence 0 or none is refused too.
        let want = if matches!(row.0, "sequence 0" | "sequence absent" | "sequence null") { Unread } else { row.2 };
        let ok = match (want, &r) {
            (Unread, Err(e)) => e.code == "BAD_FRAME" && e.message.contains("the message may have been accepted"),
            _ => as_row_wants(&r, i, &id, None),
        };
        if !ok {
            wrong.push(format!("{}: {}", row.0, outcome(&r)));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A refused slot names its status, its message and its place.
#[tokio::test]
async fn a_refused_decision_names_its_status_message_and_slot() {
    let (url, send, mut held) = decisions_server().await;
    let s = Session::connect(&url, "t", &["x"], raw_opts()).await.unwrap();
    let i = ROWS.iter().position(|r| r.0 == "hops spelled 1.0").unwrap();
    let hold = s.publish_async(&message("hold")).await.unwrap();
    let re = held.recv().await.unwrap();
    let a = s.publish_async(&message("m_a")).await.unwrap();
    let b = s.publish_async(&message(&format!("m_{i}_bad"))).await.unwrap();
    send.send(format!(r#"{{"op":"decision","re":{re},{}"#, &decision_text("hold", None)[1..])).unwrap();
    hold.await.unwrap();
    assert_eq!(a.await.unwrap().message.id, "m_a");
    let e = b.await.expect_err("hops spelled 1.0");
    assert_eq!(e.code, "BAD_FRAME");
    assert_eq!(
        Value::Object(e.details.clone()),
        serde_json::json!({"status": "accepted", "messageId": format!("m_{i}_bad"), "index": 1, "results": 2})
    );
    assert!(
        e.message.starts_with("the server's answer for this message (index 1 of the 2 results of its publish_batch) could not be read (its message does not decode"),
        "{}",
        e.message
    );
    assert!(e.message.ends_with("): the message may have been accepted"), "{}", e.message);
    let _ = s.close().await;
}
