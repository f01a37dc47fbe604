// A message's sequence or hops spelled -0 is no broker's: Go decodes both
// as unsigned integers, and strconv.ParseUint takes no sign, so the Go
// client refuses such a message ("field hops must be uint32"), where
// JSON.parse reads -0 as a zero that every check here took. The reader
// finds the spelling in the text, as it finds 5.0 (spelled.ts, sigv.ts),
// however the text spells the member's name and in a long text too: a
// delivery, a receive message or a reply holding one is refused alone,
// BAD_FRAME, and a publish decision holding one fails saying the message
// may have been accepted. -0 where Go reads a signed integer (a lease
// attempt, a signature's v) or in data is left as JSON.parse reads it.
// Each refusal failed before the fix.
import assert from "node:assert/strict";
import { test } from "node:test";
import { HttpClient, PigeonError } from "../dist/index.js";
import { markSpelledAttempts } from "../dist/attempts.js";
import { markSpelledIntegers } from "../dist/sigv.js";
import { spelledNumbers } from "../dist/spelled.js";
import { onSession, RAW_CONTRACT, rawServer, subscribingServer, until } from "./harness.mjs";

const OPTS = { reconnect: false, pingIntervalMs: 0 };

/** A stored message of id at seq, `extra` members appended, its data `data`. */
const message = (id, seq, extra = "", data = `{"n":1}`) => `{"id":"${id}","subject":"x","time":"2026-01-01T00:00:00Z","sequence":${seq},"data":${data}${extra}}`;

test("the text walk finds a number spelled -0, and no other zero", () => {
  const text = `{"a":-0,"b":[0,-0.0,-0e0,-0.5,"-0",-10],"c":{"d":-0}, "e" : -0 }`;
  const got = [...spelledNumbers(text, 4)].map(({ path, spelling }) => `${path.join(".")}=${spelling}`);
  assert.deepEqual(got, ["a=-0", "b.1=-0.0", "b.2=-0e0", "c.d=-0", "e=-0"]);
});

// Each place a frame or an answer holds a message, and how to find it in the parsed text.
const PLACES = [
  ["deliver", (m) => `{"op":"deliver","sub":"sub_1","attempt":1,"message":${m}}`, (f) => f.message],
  ["deliver_batch", (m) => `{"op":"deliver_batch","sub":"sub_1","deliveries":[{"attempt":1,"message":${m}}]}`, (f) => f.deliveries[0].message],
  ["messages frame", (m) => `{"op":"messages","re":"1","messages":[${message("m_0", 1)},${m}],"attempts":[1,1]}`, (f) => f.messages[1]],
  ["HTTP receive", (m) => `{"messages":[${m}],"attempts":[1]}`, (f) => f.messages[0]],
  ["decision", (m) => `{"op":"decision","re":"1","status":"accepted","message":${m}}`, (f) => f.message],
  ["decisions", (m) => `{"op":"decisions","re":"1","results":[{"status":"accepted","message":${m}}]}`, (f) => f.results[0].message],
  ["reply", (m) => `{"op":"reply","re":"1","message":${m}}`, (f) => f.message],
];

test("a message's sequence or hops spelled -0 is marked wherever the text puts it, however it spells the name; data's and a signature's are not", () => {
  const wrong = [];
  const long = `,"pad":"${"p".repeat(1 << 20)}"`; // from 1 MiB on the reader looks with indexOf
  for (const [place, frame, find] of PLACES) {
    for (const [member, naming] of [["sequence", `"sequence"`], ["hops", `"hops"`], ["hops", `"\\u0068ops"`], ["sequence", ` "s\\u0065quence" `]]) {
      for (const [pad, others] of [["", false], [long, false], ["", true], [long, true]]) {
        // others: a signature's v and data's own members spelled -0 beside it, which stay as read.
        const sig = others ? `,"signature":{"kid":"k","alg":"ed25519","sig":"s","v":-0}` : "";
        const data = others ? `{"n":-0,"hops":-0}` : `{"n":1}`;
        const m = member === "sequence" ? message("m_1", 1, pad + sig, data).replace(`"sequence":1`, `${naming}:-0`) : message("m_1", 1, `${pad}${sig},${naming}:-0`, data);
        const text = frame(m);
        const parsed = JSON.parse(text);
        markSpelledIntegers(text, parsed);
        const got = find(parsed);
        const what = `${place}, ${naming}${pad ? ", long" : ""}${others ? ", with others" : ""}`;
        if (got[member]?.spelling !== "-0") wrong.push(`${what}: ${member} ${JSON.stringify(got[member])}`);
        if (others && !(Object.is(got.data.n, -0) && Object.is(got.data.hops, -0))) wrong.push(`${what}: data changed`);
        if (others && !Object.is(got.signature.v, -0)) wrong.push(`${what}: signature.v ${JSON.stringify(got.signature.v)}`);
      }
    }
  }
  assert.deepEqual(wrong, []);
  // A lease attempt is a signed integer to Go (-0 is 0, no lease's): left as the zero read.
  const text = `{"op":"messages","re":"1","messages":[${message("m_1", 1)}],"attempts":[-0.0,-0]}`;
  const parsed = JSON.parse(text);
  markSpelledAttempts(text, parsed);
  assert.equal(parsed.attempts[0].spelling, "-0.0");
  assert.ok(Object.is(parsed.attempts[1], -0));
});

