// Resuming an acknowledged pub/sub subscription after a lost connection:
// the server redelivers a nacked or unanswered delivery only on the
// subscription it was sent on, so the resume must ask again for every
// sequence received and not yet handled successfully.
import assert from "node:assert/strict";
import { test } from "node:test";
import { WebSocket } from "ws";
import { connect, RetryAfter } from "../../dist/index.js";
import { scenario, Server, sharedServer, telemetry, until, sleep, uniq, hangAfter } from "../harness.mjs";

const BOUND = 10_000;

/**
 * A WebSocket constructor that records the sockets it opens and the frames
 * sent and received on each. While `down` is set, it dials a closed port
 * instead: the session's reconnects fail until it is cleared.
 */
function recorder() {
  const sockets = [];
  const sentOn = [];
  const receivedOn = [];
  const rec = { sockets, sentOn, receivedOn, down: false };
  class Recording extends WebSocket {
    constructor(url, protocols, ...rest) {
      super(rec.down ? "ws://127.0.0.1:1/v1/ws" : url, protocols, ...rest);
      const i = sockets.push(this) - 1;
      sentOn[i] = [];
      receivedOn[i] = [];
      this.on("message", (data) => receivedOn[i].push(JSON.parse(String(data))));
    }
    send(data, ...rest) {
      sentOn[sockets.indexOf(this)]?.push(JSON.parse(data));
      return super.send(data, ...rest);
    }
  }
  rec.WebSocket = Recording;
  return rec;
}

/** Whether the frame of op sent on socket i, the first one that pick accepts, has been answered. */
function answered(rec, i, op, pick = () => true) {
  const f = rec.sentOn[i]?.find((x) => x.op === op && pick(x));
  return f !== undefined && rec.receivedOn[i].some((x) => x.re === f.id);
}

/**
 * A recorded monitor session that reconnects quickly and a sensor on
 * events.telemetry of the shared server; both closed after fn.
 */
async function withResumable(fn) {
  const srv = await sharedServer();
  const rec = recorder();
  const errors = [];
  const monitor = await connect(srv.ws, "monitor-token", ["events.telemetry"], {
    WebSocket: rec.WebSocket,
    reconnect: { initialDelayMs: 20, maxDelayMs: 100 },
    onError: (e) => errors.push(e),
  });
  const sensor = await connect(srv.ws, "sensor-token", ["events.telemetry"]);
  try {
    return await fn({ monitor, sensor, rec, errors });
  } finally {
    await Promise.all([Promise.race([monitor.close(), hangAfter(BOUND)]), sensor.close()]);
  }
}

/** Counts of each value in vs. */
function counts(vs) {
  const n = new Map();
  for (const v of vs) n.set(v, (n.get(v) ?? 0) + 1);
  return n;
}

scenario("reconnect.resume_nacked", async () => {
  await withResumable(async ({ monitor, sensor, rec }) => {
    const run = uniq("rsm");
    const handled = []; // values handled successfully
    let failed = false;
    const sub = await monitor.subscribe(
      "events.telemetry",
      (m) => {
        if (m.data.site !== run) return;
        if (m.data.value === 2 && !failed) {
          failed = true;
          // A long delay: the redelivery cannot come on this connection.
          throw new RetryAfter(60_000, new Error("fails once"));
        }
        handled.push(m.data.value);
      },
      { selector: "/kind=resume_nacked" },
    );
    const sent = [];
    for (let i = 0; i < 5; i++) sent.push(await sensor.publish(telemetry("resume_nacked", run, i)));
    const seq2 = sent[2].message.sequence;
    await until(() => answered(rec, 0, "nack") && handled.length >= 4, BOUND, "the nack of 2 answered and the others handled");
    const sid = sub.id;
    rec.sockets[0].terminate();
    await until(() => rec.sockets.length === 2 && sub.id && sub.id !== sid, BOUND, "the resumed subscription");
    await until(() => handled.includes(2), BOUND, "message 2 handled after the resume");
    await sleep(300); // a second redelivery of 2 would come meanwhile
    const n = counts(handled);
    assert.equal(n.get(2), 1, `message 2 handled successfully exactly once: ${handled}`);
    for (let i = 0; i < 5; i++) assert.ok(n.get(i) >= 1, `message ${i} handled: ${handled}`);
    const resub = rec.sentOn[1].find((f) => f.op === "subscribe");
    assert.deepEqual(resub.start, { sequence: seq2 }, "resumed from the nacked sequence");
  });
});

scenario("reconnect.resume_from_start", async () => {
  await withResumable(async ({ monitor, sensor, rec, errors }) => {
    const run = uniq("rsf");
    // 0 and 1 before the subscribe, 2 and 3 while its connection is down.
    for (const v of [0, 1]) await sensor.publish(telemetry("resume_from", run, v));
    const handled = [];
    const sub = await monitor.subscribe(
      "events.telemetry",
      (m) => {
        if (m.data.site === run) handled.push(m.data.value);
      },
      { selector: "/kind=resume_from" }, // start "new"
    );
    const from = rec.receivedOn[0].find((f) => f.op === "subscribed")?.from;
    assert.ok(from > 0, "the subscribed answer names from");
    const sid = sub.id;
    rec.down = true; // the reconnects fail until the outage's messages are in
    rec.sockets[0].terminate();
    await until(() => errors.some((e) => e.kind === "transport"), BOUND, "the lost connection");
    for (const v of [2, 3]) await sensor.publish(telemetry("resume_from", run, v));
    rec.down = false;
    await until(() => sub.id && sub.id !== sid, BOUND, "the resumed subscription");
    await until(() => handled.length >= 2, BOUND, `the outage's messages handled: ${handled}`);
    await sleep(300); // anything more would come meanwhile
    assert.deepEqual(handled, [2, 3], "exactly the outage's messages");
    const i = rec.sockets.length - 1;
    assert.deepEqual(rec.sentOn[i].find((f) => f.op === "subscribe").start, { sequence: from }, "resumed at from");
  });
});

