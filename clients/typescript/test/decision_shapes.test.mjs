// A publish decision is read as the Go client reads it (transport/ws,
// decodeFromServer and resolvePublishes): each member of its type first
// (status a string; the message an envelope, each member of the type
// pigeon.Message gives it, sequence and hops unsigned integers; a slot's
// error an error object), and only then what it says (the error, when
// there is one; else the message, with status accepted or duplicate). A
// decision that does not read so fails its publish with BAD_FRAME saying
// that the message may have been accepted (the broker judged it and may
// have stored it: it is not to be published again without an idempotency
// key); in a publish_batch's decisions only that slot's publish fails, the
// others resolve. Before, a decision's message was checked for its id and
// sequence alone (a time that is a number, a hops of -1 or spelled 1.0, a
// signature that is a string were resolved as sent), a slot holding an
// error beside a decision resolved as the decision, and an error that is
// no error object failed without saying the message may have been
// accepted. Each refused row failed before the fix.
import assert from "node:assert/strict";
import { test } from "node:test";
import { HttpClient, PigeonError } from "../dist/index.js";
import { onSession, RAW_CONTRACT, rawServer } from "./harness.mjs";

const OPTS = { reconnect: false, pingIntervalMs: 0 };

// The message of a decision, id msg_x at sequence 5, as the broker writes it.
const MESSAGE = `{"specversion":"1.0","id":"msg_x","type":"job","source":"p","subject":"x","time":"2026-01-01T00:00:00Z","sequence":5,"data":{}}`;
const DECISION = `{"status":"accepted","message":${MESSAGE}}`;

// Decisions no broker sends: DECISION with `old` replaced by `new`, or
// `slot` in its place (a decisions answer's slot; `slot` rows are not
// decisions of a lone publish). `want`: "unread" (BAD_FRAME, the message
// may have been accepted), or the code of the error the publish fails with.
const ROWS = [
  { name: "status a number", old: `"status":"accepted"`, new: `"status":5` },
  { name: "status a bool", old: `"status":"accepted"`, new: `"status":true` },
  { name: "status an object", old: `"status":"accepted"`, new: `"status":{"s":"accepted"}` },
  { name: "status null", old: `"status":"accepted"`, new: `"status":null` },
  { name: "status absent", old: `"status":"accepted",`, new: `` },
  { name: "status no broker's", old: `"status":"accepted"`, new: `"status":"quarantined"` },
  { name: "message a string", old: MESSAGE, new: `"msg_x"` },
  { name: "message a list", old: MESSAGE, new: `[${MESSAGE}]` },
  { name: "message a number", old: MESSAGE, new: `5` },
  { name: "message null", old: MESSAGE, new: `null` },
  { name: "message absent", old: `,"message":${MESSAGE}`, new: `` },
  { name: "id a number", old: `"id":"msg_x"`, new: `"id":7` },
  { name: "time a number", old: `"time":"2026-01-01T00:00:00Z"`, new: `"time":20260101` },
  { name: "type an object", old: `"type":"job"`, new: `"type":{"name":"job"}` },
  { name: "source a bool", old: `"source":"p"`, new: `"source":true` },
  { name: "correlationId a list", old: `"data":{}`, new: `"data":{},"correlationId":["c"]` },
  { name: "sequence a string", old: `"sequence":5`, new: `"sequence":"5"` },
  { name: "sequence negative", old: `"sequence":5`, new: `"sequence":-5` },
  { name: "sequence a fraction", old: `"sequence":5`, new: `"sequence":5.5` },
  { name: "sequence spelled 5.0", old: `"sequence":5`, new: `"sequence":5.0` },
  { name: "sequence beyond 2^53-1", old: `"sequence":5`, new: `"sequence":9007199254740993` },
  { name: "hops negative", old: `"data":{}`, new: `"data":{},"hops":-1` },
  { name: "hops beyond 2^32-1", old: `"data":{}`, new: `"data":{},"hops":4294967296` },
  { name: "hops a fraction", old: `"data":{}`, new: `"data":{},"hops":1.5` },
  { name: "hops spelled 1.0", old: `"data":{}`, new: `"data":{},"hops":1.0` },
  { name: "hops escaped, spelled 1e0", old: `"data":{}`, new: `"data":{},"\\u0068ops":1e0` },
  { name: "hops a string", old: `"data":{}`, new: `"data":{},"hops":"1"` },
  { name: "signature a string", old: `"data":{}`, new: `"data":{},"signature":"sig"` },
  { name: "signature kid a number", old: `"data":{}`, new: `"data":{},"signature":{"kid":7,"alg":"ed25519","sig":"x","v":2}` },
  { name: "signature form a fraction", old: `"data":{}`, new: `"data":{},"signature":{"kid":"k","alg":"ed25519","sig":"x","v":2.5}` },
  { name: "signature form spelled 2.0", old: `"data":{}`, new: `"data":{},"signature":{"kid":"k","alg":"ed25519","sig":"x","v":2.0}` },
  { name: "slot a number", slot: `7` },
  { name: "slot a string", slot: `"accepted"` },
  { name: "slot a list", slot: `[${DECISION}]` },
  { name: "slot null", slot: `null` },
  { name: "error a string", slot: `{"error":"REFUSED"}` },
  { name: "error a list", slot: `{"error":[{"code":"X"}]}` },
  { name: "error code a number", slot: `{"error":{"code":5,"message":"m"}}` },
  { name: "error message a number", slot: `{"error":{"code":"INTENT_DENIED","message":5}}` },
  { name: "error details a list", slot: `{"error":{"code":"INTENT_DENIED","message":"m","details":[]}}` },
  { name: "error beside a message whose hops is negative", slot: `{"error":{"code":"INTENT_DENIED","message":"m"},"message":${MESSAGE.replace(`"data":{}`, `"data":{},"hops":-1`)}}` },
  // Go reads the error first: such a slot fails with it, whatever else it holds.
  { name: "error beside a decision", slot: `{"error":{"code":"INTENT_DENIED","message":"m"},"status":"accepted","message":${MESSAGE}}`, want: "INTENT_DENIED" },
  { name: "error of null members", slot: `{"error":{"code":"INTENT_DENIED","message":null,"details":null}}`, want: "INTENT_DENIED" },
];

