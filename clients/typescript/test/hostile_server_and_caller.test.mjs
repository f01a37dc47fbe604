// A hostile or buggy server, a hostile network, a careless user.
// Each test failed before its fix in src/.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { test } from "node:test";
import { connect, HttpClient, PigeonError, RetryAfter, fromWire, statusOf } from "../dist/index.js";
import { fakeWebSocket, ok, onSession, RAW_CONTRACT, rawServer, until, sleep } from "./harness.mjs";

const CONTRACT = RAW_CONTRACT;
const OPTS = { reconnect: false, pingIntervalMs: 0 };



/** Session options that reconnect at once and stay quiet. */
const RESUMING = { reconnect: { initialDelayMs: 10, maxDelayMs: 50 }, pingIntervalMs: 0, onError: () => {} };

/**
 * A raw endpoint that records each subscribe's start (starts), subscribes
 * from 10 as sub_<connection>, and sends first on the first connection's.
 */
async function resumingServer(first) {
  const starts = [];
  const srv = await rawServer((ws, f, n) => {
    if (f.op !== "subscribe") return ok(ws, f);
    starts.push(f.start);
    ws.send(JSON.stringify({ op: "subscribed", re: f.id, sub: `sub_${n}`, from: 10 }));
    if (n === 1) for (const frame of first) ws.send(frame);
  });
  return { starts, srv };
}

const msg = (i, over = {}) => ({ id: `msg_${i}`, subject: "x", sequence: i, data: {}, ...over });

test("a frame whose fields cannot be turned into text is reported, and the reader goes on", async () => {
  const srv = await rawServer((ws, f) => {
    if (f.op === "receive") {
      // {"toString": 1}: String() of it throws a TypeError in the reader.
      ws.send(`{"op":"messages","re":{"toString":1},"messages":[]}`);
      ws.send(`{"op":"messages","re":${JSON.stringify(f.id)},"messages":[]}`);
    }
  });
  const errors = [];
  await onSession(srv, { ...OPTS, onError: (e) => errors.push(e) }, async (s) => {
    assert.deepEqual(await s.receive("x"), []);
    await s.ping();
    assert.ok(errors.some((e) => e.code === "BAD_FRAME"), errors.map(String).join("; "));
  });
});

test("a deeply nested delivery is reported, not thrown out of the reader", async () => {
  let ws1;
  const srv = await rawServer((ws, f) => {
    if (f.op === "subscribe") {
      ws1 = ws;
      ws.send(JSON.stringify({ op: "subscribed", re: f.id, sub: "sub_1", from: 1 }));
    } else ok(ws, f);
  });
  const errors = [];
  await onSession(srv, { ...OPTS, onError: (e) => errors.push(e) }, async (s) => {
    let release;
    const gate = new Promise((r) => (release = r));
    const got = [];
    await s.subscribe("x", async (m) => {
      got.push(m.id);
      await gate;
    }, { ack: "none" });
    const deep = "[".repeat(200_000) + "]".repeat(200_000);
    ws1.send(JSON.stringify({ op: "deliver", sub: "sub_1", attempt: 1, message: msg(1) }));
    // The handler is busy: the next one waits, and its size is measured.
    ws1.send(`{"op":"deliver","sub":"sub_1","attempt":1,"message":{"id":"msg_2","subject":"x","sequence":2,"data":${deep}}}`);
    ws1.send(JSON.stringify({ op: "deliver", sub: "sub_1", attempt: 1, message: msg(3) }));
    await sleep(200);
    release();
    await until(() => got.includes("msg_3"), 2000, "the delivery after the deep one");
    await s.ping();
  });
});

