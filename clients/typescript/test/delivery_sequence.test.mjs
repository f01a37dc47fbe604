// A message the server hands over with a sequence of 0: the broker numbers
// a subject's messages from 1 and leaves 0 out, so a 0 is no broker's. It
// was taken (and answered naming no sequence, which settles whichever
// message holds the id); it is now refused BAD_FRAME and never handed
// over, as the Python and Rust clients refuse it: a delivery (deliver and
// deliver_batch), and a receive, replay or reply message. Each refusal
// test failed before the fix.
import assert from "node:assert/strict";
import { test } from "node:test";
import { HttpClient, PigeonError } from "../dist/index.js";
import { onSession, subscribingServer, until } from "./harness.mjs";

const msg = (id, sequence) => ({ id, subject: "x", data: {}, ...(sequence === undefined ? {} : { sequence }) });

for (const batch of [false, true]) {
  test(`a ${batch ? "deliver_batch entry" : "deliver"} of sequence 0 is refused, unanswered, and the next goes on`, async () => {
    const answered = [];
    const { srv, socket } = await subscribingServer((ws, f) => {
      if (f.op === "ack" || f.op === "nack") {
        if (f.messageIds) f.messageIds.forEach((id, i) => answered.push([f.op, id, f.sequences[i]]));
        else answered.push([f.op, f.messageId, f.sequence ?? 0]);
      }
      ws.send(JSON.stringify({ op: "ok", re: f.id }));
    });
    const errors = [];
    const handled = [];
    await onSession(srv, { reconnect: false, pingIntervalMs: 0, onError: (e) => errors.push(e) }, async (s) => {
      await s.subscribe("x", (m) => {
        handled.push(m.id);
      });
      const ms = [msg("msg_zero", 0), msg("msg_ok", 4), msg("msg_none")];
      if (batch) socket().send(JSON.stringify({ op: "deliver_batch", sub: "sub_1", deliveries: ms.map((message) => ({ attempt: 1, message })) }));
      else for (const message of ms) socket().send(JSON.stringify({ op: "deliver", sub: "sub_1", attempt: 1, message }));
      await until(() => answered.length === 1 && errors.length === 2, 5000, "the answers and the reports");
    });
    // One without a sequence is refused the same way (it was handed over,
    // and acked by its id alone): see test/delivery_push.test.mjs.
    assert.deepEqual(handled, ["msg_ok"]);
    assert.deepEqual(answered, [["ack", "msg_ok", 4]], "a refused delivery is not answered");
    assert.ok(errors.every((e) => e instanceof PigeonError && e.code === "BAD_FRAME"), String(errors));
    assert.deepEqual(errors.map((e) => e.details.sequence), [0, "undefined"]);
  });
}

test("a receive, replay or reply message of sequence 0 is refused as a delivery is", async () => {
  const answer = (url) => {
    if (url.endsWith("/receive") || url.endsWith("/replay")) return { messages: [msg("msg_zero", 0), msg("msg_ok", 4)] };
    if (url.endsWith("/v1/requests")) return { status: "ok", message: { ...msg("msg_reply", 0), correlationId: "req_1" } };
    return { contract: { id: "ctr_1" } };
  };
  const fetch = async (url) => new Response(JSON.stringify(answer(String(url))), { status: 200, headers: { "content-type": "application/json" } });
  const errors = [];
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch, onError: (e) => errors.push(e) });
  await h.connect(["x"]);
  assert.deepEqual((await h.receive("x")).map((m) => m.id), ["msg_ok"]);
  assert.deepEqual((await h.replay("x")).map((m) => m.id), ["msg_ok"]);
  assert.deepEqual(errors.map((e) => [e.code, e.details.op, e.details.index, e.details.sequence]), [
    ["BAD_FRAME", "receive", 0, 0],
    ["BAD_FRAME", "replay", 0, 0],
  ]);
  await assert.rejects(h.request({ id: "req_1", subject: "x", data: {} }), (e) => e instanceof PigeonError && e.code === "BAD_FRAME" && e.details.sequence === 0);
});

// Each way a pushed delivery is refused, and its report: the frame's op,
// and in a deliver_batch the entry's index, as the Python client names
// them. Before, none of these reports named the op or the entry, and a
// delivery whose message id is no non-empty string was handed to the
// handler (which could never answer it, so each redelivery ran it again)
// where the Python and Rust clients refuse it.
const REFUSED = [
  ["no message", { attempt: 1 }],
  ["no attempt", { message: msg("msg_x", 9) }],
  ["sequence 0", { attempt: 1, message: msg("msg_x", 0) }],
  ["a string sequence", { attempt: 1, message: msg("msg_x", "9") }],
  ["a hops no broker's", { attempt: 1, message: { ...msg("msg_x", 9), hops: -1 } }],
  ["a numeric id", { attempt: 1, message: { ...msg("msg_x", 9), id: 5 } }],
  ["an empty id", { attempt: 1, message: msg("", 9) }],
  ["no id", { attempt: 1, message: { subject: "x", data: {}, sequence: 9 } }],
];

for (const batch of [false, true]) {
  test(`every refusal of a ${batch ? "deliver_batch entry" : "deliver"} names its op${batch ? " and index" : ""}`, async () => {
    const answered = [];
    const { srv, socket } = await subscribingServer((ws, f) => {
      if (f.op === "ack" || f.op === "nack") answered.push(...(f.messageIds ?? [f.messageId]));
      ws.send(JSON.stringify({ op: "ok", re: f.id }));
    });
    const errors = [];
    const handled = [];
    const wrong = [];
    await onSession(srv, { reconnect: false, pingIntervalMs: 0, onError: (e) => errors.push(e) }, async (s) => {
      await s.subscribe("x", (m) => {
        handled.push(m.id);
      });
      for (const [name, bad] of REFUSED) {
        errors.length = 0;
        handled.length = 0;
        answered.length = 0;
        const ds = [{ attempt: 1, message: msg("msg_a", 3) }, bad, { attempt: 1, message: msg("msg_b", 4) }];
        if (batch) socket().send(JSON.stringify({ op: "deliver_batch", sub: "sub_1", deliveries: ds }));
        else for (const d of ds) socket().send(JSON.stringify({ op: "deliver", sub: "sub_1", ...d }));
        try {
          await until(() => answered.length === 2 && errors.length >= 1, 3000, "the good deliveries and the report");
        } catch (e) {
          wrong.push(`${name}: ${e.message}`);
          continue;
        }
        const want = batch ? { op: "deliver_batch", index: 1 } : { op: "deliver" };
        const got = errors.map((e) => [e.code, e.details.op, e.details.index]);
        if (JSON.stringify(got) !== JSON.stringify([["BAD_FRAME", want.op, want.index]])) wrong.push(`${name}: ${JSON.stringify(got)}`);
        if (JSON.stringify(handled) !== JSON.stringify(["msg_a", "msg_b"])) wrong.push(`${name}: handed over ${JSON.stringify(handled)}`);
      }
    });
    assert.deepEqual(wrong, []);
  });
}
