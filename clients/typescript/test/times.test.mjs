// Times the server sends are read as the Go client and the broker read
// them: RFC 3339 proper, the syntax of pigeon's parseRFC3339
// (signature.go). Date.parse took forms that are no RFC 3339 ("Dec 5
// 2026", "2026-12-05", a time without an offset, read as local time) and
// read others otherwise than Go (30 February as 1 March, 24:00 as the next
// day), so a signing key's window was read differently by TypeScript and
// by Go: a signature verified here with a key Go never finds valid. A key
// whose window is not RFC 3339 is now valid at no time, a contract whose
// issuedAt or expiresAt is not is refused, and a message time is read to
// the nanosecond, as Go's PublicKey.ValidAt reads a window. Each test
// failed before the fix but the table's accepted rows.
import assert from "node:assert/strict";
import { test } from "node:test";
import { generateKeys, HttpClient, PigeonError, publicKeys, selectKey, signMessage, verifyAndOpen, verifyMessageWithKeys } from "../dist/index.js";
import { parseTime } from "../dist/times.js";
import { onSession, rawServer } from "./harness.mjs";

// Each spelling, and Go's reading of it (the broker's and Go client's
// parseRFC3339, then time.Parse(time.RFC3339Nano), truncated to the
// millisecond: t.Truncate(time.Millisecond).UnixMilli()); null: Go refuses
// it (SIGNATURE_INVALID, ENVELOPE_INVALID). The values were taken from Go
// 1.26 (TestSignatureTimeIsRFC3339 holds the broker to the same syntax).
const GO = [
  ["2026-12-05T10:20:30Z", 1796466030000],
  ["2026-12-05T10:20:30.1Z", 1796466030100],
  ["2026-12-05T10:20:30.123456789Z", 1796466030123],
  ["2026-12-05T10:20:30.1234567891Z", 1796466030123], // Go keeps nine digits and drops the rest
  ["2026-12-05T10:20:30.123456789123456Z", 1796466030123],
  ["2026-12-05T10:20:30.999999Z", 1796466030999], // truncated, never rounded
  ["2026-12-05T10:20:30+01:00", 1796462430000],
  ["2026-12-05T10:20:30-23:59", 1796552370000],
  ["2026-12-05T10:20:30.000+00:00", 1796466030000],
  ["2026-12-05T10:20:30-00:00", 1796466030000],
  ["2026-12-05T10:20:30.5+01:00", 1796462430500],
  ["2024-02-29T00:00:00Z", 1709164800000], // a leap year
  ["2000-02-29T00:00:00Z", 951782400000], // a fourth century is one
  ["0001-01-01T00:00:00Z", -62135596800000], // years 0001 to 0099 are not 1901 to 1999 (Date.UTC)
  ["0099-03-01T00:00:00Z", -59037897600000],
  ["9999-12-31T23:59:59.999Z", 253402300799999],
  ["1969-12-31T23:59:59.9995Z", -1], // truncated toward the past, as Go's Truncate
  ["1970-01-01T00:00:00.0005Z", 0],
  ["2026-12-05t10:20:30Z", null], // Go takes upper-case T and Z only
  ["2026-12-05T10:20:30z", null],
  ["2026-12-05 10:20:30Z", null],
  ["2026-12-05T10:20:30+24:00", null], // time.Parse alone takes these four; the broker does not
  ["2026-12-05T10:20:30+00:60", null],
  ["2026-12-05T10:20:30,5Z", null],
  ["2026-12-05T1:20:30Z", null],
  ["2026-12-05T10:20:30+0100", null],
  ["2026-12-05T10:20:30+1:00", null],
  ["2026-12-05T10:20:30+01:0a", null],
  ["2026-12-05T10:20:30.Z", null],
  ["2026-12-05T10:20:30.+01:00", null],
  ["2026-12-05T10:20:30.1e3Z", null],
  ["2026-12-05T10:20Z", null],
  ["2026-12-05T10:20:30", null], // no offset: Date.parse read it as local time
  ["2026-12-05", null],
  ["Dec 5 2026", null],
  ["2026-12-05T24:00:00Z", null], // Date.parse: the next day
  ["2026-12-05T23:60:00Z", null],
  ["2026-12-05T23:59:60Z", null], // no leap second
  ["2026-13-05T10:20:30Z", null],
  ["2026-00-05T10:20:30Z", null],
  ["2026-12-00T10:20:30Z", null],
  ["2026-12-32T10:20:30Z", null],
  ["2026-04-31T10:20:30Z", null], // Date.parse: 1 May
  ["2026-02-29T00:00:00Z", null], // not a leap year; Date.parse: 1 March
  ["1900-02-29T00:00:00Z", null], // a century is not
  ["0000-01-01T00:00:00Z", null], // year 0000: the broker refuses it
  ["0000-02-29T00:00:00Z", null],
  ["+2026-12-05T10:20:30Z", null],
  ["+002026-12-05T10:20:30Z", null],
  ["12026-12-05T10:20:30Z", null],
  ["2026-1-05T10:20:30Z", null],
  [" 2026-12-05T10:20:30Z", null],
  ["2026-12-05T10:20:30Z ", null],
  ["\uff12026-12-05T10:20:30Z", null], // a fullwidth digit
  ["2026-12-05T10:20:30ZZ", null],
  ["", null],
];

