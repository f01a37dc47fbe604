// A signature's "v" spelled as a non-integer number (2.0, 2e0) names no
// signing form, and a sealed payload's "v" spelled 1.0 or 1e0 opens
// nothing, as the Go, Python and Rust clients refuse them: the reader finds
// the spelling in the text, wherever the frame or answer puts the message
// and however the text spells the member names. JSON.parse reads
// "\u0076" as "v"; the regular expression the reader ran over the text
// looked for "v" alone, so a name spelled with an escape slipped past and
// the signature verified as the second form. Each case failed before the
// fix.
import assert from "node:assert/strict";
import { test } from "node:test";
import { generateKeys, HttpClient, PigeonError, signMessage, verifyMessage } from "../dist/index.js";
import { markSpelledIntegers } from "../dist/sigv.js";
import { onSession, RAW_CONTRACT, subscribingServer, until } from "./harness.mjs";

const json = JSON.stringify;

// Each place a frame or an answer holds a message (M), and how to find it in the parsed text.
const PLACES = [
  ["deliver", (m) => `{"op":"deliver","sub":"sub_1","attempt":1,"message":${m}}`, (f) => f.message],
  ["deliver_batch", (m) => `{"op":"deliver_batch","sub":"sub_1","deliveries":[{"attempt":1,"message":${m}}]}`, (f) => f.deliveries[0].message],
  ["messages frame", (m) => `{"op":"messages","re":"1","messages":[${message("2", "2", "1")},${m}],"attempts":[1,1]}`, (f) => f.messages[1]],
  ["HTTP receive", (m) => `{"messages":[${m}],"attempts":[1]}`, (f) => f.messages[0]],
  ["decisions", (m) => `{"op":"decisions","re":"1","results":[{"status":"accepted","message":${m}}]}`, (f) => f.results[0].message],
  ["reply", (m) => `{"op":"reply","re":"1","message":${m}}`, (f) => f.message],
];

// Each spelling of the member names: the signature's and the sealed
// payload's "v", and the "signature" and "sealed" around them.
const NAMES = [
  ["plain", { v: '"v"', signature: '"signature"', sealed: '"sealed"' }],
  ["v escaped", { v: '"\\u0076"', signature: '"signature"', sealed: '"sealed"' }],
  ["v escaped, spaced", { v: ' "\\u0076" ', signature: '"signature"', sealed: '"sealed"' }],
  ["every name escaped", { v: '"\\u0076"', signature: '"\\u0073ignatur\\u0065"', sealed: '"s\\u0065aled"' }],
];

/** A message whose signature's v is spelled sig, sealed payload's v sealed, data's own v data (names as spelled by n). */
function message(sig, sealed, data, n = NAMES[0][1]) {
  return `{"id":"msg_1","subject":"x","sequence":1,"data":{"v":${data},${n.sealed}:{${n.v}:${sealed},"alg":"a"}},${n.signature}:{"kid":"k","alg":"ed25519","sig":"s",${n.v}:${sig}}}`;
}

test('a signature\'s or a sealed payload\'s "v" spelled as a non-integer number is found wherever the text puts it, however it spells the names', () => {
  const wrong = [];
  for (const [place, frame, find] of PLACES) {
    for (const [naming, n] of NAMES) {
      for (const [sig, sealed] of [["2.0", "1.0"], ["2e0", "1e0"], ["20E-1", "10e-1"], ["2", "1"]]) {
        const text = frame(message(sig, sealed, "2.0", n));
        const parsed = JSON.parse(text);
        markSpelledIntegers(text, parsed);
        const m = find(parsed);
        // An integer spelled as one stays the number; any other spelling is kept as text.
        const want = { sig: sig.length === 1 ? 2 : sig, sealed: sealed.length === 1 ? 1 : sealed, data: 2 };
        const got = { sig: m.signature.v, sealed: m.data.sealed.v, data: m.data.v };
        if (json(got) !== json(want)) wrong.push(`${place}, ${naming}, ${sig}: ${json(got)}`);
        if (place === "messages frame" && parsed.messages[0].signature.v !== 2) wrong.push(`${place}, ${naming}: the other message`);
      }
    }
  }
  assert.deepEqual(wrong, []);
});

const keys = generateKeys();
/** A signed message (second form) as text, its signature's "v" spelled with an escaped name and `spelling`. */
const signedText = (i, spelling) =>
  json(signMessage({ id: `msg_${i}`, subject: "x", sequence: i, data: { n: i } }, keys.signingKid, keys.signingSeed)).replace('"v":2}', `"\\u0076":${spelling}}`);

// A message holding such a signature is no message the broker sends: it is
// refused alone, BAD_FRAME (see test/message_shapes.test.mjs), the others
// handed over. Before, it was handed over with "v" as its spelling (which
// does not verify).
const refused = (e, id) => e instanceof PigeonError && e.code === "BAD_FRAME" && e.details.member === "signature.v" && e.details.messageId === id;

test('an HTTP receive refuses alone a message whose signature\'s "v" an escaped name spells 2.0', async () => {
  const fetch = async () => new Response(`{"messages":[${signedText(1, "2.0")},${signedText(2, "2")}],"attempts":[1,1]}`, { status: 200 });
  const errors = [];
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch, onError: (e) => errors.push(e) });
  h.contract = RAW_CONTRACT;
  const got = await h.receive("x", { ack: "explicit" });
  assert.deepEqual(got.map((m) => m.id), ["msg_2"]);
  assert.ok(errors.length === 1 && refused(errors[0], "msg_1"), String(errors));
  verifyMessage(got[0], keys.signingPublic);
});

test('a delivery whose signature\'s "v" an escaped name spells 2e0 is refused alone', async () => {
  const { srv, socket } = await subscribingServer();
  const errors = [];
  await onSession(srv, { reconnect: false, pingIntervalMs: 0, onError: (e) => errors.push(e) }, async (s) => {
    const got = [];
    await s.subscribe("x", async (m) => void got.push(m), { maxInFlight: 10 });
    socket().send(`{"op":"deliver","sub":"sub_1","attempt":1,"message":${signedText(1, "2e0")}}`);
    socket().send(`{"op":"deliver","sub":"sub_1","attempt":1,"message":${signedText(2, "2")}}`);
    await until(() => got.length === 1 && errors.length === 1, 2000, "the deliveries");
    assert.ok(refused(errors[0], "msg_1"), String(errors));
    assert.equal(got[0].id, "msg_2");
    verifyMessage(got[0], keys.signingPublic);
  });
});
