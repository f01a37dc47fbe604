/**
 * End-to-end signing and sealing, byte-compatible with the Go packages
 * `pigeon` (SignMessage, VerifyMessage) and `pigeon/seal` (docs/security.md).
 * Primitives come from the audited @noble libraries; nothing is hand-written.
 */
import { ed25519, x25519 } from "@noble/curves/ed25519.js";
import { xchacha20poly1305 } from "@noble/ciphers/chacha.js";
import { hkdf } from "@noble/hashes/hkdf.js";
import { sha256, sha512 } from "@noble/hashes/sha2.js";
import { randomBytes } from "@noble/hashes/utils.js";
import { canonicalize } from "./jcs.js";
import { PigeonError } from "./errors.js";
import type { Message } from "./types.js";
import { parseTimeExact, type ExactTime } from "./times.js";

const utf8 = new TextEncoder();
const utf8d = new TextDecoder("utf-8", { fatal: true });

// ---------- base64url without padding, one spelling per value ----------

const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const B64_INDEX = new Map([...B64].map((c, i) => [c, i]));

/** base64url without padding. */
export function b64encode(b: Uint8Array): string {
  let s = "";
  let i = 0;
  for (; i + 2 < b.length; i += 3) {
    const n = (b[i]! << 16) | (b[i + 1]! << 8) | b[i + 2]!;
    s += B64[n >> 18]! + B64[(n >> 12) & 63]! + B64[(n >> 6) & 63]! + B64[n & 63]!;
  }
  if (b.length - i === 1) {
    const n = b[i]! << 16;
    s += B64[n >> 18]! + B64[(n >> 12) & 63]!;
  } else if (b.length - i === 2) {
    const n = (b[i]! << 16) | (b[i + 1]! << 8);
    s += B64[n >> 18]! + B64[(n >> 12) & 63]! + B64[(n >> 6) & 63]!;
  }
  return s;
}

/**
 * Strict base64url decoding: no padding, only the URL alphabet, and zero
 * trailing bits, so every value has exactly one spelling (as Go's strict
 * decoder).
 */
export function b64decode(s: string): Uint8Array {
  if (typeof s !== "string" || s.length % 4 === 1) throw new Error("not base64url");
  for (const c of s) if (!B64_INDEX.has(c)) throw new Error("not base64url");
  const rem = s.length % 4;
  if (rem > 0) {
    const last = B64_INDEX.get(s[s.length - 1]!)!;
    const mask = rem === 2 ? 0x0f : 0x03;
    if ((last & mask) !== 0) throw new Error("non-zero trailing bits");
  }
  const out = new Uint8Array(Math.floor((s.length * 3) / 4));
  let o = 0;
  let acc = 0;
  let bits = 0;
  for (const c of s) {
    acc = ((acc << 6) | B64_INDEX.get(c)!) & 0xffff;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (acc >> bits) & 0xff;
    }
  }
  return out;
}

function bytesOf(x: Uint8Array | string, name: string, len: number): Uint8Array {
  const b = typeof x === "string" ? b64decode(x) : x;
  if (!(b instanceof Uint8Array) || b.length !== len) {
    throw new PigeonError("INVALID_ARGUMENT", `${name} must be ${len} bytes`);
  }
  return b;
}

// ---------- keys ----------

/** A published public key (docs/security.md, "Published keys"). */
export interface PublicKey {
  kid: string;
  use: "sig" | "enc";
  alg: "ed25519" | "x25519";
  /** raw 32-byte key, base64url without padding */
  key: string;
  /**
   * RFC 3339, as Go reads it (see parseTime, times.ts): the key is valid
   * from this instant on. Absent, null or Go's zero time
   * (0001-01-01T00:00:00Z): since always. Spelled otherwise ("2026-12-05",
   * "Dec 5 2026", the empty string) or of another type (a number, true, an
   * object), the key is valid at no time: Go does not decode it.
   */
  notBefore?: string;
  /** RFC 3339, as notBefore: the key is valid until this instant (exclusive). Absent, null or Go's zero time: no end; empty or not a string: valid at no time. */
  notAfter?: string;
}

/** A program's own key pairs; publish {@link publicKeys} of it. */
export interface KeyPair {
  signingKid: string;
  /** Ed25519 32-byte seed */
  signingSeed: Uint8Array;
  signingPublic: Uint8Array;
  encryptionKid: string;
  /** X25519 32-byte private key */
  encryptionPrivate: Uint8Array;
  encryptionPublic: Uint8Array;
}

