// An ack or a nack of a push delivery named the id and sequence read from
// the message after the handler returned, so a handler (or a stream's
// reader) that edited its message's id or sequence made the answer settle
// another message published under that id, and moved the resume position.
// The answer now names what was delivered. The test failed before the fix.
import assert from "node:assert/strict";
import { test } from "node:test";
import { connect } from "../dist/index.js";
import { rawServer, until } from "./harness.mjs";

/** The answers a subscription sent for a delivery of msg_1 at sequence 3 whose handler runs `edit` and then `end` ("return" or "throw"). */
async function answersOf(edit, end) {
  const answers = [];
  const raw = await rawServer((ws, f) => {
    if (f.op === "subscribe") {
      ws.send(JSON.stringify({ op: "subscribed", re: f.id, sub: "sub_1", from: 1 }));
      ws.send(JSON.stringify({ op: "deliver", sub: "sub_1", attempt: 1, message: { id: "msg_1", subject: "x", sequence: 3, data: {} } }));
      return;
    }
    if (f.op === "ack" || f.op === "nack") answers.push([f.op, f.messageId, f.sequence]);
    ws.send(JSON.stringify({ op: "ok", re: f.id }));
  });
  const s = await connect(raw.url, "t", ["x"], { reconnect: false, pingIntervalMs: 0, onError: () => {} });
  try {
    await s.subscribe("x", async (m) => {
      edit(m);
      if (end === "throw") throw new Error("failed");
    });
    await until(() => answers.length >= 1, 5000, "the answer");
  } finally {
    await s.close({ timeoutMs: 1000 });
    await raw.stop();
  }
  return answers;
}

const EDITS = [
  ["rewrites", (m) => { m.id = "msg_other"; m.sequence = 99; }],
  ["deletes", (m) => { delete m.id; delete m.sequence; }],
  ["garbles", (m) => { m.id = 7; m.sequence = "3"; }],
];

for (const [what, edit] of EDITS) {
  for (const [end, op] of [["return", "ack"], ["throw", "nack"]]) {
    test(`a handler that ${what} its message's id and sequence and ${end}s still ${op}s the delivery it was given`, async () => {
      assert.deepEqual(await answersOf(edit, end), [[op, "msg_1", 3]]);
    });
  }
}

// A renewal answered with a contract that has expired by the time the
// client reads the answer (a server granting a few milliseconds, an answer
// a busy machine reads late) was dropped without a word: the loop stopped
// and nothing said why. It is reported as renewals too short, once, as
// one the floor puts past its expiry.
test("a renewal whose answer is read after the contract it grants expired is reported too short", async () => {
  const { RAW_CONTRACT, ok, onSession, sleep } = await import("./harness.mjs");
  let renews = 0;
  let exp = 0;
  const srv = await rawServer(
    (ws, f) => {
      if (f.op !== "renew") return ok(ws, f);
      renews++;
      exp += 5; // a renewal of 5 ms, answered 50 ms after that is over
      const answer = JSON.stringify({ op: "contract", re: f.id, contract: { ...RAW_CONTRACT, expiresAt: new Date(exp).toISOString() } });
      setTimeout(() => ws.send(answer), Math.max(0, exp + 50 - Date.now()));
    },
    {
      contract: () => {
        exp = Date.now() + 200;
        return { ...RAW_CONTRACT, expiresAt: new Date(exp).toISOString() };
      },
    },
  );
  const errors = [];
  await onSession(srv, { reconnect: false, pingIntervalMs: 0, onError: (e) => errors.push(e) }, async () => {
    await until(() => errors.some((e) => /too short/.test(e.message)), 10_000, "the report");
    await sleep(300);
    assert.equal(renews, 1);
    assert.equal(errors.filter((e) => /too short/.test(e.message)).length, 1, errors.map(String).join("; "));
  });
});
