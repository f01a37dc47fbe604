// At-most-once subscriptions (`ack: "none"`, docs/protocol.md "subscribe"):
// the frames the client sends are recorded by a WebSocket subclass, so the
// tests see that nothing answers a delivery.
import assert from "node:assert/strict";
import { test } from "node:test";
import { WebSocket } from "ws";
import { connect, MAX_QUEUED, MAX_QUEUED_BYTES, PigeonError, RetryAfter } from "../../dist/index.js";
import { Server, sharedServer, notification, telemetry, uniq, until, sleep } from "../harness.mjs";

/** A WebSocket constructor that records every frame the client sends (the credential goes as a subprotocol). */
function recorder() {
  const sent = [];
  class Recording extends WebSocket {
    constructor(url, protocols) {
      super(url, protocols);
    }
    send(data, ...rest) {
      sent.push(JSON.parse(data));
      return super.send(data, ...rest);
    }
  }
  return { sent, WebSocket: Recording };
}

const answers = (sent) => sent.filter((f) => f.op === "ack" || f.op === "nack");

/** A monitor whose frames are recorded, a sensor, on events.telemetry; both closed after fn. */
async function withRecordedMonitor(fn) {
  const srv = await sharedServer();
  const rec = recorder();
  const monitor = await connect(srv.ws, "monitor-token", ["events.telemetry"], { WebSocket: rec.WebSocket });
  const sensor = await connect(srv.ws, "sensor-token", ["events.telemetry"]);
  try {
    return await fn(monitor, sensor, rec.sent);
  } finally {
    await Promise.all([monitor.close(), sensor.close()]);
  }
}

test("ack none: every message in order, nothing answered, a throwing handler not retried", { timeout: 30_000 }, async () => {
  await withRecordedMonitor(async (monitor, sensor, sent) => {
    const run = uniq("amo");
    const got = [];
    const attempts = [];
    await monitor.subscribe(
      "events.telemetry",
      (m, d) => {
        if (m.data.site !== run) return;
        got.push(m.data.value);
        attempts.push(d.attempt);
        if (m.data.value === 2) throw new RetryAfter(0, new Error("fails once"));
        if (m.data.value === 4) throw new Error("fails");
      },
      { ack: "none", selector: "/kind=amo" },
    );
    const want = Array.from({ length: 10 }, (_, i) => i);
    await Promise.all(want.map((i) => sensor.publish(telemetry("amo", run, i))));
    await until(() => got.length >= want.length, 5000, "ten at-most-once deliveries");
    await sleep(300); // a redelivery of 2 or 4 would come meanwhile
    assert.deepEqual(got, want, "each once, in publish order");
    assert.ok(attempts.every((a) => a === 1), `attempts: ${attempts}`);
    const sub = sent.find((f) => f.op === "subscribe");
    assert.equal(sub.ack, "none", JSON.stringify(sub));
    assert.deepEqual(answers(sent), [], "no ack or nack frame was sent");
  });
});

test("ack explicit (default): the same throwing handler is nacked and retried, and acks are sent", { timeout: 30_000 }, async () => {
  // The contrast of the test above: what it asserts does not happen does happen here.
  await withRecordedMonitor(async (monitor, sensor, sent) => {
    const run = uniq("exp");
    const attempts = new Map();
    await monitor.subscribe(
      "events.telemetry",
      (m, d) => {
        if (m.data.site !== run) return;
        attempts.set(m.data.value, [...(attempts.get(m.data.value) ?? []), d.attempt]);
        if (m.data.value === 2 && d.attempt === 1) throw new RetryAfter(0, new Error("fails once"));
      },
      { selector: "/kind=amo" },
    );
    for (let i = 0; i < 4; i++) await sensor.publish(telemetry("amo", run, i));
    await until(() => (attempts.get(2) ?? []).length >= 2 && attempts.size === 4, 5000, "the retried delivery");
    assert.deepEqual(attempts.get(2), [1, 2]);
    assert.equal(sent.find((f) => f.op === "subscribe").ack, undefined, "the default sends no ack field");
    await until(() => sent.some((f) => f.op === "ack"), 2000, "an ack frame");
    assert.ok(sent.some((f) => f.op === "nack"), "a nack frame");
  });
});