/** The kid Go's seal.KeyID derives: prefix "-" base64url(sha256(pub)[:12]). */
export function keyId(prefix: "sig" | "enc", pub: Uint8Array): string {
  return `${prefix}-${b64encode(sha256(pub).subarray(0, 12))}`;
}

/** Fresh Ed25519 and X25519 key pairs with derived kids (seal.GenerateKeys). */
export function generateKeys(): KeyPair {
  return keyPairFrom(randomBytes(32), randomBytes(32));
}

/** Key pairs from a known Ed25519 seed and X25519 private key (base64url or bytes). */
export function keyPairFrom(signingSeed: Uint8Array | string, encryptionPrivate: Uint8Array | string, kids?: { signingKid?: string; encryptionKid?: string }): KeyPair {
  const seed = bytesOf(signingSeed, "signing seed", 32);
  const encPriv = bytesOf(encryptionPrivate, "encryption private key", 32);
  const signingPublic = ed25519.getPublicKey(seed);
  const encryptionPublic = x25519.getPublicKey(encPriv);
  return {
    signingKid: kids?.signingKid ?? keyId("sig", signingPublic),
    signingSeed: seed,
    signingPublic,
    encryptionKid: kids?.encryptionKid ?? keyId("enc", encryptionPublic),
    encryptionPrivate: encPriv,
    encryptionPublic,
  };
}

/** The public halves to publish with PUT /v1/accounts/{id}/keys. */
export function publicKeys(k: KeyPair): PublicKey[] {
  return [
    { kid: k.signingKid, use: "sig", alg: "ed25519", key: b64encode(k.signingPublic) },
    { kid: k.encryptionKid, use: "enc", alg: "x25519", key: b64encode(k.encryptionPublic) },
  ];
}

/**
 * Whether `x`, an entry of a key list, is a key as the server lists one
 * (Go's PublicKey.Validate, the window aside): an object whose kid is 1 to
 * 128 printable ASCII characters, whose use is "sig" with alg "ed25519" or
 * "enc" with alg "x25519", and whose key is the one base64url spelling of
 * 32 bytes (43 characters), neither an Ed25519 point of small order nor
 * an X25519 key of low order or not in canonical form. Any other entry
 * (one of them absent, null or of another type, the entry not an object,
 * or a kid, use, alg or key the server never lists) is no key:
 * HttpClient.fetchKeys leaves it out of the list it reads, and selectKey
 * never chooses it, so that nothing verifies with it and nothing is sealed
 * for it, and it costs the caller none of the other keys of the list (as
 * in the Python and Rust clients): a sound key listed beside it is chosen,
 * whatever the entry's notBefore. Its window is not looked at here: a key
 * whose window does not read is kept, valid at no time (see validAt).
 */
export function isKeyEntry(x: unknown): x is PublicKey {
  if (typeof x !== "object" || x === null || Array.isArray(x)) return false;
  const k = x as Record<string, unknown>;
  if (typeof k.kid !== "string" || !KID.test(k.kid) || typeof k.key !== "string" || k.key.length !== 43) return false;
  const sig = k.use === "sig" && k.alg === "ed25519";
  if (!sig && !(k.use === "enc" && k.alg === "x25519")) return false;
  let b: Uint8Array;
  try {
    b = b64decode(k.key);
  } catch {
    return false;
  }
  return b.length === 32 && (sig ? !weakSigningKey(b) : !weakEncryptionKey(b));
}

/** A kid as the server takes one (Go's checkKID): 1 to 128 printable ASCII characters, no space. */
const KID = /^[\x21-\x7e]{1,128}$/;

/**
 * Where a key's window edge `x` (its notBefore or notAfter) lies: `open`
 * (no bound) when absent or null, as every client reads it, and when it
 * is Go's zero time (0001-01-01T00:00:00Z, at any offset), which Go's
 * PublicKey.ValidAt reads as no bound (a notAfter there closes nothing);
 * the instant RFC 3339 names (see parseTimeExact, times.ts); undefined
 * when it is anything else ("Dec 5 2026", "2026-12-05", the empty string,
 * a number, true, an object). Go reads a window only as null or an RFC
 * 3339 string, and a list holding anything else not at all: a key whose
 * window this client cannot read as Go does is valid at no time (see
 * validAt), so that nothing verifies with it and nothing is sealed for
 * it, rather than a window read otherwise than Go reads it. The empty
 * string is not an absent edge: a notAfter "" on a retired key closes it.
 */
