// Frames a server may not send: an object with two members of one name
// (which JSON.parse reads as the last), and a close whose reason is a
// stable code. Each test failed before its fix in src/.
import assert from "node:assert/strict";
import { test } from "node:test";
import { connect, HttpClient, PigeonError } from "../dist/index.js";
import { ok, onSession, rawServer, RAW_CONTRACT, subscribingServer, until, sleep } from "./harness.mjs";

const OPTS = { reconnect: false, pingIntervalMs: 0 };
const msg = (id, rest = `,"sequence":${id},"data":{}`) => `{"id":"msg_${id}","subject":"x"${rest}}`;

test("a frame holding a duplicate key is BAD_FRAME, and its delivery reaches no handler", async () => {
  const { srv, socket } = await subscribingServer();
  const errors = [];
  await onSession(srv, { ...OPTS, onError: (e) => errors.push(e) }, async (s) => {
    const seen = [];
    await s.subscribe("x", async (m) => void seen.push(`${m.id}@${m.sequence}`));
    const hostile = [
      `{"op":"deliver","sub":"sub_1","attempt":1,"message":${msg(7, `,"sequence":7,"sequence":70,"data":{}`)}}`,
      `{"op":"deliver","sub":"sub_1","attempt":1,"message":${msg(8, `,"sequence":8,"data":{"a":1,"a":2}`)}}`,
      `{"op":"deliver","sub":"sub_1","attempt":1,"message":${msg(6, `,"sequence":6,"data":{"n":{"b":[{"c":1,"\\u0063":2}]}}`)}}`,
      `{"op":"deliver","sub":"sub_1","attempt":1,"attempt":2,"message":${msg(5)}}`,
      `{"op":"deliver","sub":"sub_other","sub":"sub_1","attempt":1,"message":${msg(4)}}`,
      `{"op":"deliver_batch","sub":"sub_1","deliveries":[{"attempt":1,"message":${msg(3, `,"id":"msg_33","sequence":3,"data":{}`)}}]}`,
      `{"op":"error","error":{"code":"FORBIDDEN","code":"INTERNAL","message":"m"}}`,
    ];
    for (const h of hostile) socket().send(h);
    socket().send(`{"op":"deliver","sub":"sub_1","attempt":1,"message":${msg(9, `,"sequence":9,"data":{"a":"\\"a\\":1","b":{"a":2}}`)}}`);
    await until(() => seen.length > 0, 2000, "the well-formed delivery");
    await sleep(100);
    assert.deepEqual(seen, ["msg_9@9"], "no delivery of a frame with a duplicate key was handed over");
    const bad = errors.filter((e) => e instanceof PigeonError && e.code === "BAD_FRAME" && /twice/.test(e.message));
    assert.equal(bad.length, hostile.length, errors.map(String).join("; "));
    assert.equal(bad[0].kind, "transport");
  });
});

test("a call answered by a frame holding a duplicate key fails BAD_FRAME at once", async () => {
  const srv = await rawServer((ws, f) => {
    if (f.op === "receive") ws.send(`{"op":"messages","re":"${f.id}","messages":[],"messages":[${msg(1)}]}`);
    else if (f.op === "ack") ws.send(`{"op":"error","re":"${f.id}","error":{"code":"FORBIDDEN","code":"NOT_FOUND","message":"m"}}`);
    else if (f.op === "renew") ws.send(`{"op":"contract","re":"${f.id}","contract":{"id":"ctr_2","id":"ctr_3","principal":"p","subjects":[]}}`);
    else if (f.op === "publish") ws.send(`{"op":"decision","re":"${f.id}","status":"accepted","message":${msg(1, `,"sequence":1,"sequence":2,"data":{}`)}}`);
    else if (f.op === "publish_batch") {
      const results = f.messages.map(() => `{"status":"accepted","status":"duplicate","message":${msg(1)}}`);
      ws.send(`{"op":"decisions","re":"${f.id}","results":[${results.join(",")}]}`);
    } else ok(ws, f);
  });
  const errors = [];
  await onSession(srv, { ...OPTS, callTimeoutMs: 5000, onError: (e) => errors.push(e) }, async (s) => {
    const calls = {
      receive: () => s.receive("x"),
      "ack (an error answer)": () => s.ack("x", "msg_1"),
      renew: () => s.renew(),
      publish: () => s.publish({ subject: "x", type: "t", data: {} }),
    };
    for (const [name, call] of Object.entries(calls)) {
      const t = Date.now();
      await assert.rejects(call(), (e) => e instanceof PigeonError && e.code === "BAD_FRAME" && /twice/.test(e.message), name);
      assert.ok(Date.now() - t < 2000, `${name} waited ${Date.now() - t} ms`);
    }
    assert.ok(!s.closed);
  });
});