test("sequences out of range never go back on the wire, nor hide an unhandled one from the resume", async () => {
  // 1e400 parses as Infinity, 18446744073709551616 is 2^64.
  const { starts, srv } = await resumingServer([
    `{"op":"deliver_batch","sub":"sub_1","deliveries":[` +
      `{"attempt":1,"message":{"id":"m11","subject":"x","sequence":11,"data":{}}},` +
      `{"attempt":1,"message":{"id":"mneg","subject":"x","sequence":-1,"data":{}}},` +
      `{"attempt":1,"message":{"id":"mfrac","subject":"x","sequence":1.5,"data":{}}},` +
      `{"attempt":1,"message":{"id":"minf","subject":"x","sequence":1e400,"data":{}}},` +
      `{"attempt":1,"message":{"id":"mbig","subject":"x","sequence":18446744073709551616,"data":{}}}]}`,
  ]);
  await onSession(srv, RESUMING, async (s) => {
    const seen = [];
    await s.subscribe("x", async (m) => {
      seen.push(m.id);
      if (m.id === "m11" || m.id === "mneg" || m.id === "mfrac") throw new Error("not now");
    });
    // The four a number cannot hold exactly are refused (BAD_FRAME), not
    // handed over: an answer could not name them.
    await until(() => seen.length === 1, 2000, "the deliveries");
    await sleep(50);
    assert.deepEqual(seen, ["m11"]);
    for (const c of srv.wss.clients) c.terminate();
    await until(() => starts.length === 2, 3000, "the resume");
    // Resumed at the one unhandled delivery with a real sequence.
    assert.deepEqual(starts[1], { sequence: 11 });
  });
});

test("an at-most-once subscription resumes at a real sequence after a delivery numbered 1e400", async () => {
  const { starts, srv } = await resumingServer([
    `{"op":"deliver","sub":"sub_1","attempt":1,"message":{"id":"m12","subject":"x","sequence":12,"data":{}}}`,
    `{"op":"deliver","sub":"sub_1","attempt":1,"message":{"id":"minf","subject":"x","sequence":1e400,"data":{}}}`,
  ]);
  await onSession(srv, RESUMING, async (s) => {
    const seen = [];
    await s.subscribe("x", async (m) => void seen.push(m.id), { ack: "none" });
    await until(() => seen.length === 1, 2000, "the deliveries");
    await sleep(50);
    assert.deepEqual(seen, ["m12"], "minf refused, not handed over");
    for (const c of srv.wss.clients) c.terminate();
    await until(() => starts.length === 2, 3000, "the resume");
    assert.deepEqual(starts[1], { sequence: 13 });
  });
});

test("subscribe options out of range are refused before anything is sent", async () => {
  const subscribes = [];
  const srv = await rawServer((ws, f) => {
    if (f.op === "subscribe") {
      subscribes.push(f);
      ws.send(JSON.stringify({ op: "subscribed", re: f.id, sub: `sub_${subscribes.length}` }));
    } else ok(ws, f);
  });
  await onSession(srv, OPTS, async (s) => {
    const bad = [
      { window: 0 }, // every delivery would be left unanswered until it is exhausted
      { window: -1 },
      { window: 1.5 },
      { window: Number.NaN }, // sent as null: the server's window, and no bound in the client
      { window: 10_001 },
      { maxInFlight: Number.NaN }, // no handler would ever run
      { maxInFlight: -3 },
      { maxInFlight: 2.5 },
      { maxInFlight: 10_001 },
      { start: { sequence: Number.NaN } },
      { start: { sequence: -1 } },
      { start: { sequence: 2 ** 60 } },
      { start: { sequence: 1.5 } },
    ];
    for (const o of bad) {
      await assert.rejects(s.subscribe("x", async () => {}, o), (e) => e instanceof PigeonError && e.code === "INVALID_ARGUMENT", JSON.stringify(o));
    }
    assert.deepEqual(subscribes, []);
    await s.subscribe("x", async () => {}, { window: 1, maxInFlight: 10_000, start: { sequence: 1 } });
    assert.equal(subscribes.length, 1);
  });
});

