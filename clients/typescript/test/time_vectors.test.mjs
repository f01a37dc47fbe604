// Every time of clients/conformance/vectors/times.json (Go's reading of
// each text: parseRFC3339, then time.Parse) is read here as Go reads it,
// to the nanosecond (parseTimeExact) and to the millisecond (parseTime);
// every key window of it holds a message time as Go's
// VerifyMessageWithKeys finds it (PublicKey.ValidAt). A window edge at
// Go's zero time (0001-01-01T00:00:00Z, at any offset) is no bound, as Go
// reads it: this client read a notAfter there as a key closed since year
// 1, and refused a signature Go and the other clients verify; and it
// ranked a notBefore before that instant after an absent one, so that
// another key was chosen to seal for than Go chooses.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { b64decode, b64encode, HttpClient, KeyCache, keyPairFrom, MAX_ACCOUNT_KEYS, PigeonError, publicKeys, selectKey, signMessage, verifyMessageWithKeys } from "../dist/index.js";
import { parseTime, parseTimeExact } from "../dist/times.js";

const V = JSON.parse(readFileSync(fileURLToPath(new URL("../../conformance/vectors/times.json", import.meta.url)), "utf8"));

// Rows whose outcome here is documented to differ from Go's, by name, with
// the reason. None: every instant RFC 3339 writes (years 0001 to 9999,
// and a day either side by an offset) is within 2^53 milliseconds of the
// epoch, so a Number keeps its milliseconds exactly and the nanoseconds
// past them are kept apart (ExactTime).
const DIFFERS = new Map();

const keys = keyPairFrom(new Uint8Array(32).fill(7), new Uint8Array(32).fill(107));
const sigKey = publicKeys(keys).find((k) => k.use === "sig");
const encKey = publicKeys(keys).find((k) => k.use === "enc");

const NS = 1_000_000_000n;
const floorDiv = (a, b) => (a >= 0n ? a / b : -((-a + b - 1n) / b));

/** Go's reading of a case as nanoseconds since the epoch (BigInt), or undefined when Go refuses it. */
const goNanos = (c) => (c.refused ? undefined : BigInt(c.unixSeconds) * NS + BigInt(c.nanos));

/** An ExactTime (milliseconds, nanoseconds past them) as nanoseconds since the epoch. */
const nanosOf = (t) => BigInt(t[0]) * 1_000_000n + BigInt(t[1]);

/** Year, month and day of the day `days` after 1970-01-01 (proleptic Gregorian). */
function civil(days) {
  const z = days + 719468;
  const era = Math.floor(z / 146097);
  const doe = z - era * 146097;
  const yoe = Math.floor((doe - Math.floor(doe / 1460) + Math.floor(doe / 36524) - Math.floor(doe / 146096)) / 365);
  const doy = doe - (365 * yoe + Math.floor(yoe / 4) - Math.floor(yoe / 100));
  const mp = Math.floor((5 * doy + 2) / 153);
  const m = mp < 10 ? mp + 3 : mp - 9;
  return [yoe + era * 400 + (m <= 2 ? 1 : 0), m, doy - Math.floor((153 * mp + 2) / 5) + 1];
}

/**
 * The instant ns (nanoseconds since the epoch, BigInt) spelled as RFC 3339
 * with nine digits of fraction: in UTC, or at the offset +23:59 or -23:59
 * that brings an instant of the year 0000 or 10000 into 0001 to 9999.
 */
function spell(ns) {
  const pad = (n, w) => String(n).padStart(w, "0");
  for (const off of [0, 23 * 60 + 59, -(23 * 60 + 59)]) {
    const local = ns + BigInt(off) * 60n * NS;
    const sec = floorDiv(local, NS);
    const days = floorDiv(sec, 86400n);
    const sod = Number(sec - days * 86400n);
    const [y, m, d] = civil(Number(days));
    if (y < 1 || y > 9999) continue;
    const zone = off === 0 ? "Z" : `${off > 0 ? "+" : "-"}23:59`;
    return `${pad(y, 4)}-${pad(m, 2)}-${pad(d, 2)}T${pad(Math.floor(sod / 3600), 2)}:${pad(Math.floor(sod / 60) % 60, 2)}:${pad(sod % 60, 2)}.${pad(local - sec * NS, 9)}${zone}`;
  }
  throw new Error(`no RFC 3339 spelling of ${ns}`);
}

