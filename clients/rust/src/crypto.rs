//! End-to-end signatures and sealed payloads, byte-compatible with the Go
//! implementation (`pigeon.SignMessage`, package `pigeon/seal`): see
//! docs/security.md. Only audited primitives are used: Ed25519
//! (`ed25519-dalek`), X25519 (`x25519-dalek`), HKDF-SHA256 (`hkdf`, `sha2`)
//! and XChaCha20-Poly1305 (`chacha20poly1305`).

use crate::error::{Error, Result};
use crate::jcs;
use crate::message::{Message, Signature};
use crate::time;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use rand_core::{OsRng, RngCore};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use x25519_dalek::{PublicKey as XPublic, StaticSecret};

pub use ed25519_dalek::{SigningKey as Ed25519SigningKey, VerifyingKey as Ed25519VerifyingKey};
pub use x25519_dalek::{PublicKey as X25519PublicKey, StaticSecret as X25519Secret};

/// The context string that starts a first-form signing input (a signature
/// without `v`).
pub const SIGNATURE_CONTEXT: &str = "pigeon-sig-v1";
/// The context string that starts a second-form signing input (a signature
/// with `"v": 2`), the form [`sign_message`] makes.
pub const SIGNATURE_CONTEXT_V2: &str = "pigeon-sig-v2";
/// [`Signature::v`] of a signature in the second form; a signature without
/// `v` is in the first.
pub const SIGNATURE_V2: i64 = 2;
/// The algorithm of a version 1 sealed payload.
pub const SEAL_ALG: &str = "X25519-HKDF-SHA256-XChaCha20Poly1305-Ed25519";
const SEAL_CONTEXT: &[u8] = b"pigeon-seal-v1\0";
const SEAL_INFO: &[u8] = b"pigeon-seal-v1 xchacha20poly1305 key";

/// base64url without padding, the spelling of every binary field.
pub fn b64_encode(b: &[u8]) -> String {
    B64.encode(b)
}

/// Strict base64url decoding: no padding, no standard alphabet, no
/// non-zero trailing bits.
pub fn b64_decode(s: &str) -> Option<Vec<u8>> {
    B64.decode(s).ok()
}

fn b64_32(s: &str) -> Option<[u8; 32]> {
    b64_decode(s)?.try_into().ok()
}

/// The bytes a signature covers, in the form `m`'s signature names, or, for
/// a message without a signature, in the form [`sign_message`] makes (the
/// second): the JCS form of
///
/// `["pigeon-sig-v2", subject, id, time, type, intent, idempotencyKey, replyTo, correlationId, reason, data]`
///
/// for a signature with `"v": 2` (the strings as they are, an empty one as
/// `""`), and of `["pigeon-sig-v1", subject, id, time, data]` for one
/// without `v`, the first form, which leaves type, intent, idempotencyKey,
/// replyTo, correlationId and reason uncovered: a relay may change those
/// under a first-form signature and it still verifies. Absent data counts
/// as `{}`. Neither form covers source, specversion, classification,
/// region, or what the broker sets on acceptance (sequence, contractId,
/// subjectId, schemaId, acceptedAt, hops). `ENVELOPE_INVALID` when subject, id
/// or time is empty, time is not RFC 3339, the signature names another
/// form (any other `v`), or data has no exact canonical form.
pub fn signing_input(m: &Message) -> Result<Vec<u8>> {
    let v2 = match m.signature.as_ref().map(|s| s.v) {
        None | Some(Some(SIGNATURE_V2)) => true,
        Some(None) => false,
        Some(Some(_)) => return Err(Error::new("ENVELOPE_INVALID", "signature.v must be absent or 2")),
    };
    form_input(m, v2)
}

/// The signing input of the second form (`v2`) or the first.
fn form_input(m: &Message, v2: bool) -> Result<Vec<u8>> {
    if m.subject.is_empty() || m.id.is_empty() || m.time.is_empty() {
        return Err(Error::new("ENVELOPE_INVALID", "subject, id and time must be set to sign or verify"));
    }
    if time::parse_rfc3339(&m.time).is_none() {
        return Err(Error::new("ENVELOPE_INVALID", "time is not RFC 3339"));
    }
    let data = match &m.data {
        Value::Null => Value::Object(Map::new()),
        d => d.clone(),
    };
    let context = if v2 { SIGNATURE_CONTEXT_V2 } else { SIGNATURE_CONTEXT };
    let mut input: Vec<Value> = [context, &m.subject, &m.id, &m.time].iter().map(|s| Value::String(s.to_string())).collect();
    if v2 {
        for s in [&m.type_, &m.intent, &m.idempotency_key, &m.reply_to, &m.correlation_id, &m.reason] {
            input.push(Value::String(s.clone()));
        }
    }
    input.push(data);
    jcs::canonicalize(&Value::Array(input))
}

