//! The message envelope, contracts and decisions.

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

fn empty(s: &str) -> bool {
    s.is_empty()
}
fn zero(n: &u64) -> bool {
    *n == 0
}
fn zero32(n: &u32) -> bool {
    *n == 0
}

/// An envelope signature (see docs/security.md, "The signature field").
///
/// `v` names the signing form: `Some(2)` ([`crate::crypto::SIGNATURE_V2`],
/// what [`crate::crypto::sign_message`] makes) covers subject, id, time,
/// type, intent, idempotencyKey, replyTo, correlationId, reason and data;
/// `None` (no `"v"` member) is the first form, which covers subject, id,
/// time and data only and still verifies. Any other integer decodes and
/// then never verifies (`SIGNATURE_INVALID`); a `"v"` that is not an
/// integer (`2.5`, `"2"`, `null`) is refused when the signature is decoded,
/// as a mistyped `kid` is. `kid`, `alg` and `sig` absent or `null` read as
/// `""`, as Go reads them (such a signature decodes, and never verifies).
/// `v` is written last, and only when set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Signature {
    #[serde(default, deserialize_with = "text")]
    pub kid: String,
    #[serde(default, deserialize_with = "text")]
    pub alg: String,
    #[serde(default, deserialize_with = "text")]
    pub sig: String,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "signature_form")]
    pub v: Option<i64>,
}

/// Reads a present `"v"`: a JSON integer (an integer beyond `i64` is
/// refused, as Go's `int` refuses it); `null`, a fraction or any other type
/// is refused rather than read as an absent `v`.
fn signature_form<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    struct Form;
    impl Visitor<'_> for Form {
        type Value = Option<i64>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an integer signature form (v)")
        }
        fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
            Ok(Some(n))
        }
        fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
            i64::try_from(n).map(Some).map_err(|_| E::invalid_value(de::Unexpected::Unsigned(n), &self))
        }
    }
    d.deserialize_any(Form)
}

/// Reads an envelope string: a JSON string, or `null` as `""`, as the
/// broker reads `null` in every envelope field (so a message text has one
/// meaning, and one signing input, in every client and in the broker).
fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

/// Reads a message's `sequence` or `hops`: a JSON integer of the type's
/// range, or `null` as absent (0), as Go's `encoding/json` leaves an
/// unsigned integer at `null`. Any other spelling is refused, as Go's
/// `strconv.ParseUint` refuses it: `-0`, `5.0`, `5e0` (serde_json reads
/// each as a float), a negative, a fraction, an integer past the range,
/// a string. Where a message must carry a sequence (a delivery, a
/// receive or replay message) its absence, `null` included, is refused
/// before the message is decoded.
fn count<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The message envelope of the HTTP API and the WebSocket protocol. Empty
/// strings, a zero sequence or hops and null data are left out when
/// encoded; the broker fills `id`, `time`, `source`, `sequence`,
/// `contractId`, `subjectId`, `schemaId`, `acceptedAt` and `hops` on
/// admission.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "text")]
    pub specversion: String,
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "text")]
    pub id: String,
    #[serde(default, rename = "type", skip_serializing_if = "empty", deserialize_with = "text")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "text")]
    pub source: String,
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "text")]
    pub subject: String,
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "text")]
    pub time: String,
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "text")]
    pub intent: String,
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "text")]
    pub idempotency_key: String,
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "text")]
    pub classification: String,
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "text")]
    pub region: String,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub data: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Signature>,
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "text")]
    pub reply_to: String,
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "text")]
    pub correlation_id: String,
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "text")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "zero", deserialize_with = "count")]
    pub sequence: u64,
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "text")]
    pub contract_id: String,
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "text")]
    pub subject_id: String,
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "text")]
    pub schema_id: String,
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "text")]
    pub accepted_at: String,
    /// How many WebAssembly programs deep the message is (docs/protocol.md,
    /// "hops"): 0, and absent on the wire, for a message from outside the
    /// programs; d+1 for one a program published while it handled a
    /// message of hops d. The broker sets it whatever a publisher writes
    /// (what is set here before a publish is replaced), and no signature
    /// covers it. A delivered `hops` that is not a JSON integer of 0 to
    /// 2^32-1 (`-1`, `-0`, `1.5`, `1.0`, `1e0`, `"1"`) does not decode, as
    /// a bad `sequence` does not: the delivery is a bad frame. `null` is
    /// read as absent (0), as Go reads it.
    #[serde(default, skip_serializing_if = "zero32", deserialize_with = "count")]
    pub hops: u32,
}

