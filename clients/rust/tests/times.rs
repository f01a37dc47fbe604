//! Times read as the broker and the Go client read them: RFC 3339 proper
//! (`pigeon`'s `parseRFC3339`, then `time.Parse`), to the nanosecond, as
//! `clients/conformance/vectors/times.json` holds Go's reading of each
//! text. The client took lower-case `t` and `z`, a second 60, a day 31 of
//! any month (30 February included, read as 2 March), the year 0000, and
//! read a time to the millisecond only: a signing key whose window was so
//! spelled verified a signature here that Go refuses, and a window closed
//! within a millisecond held a message time Go finds past it. A key whose
//! window does not read is valid at no time, and a window edge `null` or
//! at Go's zero time (`0001-01-01T00:00:00Z`) is no bound, as Go reads
//! them. An edge that is the empty string, or no string at all (a number,
//! `true`, an object, a list), makes the key valid at no time, as Go
//! decodes no such key: the client read `""` as an absent edge, so that a
//! key listed with `notAfter: ""` verified for ever, and refused a whole
//! list holding a key whose edge was a number.

mod common;

use pigeon_client::crypto::{b64_decode, b64_encode, select_key, select_key_at, sign_message, verify_message_with_keys, Keys, PublicKey};
use pigeon_client::http::{HttpClient, KeyCache, MAX_ACCOUNT_KEYS};
use pigeon_client::time::{parse_rfc3339, parse_rfc3339_ms, Timestamp};
use pigeon_client::Message;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Reading {
    #[serde(default)]
    refused: bool,
    #[serde(default)]
    unix_seconds: String,
    #[serde(default)]
    nanos: String,
}

impl Reading {
    fn instant(&self) -> Option<Timestamp> {
        (!self.refused).then(|| Timestamp { unix_seconds: self.unix_seconds.parse().unwrap(), nanos: self.nanos.parse().unwrap() })
    }
}

