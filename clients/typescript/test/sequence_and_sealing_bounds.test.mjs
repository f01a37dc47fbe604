// The TypeScript client and sequences beyond 2^53, an unknown sealed alg
// in an error message, and sealing to a key the recipient removed. Each test failed before its fix.
import assert from "node:assert/strict";
import { test } from "node:test";
import { generateKeys, HttpClient, KeyCache, open, PigeonError, publicKeys, SEAL_MAX_AGE_MS, seal } from "../dist/index.js";
import { ok, onSession, RAW_CONTRACT, subscribingServer, until } from "./harness.mjs";

const OPTS = { reconnect: false, pingIntervalMs: 0 };
// 2^53 + 1: JSON.parse reads it as 2^53, the sequence of another message.
const BIG = "9007199254740993";
const deliverText = (id, seq) => `{"op":"deliver","sub":"sub_1","attempt":1,"message":{"id":"${id}","subject":"x","sequence":${seq},"data":{}}}`;

test("a delivery whose sequence is beyond 2^53-1 is refused, never answered without it", async () => {
  const frames = [];
  const errors = [];
  const handled = [];
  const { srv, socket } = await subscribingServer((ws, f) => {
    frames.push(f);
    ok(ws, f);
  });
  await onSession(srv, { ...OPTS, onError: (e) => errors.push(e) }, async (s) => {
    await s.subscribe("x", async (m) => void handled.push(m.id));
    socket().send(deliverText("msg_big", BIG));
    socket().send(`{"op":"deliver_batch","sub":"sub_1","deliveries":[{"attempt":1,"message":{"id":"msg_big2","subject":"x","sequence":18446744073709551615,"data":{}}},{"attempt":1,"message":{"id":"msg_small","subject":"x","sequence":${2 ** 53 - 1},"data":{}}}]}`);
    await until(() => frames.some((f) => f.op === "ack"), 2000, "the ack of msg_small");
    await new Promise((r) => setTimeout(r, 50));
  });
  assert.deepEqual(handled, ["msg_small"], "the deliveries with a sequence the client cannot hold are not handed over");
  const acks = frames.filter((f) => f.op === "ack" || f.op === "nack");
  assert.deepEqual(acks.map(({ id, ...f }) => f), [{ op: "ack", sub: "sub_1", messageId: "msg_small", sequence: 2 ** 53 - 1 }], "nothing answers the refused ones");
  const bad = errors.filter((e) => e.code === "BAD_FRAME");
  assert.equal(bad.length, 2, errors.map(String).join("; "));
  for (const e of bad) assert.match(e.message, /2\^53-1/);
});

test("a pull answer to a message whose sequence JSON.parse rounded is refused, not sent without the sequence", async () => {
  const frames = [];
  const { srv } = await subscribingServer((ws, f) => {
    frames.push(f);
    if (f.op === "receive") ws.send(`{"op":"messages","re":"${f.id}","messages":[{"id":"msg_big","subject":"x","sequence":${BIG},"data":{}}]}`);
    else ok(ws, f);
  });
  const errors = [];
  await onSession(srv, { ...OPTS, onError: (e) => errors.push(e) }, async (s) => {
    // The pull leaves it out (test/pulled_message_checks.test.mjs); a message held from
    // elsewhere with such a sequence is still refused by ack and nack.
    assert.deepEqual(await s.receive("x", { max: 1 }), []);
    assert.deepEqual(errors.map((e) => [e.code, e.details.messageId]), [["BAD_FRAME", "msg_big"]]);
    const m = JSON.parse(`{"id":"msg_big","subject":"x","sequence":${BIG},"data":{}}`);
    await assert.rejects(s.ack("x", m), (e) => e instanceof PigeonError && e.code === "INVALID_ARGUMENT");
    await assert.rejects(s.nack("x", m), (e) => e instanceof PigeonError && e.code === "INVALID_ARGUMENT");
    // The id alone is the caller's explicit choice.
    await s.ack("x", m.id);
  });
  assert.deepEqual(
    frames.filter((f) => f.op !== "receive").map(({ id, ...f }) => f),
    [{ op: "ack", subject: "x", messageId: "msg_big" }],
  );

  const bodies = [];
  const fetch = async (url, init) => {
    bodies.push(init.body);
    return new Response("{}", { status: 200, headers: { "content-type": "application/json" } });
  };
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch });
  h.contract = RAW_CONTRACT;
  const m = JSON.parse(`{"id":"msg_big","sequence":${BIG}}`);
  await assert.rejects(h.ack("x", m), (e) => e.code === "INVALID_ARGUMENT");
  await assert.rejects(h.nack("x", m, { delayMs: 0 }), (e) => e.code === "INVALID_ARGUMENT");
  assert.deepEqual(bodies, [], "nothing sent");
});

