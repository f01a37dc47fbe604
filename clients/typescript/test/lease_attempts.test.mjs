// A pull lease is the principal's: once worker A's lease lapsed and worker
// B of the same principal leased the job again, A's late ack settled B's
// lease. A receive answer now names each lease's attempt ("attempts", in
// step with "messages"), and an ack or nack naming it settles only that
// lease. The client keeps the attempt with each message it hands out
// (receiveAttempts shows it) and sends it back with the ack or nack of
// that message, on both transports; an "attempts" that is not in step with
// the messages is a malformed answer (BAD_FRAME), never mis-assigned. A pull or replay entry
// that is not a message object is left out and reported, the others
// returned. Each test failed before the fix.
import assert from "node:assert/strict";
import { test } from "node:test";
import { HttpClient, PigeonError } from "../dist/index.js";
import { onSession, RAW_CONTRACT, rawServer } from "./harness.mjs";

const OPTS = { reconnect: false, pingIntervalMs: 0 };
const msg = (id, seq) => ({ id, subject: "x", data: {}, sequence: seq });
const badFrame = (re) => (e) => e instanceof PigeonError && e.code === "BAD_FRAME" && re.test(e.message);

/**
 * A raw server that answers receive and replay with `answer(f)` (an object
 * merged into the messages frame, or a JSON text of the frame's members)
 * and ack and nack "ok", keeping every ack and nack in `settled`.
 */
async function pullServer(answer) {
  const settled = [];
  const srv = await rawServer((ws, f) => {
    if (f.op === "receive" || f.op === "replay") {
      const a = answer(f);
      const members = typeof a === "string" ? a : JSON.stringify(a).slice(1, -1);
      ws.send(`{"op":"messages","re":"${f.id}",${members}}`);
    } else if (f.op === "ack" || f.op === "nack") {
      const { id, op, ...rest } = f;
      settled.push({ op, ...rest });
      ws.send(JSON.stringify({ op: "ok", re: f.id }));
    }
  });
  return { srv, settled };
}

test("a WebSocket receive hands each message's attempt over, and its ack and nack send it back", async () => {
  const { srv, settled } = await pullServer(() => ({ messages: [msg("m_a", 4), msg("m_b", 5)], attempts: [2, 1] }));
  await onSession(srv, OPTS, async (s) => {
    const { messages, attempts } = await s.receiveAttempts("x", { max: 2 });
    assert.deepEqual(messages.map((m) => m.id), ["m_a", "m_b"]);
    assert.deepEqual(attempts, [2, 1]);
    assert.ok(!("attempt" in messages[0]), "the attempt is not written into the message");
    assert.equal(s.attemptOf(messages[0]), 2);
    await s.ack("x", messages[0]);
    await s.nack("x", messages[1], { delayMs: 5 });
    // receive() keeps them too.
    const [m] = await s.receive("x");
    await s.ack("x", m);
    // An explicit attempt wins; 0 names none; an id alone names none.
    await s.ack("x", m, { attempt: 7 });
    await s.ack("x", m, { attempt: 0 });
    await s.ack("x", "m_a", { sequence: 4 });
    await s.nack("x", "m_a", { sequence: 4, attempt: 3 });
    for (const bad of [-1, 1.5, Number.NaN, 2 ** 31, 2 ** 53, "2"]) {
      await assert.rejects(s.ack("x", m, { attempt: bad }), (e) => e.code === "INVALID_ARGUMENT", String(bad));
      await assert.rejects(s.nack("x", m, { attempt: bad }), (e) => e.code === "INVALID_ARGUMENT", String(bad));
    }
  });
  assert.deepEqual(settled, [
    { op: "ack", subject: "x", messageId: "m_a", sequence: 4, attempt: 2 },
    { op: "nack", subject: "x", messageId: "m_b", sequence: 5, attempt: 1, delayMs: 5 },
    { op: "ack", subject: "x", messageId: "m_a", sequence: 4, attempt: 2 },
    { op: "ack", subject: "x", messageId: "m_a", sequence: 4, attempt: 7 },
    { op: "ack", subject: "x", messageId: "m_a", sequence: 4 },
    { op: "ack", subject: "x", messageId: "m_a", sequence: 4 },
    { op: "nack", subject: "x", messageId: "m_a", sequence: 4, attempt: 3 },
  ]);
});

test("a WebSocket receive without attempts (pubsub, a v1 server) answers 0 each and sends none", async () => {
  const { srv, settled } = await pullServer(() => ({ messages: [msg("m_a", 4)] }));
  await onSession(srv, OPTS, async (s) => {
    const { messages, attempts } = await s.receiveAttempts("x");
    assert.deepEqual(attempts, [0]);
    await s.ack("x", messages[0]);
    assert.deepEqual(await s.receiveAttempts("x").then((r) => r.attempts), [0]);
  });
  assert.deepEqual(settled, [{ op: "ack", subject: "x", messageId: "m_a", sequence: 4 }]);
});

// "attempts" members that cannot be told to these messages. (An entry that
// is no lease's attempt refuses its message alone: delivery_fields.test.mjs.)
const MALFORMED = [
  ["not an array", `"attempts":{"0":1}`],
  ["a number", `"attempts":1`],
  ["null", `"attempts":null`],
  ["fewer", `"attempts":[1]`],
  ["more", `"attempts":[1,2,3]`],
];
const TWO = `"messages":[${JSON.stringify(msg("m_a", 4))},${JSON.stringify(msg("m_b", 5))}]`;

