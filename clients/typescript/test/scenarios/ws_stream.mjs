// The stream form of a subscription ending while deliveries wait in it: a
// loop that breaks, returns or throws, the iterator's return() and throw(),
// an unsubscribe or a session close while the loop runs, a lost connection.
// Then ending a subscription from the inside: a loop body or a handler that
// awaits its own subscription's unsubscribe() or the session's close(); an
// unsubscribe that a reconnect overtakes; a server subscription no
// subscription owns; next() called again before the last call resolved.
// Each wait is raced with a timer, so a hang fails the test instead of
// stalling the suite. The frames the client sends (and receives) are recorded.
import assert from "node:assert/strict";
import { test } from "node:test";
import { WebSocket } from "ws";
import { connect, PigeonError, RetryAfter } from "../../dist/index.js";
import { sharedServer, notification, telemetry, uniq, until, sleep, hangAfter } from "../harness.mjs";

/** How long an ending may take before the test calls it a hang. */
const BOUND = 5000;

/** Waits for p, at most ms: {value} or {error}; fails the test when p has not settled by then. */
async function within(p, what, ms = BOUND) {
  const r = await Promise.race([p.then((value) => ({ value }), (error) => ({ error })), hangAfter(ms)]);
  assert.notEqual(r, "hang", `${what} did not settle within ${ms} ms`);
  return r;
}

/**
 * A WebSocket constructor that records the sockets it opens and every frame
 * sent on them (sent; sentOn[i] and receivedOn[i]: those sent and received
 * on the i-th socket).
 */
function recorder() {
  const sent = [];
  const sockets = [];
  const sentOn = [];
  const receivedOn = [];
  class Recording extends WebSocket {
    constructor(url, protocols, ...rest) {
      super(url, protocols, ...rest);
      const i = sockets.push(this) - 1;
      sentOn[i] = [];
      receivedOn[i] = [];
      this.on("message", (data) => receivedOn[i].push(JSON.parse(String(data))));
    }
    send(data, ...rest) {
      const f = JSON.parse(data);
      sent.push(f);
      sentOn[sockets.indexOf(this)]?.push(f);
      return super.send(data, ...rest);
    }
  }
  return { sent, sockets, sentOn, receivedOn, WebSocket: Recording };
}

const answers = (sent) => sent.filter((f) => f.op === "ack" || f.op === "nack");
/** The message ids an ack frame or frames name. */
const acked = (sent) => sent.filter((f) => f.op === "ack").flatMap((f) => f.messageIds ?? [f.messageId]);
const nacked = (sent) => sent.filter((f) => f.op === "nack").map((f) => f.messageId);

/**
 * A work-queue setup: a consumer session (recorded) and a publisher on
 * notifications.send, a group and a selector of this test's own (so no
 * other test's notification reaches it); both sessions closed after fn.
 */
async function withWorkQueue(fn, consumerOptions = {}) {
  const srv = await sharedServer();
  const rec = recorder();
  const consumer = await connect(srv.ws, "notifier-token", ["notifications.send"], { WebSocket: rec.WebSocket, onError: () => {}, ...consumerOptions });
  const orders = await connect(srv.ws, "orders-token", ["notifications.send"]);
  const tag = uniq("strm");
  const options = { group: uniq("grp"), selector: `/recipientId=${tag}` };
  try {
    return await fn({ srv, consumer, orders, tag, options, rec });
  } finally {
    // Bounded, but not checked here: a failure of fn is the one to report.
    await Promise.all([Promise.race([consumer.close(), hangAfter(BOUND)]), orders.close()]);
  }
}

/** Publishes n notifications tagged tag; resolves to their ids, in order. */
async function publishNotes(orders, tag, n) {
  const ids = [];
  for (let i = 0; i < n; i++) ids.push((await orders.publish(notification(tag))).message.id);
  return ids;
}

