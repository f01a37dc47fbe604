// The fields of a message a pull, a replay or a request hands over, as the
// Python and Rust clients read them (the Go client, transport/ws, is the
// reference for the attempt's range):
// - a receive or replay message without a sequence is refused as one of
//   sequence 0 is: the broker numbers every message it stores from 1 and
//   always sends the number with a message of the log, and an ack of such a
//   message would name none (settling whichever message holds the id); a
//   reply without one is taken, as the broker sends every reply (a reply
//   never enters the log);
// - a receive message whose attempt is no lease's is left out and reported
//   alone, the others kept (before, it failed the whole receive);
// - the attempts taken and sent are integers of 1 (0 sent as none) to
//   2^31-1, MAX_ATTEMPT.
// Each test failed before its fix.
import assert from "node:assert/strict";
import { test } from "node:test";
import { HttpClient, MAX_ATTEMPT, PigeonError } from "../dist/index.js";
import { onSession, RAW_CONTRACT, rawServer } from "./harness.mjs";

const OPTS = { reconnect: false, pingIntervalMs: 0 };
const msg = (id, seq) => ({ id, subject: "x", data: {}, ...(seq === undefined ? {} : { sequence: seq }) });
const json = (x) => JSON.stringify(x);

/**
 * A raw server answering receive and replay with the JSON text `members()`
 * in a messages frame, request with `reply()` as its message, and ack and
 * nack "ok", keeping each ack and nack (less its id) in `settled`.
 */
async function fakeServer(members, reply = () => ({})) {
  const settled = [];
  const srv = await rawServer((ws, f) => {
    if (f.op === "receive" || f.op === "replay") ws.send(`{"op":"messages","re":"${f.id}",${members()}}`);
    else if (f.op === "request") ws.send(json({ op: "reply", re: f.id, message: reply(f) }));
    else if (f.op === "ack" || f.op === "nack") {
      const { id, ...rest } = f;
      settled.push(rest);
      ws.send(json({ op: "ok", re: f.id }));
    }
  });
  return { srv, settled };
}

/** An HttpClient whose fetch answers receive and replay with `{members()}`, request with `reply()`. */
function fakeHttp(members, reply, errors) {
  const fetch = async (url) => {
    const path = new URL(url).pathname;
    const body = path === "/v1/requests" ? json({ status: "replied", message: reply() }) : `{${members()}}`;
    return new Response(body, { status: 200, headers: { "content-type": "application/json" } });
  };
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch, onError: (e) => errors.push(e) });
  h.contract = RAW_CONTRACT;
  return h;
}

// A message without a sequence, and one with a null sequence, between two
// of the broker's.
const NO_SEQUENCE = `"messages":${json([msg("m_a", 4), msg("m_none"), { ...msg("m_null"), sequence: null }, msg("m_b", 5)])}`;
const refusedSequence = (e) => [e.code, e.details.op, e.details.index, e.details.messageId, e.details.sequence];

test("a WebSocket receive or replay message without a sequence is refused as one of sequence 0 is; a reply is taken", async () => {
  const errors = [];
  const { srv, settled } = await fakeServer(
    () => NO_SEQUENCE,
    (f) => ({ ...msg("m_reply"), correlationId: f.message.id }),
  );
  await onSession(srv, { ...OPTS, onError: (e) => errors.push(e) }, async (s) => {
    assert.deepEqual((await s.receive("x")).map((m) => m.id), ["m_a", "m_b"]);
    assert.deepEqual((await s.replay("x")).map((m) => m.id), ["m_a", "m_b"]);
    assert.equal((await s.request({ id: "req_1", subject: "x", data: {} })).id, "m_reply");
  });
  assert.deepEqual(errors.map(refusedSequence), [
    ["BAD_FRAME", "receive", 1, "m_none", "undefined"],
    ["BAD_FRAME", "receive", 2, "m_null", "object"],
    ["BAD_FRAME", "replay", 1, "m_none", "undefined"],
    ["BAD_FRAME", "replay", 2, "m_null", "object"],
  ]);
  assert.deepEqual(settled, [], "nothing refused is answered");
});