#[derive(Deserialize)]
struct Case {
    name: String,
    time: String,
    #[serde(flatten)]
    go: Reading,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Window {
    name: String,
    #[serde(default)]
    not_before: String,
    #[serde(default)]
    not_after: String,
    time: String,
    valid: bool,
    /// Go does not decode the key: its window is neither `null` nor RFC 3339.
    #[serde(default)]
    refused: bool,
}

#[derive(Deserialize)]
struct Vectors {
    cases: Vec<Case>,
    windows: Vec<Window>,
}

fn vectors() -> Vectors {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../conformance/vectors/times.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn keys() -> Keys {
    Keys::from_bytes([7; 32], [107; 32])
}

/// A message at `time`, signed by `k` (the time as given).
fn signed_at(k: &Keys, time: &str) -> Message {
    let mut m = Message::new("x", "t", "i").with_data(serde_json::json!({"n": 1}));
    m.id = "msg_times".into();
    m.time = "2026-01-01T00:00:00Z".into();
    sign_message(&mut m, &k.signing_kid, &k.signing).unwrap();
    // The signature covers the time: sign again at the time asked for,
    // which sign_message refuses when it does not read.
    m.time = time.into();
    let _ = sign_message(&mut m, &k.signing_kid, &k.signing);
    m
}

fn sig_key(k: &Keys) -> PublicKey {
    k.public_keys().into_iter().find(|p| p.use_ == "sig").unwrap()
}

fn enc_key(k: &Keys) -> PublicKey {
    k.public_keys().into_iter().find(|p| p.use_ == "enc").unwrap()
}

/// The JSON text of `p` (a key without a window) with the members `edges`
/// (a name and the JSON text of its value; empty: left out).
fn key_text(p: &PublicKey, edges: &[(&str, &str)]) -> String {
    let mut text = serde_json::to_string(p).unwrap();
    text.pop();
    for (name, edge) in edges.iter().filter(|(_, edge)| !edge.is_empty()) {
        text.push_str(&format!(",\"{name}\":{edge}"));
    }
    text.push('}');
    text
}

/// `p` (a key without a window) with the members `edges` (see
/// [`key_text`]), read from its JSON text as a published key list is; the
/// decoding error when it does not decode.
fn with_edges(p: &PublicKey, edges: &[(&str, &str)]) -> Result<PublicKey, String> {
    let text = key_text(p, edges);
    serde_json::from_str(&text).map_err(|e| format!("{text}: {e}"))
}

/// `p` with its window edge `name` the JSON string `s`.
fn with_edge(p: &PublicKey, name: &str, s: &str) -> PublicKey {
    with_edges(p, &[(name, &serde_json::to_string(s).unwrap())]).unwrap()
}

/// `p` with the window of the row `w`.
fn with_window(p: &PublicKey, w: &Window) -> Result<PublicKey, String> {
    with_edges(p, &[("notBefore", &w.not_before), ("notAfter", &w.not_after)])
}

#[test]
fn every_time_is_read_as_go_reads_it() {
    let v = vectors();
    assert!(v.cases.len() >= 100, "{} cases", v.cases.len());
    let mut wrong = Vec::new();
    for c in &v.cases {
        let want = c.go.instant();
        let got = parse_rfc3339(&c.time);
        if got != want {
            wrong.push(format!("{} ({:?}): {got:?}, Go: {want:?}", c.name, c.time));
        }
        // Milliseconds: the same instant, truncated toward the past.
        let ms = want.map(|t| t.unix_seconds * 1000 + i64::from(t.nanos / 1_000_000));
        if parse_rfc3339_ms(&c.time) != ms {
            wrong.push(format!("{} ({:?}) in ms: {:?}, Go: {ms:?}", c.name, c.time, parse_rfc3339_ms(&c.time)));
        }
    }
    assert!(wrong.is_empty(), "read otherwise than Go:\n{}", wrong.join("\n"));
}

/// A message whose time Go does not read is not signed (`ENVELOPE_INVALID`)
/// and does not verify (`SIGNATURE_INVALID`); one whose time it reads
/// verifies with a key opening at that instant and not with one opening a
/// nanosecond later.
#[test]
fn a_message_time_signs_and_verifies_as_go_reads_it() {
    let k = keys();
    let mut wrong = Vec::new();
    for c in vectors().cases.iter().filter(|c| !c.time.is_empty()) {
        let mut m = Message::new("x", "t", "i");
        m.time = c.time.clone();
        let signed = sign_message(&mut m, &k.signing_kid, &k.signing);
        match (c.go.instant(), signed) {
            (None, Err(e)) if e.code == "ENVELOPE_INVALID" => {}
            (Some(_), Ok(())) => {}
            (want, got) => wrong.push(format!("{}: signing gave {:?}, Go reads {want:?}", c.name, got.map_err(|e| e.code))),
        }
        let m = signed_at(&k, &c.time);
        let open = vec![sig_key(&k)];
        match c.go.instant() {
            None => match verify_message_with_keys(&m, &open) {
                Err(e) if e.code == "SIGNATURE_INVALID" => {}
                r => wrong.push(format!("{}: verified ({:?}), Go reads no time", c.name, r.map_err(|e| e.code))),
            },
            Some(at) => {
                let from = [with_edge(&sig_key(&k), "notBefore", &c.time)];
                if verify_message_with_keys(&m, &from).is_err() {
                    wrong.push(format!("{}: a key opening at the message time refused it", c.name));
                }
                let later =
                    Timestamp { unix_seconds: at.unix_seconds + i64::from(at.nanos == 999_999_999), nanos: (at.nanos + 1) % 1_000_000_000 };
                if select_key_at(&from, &k.signing_kid, "sig", later).is_none() {
                    wrong.push(format!("{}: a key opening at the time is not valid a nanosecond later", c.name));
                }
                let earlier =
                    Timestamp { unix_seconds: at.unix_seconds - i64::from(at.nanos == 0), nanos: (at.nanos + 999_999_999) % 1_000_000_000 };
                if at != Timestamp::GO_ZERO && select_key_at(&from, &k.signing_kid, "sig", earlier).is_some() {
                    wrong.push(format!("{}: a key opening at the time is valid a nanosecond before", c.name));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A key whose notBefore or notAfter Go's parser does not read (the
/// empty text included: it is not an absent edge) is valid at no time:
/// nothing verifies with it, nothing is sealed for it.
#[test]
fn a_key_whose_window_does_not_read_is_valid_at_no_time() {
    let k = keys();
    let m = signed_at(&k, "2026-12-05T10:20:30Z");
    verify_message_with_keys(&m, &[sig_key(&k)]).unwrap();
    let mut wrong = Vec::new();
    for c in vectors().cases.iter().filter(|c| c.go.refused) {
        for edge in ["notBefore", "notAfter"] {
            let set = |p: PublicKey| with_edge(&p, edge, &c.time);
            if verify_message_with_keys(&m, &[set(sig_key(&k))]).is_ok() {
                wrong.push(format!("{edge} {}: verified", c.name));
            }
            for t in [i64::MIN / 2, 0, 1_796_466_030_000, i64::MAX / 2] {
                if select_key(&[set(sig_key(&k))], &k.signing_kid, "sig", t).is_some() {
                    wrong.push(format!("{edge} {}: selected at {t}", c.name));
                }
                if select_key(&[set(enc_key(&k))], "", "enc", t).is_some() {
                    wrong.push(format!("{edge} {}: sealed for at {t}", c.name));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Beside a key whose window does not read, a valid one is chosen, even
/// where the unreadable window, read loosely, would name a later
/// notBefore.
#[test]
fn beside_a_key_whose_window_does_not_read_the_valid_one_is_chosen() {
    let (k, other) = (keys(), Keys::from_bytes([8; 32], [108; 32]));
    let good = with_edge(&enc_key(&k), "notBefore", "2025-01-01T00:00:00Z");
    let loose = with_edge(&enc_key(&other), "notBefore", "2026-01-01t00:00:00z");
    let at = parse_rfc3339_ms("2026-12-05T10:20:30Z").unwrap();
    assert_eq!(select_key(&[good.clone(), loose.clone()], "", "enc", at).map(|p| &p.kid), Some(&good.kid));
    assert_eq!(select_key(&[loose, good.clone()], "", "enc", at).map(|p| &p.kid), Some(&good.kid));
}

/// Each window of the vectors holds a message time as Go's
/// `VerifyMessageWithKeys` finds it (`PublicKey.ValidAt`), the key read
/// from its JSON text as a published key is.
#[test]
fn every_window_holds_a_message_time_as_go_finds_it() {
    let k = keys();
    let v = vectors();
    assert!(v.windows.len() >= 30);
    let mut wrong = Vec::new();
    for w in &v.windows {
        let key = match with_window(&sig_key(&k), w) {
            Ok(key) => key,
            Err(e) => {
                wrong.push(format!("{}: does not decode: {e}", w.name));
                continue;
            }
        };
        let m = signed_at(&k, &w.time);
        let got = verify_message_with_keys(&m, &[key]);
        if got.is_ok() != w.valid {
            wrong.push(format!("{}: {:?}, Go: valid {}", w.name, got.map_err(|e| e.code), w.valid));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A key whose window Go does not decode (an edge neither `null` nor an
/// RFC 3339 string) is read, and so is a list holding it, but it is valid
/// at no time: nothing verifies with it, it is never chosen, nothing is
/// sealed for it, and beside an open key the open one is chosen.
#[test]
fn a_key_whose_window_go_does_not_decode_is_valid_at_no_time() {
    let (k, other) = (keys(), Keys::from_bytes([8; 32], [108; 32]));
    let refused: Vec<Window> = vectors().windows.into_iter().filter(|w| w.refused).collect();
    assert!(refused.len() >= 10, "{} refused windows", refused.len());
    let m = signed_at(&k, "2026-12-05T10:20:30Z");
    let mut wrong = Vec::new();
    for w in &refused {
        assert!(!w.valid, "{}", w.name);
        let (Ok(sig), Ok(enc), Ok(enc_other)) =
            (with_window(&sig_key(&k), w), with_window(&enc_key(&k), w), with_window(&enc_key(&other), w))
        else {
            wrong.push(format!("{}: does not decode", w.name));
            continue;
        };
        let list = serde_json::to_string(&[enc_key(&k), enc_other.clone()]).unwrap();
        match serde_json::from_str::<Vec<PublicKey>>(&list) {
            Ok(l) if l == [enc_key(&k), enc_other.clone()] => {}
            r => wrong.push(format!("{}: the list {list} read as {r:?}", w.name)),
        }
        if verify_message_with_keys(&m, std::slice::from_ref(&sig)).is_ok() {
            wrong.push(format!("{}: verified", w.name));
        }
        for t in [i64::MIN / 2, 0, 1_796_466_030_000, i64::MAX / 2] {
            if select_key(std::slice::from_ref(&sig), &k.signing_kid, "sig", t).is_some() {
                wrong.push(format!("{}: selected at {t}", w.name));
            }
            if select_key(std::slice::from_ref(&enc), "", "enc", t).is_some() {
                wrong.push(format!("{}: sealed for at {t}", w.name));
            }
            let chosen = select_key(&[enc_key(&k), enc_other.clone()], "", "enc", t).map(|p| p.kid.clone());
            if chosen.as_ref() != Some(&k.encryption_kid) {
                wrong.push(format!("{}: beside an open key, {chosen:?} chosen at {t}", w.name));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Every window of the vectors that makes a key valid at no time: each
/// refused time as the key's `notBefore` and as its `notAfter`, and each
/// refused window; each a name and the JSON texts of its edges (empty:
/// left out).
fn unreadable_windows() -> Vec<(String, String, String)> {
    let v = vectors();
    let mut rows = Vec::new();
    for c in v.cases.iter().filter(|c| c.go.refused) {
        let edge = serde_json::to_string(&c.time).unwrap();
        rows.push((format!("{}, as notBefore", c.name), edge.clone(), String::new()));
        rows.push((format!("{}, as notAfter", c.name), String::new(), edge));
    }
    rows.extend(v.windows.into_iter().filter(|w| w.refused).map(|w| (w.name, w.not_before, w.not_after)));
    rows
}

/// An account's key list is read key by key: a key whose window does not
/// read is kept as listed and valid at no time, and costs the caller none
/// of the other keys: they verify, and the encryption key among them is
/// sealed for, though the unreadable one is listed after it (where, valid,
/// it would be chosen). The TypeScript and Python clients read the list
/// alike. Go's client reads no key list: a Go program decoding the answer
/// into `[]pigeon.PublicKey` refuses the whole list (the vectors' refused
/// rows).
#[tokio::test]
async fn a_key_list_holding_a_key_whose_window_does_not_read_keeps_every_other_key() {
    let (k, other) = (keys(), Keys::from_bytes([8; 32], [108; 32]));
    let rows = unreadable_windows();
    assert!(rows.len() >= 150, "{} unreadable windows", rows.len());
    let lists: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let served = lists.clone();
    let (url, _) = common::http_server(move |_, r| {
        let path = r.head.split(' ').nth(1).unwrap_or_default();
        Some(common::HttpReply::new(200, served.lock().unwrap().get(path).cloned().unwrap_or_default()))
    })
    .await;
    let cache = KeyCache::new(HttpClient::new(&url, "t"), Duration::from_secs(300));
    let (mine, theirs) = (signed_at(&k, "2026-12-05T10:20:30Z"), signed_at(&other, "2026-12-05T10:20:30Z"));
    let mut wrong = Vec::new();
    for (i, (name, not_before, not_after)) in rows.iter().enumerate() {
        let edges = [("notBefore", not_before.as_str()), ("notAfter", not_after.as_str())];
        let open = |p: PublicKey| serde_json::to_string(&p).unwrap();
        let listed = [key_text(&sig_key(&k), &edges), open(sig_key(&other)), open(enc_key(&k)), key_text(&enc_key(&other), &edges)];
        let account = format!("account-{i}");
        lists.lock().unwrap().insert(format!("/v1/accounts/{account}/keys"), format!("{{\"keys\":[{}]}}", listed.join(",")));
        let got = match cache.keys(&account).await {
            Ok(got) => got,
            Err(e) => {
                wrong.push(format!("{name}: the list is refused: {} {}", e.code, e.message));
                continue;
            }
        };
        let want: Vec<PublicKey> = listed.iter().map(|text| serde_json::from_str(text).unwrap()).collect();
        if *got != want {
            wrong.push(format!("{name}: read as {got:?}"));
        }
        if verify_message_with_keys(&mine, &got).is_ok() {
            wrong.push(format!("{name}: the unreadable key verified"));
        }
        if let Err(e) = cache.verify(&account, &theirs).await {
            wrong.push(format!("{name}: the readable signing key did not verify: {}", e.code));
        }
        match cache.encryption_key(&account).await {
            Ok(key) if key.kid == k.encryption_kid => {}
            r => wrong.push(format!("{name}: sealed for {:?}", r.map(|key| key.kid).map_err(|e| e.code))),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The key list answers of a [`key_lists`] server, by path.
type Lists = Arc<Mutex<HashMap<String, String>>>;

/// A server answering `GET /v1/accounts/{id}/keys` with the text set for
/// its path in the map, and a [`KeyCache`] reading it.
async fn key_lists() -> (KeyCache, Lists) {
    let lists: Lists = Arc::default();
    let served = lists.clone();
    let (url, _) = common::http_server(move |_, r| {
        let path = r.head.split(' ').nth(1).unwrap_or_default();
        Some(common::HttpReply::new(200, served.lock().unwrap().get(path).cloned().unwrap_or_default()))
    })
    .await;
    (KeyCache::new(HttpClient::new(&url, "t"), Duration::from_secs(300)), lists)
}

/// What an entry that is no key makes of a sound key (its JSON object).
type NoKey = fn(Value) -> Value;

/// Entries of a key list that are no key: each a name and what it makes
/// of a sound key (its JSON object, of either use). The same rows as the
/// TypeScript (test/time_vectors.test.mjs) and Python
/// (tests/test_time_vectors.py) tables. The rows from "kid empty" on are
/// of the right types but hold what the server never lists
/// (`PublicKey.Validate` refuses it) and what sealing or verifying with
/// fails on.
fn entries_that_are_no_keys() -> Vec<(&'static str, NoKey)> {
    fn set(mut k: Value, name: &str, v: Value) -> Value {
        k[name] = v;
        k
    }
    fn without(mut k: Value, name: &str) -> Value {
        k.as_object_mut().unwrap().remove(name);
        k
    }
    /// `k`'s member `name`, a string.
    fn text(k: &Value, name: &str) -> String {
        k[name].as_str().unwrap().to_string()
    }
    /// `k` with its key's bytes made `f` of them.
    fn key_bytes(k: Value, f: fn(Vec<u8>) -> Vec<u8>) -> Value {
        let b = b64_decode(&text(&k, "key")).unwrap();
        set(k, "key", json!(b64_encode(&f(b))))
    }
    vec![
        ("kid absent", |k| without(k, "kid")),
        ("kid a number", |k| set(k, "kid", json!(7))),
        ("use an object", |k| {
            let u = k["use"].clone();
            set(k, "use", json!({ "use": u }))
        }),
        ("alg null", |k| set(k, "alg", Value::Null)),
        ("key absent", |k| without(k, "key")),
        ("the entry a string, not an object", |k| k["kid"].clone()),
        ("kid empty", |k| set(k, "kid", json!(""))),
        ("kid of 129 characters", |k| set(k, "kid", json!("k".repeat(129)))),
        ("kid holding a space", |k| {
            let kid = text(&k, "kid") + " 2";
            set(k, "kid", json!(kid))
        }),
        ("kid ending in a line feed", |k| {
            let kid = text(&k, "kid") + "\n";
            set(k, "kid", json!(kid))
        }),
        ("kid not ASCII", |k| {
            let kid = text(&k, "kid") + "\u{e9}";
            set(k, "kid", json!(kid))
        }),
        ("use unknown", |k| set(k, "use", json!("signing"))),
        ("alg of the other use", |k| {
            let alg = if k["use"] == "sig" { "x25519" } else { "ed25519" };
            set(k, "alg", json!(alg))
        }),
        ("key empty", |k| set(k, "key", json!(""))),
        ("key of 31 bytes", |k| key_bytes(k, |b| b[..31].to_vec())),
        ("key of 33 bytes", |k| key_bytes(k, |b| [b, vec![1]].concat())),
        ("key padded", |k| {
            let key = text(&k, "key") + "=";
            set(k, "key", json!(key))
        }),
        ("key holding a line feed", |k| {
            let key = text(&k, "key");
            set(k, "key", json!(format!("{}\n{}", &key[..20], &key[20..])))
        }),
        ("key in standard base64", |k| {
            let key = text(&k, "key");
            set(k, "key", json!(format!("+/{}", &key[2..])))
        }),
        ("key whose last character has bits past the 32 bytes", |k| {
            let key = text(&k, "key");
            let last = if key.ends_with('B') { "C" } else { "B" };
            set(k, "key", json!(format!("{}{last}", &key[..42])))
        }),
        ("key of small order (the Ed25519 identity, the X25519 u = 1)", |k| {
            key_bytes(k, |_| {
                let mut b = vec![0; 32];
                b[0] = 1;
                b
            })
        }),
        ("key not canonical (2^255-19)", |k| {
            key_bytes(k, |_| {
                let mut b = vec![0xff; 32];
                (b[0], b[31]) = (0xed, 0x7f);
                b
            })
        }),
    ]
}

/// An account's key list is read entry by entry: an entry that is no key
/// (not an object; its `kid`, `use`, `alg` or `key` absent, `null` or not
/// a string; or a key the server never lists: a kid not of 1 to 128
/// printable ASCII characters, a use other than `sig` with `ed25519` or
/// `enc` with `x25519`, a key that is not the one base64url spelling of
/// 32 bytes, a key of small order or not canonical) is left out, so that
/// nothing verifies with it and nothing is sealed for it, and costs the
/// caller none of the other keys: they verify, and the encryption key
/// among them is sealed for, though the entry is listed after it with a
/// later `notBefore` (where, were it a key, it would be chosen). The
/// TypeScript and Python clients read the list alike. The client refused
/// the whole list (`BAD_FRAME`, "keys: missing field `kid`"), so that one
/// broken or hostile entry cost the caller every key of the account; and
/// it kept an entry of the right types whose kid was empty or whose key
/// was 31 bytes, and chose it to seal for, or none. [`select_key`] never
/// chooses such an entry of a list handed to it. The entries still count
/// towards the bound of an answer ([`MAX_ACCOUNT_KEYS`]): past it, the
/// answer is refused.
#[tokio::test]
async fn a_key_list_holding_an_entry_that_is_no_key_keeps_every_other_key() {
    let (k, other) = (keys(), Keys::from_bytes([8; 32], [108; 32]));
    let (cache, lists) = key_lists().await;
    let (mine, theirs) = (signed_at(&k, "2026-12-05T10:20:30Z"), signed_at(&other, "2026-12-05T10:20:30Z"));
    let value = |p: PublicKey| serde_json::to_value(p).unwrap();
    let mut wrong = Vec::new();
    for (i, (name, no_key)) in entries_that_are_no_keys().into_iter().enumerate() {
        let mut later = enc_key(&other);
        later.not_before = Some(json!("2026-01-01T00:00:00Z"));
        let listed = [no_key(value(sig_key(&k))), value(sig_key(&other)), value(enc_key(&k)), no_key(value(later))];
        // The entries of the right types, as a list handed over.
        let typed: Vec<PublicKey> = listed.iter().filter_map(|e| serde_json::from_value(e.clone()).ok()).collect();
        let now = parse_rfc3339_ms("2026-12-05T10:20:30Z").unwrap();
        if select_key(&typed, "", "enc", now).map(|p| &p.kid) != Some(&k.encryption_kid) {
            wrong.push(format!("{name}: select_key chose {:?}", select_key(&typed, "", "enc", now)));
        }
        if verify_message_with_keys(&mine, &typed).is_ok() {
            wrong.push(format!("{name}: the entry verified (a list handed over)"));
        }
        let account = format!("account-{i}");
        lists.lock().unwrap().insert(format!("/v1/accounts/{account}/keys"), json!({ "keys": listed }).to_string());
        let got = match cache.keys(&account).await {
            Ok(got) => got,
            Err(e) => {
                wrong.push(format!("{name}: the list is refused: {} {}", e.code, e.message));
                continue;
            }
        };
        if *got != [sig_key(&other), enc_key(&k)] {
            wrong.push(format!("{name}: read as {got:?}"));
        }
        if verify_message_with_keys(&mine, &got).is_ok() || cache.verify(&account, &mine).await.is_ok() {
            wrong.push(format!("{name}: the entry verified"));
        }
        if let Err(e) = cache.verify(&account, &theirs).await {
            wrong.push(format!("{name}: the signing key did not verify: {}", e.code));
        }
        match cache.encryption_key(&account).await {
            Ok(key) if key.kid == k.encryption_kid => {}
            r => wrong.push(format!("{name}: sealed for {:?}", r.map(|key| key.kid).map_err(|e| e.code))),
        }
        // Listed past the bound, beside as many keys as make it up, the
        // entry is one too many: the answer is refused.
        let mut full: Vec<Value> = (0..MAX_ACCOUNT_KEYS).map(|_| value(sig_key(&other))).collect();
        full.push(no_key(value(sig_key(&k))));
        let account = format!("account-{i}-past-the-bound");
        lists.lock().unwrap().insert(format!("/v1/accounts/{account}/keys"), json!({ "keys": full }).to_string());
        match cache.keys(&account).await {
            Err(e) if e.code == "BAD_FRAME" && e.message.contains(&format!("more than {MAX_ACCOUNT_KEYS} entries in keys")) => {}
            r => wrong.push(format!("{name}, past the bound: {:?}", r.map(|ks| ks.len()))),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
