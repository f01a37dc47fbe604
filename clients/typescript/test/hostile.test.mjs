// A hostile or buggy server: a WebSocket endpoint of the test's own sends
// what a Pigeon server never does; the client bounds what it costs.
import assert from "node:assert/strict";
import { test } from "node:test";
import { connect } from "../dist/index.js";
import { until, sleep, wsServer } from "./harness.mjs";

const CONTRACT = { id: "ctr_raw", principal: "p", subjects: [], issuedAt: "", expiresAt: "", region: "uk" };

/** A raw endpoint: answers negotiate, then hands each frame to onFrame(ws, f). */
async function rawServer(onFrame) {
  const wss = await wsServer();
  wss.on("connection", (ws) => {
    ws.on("message", (raw) => {
      const f = JSON.parse(raw.toString());
      if (f.op === "negotiate") ws.send(JSON.stringify({ op: "contract", re: f.id, contract: CONTRACT, maxFrame: 1 << 20 }));
      else onFrame(ws, f);
    });
  });
  const stop = async () => {
    for (const c of wss.clients) c.terminate();
    await new Promise((r) => wss.close(r));
  };
  return { url: `ws://127.0.0.1:${wss.address().port}/v1/ws`, wss, stop };
}

const msg = (i) => ({ id: `msg_${i}`, subject: "x", sequence: i, data: {} });

test("deliveries for subscriptions the session never opened cost a bounded number of unsubscribes", async () => {
  const unsubs = [];
  const srv = await rawServer((ws, f) => {
    if (f.op === "unsubscribe") unsubs.push({ ws, f }); // never answered, at first
    else if (f.op === "ping") {
      for (let i = 0; i < 1000; i++) ws.send(JSON.stringify({ op: "deliver", sub: `sub_never_${i}`, attempt: 1, message: msg(i) }));
      ws.send(JSON.stringify({ op: "deliver_batch", sub: "sub_never_batch", deliveries: [{ attempt: 1, message: msg(1) }] }));
      for (let i = 0; i < 1000; i++) ws.send(JSON.stringify({ op: "unsubscribed", sub: `sub_gone_${i}` }));
      ws.send(JSON.stringify({ op: "pong", re: f.id }));
    }
  });
  try {
    const s = await connect(srv.url, "t", ["x"], { reconnect: false, pingIntervalMs: 0, onError: () => {} });
    try {
      await s.ping();
      await sleep(200);
      assert.ok(unsubs.length > 0, "no unsubscribe sent");
      assert.ok(unsubs.length <= 64, `${unsubs.length} unsubscribes in flight for subscriptions never opened`);
      // Once answered, they are forgotten: new ones may follow.
      const n = unsubs.length;
      for (const { ws, f } of unsubs.splice(0)) ws.send(JSON.stringify({ op: "ok", re: f.id }));
      await sleep(100);
      await s.ping();
      await until(() => unsubs.length > 0, 2000, "unsubscribes after the first were answered");
      assert.ok(unsubs.length <= 64, `${unsubs.length} unsubscribes in flight`);
      assert.ok(n > 0);
    } finally {
      for (const { ws, f } of unsubs.splice(0)) ws.send(JSON.stringify({ op: "ok", re: f.id }));
      await s.close({ timeoutMs: 1000 });
    }
  } finally {
    await srv.stop();
  }
});