test("a WebSocket receive whose attempts are not a list in step with the messages is BAD_FRAME", async () => {
  let members = "";
  const { srv, settled } = await pullServer(() => members);
  await onSession(srv, OPTS, async (s) => {
    for (const [name, attempts] of MALFORMED) {
      members = `${TWO},${attempts}`;
      await assert.rejects(s.receive("x"), badFrame(/attempts/), name);
      await assert.rejects(s.receiveAttempts("x"), badFrame(/attempts/), name);
    }
    // An empty answer with an empty list is in step.
    members = `"messages":[],"attempts":[]`;
    assert.deepEqual(await s.receiveAttempts("x"), { messages: [], attempts: [] });
  });
  assert.deepEqual(settled, []);
});

// Entries that are no message object, between messages.
const NOT_OBJECTS = ["null", "5", '"m"', "true", "[]", `[${JSON.stringify(msg("m_arr", 9))}]`];
const MIXED = `[${JSON.stringify(msg("m_a", 4))},${NOT_OBJECTS.join(",")},${JSON.stringify(msg("m_b", 5))}]`;
const checkMixed = (what, got, errors) => {
  assert.deepEqual(got.map((m) => m.id), ["m_a", "m_b"]);
  assert.equal(errors.length, NOT_OBJECTS.length, errors.map(String).join("; "));
  errors.forEach((e, i) => {
    assert.ok(badFrame(/not a message object/)(e), String(e));
    assert.equal(e.details.op, what);
    assert.equal(e.details.index, i + 1);
  });
  assert.deepEqual(
    errors.map((e) => e.details.entry),
    ["null", "number", "string", "boolean", "array", "array"],
  );
};

for (const op of ["receive", "replay"]) {
  test(`in a WebSocket ${op} answer, an entry that is not a message object is left out and reported; the others go on`, async () => {
    const errors = [];
    // A receive's attempts stay in step: each message kept keeps its own.
    const attempts = op === "receive" ? `,"attempts":[3,1,1,1,1,1,1,4]` : "";
    const { srv } = await pullServer(() => `"messages":${MIXED}${attempts}`);
    await onSession(srv, { ...OPTS, onError: (e) => errors.push(e) }, async (s) => {
      if (op === "receive") {
        const r = await s.receiveAttempts("x");
        checkMixed(op, r.messages, errors);
        assert.deepEqual(r.attempts, [3, 4]);
      } else {
        checkMixed(op, await s.replay("x"), errors);
      }
    });
  });
}

/** An HttpClient whose fetch answers receive and replay with `answer()` and keeps the ack and nack bodies. */
function httpPull(answer, errors = []) {
  const settled = [];
  const fetch = async (url, init) => {
    const path = new URL(url).pathname;
    if (path.endsWith("/ack") || path.endsWith("/nack")) {
      settled.push({ op: path.endsWith("/ack") ? "ack" : "nack", ...JSON.parse(init.body) });
      return new Response(`{"ok":true}`, { status: 200 });
    }
    return new Response(`{${answer()}}`, { status: 200, headers: { "content-type": "application/json" } });
  };
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch, onError: (e) => errors.push(e) });
  h.contract = RAW_CONTRACT;
  return { h, settled };
}

test("an HTTP receive hands each message's attempt over, and its ack and nack send it back", async () => {
  let members = `${TWO},"attempts":[2,1]`;
  const { h, settled } = httpPull(() => members);
  const { messages, attempts } = await h.receiveAttempts("x", { max: 2, ack: "explicit" });
  assert.deepEqual(attempts, [2, 1]);
  assert.equal(h.attemptOf(messages[1]), 1);
  await h.ack("x", messages[0]);
  await h.nack("x", messages[1], { delayMs: 5 });
  await h.ack("x", messages[0], { attempt: 9 });
  await h.ack("x", "m_a");
  await assert.rejects(h.ack("x", messages[0], { attempt: -1 }), (e) => e.code === "INVALID_ARGUMENT");
  members = TWO;
  assert.deepEqual((await h.receiveAttempts("x")).attempts, [0, 0]);
  assert.deepEqual(settled, [
    { op: "ack", messageId: "m_a", sequence: 4, attempt: 2 },
    { op: "nack", messageId: "m_b", sequence: 5, attempt: 1, delayMs: 5 },
    { op: "ack", messageId: "m_a", sequence: 4, attempt: 9 },
    { op: "ack", messageId: "m_a" },
  ]);
  for (const [name, a] of MALFORMED) {
    members = `${TWO},${a}`;
    await assert.rejects(h.receive("x", { ack: "explicit" }), badFrame(/attempts/), name);
  }
});

test("in an HTTP receive or replay answer, an entry that is not a message object is left out and reported; the others go on", async () => {
  const errors = [];
  let members = "";
  const { h } = httpPull(() => members, errors);
  members = `"messages":${MIXED},"attempts":[3,1,1,1,1,1,1,4]`;
  const r = await h.receiveAttempts("x", { ack: "explicit" });
  checkMixed("receive", r.messages, errors);
  assert.deepEqual(r.attempts, [3, 4]);
  errors.length = 0;
  members = `"messages":${MIXED}`;
  checkMixed("replay", await h.replay("x"), errors);
});
