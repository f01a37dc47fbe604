//! The two signature forms (docs/security.md): `sign_message` makes the
//! second (`"v": 2`), which covers type, intent, idempotencyKey, replyTo,
//! correlationId and reason besides subject, id, time and data; a signature
//! without `v` is the first form, which covers only subject, id, time and
//! data and still verifies; any other `v` never verifies.

use ed25519_dalek::Signer;
use pigeon_client::crypto::{
    b64_encode, sign_message, signing_input, verify_message, verify_message_with_keys, Keys, SIGNATURE_CONTEXT, SIGNATURE_CONTEXT_V2,
    SIGNATURE_V2,
};
use pigeon_client::{Message, Signature};
use serde_json::{json, Value};

fn keys() -> Keys {
    Keys::from_bytes([3; 32], [103; 32])
}

/// A message with every field the second form covers set, escapes included.
fn message() -> Message {
    let mut m = Message::new("payments.authorize", "payment.authorization.requested", "authorize_payment")
        .with_idempotency_key("k-\u{e9}-1")
        .with_correlation_id("corr \"7\"")
        .with_classification("pci")
        .with_region("uk")
        .with_data(json!({"amount": "42.50"}));
    m.id = "msg_forms_1".into();
    m.time = "2026-11-29T12:00:06Z".into();
    m.reply_to = "inbox.checkout".into();
    m.reason = "retry\n<after> \u{1F600}".into();
    m
}

/// Signs `m` in the first form (no `v`), as clients did before the second.
fn sign_first_form(m: &mut Message, k: &Keys) {
    m.signature = Some(Signature { kid: k.signing_kid.clone(), alg: "ed25519".into(), sig: String::new(), v: None });
    let input = signing_input(m).unwrap();
    m.signature.as_mut().unwrap().sig = b64_encode(&k.signing.sign(&input).to_bytes());
}

