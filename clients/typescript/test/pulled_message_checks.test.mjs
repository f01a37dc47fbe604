// A stored message that a request's reply, a pull (receive) or a replay
// hands the caller, with a sequence beyond 2^53-1 (JSON.parse rounds it to
// another message's, which a replay or a resume from it, or an ack of it,
// would name) or a hops that is no broker's: the reply is refused, and in
// a pull or a replay that one message is left out and reported (the others
// go on), as a deliver_batch entry is, on both transports. Each test
// failed before the fix.
import assert from "node:assert/strict";
import { test } from "node:test";
import { HttpClient, PigeonError } from "../dist/index.js";
import { onSession, RAW_CONTRACT, rawServer } from "./harness.mjs";

// 2^53 + 1: JSON.parse reads it as 2^53, the sequence of another message.
const BIG = "9007199254740993";
const SAFE = 2 ** 53 - 1;
const MAX_HOPS = 4294967295;
const msg = (id, seq, hops = 0) => `{"id":"${id}","subject":"x","data":{},"sequence":${seq},"hops":${hops}}`;
// The reply to the request "m_req": a responder names it in correlationId.
const replyMsg = (seq, hops) => `${msg("m_reply", seq, hops).slice(0, -1)},"correlationId":"m_req"}`;

/** Whether e is the BAD_FRAME of message id in a `what` answer refusing field (at entry index, if given). */
const refused = (what, id, field, index) => (e) =>
  e instanceof PigeonError &&
  e.code === "BAD_FRAME" &&
  e.details.op === what &&
  e.details.messageId === id &&
  field in e.details &&
  new RegExp(`whose ${field} is not an integer`).test(e.message) &&
  e.details.index === index;

// One refused entry of each kind between messages held exactly.
const LIST = `[${msg("m_big", BIG)},${msg("m_safe", SAFE, MAX_HOPS)},${msg("m_hops", 3, -1)},${msg("m_7", 7)}]`;
const checkList = (what, got, errors) => {
  assert.deepEqual(got.map((m) => [m.id, m.sequence, m.hops]), [["m_safe", SAFE, MAX_HOPS], ["m_7", 7, 0]]);
  assert.equal(errors.length, 2, errors.map(String).join("; "));
  assert.ok(refused(what, "m_big", "sequence", 0)(errors[0]), String(errors[0]));
  assert.ok(refused(what, "m_hops", "hops", 2)(errors[1]), String(errors[1]));
};

test("a WebSocket request's reply with a sequence beyond 2^53-1 or hops -1 is refused; the largest held pass exactly", async () => {
  for (const [seq, hops, field] of [[BIG, 0, "sequence"], ["1e400", 0, "sequence"], [5, -1, "hops"], [5, 4294967296, "hops"], [SAFE, MAX_HOPS, ""]]) {
    const srv = await rawServer((ws, f) => {
      if (f.op === "request") ws.send(`{"op":"reply","re":"${f.id}","status":"replied","message":${replyMsg(seq, hops)}}`);
    });
    await onSession(srv, { reconnect: false, pingIntervalMs: 0 }, async (s) => {
      const p = s.request({ id: "m_req", subject: "x", data: {} });
      if (field) await assert.rejects(p, refused("reply", "m_reply", field, undefined), `${seq} ${hops}`);
      else assert.deepEqual(await p.then((m) => [m.sequence, m.hops]), [SAFE, MAX_HOPS]);
    });
  }
});

for (const op of ["receive", "replay"]) {
  test(`in a WebSocket ${op} answer, a message with a sequence beyond 2^53-1 or hops -1 is left out and reported; the others go on`, async () => {
    const errors = [];
    const srv = await rawServer((ws, f) => {
      if (f.op === op) ws.send(`{"op":"messages","re":"${f.id}","messages":${LIST}}`);
    });
    await onSession(srv, { reconnect: false, pingIntervalMs: 0, onError: (e) => errors.push(e) }, async (s) => {
      checkList(op, await s[op]("x"), errors);
    });
  });
}

test("HTTP request, receive and replay apply the same checks", async () => {
  let reply = "";
  const fetch = async (url) => {
    const body = url.endsWith("/v1/requests") ? `{"status":"replied","message":${reply}}` : `{"messages":${LIST}}`;
    return new Response(body, { status: 200, headers: { "content-type": "application/json" } });
  };
  const errors = [];
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch, onError: (e) => errors.push(e) });
  h.contract = RAW_CONTRACT;
  for (const [seq, hops, field] of [[BIG, 0, "sequence"], [5, -1, "hops"]]) {
    reply = replyMsg(seq, hops);
    await assert.rejects(h.request({ id: "m_req", subject: "x", data: {} }), refused("reply", "m_reply", field, undefined), `${seq} ${hops}`);
  }
  reply = replyMsg(SAFE, MAX_HOPS);
  assert.deepEqual(await h.request({ id: "m_req", subject: "x", data: {} }).then((m) => [m.sequence, m.hops]), [SAFE, MAX_HOPS]);
  for (const op of ["receive", "replay"]) {
    errors.length = 0;
    checkList(op, await h[op]("x"), errors);
  }
});