test("a time is read as Go reads it: RFC 3339 proper, to the millisecond, or not at all", () => {
  const wrong = [];
  for (const [s, want] of GO) {
    const got = parseTime(s);
    if (want === null ? !Number.isNaN(got) : got !== want) wrong.push(`${JSON.stringify(s)}: ${got}, Go: ${want ?? "refused"}`);
  }
  for (const x of [undefined, null, 1796466030000, {}, ["2026-12-05T10:20:30Z"]]) {
    if (!Number.isNaN(parseTime(x))) wrong.push(`${JSON.stringify(x)} is no time`);
  }
  assert.deepEqual(wrong, []);
});

const keys = generateKeys();
const sigKey = publicKeys(keys).find((k) => k.use === "sig");
const encKey = publicKeys(keys).find((k) => k.use === "enc");
const TIME = "2026-12-05T10:20:30Z";
const signed = (time = TIME) => signMessage({ id: "msg_t", subject: "x", time, data: { n: 1 } }, keys.signingKid, keys.signingSeed);

// Window edges Date.parse read as an instant before TIME (notBefore) or
// after it (notAfter), so that the key verified; Go reads none of them.
const LOOSE_BEFORE = ["Dec 5 2020", "2020-12-05", "2020-12-05T00:00:00", "2020-12-05t00:00:00z", "2020-12-05 00:00:00Z", "+002020-12-05T00:00:00Z", "2020-12-05T00:00Z", "2020-02-30T00:00:00Z", "0000-01-01T00:00:00Z"];
const LOOSE_AFTER = ["Dec 5 2099", "2099-12-05", "2099-12-05T00:00:00", "2099-12-05t00:00:00z", "2099-02-30T00:00:00Z", "2099-12-05T24:00:00Z"];

test("a signing key whose window is not RFC 3339 verifies nothing: it is valid at no time, as Go reads no such window", () => {
  const wrong = [];
  const m = signed();
  for (const [edge, spellings] of [["notBefore", LOOSE_BEFORE], ["notAfter", LOOSE_AFTER]]) {
    for (const s of spellings) {
      const k = { ...sigKey, [edge]: s };
      if (selectKey([k], k.kid, "sig", Date.parse(TIME)) !== undefined) wrong.push(`${edge} ${s}: selected`);
      try {
        verifyMessageWithKeys(m, [k]);
        wrong.push(`${edge} ${s}: verified`);
      } catch (e) {
        if (!(e instanceof PigeonError && e.code === "SIGNATURE_INVALID")) wrong.push(`${edge} ${s}: ${e}`);
      }
      // Nor is anything sealed for an encryption key so spelled.
      if (selectKey([{ ...encKey, [edge]: s }], "", "enc", Date.parse(TIME)) !== undefined) wrong.push(`${edge} ${s}: sealed for`);
    }
  }
  // A window of another type is no window either.
  for (const v of [1607126400000, true, {}, []]) {
    if (selectKey([{ ...sigKey, notBefore: v }], sigKey.kid, "sig", Date.parse(TIME)) !== undefined) wrong.push(`notBefore ${JSON.stringify(v)}: selected`);
  }
  assert.deepEqual(wrong, []);
  // The same windows spelled as RFC 3339 verify; absent or null is no bound, empty is no window.
  verifyMessageWithKeys(m, [{ ...sigKey, notBefore: "2020-12-05T00:00:00Z", notAfter: "2099-12-05T00:00:00+01:00" }]);
  verifyMessageWithKeys(m, [{ ...sigKey, notBefore: null, notAfter: undefined }]);
  assert.throws(() => verifyMessageWithKeys(m, [{ ...sigKey, notBefore: null, notAfter: "" }]), (e) => e.code === "SIGNATURE_INVALID");
  verifyMessageWithKeys(m, [{ ...sigKey, notBefore: "2026-12-05T10:20:30Z" }]);
  assert.throws(() => verifyMessageWithKeys(m, [{ ...sigKey, notAfter: "2026-12-05T10:20:30Z" }]), (e) => e.code === "SIGNATURE_INVALID");
});