const deliver = (ws, m, attempt = 1) => ws.send(`{"op":"deliver","sub":"sub_1","attempt":${attempt},"message":${m}}`);

test("a delivery whose hops or sequence is spelled -0 is refused alone, BAD_FRAME, handed to no handler and never acked", async () => {
  const acked = [];
  const { srv, socket } = await subscribingServer((ws, f) => {
    if (f.op === "ack") acked.push(...(f.messageIds ?? [f.messageId]));
    ws.send(JSON.stringify({ op: "ok", re: f.id }));
  });
  const errors = [];
  await onSession(srv, { ...OPTS, onError: (e) => errors.push(e) }, async (s) => {
    const got = [];
    await s.subscribe("x", (m) => void got.push(m.id), { maxInFlight: 10 });
    deliver(socket(), message("m_1", 1, `,"hops":-0`));
    deliver(socket(), message("m_2", "-0"));
    socket().send(`{"op":"deliver_batch","sub":"sub_1","deliveries":[{"attempt":1,"message":${message("m_3", 3, `,"hops" : -0`)}},{"attempt":1,"message":${message("m_4", 4, `,"hops":0`)}}]}`);
    deliver(socket(), message("m_5", 5, `,"hops":0`));
    await until(() => got.includes("m_5") && acked.includes("m_5"), 5000, "the last delivery");
    assert.deepEqual(got.sort(), ["m_4", "m_5"]);
    assert.deepEqual(acked.sort(), ["m_4", "m_5"]);
    const refused = errors.filter((e) => e instanceof PigeonError && e.code === "BAD_FRAME").map((e) => [e.details.messageId, e.details.hops ?? e.details.sequence]);
    assert.deepEqual(refused.sort(), [["m_1", "-0"], ["m_2", "-0"], ["m_3", "-0"]], errors.map(String).join("\n"));
  });
});

test("a receive message or a reply whose hops is spelled -0 is refused, BAD_FRAME", async () => {
  const srv = await rawServer((ws, f) => {
    if (f.op === "receive") ws.send(`{"op":"messages","re":"${f.id}","messages":[${message("m_1", 1, `,"hops":-0`)},${message("m_2", 2)}],"attempts":[1,1]}`);
    else if (f.op === "request") ws.send(`{"op":"reply","re":"${f.id}","message":${message("m_r", 1, `,"correlationId":"${f.message.id}","hops":-0`).replace(`"sequence":1,`, "")}}`);
  });
  const errors = [];
  await onSession(srv, { ...OPTS, onError: (e) => errors.push(e) }, async (s) => {
    const got = await s.receive("x", { max: 2 });
    assert.deepEqual(got.map((m) => m.id), ["m_2"]);
    assert.ok(errors.some((e) => e.code === "BAD_FRAME" && e.details.messageId === "m_1" && e.details.hops === "-0"), errors.map(String).join("\n"));
    await assert.rejects(s.request({ id: "req_1", subject: "x", data: {} }), (e) => e instanceof PigeonError && e.code === "BAD_FRAME" && e.details.hops === "-0");
  });
  const fetch = async () => new Response(`{"messages":[${message("m_1", 1, `,"hops":-0`)},${message("m_2", 2)}],"attempts":[1,1]}`, { status: 200 });
  const httpErrors = [];
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch, onError: (e) => httpErrors.push(e) });
  h.contract = RAW_CONTRACT;
  assert.deepEqual((await h.receive("x", { ack: "explicit" })).map((m) => m.id), ["m_2"]);
  assert.equal(httpErrors.length, 1);
});

const mayHaveBeenAccepted = (e) => e instanceof PigeonError && e.code === "BAD_FRAME" && /the message may have been accepted/.test(e.message);

test("a publish decision whose sequence or hops is spelled -0 fails, saying the message may have been accepted", async () => {
  for (const spoil of [(m) => m.replace(`"sequence":7`, `"sequence":-0`), (m) => m.replace(`"data"`, `"hops":-0,"data"`)]) {
    const srv = await rawServer((ws, f) => {
      if (f.op === "publish") ws.send(`{"op":"decision","re":"${f.id}","status":"accepted","message":${spoil(message(f.message.id, 7))}}`);
      if (f.op === "publish_batch") {
        const results = f.messages.map((m, i) => `{"status":"accepted","message":${i === 1 ? spoil(message(m.id, 7)) : message(m.id, 8 + i)}}`);
        ws.send(`{"op":"decisions","re":"${f.id}","results":[${results.join(",")}]}`);
      }
    });
    await onSession(srv, OPTS, async (s) => {
      await assert.rejects(s.publish({ id: "m_1", subject: "x", data: {} }), mayHaveBeenAccepted);
      const got = await Promise.allSettled(["m_a", "m_b", "m_c"].map((id) => s.publish({ id, subject: "x", data: {} })));
      assert.deepEqual(got.map((r) => r.status), ["fulfilled", "rejected", "fulfilled"]);
      assert.ok(mayHaveBeenAccepted(got[1].reason) && got[1].reason.details.index === 1, String(got[1].reason));
    });
    const h = new HttpClient("http://127.0.0.1:9", "t", { fetch: async () => new Response(`{"status":"accepted","message":${spoil(message("m_h", 7))}}`, { status: 202 }) });
    h.contract = RAW_CONTRACT;
    await assert.rejects(h.publish({ subject: "x", data: {} }), mayHaveBeenAccepted);
  }
});