impl Message {
    /// A message of `type_` on `subject` with `intent`.
    pub fn new(subject: impl Into<String>, type_: impl Into<String>, intent: impl Into<String>) -> Message {
        Message { subject: subject.into(), type_: type_.into(), intent: intent.into(), ..Default::default() }
    }
    pub fn with_data(mut self, data: Value) -> Message {
        self.data = data;
        self
    }
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Message {
        self.idempotency_key = key.into();
        self
    }
    pub fn with_classification(mut self, c: impl Into<String>) -> Message {
        self.classification = c.into();
        self
    }
    pub fn with_region(mut self, r: impl Into<String>) -> Message {
        self.region = r.into();
        self
    }
    pub fn with_correlation_id(mut self, id: impl Into<String>) -> Message {
        self.correlation_id = id.into();
        self
    }
}

/// One subject of a contract and the operations it grants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ContractSubject {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub subject_id: String,
    #[serde(default)]
    pub schema_id: String,
    #[serde(default)]
    pub policy_id: String,
    #[serde(default)]
    pub operations: Vec<String>,
    #[serde(default)]
    pub digest: String,
}

/// The contract a session negotiated: what it may do, on which subjects,
/// until when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Contract {
    pub id: String,
    #[serde(default)]
    pub principal: String,
    #[serde(default)]
    pub subjects: Vec<ContractSubject>,
    #[serde(default)]
    pub policy_ids: Vec<String>,
    #[serde(default)]
    pub issued_at: String,
    #[serde(default)]
    pub expires_at: String,
    #[serde(default)]
    pub region: String,
    /// How the principal authenticated: `mtls`, `oidc`, `grant` or `token`
    /// (docs/identity.md).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub auth: String,
}

impl Contract {
    /// The operations granted on `subject` (empty when it is not in the contract).
    pub fn operations(&self, subject: &str) -> &[String] {
        self.subjects.iter().find(|s| s.name == subject).map(|s| s.operations.as_slice()).unwrap_or(&[])
    }
    /// The expiry in milliseconds since the Unix epoch.
    pub fn expires_at_ms(&self) -> Option<i64> {
        crate::time::parse_rfc3339_ms(&self.expires_at)
    }
}

/// Whether a publish was new or a repeat of an idempotency key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Accepted,
    Duplicate,
}

/// The server's decision on a publish: the status and the admitted
/// message (for a duplicate, the original).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub status: Status,
    pub message: Message,
}

impl Decision {
    pub fn id(&self) -> &str {
        &self.message.id
    }
    pub fn sequence(&self) -> u64 {
        self.message.sequence
    }
}

/// Where a publish decision was: a lone publish's answer (`None`), or slot
/// `index` of the `of` results of a `publish_batch`'s `decisions` answer.
pub(crate) type SlotAt = Option<(usize, usize)>;

/// "this message", with its slot in a batch.
fn answered(at: SlotAt) -> String {
    match at {
        None => "this message".into(),
        Some((index, of)) => format!("this message (index {index} of the {of} results of its publish_batch)"),
    }
}

/// A decision the client cannot read: `BAD_FRAME` (kind
/// [`Protocol`](crate::ErrorKind::Protocol)) saying why and that the
/// message may have been accepted, `details` naming what was read
/// (`status`, `messageId`) and the slot (`index`, `results`).
fn unread(at: SlotAt, why: &str, mut details: Map<String, Value>) -> crate::error::Error {
    let mut e = crate::error::Error::protocol(format!(
        "the server's answer for {} could not be read ({why}): the message may have been accepted",
        answered(at)
    ));
    if let Some((index, of)) = at {
        details.insert("index".into(), index.into());
        details.insert("results".into(), of.into());
    }
    e.details.extend(details);
    e
}

/// Why `e`, a slot's `error`, is no error object as Go's `wire.Error`
/// reads one (its `code` and `message` strings, its `details` an object,
/// each when present and not `null`); `None` when it is one.
fn error_fault(e: &Value) -> Option<&'static str> {
    let Value::Object(o) = e else { return Some("is not an object") };
    if o.get("code").is_some_and(|c| !c.is_null() && !c.is_string()) {
        return Some("code is not a string");
    }
    if o.get("message").is_some_and(|c| !c.is_null() && !c.is_string()) {
        return Some("message is not a string");
    }
    if o.get("details").is_some_and(|c| !c.is_null() && !c.is_object()) {
        return Some("details is not an object");
    }
    None
}