/** Whether verifyMessageWithKeys verifies m with keys: true, or false for SIGNATURE_INVALID (anything else throws). */
function verifies(m, keyList) {
  try {
    verifyMessageWithKeys(m, keyList);
    return true;
  } catch (e) {
    if (!(e instanceof PigeonError && e.code === "SIGNATURE_INVALID")) throw e;
    return false;
  }
}

/** A message signed at time, which must read. */
const signedAt = (time) => signMessage({ subject: "x", id: "msg_times", time, data: { n: 1 } }, keys.signingKid, keys.signingSeed);

/** Records name's outcome: wrong unless it is Go's, or documented to differ. */
function check(wrong, name, got, want, what) {
  if (got === want || DIFFERS.has(name)) return;
  wrong.push(`${name}: ${what} ${got}, Go: ${want}`);
}

test("time vectors: every time is read as Go reads it, to the nanosecond and to the millisecond (vectors/times.json)", () => {
  assert.ok(V.cases.length >= 100, `${V.cases.length} cases`);
  const wrong = [];
  for (const c of V.cases) {
    const want = goNanos(c);
    const exact = parseTimeExact(c.time);
    check(wrong, c.name, exact === undefined ? "refused" : String(nanosOf(exact)), want === undefined ? "refused" : String(want), "ns");
    if (exact !== undefined) {
      if (!Number.isSafeInteger(exact[0]) || !Number.isInteger(exact[1]) || exact[1] < 0 || exact[1] > 999_999) wrong.push(`${c.name}: not an exact time ${exact}`);
    }
    // Milliseconds: the same instant, truncated toward the past.
    const ms = parseTime(c.time);
    check(wrong, c.name, Number.isNaN(ms) ? "refused" : String(ms), want === undefined ? "refused" : String(floorDiv(want, 1_000_000n)), "ms");
  }
  assert.deepEqual(wrong, []);
});

test("time vectors: a message time signs and verifies as Go reads it; a key opening then holds it, one opening a nanosecond later does not", () => {
  const wrong = [];
  const good = signedAt("2026-12-05T10:20:30Z");
  for (const c of V.cases) {
    const want = goNanos(c);
    if (want === undefined) {
      // Go: SignMessage refuses it (ENVELOPE_INVALID; an empty time is stamped with now) and VerifyMessageWithKeys too.
      if (c.time !== "") {
        let signed;
        try {
          signedAt(c.time);
          signed = "signed";
        } catch (e) {
          signed = e instanceof PigeonError ? e.code : String(e);
        }
        check(wrong, c.name, signed, "ENVELOPE_INVALID", "signing");
      }
      check(wrong, c.name, verifies({ ...good, time: c.time }, [sigKey]), false, "verified with the time");
      continue;
    }
    const m = signedAt(c.time);
    check(wrong, c.name, verifies(m, [sigKey]), true, "verified with no window");
    check(wrong, c.name, verifies(m, [{ ...sigKey, notBefore: c.time }]), true, "verified with a key opening at the text");
    const at = spell(want);
    check(wrong, c.name, String(nanosOf(parseTimeExact(at) ?? [NaN, 0])), String(want), `the spelling ${at} read as`);
    check(wrong, c.name, verifies(m, [{ ...sigKey, notBefore: at }]), true, `verified with a key opening at ${at}`);
    const later = spell(want + 1n);
    check(wrong, c.name, verifies(m, [{ ...sigKey, notBefore: later }]), false, `verified with a key opening at ${later}`);
  }
  assert.deepEqual(wrong, []);
});