test("a server that ignores the window cannot make a subscription queue deliveries without end", async () => {
  const acks = [];
  let subscribed;
  const srv = await rawServer((ws, f) => {
    if (f.op === "subscribe") {
      subscribed = f;
      ws.send(JSON.stringify({ op: "subscribed", re: f.id, sub: "sub_1" }));
      const deliveries = [];
      for (let i = 1; i <= 1000; i++) deliveries.push({ attempt: 1, message: msg(i) });
      ws.send(JSON.stringify({ op: "deliver_batch", sub: "sub_1", deliveries }));
    } else if (f.op === "ack") {
      acks.push(...(f.messageIds ?? [f.messageId]));
      ws.send(JSON.stringify({ op: "ok", re: f.id }));
    } else if (f.op === "unsubscribe" || f.op === "nack") ws.send(JSON.stringify({ op: "ok", re: f.id }));
  });
  try {
    const errors = [];
    const s = await connect(srv.url, "t", ["x"], { reconnect: false, pingIntervalMs: 0, onError: (e) => errors.push(e) });
    try {
      let release;
      const gate = new Promise((r) => (release = r));
      let handled = 0;
      await s.subscribe(
        "x",
        async () => {
          handled++;
          await gate;
        },
        { window: 4 },
      );
      assert.equal(subscribed.window, 4);
      await sleep(200);
      release();
      await until(() => acks.length >= handled && handled > 0, 2000, "the acks");
      await sleep(200);
      // One running and the window's four queued: the rest were left unanswered.
      assert.ok(handled <= 5, `${handled} deliveries handled with a window of 4`);
      assert.ok(errors.some((e) => /beyond the subscription's window/.test(e.message)), "the overflow was not reported");
    } finally {
      await s.close({ timeoutMs: 1000 });
    }
  } finally {
    await srv.stop();
  }
});

test("an id or subject of '..' or '.' cannot move an HTTP call to another route", async () => {
  const { HttpClient } = await import("../dist/index.js");
  const sent = [];
  const fetch = async (url, init) => {
    sent.push(`${init.method} ${new URL(url).pathname}`);
    return new Response("{}", { status: 200, headers: { "content-type": "application/json" } });
  };
  const h = new HttpClient("http://127.0.0.1:9", "admin-token", { fetch });
  const calls = [
    () => h.removeRole("..", "admin"), // DELETE /v1/roles/admin
    () => h.removeRole("acct", ".."), // DELETE /v1/accounts/acct
    () => h.addRole("..", "admin"),
    () => h.publishKeys(".", []),
    () => h.fetchKeys(""),
    () => h.release(".."),
    () => h.receive(".."),
    () => h.revoke(".."),
  ];
  for (const call of calls) {
    await assert.rejects(call(), (e) => e.code === "INVALID_ARGUMENT", String(call));
  }
  assert.deepEqual(sent, [], "calls were sent");
  // Dots inside a segment are plain text.
  await h.fetchKeys("a..b").catch(() => undefined);
  assert.deepEqual(sent, ["GET /v1/accounts/a..b/keys"]);
});

test("a server that upgrades and never answers negotiate fails connect at the connect timeout", async () => {
  const srv = await rawServer(() => {});
  // rawServer answers negotiate: this one takes the connection and stays silent.
  srv.wss.removeAllListeners("connection");
  try {
    const started = Date.now();
    const p = connect(srv.url, "t", ["x"], { reconnect: false, pingIntervalMs: 0, connectTimeoutMs: 300 }).then(
      (s) => s,
      (e) => e,
    );
    const r = await Promise.race([p, sleep(5_000).then(() => "hang")]);
    assert.notEqual(r, "hang", "connect still waits 5 s after a 300 ms connect timeout");
    assert.equal(r.code, "TIMEOUT", String(r));
    assert.ok(Date.now() - started < 3_000);
  } finally {
    await srv.stop();
  }
});

test("a call the server never answers fails at callTimeoutMs, and its late answer is dropped quietly", async () => {
  const held = [];
  const srv = await rawServer((ws, f) => {
    if (f.op === "publish" || f.op === "receive") held.push({ ws, f }); // never answered, at first
    else if (f.op === "ping") ws.send(JSON.stringify({ op: "pong", re: f.id }));
  });
  const errors = [];
  try {
    const s = await connect(srv.url, "t", ["x"], { reconnect: false, pingIntervalMs: 0, callTimeoutMs: 200, onError: (e) => errors.push(e) });
    try {
      const r = await Promise.race([s.publish({ subject: "x", data: {} }).then((d) => d, (e) => e), sleep(5_000).then(() => "hang")]);
      assert.notEqual(r, "hang", "publish still waits 5 s after a 200 ms call timeout");
      assert.equal(r.code, "TIMEOUT", String(r));
      const p = await Promise.race([s.receive("x").then((d) => d, (e) => e), sleep(5_000).then(() => "hang")]);
      assert.equal(p.code, "TIMEOUT", String(p));
      // The answers come late: nothing to report, and the session goes on.
      for (const { ws, f } of held.splice(0)) ws.send(JSON.stringify({ op: "error", re: f.id, error: { code: "INTERNAL", message: "late" } }));
      await s.ping();
      assert.deepEqual(errors.map(String), []);
    } finally {
      await s.close({ timeoutMs: 1000 });
    }
  } finally {
    await srv.stop();
  }
});

test("a call bound beyond what a timer holds waits instead of failing at once", async () => {
  const held = [];
  const srv = await rawServer((ws, f) => {
    if (f.op === "request") held.push({ ws, f });
  });
  try {
    // setTimeout fires at once for delays beyond 2^31-1 ms.
    const s = await connect(srv.url, "t", ["x"], { reconnect: false, pingIntervalMs: 0, callTimeoutMs: 2 ** 40 });
    try {
      const early = [];
      s.receive("x").catch((e) => early.push(e));
      const answered = s.request({ subject: "x", data: {} }, { timeout: 2 ** 40 }).then((m) => m, (e) => e);
      await until(() => held.length === 1, 2000, "the request reached the server");
      await sleep(100);
      assert.deepEqual(early.map(String), []);
      const { ws, f } = held[0];
      ws.send(JSON.stringify({ op: "reply", re: f.id, message: { ...msg(1), correlationId: f.message.id } }));
      const m = await answered;
      assert.equal(m.id, "msg_1", String(m));
    } finally {
      await s.close({ timeoutMs: 1000 });
    }
  } finally {
    await srv.stop();
  }
});

test("callTimeoutMs must be a finite, non-negative number", async () => {
  for (const v of [-1, Number.NaN, Infinity]) {
    await assert.rejects(connect("ws://127.0.0.1:1/v1/ws", "t", ["x"], { reconnect: false, callTimeoutMs: v }), (e) => e.code === "INVALID_ARGUMENT");
  }
});

test("timers given more than 2^31 ms wait instead of firing at once", async () => {
  let pings = 0;
  const srv = await rawServer((ws, f) => {
    if (f.op === "ping") {
      pings++;
      ws.send(JSON.stringify({ op: "pong", re: f.id }));
    }
  });
  try {
    // connectTimeoutMs bounds the handshake and the negotiation; the ping
    // interval is a setInterval: each was taken as 1 ms.
    const s = await connect(srv.url, "t", ["x"], { reconnect: false, connectTimeoutMs: 2 ** 40, pingIntervalMs: 2 ** 40, pingTimeoutMs: 2 ** 40 });
    try {
      await sleep(200);
      assert.equal(pings, 0, "pings sent with an interval of 2^40 ms");
    } finally {
      await s.close({ timeoutMs: 1000 });
    }
  } finally {
    await srv.stop();
  }
  const { HttpClient } = await import("../dist/index.js");
  let aborted = false;
  const fetch = async (_url, init) => {
    await sleep(100);
    aborted = init.signal.aborted;
    return new Response(`{"keys":[]}`, { status: 200, headers: { "content-type": "application/json" } });
  };
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch, timeoutMs: 2 ** 40 });
  await h.fetchKeys("a");
  assert.equal(aborted, false, "the HTTP call was aborted at once");
});