test("session options out of range are refused before dialling", async () => {
  let connections = 0;
  const srv = await rawServer(() => {}, { onConnection: () => connections++ });
  try {
    const bad = [
      { maxPendingPublishes: 0 }, // every publish would wait for ever
      { maxPendingPublishes: Number.NaN },
      { maxPendingPublishes: 1.5 },
      { pingIntervalMs: Number.NaN }, // a ping every millisecond
      { pingIntervalMs: -1 },
      { pingTimeoutMs: Number.NaN },
      { pingTimeoutMs: 0 },
      { connectTimeoutMs: Number.NaN },
      { connectTimeoutMs: 0 },
      { reconnect: { initialDelayMs: 0 } }, // redialled in a hot loop
      { reconnect: { initialDelayMs: Number.NaN } },
      { reconnect: { maxDelayMs: 0 } },
      { reconnect: { maxDelayMs: -5 } },
      { reconnect: { maxAttempts: Number.NaN } },
      { reconnect: { maxAttempts: -1 } },
      { ttl: Number.NaN },
    ];
    for (const o of bad) {
      await assert.rejects(connect(srv.url, "t", ["x"], { ...OPTS, ...o }), (e) => e instanceof PigeonError && e.code === "INVALID_ARGUMENT", JSON.stringify(o));
    }
    assert.equal(connections, 0);
    const s = await connect(srv.url, "t", ["x"], { ...OPTS, maxPendingPublishes: 1, reconnect: { initialDelayMs: 1, maxDelayMs: 1, maxAttempts: Infinity } });
    await s.close({ timeoutMs: 1000 });
  } finally {
    await srv.stop();
  }
});

test("an onReconnect that throws neither ends the session nor opens more connections", async () => {
  const srv = await rawServer((ws, f) => ok(ws, f));
  const errors = [];
  try {
    const s = await connect(srv.url, "t", ["x"], {
      reconnect: { initialDelayMs: 10, maxDelayMs: 20, maxAttempts: 3 },
      pingIntervalMs: 0,
      onError: (e) => errors.push(e),
      onReconnect: () => {
        throw new Error("the application's bug");
      },
    });
    try {
      for (const c of srv.wss.clients) c.terminate();
      await until(() => srv.connections() >= 2, 3000, "the reconnect");
      await sleep(300);
      assert.equal(srv.connections(), 2, "connections opened after the first reconnect succeeded");
      assert.equal(s.closed, false, String(s.error));
      await s.ping();
    } finally {
      await s.close({ timeoutMs: 1000 });
    }
  } finally {
    await srv.stop();
  }
});

test("a second close waits for the first to finish", async () => {
  let ws1;
  const srv = await rawServer((ws, f) => {
    if (f.op === "subscribe") {
      ws1 = ws;
      ws.send(JSON.stringify({ op: "subscribed", re: f.id, sub: "sub_1" }));
      ws.send(JSON.stringify({ op: "deliver", sub: "sub_1", attempt: 1, message: msg(1) }));
    } else ok(ws, f);
  });
  try {
    const s = await connect(srv.url, "t", ["x"], OPTS);
    const order = [];
    let started = false;
    const sub = await s.subscribe("x", async () => {
      started = true;
      await sleep(300);
      order.push("handler");
    });
    await until(() => started, 2000, "the handler");
    const first = s.close({ timeoutMs: 5000 });
    await s.close();
    order.push("second");
    // The second resolves once the first has done its work: the handler
    // finished, the subscription ended.
    assert.deepEqual(order, ["handler", "second"]);
    assert.equal(sub.finished, true);
    await first;
    assert.ok(ws1);
  } finally {
    await srv.stop();
  }
});

test("deliveries that come on a connection the session let go are not handed to handlers", async () => {
  const conns = [];
  const srv = await rawServer((ws, f, n) => {
    if (f.op === "subscribe") {
      // Every connection numbers its subscriptions from 1, as a server may.
      ws.send(JSON.stringify({ op: "subscribed", re: f.id, sub: "sub_1", from: 1 }));
      if (n === 1) ws._socket.pause(); // reads nothing more: never sees the close
    } else ok(ws, f);
  }, { onConnection: (ws) => conns.push(ws) });
  await onSession(srv, { ...OPTS, onError: () => {} }, async (s) => {
    const seen = [];
    await s.subscribe("x", async (m) => void seen.push(m.id));
    await s.reconnect();
    // The old connection, still open on the server's side, delivers.
    conns[0].send(JSON.stringify({ op: "deliver", sub: "sub_1", attempt: 1, message: msg(7, { id: "stale" }) }));
    conns[1].send(JSON.stringify({ op: "deliver", sub: "sub_1", attempt: 1, message: msg(8, { id: "fresh" }) }));
    await until(() => seen.includes("fresh"), 2000, "the delivery on the new connection");
    await sleep(100);
    assert.deepEqual(seen, ["fresh"]);
  });
});