/// A fresh message id (`msg_` and 20 base-36 characters).
pub fn new_message_id() -> String {
    const A: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut b = [0u8; 20];
    OsRng.fill_bytes(&mut b);
    let mut s = String::from("msg_");
    s.extend(b.iter().map(|x| A[(*x as usize) % 36] as char));
    s
}

/// Signs `m` with the Ed25519 key `key` published under `kid`, filling an
/// empty `id` with a fresh one and an empty `time` with now (both are signed),
/// and sets `m.signature` to `{kid, "ed25519", sig, v: 2}`: always the second
/// form (see [`signing_input`]), whatever signature `m` had. A change after
/// signing to subject, id, time, type, intent, idempotencyKey, replyTo,
/// correlationId, reason or the meaning of data makes it fail to verify; a
/// change of data's formatting (member order, number spelling) does not.
pub fn sign_message(m: &mut Message, kid: &str, key: &SigningKey) -> Result<()> {
    if kid.is_empty() || kid.len() > 128 || !kid.bytes().all(|c| (0x21..0x7f).contains(&c)) {
        return Err(Error::new("INVALID_ARGUMENT", "kid must be 1 to 128 printable ASCII characters"));
    }
    if m.id.is_empty() {
        m.id = new_message_id();
    }
    if m.time.is_empty() {
        m.time = time::format_rfc3339_ms(time::now_ms());
    }
    let input = form_input(m, true)?;
    let sig = key.sign(&input);
    m.signature = Some(Signature { kid: kid.to_string(), alg: "ed25519".into(), sig: b64_encode(&sig.to_bytes()), v: Some(SIGNATURE_V2) });
    Ok(())
}

/// Verifies `m`'s signature with the sender's public key, in the form the
/// signature names (`"v": 2`, or no `v` for the first form):
/// `SIGNATURE_REQUIRED` without one, `SIGNATURE_INVALID` when it does not
/// verify, when `v` is neither absent nor 2, when the key is an Ed25519 point of small order (anyone can sign
/// under it), or when the data has no exact canonical form (a number JCS
/// would round: see [`crate::jcs::canonicalize`]).
pub fn verify_message(m: &Message, key: &VerifyingKey) -> Result<()> {
    let s = m.signature.as_ref().ok_or_else(|| Error::crypto("SIGNATURE_REQUIRED", "the message is not signed"))?;
    let invalid = || Error::crypto("SIGNATURE_INVALID", "the signature does not verify");
    if s.v.is_some_and(|v| v != SIGNATURE_V2) {
        return Err(Error::crypto("SIGNATURE_INVALID", "the signature names an unknown form (v must be absent or 2)"));
    }
    if s.alg != "ed25519" {
        return Err(invalid());
    }
    if weak_signing_key(key.as_bytes()) || key.is_weak() {
        return Err(Error::crypto("SIGNATURE_INVALID", "the key is an Ed25519 point of small order"));
    }
    let raw: [u8; 64] = b64_decode(&s.sig).and_then(|b| b.try_into().ok()).ok_or_else(invalid)?;
    let input = signing_input(m).map_err(|_| invalid())?;
    key.verify_strict(&input, &ed25519_dalek::Signature::from_bytes(&raw)).map_err(|_| invalid())
}