test("an HTTP receive or replay message without a sequence is refused as one of sequence 0 is; a reply is taken", async () => {
  const errors = [];
  const h = fakeHttp(() => NO_SEQUENCE, () => ({ ...msg("m_reply"), correlationId: "req_1" }), errors);
  assert.deepEqual((await h.receive("x")).map((m) => m.id), ["m_a", "m_b"]);
  assert.deepEqual((await h.replay("x")).map((m) => m.id), ["m_a", "m_b"]);
  assert.equal((await h.request({ id: "req_1", subject: "x", data: {} })).id, "m_reply");
  assert.deepEqual(errors.map(refusedSequence), [
    ["BAD_FRAME", "receive", 1, "m_none", "undefined"],
    ["BAD_FRAME", "receive", 2, "m_null", "object"],
    ["BAD_FRAME", "replay", 1, "m_none", "undefined"],
    ["BAD_FRAME", "replay", 2, "m_null", "object"],
  ]);
});

// The attempts a receive answer may name for a message, and those it may
// not: the table the clients agree on (integers of 1 to 2^31-1, the Go
// client's range; tests/test_delivery_fields.py holds the same rows). Each
// row's value is the JSON text of entry 1 of three messages. An integer
// spelled with a fraction or an exponent (1.0, 1e0) is no integer to the
// Go, Python and Rust decoders, though JSON.parse reads it as one.
const RECEIVED = [
  ["1", "1", true],
  ["2^31-1", String(2 ** 31 - 1), true],
  ["0", "0", false],
  ["negative zero", "-0", false],
  ["negative", "-1", false],
  ["fraction", "1.5", false],
  ["integral fraction", "1.0", false],
  ["exponent", "1e0", false],
  ["signed exponent", "10E-1", false],
  ["2^31", String(2 ** 31), false],
  ["beyond 2^53", "9007199254740993", false],
  ["2^63-1", "9223372036854775807", false],
  ["2^63", "9223372036854775808", false],
  ["a string", `"2"`, false],
  ["null", "null", false],
  ["true", "true", false],
  ["false", "false", false],
  ["an object", "{}", false],
  ["an array", "[1]", false],
];
const THREE = `"messages":${json([msg("m_a", 4), msg("m_x", 5), msg("m_b", 6)])}`;

test("MAX_ATTEMPT is 2^31-1, the Go client's", () => {
  assert.equal(MAX_ATTEMPT, 2 ** 31 - 1);
});

for (const transport of ["WebSocket", "HTTP"]) {
  test(`a ${transport} receive refuses alone a message whose attempt is no lease's, and keeps the others with theirs`, async () => {
    const errors = [];
    let members = "";
    const wrong = [];
    const check = async (receiveAttempts) => {
      for (const [name, attempt, taken] of RECEIVED) {
        errors.length = 0;
        members = `${THREE},"attempts":[2,${attempt},3]`;
        let got;
        try {
          got = await receiveAttempts();
        } catch (e) {
          wrong.push(`${name}: the whole receive failed: ${e.message}`);
          continue;
        }
        const want = taken
          ? { ids: ["m_a", "m_x", "m_b"], attempts: [2, JSON.parse(attempt), 3], errors: [] }
          : { ids: ["m_a", "m_b"], attempts: [2, 3], errors: [["BAD_FRAME", "receive", 1, "m_x"]] };
        const have = {
          ids: got.messages.map((m) => m.id),
          attempts: got.attempts,
          errors: errors.map((e) => [e.code, e.details.op, e.details.index, e.details.messageId]),
        };
        if (json(have) !== json(want)) wrong.push(`${name}: ${json(have)}`);
      }
    };
    if (transport === "HTTP") {
      const h = fakeHttp(() => members, () => ({}), errors);
      await check(() => h.receiveAttempts("x", { ack: "explicit" }));
    } else {
      const { srv } = await fakeServer(() => members);
      await onSession(srv, { ...OPTS, onError: (e) => errors.push(e) }, async (s) => check(() => s.receiveAttempts("x")));
    }
    assert.deepEqual(wrong, []);
  });
}