test("a connection lost as its contract arrived does not leave the session holding a dead connection", async () => {
  const { Fake, socks } = fakeWebSocket((sock, f, n) => {
    if (f.op === "negotiate") {
      sock.push({ op: "contract", re: f.id, contract: CONTRACT });
      // The second connection closes in the same turn as its contract.
      if (n === 2) sock.drop();
    } else if (f.op === "ping") sock.push({ op: "pong", re: f.id });
  });
  const s = await connect("ws://fake/v1/ws", "t", ["x"], { WebSocket: Fake, pingIntervalMs: 0, reconnect: { initialDelayMs: 5, maxDelayMs: 10 }, onError: () => {} });
  try {
    socks[0].drop();
    await until(() => socks.length >= 3, 2000, "a third connection after the second was lost");
    await until(() => s.ping().then(() => true, () => false), 2000, "a ping answered");
  } finally {
    await s.close({ timeoutMs: 500 });
  }
});

test("a handler's RetryAfter that is not a finite number nacks without sending null", async () => {
  const nacks = [];
  const srv = await rawServer((ws, f) => {
    if (f.op === "subscribe") {
      ws.send(JSON.stringify({ op: "subscribed", re: f.id, sub: "sub_1" }));
      ws.send(JSON.stringify({ op: "deliver_batch", sub: "sub_1", deliveries: [1, 2, 3].map((i) => ({ attempt: 1, message: msg(i) })) }));
    } else {
      if (f.op === "nack") nacks.push(f);
      ok(ws, f);
    }
  });
  await onSession(srv, OPTS, async (s) => {
    const delays = [Number.NaN, undefined, Infinity];
    await s.subscribe("x", async (m) => {
      throw new RetryAfter(delays[Number(m.id.slice(4)) - 1]);
    });
    await until(() => nacks.length === 3, 2000, "three nacks");
    for (const f of nacks) assert.ok(f.delayMs === undefined || Number.isFinite(f.delayMs), JSON.stringify(f));
    assert.equal(nacks.find((f) => f.messageId === "msg_3").delayMs, 12 * 60 * 60 * 1000);
  });
});

test("an error code named like an Object.prototype member has the status of an unknown code", () => {
  for (const code of ["constructor", "__proto__", "toString", "hasOwnProperty", "valueOf"]) {
    assert.equal(statusOf(code), 500, code);
    const e = fromWire({ code, message: "m" });
    assert.equal(e.status, 500, code);
    assert.equal(e.kind, "other", code);
  }
});

test("an HTTP answer larger than the bound is refused, not read whole", async () => {
  let pulled = 0;
  const fetch = async () =>
    new Response(
      new ReadableStream({
        pull(ctl) {
          pulled++;
          ctl.enqueue(new Uint8Array(64 << 10).fill(0x20));
        },
      }),
      { status: 200, headers: { "content-type": "application/json" } },
    );
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch, timeoutMs: 60_000, maxResponseBytes: 1 << 20 });
  const started = Date.now();
  await assert.rejects(h.subjects(), (e) => e instanceof PigeonError && e.code === "PAYLOAD_TOO_LARGE", "an endless body");
  assert.ok(Date.now() - started < 5_000);
  assert.ok(pulled <= 20, `${pulled} chunks read`);
});

