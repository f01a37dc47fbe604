//! The answer of `GET /v1/accounts/{id}/keys`, read as every client reads
//! it (docs/protocol.md, "Published keys"): the server always answers 200
//! with an object whose `keys` is a list, `{"keys":[]}` for an account
//! without keys and for an id that names no account. Any other answer is
//! not the server's, and is refused, `BAD_FRAME`, rather than read as no
//! keys: `keys` null or absent, a bare list, a number, an empty body. This
//! client read a bare list, a number, `{}` and an empty body as no keys,
//! where the TypeScript and Python clients refused a bare list and a
//! number and read `{"keys":null}` as no keys. The TypeScript
//! (test/key_lists.test.mjs) and Python (tests/test_key_lists.py) clients
//! hold the same table. The entries of the list are read one by one
//! (tests/times.rs holds the table of entries that are no key).

mod common;

use common::http_canned;
use pigeon_client::crypto::Keys;
use pigeon_client::http::HttpClient;
use pigeon_client::ErrorKind;

/// Each answer: its name, HTTP status, body (`K1` and `K2` stand for two
/// sound keys, of the kids k1 and k2), and the kids read (`None`: refused,
/// `BAD_FRAME`).
const ANSWERS: &[(&str, u16, &str, Option<&[&str]>)] = &[
    ("the documented object", 200, r#"{"keys":[K1,K2]}"#, Some(&["k1", "k2"])),
    ("an empty list", 200, r#"{"keys":[]}"#, Some(&[])),
    ("a member beside keys", 200, r#"{"keys":[K1],"note":"x"}"#, Some(&["k1"])),
    ("keys null", 200, r#"{"keys":null}"#, None),
    ("keys absent", 200, "{}", None),
    ("keys a string", 200, r#"{"keys":"k1"}"#, None),
    ("keys an object", 200, r#"{"keys":K1}"#, None),
    ("keys a number", 200, r#"{"keys":7}"#, None),
    ("keys true", 200, r#"{"keys":true}"#, None),
    ("a bare list", 200, "[K1]", None),
    ("a bare empty list", 200, "[]", None),
    ("a number", 200, "7", None),
    ("null", 200, "null", None),
    ("a string", 200, r#""keys""#, None),
    ("an empty body", 200, "", None),
    ("a body of white space", 200, " \r\n", None),
    ("no body, 204", 204, "", None),
    ("not JSON", 200, "<html>keys</html>", None),
];

#[tokio::test]
async fn a_keys_answer_is_read_only_as_the_object_the_server_sends() {
    let mut k = Keys::from_bytes([7; 32], [107; 32]);
    (k.signing_kid, k.encryption_kid) = ("k1".into(), "k2".into());
    let listed: Vec<String> = k.public_keys().iter().map(|p| serde_json::to_string(p).unwrap()).collect();
    let (k1, k2) = (&listed[0], &listed[1]);
    let mut wrong = Vec::new();
    for &(name, status, template, want) in ANSWERS {
        let (url, _) = http_canned(status, template.replace("K1", k1).replace("K2", k2)).await;
        let got = match HttpClient::new(&url, "t").fetch_keys("acct").await {
            Ok(keys) => Some(keys.into_iter().map(|p| p.kid).collect::<Vec<_>>()),
            Err(e) if e.code == "BAD_FRAME" && e.kind == ErrorKind::Protocol => None,
            Err(e) => Some(vec![format!("{}: {}", e.code, e.message)]),
        };
        if got.as_deref() != want.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>()).as_deref() {
            wrong.push(format!("{name}: {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