/** Waits until sub holds `running` deliveries in its handler slots (the stream's buffer) and `queued` behind them. */
async function untilHeld(sub, running, queued) {
  await until(() => sub.running === running && sub.queue.length === queued, BOUND, `${running} deliveries held and ${queued} queued (held ${sub.running}, queued ${sub.queue.length})`);
}

/**
 * Another consumer in the same group and selection: resolves to the
 * deliveries it gets (id → attempts) once it has seen every id of want.
 */
async function redelivered(srv, options, want) {
  const other = await connect(srv.ws, "notifier-token", ["notifications.send"]);
  try {
    const seen = new Map();
    await other.subscribe("notifications.send", (m, d) => void seen.set(m.id, [...(seen.get(m.id) ?? []), d.attempt]), { ...options, maxInFlight: 8 });
    await until(() => want.every((id) => seen.has(id)), BOUND, `the ${want.length} messages given back to the group (got ${seen.size})`);
    await sleep(300); // a second copy of any would come meanwhile
    return seen;
  } finally {
    await other.close();
  }
}

// ---------- acknowledged (work queue): the loop ends early ----------

/**
 * Six notifications reach a stream with maxInFlight 4: four wait in its
 * buffer (one of them goes to the loop), two queued behind. The loop ends
 * early after the first, `how`. The ending settles at once; the first is
 * nacked; the five the loop never saw are left unanswered and the
 * unsubscribe gives them back: another consumer of the group gets them
 * with the same attempt.
 */
async function endEarly(how) {
  await withWorkQueue(async ({ srv, consumer, orders, tag, options, rec }) => {
    const it = await consumer.stream("notifications.send", { ...options, maxInFlight: 4 });
    const sub = it.subscription;
    const ids = await publishNotes(orders, tag, 6);
    await untilHeld(sub, 4, 2);
    const boom = new RetryAfter(0, new Error("the loop failed"));
    let first;
    let loop;
    if (how === "break" || how === "return" || how === "throw") {
      loop = (async () => {
        for await (const d of it) {
          first = d;
          if (how === "break") break;
          if (how === "return") return "returned";
          throw boom;
        }
      })();
    } else {
      // The iterator driven by hand, as yield* or a library would.
      const r = await within(it.next(), "next()");
      first = r.value.value;
      loop = how === "iterator.return" ? it.return() : it.throw(boom);
    }
    const end = await within(loop, `leaving the loop (${how})`);
    if (how === "throw" || how === "iterator.throw") assert.equal(end.error, boom, "the error thrown comes out");
    else assert.equal(end.error, undefined);
    assert.equal(first.message.id, ids[0]);
    assert.ok(sub.finished, "the subscription ended");
    assert.equal(sub.running, 0);
    assert.equal((await within(sub.done, "done")).error, undefined, "done resolves");
    const after = await within(it.next(), "next() after the end");
    assert.deepEqual(after.value, { value: undefined, done: true });

    // On the wire: the first nacked (with the delay of a RetryAfter thrown
    // through the iterator), the rest unanswered, then the unsubscribe.
    assert.deepEqual(acked(rec.sent), []);
    assert.deepEqual(nacked(rec.sent), [ids[0]]);
    const nack = rec.sent.find((f) => f.op === "nack");
    if (how === "iterator.throw") assert.equal(nack.delayMs, 0);
    const unsub = rec.sent.findIndex((f) => f.op === "unsubscribe");
    assert.ok(unsub > rec.sent.indexOf(nack), "the nack before the unsubscribe");

    // Back to the group: the five never seen without an attempt spent, the first after its nack.
    const seen = await redelivered(srv, options, ids);
    assert.deepEqual(seen.get(ids[0]), [2]);
    for (const id of ids.slice(1)) assert.deepEqual(seen.get(id), [1], `${id}: given back without an attempt spent`);
  });
}