// Decisions the broker does send, with members the rows above spoil: each
// resolves (null reads as absent, as in every envelope field).
const TAKEN = [
  { name: "members null", old: `"type":"job"`, new: `"type":null,"signature":null,"hops":null,"reason":null` },
  { name: "hops 2^32-1", old: `"data":{}`, new: `"data":{},"hops":4294967295` },
  { name: "sequence 0", old: `"sequence":5`, new: `"sequence":0` },
  { name: "sequence absent", old: `"sequence":5,`, new: `` },
  { name: "a signature form no client signs", old: `"data":{}`, new: `"data":{},"signature":{"kid":"k","alg":"ed25519","sig":"x","v":3}` },
  { name: "data's own 5.0 and -1", old: `"data":{}`, new: `"data":{"sequence":5.0,"hops":-1,"time":1}` },
  { name: "a member the envelope does not name", old: `"data":{}`, new: `"data":{},"extra":{"n":1.0}` },
  { name: "duplicate", old: `"status":"accepted"`, new: `"status":"duplicate"` },
  { name: "error null", old: `"status":"accepted"`, new: `"error":null,"status":"accepted"` },
];

/** The decision text of row for message id (DECISION when no row). */
function decisionText(id, row) {
  let d = DECISION;
  if (row?.slot) d = row.slot;
  else if (row) {
    assert.ok(d.includes(row.old), row.name);
    d = d.replace(row.old, row.new);
  }
  return d.replace(`"msg_x"`, JSON.stringify(id));
}

/** Whether e is what row's publish fails with (`at`: its slot, for a batch). */
function failsAsRow(e, row, at) {
  if (!(e instanceof PigeonError)) return false;
  if (row.want) return e.code === row.want;
  return (
    e.code === "BAD_FRAME" &&
    /the message may have been accepted/.test(e.message) &&
    (at === undefined || (e.details.index === at.index && e.details.results === at.of && e.message.includes(`index ${at.index} of the ${at.of}`)))
  );
}

/** What a settled publish came to, for a report of what went wrong. */
const outcome = (r) => (r.status === "fulfilled" ? `resolved ${r.value.status}` : `${r.reason?.code}: ${r.reason?.message}`);

const rowOf = (id) => [...ROWS, ...TAKEN][Number(/^m_(\d+)/.exec(id)?.[1] ?? -1)];
const idOf = (row) => `m_${[...ROWS, ...TAKEN].indexOf(row)}`;

