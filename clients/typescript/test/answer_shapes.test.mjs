// Every answer the client reads is of its route's shape, or refused: an
// answer of another shape (a list where the route has an object, a string
// or a number where it has an object or a string, a member absent or null)
// is no server's, and the call fails BAD_FRAME rather than hand the caller
// a value of another type than it returns (an account that is a string, a
// grant whose token is a number, a contract whose operations are a
// string). tests/test_answer_shapes.py holds the same tables for the
// Python client (ProtocolError, BAD_REQUEST).
import assert from "node:assert/strict";
import { test } from "node:test";
import { connect, HttpClient, PigeonError } from "../dist/index.js";
import { onSession, RAW_CONTRACT, rawServer } from "./harness.mjs";

const json = JSON.stringify;
const CONTRACT = { ...RAW_CONTRACT, subjects: [{ name: "x", operations: ["publish"] }] };
const ACCOUNT = { id: "acct", roles: ["r"], createdAt: "2026-01-01T00:00:00Z" };
const DECISION = { status: "accepted", message: { id: "m1", subject: "x", sequence: 1 } };
const OPTS = { reconnect: false, pingIntervalMs: 0 };
const badFrame = (e) => e instanceof PigeonError && e.code === "BAD_FRAME";

/** An HttpClient whose fetch answers every request with `answer()` (a JSON value), holding CONTRACT. */
function answering(answer) {
  const fetch = async () => new Response(json(answer()), { status: 200, headers: { "content-type": "application/json" } });
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch });
  h.contract = CONTRACT;
  return h;
}

// Each call of the HTTP client that hands over what its answer holds: the
// call, a well-formed answer, the member of the answer holding what the
// call returns (undefined: the answer itself), and the members of that
// object that are strings in every answer of the route.
const CALLS = [
  ["connect", (h) => h.connect(["x"]), { contract: CONTRACT }, "contract", ["id"]],
  ["getContract", (h) => h.getContract("ctr_raw"), { contract: CONTRACT }, "contract", ["id"]],
  ["quarantineRecord", (h) => h.quarantineRecord("qr_1"), { record: { id: "qr_1", code: "SCHEMA_INVALID" } }, "record", ["id"]],
  ["createAccount", (h) => h.createAccount("acct"), { account: ACCOUNT }, "account", ["id"]],
  ["putRole", (h) => h.putRole("r", []), { role: { name: "r", permissions: [] } }, "role", ["name"]],
  ["issueGrant", (h) => h.issueGrant("acct", ["r"]), { token: "g.t", jti: "grt_1", expiresAt: "2026-01-01T00:00:00Z" }, undefined, ["token", "jti", "expiresAt"]],
];

/** The answers of another shape than `good`'s, each with its name (see tests/test_answer_shapes.py, _shapes). */
function* shapes(good, member, strings) {
  yield ["an answer that is a list", [good]];
  yield ["an answer that is null", null];
  yield ["an answer that is a string", "answer"];
  yield ["an answer that is a number", 7];
  if (member !== undefined) {
    const { [member]: _, ...rest } = good;
    yield [`no ${member}`, rest];
    for (const [name, v] of [["null", null], ["a string", "x"], ["a list", [good[member]]], ["a number", 7]]) yield [`${member} ${name}`, { ...good, [member]: v }];
  }
  for (const k of strings) {
    for (const [name, v] of [["absent", undefined], ["null", null], ["a number", 7], ["a list", ["x"]], ["an object", {}]]) {
      const bad = structuredClone(good);
      const held = member === undefined ? bad : bad[member];
      if (v === undefined) delete held[k];
      else held[k] = v;
      yield [`${k} ${name}`, bad];
    }
  }
}

for (const [call, run, good, member, strings] of CALLS) {
  test(`an HTTP ${call} answer of another shape than its route's is refused, BAD_FRAME`, async () => {
    let answer = good;
    const h = answering(() => answer);
    assert.deepEqual(await run(h), member === undefined ? good : good[member], "the well-formed answer is read");
    const wrong = [];
    for (const [name, bad] of shapes(good, member, strings)) {
      answer = bad;
      try {
        wrong.push(`${name}: returned ${json(await run(h))}`);
      } catch (e) {
        if (!badFrame(e)) wrong.push(`${name}: ${e}`);
      }
    }
    assert.deepEqual(wrong, []);
  });
}