/// A named change to a message.
type Change = (&'static str, fn(&mut Message));

/// The changes a relay could make to the fields only the second form covers.
fn covered_changes() -> Vec<Change> {
    vec![
        ("type", |m| m.type_ = "payment.refund.requested".into()),
        ("intent", |m| m.intent = "refund_payment".into()),
        ("idempotencyKey changed", |m| m.idempotency_key = "k-2".into()),
        ("idempotencyKey removed", |m| m.idempotency_key = String::new()),
        ("replyTo", |m| m.reply_to = "inbox.elsewhere".into()),
        ("correlationId", |m| m.correlation_id = "corr 8".into()),
        ("reason changed", |m| m.reason = "retry\n<after> \u{1F601}".into()),
        ("reason removed", |m| m.reason = String::new()),
        ("type removed", |m| m.type_ = String::new()),
    ]
}

#[test]
fn sign_makes_the_second_form() {
    let k = keys();
    let mut m = message();
    sign_message(&mut m, &k.signing_kid, &k.signing).unwrap();
    let s = m.signature.clone().unwrap();
    assert_eq!((s.kid.as_str(), s.alg.as_str(), s.v), (k.signing_kid.as_str(), "ed25519", Some(SIGNATURE_V2)));
    let input = String::from_utf8(signing_input(&m).unwrap()).unwrap();
    assert_eq!(
        input,
        r#"["pigeon-sig-v2","payments.authorize","msg_forms_1","2026-11-29T12:00:06Z","payment.authorization.requested","authorize_payment","k-é-1","inbox.checkout","corr \"7\"","retry\n<after> 😀",{"amount":"42.50"}]"#
    );
    assert!(input.starts_with(&format!("[\"{SIGNATURE_CONTEXT_V2}\",")));
    verify_message(&m, &k.signing_public()).unwrap();
    verify_message_with_keys(&m, &k.public_keys()).unwrap();
    // Written as the broker writes it: v last, a JSON integer.
    let text = serde_json::to_string(&m.signature).unwrap();
    assert_eq!(text, format!(r#"{{"kid":"{}","alg":"ed25519","sig":"{}","v":2}}"#, s.kid, s.sig));
}

/// A message without a signature gets the second form's input, its empty
/// strings as "".
#[test]
fn unsigned_messages_get_the_second_forms_input() {
    let mut m = Message { subject: "chat.messages".into(), data: json!({"b": 1, "a": 2}), ..Default::default() };
    m.id = "msg_1".into();
    m.time = "2026-11-29T12:00:00Z".into();
    let input = String::from_utf8(signing_input(&m).unwrap()).unwrap();
    assert_eq!(input, r#"["pigeon-sig-v2","chat.messages","msg_1","2026-11-29T12:00:00Z","","","","","","",{"a":2,"b":1}]"#);
}

/// Re-signing makes the second form whatever signature the message had.
#[test]
fn sign_replaces_any_earlier_form() {
    let k = keys();
    for v in [None, Some(1), Some(3), Some(2)] {
        let mut m = message();
        m.signature = Some(Signature { kid: "old".into(), alg: "ed25519".into(), sig: "x".into(), v });
        sign_message(&mut m, &k.signing_kid, &k.signing).unwrap_or_else(|e| panic!("{v:?}: {e}"));
        assert_eq!(m.signature.as_ref().unwrap().v, Some(2), "{v:?}");
        verify_message(&m, &k.signing_public()).unwrap_or_else(|e| panic!("{v:?}: {e}"));
    }
}

/// Each field the second form covers, changed after signing, makes the
/// signature fail.
#[test]
fn second_form_covers_the_envelope_fields() {
    let k = keys();
    let mut signed = message();
    sign_message(&mut signed, &k.signing_kid, &k.signing).unwrap();
    verify_message(&signed, &k.signing_public()).unwrap();
    for (name, change) in covered_changes() {
        let mut m = signed.clone();
        change(&mut m);
        assert_ne!(m, signed, "{name}: no change");
        let e = verify_message(&m, &k.signing_public()).expect_err(name);
        assert_eq!(e.code, "SIGNATURE_INVALID", "{name}");
        let e = verify_message_with_keys(&m, &k.public_keys()).expect_err(name);
        assert_eq!(e.code, "SIGNATURE_INVALID", "{name}");
    }
}

/// The first form's limit, kept for signatures made before the second: it
/// covers subject, id, time and data only, so the same changes leave a
/// first-form signature verifying. Only a signature made by `sign_message`
/// (the second form) protects those fields.
#[test]
fn first_form_still_verifies_and_does_not_cover_the_envelope_fields() {
    let k = keys();
    let mut signed = message();
    sign_first_form(&mut signed, &k);
    let input = String::from_utf8(signing_input(&signed).unwrap()).unwrap();
    assert_eq!(input, format!(r#"["{SIGNATURE_CONTEXT}","payments.authorize","msg_forms_1","2026-11-29T12:00:06Z",{{"amount":"42.50"}}]"#));
    verify_message(&signed, &k.signing_public()).unwrap();
    verify_message_with_keys(&signed, &k.public_keys()).unwrap();
    assert_eq!(serde_json::to_value(&signed).unwrap()["signature"].as_object().unwrap().len(), 3, "no v written");
    for (name, change) in covered_changes() {
        let mut m = signed.clone();
        change(&mut m);
        verify_message(&m, &k.signing_public()).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // What it covers it still protects.
    let mut m = signed.clone();
    m.data = json!({"amount": "4250"});
    assert_eq!(verify_message(&m, &k.signing_public()).unwrap_err().code, "SIGNATURE_INVALID");
    // And the form is part of what is signed: naming the second form (or
    // dropping v from a second-form signature) fails.
    let mut m = signed.clone();
    m.signature.as_mut().unwrap().v = Some(2);
    assert_eq!(verify_message(&m, &k.signing_public()).unwrap_err().code, "SIGNATURE_INVALID");
    let mut m = message();
    sign_message(&mut m, &k.signing_kid, &k.signing).unwrap();
    m.signature.as_mut().unwrap().v = None;
    assert_eq!(verify_message(&m, &k.signing_public()).unwrap_err().code, "SIGNATURE_INVALID");
}

/// Neither form covers what the broker fills or sets: those change freely.
#[test]
fn fields_the_broker_sets_are_not_covered() {
    let k = keys();
    let mut signed = message();
    sign_message(&mut signed, &k.signing_kid, &k.signing).unwrap();
    let mut m = signed.clone();
    m.source = "spiffe://x".into();
    m.specversion = "1.0".into();
    m.classification = "internal".into();
    m.region = "eu".into();
    m.sequence = 9;
    m.contract_id = "ctr_1".into();
    m.subject_id = "sub_1".into();
    m.schema_id = "sch_1".into();
    m.accepted_at = "2026-11-29T12:00:07Z".into();
    verify_message(&m, &k.signing_public()).unwrap();
}

/// An integer v other than 2 decodes, then never verifies, and has no
/// signing input.
#[test]
fn other_integer_forms_decode_and_fail_verification() {
    let k = keys();
    let mut signed = message();
    sign_message(&mut signed, &k.signing_kid, &k.signing).unwrap();
    let text = serde_json::to_string(&signed).unwrap();
    assert!(text.contains(r#","v":2}"#), "{text}");
    for v in ["0", "1", "3", "-2", "9223372036854775807", "-9223372036854775808"] {
        let t = text.replace(r#","v":2}"#, &format!(r#","v":{v}}}"#));
        let m: Message = serde_json::from_str(&t).unwrap_or_else(|e| panic!("v {v}: {e}"));
        assert_eq!(m.signature.as_ref().unwrap().v, Some(v.parse().unwrap()));
        let e = verify_message(&m, &k.signing_public()).expect_err(v);
        assert_eq!(e.code, "SIGNATURE_INVALID", "v {v}");
        let e = verify_message_with_keys(&m, &k.public_keys()).expect_err(v);
        assert_eq!(e.code, "SIGNATURE_INVALID", "v {v}");
        let e = signing_input(&m).expect_err(v);
        assert_eq!(e.code, "ENVELOPE_INVALID", "v {v}");
        // Also from a serde_json::Value, as the client reads frames.
        let m: Message = serde_json::from_value(serde_json::from_str::<Value>(&t).unwrap()).unwrap();
        assert_eq!(verify_message(&m, &k.signing_public()).unwrap_err().code, "SIGNATURE_INVALID", "v {v}");
    }
    // The broker's spelling decodes and verifies, from text and from a Value.
    let m: Message = serde_json::from_str(&text).unwrap();
    assert_eq!(m, signed);
    verify_message(&m, &k.signing_public()).unwrap();
    let m: Message = serde_json::from_value(serde_json::from_str::<Value>(&text).unwrap()).unwrap();
    verify_message(&m, &k.signing_public()).unwrap();
}

/// A v that is not an integer is refused when decoded, as a mistyped kid
/// is, never read as an absent v (the first form).
#[test]
fn non_integer_forms_are_refused_when_decoded() {
    let k = keys();
    let mut signed = message();
    sign_message(&mut signed, &k.signing_kid, &k.signing).unwrap();
    let text = serde_json::to_string(&signed).unwrap();
    for v in ["2.5", "2.0", "2e0", r#""2""#, "null", "true", "[2]", r#"{"v":2}"#, "18446744073709551615", "1e400"] {
        let t = text.replace(r#","v":2}"#, &format!(r#","v":{v}}}"#));
        assert!(serde_json::from_str::<Message>(&t).is_err(), "v {v} decoded");
        if let Ok(value) = serde_json::from_str::<Value>(&t) {
            assert!(serde_json::from_value::<Message>(value).is_err(), "v {v} decoded from a Value");
        }
    }
    // As the kid's type is checked.
    let t = text.replacen(r#""kid":"#, r#""kid":7,"x":"#, 1);
    assert!(serde_json::from_str::<Message>(&t).is_err());
    // A v given twice is refused too.
    let t = text.replace(r#","v":2}"#, r#","v":2,"v":2}"#);
    assert!(serde_json::from_str::<Message>(&t).is_err());
}
