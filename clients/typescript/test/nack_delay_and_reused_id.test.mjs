// A pull nack's delay beyond the 12 hours the broker takes
// (pigeon.MaxRetryDelay) was sent as it was, by the HTTP client and the
// session, and refused INVALID_ARGUMENT, while a handler's RetryAfter and
// the Python client shorten it: each now shortens it (a negative one is 0).
// A handler ran one message id at a time, so a later message published
// under a reused id waited for the old one's handler: it now runs at once.
// Each test failed before its fix.
import assert from "node:assert/strict";
import { test } from "node:test";
import { HttpClient } from "../dist/index.js";
import { ok, onSession, RAW_CONTRACT, subscribingServer, until } from "./harness.mjs";

const MAX = 12 * 60 * 60 * 1000;
const CASES = [
  [13 * 60 * 60 * 1000, MAX],
  [MAX + 1, MAX],
  [Number.MAX_SAFE_INTEGER, MAX],
  [MAX, MAX],
  [-5, 0],
  [1500.4, 1500],
];

test("an HTTP nack's delay beyond 12 hours is shortened to them, not sent for the server to refuse", async () => {
  const bodies = [];
  const fetch = async (_url, init) => {
    bodies.push(JSON.parse(init.body));
    return new Response("{}", { status: 200, headers: { "content-type": "application/json" } });
  };
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch });
  h.contract = RAW_CONTRACT;
  for (const [delayMs] of CASES) await h.nack("x", "msg_1", { sequence: 1, delayMs });
  assert.deepEqual(
    bodies.map((b) => b.delayMs),
    CASES.map(([, want]) => want),
  );
});

test("a session's pull nack's delay beyond 12 hours is shortened to them, not sent for the server to refuse", async () => {
  const frames = [];
  const { srv } = await subscribingServer((ws, f) => {
    frames.push(f);
    ok(ws, f);
  });
  await onSession(srv, { reconnect: false, pingIntervalMs: 0 }, async (s) => {
    for (const [delayMs] of CASES) await s.nack("x", "msg_1", { sequence: 1, delayMs });
  });
  assert.deepEqual(
    frames.filter((f) => f.op === "nack").map((f) => f.delayMs),
    CASES.map(([, want]) => want),
  );
});

test("a newer message under a reused id does not wait for the old one's handler; a redelivery of the running one does", async () => {
  const acks = [];
  const { srv, socket } = await subscribingServer((ws, f) => {
    if (f.op === "ack") {
      const ids = f.messageIds ?? [f.messageId];
      const seqs = f.sequences ?? [f.sequence];
      ids.forEach((id, i) => acks.push(`${id}@${seqs[i]}`));
    }
    ok(ws, f);
  });
  await onSession(srv, { reconnect: false, pingIntervalMs: 0 }, async (s) => {
    const runs = [];
    let release;
    const gate = new Promise((r) => (release = r));
    await s.subscribe("x", async (m) => {
      runs.push(m.sequence);
      if (m.sequence === 7 && runs.filter((q) => q === 7).length === 1) await gate;
    }, { maxInFlight: 4 });
    const deliver = (seq) => socket().send(JSON.stringify({ op: "deliver", sub: "sub_1", attempt: 1, message: { id: "m", subject: "x", sequence: seq, data: {} } }));
    deliver(7);
    await until(() => runs.length === 1, 2000, "the run at 7");
    deliver(7); // delivered again: waits for the run at 7
    deliver(9); // msg m at 7 trimmed, its id taken: another message
    await until(() => runs.includes(9), 2000, "the run at 9 while the one at 7 waits");
    assert.deepEqual(runs, [7, 9]);
    release();
    await until(() => runs.length === 3, 2000, "the redelivery at 7 after the first run");
    await until(() => acks.length === 3, 2000, "the acks");
    assert.deepEqual(acks.sort(), ["m@7", "m@7", "m@9"]);
  });
});
