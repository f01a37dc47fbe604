// A request/reply reply is the message a responder published with
// correlationId the request's id. The client took whatever message the
// server answered a request with: a reply to another request (another
// caller's, carrying its data), or one answering none, was handed over as
// this request's reply. A request without an id, a signature or an
// idempotency key is now sent with an id the client draws (the caller's
// message is not changed), and a reply whose correlationId is missing or
// names another id than the one sent is refused, BAD_FRAME, on both
// transports. With an idempotency key (a repeat stands for the first
// request, whose id the client may not know) any non-empty correlationId
// is taken. Each refusal test failed before the fix.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { test } from "node:test";
import { HttpClient, PigeonError } from "../dist/index.js";
import { onSession, RAW_CONTRACT, rawServer } from "./harness.mjs";

const OPTS = { reconnect: false, pingIntervalMs: 0 };
const DRAWN = /^msg_[0-9a-z]{20}$/;
const badFrame = (re) => (e) => e instanceof PigeonError && e.code === "BAD_FRAME" && re.test(e.message);
const NO_CORRELATION = badFrame(/without a correlationId/);
const ANOTHER = badFrame(/another request/);
// A correlationId that is no string makes the reply no message the broker sends (see test/message_shapes.test.mjs).
const MISSHAPEN = badFrame(/whose correlationId is not a string/);

/** The reply a responder would publish to request message `req`, with `correlationId` `c` (left out when undefined). */
function replyTo(req, c) {
  const m = { id: "msg_reply", subject: "x", type: "reply", data: { for: req.id ?? null }, sequence: 9 };
  if (c !== undefined) m.correlationId = c;
  return m;
}

/**
 * The answers of a hostile server to a request: `correlation(req)` names
 * the reply's correlationId for the request message as sent (undefined:
 * none). Each case: [name, message, correlation, expected: "ok" or a
 * rejection check].
 */
const CASES = [
  ["an id-less request takes the reply naming the id drawn", { subject: "x", data: { n: 1 } }, (r) => r.id, "ok"],
  ["an id-less request refuses a reply to another request", { subject: "x", data: { n: 1 } }, () => "msg_someone_else", ANOTHER],
  ["an id-less request refuses a reply without a correlationId", { subject: "x", data: { n: 1 } }, () => undefined, NO_CORRELATION],
  ["an id-less request refuses an empty correlationId", { subject: "x", data: { n: 1 } }, () => "", NO_CORRELATION],
  ["an id-less request refuses a correlationId that is not a string", { subject: "x", data: { n: 1 } }, () => 7, MISSHAPEN],
  ["a caller's own id is kept and its reply taken", { id: "m_mine", subject: "x", data: {} }, () => "m_mine", "ok"],
  ["a caller's own id refuses a reply to another request", { id: "m_mine", subject: "x", data: {} }, () => "m_other", ANOTHER],
  ["a keyed request takes any non-empty correlationId", { subject: "x", data: {}, idempotencyKey: "k1" }, () => "msg_first_request", "ok"],
  ["a keyed request with an id takes any non-empty correlationId", { id: "m_mine", subject: "x", data: {}, idempotencyKey: "k1" }, () => "msg_first_request", "ok"],
  ["a keyed request refuses a reply without a correlationId", { subject: "x", data: {}, idempotencyKey: "k1" }, () => undefined, NO_CORRELATION],
];

/** Checks what was sent for `message` and what request() made of the reply. */
function checkCase(name, message, before, sent, got, expected) {
  assert.deepEqual(message, before, `${name}: the caller's message is not changed`);
  if (message.id) assert.equal(sent.id, message.id, `${name}: the caller's id is sent`);
  else if (message.idempotencyKey || message.signature) assert.equal(sent.id, undefined, `${name}: no id is drawn`);
  else assert.match(sent.id, DRAWN, `${name}: an id is drawn`);
  const { id: _, ...rest } = sent;
  const { id: __, ...restBefore } = before;
  assert.deepEqual(rest, restBefore, `${name}: the rest of the message is sent as given`);
  if (expected === "ok") {
    assert.ok(!(got instanceof Error), `${name}: ${got?.message}`);
    assert.equal(got.id, "msg_reply", name);
  } else {
    assert.ok(expected(got), `${name}: ${got?.message ?? JSON.stringify(got)}`);
  }
}

test("a WebSocket request takes only the reply that answers it", async () => {
  let correlation;
  const sent = [];
  const srv = await rawServer((ws, f) => {
    if (f.op !== "request") return;
    sent.push(f.message);
    ws.send(JSON.stringify({ op: "reply", re: f.id, message: replyTo(f.message, correlation(f.message)) }));
  });
  await onSession(srv, OPTS, async (s) => {
    for (const [name, message, c, expected] of CASES) {
      correlation = c;
      const before = structuredClone(message);
      const got = await s.request(message, { timeout: 5_000 }).then((m) => m, (e) => e);
      checkCase(name, message, before, sent.at(-1), got, expected);
    }
  });
  // Each id-less request drew its own id.
  const drawn = sent.filter((m) => DRAWN.test(m.id ?? "")).map((m) => m.id);
  assert.equal(new Set(drawn).size, drawn.length);
  assert.ok(drawn.length >= 5);
});

test("a signed WebSocket request without an id is sent as signed, and takes a reply with any correlationId", async () => {
  const sent = [];
  const srv = await rawServer((ws, f) => {
    if (f.op !== "request") return;
    sent.push(f.message);
    ws.send(JSON.stringify({ op: "reply", re: f.id, message: replyTo(f.message, "msg_whatever") }));
  });
  const message = { subject: "x", data: {}, signature: { v: 2, kid: "sig_k", alg: "ed25519", value: "AA" } };
  const before = structuredClone(message);
  await onSession(srv, OPTS, async (s) => {
    const got = await s.request(message);
    assert.equal(got.id, "msg_reply");
  });
  assert.deepEqual(message, before);
  assert.deepEqual(sent, [before]);
});

/** A raw HTTP server answering POST /v1/requests with `answer(body)`: a reply message. */
async function httpServer(answer) {
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      if (req.method !== "POST" || req.url !== "/v1/requests") {
        res.writeHead(404, { "content-type": "application/json" });
        res.end(`{"error":{"code":"NOT_FOUND","message":"no"}}`);
        return;
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ status: "reply", message: answer(JSON.parse(body)) }));
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${server.address().port}`, stop: () => new Promise((r) => server.close(r)) };
}

test("an HTTP request takes only the reply that answers it", async () => {
  let correlation;
  const sent = [];
  const srv = await httpServer((body) => {
    sent.push(body.message);
    return replyTo(body.message, correlation(body.message));
  });
  try {
    const h = new HttpClient(srv.url, "t");
    h.contract = RAW_CONTRACT;
    for (const [name, message, c, expected] of CASES) {
      correlation = c;
      const before = structuredClone(message);
      const got = await h.request(message, { timeout: 5_000 }).then((m) => m, (e) => e);
      checkCase(name, message, before, sent.at(-1), got, expected);
    }
  } finally {
    await srv.stop();
  }
  const drawn = sent.filter((m) => DRAWN.test(m.id ?? "")).map((m) => m.id);
  assert.equal(new Set(drawn).size, drawn.length);
  assert.ok(drawn.length >= 5);
});
