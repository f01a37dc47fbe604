// Verification through a KeyCache bounded as sealing is (a removed signing
// key stops verifying once the cached list is older than VERIFY_MAX_AGE_MS,
// whatever the ttl), and the resume bookkeeping of a handled delivery whose
// ack was refused or never answered (the same in every client: handled, so
// not asked for again).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connect, generateKeys, HttpClient, KeyCache, PigeonError, publicKeys, signMessage, VERIFY_MAX_AGE_MS } from "../dist/index.js";
import { rawServer, Server, until } from "./harness.mjs";

const BOB = "spiffe://conformance/ns/chat/sa/bob";
let srv;
before(async () => {
  srv = await Server.start();
  await new HttpClient(srv.http, "admin-token").createAccount(BOB, { ifMissing: true });
});
after(async () => srv?.stop());

const sigKey = (k) => publicKeys(k).find((p) => p.use === "sig");
const signed = (k) => signMessage({ subject: "chat.messages", id: "msg_v", time: new Date().toISOString(), data: { text: "hi" } }, k.signingKid, k.signingSeed);

/** Polls cache.verify(BOB, m) until it fails (at most 10 s): the error code, or "verified". */
async function verifiesUntilRefused(cache, m) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const got = await cache.verify(BOB, m).then(() => "verified", (e) => (e instanceof PigeonError ? e.code : String(e)));
    if (got !== "verified" || Date.now() >= deadline) return got;
    await new Promise((r) => setTimeout(r, 20));
  }
}

test("a removed signing key stops verifying through a KeyCache past the verification bound, whatever the ttl", async () => {
  assert.equal(VERIFY_MAX_AGE_MS, 10_000);
  const bob = new HttpClient(srv.http, "bob-token");
  const [old, fresh] = [generateKeys(), generateKeys()];
  await bob.publishKeys(BOB, [sigKey(old)]);
  // A cache kept an hour, verifying with lists at most 100 ms old.
  const cache = new KeyCache(new HttpClient(srv.http, "alice-token"), 3_600_000, 10_000, 100);
  const m = signed(old);
  await cache.verify(BOB, m);
  assert.equal((await cache.get(BOB))[0].kid, old.signingKid, "get keeps the list for its ttl");
  await bob.publishKeys(BOB, [sigKey(fresh)]); // the old private key leaked: bob lists only the new one
  assert.equal(await verifiesUntilRefused(cache, m), "SIGNATURE_INVALID", "a signature of the removed key still verifies");
  await cache.verify(BOB, signed(fresh));
  await assert.rejects(cache.verify(BOB, { ...m, signature: undefined }), (e) => e.code === "SIGNATURE_REQUIRED");
});

/**
 * A subscription whose first connection delivers msg_5 and then msg_6 and
 * answers their acks by `how` ("refused": msg_5's ack refused
 * ACK_NOT_ALLOWED, msg_6's taken, then the connection dropped;
 * "unanswered": msg_5's ack never answered, the connection dropped when it
 * comes): the `start` the resumed subscribe asks for.
 */
async function resumeStart(how) {
  const starts = [];
  let sock;
  const send = (f) => sock.send(JSON.stringify(f));
  const deliver = (seq) => send({ op: "deliver", sub: "sub_1", attempt: 1, message: { id: `msg_${seq}`, subject: "x", sequence: seq, data: {} } });
  const raw = await rawServer((ws, f, n) => {
    sock = ws;
    if (f.op === "subscribe") {
      starts.push(f.start ?? null);
      ws.send(JSON.stringify({ op: "subscribed", re: f.id, sub: "sub_1", from: 1 }));
      if (n === 1) deliver(5);
    } else if (f.op === "ack" && n === 1 && f.messageId === "msg_5") {
      if (how === "unanswered") return ws.terminate();
      send({ op: "error", re: f.id, error: { code: "ACK_NOT_ALLOWED", message: "no delivery of that message is waiting" } });
      deliver(6);
    } else if (f.op === "ack" && n === 1) {
      send({ op: "ok", re: f.id });
      ws.terminate();
    } else ws.send(JSON.stringify({ op: "ok", re: f.id }));
  });
  const s = await connect(raw.url, "t", ["x"], { reconnect: { initialDelayMs: 10, maxDelayMs: 50 }, pingIntervalMs: 0, onError: () => {} });
  try {
    await s.subscribe("x", async () => {});
    await until(() => starts.length >= 2, 5000, "the resumed subscribe");
  } finally {
    await s.close({ timeoutMs: 1000 });
    await raw.stop();
  }
  return starts[1];
}

for (const [how, want] of [
  ["refused", { sequence: 7 }],
  ["unanswered", { sequence: 6 }],
]) {
  test(`a handled delivery whose ack was ${how} is not asked for again by the resume`, async () => {
    assert.deepEqual(await resumeStart(how), want);
  });
}