test("with a valid key and one whose window is unreadable, only the valid one is chosen", () => {
  const other = generateKeys();
  const loose = { ...publicKeys(other).find((k) => k.use === "enc"), notBefore: "2026-01-01" };
  const good = { ...encKey, notBefore: "2025-01-01T00:00:00Z" };
  // Date.parse put the loose key's notBefore later: it was the newest, chosen to seal for.
  assert.equal(selectKey([good, loose], "", "enc", Date.parse(TIME))?.kid, good.kid);
});

// Go's PublicKey.ValidAt holds a window at every precision the clients
// read times: notBefore to the nanosecond, notAfter to the millisecond
// (Go: a key whose notBefore is ...00.0005Z is not valid at ...00.0003Z,
// nor one whose notAfter is ...00.0005Z at ...00.0001Z).
test("a key's window holds a message time read to the nanosecond, as Go's ValidAt", () => {
  const at = (frac) => `2026-01-01T00:00:00.${frac}Z`;
  const rows = [
    // [notBefore, notAfter, message time, valid in Go]
    [at("0005"), undefined, at("0003"), false],
    [at("0005"), undefined, at("0005"), true],
    [at("0005"), undefined, at("0009"), true],
    [at("0001234"), undefined, at("0001233"), false],
    [at("0001234"), undefined, at("0001234"), true],
    [undefined, at("0005"), at("0001"), false],
    [undefined, at("001"), at("0009"), true],
    [undefined, at("001"), at("001"), false],
  ];
  const wrong = [];
  for (const [notBefore, notAfter, time, want] of rows) {
    const k = { ...sigKey, notBefore, notAfter };
    let got = true;
    try {
      verifyMessageWithKeys(signed(time), [k]);
    } catch (e) {
      if (!(e instanceof PigeonError && e.code === "SIGNATURE_INVALID")) throw e;
      got = false;
    }
    if (got !== want) wrong.push(`${notBefore ?? "-"} ${notAfter ?? "-"} at ${time}: ${got}, Go: ${want}`);
  }
  assert.deepEqual(wrong, []);
});

test("a message time that is not RFC 3339 as Go reads it is not signed, and does not verify", () => {
  for (const time of ["2026-12-05t10:20:30z", "2026-02-30T00:00:00Z", "2026-12-05T24:00:00Z", "0000-01-01T00:00:00Z", "2026-12-05T10:20:30"]) {
    assert.throws(() => signed(time), (e) => e instanceof PigeonError && e.code === "ENVELOPE_INVALID", time);
    const m = { ...signed(), time };
    assert.throws(() => verifyMessageWithKeys(m, [sigKey]), (e) => e instanceof PigeonError && e.code === "SIGNATURE_INVALID", time);
    assert.throws(() => verifyAndOpen(m, [sigKey], keys), (e) => e instanceof PigeonError && e.code === "SIGNATURE_INVALID", time);
  }
});

test("a contract whose issuedAt or expiresAt is not RFC 3339 as Go reads it is refused, BAD_FRAME", async () => {
  const base = { id: "ctr_t", principal: "p", subjects: [{ name: "x", operations: ["publish"] }], region: "uk", issuedAt: "2026-01-01T00:00:00Z", expiresAt: "2099-01-01T00:00:00Z" };
  for (const [member, spelling] of [["expiresAt", "2099-01-01"], ["expiresAt", "Jan 1 2099"], ["expiresAt", "2099-02-30T00:00:00Z"], ["issuedAt", "2026-01-01T00:00:00"], ["issuedAt", "2026-01-01t00:00:00z"]]) {
    const contract = { ...base, [member]: spelling };
    const srv = await rawServer(() => {}, { contract: () => contract });
    await assert.rejects(
      onSession(srv, { reconnect: false, pingIntervalMs: 0 }, async () => {}),
      (e) => e instanceof PigeonError && e.code === "BAD_FRAME",
      `${member} ${spelling}`,
    );
    const h = new HttpClient("http://127.0.0.1:9", "t", { fetch: async () => new Response(JSON.stringify({ contract }), { status: 201 }) });
    await assert.rejects(h.connect(["x"]), (e) => e instanceof PigeonError && e.code === "BAD_FRAME", `HTTP ${member} ${spelling}`);
  }
});