/// Verifies `m` with the sender's published keys: the signing key of the
/// signature's kid valid at the message time, read to the nanosecond
/// ([`time::parse_rfc3339`], [`PublicKey::valid_at_time`]), as Go's
/// `VerifyMessageWithKeys`. `SIGNATURE_INVALID` when the time is no RFC
/// 3339 time as Go reads one, or no key of the kid is valid then.
pub fn verify_message_with_keys(m: &Message, keys: &[PublicKey]) -> Result<()> {
    let s = m.signature.as_ref().ok_or_else(|| Error::crypto("SIGNATURE_REQUIRED", "the message is not signed"))?;
    let t = time::parse_rfc3339(&m.time).ok_or_else(|| Error::crypto("SIGNATURE_INVALID", "the message time is not RFC 3339"))?;
    if s.kid.is_empty() {
        // select_key would pick the latest key; Go refuses instead.
        return Err(Error::crypto("SIGNATURE_INVALID", "the signature has no kid"));
    }
    let k = select_key_at(keys, &s.kid, "sig", t)
        .ok_or_else(|| Error::crypto("SIGNATURE_INVALID", format!("no signing key {} valid at the message time", s.kid)))?;
    let vk = k.ed25519_key().ok_or_else(|| Error::crypto("SIGNATURE_INVALID", "the key is not an Ed25519 public key"))?;
    verify_message(m, &vk)
}

/// The encodings of the Ed25519 points of small order without their sign
/// bit, as the broker's `seal.WeakSigningKey` lists them: 0 (order 4), 1
/// (the identity), the two y of the points of order 8, p-1 (order 2), and
/// the non-canonical p and p+1.
const SMALL_ORDER_ED25519: [[u8; 32]; 7] = {
    let mut k = [[0u8; 32]; 7];
    k[1][0] = 1;
    k[2] = [
        0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98, 0xf0, 0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6,
        0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53, 0xfc, 0x05,
    ];
    k[3] = [
        0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67, 0x0f, 0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39,
        0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac, 0x03, 0x7a,
    ];
    let mut i = 4;
    while i < 7 {
        let mut j = 1;
        while j < 31 {
            k[i][j] = 0xff;
            j += 1;
        }
        k[i][31] = 0x7f;
        k[i][0] = 0xec + (i as u8 - 4); // p-1, p, p+1
        i += 1;
    }
    k
};

/// Whether the Ed25519 public key `pub_` is a point of small order: under
/// such a key some fixed bytes verify as a signature of many or all
/// messages, so it proves nothing.
fn weak_signing_key(pub_: &[u8; 32]) -> bool {
    let mut k = *pub_;
    k[31] &= 0x7f;
    SMALL_ORDER_ED25519.contains(&k)
}

/// Whether the X25519 public key `u` is unusable, as Go's
/// `seal.WeakEncryptionKey` finds it: not in canonical form (see
/// [`canonical_x25519`]), or of low order (every secret agreed with it is
/// zero). Nothing sealed for such a key opens, and [`seal`] refuses it.
fn weak_encryption_key(u: &[u8; 32]) -> bool {
    // The private key agreed with is Go's seal probe.
    let probe: [u8; 32] = Sha256::digest(b"pigeon-seal-v1 low-order probe").into();
    !canonical_x25519(u) || !StaticSecret::from(probe).diffie_hellman(&XPublic::from(*u)).was_contributory()
}

/// Whether the little-endian X25519 public key `u` is below 2^255-19 (its
/// top bit clear included): the spelling its holder's private key gives.
/// X25519 ignores the top bit and reduces u, but the seal's header binds the
/// bytes as given and the holder binds its own, so what is sealed for
/// another spelling never opens.
fn canonical_x25519(u: &[u8; 32]) -> bool {
    if u[31] != 0x7f {
        return u[31] < 0x7f;
    }
    if u[1..31].iter().any(|&b| b != 0xff) {
        return true;
    }
    u[0] < 0xed
}

/// A published public key (docs/security.md, "Published keys").
///
/// `not_before` and `not_after` are each the JSON value of the member as
/// listed, to be RFC 3339 strings as the Go code reads a time
/// ([`time::parse_rfc3339`]): the key is valid from `not_before` on and
/// until `not_after` (exclusive). `None` (absent or `null` on the wire), or
/// the instant `0001-01-01T00:00:00Z` (Go's zero time, which its
/// `PublicKey.ValidAt` reads as no bound): no bound. Spelled otherwise
/// (`2026-12-05`, `2026-12-05t00:00:00z`, `2026-02-30T00:00:00Z`, the
/// empty string) or not a string (a number, `true`, an object, a list),
/// the key is valid at no time: nothing verifies with it and nothing is
/// sealed for it, rather than a window read otherwise than Go reads it (Go
/// decodes no such key). The value is kept as listed, so that an empty
/// string is not taken for an absent edge: a `notAfter` of `""` on a
/// retired key closes it.
///
/// `kid`, `use`, `alg` and `key` are strings: a listed entry where one of
/// them is absent, `null` or of another type is no key, and
/// [`HttpClient::fetch_keys`](crate::http::HttpClient::fetch_keys) leaves
/// it out of the list it reads; so is an entry that is not
/// [`sound`](PublicKey::is_sound).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PublicKey {
    pub kid: String,
    #[serde(rename = "use")]
    pub use_: String,
    pub alg: String,
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<serde_json::Value>,
}