test("time vectors: a key whose window does not read as Go reads it is valid at no time", () => {
  const m = signedAt("2026-12-05T10:20:30Z");
  assert.ok(verifies(m, [sigKey]));
  const wrong = [];
  // The empty text too: not an absent edge, a window Go does not read.
  for (const c of V.cases.filter((c) => c.refused)) {
    for (const edge of ["notBefore", "notAfter"]) {
      check(wrong, c.name, verifies(m, [{ ...sigKey, [edge]: c.time }]), false, `${edge}: verified`);
      for (const t of [-8.64e15, 0, 1796466030000, 8.64e15]) {
        check(wrong, c.name, selectKey([{ ...sigKey, [edge]: c.time }], sigKey.kid, "sig", t)?.kid, undefined, `${edge}: selected at ${t}`);
        check(wrong, c.name, selectKey([{ ...encKey, [edge]: c.time }], "", "enc", t)?.kid, undefined, `${edge}: sealed for at ${t}`);
      }
    }
  }
  assert.deepEqual(wrong, []);
});

/** The key k with the window w of the vectors, read from its JSON text as a published key list is. */
function withWindow(k, w) {
  return JSON.parse(keyText(k, w));
}

/** The JSON text of the key k with the window w (the JSON texts of its edges). */
function keyText(k, w) {
  let text = JSON.stringify(k).slice(0, -1);
  for (const name of ["notBefore", "notAfter"]) {
    if (w[name] !== undefined) text += `,"${name}":${w[name]}`;
  }
  return text + "}";
}

test("time vectors: every key window holds a message time as Go's VerifyMessageWithKeys finds it", () => {
  assert.ok(V.windows.length >= 30, `${V.windows.length} windows`);
  const wrong = [];
  for (const w of V.windows) {
    check(wrong, w.name, verifies(signedAt(w.time), [withWindow(sigKey, w)]), w.valid, "valid");
  }
  assert.deepEqual(wrong, []);
});

// Go does not decode a key whose window edge is neither null nor an RFC
// 3339 string (the empty string, a number, true, an object, a list): such
// a key is valid at no time here. This client read an empty edge as no
// bound, so that a key listed with notAfter "" verified for ever.
test("time vectors: a key whose window Go does not decode is valid at no time: nothing verifies with it, nothing is sealed for it", () => {
  const refused = V.windows.filter((w) => w.refused);
  assert.ok(refused.length >= 10, `${refused.length} refused windows`);
  const wrong = [];
  const m = signedAt("2026-12-05T10:20:30Z");
  for (const w of refused) {
    check(wrong, w.name, verifies(m, [withWindow(sigKey, w)]), false, "verified");
    for (const t of [-8.64e15, 0, 1796466030000, 8.64e15]) {
      check(wrong, w.name, selectKey([withWindow(sigKey, w)], sigKey.kid, "sig", t)?.kid, undefined, `selected at ${t}`);
      check(wrong, w.name, selectKey([withWindow(encKey, w)], "", "enc", t)?.kid, undefined, `sealed for at ${t}`);
      // Beside an open key, the open one is chosen.
      check(wrong, w.name, selectKey([encKey, withWindow({ ...encKey, kid: "enc-other" }, w)], "", "enc", t)?.kid, encKey.kid, `chosen beside an open key at ${t}`);
    }
  }
  assert.deepEqual(wrong, []);
});

/**
 * Every window of the vectors that makes a key valid at no time: each
 * refused time as the key's notBefore and as its notAfter, and each
 * refused window. Each with its name and the JSON texts of its edges.
 */
function unreadableWindows() {
  const out = [];
  for (const c of V.cases.filter((c) => c.refused)) {
    for (const edge of ["notBefore", "notAfter"]) out.push({ name: `${c.name}, as ${edge}`, [edge]: JSON.stringify(c.time) });
  }
  return out.concat(V.windows.filter((w) => w.refused));
}

