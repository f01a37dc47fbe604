//! Acks and nacks name the sequence of the delivery they answer
//! (docs/protocol.md "Sequences"): a message id names one message at a
//! time only, and once retention trims a message a newer one may be
//! published under its id; a late answer to the old delivery must never
//! settle it. Each test failed before the client sent the sequence.

mod common;

use common::{raw_opts, raw_server, Behaviour, OnFrame};
use pigeon_client::{HandlerError, Message, Session, Status, SubscribeOptions};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn msg(id: &str, seq: u64) -> Value {
    json!({"id": id, "subject": "x", "sequence": seq, "data": {}})
}

fn deliver(m: Value) -> String {
    json!({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": m}).to_string()
}

/// An `on_frame` that subscribes "sub_1", records every other frame in
/// `frames`, and leaves the first ack unanswered (its id in `held`) for
/// the test to answer: the acks that come meanwhile gather.
fn holding(frames: Arc<Mutex<Vec<Value>>>, held: Arc<Mutex<Option<Value>>>) -> OnFrame {
    Arc::new(move |f| {
        if f["op"] == "subscribe" {
            return vec![json!({"op": "subscribed", "re": f["id"], "sub": "sub_1"})];
        }
        frames.lock().unwrap().push(f.clone());
        let mut h = held.lock().unwrap();
        if f["op"] == "ack" && h.is_none() {
            *h = Some(f["id"].clone());
            return vec![];
        }
        vec![json!({"op": "ok", "re": f["id"]})]
    })
}

fn of_op(frames: &Mutex<Vec<Value>>, op: &str) -> Vec<Value> {
    frames.lock().unwrap().iter().filter(|f| f["op"] == op).cloned().collect()
}

#[tokio::test]
async fn a_subscriptions_acks_and_nacks_carry_the_sequence_of_the_delivery_they_answer() {
    let frames: Arc<Mutex<Vec<Value>>> = Arc::default();
    let held: Arc<Mutex<Option<Value>>> = Arc::default();
    let (url, tx, task) = raw_server(Behaviour::default(), holding(frames.clone(), held.clone())).await;
    let s = Session::connect(&url, "t", &["x"], raw_opts()).await.unwrap();
    let _sub = s
        .subscribe("x", SubscribeOptions::default().max_in_flight(4), |d| async move {
            if d.message.id == "msg_4" {
                return Err(HandlerError::new("fails"));
            }
            Ok(())
        })
        .await
        .unwrap();
    tx.send(deliver(msg("msg_1", 1))).unwrap();
    assert!(common::eventually(Duration::from_secs(5), || held.lock().unwrap().is_some()).await, "the first ack");
    for (id, seq) in [("msg_2", 2), ("msg_3", 3), ("msg_4", 4)] {
        tx.send(deliver(msg(id, seq))).unwrap();
    }
    assert!(common::eventually(Duration::from_secs(5), || !of_op(&frames, "nack").is_empty()).await, "the nack");
    tokio::time::sleep(Duration::from_millis(50)).await; // the acks of 2 and 3 gather
    let re = held.lock().unwrap().clone().unwrap();
    tx.send(json!({"op": "ok", "re": re}).to_string()).unwrap();
    assert!(common::eventually(Duration::from_secs(5), || of_op(&frames, "ack").len() == 2).await, "the gathered acks");
    let acks = of_op(&frames, "ack");
    assert_eq!((&acks[0]["messageId"], &acks[0]["sequence"]), (&json!("msg_1"), &json!(1)));
    assert_eq!(acks[1]["messageIds"], json!(["msg_2", "msg_3"]));
    assert_eq!(acks[1]["sequences"], json!([2, 3]), "in step with messageIds");
    let nack = &of_op(&frames, "nack")[0];
    assert_eq!((&nack["messageId"], &nack["sequence"]), (&json!("msg_4"), &json!(4)));
    let _ = tokio::time::timeout(Duration::from_secs(3), s.close()).await;
    task.abort();
}

#[tokio::test]
async fn gathered_acks_are_split_into_frames_within_the_servers_max_frame() {
    // raw_server grants maxFrame 1 MiB: 5000 acks of 256-byte ids are more.
    let frames: Arc<Mutex<Vec<Value>>> = Arc::default();
    let held: Arc<Mutex<Option<Value>>> = Arc::default();
    let (url, tx, task) = raw_server(Behaviour::default(), holding(frames.clone(), held.clone())).await;
    let s = Session::connect(&url, "t", &["x"], raw_opts()).await.unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let d2 = done.clone();
    let _sub = s
        .subscribe("x", SubscribeOptions::default().max_in_flight(64).window(10000), move |_d| {
            let done = d2.clone();
            async move {
                done.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .await
        .unwrap();
    let n = 5000u64;
    let long = |i: u64| format!("{}{i:06}", "m".repeat(250));
    tx.send(deliver(msg(&long(0), 1))).unwrap();
    assert!(common::eventually(Duration::from_secs(5), || held.lock().unwrap().is_some()).await, "the first ack");
    for i in 1..=n {
        tx.send(deliver(msg(&long(i), i + 1))).unwrap();
    }
    assert!(common::eventually(Duration::from_secs(20), || done.load(Ordering::SeqCst) == n as usize + 1).await, "the handlers");
    let re = held.lock().unwrap().clone().unwrap();
    tx.send(json!({"op": "ok", "re": re}).to_string()).unwrap();
    let acked = || -> usize { of_op(&frames, "ack").iter().map(|f| f["messageIds"].as_array().map_or(1, Vec::len)).sum() };
    assert!(common::eventually(Duration::from_secs(20), || acked() == n as usize + 1).await, "every ack");
    let acks = of_op(&frames, "ack");
    assert!(acks.len() > 2, "{} ack frames", acks.len());
    let mut seqs = Vec::new();
    for f in &acks {
        let size = f.to_string().len();
        assert!(size <= 1 << 20, "an ack frame of {size} bytes");
        match f["sequences"].as_array() {
            Some(a) => seqs.extend(a.iter().map(|v| v.as_u64().unwrap())),
            None => seqs.push(f["sequence"].as_u64().unwrap()),
        }
    }
    assert_eq!(seqs, (1..=n + 1).collect::<Vec<_>>());
    let _ = tokio::time::timeout(Duration::from_secs(3), s.close()).await;
    task.abort();
}

#[tokio::test]
async fn pull_acks_and_nacks_name_the_sequence_given() {
    let frames: Arc<Mutex<Vec<Value>>> = Arc::default();
    let held = Arc::new(Mutex::new(Some(Value::Null))); // nothing held
    let (url, _tx, task) = raw_server(Behaviour::default(), holding(frames.clone(), held)).await;
    let s = Session::connect(&url, "t", &["x"], raw_opts()).await.unwrap();
    s.ack_sequence("x", "msg_7", 7).await.unwrap();
    s.ack("x", "msg_8").await.unwrap();
    s.ack_sequence("x", "msg_9", 0).await.unwrap();
    s.nack_sequence("x", "msg_10", 10, Some(Duration::ZERO)).await.unwrap();
    s.nack("x", "msg_11", None).await.unwrap();
    // Longer than the 12 hours the broker takes: shortened, not refused.
    s.nack_sequence("x", "msg_12", 12, Some(Duration::from_secs(13 * 3600))).await.unwrap();
    let got = common::frames_without_ids(&frames);
    assert_eq!(
        got,
        vec![
            json!({"op": "ack", "subject": "x", "messageId": "msg_7", "sequence": 7}),
            json!({"op": "ack", "subject": "x", "messageId": "msg_8"}),
            json!({"op": "ack", "subject": "x", "messageId": "msg_9"}),
            json!({"op": "nack", "subject": "x", "messageId": "msg_10", "sequence": 10, "delayMs": 0}),
            json!({"op": "nack", "subject": "x", "messageId": "msg_11"}),
            json!({"op": "nack", "subject": "x", "messageId": "msg_12", "sequence": 12, "delayMs": 43_200_000}),
        ]
    );
    let _ = tokio::time::timeout(Duration::from_secs(3), s.close()).await;
    task.abort();
}

const WORKER: &str = "spiffe://clients/ns/test/sa/worker";
const JOBS: &str = "jobs.seq";

/// A catalog of jobs.seq, a work-queue subject keeping a single message
/// (publishing a few dozen more trims the first and frees its id), and
/// the worker's token.
fn jobs_catalog() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("pigeon-rs-seq-{}", common::nonce()));
    std::fs::create_dir_all(d.join("subjects")).unwrap();
    std::fs::create_dir_all(d.join("schemas")).unwrap();
    let allow = json!([{"effect": "allow", "principals": [WORKER]}]);
    let subject = json!({
        "name": JOBS, "version": "v1", "mode": "workQueue", "intents": ["job"],
        "retention": {"maxMessages": 1},
        "policy": {"publish": allow, "receive": allow, "ack": allow},
    });
    std::fs::write(d.join("subjects").join(format!("{JOBS}.json")), subject.to_string()).unwrap();
    std::fs::write(d.join("tokens.yaml"), format!("tokens:\n  - {{ token: worker-token, principal: \"{WORKER}\" }}\n")).unwrap();
    d
}

fn job(id: &str, n: u64) -> Message {
    let mut m = Message::new(JOBS, "job", "job").with_data(json!({"n": n}));
    m.id = id.to_string();
    m
}

#[tokio::test]
async fn a_late_answer_to_a_message_whose_id_was_reused_is_refused() {
    let dir = jobs_catalog();
    let mut server = common::Server::start_catalog(&dir);
    let s = Session::connect(&server.url(), "worker-token", &[JOBS], raw_opts()).await.unwrap();
    // The HTTP answers act under the session's contract.
    let http = common::http(&server, "worker-token").with_contract(&s.contract().id);
    for (over_http, nack) in [(false, false), (false, true), (true, false), (true, true)] {
        let id = format!("job-{over_http}-{nack}");
        let first = s.publish(&job(&id, 0)).await.unwrap().message;
        let old = s.receive(JOBS, 1).await.unwrap().remove(0);
        assert_eq!((old.id.as_str(), old.sequence), (id.as_str(), first.sequence));
        // Past the bound by its slack: the subject is trimmed to its
        // newest message, and the id is free again.
        for i in 1..=40 {
            s.publish(&job(&format!("{id}-other-{i}"), i)).await.unwrap();
        }
        let mut again = None;
        for _ in 0..500 {
            let d = s.publish(&job(&id, 99)).await.unwrap();
            if d.status == Status::Accepted {
                again = Some(d.message);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let again = again.expect("the id free again");
        assert!(again.sequence > old.sequence);
        let got = s.receive(JOBS, 100).await.unwrap();
        let fresh: Vec<u64> = got.iter().filter(|m| m.id == id).map(|m| m.sequence).collect();
        assert_eq!(fresh, vec![again.sequence]);
        // The late answer to the old delivery settles nothing.
        let late = match (over_http, nack) {
            (false, true) => s.nack_sequence(JOBS, &old.id, old.sequence, Some(Duration::ZERO)).await,
            (false, false) => s.ack_sequence(JOBS, &old.id, old.sequence).await,
            (true, true) => http.nack_sequence(JOBS, &old.id, old.sequence, Some(Duration::ZERO)).await,
            (true, false) => http.ack_sequence(JOBS, &old.id, old.sequence).await,
        };
        let e = late.expect_err("the late answer is refused");
        assert_eq!((e.code.as_str(), e.status), ("ACK_NOT_ALLOWED", 403), "{over_http} {nack}: {e}");
        assert!(s.receive(JOBS, 100).await.unwrap().is_empty(), "the newer message is still leased");
        for m in &got {
            s.ack_sequence(JOBS, &m.id, m.sequence).await.unwrap();
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(3), s.close()).await;
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn http_acks_and_nacks_settle_under_the_contract_with_typed_errors() {
    let dir = jobs_catalog();
    let mut server = common::Server::start_catalog(&dir);
    let s = Session::connect(&server.url(), "worker-token", &[JOBS], raw_opts()).await.unwrap();
    let http = common::http(&server, "worker-token").with_contract(&s.contract().id);
    // Without a contract: refused before anything is sent.
    let e = common::http(&server, "worker-token").ack(JOBS, "job-x").await.expect_err("no contract");
    assert_eq!((e.code.as_str(), e.kind), ("CONTRACT_REQUIRED", pigeon_client::ErrorKind::Contract));
    // A contract id that would add a header is refused, nothing sent.
    let e = common::http(&server, "worker-token").with_contract("c\r\nX-Evil: 1").ack(JOBS, "job-x").await.expect_err("bad id");
    assert_eq!(e.code, "INVALID_ARGUMENT");

    let sent = s.publish(&job("job-h", 1)).await.unwrap().message;
    let got = s.receive(JOBS, 1).await.unwrap().remove(0);
    assert_eq!((got.id.as_str(), got.sequence), ("job-h", sent.sequence));
    // A nack without delay gives it back at once (after the subject's
    // backoff: asked for 0 here), named by its sequence.
    http.nack_sequence(JOBS, &got.id, got.sequence, Some(Duration::ZERO)).await.unwrap();
    let mut again = Vec::new();
    for _ in 0..250 {
        again = s.receive(JOBS, 1).await.unwrap();
        if !again.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        again.iter().map(|m| (m.id.as_str(), m.sequence)).collect::<Vec<_>>(),
        vec![("job-h", sent.sequence)],
        "nacked, it comes back"
    );
    http.ack_sequence(JOBS, "job-h", sent.sequence).await.unwrap();
    // Settled: a second ack is a no-op, and another id is the server's
    // typed refusal with its status.
    http.ack(JOBS, "job-h").await.unwrap();
    let e = http.ack(JOBS, "job-none").await.expect_err("no such message");
    assert_eq!((e.code.as_str(), e.status, e.kind), ("MESSAGE_NOT_FOUND", 404, pigeon_client::ErrorKind::NotFound), "{e}");
    // A delay beyond the 12 hours the server takes is shortened to them,
    // not sent as it is (INVALID_ARGUMENT): the server reads the id.
    let e = http.nack(JOBS, "job-none", Some(Duration::from_secs(13 * 3600))).await.expect_err("no such message");
    assert_eq!((e.code.as_str(), e.status), ("MESSAGE_NOT_FOUND", 404), "{e}");
    let _ = tokio::time::timeout(Duration::from_secs(3), s.close()).await;
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// An ack frame answering one id at two sequences (the id reused once
/// retention trimmed the first message) is answered with
/// `notPendingSequences` in step with `notPending`: only the answer named
/// is refused, the other settled. Without it (protocol v1), or out of
/// step, both answers of the id listed are refused, as before.
#[tokio::test]
async fn an_ack_frame_answering_one_id_at_two_sequences_refuses_only_the_one_named() {
    let cases: [(Value, [bool; 2]); 5] = [
        (json!({"notPending": ["m"], "notPendingSequences": [7]}), [true, false]),
        (json!({"notPending": ["m"], "notPendingSequences": [9]}), [false, true]),
        (json!({"notPending": ["m"]}), [true, true]),
        (json!({"notPending": ["m"], "notPendingSequences": [7, 9]}), [true, true]),
        (json!({}), [false, false]),
    ];
    for (answer, refused) in cases {
        let frames: Arc<Mutex<Vec<Value>>> = Arc::default();
        let (fr, ans) = (frames.clone(), answer.clone());
        let on_frame: OnFrame = Arc::new(move |f| {
            if f["op"] == "subscribe" {
                return vec![
                    json!({"op": "subscribed", "re": f["id"], "sub": "sub_1"}),
                    json!({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": msg("m", 7)}),
                    json!({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": msg("m", 9)}),
                ];
            }
            fr.lock().unwrap().push(f.clone());
            let mut ok = ans.clone();
            if f["op"] != "ack" {
                ok = json!({});
            }
            ok["op"] = json!("ok");
            ok["re"] = f["id"].clone();
            vec![ok]
        });
        let (url, _tx, task) = raw_server(Behaviour::default(), on_frame).await;
        let s = Session::connect(&url, "t", &["x"], raw_opts()).await.unwrap();
        let mut sub = s.subscribe_stream("x", SubscribeOptions::default()).await.unwrap();
        let d7 = tokio::time::timeout(Duration::from_secs(5), sub.recv()).await.unwrap().unwrap().unwrap();
        let d9 = tokio::time::timeout(Duration::from_secs(5), sub.recv()).await.unwrap().unwrap().unwrap();
        assert_eq!((d7.message.sequence, d9.message.sequence), (7, 9));
        let (r7, r9) = tokio::time::timeout(Duration::from_secs(5), async { tokio::join!(d7.ack(), d9.ack()) }).await.unwrap();
        let acks = of_op(&frames, "ack");
        assert_eq!(acks.len(), 1, "{answer}: one frame");
        assert_eq!((&acks[0]["messageIds"], &acks[0]["sequences"]), (&json!(["m", "m"]), &json!([7, 9])), "{answer}");
        for (seq, r, refused) in [(7, r7, refused[0]), (9, r9, refused[1])] {
            match r {
                Err(e) => assert!(refused && e.code == "ACK_NOT_ALLOWED", "{answer}: the ack at {seq}: {e}"),
                Ok(()) => assert!(!refused, "{answer}: the ack at {seq} settled, though its answer refused it"),
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(3), s.close()).await;
        task.abort();
    }
}

/// A handler ran one message id at a time: a later message published
/// under the id once retention trimmed the first (a higher sequence)
/// waited for the old one's run. It now runs at once; a redelivery of the
/// running message itself (the same sequence) still waits for that run.
#[tokio::test]
async fn a_newer_message_under_a_reused_id_does_not_wait_for_the_old_handler() {
    let frames: Arc<Mutex<Vec<Value>>> = Arc::default();
    let (url, tx, task) = raw_server(Behaviour::default(), common::ok_to_all("sub_1", frames.clone())).await;
    let s = Session::connect(&url, "t", &["x"], raw_opts()).await.unwrap();
    let runs: Arc<Mutex<Vec<u64>>> = Arc::default();
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let (r, rel) = (runs.clone(), release.clone());
    let _sub = s
        .subscribe("x", SubscribeOptions::default().max_in_flight(4), move |d| {
            let (r, rel) = (r.clone(), rel.clone());
            async move {
                let seq = d.message.sequence;
                let first = {
                    let mut r = r.lock().unwrap();
                    r.push(seq);
                    seq == 7 && r.iter().filter(|&&q| q == 7).count() == 1
                };
                if first {
                    let _ = rel.acquire().await;
                }
                Ok(())
            }
        })
        .await
        .unwrap();
    tx.send(deliver(msg("m", 7))).unwrap();
    assert!(common::eventually(Duration::from_secs(5), || runs.lock().unwrap().len() == 1).await, "the run at 7");
    tx.send(deliver(msg("m", 7))).unwrap(); // delivered again: waits for the run at 7
    tx.send(deliver(msg("m", 9))).unwrap(); // m at 7 trimmed, its id taken: another message
    assert!(
        common::eventually(Duration::from_secs(5), || runs.lock().unwrap().contains(&9)).await,
        "the run at 9 while the one at 7 waits: {:?}",
        runs.lock().unwrap()
    );
    assert_eq!(*runs.lock().unwrap(), vec![7, 9], "the redelivery at 7 waits for the run at 7");
    release.add_permits(1);
    assert!(common::eventually(Duration::from_secs(5), || runs.lock().unwrap().len() == 3).await, "the redelivery at 7 runs after");
    let acked = || -> Vec<(String, u64)> {
        let mut v = Vec::new();
        for f in of_op(&frames, "ack") {
            match (f["messageIds"].as_array(), f["sequences"].as_array()) {
                (Some(ids), Some(seqs)) => {
                    v.extend(ids.iter().zip(seqs).map(|(i, q)| (i.as_str().unwrap().to_string(), q.as_u64().unwrap())))
                }
                _ => v.push((f["messageId"].as_str().unwrap().to_string(), f["sequence"].as_u64().unwrap())),
            }
        }
        v.sort();
        v
    };
    assert!(common::eventually(Duration::from_secs(5), || acked().len() == 3).await, "the acks");
    assert_eq!(acked(), vec![("m".to_string(), 7), ("m".to_string(), 7), ("m".to_string(), 9)]);
    let _ = tokio::time::timeout(Duration::from_secs(3), s.close()).await;
    task.abort();
}