/// Where a window edge lies: `Ok(None)` for no bound (absent or `null`,
/// or Go's zero time), `Ok(Some(t))` for the instant an RFC 3339 string
/// names, `Err(())` for anything else: a string that is no RFC 3339 time
/// as Go reads one (the empty string included), or a value of another
/// type.
fn edge(v: &Option<serde_json::Value>) -> std::result::Result<Option<time::Timestamp>, ()> {
    let s = match v {
        None | Some(serde_json::Value::Null) => return Ok(None),
        Some(serde_json::Value::String(s)) => s,
        Some(_) => return Err(()),
    };
    match time::parse_rfc3339(s) {
        Some(t) if t == time::Timestamp::GO_ZERO => Ok(None),
        Some(t) => Ok(Some(t)),
        None => Err(()),
    }
}

/// The precisions (in nanoseconds) at which the clients read times: Go to
/// the nanosecond, Python to the microsecond, TypeScript to the
/// millisecond (Go's `clientPrecisions`).
const CLIENT_PRECISIONS: [u32; 3] = [1, 1_000, 1_000_000];

impl PublicKey {
    /// A signing key entry for a raw Ed25519 public key.
    pub fn ed25519(kid: &str, key: &VerifyingKey) -> PublicKey {
        PublicKey {
            kid: kid.into(),
            use_: "sig".into(),
            alg: "ed25519".into(),
            key: b64_encode(key.as_bytes()),
            not_before: None,
            not_after: None,
        }
    }
    /// An encryption key entry for a raw X25519 public key.
    pub fn x25519(kid: &str, key: &XPublic) -> PublicKey {
        PublicKey {
            kid: kid.into(),
            use_: "enc".into(),
            alg: "x25519".into(),
            key: b64_encode(key.as_bytes()),
            not_before: None,
            not_after: None,
        }
    }
    /// Whether the key is valid at `t`, milliseconds since the Unix epoch
    /// (see [`valid_at_time`](PublicKey::valid_at_time)).
    pub fn valid_at(&self, t: i64) -> bool {
        self.valid_at_time(time::Timestamp::from_unix_ms(t))
    }
    /// Whether `at` lies in the key's window `[not_before, not_after)` as
    /// Go's `PublicKey.ValidAt` finds it: at every precision the clients
    /// read times (nanoseconds, microseconds, milliseconds, each
    /// truncated), so that `not_before` binds to the nanosecond and
    /// `not_after` to the millisecond (a window closed at `...00.0005Z`
    /// does not hold `...00.0001Z`: a client reading milliseconds finds it
    /// closed then). False for a key whose window does not read (see
    /// [`PublicKey`]).
    pub fn valid_at_time(&self, at: time::Timestamp) -> bool {
        let (Ok(nb), Ok(na)) = (edge(&self.not_before), edge(&self.not_after)) else {
            return false;
        };
        CLIENT_PRECISIONS.iter().all(|&unit| {
            let at = at.truncate(unit);
            nb.is_none_or(|nb| at >= nb.truncate(unit)) && na.is_none_or(|na| at < na.truncate(unit))
        })
    }
    /// Whether this is a key as the server lists one (Go's
    /// `PublicKey.Validate`, the window aside): its `kid` is 1 to 128
    /// printable ASCII characters, its `use` is `sig` with `alg` `ed25519`
    /// or `enc` with `alg` `x25519`, and its `key` is the one base64url
    /// spelling of 32 bytes (43 characters), neither an Ed25519 point of
    /// small order nor an X25519 key of low order or not in canonical
    /// form. Any other entry of a key list is no key:
    /// [`HttpClient::fetch_keys`](crate::http::HttpClient::fetch_keys)
    /// leaves it out and [`select_key_at`] never chooses it, so that
    /// nothing verifies with it and nothing is sealed for it, and a sound
    /// key listed beside it is chosen, whatever its `notBefore`, as in the
    /// TypeScript and Python clients. Its window is not looked at here.
    pub fn is_sound(&self) -> bool {
        let kid = &self.kid;
        if kid.is_empty() || kid.len() > 128 || !kid.bytes().all(|c| (0x21..0x7f).contains(&c)) || self.key.len() != 43 {
            return false;
        }
        let Some(b) = b64_32(&self.key) else { return false };
        match (self.use_.as_str(), self.alg.as_str()) {
            ("sig", "ed25519") => !weak_signing_key(&b),
            ("enc", "x25519") => !weak_encryption_key(&b),
            _ => false,
        }
    }
    /// The Ed25519 key, when this is one.
    pub fn ed25519_key(&self) -> Option<VerifyingKey> {
        if self.alg != "ed25519" {
            return None;
        }
        VerifyingKey::from_bytes(&b64_32(&self.key)?).ok()
    }
    /// The X25519 key, when this is one.
    pub fn x25519_key(&self) -> Option<XPublic> {
        if self.alg != "x25519" {
            return None;
        }
        Some(XPublic::from(b64_32(&self.key)?))
    }
}

