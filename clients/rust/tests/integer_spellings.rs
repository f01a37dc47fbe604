//! A message's `sequence` and `hops` are unsigned integers, read as Go
//! reads them (`strconv.ParseUint`, no sign, no fraction, no exponent): a
//! delivery, a receive message or a reply whose `sequence` or `hops` is
//! spelled `-0`, `-0.0`, `5.0`, `5e0` or `5E0` is no broker's and is
//! refused (BAD_FRAME), however the name is spelled; one of `hops` `null`
//! is read as absent (0), as Go's `encoding/json` reads it. The same
//! spellings in data are left as they are. The refusals held before;
//! `hops` `null` was refused.

mod common;

use common::{end, ok_to_all, raw_opts, raw_server, Behaviour, OnFrame};
use pigeon_client::{Message, Session, SubscribeOptions};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The spellings Go's ParseUint refuses that a JSON reader may take for an integer.
const SPELLINGS: &[&str] = &["-0", "-0.0", "-0e0", "5.0", "5e0", "5E0", "5e+0", "50e-1", "0.5e1"];

/// A stored message of `id` at `seq` (its text), `extra` members appended.
fn message(id: &str, seq: &str, extra: &str) -> String {
    format!(r#"{{"id":"{id}","subject":"x","time":"2026-01-01T00:00:00Z","sequence":{seq},"data":{{"n":-0,"f":5.0}}{extra}}}"#)
}

/// Each message a test spoils: its `sequence` or its `hops` (under a name
/// spelled as given) set to a spelling.
fn spoiled() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (k, s) in SPELLINGS.iter().enumerate() {
        out.push((format!("msg_seq_{k}"), message(&format!("msg_seq_{k}"), s, "")));
        out.push((format!("msg_hops_{k}"), message(&format!("msg_hops_{k}"), &(k + 1).to_string(), &format!(r#","hops":{s}"#))));
        out.push((format!("msg_ehops_{k}"), message(&format!("msg_ehops_{k}"), &(k + 1).to_string(), &format!(r#","\u0068ops":{s}"#))));
    }
    out
}

fn errors() -> (Arc<Mutex<Vec<pigeon_client::Error>>>, pigeon_client::ConnectOptions) {
    let errs: Arc<Mutex<Vec<pigeon_client::Error>>> = Arc::default();
    let e = errs.clone();
    (errs, raw_opts().on_error(move |err| e.lock().unwrap().push(err)))
}

#[tokio::test]
async fn a_delivery_whose_sequence_or_hops_is_no_unsigned_integer_is_a_bad_frame() {
    let (url, tx, task) = raw_server(Behaviour::default(), ok_to_all("sub_1", Arc::default())).await;
    let (errs, opts) = errors();
    let s = Session::connect(&url, "t", &["x"], opts).await.unwrap();
    let mut sub = s.subscribe_stream("x", SubscribeOptions::default()).await.unwrap();
    let bad = spoiled();
    for (_, m) in &bad {
        tx.send(format!(r#"{{"op":"deliver","sub":"sub_1","attempt":1,"message":{m}}}"#)).unwrap();
    }
    // Data's own spellings are no sequence or hops.
    let good = message("msg_good", "99", r#","hops":null"#);
    tx.send(format!(r#"{{"op":"deliver","sub":"sub_1","attempt":1,"message":{good}}}"#)).unwrap();
    let d = tokio::time::timeout(Duration::from_secs(5), sub.recv()).await.expect("nothing delivered").unwrap().unwrap();
    assert_eq!((d.message.id.as_str(), d.message.sequence, d.message.hops), ("msg_good", 99, 0), "a spoiled delivery was handed out");
    assert_eq!(d.message.data["f"], serde_json::json!(5.0));
    d.ack().await.unwrap();
    let errs = errs.lock().unwrap().clone();
    let refused: Vec<_> = errs.iter().filter(|e| e.code == "BAD_FRAME").collect();
    assert_eq!(refused.len(), bad.len(), "each spoiled delivery is one BAD_FRAME: {errs:#?}");
    end(s, task).await;
}

/// A raw endpoint answering each frame of op `op` with the text
/// `answer(re)` as it is (a spelling such as `-0` does not survive a
/// `Value`), every other frame `ok`.
async fn answering_text(
    op: &'static str,
    answer: impl Fn(&Value) -> String + Send + Sync + 'static,
) -> (String, tokio::task::JoinHandle<()>) {
    let cmd: Arc<Mutex<Option<tokio::sync::mpsc::UnboundedSender<String>>>> = Arc::default();
    let c = cmd.clone();
    let on_frame: OnFrame = Arc::new(move |f| {
        if f["op"] == op {
            c.lock().unwrap().as_ref().unwrap().send(answer(&f["id"])).unwrap();
            return vec![];
        }
        vec![serde_json::json!({"op": "ok", "re": f["id"]})]
    });
    let (url, tx, task) = raw_server(Behaviour::default(), on_frame).await;
    *cmd.lock().unwrap() = Some(tx);
    (url, task)
}

#[tokio::test]
async fn a_receive_message_whose_sequence_or_hops_is_no_unsigned_integer_is_refused_alone() {
    let bad = spoiled();
    let good = message("msg_good", "99", r#","hops":null"#);
    let mut entries: Vec<String> = bad.iter().map(|(_, m)| m.clone()).collect();
    entries.push(good);
    let answer = format!(r#""messages":[{}],"attempts":[{}]"#, entries.join(","), vec!["1"; entries.len()].join(","));
    let (url, task) = answering_text("receive", move |re| format!(r#"{{"op":"messages","re":{re},{answer}}}"#)).await;
    let (errs, opts) = errors();
    let s = Session::connect(&url, "t", &["x"], opts).await.unwrap();
    let got = s.receive("x", 100).await.unwrap();
    let ids: Vec<_> = got.iter().map(|m| (m.id.as_str(), m.sequence, m.hops)).collect();
    assert_eq!(ids, [("msg_good", 99, 0)]);
    let errs = errs.lock().unwrap().clone();
    let refused: Vec<_> = errs.iter().filter(|e| e.code == "BAD_FRAME").collect();
    assert_eq!(refused.len(), bad.len(), "each spoiled message is one BAD_FRAME: {errs:#?}");
    end(s, task).await;
}

#[tokio::test]
async fn a_reply_whose_sequence_or_hops_is_no_unsigned_integer_is_refused() {
    for (id, m) in spoiled() {
        let m = m.replace(r#""data""#, r#""correlationId":"msg_req","data""#);
        let (url, task) = answering_text("request", move |re| format!(r#"{{"op":"reply","re":{re},"message":{m}}}"#)).await;
        let s = Session::connect(&url, "t", &["x"], raw_opts()).await.unwrap();
        let mut req = Message::new("x", "q", "ask");
        req.id = "msg_req".into();
        let e = s.request(&req, Duration::from_secs(5)).await.expect_err(&id);
        assert_eq!(e.code, "BAD_FRAME", "{id}: {e}");
        end(s, task).await;
    }
    // The same reply with hops null is taken, as absent.
    let m = message("msg_reply", "7", r#","hops":null"#).replace(r#""data""#, r#""correlationId":"msg_req","data""#);
    let (url, task) = answering_text("request", move |re| format!(r#"{{"op":"reply","re":{re},"message":{m}}}"#)).await;
    let s = Session::connect(&url, "t", &["x"], raw_opts()).await.unwrap();
    let mut req = Message::new("x", "q", "ask");
    req.id = "msg_req".into();
    let r = s.request(&req, Duration::from_secs(5)).await.unwrap();
    assert_eq!((r.id.as_str(), r.sequence, r.hops), ("msg_reply", 7, 0));
    end(s, task).await;
}