test("an HTTP answer holding a duplicate key is BAD_FRAME, an error body's too", async () => {
  let answer = { status: 200, body: "" };
  const fetch = async () => new Response(answer.body, { status: answer.status, headers: { "content-type": "application/json" } });
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch });
  h.contract = RAW_CONTRACT;
  for (const [status, body] of [
    [202, `{"status":"accepted","message":${msg(8, `,"sequence":8,"sequence":70,"data":{}`)}}`],
    [202, `{"status":"accepted","message":${msg(6, `,"sequence":6,"data":{"n":[{"c":1,"\\u0063":2}]}`)}}`],
    [200, `{"status":"duplicate","status":"accepted","message":${msg(5)}}`],
    [403, `{"error":{"code":"FORBIDDEN","code":"NOT_FOUND","message":"m"}}`],
  ]) {
    answer = { status, body };
    await assert.rejects(h.publish({ subject: "x", type: "t", data: {} }), (e) => e instanceof PigeonError && e.code === "BAD_FRAME" && /twice/.test(e.message) && e.status === status, body);
  }
  // The same text without the second member is taken.
  answer = { status: 202, body: `{"status":"accepted","message":${msg(8)}}` };
  assert.equal((await h.publish({ subject: "x", type: "t", data: {} })).message.sequence, 8);
});

test("an answer whose re is there twice answers no call: it is reported", async () => {
  const srv = await rawServer((ws, f) => ws.send(`{"op":"ok","re":"${f.id}","re":"${f.id}"}`));
  const errors = [];
  await onSession(srv, { ...OPTS, callTimeoutMs: 300, onError: (e) => errors.push(e) }, async (s) => {
    await assert.rejects(s.ack("x", "msg_1"), (e) => e instanceof PigeonError && e.code !== "BAD_FRAME");
    assert.ok(errors.some((e) => e.code === "BAD_FRAME" && /"re" twice/.test(e.message)), errors.map(String).join("; "));
  });
});

for (const [reason, want] of [
  ["UNAUTHENTICATED", "UNAUTHENTICATED"],
  ["GRANT_REVOKED", "GRANT_REVOKED"],
  ["write stalled", "SESSION_CLOSED"],
  ["unauthenticated", "SESSION_CLOSED"],
  ["toString", "SESSION_CLOSED"],
]) {
  test(`a close 1008 ${JSON.stringify(reason)} fails the waiting call and later ones with ${want}`, async () => {
    const srv = await rawServer((ws, f) => {
      if (f.op === "receive") ws.close(1008, reason);
      else ok(ws, f);
    });
    const errors = [];
    await onSession(srv, { ...OPTS, onError: (e) => errors.push(e) }, async (s) => {
      await assert.rejects(s.receive("x"), (e) => e instanceof PigeonError && e.code === want && e.message.includes(reason), "the waiting call");
      await until(() => s.closed, 2000, "the session's end");
      await assert.rejects(s.ack("x", "msg_1"), (e) => e instanceof PigeonError && e.code === want, "a later call");
      if (want === "UNAUTHENTICATED") assert.equal(errors.at(-1)?.kind, "auth");
    });
  });
}

test("the codes a close's reason is taken as are the server's (codes.json)", async () => {
  const { readFileSync } = await import("node:fs");
  const { CONFORMANCE } = await import("./harness.mjs");
  const { isServerCode } = await import("../dist/errors.js");
  const codes = JSON.parse(readFileSync(`${CONFORMANCE}/codes.json`, "utf8")).codes.map((c) => c.code);
  assert.ok(codes.length > 50);
  for (const c of codes) assert.ok(isServerCode(c), c);
  for (const c of ["BAD_FRAME", "CLOSED", "TIMEOUT", "toString", "__proto__", "", "unauthenticated"]) assert.ok(!isServerCode(c), c);
});