/// The key of `kid` and `use_` valid at `t` (milliseconds since the Unix
/// epoch); see [`select_key_at`].
pub fn select_key<'a>(keys: &'a [PublicKey], kid: &str, use_: &str, t: i64) -> Option<&'a PublicKey> {
    select_key_at(keys, kid, use_, time::Timestamp::from_unix_ms(t))
}

/// The key of `kid` and `use_` valid at `at` ([`PublicKey::valid_at_time`]),
/// as Go's `pigeon.SelectKey`: with a kid, the first key of that kid;
/// without one, the valid key of that use with the latest `notBefore` (the
/// last listed among equals). A key whose window does not read is valid
/// at no time: never chosen; nor is a key that is not
/// [`sound`](PublicKey::is_sound).
pub fn select_key_at<'a>(keys: &'a [PublicKey], kid: &str, use_: &str, at: time::Timestamp) -> Option<&'a PublicKey> {
    let mut best: Option<(&PublicKey, Option<time::Timestamp>)> = None;
    // The cheap tests first: is_sound agrees an X25519 secret.
    for k in keys.iter().filter(|k| k.use_ == use_ && (kid.is_empty() || k.kid == kid) && k.valid_at_time(at) && k.is_sound()) {
        if !kid.is_empty() {
            return Some(k);
        }
        // Valid, so its notBefore reads; none (no bound) is the earliest.
        let nb = edge(&k.not_before).ok().flatten();
        if best.is_none_or(|(_, b)| nb >= b) {
            best = Some((k, nb));
        }
    }
    best.map(|(k, _)| k)
}

/// A key id as the Go code derives it: `prefix` and the base64url of the
/// first 12 bytes of the public key's SHA-256.
pub fn key_id(prefix: &str, public: &[u8]) -> String {
    let h = Sha256::digest(public);
    format!("{}{}", prefix, b64_encode(&h[..12]))
}

/// A program's signing and encryption key pairs with their kids.
#[derive(Clone)]
pub struct Keys {
    pub signing_kid: String,
    pub signing: SigningKey,
    pub encryption_kid: String,
    pub encryption: StaticSecret,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keys{{signing: {}, encryption: {}}}", self.signing_kid, self.encryption_kid)
    }
}

impl Keys {
    /// Fresh random key pairs.
    pub fn generate() -> Keys {
        let mut seed = [0u8; 32];
        OsRng.fill_bytes(&mut seed);
        let mut enc = [0u8; 32];
        OsRng.fill_bytes(&mut enc);
        Keys::from_bytes(seed, enc)
    }
    /// Keys from an Ed25519 seed and an X25519 private key.
    pub fn from_bytes(signing_seed: [u8; 32], encryption_private: [u8; 32]) -> Keys {
        let signing = SigningKey::from_bytes(&signing_seed);
        let encryption = StaticSecret::from(encryption_private);
        Keys {
            signing_kid: key_id("sig-", signing.verifying_key().as_bytes()),
            encryption_kid: key_id("enc-", XPublic::from(&encryption).as_bytes()),
            signing,
            encryption,
        }
    }
    pub fn signing_public(&self) -> VerifyingKey {
        self.signing.verifying_key()
    }
    pub fn encryption_public(&self) -> XPublic {
        XPublic::from(&self.encryption)
    }
    /// The public halves, to publish with `PUT /v1/accounts/{id}/keys`.
    pub fn public_keys(&self) -> Vec<PublicKey> {
        vec![
            PublicKey::ed25519(&self.signing_kid, &self.signing_public()),
            PublicKey::x25519(&self.encryption_kid, &self.encryption_public()),
        ]
    }
}