test("ack none on a work-queue subject is refused with INVALID_ARGUMENT", { timeout: 30_000 }, async () => {
  const srv = await sharedServer();
  const n = await connect(srv.ws, "notifier-token", ["notifications.send"]);
  try {
    await assert.rejects(
      n.subscribe("notifications.send", () => undefined, { ack: "none", group: uniq("grp") }),
      (e) => e instanceof PigeonError && e.code === "INVALID_ARGUMENT" && e.status === 400,
    );
    // An ack mode the server does not know is sent as given, and refused.
    await assert.rejects(
      n.subscribe("notifications.send", () => undefined, { ack: "sometimes", group: uniq("grp") }),
      (e) => e instanceof PigeonError && e.code === "INVALID_ARGUMENT",
    );
    // The session is fine, and an explicit subscription there is taken.
    const sub = await n.subscribe("notifications.send", () => undefined, { group: uniq("grp") });
    await sub.unsubscribe();
  } finally {
    await n.close();
  }
});

test("ack none: far more deliveries than the window and maxInFlight flow with nothing answered", { timeout: 30_000 }, async () => {
  await withRecordedMonitor(async (monitor, sensor, sent) => {
    const run = uniq("amo");
    const got = [];
    let running = 0;
    let most = 0;
    await monitor.subscribe(
      "events.telemetry",
      async (m) => {
        if (m.data.site !== run) return;
        running++;
        most = Math.max(most, running);
        await sleep(0);
        got.push(m.data.value);
        running--;
      },
      { ack: "none", window: 2, maxInFlight: 2, selector: "/kind=amo" },
    );
    const n = 600; // beyond the window (2) and beyond the default window (256)
    const res = await sensor.publishAll(Array.from({ length: n }, (_, i) => telemetry("amo", run, i)));
    assert.ok(res.every((r) => r.status === "fulfilled"));
    await until(() => got.length >= n, 15_000, `${n} deliveries (got ${got.length})`);
    assert.equal(new Set(got).size, n);
    assert.ok(most <= 2, `at most maxInFlight handlers at once, saw ${most}`);
    assert.deepEqual(answers(sent), []);
  });
});

test("ack none: the stream form yields every delivery and answers none", { timeout: 30_000 }, async () => {
  await withRecordedMonitor(async (monitor, sensor, sent) => {
    const run = uniq("amo");
    const it = await monitor.stream("events.telemetry", { ack: "none", window: 1, selector: "/kind=amo" });
    const n = 20;
    await Promise.all(Array.from({ length: n }, (_, i) => sensor.publish(telemetry("amo", run, i))));
    const got = [];
    for await (const d of it) {
      if (d.message.data.site !== run) continue;
      got.push(d.message.data.value);
      if (got.length === n) break; // ends early: with ack none, no nack either
    }
    assert.deepEqual(got, Array.from({ length: n }, (_, i) => i));
    assert.ok(it.subscription.finished);
    assert.equal(sent.find((f) => f.op === "subscribe").ack, "none");
    assert.deepEqual(answers(sent), []);
  });
});

test("ack none: a reconnect resubscribes at most once, after the last message received", { timeout: 30_000 }, async () => {
  await withRecordedMonitor(async (monitor, sensor, sent) => {
    const run = uniq("amo");
    const seen = [];
    let release;
    const held = new Promise((r) => (release = r));
    await monitor.subscribe(
      "events.telemetry",
      async (m) => {
        if (m.data.site !== run) return;
        seen.push(m.data.value);
        if (m.data.value === 0) await held; // still running across the reconnect
      },
      { ack: "none", maxInFlight: 2, selector: "/kind=amo" },
    );
    const d1 = await sensor.publish(telemetry("amo", run, 0));
    const d2 = await sensor.publish(telemetry("amo", run, 1));
    await until(() => seen.length === 2, 5000, "both delivered");
    await monitor.reconnect();
    const subs = sent.filter((f) => f.op === "subscribe");
    assert.equal(subs.length, 2);
    assert.equal(subs[1].ack, "none", "resubscribed with the same ack mode");
    assert.deepEqual(subs[1].start, { sequence: d2.message.sequence + 1 }, "after the last one received");
    assert.ok(d1.message.sequence < d2.message.sequence);
    await sensor.publish(telemetry("amo", run, 2));
    await until(() => seen.includes(2), 5000, "the message after the reconnect");
    release();
    await sleep(200);
    assert.deepEqual(seen, [0, 1, 2], "none handed over twice");
    assert.deepEqual(answers(sent), []);
  });
});