test("a publish whose decision does not read as Go reads it fails, saying the message may have been accepted; one the broker sends resolves", async () => {
  const srv = await rawServer((ws, f) => {
    if (f.op !== "publish") return;
    const id = f.message.id;
    ws.send(`{"op":"decision","re":${JSON.stringify(f.id)},${decisionText(id, rowOf(id)).slice(1)}`);
  });
  const wrong = [];
  await onSession(srv, OPTS, async (s) => {
    for (const row of [...ROWS, ...TAKEN]) {
      if (row.slot) continue; // a slot of a batch, not a decision frame
      const [r] = await Promise.allSettled([s.publish({ id: idOf(row), subject: "x", data: {} })]);
      const ok = TAKEN.includes(row) ? r.status === "fulfilled" && r.value.message.id === idOf(row) : r.status === "rejected" && failsAsRow(r.reason, row);
      if (!ok) wrong.push(`${row.name}: ${outcome(r)}`);
    }
  });
  assert.deepEqual(wrong, []);
});

test("in a decisions answer, a slot that does not read as Go reads it fails its own publish alone; the others resolve", async () => {
  const srv = await rawServer((ws, f) => {
    if (f.op !== "publish_batch") return;
    const results = f.messages.map((m) => decisionText(m.id, m.id.endsWith("_bad") ? rowOf(m.id) : undefined));
    ws.send(`{"op":"decisions","re":${JSON.stringify(f.id)},"results":[${results.join(",")}]}`);
  });
  const wrong = [];
  await onSession(srv, OPTS, async (s) => {
    for (const row of [...ROWS, ...TAKEN]) {
      for (const pos of [0, 1, 2]) {
        const ids = [0, 1, 2].map((i) => (i === pos ? `${idOf(row)}_bad` : `${idOf(row)}_${i}`));
        const got = await Promise.allSettled(ids.map((id) => s.publish({ id, subject: "x", data: {} })));
        got.forEach((r, i) => {
          const ok =
            i !== pos || TAKEN.includes(row)
              ? r.status === "fulfilled" && r.value.message.id === ids[i]
              : r.status === "rejected" && failsAsRow(r.reason, row, { index: pos, of: 3 });
          if (!ok) wrong.push(`${row.name} at ${pos}, slot ${i}: ${outcome(r)}`);
        });
      }
    }
  });
  assert.deepEqual(wrong, []);
});

test("an HTTP publish or release whose decision does not read as Go reads it fails, saying the message may have been accepted", async () => {
  let row;
  const fetch = async () => new Response(decisionText("m_http", row), { status: 202, headers: { "content-type": "application/json" } });
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch });
  h.contract = RAW_CONTRACT;
  const wrong = [];
  for (row of [...ROWS, ...TAKEN]) {
    if (row.slot) continue;
    for (const [name, call] of [["publish", () => h.publish({ subject: "x", data: {} })], ["release", () => h.release("qr_1")]]) {
      const [r] = await Promise.allSettled([call()]);
      const ok = TAKEN.includes(row) ? r.status === "fulfilled" && r.value.message.id === "m_http" : r.status === "rejected" && failsAsRow(r.reason, row);
      if (!ok) wrong.push(`${name}, ${row.name}: ${outcome(r)}`);
    }
  }
  assert.deepEqual(wrong, []);
});

test("a refused decision names its status, its message and what was refused", async () => {
  const srv = await rawServer((ws, f) => {
    if (f.op !== "publish_batch") return;
    const results = [decisionText(f.messages[0].id), decisionText(f.messages[1].id, ROWS.find((r) => r.name === "hops spelled 1.0"))];
    ws.send(`{"op":"decisions","re":${JSON.stringify(f.id)},"results":[${results.join(",")}]}`);
  });
  await onSession(srv, OPTS, async (s) => {
    const [a, b] = await Promise.allSettled(["m_a", "m_b"].map((id) => s.publish({ id, subject: "x", data: {} })));
    assert.equal(a.value?.message.id, "m_a");
    assert.equal(b.status, "rejected");
    assert.equal(b.reason.code, "BAD_FRAME");
    assert.deepEqual({ ...b.reason.details }, { status: "accepted", messageId: "m_b", hops: "1.0", index: 1, results: 2 });
    assert.equal(
      b.reason.message,
      "the server's answer for this message (index 1 of the 2 results of its publish_batch) could not be read (its message's hops is not an integer of 0 to 2^32-1): the message may have been accepted",
    );
  });
});