function windowEdge(x: unknown, open: ExactTime): ExactTime | undefined {
  if (x === undefined || x === null) return open;
  const t = parseTimeExact(x);
  return t !== undefined && t[0] === GO_ZERO[0] && t[1] === GO_ZERO[1] ? open : t;
}

const ALWAYS: ExactTime = [-Infinity, 0];
const NEVER: ExactTime = [Infinity, 0];
/** Go's zero time.Time, 0001-01-01T00:00:00Z: where Go's SelectKey ranks a key with no notBefore. */
const GO_ZERO: ExactTime = [-62135596800000, 0];

/**
 * Whether the instant t lies in k's window [notBefore, notAfter), as Go's
 * PublicKey.ValidAt finds it at every precision the clients read times
 * (nanoseconds, microseconds, milliseconds, each truncated): t is at or
 * after notBefore to the nanosecond, and before notAfter to the
 * millisecond. A window closed within a millisecond (notAfter
 * ...00.0005Z) does not hold ...00.0001Z, and one that opens within it
 * (notBefore ...00.0005Z) does not hold ...00.0003Z. False for a key whose
 * window cannot be read (see windowEdge).
 */
function validAt(k: PublicKey, t: ExactTime): boolean {
  const nb = windowEdge(k.notBefore, ALWAYS);
  const na = windowEdge(k.notAfter, NEVER);
  if (!nb || !na) return false;
  return (t[0] > nb[0] || (t[0] === nb[0] && t[1] >= nb[1])) && t[0] < na[0];
}

/**
 * Selects a published key as Go's pigeon.SelectKey does: with a kid, the key
 * of that kid and use valid at `at`; without one, the valid key of that use
 * with the latest notBefore (the last listed among equals). Undefined when
 * none fits. A key whose notBefore or notAfter is not RFC 3339 (as Go reads
 * it) is valid at no time; an entry that is no key (see isKeyEntry) is
 * never chosen.
 */
export function selectKey(keys: readonly PublicKey[], kid: string, use: "sig" | "enc", at: Date | number = Date.now()): PublicKey | undefined {
  return selectKeyAt(keys, kid, use, [typeof at === "number" ? at : at.getTime(), 0]);
}

/** selectKey at an instant read to the nanosecond (a message's time, see parseTimeExact). */
function selectKeyAt(keys: readonly PublicKey[], kid: string, use: "sig" | "enc", t: ExactTime): PublicKey | undefined {
  let best: PublicKey | undefined;
  let bestNB: ExactTime = ALWAYS;
  for (const k of keys) {
    // The cheap tests first: isKeyEntry agrees an X25519 secret.
    if (typeof k !== "object" || k === null || k.use !== use || (kid !== "" && k.kid !== kid) || !validAt(k, t) || !isKeyEntry(k)) continue;
    if (kid !== "") return k;
    // Go ranks a key with no notBefore at its zero time: one opening
    // before that instant (the year 0000, at an offset) ranks earlier.
    const nb = windowEdge(k.notBefore, GO_ZERO)!;
    if (best === undefined || nb[0] > bestNB[0] || (nb[0] === bestNB[0] && nb[1] >= bestNB[1])) {
      best = k;
      bestNB = nb;
    }
  }
  return best;
}

// ---------- envelope signatures ----------

// The encodings of the Ed25519 points of small order without their sign bit,
// as the broker's seal.WeakSigningKey lists them (hex, little-endian): 0
// (order 4), 1 (the identity), the two y of the points of order 8, p-1
// (order 2), and the non-canonical p and p+1.
const SMALL_ORDER_ED25519 = [
  "00".repeat(32),
  "01" + "00".repeat(31),
  "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
  "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
  "ec" + "ff".repeat(30) + "7f",
  "ed" + "ff".repeat(30) + "7f",
  "ee" + "ff".repeat(30) + "7f",
];

/**
 * Whether a 32-byte Ed25519 public key is a point of small order: under
 * such a key some fixed bytes verify as a signature of many or all
 * messages, so it proves nothing.
 */
function weakSigningKey(pub: Uint8Array): boolean {
  let hex = "";
  for (let i = 0; i < 32; i++) hex += (i === 31 ? pub[i]! & 0x7f : pub[i]!).toString(16).padStart(2, "0");
  return SMALL_ORDER_ED25519.includes(hex);
}