// An attempt spelled with a fraction or an exponent is found whatever
// spells its member's name (JSON.parse reads "\u0061ttempts" as
// "attempts"), and is named as spelled in the refusal; the same spelling
// in a message's data changes nothing.
const DATA_SPELLED = { ...msg("m_a", 4), data: { attempts: [1.5], attempt: 2.5, n: 1 } };
const dataText = (m) => json(m).replace("[1.5]", "[1.0]").replace("2.5", "2.0");
const SPELLED = [
  ["an escaped name", `${THREE},"\\u0061ttempts":[2,1.0,3]`, ["m_a", "m_b"], [2, 3], [[1, "m_x", "1.0"]]],
  ["an exponent", `${THREE},"attempts":[2e0,1,3]`, ["m_x", "m_b"], [1, 3], [[0, "m_a", "2e0"]]],
  ["spaced", `${THREE},"attempts" : [ 2 , 1 , 30E-1 ]`, ["m_a", "m_x"], [2, 1], [[2, "m_b", "30E-1"]]],
  ["in data", `"messages":[${dataText(DATA_SPELLED)}],"attempts":[2]`, ["m_a"], [2], []],
];

for (const transport of ["WebSocket", "HTTP"]) {
  test(`a ${transport} receive finds an attempt spelled as a non-integer number wherever the text puts it, and names its spelling`, async () => {
    const errors = [];
    let members = "";
    const wrong = [];
    const check = async (receiveAttempts) => {
      for (const [name, text, ids, attempts, refused] of SPELLED) {
        errors.length = 0;
        members = text;
        const got = await receiveAttempts();
        const have = {
          ids: got.messages.map((m) => m.id),
          attempts: got.attempts,
          refused: errors.map((e) => [e.details.index, e.details.messageId, e.details.attempt]),
        };
        if (json(have) !== json({ ids, attempts, refused })) wrong.push(`${name}: ${json(have)}`);
        if (name === "in data" && json(got.messages[0]?.data) !== json({ attempts: [1], attempt: 2, n: 1 })) wrong.push(`${name}: data ${json(got.messages[0]?.data)}`);
      }
    };
    if (transport === "HTTP") {
      const h = fakeHttp(() => members, () => ({}), errors);
      await check(() => h.receiveAttempts("x", { ack: "explicit" }));
    } else {
      const { srv } = await fakeServer(() => members);
      await onSession(srv, { ...OPTS, onError: (e) => errors.push(e) }, async (s) => check(() => s.receiveAttempts("x")));
    }
    assert.deepEqual(wrong, []);
  });
}

// The attempts an ack or a nack sends: 0 names none, 1 to 2^31-1 are sent,
// anything else is INVALID_ARGUMENT and nothing is sent.
const SENT = [
  ["0", 0, undefined],
  ["1", 1, 1],
  ["2^31-1", 2 ** 31 - 1, 2 ** 31 - 1],
  ["2^31", 2 ** 31, "INVALID_ARGUMENT"],
  ["2^53-1", Number.MAX_SAFE_INTEGER, "INVALID_ARGUMENT"],
  ["negative", -1, "INVALID_ARGUMENT"],
  ["fraction", 1.5, "INVALID_ARGUMENT"],
  ["NaN", Number.NaN, "INVALID_ARGUMENT"],
  ["a string", "2", "INVALID_ARGUMENT"],
];

test("an ack or a nack sends an attempt of 1 to 2^31-1, none for 0, and refuses any other", async () => {
  const { srv, settled } = await fakeServer(() => `"messages":${json([msg("m_a", 4)])},"attempts":[2]`);
  const wrong = [];
  await onSession(srv, OPTS, async (s) => {
    const [m] = await s.receive("x");
    for (const op of ["ack", "nack"]) {
      for (const [name, attempt, want] of SENT) {
        settled.length = 0;
        try {
          await s[op]("x", m, { attempt });
        } catch (e) {
          if (e.code !== want) wrong.push(`${op} ${name}: ${e.code}`);
          continue;
        }
        const got = settled.map((f) => f.attempt);
        if (json(got) !== json([want])) wrong.push(`${op} ${name}: sent ${json(got)}`);
      }
    }
  });
  assert.deepEqual(wrong, []);
});