/// Reads a publish decision `d` as the Go client reads one (transport/ws:
/// `decodeFromServer`, `resolvePublishes`): a `publish`'s `decision`
/// answer (`at` `None`; its `status` and `message`), a slot of a
/// `publish_batch`'s `decisions` answer, or the answer of HTTP `POST
/// /v1/messages`. Each member is read to its type first: the decision an
/// object, `status` a string, `message` an envelope whose every member is
/// of the type [`Message`] gives it (`sequence` and `hops` unsigned
/// integers: `-0`, `5.0`, `5e0` are none), a slot's `error` an error
/// object (`code` and `message` strings, `details` an object), each absent
/// or `null` where it may be. Only then is what it says read: a slot's
/// error, whatever else the slot holds (the publish fails with it); else
/// the message, with status `accepted` or `duplicate`.
///
/// A decision that does not read so is no broker's, but the broker judged
/// the message and may have stored it: the publish fails `BAD_FRAME`
/// saying that the message may have been accepted, so that it is not taken
/// for refused and published again without an idempotency key. In a
/// `decisions` answer such a slot fails its own publish alone.
pub(crate) fn read_decision(d: &Value, at: SlotAt) -> crate::error::Result<Decision> {
    let mut details = Map::new();
    let Value::Object(o) = d else {
        return Err(unread(at, "it is not an object", details));
    };
    let status = match o.get("status") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => {
            details.insert("status".into(), s.as_str().into());
            Some(s.as_str())
        }
        Some(_) => return Err(unread(at, "its status is not a string", details)),
    };
    let message = match o.get("message") {
        None | Some(Value::Null) => None,
        Some(m @ Value::Object(mo)) => {
            if let Some(id) = mo.get("id").and_then(Value::as_str) {
                details.insert("messageId".into(), id.into());
            }
            match Message::deserialize(m) {
                Ok(m) => Some(m),
                Err(e) => return Err(unread(at, &format!("its message does not decode: {e}"), details)),
            }
        }
        Some(_) => return Err(unread(at, "its message is not an object", details)),
    };
    if at.is_some() {
        match o.get("error") {
            None | Some(Value::Null) => {}
            Some(e) => {
                if let Some(fault) = error_fault(e) {
                    return Err(unread(at, &format!("its error {fault}"), details));
                }
                return Err(crate::error::Error::from_wire(e));
            }
        }
    }
    let Some(message) = message else {
        return Err(unread(at, "it has no message", details));
    };
    let status = match status {
        Some("accepted") => Status::Accepted,
        Some("duplicate") => Status::Duplicate,
        s => {
            let said = match s {
                Some(s) => format!("status {}", Value::from(s.chars().take(64).collect::<String>())),
                None => "no status".into(),
            };
            let mut e = crate::error::Error::protocol(format!(
                "the server answered {} with {said}, which no broker sends: the message may have been accepted",
                answered(at)
            ));
            if let Some((index, of)) = at {
                details.insert("index".into(), index.into());
                details.insert("results".into(), of.into());
            }
            e.details.extend(details);
            return Err(e);
        }
    };
    Ok(Decision { status, message })
}

/// The largest lease attempt the client takes from a receive answer or
/// sends in an ack or a nack: 2^31-1, as the Go client (the reference)
/// reads `attempts`, and as the TypeScript and Python clients hold it. The
/// broker counts attempts from 1 up to a subject's `retry.maxAttempts`,
/// far below.
pub const MAX_ATTEMPT: u32 = i32::MAX as u32;

/// The `attempts` of a receive answer holding `n` messages, as sent:
/// absent, none told (`None`: a pubsub receive, an automatic one, or a
/// server that does not tell them); else an array of `n` values, the
/// attempt of each message's lease in step with the messages. Anything
/// else (not an array, `null`, another length) is a malformed answer,
/// refused whole: its attempts could not be told to their messages. An
/// entry that is no lease's attempt (see [`attempt_held`]) refuses its
/// message alone (see [`pulled`]).
pub(crate) fn attempts_of(answer: &Value, n: usize) -> Result<Option<&[Value]>, String> {
    let Some(a) = answer.get("attempts") else {
        return Ok(None);
    };
    let Value::Array(a) = a else {
        return Err("attempts that are not an array".into());
    };
    if a.len() != n {
        return Err(format!("{} attempts for {n} messages", a.len()));
    }
    Ok(Some(a))
}

/// The attempt `v` of a leased message when it is a lease's: a JSON
/// integer of 1 to [`MAX_ATTEMPT`]; `None` for anything else (0, a
/// negative, a fraction, a string, `null`, an integer past
/// [`MAX_ATTEMPT`]), never read as some other attempt, nor as none.
pub(crate) fn attempt_held(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|x| u32::try_from(x).ok()).filter(|&x| (1..=MAX_ATTEMPT).contains(&x))
}