/**
 * A consumer that does not keep up with an at-most-once flood: `form` is
 * "handler" (the handler awaits a gate) or "stream" (the loop does not run
 * until the flood is over). At most MAX_QUEUED wait in the client, the rest
 * are dropped, counted and reported at 1, 2, 4, …; the session keeps
 * answering; what was kept comes in order afterwards.
 */
async function boundedFlood(form) {
  await withRecordedMonitor(async (monitor, sensor, sent) => {
    const run = uniq("amoq");
    const reported = [];
    monitor.onError((e) => reported.push(e));
    const got = [];
    let release;
    const gate = new Promise((r) => (release = r));
    const options = { ack: "none", selector: `/kind=amoq/site=${run}` };
    let sub;
    let it;
    if (form === "handler") {
      sub = await monitor.subscribe(
        "events.telemetry",
        async (m) => {
          await gate;
          got.push(m.data.value);
        },
        options,
      );
    } else {
      it = await monitor.stream("events.telemetry", options);
      sub = it.subscription;
    }
    try {
      // The largest queue the subscription ever held, seen after every delivery.
      let most = 0;
      const enqueue = sub.enqueue.bind(sub);
      sub.enqueue = (c, m, attempt) => {
        enqueue(c, m, attempt);
        most = Math.max(most, sub.queue.length);
      };

      const total = MAX_QUEUED + 904;
      for (let start = 0; start < total; start += 1000) {
        const batch = Array.from({ length: Math.min(1000, total - start) }, (_, i) => telemetry("amoq", run, start + i));
        const res = await sensor.publishAll(batch);
        assert.ok(res.every((r) => r.status === "fulfilled"), String(res.find((r) => r.status === "rejected")?.reason));
        await monitor.ping(); // the session answers while the consumer is stuck
      }
      // Received: the one the handler (or the stream's buffer) holds, the queued, the dropped.
      await until(() => sub.running + sub.queue.length + sub.dropped >= total, 20_000, `${total} deliveries received`);
      await monitor.ping();
      assert.equal(sub.running, 1);
      assert.ok(sub.queue.length <= MAX_QUEUED && most <= MAX_QUEUED, `queued ${sub.queue.length}, at most ${most}`);
      assert.ok(sub.dropped >= total - MAX_QUEUED - 1, `dropped ${sub.dropped}`);
      const drops = reported.filter((e) => e.code === "DELIVERIES_DROPPED");
      const powers = [];
      for (let n = 1; n <= sub.dropped; n *= 2) powers.push(n);
      assert.deepEqual(drops.map((e) => e.details.dropped), powers, "reported at 1, 2, 4, …");
      assert.ok(drops.every((e) => e instanceof PigeonError && e.details.subject === "events.telemetry" && e.details.maxQueued === MAX_QUEUED));
      assert.deepEqual(reported.filter((e) => e.code !== "DELIVERIES_DROPPED"), []);
      const kept = total - sub.dropped;

      if (form === "handler") {
        assert.deepEqual(got, []);
        release();
        await until(() => got.length >= kept, 20_000, `${kept} kept deliveries handled (got ${got.length})`);
      } else {
        while (got.length < kept) got.push((await it.next()).value.message.data.value);
      }
      assert.deepEqual(got, Array.from({ length: kept }, (_, i) => i), "the first ones kept, in order");

      // The subscription goes on; nothing more is dropped.
      const dropped = sub.dropped;
      await sensor.publish(telemetry("amoq", run, total));
      if (form === "handler") await until(() => got.length > kept, 5000, "a message after the flood");
      else got.push((await it.next()).value.message.data.value);
      assert.deepEqual(got.slice(kept), [total]);
      assert.equal(sub.dropped, dropped);
      assert.deepEqual(answers(sent), []);
      await it?.return();
    } finally {
      release(); // a failed check does not leave close() waiting for the handler
    }
  });
}

