// Connection loss, unreadable frames and reconnecting after a server restart.
import assert from "node:assert/strict";
import { test } from "node:test";
import { WebSocket } from "ws";
import { connect, HttpClient, PigeonError } from "../../dist/index.js";
import { scenario, Server, sharedServer, telemetry, until, sleep, payment, uniq, hangAfter, withTelemetry, wsServer } from "../harness.mjs";

scenario("transport.server_closes", async () => {
  const srv = await Server.start();
  try {
    const s = await connect(srv.ws, "checkout-token", ["payments.authorize"], { reconnect: { maxAttempts: 2, initialDelayMs: 50 } });
    s.onError(() => {});
    // A timeout far beyond the bound below: only the server's death can end
    // the request in time, and a timeout would fail as kind "timeout", not
    // "transport". The bound only catches a hang; it measures nothing.
    const pending = s.request(payment(), { timeout: 60_000 }).then(
      () => assert.fail("the request succeeded"),
      (e) => e,
    );
    await sleep(200);
    await srv.kill("SIGKILL");
    const e = await Promise.race([pending, hangAfter(30_000)]);
    assert.notEqual(e, "hang", "the request still waits 30 s after the server was killed");
    assert.ok(e instanceof PigeonError, String(e));
    assert.equal(e.kind, "transport", `${e.code}: ${e.message}`);
    assert.ok(e.isTransport);
    // With the server gone for good, the session ends with an error, never hangs.
    await until(() => s.error !== undefined, 10_000, "the session to give up");
    await assert.rejects(s.publish(payment()), (e) => e instanceof PigeonError);
    await s.close();
  } finally {
    await srv.stop();
  }
});

scenario("transport.bad_frame", async () => {
  const wss = await wsServer();
  const { port } = wss.address();
  wss.on("connection", (ws) => {
    ws.on("message", (raw) => {
      const f = JSON.parse(raw.toString());
      if (f.op === "negotiate") {
        ws.send(JSON.stringify({ op: "contract", re: f.id, contract: { id: "ctr_raw", principal: "p", subjects: [], issuedAt: "", expiresAt: "", region: "uk" } }));
      } else if (f.op === "publish") {
        ws.send("this is not JSON {");
        ws.send(JSON.stringify({ op: "decision", re: f.id, status: 5 }));
      } else if (f.op === "ping") {
        ws.send("[1,2,3]");
        ws.send(JSON.stringify({ op: "pong", re: f.id }));
      }
    });
  });
  try {
    const errors = [];
    const s = await connect(`ws://127.0.0.1:${port}/v1/ws`, "any-token", ["x"], { onError: (e) => errors.push(e), reconnect: false, pingIntervalMs: 0 });
    try {
      await assert.rejects(s.publish({ subject: "x", data: {} }), (e) => e instanceof PigeonError && e.code === "BAD_FRAME" && e.kind === "transport");
      await until(() => errors.some((e) => e.code === "BAD_FRAME" && /not JSON/.test(e.message)), 2000, "the unreadable frame reported");
      await s.ping();
      await until(() => errors.some((e) => /not a JSON object/.test(e.message)), 2000, "the non-object frame reported");
    } finally {
      await s.close();
    }
  } finally {
    for (const c of wss.clients) c.terminate();
    await new Promise((r) => wss.close(r));
  }
});