/**
 * Ed25519 verification without the cofactor, as Go's crypto/ed25519,
 * libsodium and ed25519-dalek's verify_strict check it: [S]B = R + [k]A
 * exactly, k = SHA-512(R || A || message) mod L. @noble/curves checks
 * [8][S]B = [8]R + [8][k]A (even with zip215 false), which also holds when
 * R or A carries a part of small order: a signer can make signatures only
 * this client accepts. Call it after ed25519.verify, which has decoded R,
 * A and S and checked their encodings.
 */
function verifiesWithoutCofactor(sig: Uint8Array, message: Uint8Array, pub: Uint8Array): boolean {
  const { Point } = ed25519;
  const r = sig.subarray(0, 32);
  const R = Point.fromBytes(r, false);
  const A = Point.fromBytes(pub, false);
  const S = littleEndian(sig.subarray(32, 64));
  const k = littleEndian(sha512(concat(concat(r, pub), message))) % Point.Fn.ORDER;
  return Point.BASE.multiplyUnsafe(S).equals(R.add(A.multiplyUnsafe(k)));
}

function littleEndian(b: Uint8Array): bigint {
  let n = 0n;
  for (let i = b.length - 1; i >= 0; i--) n = (n << 8n) | BigInt(b[i]!);
  return n;
}

/**
 * The X25519 public keys of low order, in canonical form (little-endian
 * hex): 0 and 1, 2^255-20 (-1), and the two u-coordinates of order 8. The
 * curve's torsion is of order 8 and its twist's of order 4, so these are
 * every u with which X25519 agrees a secret of zeros for a private key
 * that is a multiple of 8 and not of either group's large prime order, as
 * Go's seal.WeakEncryptionKey finds them by agreeing one with its probe
 * key (the unit tests check the list against that probe).
 */
const SMALL_ORDER_X25519 = [
  "00".repeat(32),
  "01" + "00".repeat(31),
  "ec" + "ff".repeat(30) + "7f",
  "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
  "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
];

/**
 * Whether a 32-byte X25519 public key is unusable, as Go's
 * seal.WeakEncryptionKey finds it: not in canonical form (see
 * canonicalX25519), or of low order (every secret agreed with it is zero:
 * SMALL_ORDER_X25519). Nothing sealed for such a key opens, and seal
 * refuses it. A table, not a scalar multiplication: a key directory's
 * listing checks every entry.
 */
function weakEncryptionKey(u: Uint8Array): boolean {
  if (!canonicalX25519(u)) return true;
  let hex = "";
  for (let i = 0; i < 32; i++) hex += u[i]!.toString(16).padStart(2, "0");
  return SMALL_ORDER_X25519.includes(hex);
}

/**
 * Whether a 32-byte little-endian X25519 public key is below 2^255-19 (its
 * top bit clear included): the spelling its holder's private key gives.
 * X25519 ignores the top bit and reduces u, but the seal's header binds the
 * bytes as given and the holder binds its own: what is sealed for another
 * spelling never opens.
 */
function canonicalX25519(u: Uint8Array): boolean {
  if (u[31] !== 0x7f) return u[31]! < 0x7f;
  for (let i = 1; i < 31; i++) if (u[i] !== 0xff) return true;
  return u[0]! < 0xed;
}

const ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz";

/** A fresh message id in the server's form: "msg_" and 20 base-36 characters. */
export function newMessageId(): string {
  const r = randomBytes(20);
  let s = "msg_";
  for (const b of r) s += ALPHABET[b % 36];
  return s;
}

/**
 * `m` as a request is sent: with an id, drawn here ({@link newMessageId})
 * when it has none and nothing binds one (a signature covers the id; a
 * repeated idempotency key stands for the first request, whose id the
 * caller may not know), so that the reply can be told to answer it (see
 * unansweringReply). `m` is not changed: a copy carries the drawn id.
 */
export function requestOf(m: Message): Message {
  if (!isRecord(m) || m.id || (m.signature !== undefined && m.signature !== null) || m.idempotencyKey) return m;
  return { ...m, id: newMessageId() };
}

