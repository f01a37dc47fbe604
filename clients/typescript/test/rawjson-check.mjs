// Run by unit.test.mjs in a Node with JSON.rawJSON (Node 20 needs
// --harmony-json-parse-with-source): a raw JSON number is signed as the
// value JSON.stringify sends, and refused when the canonical form would
// change that value, as the broker refuses it.
import assert from "node:assert/strict";
import { canonicalize, signMessage, verifyMessage, keyPairFrom, PigeonError } from "../dist/index.js";

assert.equal(typeof JSON.rawJSON, "function", "this runtime has no JSON.rawJSON");
const k = keyPairFrom(new Uint8Array(32).fill(1), new Uint8Array(32).fill(2));
const base = { subject: "chat.messages", id: "msg_raw_1", time: "2026-11-29T12:00:00Z" };
const invalid = (e) => e instanceof PigeonError && e.code === "ENVELOPE_INVALID";

for (const text of ["9007199254740993", "-9007199254740993", "1234567890123456789", "0.10000000000000001", "1e-400", "-1e-400", "12345678901234567168"]) {
  const data = { n: JSON.rawJSON(text) };
  assert.equal(JSON.stringify(data), `{"n":${text}}`, "sent as its text");
  assert.throws(() => canonicalize(data), invalid, text);
  assert.throws(() => signMessage({ ...base, data }, k.signingKid, k.signingSeed), invalid, text);
  // The signature made over the rounded value does not verify the raw one.
  const rounded = signMessage({ ...base, data: { n: Number(text) } }, k.signingKid, k.signingSeed);
  assert.throws(() => verifyMessage({ ...rounded, data }, k.signingPublic), (e) => e.code === "SIGNATURE_INVALID", text);
}
// A raw value whose value the canonical form keeps is signed as that value,
// not as an object with a rawJSON member.
for (const [text, want] of [["9007199254740992", "9007199254740992"], ["12345678901234567000", "12345678901234567000"], ["1.0", "1"], ["1e2", "100"], ['"s"', '"s"'], ["true", "true"], ["null", "null"]]) {
  assert.equal(canonicalize({ n: JSON.rawJSON(text) }), `{"n":${want}}`, text);
  const m = signMessage({ ...base, data: { n: JSON.rawJSON(text) } }, k.signingKid, k.signingSeed);
  verifyMessage({ ...m, data: JSON.parse(JSON.stringify(m.data)) }, k.signingPublic);
}
console.log("rawJSON ok");