/// A sealed payload (docs/security.md, "The sealed object").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Sealed {
    pub v: u32,
    pub alg: String,
    pub recipient_kid: String,
    pub sender_kid: String,
    pub ephemeral_key: String,
    pub nonce: String,
    pub ciphertext: String,
    pub sig: String,
}

fn tampered() -> Error {
    Error::crypto("SEAL_TAMPERED", "the sealed payload does not open")
}

fn header(recipient_kid: &str, sender_kid: &str, r: &[u8; 32], sender: &[u8; 32], e: &[u8; 32], nonce: &[u8]) -> Result<Vec<u8>> {
    let mut h = Vec::with_capacity(256);
    h.extend_from_slice(SEAL_CONTEXT);
    for f in [SEAL_ALG.as_bytes(), recipient_kid.as_bytes(), sender_kid.as_bytes(), r, sender, e, nonce] {
        let n = u16::try_from(f.len()).map_err(|_| tampered())?;
        h.extend_from_slice(&n.to_be_bytes());
        h.extend_from_slice(f);
    }
    Ok(h)
}

fn check_kid(kid: &str) -> bool {
    !kid.is_empty() && kid.len() <= 128
}

fn seal_key(shared: &[u8; 32], e: &[u8; 32], r: &[u8; 32]) -> [u8; 32] {
    let mut salt = [0u8; 64];
    salt[..32].copy_from_slice(e);
    salt[32..].copy_from_slice(r);
    let hk = hkdf::Hkdf::<Sha256>::new(Some(&salt), shared);
    let mut key = [0u8; 32];
    hk.expand(SEAL_INFO, &mut key).expect("32 bytes is a valid HKDF-SHA256 length");
    key
}

/// Encrypts `plaintext` for the recipient's X25519 key (published under
/// `recipient_kid`) and signs it with the sender's Ed25519 key.
/// `INVALID_ARGUMENT` for a recipient key of low order or not in canonical
/// form (top bit set, or u at or above 2^255-19): nothing sealed for it
/// would open.
pub fn seal(plaintext: &[u8], recipient_kid: &str, recipient: &XPublic, sender_kid: &str, sender: &SigningKey) -> Result<Sealed> {
    if !check_kid(recipient_kid) || !check_kid(sender_kid) {
        return Err(Error::new("INVALID_ARGUMENT", "kids must be 1 to 128 bytes"));
    }
    if !canonical_x25519(recipient.as_bytes()) {
        return Err(Error::new("INVALID_ARGUMENT", "the recipient key is not a canonical X25519 public key"));
    }
    let mut eb = [0u8; 32];
    OsRng.fill_bytes(&mut eb);
    let e = StaticSecret::from(eb);
    let ep = XPublic::from(&e);
    let shared = e.diffie_hellman(recipient);
    if !shared.was_contributory() {
        return Err(Error::new("INVALID_ARGUMENT", "the recipient key is of low order"));
    }
    let key = seal_key(shared.as_bytes(), ep.as_bytes(), recipient.as_bytes());
    let mut nonce = [0u8; 24];
    OsRng.fill_bytes(&mut nonce);
    let h = header(recipient_kid, sender_kid, recipient.as_bytes(), sender.verifying_key().as_bytes(), ep.as_bytes(), &nonce)?;
    let ct = XChaCha20Poly1305::new((&key).into())
        .encrypt(XNonce::from_slice(&nonce), Payload { msg: plaintext, aad: &h })
        .map_err(|_| Error::new("INTERNAL", "encryption failed"))?;
    let mut signed = h;
    signed.extend_from_slice(&ct);
    let sig = sender.sign(&signed);
    Ok(Sealed {
        v: 1,
        alg: SEAL_ALG.into(),
        recipient_kid: recipient_kid.into(),
        sender_kid: sender_kid.into(),
        ephemeral_key: b64_encode(ep.as_bytes()),
        nonce: b64_encode(&nonce),
        ciphertext: b64_encode(&ct),
        sig: b64_encode(&sig.to_bytes()),
    })
}