// A broker that lost its store (in memory, killed and started again)
// numbers the subject anew: the resume gets the new numbering from its
// first message, and the next resume continues in it (after what was
// handled of it, not after the old position, which would again be beyond
// the end and deliver the new numbering from its first).
scenario("reconnect.renumbered", async () => {
  const srv = await Server.start(); // in memory: started again, it numbers the subject anew
  const rec = recorder();
  try {
    const opts = { reconnect: { initialDelayMs: 50, maxDelayMs: 300, maxAttempts: 60 }, onError: () => {} };
    const monitor = await connect(srv.ws, "monitor-token", ["events.telemetry"], { ...opts, WebSocket: rec.WebSocket });
    const sensor = await connect(srv.ws, "sensor-token", ["events.telemetry"], opts);
    try {
      const got = [];
      const sub = await monitor.subscribe("events.telemetry", (m) => void got.push(`${m.data.kind}-${m.data.value}`));
      for (let i = 1; i <= 5; i++) await sensor.publish(telemetry("a", "renumbered", i));
      await until(() => got.length === 5, 5000, "the first broker's messages");
      await sub.idle(); // their acks are answered
      await srv.kill("SIGKILL");
      await srv.run();
      // Resumed (on the first socket after the lost one that a subscribe
      // was answered on; the reconnects while the server was down failed):
      // asked for 6, beyond the end, it starts at the first message.
      const resumedOn = (after) => rec.sockets.findIndex((_, i) => i > after && answered(rec, i, "subscribe"));
      await until(() => resumedOn(0) > 0, 15_000, "the monitor's resume");
      const i = resumedOn(0);
      assert.deepEqual(rec.sentOn[i].find((f) => f.op === "subscribe").start, { sequence: 6 });
      assert.equal(rec.receivedOn[i].find((f) => f.op === "subscribed").from, 1);
      for (let i = 1; i <= 2; i++) await sensor.publish(telemetry("b", "renumbered", i));
      await until(() => got.length >= 7, 10_000, "the new numbering's messages");
      await sub.idle(); // their acks are answered
      assert.deepEqual(got.slice(5), ["b-1", "b-2"]);
      // Only the monitor's connection is cut, on the same store: the resume
      // asks after b-2, not after a-5.
      await monitor.reconnect();
      const j = resumedOn(i);
      assert.ok(j > i, "reconnect() resumed the subscription");
      assert.deepEqual(rec.sentOn[j].find((f) => f.op === "subscribe").start, { sequence: 3 });
      await sensor.publish(telemetry("b", "renumbered", 3));
      await until(() => got.length >= 8, 5000, "the next message");
      await sleep(300); // nothing more comes
      assert.deepEqual(got.slice(7), ["b-3"]);
      assert.equal(sub.finished, false);
    } finally {
      await Promise.all([monitor.close(), sensor.close()]);
    }
  } finally {
    await srv.stop();
  }
});

test("resume, maxInFlight 2: a lower delivery still running when a higher one is acked is delivered again after the resume", { timeout: 30_000 }, async () => {
  await withResumable(async ({ monitor, sensor, rec, errors }) => {
    const run = uniq("rsm");
    const calls = []; // values handed to the handler
    const handled = [];
    let release;
    const held = new Promise((r) => (release = r));
    let blocked = false;
    const sub = await monitor.subscribe(
      "events.telemetry",
      async (m) => {
        if (m.data.site !== run) return;
        calls.push(m.data.value);
        if (m.data.value === 0 && !blocked) {
          blocked = true;
          await held; // still running across the cut
        }
        handled.push(m.data.value);
      },
      { selector: "/kind=resume_inflight", maxInFlight: 2 },
    );
    const d0 = await sensor.publish(telemetry("resume_inflight", run, 0));
    const d1 = await sensor.publish(telemetry("resume_inflight", run, 1));
    const id1 = d1.message.id;
    await until(() => answered(rec, 0, "ack", (f) => f.messageId === id1 || f.messageIds?.includes(id1)), BOUND, "the ack of 1 answered");
    assert.deepEqual(calls, [0, 1]);
    const sid = sub.id;
    rec.sockets[0].terminate();
    await until(() => errors.some((e) => e.kind === "transport"), BOUND, "the lost connection");
    release(); // the lower handler finishes once its connection is gone
    await until(() => rec.sockets.length === 2 && sub.id && sub.id !== sid, BOUND, "the resumed subscription");
    await until(() => calls.filter((v) => v === 0).length === 2, BOUND, "message 0 delivered again");
    const resub = rec.sentOn[1].find((f) => f.op === "subscribe");
    assert.deepEqual(resub.start, { sequence: d0.message.sequence }, "resumed from the lower sequence");
    await until(() => handled.filter((v) => v === 0).length === 2, BOUND, "message 0 handled again");
  });
});