// An account's key list is read key by key: a key whose window does not
// read (a window the vectors hold valid at no time) is kept as listed and
// valid at no time, and costs the caller none of the other keys of the
// list: they verify, and the encryption key among them is sealed for,
// though the unreadable one is listed after it (where, valid, it would be
// chosen). The Python and Rust clients read the list alike. Go's client
// reads no key list: a Go program decoding the answer into
// []pigeon.PublicKey refuses the whole list (the vectors' refused rows).
test("time vectors: a key list holding a key whose window does not read keeps every other key: they verify and are sealed for", async () => {
  const otherKeys = keyPairFrom(new Uint8Array(32).fill(8), new Uint8Array(32).fill(108));
  const [otherSig, otherEnc] = ["sig", "enc"].map((use) => publicKeys(otherKeys).find((k) => k.use === use));
  const rows = unreadableWindows();
  assert.ok(rows.length >= 150, `${rows.length} unreadable windows`);
  const answers = new Map();
  const fetch = async (url) => new Response(answers.get(new URL(url).pathname), { status: 200, headers: { "content-type": "application/json" } });
  const cache = new KeyCache(new HttpClient("http://127.0.0.1:9", "t", { fetch }));
  const mine = signedAt("2026-12-05T10:20:30Z");
  const theirs = signMessage({ subject: "x", id: "msg_times", time: "2026-12-05T10:20:30Z", data: { n: 1 } }, otherKeys.signingKid, otherKeys.signingSeed);
  const wrong = [];
  for (const [i, w] of rows.entries()) {
    const account = `account-${i}`;
    const listed = [keyText(sigKey, w), JSON.stringify(otherSig), JSON.stringify(encKey), keyText(otherEnc, w)];
    answers.set(`/v1/accounts/${account}/keys`, `{"keys":[${listed.join(",")}]}`);
    let keyList;
    try {
      keyList = await cache.get(account);
    } catch (e) {
      wrong.push(`${w.name}: the list is refused: ${e}`);
      continue;
    }
    if (JSON.stringify(keyList) !== JSON.stringify(listed.map((k) => JSON.parse(k)))) wrong.push(`${w.name}: read as ${JSON.stringify(keyList)}`);
    if (verifies(mine, keyList)) wrong.push(`${w.name}: the unreadable key verified`);
    try {
      await cache.verify(account, theirs);
    } catch (e) {
      wrong.push(`${w.name}: the readable signing key did not verify: ${e}`);
    }
    try {
      const k = await cache.encryptionKey(account);
      if (k.kid !== encKey.kid) wrong.push(`${w.name}: sealed for ${k.kid}`);
    } catch (e) {
      wrong.push(`${w.name}: no key to seal for: ${e}`);
    }
  }
  assert.deepEqual(wrong, []);
});

/** The key k with its bytes replaced by those of `hex` (32 bytes, little-endian as listed). */
const keyBytes = (k, hex) => ({ ...k, key: b64encode(Uint8Array.from(hex.match(/../g), (b) => parseInt(b, 16))) });