test("an unknown sealed alg is not echoed into the error message", () => {
  const alice = generateKeys();
  const bob = generateKeys();
  const s = seal(new TextEncoder().encode("hi"), bob.encryptionKid, bob.encryptionPublic, alice.signingKid, alice.signingSeed);
  const alg = `\u001b[2J\nforged log line ${"A".repeat(1 << 20)}`;
  assert.throws(
    () => open({ ...s, alg }, bob.encryptionPrivate, alice.signingPublic),
    (e) => e.code === "SEAL_UNSUPPORTED" && e.message.length < 100 && !e.message.includes("forged") && !e.message.includes("\u001b"),
  );
});

/** An HttpClient whose GET /v1/accounts/{id}/keys answers `lists()` (counted in `fetches`). */
function keyServer(lists) {
  const state = { fetches: 0 };
  const fetch = async () => {
    state.fetches++;
    return new Response(JSON.stringify({ keys: lists() }), { status: 200, headers: { "content-type": "application/json" } });
  };
  return { http: new HttpClient("http://127.0.0.1:9", "t", { fetch }), state };
}

/** Polls cache.encryptionKey("bob") until its kid is want (at most 5 s); the last kid or error code. */
async function sealsFor(cache, want) {
  const deadline = Date.now() + 5000;
  for (;;) {
    const kid = await cache.encryptionKey("bob").then((k) => k.kid, (e) => e.code);
    if (kid === want || Date.now() >= deadline) return kid;
    await new Promise((r) => setTimeout(r, 20));
  }
}

const encKey = (k, over = {}) => ({ ...publicKeys(k).find((p) => p.use === "enc"), ...over });

test("sealing through a KeyCache stops using a removed key past the sealing bound, whatever the ttl", async () => {
  assert.equal(SEAL_MAX_AGE_MS, 10_000);
  const [old, fresh] = [generateKeys(), generateKeys()];
  let list = [encKey(old)];
  const { http, state } = keyServer(() => list);
  const cache = new KeyCache(http, 3_600_000, 100);
  assert.equal((await cache.encryptionKey("bob")).kid, old.encryptionKid);
  assert.equal((await cache.get("bob"))[0].kid, old.encryptionKid, "get shares the cached list");
  assert.equal(state.fetches, 1);
  list = [encKey(fresh)]; // the old private key leaked: bob lists only the new one
  assert.equal(await sealsFor(cache, fresh.encryptionKid), fresh.encryptionKid, "still sealing for the removed key");
});

test("a cached encryption key past its window makes the KeyCache read the list again", async () => {
  const [old, fresh] = [generateKeys(), generateKeys()];
  const at = new Date(Date.now() + 300).toISOString();
  let list = [encKey(old, { notAfter: at })];
  const { http } = keyServer(() => list);
  const cache = new KeyCache(http, 3_600_000, 3_600_000); // only the window can tell
  assert.equal((await cache.encryptionKey("bob")).kid, old.encryptionKid);
  list = [encKey(old, { notAfter: at }), encKey(fresh, { notBefore: at })]; // the rotation, after the read
  assert.equal(await sealsFor(cache, fresh.encryptionKid), fresh.encryptionKid, "the cached key's window passed and the list was not read again");
  list = [];
  const empty = new KeyCache(keyServer(() => list).http);
  await assert.rejects(empty.encryptionKey("bob"), (e) => e instanceof PigeonError && e.code === "INVALID_ARGUMENT");
});