test("a subscribe answered with a live subscription's id is refused, and the first keeps its deliveries", async () => {
  let n = 0;
  let unsubs = 0;
  const srv = await rawServer((ws, f) => {
    if (f.op === "subscribe") {
      n++;
      ws.send(JSON.stringify({ op: "subscribed", re: f.id, sub: "sub_1" })); // the same id both times
      if (n === 2) ws.send(JSON.stringify({ op: "deliver", sub: "sub_1", attempt: 1, message: msg(1) }));
    } else if (f.op === "unsubscribe") {
      unsubs++;
      ws.send(JSON.stringify({ op: "ok", re: f.id }));
    } else if (f.op === "ack" || f.op === "nack") ws.send(JSON.stringify({ op: "ok", re: f.id }));
  });
  try {
    const s = await connect(srv.url, "t", ["x"], { reconnect: false, pingIntervalMs: 0, onError: () => {} });
    try {
      const first = [];
      const second = [];
      await s.subscribe("x", async (m) => void first.push(m.id));
      await assert.rejects(
        s.subscribe("x", async (m) => void second.push(m.id)),
        (e) => e.code === "BAD_FRAME" && /second subscription/.test(e.message),
      );
      await until(() => first.length === 1, 2000, "the first subscription's delivery");
      assert.deepEqual(second, []);
      assert.equal(unsubs, 0, "the first's subscription is not ended");
    } finally {
      await s.close({ timeoutMs: 1000 });
    }
  } finally {
    await srv.stop();
  }
});