for (const how of ["break", "return", "throw", "iterator.return", "iterator.throw"]) {
  test(`stream, acknowledged, maxInFlight 4 with deliveries buffered: ${how} ends it at once, the unseen go back to the group`, { timeout: 30_000 }, () =>
    endEarly(how),
  );
}

test("stream, acknowledged: return() before the loop took anything gives every buffered delivery back", { timeout: 30_000 }, async () => {
  await withWorkQueue(async ({ srv, consumer, orders, tag, options, rec }) => {
    // maxInFlight 1: the one delivery taken ahead of the loop.
    const it = await consumer.stream("notifications.send", options);
    const ids = await publishNotes(orders, tag, 2);
    await untilHeld(it.subscription, 1, 1);
    await within(it.return(), "return()");
    assert.ok(it.subscription.finished);
    assert.deepEqual(answers(rec.sent), []);
    const seen = await redelivered(srv, options, ids);
    for (const id of ids) assert.deepEqual(seen.get(id), [1]);
  });
});

// ---------- at most once: the buffered deliveries are dropped ----------

for (const how of ["break", "throw", "iterator.throw"]) {
  test(`stream, ack none, maxInFlight 4 with deliveries buffered: ${how} ends it at once, nothing answered or delivered again`, { timeout: 30_000 }, async () => {
    const srv = await sharedServer();
    const rec = recorder();
    const monitor = await connect(srv.ws, "monitor-token", ["events.telemetry"], { WebSocket: rec.WebSocket });
    const sensor = await connect(srv.ws, "sensor-token", ["events.telemetry"]);
    try {
      const run = uniq("amo");
      const options = { ack: "none", selector: `/kind=strm/site=${run}` };
      const it = await monitor.stream("events.telemetry", { ...options, maxInFlight: 4 });
      const sub = it.subscription;
      await Promise.all([0, 1, 2, 3, 4, 5].map((i) => sensor.publish(telemetry("strm", run, i))));
      await untilHeld(sub, 4, 2);
      const boom = new Error("the loop failed");
      const got = [];
      const loop =
        how === "iterator.throw"
          ? it.next().then((r) => {
              got.push(r.value.message.data.value);
              return it.throw(boom);
            })
          : (async () => {
              for await (const d of it) {
                got.push(d.message.data.value);
                if (how === "break") break;
                throw boom;
              }
            })();
      const end = await within(loop, `leaving the loop (${how})`);
      assert.equal(end.error, how === "break" ? undefined : boom);
      assert.equal(got.length, 1);
      assert.ok(sub.finished, "the subscription ended");
      assert.ok(rec.sent.some((f) => f.op === "unsubscribe"), "the server was told");
      // A new subscription sees what is published next, none of the old ones again.
      const again = [];
      await monitor.subscribe("events.telemetry", (m) => void again.push(m.data.value), options);
      await sensor.publish(telemetry("strm", run, 6));
      await until(() => again.length >= 1, BOUND, "the next message");
      await sleep(300);
      assert.deepEqual(again, [6]);
      assert.deepEqual(answers(rec.sent), []);
    } finally {
      await Promise.all([Promise.race([monitor.close(), hangAfter(BOUND)]), sensor.close()]);
    }
  });
}

// ---------- the subscription ends while the loop runs ----------

/**
 * While the loop works on the first of four buffered deliveries (two more
 * queued), the subscription is ended from outside (`how`: the session's
 * close() or the subscription's unsubscribe()). The loop's next step ends
 * it (done): the deliveries it never took are not handed to it but go back
 * to the group unanswered; the one it worked on is acked.
 */