function isRecord(x: unknown): x is Record<string, unknown> {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

function nonEmpty(s: unknown, name: string): string {
  if (typeof s !== "string" || s === "") throw new PigeonError("ENVELOPE_INVALID", `${name} is required to sign`);
  return s;
}

function isEmptyData(d: unknown): boolean {
  return d === undefined || d === null || (typeof d === "object" && !Array.isArray(d) && Object.keys(d as object).length === 0);
}

/** The second signing form's version, the value of a signature's `v`. */
export const SIGNATURE_V2 = 2;

/**
 * The envelope fields the second form covers besides subject, id, time and
 * data, in the order they are signed.
 */
const V2_FIELDS = ["type", "intent", "idempotencyKey", "replyTo", "correlationId", "reason"] as const;

/** The fields {@link canonicalSigningInput} reads. */
export type SignedFields = Pick<Message, "subject" | "id" | "time" | "data"> &
  Partial<Pick<Message, (typeof V2_FIELDS)[number] | "signature">>;

/**
 * The signing form a signature names: 1 without `v` (the first form), 2
 * with `v` 2; no signature is the second form, the one signMessage makes.
 * Any other `v` (0, 1, 3, 2.5, "2", null) names no form: undefined.
 */
function signatureForm(sig: unknown): 1 | 2 | undefined {
  if (sig === undefined || sig === null) return SIGNATURE_V2;
  if (typeof sig !== "object") return undefined;
  const v = (sig as { v?: unknown }).v;
  if (v === undefined) return 1;
  return v === SIGNATURE_V2 ? SIGNATURE_V2 : undefined;
}

function envelopeString(m: SignedFields, name: (typeof V2_FIELDS)[number]): string {
  const s: unknown = m[name];
  if (s === undefined || s === null) return "";
  if (typeof s !== "string") throw new PigeonError("ENVELOPE_INVALID", `${name} must be a string to sign`);
  return s;
}

/**
 * The canonical signing input: the UTF-8 bytes of the JCS form that m's
 * signature names (docs/security.md):
 *
 * - the second form (a signature with `v` 2, or no signature: the form
 *   {@link signMessage} makes): ["pigeon-sig-v2", subject, id, time, type,
 *   intent, idempotencyKey, replyTo, correlationId, reason, data], an
 *   absent (or null) field being "";
 * - the first form (a signature without `v`): ["pigeon-sig-v1", subject,
 *   id, time, data], which leaves the other fields unsigned.
 *
 * Absent or empty data is {}. Throws ENVELOPE_INVALID when the signature
 * names another `v`, a field the form covers is not a string (or holds a
 * lone surrogate), or data has no canonical form: a bigint, or a raw JSON
 * number (JSON.rawJSON) whose value the canonical form would change (see
 * {@link canonicalize}).
 */
export function canonicalSigningInput(m: SignedFields): Uint8Array {
  const form = signatureForm(m.signature);
  if (form === undefined) {
    throw new PigeonError("ENVELOPE_INVALID", `signature.v must be absent or ${SIGNATURE_V2}`);
  }
  const subject = nonEmpty(m.subject, "subject");
  const id = nonEmpty(m.id, "id");
  const time = nonEmpty(m.time, "time");
  const data = isEmptyData(m.data) ? {} : m.data;
  if (form === 1) return utf8.encode(canonicalize(["pigeon-sig-v1", subject, id, time, data]));
  const fields = V2_FIELDS.map((f) => envelopeString(m, f));
  return utf8.encode(canonicalize(["pigeon-sig-v2", subject, id, time, ...fields, data]));
}

/**
 * Signs m in place with the Ed25519 seed in the second form (see
 * {@link canonicalSigningInput}): fills an empty id and time (both are
 * signed) and sets m.signature to `{kid, alg: "ed25519", sig, v: 2}`,
 * replacing any signature m had. Type, intent, idempotencyKey, replyTo,
 * correlationId and reason are signed as they are: set them before
 * signing. Returns m.
 */
export function signMessage<M extends Partial<Message>>(m: M, kid: string, signingSeed: Uint8Array | string): M {
  if (typeof kid !== "string" || kid.length < 1 || kid.length > 128 || !/^[\x21-\x7e]+$/.test(kid)) {
    throw new PigeonError("INVALID_ARGUMENT", "kid must be 1 to 128 printable ASCII characters");
  }
  const seed = bytesOf(signingSeed, "signing seed", 32);
  if (!m.id) m.id = newMessageId();
  if (!m.time) m.time = new Date().toISOString();
  else if (!parseTimeExact(m.time)) throw new PigeonError("ENVELOPE_INVALID", "time is not an RFC 3339 timestamp");
  const input = canonicalSigningInput({ ...(m as Message), signature: undefined });
  m.signature = { kid, alg: "ed25519", sig: b64encode(ed25519.sign(input, seed)), v: SIGNATURE_V2 };
  return m;
}

/**
 * Verifies m's signature with the signer's raw Ed25519 public key, over the
 * form the signature names: `v` 2, the second form; no `v`, the first form
 * (signatures made before the second form keep verifying, but cover only
 * subject, id, time and data). Throws SIGNATURE_REQUIRED (no signature) or
 * SIGNATURE_INVALID, which includes any other `v` (0, 1, 3, "2", null), a
 * key of small order (anyone can sign under it) and data without an exact
 * canonical form.
 */
export function verifyMessage(m: Partial<Message>, signingPublic: Uint8Array | string): void {
  const sig = m.signature;
  if (!sig) throw new PigeonError("SIGNATURE_REQUIRED", "the message is not signed");
  const bad = (why: string) => new PigeonError("SIGNATURE_INVALID", `signature invalid: ${why}`);
  if (sig.alg !== "ed25519") throw bad("alg is not ed25519");
  if (signatureForm(sig) === undefined) throw bad(`v must be absent or ${SIGNATURE_V2}`);
  let raw: Uint8Array, pub: Uint8Array, input: Uint8Array;
  try {
    raw = b64decode(sig.sig);
  } catch {
    throw bad("sig is not base64url");
  }
  if (raw.length !== 64) throw bad("sig is not 64 bytes");
  try {
    pub = bytesOf(signingPublic, "signing key", 32);
  } catch {
    throw bad("the key is not an Ed25519 public key");
  }
  if (weakSigningKey(pub)) throw bad("the key is an Ed25519 point of small order");
  try {
    input = canonicalSigningInput(m as Message);
  } catch {
    throw bad("the message has no canonical form");
  }
  // An R (the signature's first half) of small order verifies here but not
  // in libsodium or ed25519-dalek's verify_strict, and the broker refuses it:
  // refused, so that every client agrees. No honest signer makes one.
  if (weakSigningKey(raw.subarray(0, 32))) throw bad("the signature does not verify");
  let ok = false;
  try {
    ok = ed25519.verify(raw, input, pub, { zip215: false }) && verifiesWithoutCofactor(raw, input, pub);
  } catch {
    ok = false;
  }
  if (!ok) throw bad("the signature does not verify");
}

/**
 * Verifies m with the sender's published keys: the key of the signature's
 * kid, use sig, valid at the message time (VerifyMessageWithKeys).
 */
export function verifyMessageWithKeys(m: Partial<Message>, keys: readonly PublicKey[]): void {
  if (!m.signature) throw new PigeonError("SIGNATURE_REQUIRED", "the message is not signed");
  const t = parseTimeExact(m.time);
  if (!t) throw new PigeonError("SIGNATURE_INVALID", "signature invalid: time is not RFC 3339");
  // Without a kid selectKey would pick the latest key; Go refuses instead.
  if (typeof m.signature.kid !== "string" || m.signature.kid === "") throw new PigeonError("SIGNATURE_INVALID", "signature invalid: the signature has no kid");
  const k = selectKeyAt(keys, m.signature.kid, "sig", t);
  if (!k || k.alg !== "ed25519") throw new PigeonError("SIGNATURE_INVALID", "signature invalid: no valid signing key of that kid");
  verifyMessage(m, k.key);
}

// ---------- sealed payloads ----------

/** The sealed object (docs/security.md, "The sealed object"). */
export interface Sealed {
  v: number;
  alg: string;
  recipientKid: string;
  senderKid: string;
  ephemeralKey: string;
  nonce: string;
  ciphertext: string;
  sig: string;
}

export const SEAL_ALG = "X25519-HKDF-SHA256-XChaCha20Poly1305-Ed25519";
const SEAL_CONTEXT = utf8.encode("pigeon-seal-v1\x00");
const SEAL_INFO = utf8.encode("pigeon-seal-v1 xchacha20poly1305 key");
const SEALED_FIELDS = ["v", "alg", "recipientKid", "senderKid", "ephemeralKey", "nonce", "ciphertext", "sig"];

/** Thrown when a sealed payload fails any check (which one is not said). */
export class SealTamperedError extends PigeonError {
  constructor() {
    super("SEAL_TAMPERED", "seal: message authentication failed");
  }
}

function header(recipientKid: string, senderKid: string, recipientPub: Uint8Array, senderPub: Uint8Array, eph: Uint8Array, nonce: Uint8Array): Uint8Array {
  const fields = [utf8.encode(SEAL_ALG), utf8.encode(recipientKid), utf8.encode(senderKid), recipientPub, senderPub, eph, nonce];
  let n = SEAL_CONTEXT.length;
  for (const f of fields) n += 2 + f.length;
  const h = new Uint8Array(n);
  h.set(SEAL_CONTEXT, 0);
  let o = SEAL_CONTEXT.length;
  for (const f of fields) {
    h[o] = f.length >> 8;
    h[o + 1] = f.length & 0xff;
    h.set(f, o + 2);
    o += 2 + f.length;
  }
  return h;
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}

function checkKid(k: unknown): k is string {
  return typeof k === "string" && k.length > 0 && utf8.encode(k).length <= 128;
}

/**
 * Seals plaintext for the recipient's X25519 public key and signs it with
 * the sender's Ed25519 seed (seal.Seal). A recipient key of low order or
 * not in canonical form (top bit set, or u at or above 2^255-19) is
 * INVALID_ARGUMENT: nothing sealed for it would open.
 */
export function seal(plaintext: Uint8Array, recipientKid: string, recipientPub: Uint8Array | string, senderKid: string, senderSeed: Uint8Array | string): Sealed {
  if (!checkKid(recipientKid) || !checkKid(senderKid)) throw new PigeonError("INVALID_ARGUMENT", "seal: kid must be 1 to 128 bytes");
  const R = bytesOf(recipientPub, "recipient key", 32);
  if (!canonicalX25519(R)) throw new PigeonError("INVALID_ARGUMENT", "seal: recipient key is not a canonical X25519 public key");
  const seed = bytesOf(senderSeed, "sender seed", 32);
  const e = randomBytes(32);
  const E = x25519.getPublicKey(e);
  let shared: Uint8Array;
  try {
    shared = x25519.getSharedSecret(e, R);
  } catch {
    throw new PigeonError("INVALID_ARGUMENT", "seal: recipient key is low order");
  }
  if (shared.every((b) => b === 0)) throw new PigeonError("INVALID_ARGUMENT", "seal: recipient key is low order");
  const key = hkdf(sha256, shared, concat(E, R), SEAL_INFO, 32);
  const nonce = randomBytes(24);
  const h = header(recipientKid, senderKid, R, ed25519.getPublicKey(seed), E, nonce);
  const ct = xchacha20poly1305(key, nonce, h).encrypt(plaintext);
  const sig = ed25519.sign(concat(h, ct), seed);
  return {
    v: 1,
    alg: SEAL_ALG,
    recipientKid,
    senderKid,
    ephemeralKey: b64encode(E),
    nonce: b64encode(nonce),
    ciphertext: b64encode(ct),
    sig: b64encode(sig),
  };
}

/**
 * Checks and decrypts a sealed object with the recipient's X25519 private
 * key and the sender's Ed25519 public key (seal.Open): the signature first,
 * then the decryption. Any failed check throws {@link SealTamperedError}
 * (a sender key of small order, under which anyone can sign, included);
 * so does a `v` that is not an integer (a string; `1.0` or `1e0` in the
 * text, which the client's reader hands over as that spelling, see
 * markSpelledIntegers: Go, Python and Rust decode `v` as an integer and
 * refuse them); an unknown version or algorithm throws SEAL_UNSUPPORTED.
 */
export function open(s: Sealed, recipientPriv: Uint8Array | string, senderPub: Uint8Array | string): Uint8Array {
  const spub = bytesOf(senderPub, "sender key", 32);
  const rpriv = bytesOf(recipientPriv, "recipient key", 32);
  if (!s || typeof s !== "object") throw new SealTamperedError();
  if (!Number.isInteger(s.v)) throw new SealTamperedError(); // not an integer, as the strict decoders read it
  if (weakSigningKey(spub)) throw new SealTamperedError();
  // The message names neither: an alg is the sender's text, of any length
  // and any characters, and errors are what applications log (as Go's
  // seal.ErrUnsupported, and the Python and Rust clients).
  if (s.v !== 1 || s.alg !== SEAL_ALG) throw new PigeonError("SEAL_UNSUPPORTED", "seal: unsupported version or algorithm");
  if (!checkKid(s.recipientKid) || !checkKid(s.senderKid)) throw new SealTamperedError();
  let eph: Uint8Array, nonce: Uint8Array, ct: Uint8Array, sig: Uint8Array;
  try {
    eph = b64decode(s.ephemeralKey);
    nonce = b64decode(s.nonce);
    ct = b64decode(s.ciphertext);
    sig = b64decode(s.sig);
  } catch {
    throw new SealTamperedError();
  }
  if (eph.length !== 32 || nonce.length !== 24 || ct.length < 16 || sig.length !== 64) throw new SealTamperedError();
  if (weakSigningKey(sig.subarray(0, 32))) throw new SealTamperedError(); // an R of small order, as verifyMessage
  const R = x25519.getPublicKey(rpriv);
  const h = header(s.recipientKid, s.senderKid, R, spub, eph, nonce);
  let ok = false;
  try {
    const signed = concat(h, ct);
    ok = ed25519.verify(sig, signed, spub, { zip215: false }) && verifiesWithoutCofactor(sig, signed, spub);
  } catch {
    ok = false;
  }
  if (!ok) throw new SealTamperedError();
  try {
    const shared = x25519.getSharedSecret(rpriv, eph);
    const key = hkdf(sha256, shared, concat(eph, R), SEAL_INFO, 32);
    return xchacha20poly1305(key, nonce, h).decrypt(ct);
  } catch {
    throw new SealTamperedError();
  }
}

/**
 * Seals payload and returns message data holding the clear routing fields
 * beside it: `{...clear, "sealed": {…}}` (seal.SealData). The clear fields
 * are neither hidden nor covered by the seal; sign the envelope too.
 */
export function sealData(clear: Record<string, unknown>, payload: Uint8Array, recipientKid: string, recipientPub: Uint8Array | string, senderKid: string, senderSeed: Uint8Array | string): Record<string, unknown> {
  if (Object.prototype.hasOwnProperty.call(clear, "sealed")) throw new PigeonError("INVALID_ARGUMENT", 'seal: clear fields must not include "sealed"');
  return { ...clear, sealed: seal(payload, recipientKid, recipientPub, senderKid, senderSeed) };
}

/**
 * Splits data built by sealData into its clear fields and the opened
 * payload (seal.OpenData). Throws SEAL_NOT_SEALED when there is no sealed
 * member; an unknown member inside the sealed object, or one spelled in
 * another case ("Sig"), counts as tampering. A parsed value cannot hold a
 * member name twice: parse text from sources other than the broker with
 * {@link parseStrict}, which refuses it (DUPLICATE_KEY).
 */
export function openData(data: unknown, recipientPriv: Uint8Array | string, senderPub: Uint8Array | string): { clear: Record<string, unknown>; payload: Uint8Array } {
  if (!data || typeof data !== "object" || Array.isArray(data)) throw new PigeonError("SEAL_NOT_SEALED", "seal: data is not a JSON object");
  const { sealed, ...clear } = data as Record<string, unknown>;
  if (sealed === undefined) throw new PigeonError("SEAL_NOT_SEALED", "seal: data has no sealed part");
  if (!sealed || typeof sealed !== "object" || Array.isArray(sealed)) throw new SealTamperedError();
  for (const k of Object.keys(sealed)) if (!SEALED_FIELDS.includes(k)) throw new SealTamperedError();
  const payload = open(sealed as Sealed, recipientPriv, senderPub);
  return { clear, payload };
}

/** UTF-8 bytes of a string (for payloads). */
export function utf8Encode(s: string): Uint8Array {
  return utf8.encode(s);
}
/** A string from UTF-8 bytes (refuses invalid UTF-8). */
export function utf8Decode(b: Uint8Array): string {
  return utf8d.decode(b);
}

/**
 * Seals payload for a recipient's published keys (its valid `enc` key with
 * the latest notBefore) as the sender: data ready for a message.
 */
export function sealFor(clear: Record<string, unknown>, payload: Uint8Array, recipientKeys: readonly PublicKey[], sender: KeyPair): Record<string, unknown> {
  const k = selectKey(recipientKeys, "", "enc");
  if (!k || k.alg !== "x25519") throw new PigeonError("INVALID_ARGUMENT", "the recipient has no valid encryption key");
  return sealData(clear, payload, k.kid, k.key, sender.signingKid, sender.signingSeed);
}

/**
 * Verifies a received message with its sender's published keys and opens
 * its sealed payload with the recipient's keys.
 */
export function verifyAndOpen(m: Partial<Message>, senderKeys: readonly PublicKey[], recipient: KeyPair): { clear: Record<string, unknown>; payload: Uint8Array } {
  verifyMessageWithKeys(m, senderKeys);
  const sealed = (m.data as { sealed?: { senderKid?: string } } | undefined)?.sealed;
  const kid = typeof sealed?.senderKid === "string" ? sealed.senderKid : "";
  const k = selectKeyAt(senderKeys, kid, "sig", parseTimeExact(m.time)!); // verified: an RFC 3339 time
  if (!k) throw new SealTamperedError();
  return openData(m.data, recipient.encryptionPrivate, k.key);
}