// Entries of a key list that are no key: each a name and what it makes of
// a sound key (of either use). The same rows as the Python
// (tests/test_time_vectors.py) and Rust (tests/times.rs) tables. The rows
// from "kid empty" on are of the right types but hold what the server
// never lists (PublicKey.Validate refuses it) and what sealing or
// verifying with fails on.
const NO_KEYS = [
  ["kid absent", ({ kid, ...k }) => k],
  ["kid a number", (k) => ({ ...k, kid: 7 })],
  ["use an object", (k) => ({ ...k, use: { use: k.use } })],
  ["alg null", (k) => ({ ...k, alg: null })],
  ["key absent", ({ key, ...k }) => k],
  ["the entry a string, not an object", (k) => k.kid],
  ["kid empty", (k) => ({ ...k, kid: "" })],
  ["kid of 129 characters", (k) => ({ ...k, kid: "k".repeat(129) })],
  ["kid holding a space", (k) => ({ ...k, kid: `${k.kid} 2` })],
  ["kid ending in a line feed", (k) => ({ ...k, kid: `${k.kid}\n` })],
  ["kid not ASCII", (k) => ({ ...k, kid: `${k.kid}\u00e9` })],
  ["use unknown", (k) => ({ ...k, use: "signing" })],
  ["alg of the other use", (k) => ({ ...k, alg: k.use === "sig" ? "x25519" : "ed25519" })],
  ["key empty", (k) => ({ ...k, key: "" })],
  ["key of 31 bytes", (k) => ({ ...k, key: b64encode(b64decode(k.key).subarray(0, 31)) })],
  ["key of 33 bytes", (k) => ({ ...k, key: b64encode(Uint8Array.of(...b64decode(k.key), 1)) })],
  ["key padded", (k) => ({ ...k, key: `${k.key}=` })],
  ["key holding a line feed", (k) => ({ ...k, key: `${k.key.slice(0, 20)}\n${k.key.slice(20)}` })],
  ["key in standard base64", (k) => ({ ...k, key: `+/${k.key.slice(2)}` })],
  ["key whose last character has bits past the 32 bytes", (k) => ({ ...k, key: k.key.slice(0, 42) + (k.key[42] === "B" ? "C" : "B") })],
  ["key of small order (the Ed25519 identity, the X25519 u = 1)", (k) => keyBytes(k, "01" + "00".repeat(31))],
  ["key not canonical (2^255-19)", (k) => keyBytes(k, "ed" + "ff".repeat(30) + "7f")],
];

// An account's key list is read entry by entry: an entry that is no key
// (not an object; its kid, use, alg or key absent, null or not a string;
// or a key the server never lists: a kid not of 1 to 128 printable ASCII
// characters, a use other than sig with alg ed25519 or enc with alg
// x25519, a key that is not the one base64url spelling of 32 bytes, a key
// of small order or not canonical) is left out, so that nothing verifies
// with it and nothing is sealed for it, and costs the caller none of the
// other keys: they verify, and the encryption key among them is sealed
// for, though the entry is listed after it with a later notBefore (where,
// were it a key, it would be chosen). The Python and Rust clients read
// the list alike. This client refused the whole list for an entry that is
// not an object (BAD_FRAME), and kept the other entries as listed: one
// without a kid, or with an alg null, listed last was chosen to seal for,
// and sealing failed; so, later, was one of the right types whose kid was
// empty or whose key was 31 bytes. selectKey never chooses such an entry
// of a list handed to it. The entries still count towards the bound of an
// answer (MAX_ACCOUNT_KEYS): past it, the answer is refused.
test("a key list holding an entry that is no key keeps every other key: they verify and are sealed for", async () => {
  const otherKeys = keyPairFrom(new Uint8Array(32).fill(8), new Uint8Array(32).fill(108));
  const [otherSig, otherEnc] = ["sig", "enc"].map((use) => publicKeys(otherKeys).find((k) => k.use === use));
  const answers = new Map();
  const fetch = async (url) => new Response(answers.get(new URL(url).pathname), { status: 200, headers: { "content-type": "application/json" } });
  const cache = new KeyCache(new HttpClient("http://127.0.0.1:9", "t", { fetch }));
  const mine = signedAt("2026-12-05T10:20:30Z");
  const theirs = signMessage({ subject: "x", id: "msg_times", time: "2026-12-05T10:20:30Z", data: { n: 1 } }, otherKeys.signingKid, otherKeys.signingSeed);
  const wrong = [];
  for (const [i, [name, noKey]] of NO_KEYS.entries()) {
    const listed = [noKey(sigKey), otherSig, encKey, noKey({ ...otherEnc, notBefore: "2026-01-01T00:00:00Z" })];
    if (selectKey(listed, "", "enc")?.kid !== encKey.kid) wrong.push(`${name}: selectKey chose ${JSON.stringify(selectKey(listed, "", "enc"))}`);
    if (verifies(mine, listed)) wrong.push(`${name}: the entry verified (a list handed over)`);
    const account = `account-${i}`;
    answers.set(`/v1/accounts/${account}/keys`, JSON.stringify({ keys: listed }));
    let keyList;
    try {
      keyList = await cache.get(account);
    } catch (e) {
      wrong.push(`${name}: the list is refused: ${e}`);
      continue;
    }
    if (JSON.stringify(keyList) !== JSON.stringify([otherSig, encKey])) wrong.push(`${name}: read as ${JSON.stringify(keyList)}`);
    if (await cache.verify(account, mine).then(() => true, () => false)) wrong.push(`${name}: the entry verified`);
    try {
      await cache.verify(account, theirs);
    } catch (e) {
      wrong.push(`${name}: the signing key did not verify: ${e}`);
    }
    try {
      const k = await cache.encryptionKey(account);
      if (k.kid !== encKey.kid) wrong.push(`${name}: sealed for ${JSON.stringify(k)}`);
    } catch (e) {
      wrong.push(`${name}: no key to seal for: ${e}`);
    }
    // Listed past the bound, beside as many keys as make it up, the entry
    // is one too many: the answer is refused.
    const full = [...Array.from({ length: MAX_ACCOUNT_KEYS }, () => otherSig), noKey(sigKey)];
    answers.set(`/v1/accounts/${account}-past-the-bound/keys`, JSON.stringify({ keys: full }));
    const past = await cache.get(`${account}-past-the-bound`).then((ks) => `${ks.length} keys`, (e) => e);
    if (!(past instanceof PigeonError && past.code === "BAD_FRAME" && past.message.includes(`more than ${MAX_ACCOUNT_KEYS} keys`))) wrong.push(`${name}, past the bound: ${past}`);
  }
  assert.deepEqual(wrong, []);
});