test("an HTTP answer of the wrong shape is BAD_FRAME, and keeps the contract", async () => {
  let body = "";
  const fetch = async () => new Response(body, { status: 200, headers: { "content-type": "application/json" } });
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch });
  body = JSON.stringify({ contract: CONTRACT });
  await h.connect(["x"]);
  for (const b of ["null", "[]", "5", `{"contract":5}`, `{"contract":{"id":7}}`, "{}"]) {
    body = b;
    await assert.rejects(h.connect(["x"]), (e) => e instanceof PigeonError && e.code === "BAD_FRAME", b);
    assert.equal(h.contract.id, "ctr_raw", b);
  }
  for (const [call, b] of [
    [() => h.receive("x"), `{"messages":5}`],
    [() => h.replay("x"), "null"],
    [() => h.publish({ subject: "x" }), `{"status":"accepted"}`],
    [() => h.subjects(), `{"subjects":"x"}`],
    [() => h.fetchKeys("a"), "[]"],
  ]) {
    body = b;
    await assert.rejects(call(), (e) => e instanceof PigeonError && e.code === "BAD_FRAME", b);
  }
});

test("an HTTP method or path that could change the request or its host is refused before sending", async () => {
  const sent = [];
  const fetch = async (url, init) => {
    sent.push(`${init.method} ${url}`);
    return new Response("{}", { status: 200 });
  };
  const h = new HttpClient("http://broker.example", "t", { fetch });
  for (const [m, p] of [
    ["GET", "@evil.example/v1/subjects"], // the token to another host
    ["GET", ".evil.example/v1/subjects"],
    ["GET", "//evil.example/v1/subjects"],
    ["GET", "/v1/subjects\r\nX-Injected: 1"],
    ["GET", "/v1/sub\tjects"],
    ["GET\r\nX: 1", "/v1/subjects"],
    ["GET /v1/admin", "/v1/subjects"],
    ["", "/v1/subjects"],
  ]) {
    await assert.rejects(h.call(m, p), (e) => e instanceof PigeonError && e.code === "INVALID_ARGUMENT", JSON.stringify([m, p]));
  }
  assert.deepEqual(sent, []);
  await h.call("GET", "/v1/subjects");
  assert.deepEqual(sent, ["GET http://broker.example/v1/subjects"]);
});

test("a refused upgrade with an endless body fails connect at once, not at the connect timeout", async () => {
  const server = createServer();
  const sockets = new Set();
  server.on("upgrade", (_req, socket) => {
    sockets.add(socket);
    socket.on("error", () => {});
    socket.write("HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n");
    const chunk = " ".repeat(64 << 10);
    const t = setInterval(() => {
      if (socket.destroyed) return clearInterval(t);
      socket.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`);
    }, 2);
    socket.on("close", () => clearInterval(t));
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  try {
    const started = Date.now();
    const r = await connect(`ws://127.0.0.1:${server.address().port}/v1/ws`, "t", ["x"], { ...OPTS, connectTimeoutMs: 30_000 }).then(
      (s) => s,
      (e) => e,
    );
    assert.ok(r instanceof PigeonError, String(r));
    assert.equal(r.status, 403);
    assert.ok(Date.now() - started < 5_000, `${Date.now() - started} ms`);
  } finally {
    for (const s of sockets) s.destroy();
    await new Promise((r) => server.close(r));
  }
});

test("an HTTP redirect is refused, not followed with the body and the contract to another origin", async () => {
  const seen = [];
  const elsewhere = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      seen.push({ contract: req.headers["x-pigeon-contract"], auth: req.headers.authorization, body });
      res.writeHead(200, { "content-type": "application/json" }).end(`{"status":"accepted","message":{"id":"m"}}`);
    });
  });
  await new Promise((r) => elsewhere.listen(0, "127.0.0.1", r));
  const to = `http://127.0.0.1:${elsewhere.address().port}/v1/messages`;
  const broker = createServer((req, res) => {
    req.resume();
    res.writeHead(307, { location: to }).end();
  });
  await new Promise((r) => broker.listen(0, "127.0.0.1", r));
  try {
    const h = new HttpClient(`http://127.0.0.1:${broker.address().port}`, "secret-token");
    h.contract = { ...CONTRACT };
    await assert.rejects(h.publish({ subject: "x", data: { card: "tok_1" } }), (e) => e instanceof PigeonError);
    assert.deepEqual(seen, [], "nothing reached the other origin");
  } finally {
    broker.close();
    elsewhere.close();
  }
});