// Contracts of another shape than the route's: members of other types than
// a Contract's (principal and region strings, subjects a list of objects
// each with a string name and a list of string operations).
const BAD_CONTRACTS = [
  ["id a number", { ...CONTRACT, id: 7 }],
  ["principal a list", { ...CONTRACT, principal: ["p"] }],
  ["region a number", { ...CONTRACT, region: 7 }],
  ["subjects a string", { ...CONTRACT, subjects: "x" }],
  ["a subject a string", { ...CONTRACT, subjects: ["x"] }],
  ["a subject without a name", { ...CONTRACT, subjects: [{ operations: ["publish"] }] }],
  ["a subject name a number", { ...CONTRACT, subjects: [{ name: 7, operations: ["publish"] }] }],
  ["operations a string", { ...CONTRACT, subjects: [{ name: "x", operations: "publish" }] }],
  ["an operation a number", { ...CONTRACT, subjects: [{ name: "x", operations: [7] }] }],
  // A time Date.parse cannot read (NaN): the session renewed no contract
  // whose expiry it could not compute.
  ["expiresAt not a time", { ...CONTRACT, expiresAt: "tomorrow" }],
  ["expiresAt a number", { ...CONTRACT, expiresAt: 7 }],
  ["expiresAt an object", { ...CONTRACT, expiresAt: {} }],
  ["issuedAt not a time", { ...CONTRACT, issuedAt: "2026-13-45T99:00:00Z" }],
  ["issuedAt a list", { ...CONTRACT, issuedAt: ["2026-01-01T00:00:00Z"] }],
];

test("a contract of another shape is refused over HTTP and WebSocket (negotiate and renew), BAD_FRAME", async () => {
  const wrong = [];
  for (const [name, contract] of BAD_CONTRACTS) {
    const h = answering(() => ({ contract }));
    h.contract = undefined;
    for (const [call, run] of [["connect", () => h.connect(["x"])], ["getContract", () => h.getContract("ctr_raw")]]) {
      try {
        wrong.push(`${name}, ${call}: returned ${json(await run())}`);
      } catch (e) {
        if (!badFrame(e)) wrong.push(`${name}, ${call}: ${e}`);
      }
    }
    if (h.contract !== undefined) wrong.push(`${name}: a contract held`);
    const srv = await rawServer(() => {}, { contract: () => contract });
    try {
      const s = await connect(srv.url, "t", ["x"], OPTS);
      await s.close();
      wrong.push(`${name}: connected`);
    } catch (e) {
      if (!badFrame(e)) wrong.push(`${name}, negotiate: ${e}`);
    } finally {
      await srv.stop();
    }
  }
  // Renewals: the contract in force stays.
  let renewed;
  const srv = await rawServer((ws, f) => ws.send(json({ op: "contract", re: f.id, contract: renewed })), { contract: () => CONTRACT });
  await onSession(srv, { ...OPTS, autoRenew: false }, async (s) => {
    for (const [name, contract] of BAD_CONTRACTS) {
      renewed = contract;
      try {
        await s.renew();
        wrong.push(`${name}: renewed`);
      } catch (e) {
        if (!badFrame(e)) wrong.push(`${name}, renew: ${e}`);
      }
      if (json(s.contract) !== json(CONTRACT)) wrong.push(`${name}: the contract in force changed`);
    }
  });
  assert.deepEqual(wrong, []);
});

test("a contract of the route's shape is read whole: subjects, and operations, absent or null are taken, and times absent, null or empty", async () => {
  const times = { ...CONTRACT, issuedAt: "2026-01-01T00:00:00Z", expiresAt: "2099-01-01T00:00:00.123456789+01:00" };
  for (const contract of [CONTRACT, times, { ...CONTRACT, subjects: [{ name: "x", operations: null }, { name: "y" }] }, { id: "ctr_1", subjects: null }, { id: "ctr_1", issuedAt: null, expiresAt: null }]) {
    assert.deepEqual(await answering(() => ({ contract })).connect(["x"]), contract);
  }
});

// A decision whose message's id is not a string: Decision.message.id would
// be a number (the status, the message and its sequence were checked before).
test("a decision whose message's id is not a string is refused over HTTP and WebSocket, BAD_FRAME", async () => {
  const bad = { ...DECISION, message: { ...DECISION.message, id: 7 } };
  const h = answering(() => bad);
  await assert.rejects(h.publish({ subject: "x", data: {} }), badFrame);
  await assert.rejects(h.release("qr_1"), badFrame);
  const good = answering(() => ({ ...DECISION, message: { ...DECISION.message, id: null } }));
  assert.equal((await good.publish({ subject: "x", data: {} })).status, "accepted", "an id absent or null is taken");
  const srv = await rawServer((ws, f) => ws.send(json({ op: "decision", re: f.id, ...bad })));
  await onSession(srv, OPTS, async (s) => {
    await assert.rejects(s.publish({ subject: "x", data: {} }), badFrame);
  });
});