scenario("reconnect.server_restart", async () => {
  const srv = await Server.start({ durable: true });
  try {
    const got = [];
    const reconnects = [];
    const opts = { reconnect: { initialDelayMs: 50, maxDelayMs: 500, maxAttempts: 40 }, onError: () => {}, onReconnect: (c) => reconnects.push(c.id) };
    const monitor = await connect(srv.ws, "monitor-token", ["events.telemetry"], opts);
    const sensor = await connect(srv.ws, "sensor-token", ["events.telemetry"], { ...opts, onReconnect: undefined });
    try {
      const run = Math.random();
      const sub = await monitor.subscribe("events.telemetry", (m) => void (m.data.kind === "restart" && m.data.site === String(run) && got.push(m.data.value)), {
        maxInFlight: 4,
      });
      for (let i = 0; i < 5; i++) await sensor.publish(telemetry("restart", String(run), i));
      await until(() => got.length === 5, 5000, "the first five");
      // Their handlers returned and their acks were answered: none is acked
      // after the restart (which would deliver it again).
      await sub.idle();
      const firstContract = monitor.contract.id;
      await srv.kill("SIGKILL");
      await srv.run();
      await until(() => reconnects.length >= 1, 15_000, "the monitor to reconnect");
      assert.notEqual(monitor.contract.id, firstContract, "negotiated a fresh contract");
      for (let i = 5; i < 10; i++) await sensor.publish(telemetry("restart", String(run), i));
      await until(() => got.length >= 10, 10_000, "the five published after the restart");
      // A marker published last: once it is in, a second copy of any before it would be too.
      await sensor.publish(telemetry("restart", String(run), 10));
      await until(() => got.includes(10), 10_000, "the marker");
      assert.deepEqual(got, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
      assert.equal(sub.finished, false);
    } finally {
      await Promise.all([monitor.close(), sensor.close()]);
    }
  } finally {
    await srv.stop();
  }
});

test("browser path: the credential as the pigeon.bearer subprotocol", async () => {
  const srv = await sharedServer();
  // A WebSocket constructor that takes (url, protocols) only, as a browser's does.
  class BrowserLike extends WebSocket {
    constructor(url, protocols) {
      super(url, protocols);
    }
  }
  const s = await connect(srv.ws, "sensor-token", ["events.telemetry"], { WebSocket: BrowserLike });
  try {
    assert.equal((await s.publish(telemetry("browser", "lab", 1))).status, "accepted");
  } finally {
    await s.close();
  }
  await assert.rejects(connect(srv.ws, "nobody-token", ["events.telemetry"], { WebSocket: BrowserLike }), (e) => e instanceof PigeonError && e.kind === "transport");
});

test("connecting to a port nobody listens on fails with a transport error", async () => {
  // Port 0: nothing can listen there, where a port found free a moment ago
  // may be taken by then; connecting to it is refused.
  const port = 0;
  await assert.rejects(connect(`ws://127.0.0.1:${port}/v1/ws`, "t", ["x"]), (e) => e instanceof PigeonError && e.isTransport);
  await assert.rejects(new HttpClient(`http://127.0.0.1:${port}`, "t").subjects(), (e) => e instanceof PigeonError && e.isTransport);
});

test("a reconnect whose credential is refused ends the session with that error", async () => {
  const srv = await Server.start({ durable: true });
  try {
    const admin = new HttpClient(srv.http, "admin-token");
    const account = `spiffe://conformance/ns/ts/sa/${uniq("revoked")}`;
    const role = uniq("reader");
    await admin.createAccount(account, { ifMissing: true });
    await admin.putRole(role, [{ subject: "events.telemetry", operations: ["receive", "ack"] }]);
    await admin.addRole(account, role);
    const grant = await admin.issueGrant(account, [role]);
    const errors = [];
    const s = await connect(srv.ws, grant.token, ["events.telemetry"], { reconnect: { initialDelayMs: 50, maxDelayMs: 200, maxAttempts: 50 }, onError: (e) => errors.push(e) });
    const sub = await s.subscribe("events.telemetry", () => {});
    await admin.call("DELETE", `/v1/grants/${encodeURIComponent(grant.jti)}`);
    await srv.kill("SIGKILL");
    await srv.run();
    const end = await Promise.race([sub.done.then(() => "resolved", (e) => e), hangAfter(10_000)]);
    assert.ok(end instanceof PigeonError, `subscription ended with ${end}`);
    assert.ok(["UNAUTHENTICATED", "GRANT_REVOKED"].includes(end.code), end.code);
    // The subscription may have ended first (GRANT_REVOKED pushed before the
    // kill); the session ends when its reconnect is refused.
    await until(() => s.error !== undefined, 10_000, "the session to end");
    assert.equal(s.error.code, "UNAUTHENTICATED");
    await assert.rejects(s.publish(telemetry("x", "y", 1)), (e) => e instanceof PigeonError);
    await s.close();
  } finally {
    await srv.stop();
  }
});

test("a graceful restart (SIGTERM): the subscription resumes where it was", async () => {
  const srv = await Server.start({ durable: true });
  try {
    const opts = { reconnect: { initialDelayMs: 50, maxDelayMs: 300, maxAttempts: 60 }, onError: () => {} };
    const monitor = await connect(srv.ws, "monitor-token", ["events.telemetry"], opts);
    const sensor = await connect(srv.ws, "sensor-token", ["events.telemetry"], opts);
    try {
      const got = [];
      const run = String(Math.random());
      const sub = await monitor.subscribe("events.telemetry", (m) => void (m.data.site === run && got.push(m.data.value)));
      for (let i = 0; i < 3; i++) await sensor.publish(telemetry("graceful", run, i));
      await until(() => got.length === 3, 5000, "the first three");
      await sub.idle(); // their acks are answered
      await srv.kill("SIGTERM");
      await srv.run();
      for (let i = 3; i < 6; i++) await sensor.publish(telemetry("graceful", run, i));
      await until(() => got.length >= 6, 10_000, "the three after the restart");
      // A marker published last: once it is in, a second copy of any before it would be too.
      await sensor.publish(telemetry("graceful", run, 6));
      await until(() => got.includes(6), 10_000, "the marker");
      assert.deepEqual(got, [0, 1, 2, 3, 4, 5, 6]);
      assert.equal(sub.finished, false);
    } finally {
      await Promise.all([monitor.close(), sensor.close()]);
    }
  } finally {
    await srv.stop();
  }
});

test("reconnect(): a fresh contract, the subscription carries on", async () => {
  const srv = await sharedServer();
  await withTelemetry(srv, async (monitor, sensor) => {
    const run = String(Math.random());
    const got = [];
    const sub = await monitor.subscribe("events.telemetry", (m) => void (m.data.site === run && got.push(m.data.value)));
    await sensor.publish(telemetry("manual", run, 0));
    await until(() => got.length === 1, 5000, "the first");
    const before = monitor.contract.id;
    const sid = sub.id;
    await sub.idle(); // its ack is answered
    const c = await monitor.reconnect();
    assert.notEqual(c.id, before);
    assert.notEqual(sub.id, sid);
    await sensor.publish(telemetry("manual", run, 1));
    await until(() => got.length === 2, 5000, "the second");
    // A marker published last: once it is in, a second copy of any before it would be too.
    await sensor.publish(telemetry("manual", run, 2));
    await until(() => got.includes(2), 5000, "the marker");
    assert.deepEqual(got, [0, 1, 2]);
  });
});

test("keepalive: a ping left unanswered drops the connection, and the session reconnects", async () => {
  const wss = await wsServer();
  const { port } = wss.address();
  let connections = 0;
  wss.on("connection", (ws) => {
    connections++;
    ws.on("message", (raw) => {
      const f = JSON.parse(raw.toString());
      if (f.op === "negotiate") ws.send(JSON.stringify({ op: "contract", re: f.id, contract: { id: `ctr_${connections}`, principal: "p", subjects: [], issuedAt: "", expiresAt: "", region: "uk" } }));
      // pings are never answered
    });
  });
  try {
    const errors = [];
    const reconnected = [];
    const s = await connect(`ws://127.0.0.1:${port}/v1/ws`, "t", ["x"], {
      pingIntervalMs: 100,
      pingTimeoutMs: 200,
      reconnect: { initialDelayMs: 20, maxDelayMs: 50 },
      onError: (e) => errors.push(e),
      onReconnect: (c) => reconnected.push(c.id),
    });
    try {
      await until(() => reconnected.length >= 1, 5000, "a reconnect after the silent pings");
      assert.ok(errors.some((e) => e.isTransport && /ping/.test(e.message)));
      assert.equal(s.contract.id, reconnected[0]);
    } finally {
      await s.close();
    }
  } finally {
    for (const c of wss.clients) c.terminate();
    await new Promise((r) => wss.close(r));
  }
});
