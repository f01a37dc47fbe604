// The answer of GET /v1/accounts/{id}/keys, read as every client reads it
// (docs/protocol.md, "Published keys"): the server always answers 200 with
// an object whose `keys` is a list, `{"keys":[]}` for an account without
// keys and for an id that names no account. Any other answer is not the
// server's, and is refused, BAD_FRAME, rather than read as no keys: `keys`
// null or absent, a bare list, a number, an empty body. This client read
// `{"keys":null}`, `{}` and an empty body as no keys, where the Rust client
// refused the first and read the others as no keys. The Python
// (tests/test_key_lists.py) and Rust (tests/key_lists.rs) clients hold the
// same table. The entries of the list are read one by one
// (time_vectors.test.mjs holds the table of entries that are no key).
import assert from "node:assert/strict";
import { test } from "node:test";
import { HttpClient, keyPairFrom, PigeonError, publicKeys } from "../dist/index.js";

const [K1, K2] = publicKeys(keyPairFrom(new Uint8Array(32).fill(7), new Uint8Array(32).fill(107), { signingKid: "k1", encryptionKid: "k2" }));

// Each answer: its name, HTTP status, body (`K1` and `K2` stand for two
// sound keys, of the kids k1 and k2), and the kids read (undefined:
// refused, BAD_FRAME).
const ANSWERS = [
  ["the documented object", 200, `{"keys":[K1,K2]}`, ["k1", "k2"]],
  ["an empty list", 200, `{"keys":[]}`, []],
  ["a member beside keys", 200, `{"keys":[K1],"note":"x"}`, ["k1"]],
  ["keys null", 200, `{"keys":null}`, undefined],
  ["keys absent", 200, `{}`, undefined],
  ["keys a string", 200, `{"keys":"k1"}`, undefined],
  ["keys an object", 200, `{"keys":K1}`, undefined],
  ["keys a number", 200, `{"keys":7}`, undefined],
  ["keys true", 200, `{"keys":true}`, undefined],
  ["a bare list", 200, `[K1]`, undefined],
  ["a bare empty list", 200, `[]`, undefined],
  ["a number", 200, `7`, undefined],
  ["null", 200, `null`, undefined],
  ["a string", 200, `"keys"`, undefined],
  ["an empty body", 200, ``, undefined],
  ["a body of white space", 200, ` \r\n`, undefined],
  ["no body, 204", 204, ``, undefined],
  ["not JSON", 200, `<html>keys</html>`, undefined],
];

test("a keys answer is read only as the object the server sends, and refused BAD_FRAME in any other shape", async () => {
  const wrong = [];
  for (const [name, status, template, want] of ANSWERS) {
    const text = template.replace("K1", JSON.stringify(K1)).replace("K2", JSON.stringify(K2));
    const fetch = async () => new Response(status === 204 ? null : text, { status, headers: { "content-type": "application/json" } });
    const h = new HttpClient("http://127.0.0.1:9", "t", { fetch });
    const got = await h.fetchKeys("acct").then(
      (ks) => ks.map((k) => k.kid),
      (e) => (e instanceof PigeonError && e.code === "BAD_FRAME" ? undefined : `${e.code}: ${e.message}`),
    );
    if (JSON.stringify(got) !== JSON.stringify(want)) wrong.push(`${name}: ${JSON.stringify(got) ?? "refused"}`);
  }
  assert.deepEqual(wrong, []);
});