for (const how of ["close", "unsubscribe"]) {
  test(`stream, acknowledged: ${how}() while the loop works, deliveries buffered: the loop ends, the unseen go back`, { timeout: 30_000 }, async () => {
    await withWorkQueue(async ({ srv, consumer, orders, tag, options, rec }) => {
      const it = await consumer.stream("notifications.send", { ...options, maxInFlight: 4 });
      const sub = it.subscription;
      const ids = await publishNotes(orders, tag, 6);
      await untilHeld(sub, 4, 2);
      const got = [];
      let ending;
      const loop = (async () => {
        for await (const d of it) {
          got.push(d.message.id);
          if (got.length === 1) {
            ending = how === "close" ? consumer.close() : sub.unsubscribe();
            await sleep(100); // the loop is still at work when the ending begins
          }
        }
        return "done";
      })();
      const end = await within(loop, "the loop");
      assert.equal(end.value, "done", String(end.error));
      assert.equal((await within(ending, how)).error, undefined);
      assert.deepEqual(got, [ids[0]], "nothing more handed to the loop");
      assert.ok(sub.finished);
      assert.deepEqual(acked(rec.sent), [ids[0]]);
      assert.deepEqual(nacked(rec.sent), []);
      const seen = await redelivered(srv, options, ids.slice(1));
      assert.equal(seen.has(ids[0]), false, "the acked one is done");
      for (const id of ids.slice(1)) assert.deepEqual(seen.get(id), [1]);
    });
  });
}

test("stream, acknowledged: break after close() began, deliveries buffered: return() and close() settle at once", { timeout: 30_000 }, async () => {
  await withWorkQueue(async ({ srv, consumer, orders, tag, options, rec }) => {
    const it = await consumer.stream("notifications.send", { ...options, maxInFlight: 4 });
    const ids = await publishNotes(orders, tag, 6);
    await untilHeld(it.subscription, 4, 2);
    let closing;
    const loop = (async () => {
      for await (const d of it) {
        closing = consumer.close();
        await sleep(100);
        break;
      }
    })();
    const end = await within(loop, "leaving the loop");
    assert.equal(end.error, undefined);
    assert.equal((await within(closing, "close()")).error, undefined);
    assert.ok(it.subscription.finished);
    assert.deepEqual(nacked(rec.sent), [ids[0]]);
    assert.deepEqual(acked(rec.sent), []);
    const seen = await redelivered(srv, options, ids);
    for (const id of ids.slice(1)) assert.deepEqual(seen.get(id), [1]);
  });
});

test("stream: close() while the loop waits for a delivery ends the loop (done)", { timeout: 30_000 }, async () => {
  await withWorkQueue(async ({ consumer, options }) => {
    const it = await consumer.stream("notifications.send", { ...options, maxInFlight: 4 });
    const loop = (async () => {
      for await (const d of it) throw new Error(`unexpected delivery ${d.message.id}`);
      return "done";
    })();
    await sleep(100);
    assert.equal((await within(consumer.close(), "close()")).error, undefined);
    assert.equal((await within(loop, "the loop")).value, "done");
  });
});

// ---------- a lost connection ----------

test("stream, acknowledged: the connection drops while deliveries are buffered (no reconnect): the loop ends with the error", { timeout: 30_000 }, async () => {
  await withWorkQueue(
    async ({ srv, consumer, orders, tag, options, rec }) => {
      const it = await consumer.stream("notifications.send", { ...options, maxInFlight: 4 });
      const ids = await publishNotes(orders, tag, 6);
      await untilHeld(it.subscription, 4, 2);
      const got = [];
      const loop = (async () => {
        for await (const d of it) {
          got.push(d.message.id);
          if (got.length === 1) {
            rec.sockets.at(-1).terminate();
            await until(() => consumer.closed, BOUND, "the session to end");
          }
        }
      })();
      const end = await within(loop, "the loop");
      assert.ok(end.error instanceof PigeonError && end.error.isTransport, `ended with ${end.error}`);
      assert.deepEqual(got, [ids[0]], "the buffered ones cannot be acked any more: not handed over");
      assert.ok(it.subscription.finished);
      assert.equal(it.subscription.running, 0, "nothing left waiting on the buffer");
      assert.deepEqual(answers(rec.sent), []);
      await within(it.return(), "return() after the end");
      await redelivered(srv, options, ids); // the closed connection gave them all back
    },
    { reconnect: false },
  );
});