test("ack none: a handler that does not keep up: at most MAX_QUEUED wait, the rest dropped and reported", { timeout: 60_000 }, () =>
  boundedFlood("handler"),
);

test("ack none: a stream whose loop does not keep up is bounded the same way", { timeout: 60_000 }, () => boundedFlood("stream"));

/**
 * The queue is bounded in size too: messages of about 512 KiB arrive while
 * the handler is stuck on the first. MAX_QUEUED_BYTES / size of them (127)
 * are kept, the next 128 dropped (a power of two: the report of the 128th
 * drop comes with the last message), and once the handler is released it
 * handles exactly the first and the kept ones, in order.
 */
test("ack none: a stuck handler holds at most MAX_QUEUED_BYTES of data queued, the rest dropped and reported", { timeout: 90_000 }, async () => {
  // A server of its own: the 128 MiB published stay out of the shared one.
  const srv = await Server.start();
  let release;
  const gate = new Promise((r) => (release = r));
  const monitor = await connect(srv.ws, "monitor-token", ["events.telemetry"]);
  const sensor = await connect(srv.ws, "sensor-token", ["events.telemetry"]);
  try {
    const run = uniq("amob");
    const reported = [];
    monitor.onError((e) => reported.push(e));
    // Every message's data has the same length: the counter is zero-padded.
    const pad = "x".repeat(512 << 10);
    const n = (i) => String(i).padStart(4, "0");
    const message = (i) => ({ ...telemetry("amob", run, 0), data: { kind: "amob", site: run, value: 0, n: n(i), pad } });
    const size = Buffer.byteLength(JSON.stringify(message(0).data));
    const kept = Math.floor(MAX_QUEUED_BYTES / size);
    assert.equal(kept, 127);
    const dropped = 128;
    const total = 1 + kept + dropped;
    assert.ok(total < MAX_QUEUED, "the count bound plays no part");

    const got = [];
    const sub = await monitor.subscribe(
      "events.telemetry",
      async (m) => {
        got.push(m.data.n);
        if (got.length === 1) await gate;
      },
      { ack: "none", selector: `/kind=amob/site=${run}` },
    );
    await sensor.publish(message(0));
    await until(() => got.length === 1, 10_000, "the first delivery's handler");
    for (let start = 1; start < total; start += 16) {
      const batch = Array.from({ length: Math.min(16, total - start) }, (_, i) => message(start + i));
      const res = await sensor.publishAll(batch);
      assert.ok(res.every((r) => r.status === "fulfilled"), String(res.find((r) => r.status === "rejected")?.reason));
    }
    const drops = () => reported.filter((e) => e.code === "DELIVERIES_DROPPED");
    await until(() => drops().some((e) => e.details.dropped === dropped), 30_000, `the report of ${dropped} drops (dropped ${sub.dropped}, queued ${sub.queue.length})`);
    assert.equal(sub.dropped, dropped);
    assert.equal(sub.queue.length, kept);
    assert.equal(sub.queuedBytes, kept * size);
    assert.deepEqual(drops().map((e) => e.details.dropped), [1, 2, 4, 8, 16, 32, 64, 128], "reported at 1, 2, 4, …");
    assert.ok(drops().every((e) => e instanceof PigeonError && e.details.maxQueued === MAX_QUEUED && e.details.maxQueuedBytes === MAX_QUEUED_BYTES));
    assert.deepEqual(reported.filter((e) => e.code !== "DELIVERIES_DROPPED"), []);

    release();
    await until(() => got.length >= 1 + kept && sub.running === 0 && sub.queue.length === 0, 30_000, `${1 + kept} handled (got ${got.length})`);
    assert.deepEqual(got, Array.from({ length: 1 + kept }, (_, i) => n(i)), "the first, then the kept ones, and nothing else");
    assert.equal(sub.queuedBytes, 0);
    assert.equal(sub.dropped, dropped);
  } finally {
    release(); // a failed check does not leave close() waiting for the handler
    await Promise.all([monitor.close(), sensor.close()]);
    await srv.stop();
  }
});