// Go's SelectKey takes, without a kid, the valid key with the latest
// notBefore, an absent one and one at Go's zero time alike being that
// zero time: an instant before it (the year 0000, spelled at an offset)
// is earlier still.
test("time vectors: a window edge at Go's zero time is no bound, and ranks as an absent notBefore", () => {
  const ZERO = "0001-01-01T00:00:00Z";
  const now = Date.parse("2026-12-05T10:20:30Z");
  for (const zero of [ZERO, "0001-01-01T01:00:00+01:00", "0001-01-01T00:00:00.000000000-00:00"]) {
    assert.equal(selectKey([{ ...encKey, notAfter: zero }], "", "enc", now)?.kid, encKey.kid, `notAfter ${zero}: sealed for`);
    assert.ok(verifies(signedAt("2026-12-05T10:20:30Z"), [{ ...sigKey, notAfter: zero }]), `notAfter ${zero}: verified`);
    // A message time before the zero instant: a notBefore there is no bound either.
    assert.ok(verifies(signedAt("0001-01-01T00:30:00+01:00"), [{ ...sigKey, notBefore: zero }]), `notBefore ${zero}: verified`);
  }
  // A notAfter a nanosecond past the zero time does close the key.
  assert.ok(!verifies(signedAt("2026-12-05T10:20:30Z"), [{ ...sigKey, notAfter: "0001-01-01T00:00:00.000000001Z" }]));
  const other = publicKeys(keyPairFrom(new Uint8Array(32).fill(8), new Uint8Array(32).fill(108))).find((k) => k.use === "enc");
  const before = { ...other, notBefore: "0001-01-01T00:30:00+01:00" };
  for (const open of [encKey, { ...encKey, notBefore: null }, { ...encKey, notBefore: ZERO }]) {
    assert.equal(selectKey([open, before], "", "enc", now)?.kid, encKey.kid, `${open.notBefore} then the year 0000`);
    assert.equal(selectKey([before, open], "", "enc", now)?.kid, encKey.kid, `the year 0000 then ${open.notBefore}`);
  }
  // Among equals the last listed, as Go.
  const zeroOther = { ...other, notBefore: ZERO };
  assert.equal(selectKey([encKey, zeroOther], "", "enc", now)?.kid, other.kid);
  assert.equal(selectKey([zeroOther, encKey], "", "enc", now)?.kid, encKey.kid);
});