test("stream, acknowledged: the connection drops while deliveries are buffered (reconnect): the loop goes on with what the resumed subscription delivers", { timeout: 30_000 }, async () => {
  await withWorkQueue(
    async ({ consumer, orders, tag, options, rec }) => {
      const it = await consumer.stream("notifications.send", { ...options, maxInFlight: 4 });
      const ids = await publishNotes(orders, tag, 6);
      await untilHeld(it.subscription, 4, 2);
      const before = [];
      const afterDrop = [];
      let dropped = false;
      const loop = (async () => {
        for await (const d of it) {
          (dropped ? afterDrop : before).push([d.message.id, d.attempt]);
          if (!dropped) {
            dropped = true;
            rec.sockets.at(-1).terminate();
            await until(() => rec.sockets.length === 2 && it.subscription.id && rec.sent.filter((f) => f.op === "subscribe").length === 2, BOUND, "the reconnect");
          }
          if (new Set(afterDrop.map(([id]) => id)).size === ids.length) break;
        }
      })();
      const end = await within(loop, "the loop", 10_000);
      assert.equal(end.error, undefined);
      assert.deepEqual(before, [[ids[0], 1]]);
      // Delivered again after the drop, each once: the buffered copies of the lost connection were let go.
      assert.deepEqual(afterDrop.map(([id]) => id).sort(), [...ids].sort());
      assert.ok(afterDrop.every(([, attempt]) => attempt >= 2), `attempts after the drop: ${afterDrop.map(([, a]) => a)}`);
    },
    { reconnect: { initialDelayMs: 20, maxDelayMs: 100 } },
  );
});

// ---------- the handler form ----------

test("handler form, acknowledged: unsubscribe() with deliveries queued settles once the running handlers finish; the queued go back", { timeout: 30_000 }, async () => {
  await withWorkQueue(async ({ srv, consumer, orders, tag, options, rec }) => {
    let release;
    const gate = new Promise((r) => (release = r));
    const handled = [];
    const sub = await consumer.subscribe(
      "notifications.send",
      async (m) => {
        await gate;
        handled.push(m.id);
      },
      { ...options, maxInFlight: 2 },
    );
    const ids = await publishNotes(orders, tag, 6);
    await untilHeld(sub, 2, 4);
    const unsub = sub.unsubscribe();
    await sleep(100);
    release();
    assert.equal((await within(unsub, "unsubscribe()")).error, undefined);
    assert.ok(sub.finished);
    assert.deepEqual(handled, ids.slice(0, 2));
    assert.deepEqual(acked(rec.sent).sort(), ids.slice(0, 2).sort());
    const seen = await redelivered(srv, options, ids.slice(2));
    for (const id of ids.slice(2)) assert.deepEqual(seen.get(id), [1]);
    for (const id of ids.slice(0, 2)) assert.equal(seen.has(id), false);
  });
});

// ---------- ending it from the inside ----------

/**
 * The loop body awaits its own subscription's unsubscribe() (or the
 * session's close()) while it holds the first of four buffered deliveries
 * (two more queued). That wait settles at once, not waiting for the
 * delivery the loop holds; the loop's next step answers it (acked when the
 * loop goes on, nacked when it breaks) and ends the loop; the subscription
 * ends right after that answer; the unseen go back with attempt 1.
 */
