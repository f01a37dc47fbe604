// Lone surrogates: a string holding one ("\ud800" not followed by a low
// surrogate, "\udc00" alone) is no Unicode text, and the server refuses
// JSON holding one whole (INVALID_UTF8). A frame or HTTP answer holding one
// is refused (BAD_FRAME), and a caller's string holding one is refused
// before anything is sent (INVALID_UTF8). Each test failed before its fix
// in src/.
import assert from "node:assert/strict";
import { test } from "node:test";
import { HttpClient, PigeonError } from "../dist/index.js";
import { onSession, rawServer, RAW_CONTRACT, subscribingServer, until, sleep } from "./harness.mjs";

const OPTS = { reconnect: false, pingIntervalMs: 0 };
const msg = (id, data) => `{"id":"msg_${id}","subject":"x","sequence":${id},"data":${data}}`;
const deliver = (id, data) => `{"op":"deliver","sub":"sub_1","attempt":1,"message":${msg(id, data)}}`;

// Data a server may not send (the JSON text as sent), and data it may.
const LONE = [
  String.raw`{"s":"\ud800"}`,
  String.raw`{"s":"a\udc00b"}`,
  String.raw`{"s":"\ud800\u0041"}`,
  String.raw`{"s":"\udbff\udbff\udc00"}`,
  String.raw`{"\ud800":1}`,
  String.raw`["\\\ud800"]`,
];
const WELL_FORMED = [
  String.raw`{"s":"\ud83d\ude00"}`,
  String.raw`{"s":"\\ud800"}`,
  String.raw`{"s":"\\\\ud800","t":"😀"}`,
  String.raw`{"s":"\uD83D\uDE00\u0041"}`,
];

test("a frame holding a lone surrogate is BAD_FRAME, and its delivery reaches no handler", async () => {
  const { srv, socket } = await subscribingServer();
  const errors = [];
  await onSession(srv, { ...OPTS, onError: (e) => errors.push(e) }, async (s) => {
    const seen = [];
    await s.subscribe("x", async (m) => void seen.push(m.id));
    LONE.forEach((d, i) => socket().send(deliver(10 + i, d)));
    socket().send(`{"op":"deliver_batch","sub":"sub_1","deliveries":[{"attempt":1,"message":${msg(30, LONE[0])}}]}`);
    WELL_FORMED.forEach((d, i) => socket().send(deliver(20 + i, d)));
    await until(() => seen.length >= WELL_FORMED.length, 2000, "the well-formed deliveries");
    await sleep(100);
    assert.deepEqual(seen, WELL_FORMED.map((_, i) => `msg_${20 + i}`));
    const bad = errors.filter((e) => e instanceof PigeonError && e.code === "BAD_FRAME" && /lone surrogate/.test(e.message));
    assert.equal(bad.length, LONE.length + 1, errors.map(String).join("; "));
  });
});

test("a call answered by a frame holding a lone surrogate fails BAD_FRAME at once", async () => {
  const srv = await rawServer((ws, f) => ws.send(`{"op":"messages","re":"${f.id}","messages":[${msg(1, LONE[0])}]}`));
  await onSession(srv, { ...OPTS, callTimeoutMs: 5000 }, async (s) => {
    await assert.rejects(s.receive("x"), (e) => e instanceof PigeonError && e.code === "BAD_FRAME" && /lone surrogate/.test(e.message));
  });
});

test("an HTTP answer holding a lone surrogate is BAD_FRAME, an error body's too", async () => {
  let answer;
  const fetch = async () => new Response(answer.body, { status: answer.status, headers: { "content-type": "application/json" } });
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch });
  h.contract = RAW_CONTRACT;
  for (const d of LONE) {
    answer = { status: 200, body: `{"messages":[${msg(1, d)}]}` };
    await assert.rejects(h.receive("x"), (e) => e instanceof PigeonError && e.code === "BAD_FRAME" && /lone surrogate/.test(e.message), d);
  }
  answer = { status: 403, body: String.raw`{"error":{"code":"FORBIDDEN","message":"\udfff"}}` };
  await assert.rejects(h.receive("x"), (e) => e instanceof PigeonError && e.code === "BAD_FRAME" && e.status === 403);
  for (const d of WELL_FORMED) {
    answer = { status: 200, body: `{"messages":[${msg(1, d)}]}` };
    assert.deepEqual((await h.receive("x"))[0].data, JSON.parse(d), d);
  }
});

test("a caller's string holding a lone surrogate is INVALID_UTF8, and nothing is sent", async () => {
  const seen = [];
  const srv = await rawServer((ws, f) => {
    seen.push(f.messageId ?? f.op);
    ws.send(JSON.stringify({ op: "ok", re: f.id }));
  });
  await onSession(srv, { ...OPTS, callTimeoutMs: 5000 }, async (s) => {
    for (const id of ["msg_\ud800", "msg_\udc00", "msg_\ude00\ud83d"]) {
      await assert.rejects(s.ack("x", id), (e) => e instanceof PigeonError && e.code === "INVALID_UTF8", JSON.stringify(id));
    }
    await s.ack("x", "msg_\ud83d\ude00");
    assert.deepEqual(seen, ["msg_\ud83d\ude00"]);
  });
  let fetched = 0;
  const fetch = async () => (fetched++, new Response(`{"status":"accepted","message":${msg(1, "{}")}}`, { status: 202 }));
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch });
  h.contract = RAW_CONTRACT;
  await assert.rejects(h.ack("x", "msg_\ud800"), (e) => e instanceof PigeonError && e.code === "INVALID_UTF8");
  await assert.rejects(h.publish({ subject: "x", type: "t", data: { s: "\udc00" } }), (e) => e instanceof PigeonError && e.code === "INVALID_UTF8");
  assert.equal(fetched, 0);
  await h.publish({ subject: "x", type: "t", data: { s: "\ud83d\ude00" } });
  assert.equal(fetched, 1);
});