/// Checks the sender's signature, then decrypts with the recipient's
/// private key. Any failed check is `SEAL_TAMPERED`, without saying which
/// (a sender key of small order, under which anyone can sign, included);
/// an unknown version or algorithm is `SEAL_UNSUPPORTED`.
pub fn open(s: &Sealed, recipient: &StaticSecret, sender: &VerifyingKey) -> Result<Vec<u8>> {
    if s.v != 1 || s.alg != SEAL_ALG {
        return Err(Error::crypto("SEAL_UNSUPPORTED", "unknown sealed payload version or algorithm"));
    }
    if weak_signing_key(sender.as_bytes()) || sender.is_weak() {
        return Err(tampered());
    }
    if !check_kid(&s.recipient_kid) || !check_kid(&s.sender_kid) {
        return Err(tampered());
    }
    let e = b64_32(&s.ephemeral_key).ok_or_else(tampered)?;
    let nonce: [u8; 24] = b64_decode(&s.nonce).and_then(|b| b.try_into().ok()).ok_or_else(tampered)?;
    let ct = b64_decode(&s.ciphertext).ok_or_else(tampered)?;
    let sig: [u8; 64] = b64_decode(&s.sig).and_then(|b| b.try_into().ok()).ok_or_else(tampered)?;
    if ct.len() < 16 {
        return Err(tampered());
    }
    let r = XPublic::from(recipient);
    let h = header(&s.recipient_kid, &s.sender_kid, r.as_bytes(), sender.as_bytes(), &e, &nonce)?;
    let mut signed = h.clone();
    signed.extend_from_slice(&ct);
    sender.verify_strict(&signed, &ed25519_dalek::Signature::from_bytes(&sig)).map_err(|_| tampered())?;
    let shared = recipient.diffie_hellman(&XPublic::from(e));
    if !shared.was_contributory() {
        return Err(tampered());
    }
    let key = seal_key(shared.as_bytes(), &e, r.as_bytes());
    XChaCha20Poly1305::new((&key).into()).decrypt(XNonce::from_slice(&nonce), Payload { msg: &ct, aad: &h }).map_err(|_| tampered())
}

/// Message data for a sealed payload: the routing fields of `clear` and
/// the sealed object under `sealed`.
pub fn seal_data(
    clear: &Map<String, Value>,
    payload: &[u8],
    recipient_kid: &str,
    recipient: &XPublic,
    sender_kid: &str,
    sender: &SigningKey,
) -> Result<Value> {
    if clear.contains_key("sealed") {
        return Err(Error::new("INVALID_ARGUMENT", "a clear field may not be named sealed"));
    }
    let s = seal(payload, recipient_kid, recipient, sender_kid, sender)?;
    let mut data = clear.clone();
    data.insert("sealed".into(), serde_json::to_value(s).expect("a sealed object encodes"));
    Ok(Value::Object(data))
}

/// Opens the message data `seal_data` built: the clear fields and the
/// payload. `SEAL_NOT_SEALED` when there is no `sealed` member;
/// `SEAL_TAMPERED` when the sealed object has a member not among its eight
/// or one spelled in another case (`"Sig"`). A `Value` cannot hold a name
/// twice (serde_json keeps the last); [`Sealed`] read from text refuses a
/// member given twice.
pub fn open_data(data: &Value, recipient: &StaticSecret, sender: &VerifyingKey) -> Result<(Map<String, Value>, Vec<u8>)> {
    let obj = data.as_object().ok_or_else(|| Error::crypto("SEAL_NOT_SEALED", "the data is not an object"))?;
    let raw = obj.get("sealed").ok_or_else(|| Error::crypto("SEAL_NOT_SEALED", "the data has no sealed member"))?;
    let s = Sealed::deserialize(raw).map_err(|_| tampered())?;
    let payload = open(&s, recipient, sender)?;
    let mut clear = obj.clone();
    clear.remove("sealed");
    Ok((clear, payload))
}