for (const how of ["unsubscribe", "close"]) {
  for (const then of ["continue", "break"]) {
    test(`stream, acknowledged: the loop body awaits ${how}(), then ${then}s: no hang, the held delivery ${then === "break" ? "nacked" : "acked"}, the unseen go back`, { timeout: 30_000 }, async () => {
      await withWorkQueue(async ({ srv, consumer, orders, tag, options, rec }) => {
        const it = await consumer.stream("notifications.send", { ...options, maxInFlight: 4 });
        const sub = it.subscription;
        const ids = await publishNotes(orders, tag, 6);
        await untilHeld(sub, 4, 2);
        const got = [];
        let ended;
        const loop = (async () => {
          for await (const d of it) {
            got.push(d.message.id);
            const t0 = Date.now();
            ended = await within(how === "close" ? consumer.close() : sub.unsubscribe(), `${how}() awaited in the loop body`);
            ended.ms = Date.now() - t0;
            if (then === "break") break;
          }
          return "done";
        })();
        const end = await within(loop, "the loop");
        assert.equal(end.value, "done", String(end.error));
        assert.equal(ended.error, undefined);
        assert.ok(ended.ms < 2000, `${how}() took ${ended.ms} ms`);
        assert.deepEqual(got, [ids[0]], "nothing more handed to the loop");
        await within(sub.done, "the subscription's end");
        assert.ok(sub.finished);
        if (then === "break") {
          assert.deepEqual(nacked(rec.sent), [ids[0]]);
          assert.deepEqual(acked(rec.sent), []);
        } else {
          assert.deepEqual(acked(rec.sent), [ids[0]]);
          assert.deepEqual(nacked(rec.sent), []);
        }
        // The answer before the unsubscribe (close sends one too).
        const answer = rec.sent.findIndex((f) => f.op === "ack" || f.op === "nack");
        const unsub = rec.sent.findIndex((f) => f.op === "unsubscribe");
        assert.ok(answer >= 0 && unsub > answer, "answered, then unsubscribed");
        const seen = await redelivered(srv, options, then === "break" ? ids : ids.slice(1));
        for (const id of ids.slice(1)) assert.deepEqual(seen.get(id), [1], `${id}: given back without an attempt spent`);
        if (then === "break") assert.deepEqual(seen.get(ids[0]), [2]);
        else assert.equal(seen.has(ids[0]), false, "the acked one is done");
      });
    });
  }
}

/**
 * A handler awaits its own subscription's unsubscribe() while the other
 * handler (maxInFlight 2) is still at work and four deliveries wait
 * queued. The unsubscribe waits for the other handler, not for its caller,
 * and resolves; the subscription ends once the caller returns: both
 * deliveries acked, then the unsubscribe, the queued back with attempt 1.
 * A handler that throws after it is nacked instead.
 */
for (const after of ["returns", "throws"]) {
  test(`handler form: a handler awaits its own unsubscribe(), then ${after}: waits for the other handler only, the end follows`, { timeout: 30_000 }, async () => {
    await withWorkQueue(async ({ srv, consumer, orders, tag, options, rec }) => {
      let release;
      const gate = new Promise((r) => (release = r));
      const events = [];
      let sub;
      let first;
      let unsubscribing = false;
      sub = await consumer.subscribe(
        "notifications.send",
        async (m) => {
          if (first === undefined) {
            first = m.id;
            await until(() => sub.running === 2 && sub.queue.length === 4, BOUND, "the second handler and four queued");
            unsubscribing = true;
            // Not within(): its assertion would only nack this delivery.
            const r = await Promise.race([sub.unsubscribe().then(() => "settled", (e) => e), hangAfter(BOUND)]);
            events.push(["unsubscribed", r, sub.finished]);
            if (after === "throws") throw new Error("the handler fails after unsubscribing");
            return;
          }
          await gate;
          events.push(["other done"]);
        },
        { ...options, maxInFlight: 2 },
      );
      const ids = await publishNotes(orders, tag, 6);
      await until(() => unsubscribing, BOUND, "the first handler to unsubscribe");
      await sleep(200);
      assert.deepEqual(events, [], "the unsubscribe waits for the other handler");
      assert.equal(sub.queue.length, 0, "the queued ones let go at once");
      release();
      await within(sub.done, "the subscription's end", 2 * BOUND);
      assert.notDeepEqual(events[1]?.[1], "hang", `unsubscribe() awaited in a handler did not settle within ${BOUND} ms`);
      assert.deepEqual(events, [["other done"], ["unsubscribed", "settled", false]]);
      assert.equal(first, ids[0]);
      if (after === "throws") {
        assert.deepEqual(acked(rec.sent), [ids[1]]);
        assert.deepEqual(nacked(rec.sent), [ids[0]]);
      } else {
        assert.deepEqual(acked(rec.sent).sort(), ids.slice(0, 2).sort());
        assert.deepEqual(nacked(rec.sent), []);
      }
      const unsub = rec.sent.findIndex((f) => f.op === "unsubscribe");
      assert.ok(unsub > Math.max(...rec.sent.map((f, i) => (f.op === "ack" || f.op === "nack" ? i : -1))), "both answered before the unsubscribe");
      const seen = await redelivered(srv, options, after === "throws" ? [ids[0], ...ids.slice(2)] : ids.slice(2));
      for (const id of ids.slice(2)) assert.deepEqual(seen.get(id), [1]);
      if (after === "throws") assert.deepEqual(seen.get(ids[0]), [2]);
      assert.equal(seen.has(ids[1]), false);
    });
  });
}