/// The messages of an `op` answer (`receive`, `replay`; `what` names it in
/// the message) `ms`, with the
/// attempt of each one's lease taken from `attempts` (see
/// [`attempts_of`]; `None`: 0 each), that the client holds, in order.
/// Each entry `decode` refuses (not a message, one without a sequence,
/// …), and, when the answer names attempts, each whose attempt is no
/// lease's (see [`attempt_held`]: an ack naming a wrong one would be
/// refused, or settle another lease), is left out alone and its
/// `BAD_FRAME` (kind [`Protocol`](crate::ErrorKind::Protocol); `details`:
/// `op`, the entry's `index`, the message's `messageId` when it is a
/// string, as a refused delivery's) passed to `report`, as the TypeScript and
/// Python clients do: a leased one left out is never answered, so the
/// server's ack wait gives it back, and the others go on, so that one
/// entry cannot hide the messages beside it.
pub(crate) fn pulled(
    op: &str,
    what: &str,
    ms: &[Value],
    attempts: Option<&[Value]>,
    decode: impl Fn(&Value) -> Result<Message, String>,
    mut report: impl FnMut(crate::error::Error),
) -> Vec<(Message, u32)> {
    let mut out = Vec::with_capacity(ms.len());
    for (i, m) in ms.iter().enumerate() {
        let id = m.get("id").and_then(Value::as_str);
        let why = match (decode(m), attempts.map(|a| &a[i])) {
            (Err(e), _) => e,
            (Ok(m), None) => {
                out.push((m, 0));
                continue;
            }
            (Ok(m), Some(a)) => match attempt_held(a) {
                Some(a) => {
                    out.push((m, a));
                    continue;
                }
                None => format!("a message whose attempt is not an integer of 1 to 2^31-1 ({a})"),
            },
        };
        let mut e = crate::error::Error::protocol(format!("{what}: messages[{i}] is {why}: not handed over"));
        e.details.insert("op".into(), op.into());
        e.details.insert("index".into(), i.into());
        if let Some(id) = id {
            e.details.insert("messageId".into(), id.into());
        }
        report(e);
    }
    out
}

/// The attempt an ack or a nack sends: 0 (none) or one of 1 to
/// [`MAX_ATTEMPT`]; `INVALID_ARGUMENT` for one beyond, nothing sent (no
/// receive hands such an attempt out).
pub(crate) fn sent_attempt(attempt: u32) -> crate::error::Result<u32> {
    if attempt > MAX_ATTEMPT {
        return Err(crate::error::Error::new("INVALID_ARGUMENT", format!("an attempt of {attempt} is beyond 2^31-1, no lease's")));
    }
    Ok(attempt)
}

/// A message the server hands over (a receive, replay or reply message),
/// decoded, unless its `sequence` is 0: the broker numbers a subject's
/// messages from 1 and leaves 0 out, so a 0 is no broker's, and read as
/// none it would make an ack or a resume name no sequence (settling
/// whichever message holds the id), as a delivery of it would (refused
/// the same way). A `logged` message (a receive or replay message, read
/// from the subject's log) is refused without a sequence too (absent or
/// `null`): the broker sends the number with every message it stores. A
/// reply never enters the log, so it has none: a `null` one is read as
/// absent (none), as the Go, TypeScript and Python clients read it.
pub(crate) fn handed_over(v: &Value, logged: bool) -> Result<Message, String> {
    let decoded = |v: &Value| Message::deserialize(v).map_err(|e| format!("a message that does not decode ({e})"));
    match v.get("sequence") {
        None | Some(Value::Null) if logged => Err("a message without a sequence, no broker's (it numbers every message it stores)".into()),
        Some(s) if s.as_u64() == Some(0) => Err("a message whose sequence is 0, no broker's (it numbers messages from 1)".into()),
        Some(Value::Null) => {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.remove("sequence");
            }
            decoded(&v)
        }
        _ => decoded(v),
    }
}

/// `m` as a request is sent: with an id, drawn here when it has none and
/// nothing binds one (a signature covers the id; a repeated idempotency
/// key stands for the first request, whose id the caller may not know),
/// so that the reply can be told to answer it ([`check_reply`]).
pub(crate) fn request_of(m: &Message) -> std::borrow::Cow<'_, Message> {
    if m.id.is_empty() && m.signature.is_none() && m.idempotency_key.is_empty() {
        let mut m = m.clone();
        m.id = crate::crypto::new_message_id();
        return std::borrow::Cow::Owned(m);
    }
    std::borrow::Cow::Borrowed(m)
}

/// Whether `reply` answers the request `req` (as sent, see [`request_of`]):
/// a reply is the message a responder published with `correlationId` the
/// request's id, so one without a correlationId answers nothing, and one
/// naming another id answers another request. With an idempotency key the
/// request may repeat an earlier one of another id, whose reply is this
/// one's: then any correlationId is taken.
pub(crate) fn check_reply(req: &Message, reply: &Message) -> Result<(), String> {
    if reply.correlation_id.is_empty() {
        return Err("a reply without a correlationId: it answers no request".into());
    }
    if !req.id.is_empty() && req.idempotency_key.is_empty() && reply.correlation_id != req.id {
        return Err(format!("a reply to another request (correlationId {:?}, not {:?})", reply.correlation_id, req.id));
    }
    Ok(())
}
