// A publish decision whose sequence is beyond 2^53-1: JSON.parse rounds
// it to another message's sequence, so the client refuses it as it
// refuses such a delivery (BAD_FRAME, naming the message admitted) rather
// than resolve with the wrong number. Each test failed before the fix.
import assert from "node:assert/strict";
import { test } from "node:test";
import { HttpClient, PigeonError } from "../dist/index.js";
import { onSession, RAW_CONTRACT, rawServer } from "./harness.mjs";

const OPTS = { reconnect: false, pingIntervalMs: 0 };
// 2^53 + 1: JSON.parse reads it as 2^53, the sequence of another message.
const BIG = "9007199254740993";
const SAFE = String(2 ** 53 - 1);
const result = (status, id, seq) => `{"status":"${status}","message":{"id":"${id}","subject":"x","sequence":${seq}}}`;

/** Whether e is the refusal of a decision on message id whose sequence the client cannot hold. */
const unheld = (id, status = "accepted") => (e) =>
  e instanceof PigeonError && e.code === "BAD_FRAME" && /2\^53-1/.test(e.message) && e.details.messageId === id && e.details.status === status;

test("a publish decision whose sequence is beyond 2^53-1 is refused, not resolved with a rounded sequence", async () => {
  for (const [status, seq] of [["accepted", BIG], ["duplicate", BIG], ["accepted", "18446744073709551615"], ["accepted", "1e400"], ["accepted", "-1"], ["accepted", "1.5"]]) {
    const srv = await rawServer((ws, f) => {
      if (f.op === "publish") ws.send(`{"op":"decision","re":"${f.id}",${result(status, f.message.id, seq).slice(1)}`);
    });
    await onSession(srv, OPTS, async (s) => {
      await assert.rejects(s.publish({ id: "m_big", subject: "x", data: {} }), unheld("m_big", status), `${status} ${seq}`);
    });
  }
  // The largest sequence the client holds is kept as it was sent.
  const srv = await rawServer((ws, f) => {
    if (f.op === "publish") ws.send(`{"op":"decision","re":"${f.id}",${result("accepted", f.message.id, SAFE).slice(1)}`);
  });
  await onSession(srv, OPTS, async (s) => {
    const d = await s.publish({ id: "m_safe", subject: "x", data: {} });
    assert.equal(d.message.sequence, 2 ** 53 - 1);
  });
});

test("in a publish_batch answer, only the decision whose sequence is beyond 2^53-1 is refused", async () => {
  const ops = [];
  const srv = await rawServer((ws, f) => {
    ops.push(f.op);
    if (f.op !== "publish_batch") return;
    const seqs = [BIG, SAFE, "7"];
    ws.send(`{"op":"decisions","re":"${f.id}","results":[${f.messages.map((m, i) => result("accepted", m.id, seqs[i])).join(",")}]}`);
  });
  await onSession(srv, OPTS, async (s) => {
    const got = await Promise.allSettled(["m_1", "m_2", "m_3"].map((id) => s.publish({ id, subject: "x", data: {} })));
    assert.deepEqual(ops, ["publish_batch"], "the three went in one frame");
    assert.equal(got[0].status, "rejected");
    assert.ok(unheld("m_1")(got[0].reason), String(got[0].reason));
    assert.deepEqual(got.slice(1).map((r) => r.value?.message.sequence), [2 ** 53 - 1, 7]);
  });
});

test("an HTTP publish or release whose sequence is beyond 2^53-1 is refused", async () => {
  const fetch = async (url) => {
    const id = url.includes("/quarantine/") ? "m_released" : "m_http";
    return new Response(result("accepted", id, BIG), { status: 202, headers: { "content-type": "application/json" } });
  };
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch });
  h.contract = RAW_CONTRACT;
  await assert.rejects(h.publish({ id: "m_http", subject: "x", data: {} }), unheld("m_http"));
  await assert.rejects(h.release("q_1"), unheld("m_released"));
});