test("handler form: a handler awaits the session's close(): it settles without waiting for the caller; the rest follows its return", { timeout: 30_000 }, async () => {
  await withWorkQueue(async ({ srv, consumer, orders, tag, options, rec }) => {
    let closed;
    let handled = 0;
    const sub = await consumer.subscribe(
      "notifications.send",
      async () => {
        handled++;
        if (closed) return;
        const t0 = Date.now();
        // Not within(): its assertion would only nack this delivery.
        closed = { result: await Promise.race([consumer.close().then(() => "settled", (e) => e), hangAfter(BOUND)]) };
        closed.ms = Date.now() - t0;
        await sleep(100); // still at work after close() returned
      },
      { ...options, maxInFlight: 1 },
    );
    const ids = await publishNotes(orders, tag, 4);
    await within(sub.done, "the subscription's end", 3 * BOUND);
    assert.equal(closed.result, "settled", `close() awaited in a handler: ${closed.result === "hang" ? `did not settle within ${BOUND} ms` : closed.result}`);
    assert.ok(closed.ms < 2000, `close() took ${closed.ms} ms (its timeout is 10 s)`);
    assert.equal(handled, 1, "nothing handed over after close()");
    assert.deepEqual(acked(rec.sent), [ids[0]], "its delivery acked before the connection closed");
    await until(() => rec.sockets[0].readyState === WebSocket.CLOSED, BOUND, "the connection to close");
    const seen = await redelivered(srv, options, ids.slice(1));
    for (const id of ids.slice(1)) assert.deepEqual(seen.get(id), [1]);
    assert.equal(seen.has(ids[0]), false);
  });
});

// ---------- a reconnect while unsubscribe() waits; orphans ----------

/**
 * unsubscribe() waits for a running handler; meanwhile the connection drops
 * and the session reconnects. No server subscription is left on the new
 * connection without its unsubscribe: every subscription the server
 * confirmed there is unsubscribed there, and later messages of the group
 * go to the other consumer at once, with attempt 1.
 */
test("handler form: unsubscribe() overtaken by a reconnect leaves no orphan on the new connection", { timeout: 30_000 }, async () => {
  let reconnected = 0;
  await withWorkQueue(
    async ({ srv, consumer, orders, tag, options, rec }) => {
      let release;
      const gate = new Promise((r) => (release = r));
      let started = 0;
      const sub = await consumer.subscribe(
        "notifications.send",
        async () => {
          started++;
          await gate;
        },
        options,
      );
      await publishNotes(orders, tag, 1);
      await until(() => started === 1, BOUND, "the handler to start");
      const unsub = sub.unsubscribe();
      rec.sockets[0].terminate();
      await until(() => reconnected === 1, BOUND, "the reconnect");
      await sleep(300); // a resubscription would be confirmed by now
      release();
      assert.equal((await within(unsub, "unsubscribe()")).error, undefined);
      assert.ok(sub.finished);
      await sleep(300);
      const confirmed = rec.receivedOn[1].filter((f) => f.op === "subscribed").map((f) => f.sub);
      const ended = rec.sentOn[1].filter((f) => f.op === "unsubscribe").map((f) => f.sub);
      for (const sid of confirmed) assert.ok(ended.includes(sid), `${sid} subscribed on the new connection and never unsubscribed`);
      // Nothing in the group holds what comes next.
      const later = await publishNotes(orders, tag, 4);
      const seen = await redelivered(srv, options, later);
      for (const id of later) assert.deepEqual(seen.get(id), [1], `${id}: straight to the other consumer`);
    },
    { reconnect: { initialDelayMs: 20, maxDelayMs: 100 }, onReconnect: () => reconnected++ },
  );
});

/**
 * A server subscription on the session's connection that no subscription
 * owns (made here behind the session's back, as one left over would be):
 * its first delivery makes the client end it, and the delivery goes back to
 * the group at once, with attempt 1, instead of waiting out its ack wait.
 */
test("a delivery for a subscription the session does not know ends that subscription", { timeout: 30_000 }, async () => {
  await withWorkQueue(async ({ srv, consumer, orders, tag, options, rec }) => {
    const f = await consumer.conn.call({ op: "subscribe", subject: "notifications.send", batch: true, window: 4, maxInFlight: 1, ...options });
    const sid = f.sub;
    assert.equal(typeof sid, "string");
    const [id] = await publishNotes(orders, tag, 1);
    await until(() => rec.sent.some((x) => x.op === "unsubscribe" && x.sub === sid), BOUND, "the client to end the unknown subscription");
    assert.deepEqual(answers(rec.sent), []);
    const seen = await redelivered(srv, options, [id]);
    assert.deepEqual(seen.get(id), [1]);
    // Once: more deliveries on the wire for it send nothing more.
    assert.equal(rec.sent.filter((x) => x.op === "unsubscribe" && x.sub === sid).length, 1);
  });
});

// ---------- next() called again before the last call resolved ----------

test("stream: two next() calls pending at once both resolve, each with its own delivery; the next call acks both", { timeout: 30_000 }, async () => {
  await withWorkQueue(async ({ consumer, orders, tag, options, rec }) => {
    const it = await consumer.stream("notifications.send", { ...options, maxInFlight: 2 });
    const a = it.next();
    const b = it.next();
    const ids = await publishNotes(orders, tag, 2);
    const [ra, rb] = [await within(a, "the first next()"), await within(b, "the second next()")];
    assert.equal(ra.error, undefined);
    assert.equal(rb.error, undefined);
    assert.deepEqual([ra.value.value.message.id, rb.value.value.message.id].sort(), [...ids].sort());
    assert.deepEqual(answers(rec.sent), []);
    const c = it.next();
    await until(() => acked(rec.sent).length === 2, BOUND, "both acked");
    assert.deepEqual(acked(rec.sent).sort(), [...ids].sort());
    await within(it.return(), "return()");
    assert.deepEqual((await within(c, "the third next()")).value, { value: undefined, done: true });
  });
});

for (const how of ["return", "close"]) {
  test(`stream: two next() calls waiting at once both end (done) on ${how}()`, { timeout: 30_000 }, async () => {
    await withWorkQueue(async ({ consumer, options }) => {
      const it = await consumer.stream("notifications.send", { ...options, maxInFlight: 2 });
      const a = it.next();
      const b = it.next();
      await sleep(100);
      await within(how === "return" ? it.return() : consumer.close(), `${how}()`);
      for (const [p, what] of [[a, "the first next()"], [b, "the second next()"]]) {
        assert.deepEqual((await within(p, what)).value, { value: undefined, done: true });
      }
    });
  });
}
