// Subscriptions, work queues, nacks, request/reply, pull, replay, grants and pipelining.
import assert from "node:assert/strict";
import { test } from "node:test";
import { connect, HttpClient, PigeonError, RetryAfter } from "../../dist/index.js";
import { scenario, sharedServer, notification, telemetry, uniq, until, sleep, hangAfter, withTelemetry, approvePayments } from "../harness.mjs";

const mine = (tag) => (m) => m.data && m.data.recipientId === tag;

scenario("subscribe.selector", async () => {
  const srv = await sharedServer();
  await withTelemetry(srv, async (monitor, sensor) => {
    const got = [];
    await monitor.subscribe("events.telemetry", (m) => void got.push(m), { selector: "/kind=temp/site=lab" });
    const v = Math.random();
    for (const [k, s, x] of [["temp", "lab", v], ["temp", "roof", v + 1], ["humidity", "lab", v + 2], ["temp", "lab", v + 3]]) {
      await sensor.publish(telemetry(k, s, x));
    }
    await until(() => got.length >= 2, 5000, "two temp@lab messages");
    await sleep(300);
    assert.equal(got.length, 2);
    assert.deepEqual(got.map((m) => m.data.value), [v, v + 3]);
    assert.ok(got.every((m) => m.data.kind === "temp" && m.data.site === "lab"));
    assert.ok(got[0].sequence < got[1].sequence);
  });
});

scenario("workqueue.competing", async () => {
  const srv = await sharedServer();
  const tag = uniq("wq");
  const group = uniq("grp");
  const a = await connect(srv.ws, "notifier-token", ["notifications.send"]);
  const b = await connect(srv.ws, "notifier-token", ["notifications.send"]);
  const orders = await connect(srv.ws, "orders-token", ["notifications.send"]);
  try {
    const seen = { a: [], b: [] };
    const h = (who) => async (m) => {
      if (mine(tag)(m)) seen[who].push(m.idempotencyKey);
      await sleep(10);
    };
    // A window of one delivery each: the members take turns.
    await a.subscribe("notifications.send", h("a"), { group, maxInFlight: 1, window: 1 });
    await b.subscribe("notifications.send", h("b"), { group, maxInFlight: 1, window: 1 });
    const keys = [];
    await Promise.all(
      Array.from({ length: 20 }, () => {
        const m = notification(tag);
        keys.push(m.idempotencyKey);
        return orders.publish(m);
      }),
    );
    await until(() => seen.a.length + seen.b.length >= 20, 10_000, "20 notifications");
    await sleep(300);
    const all = [...seen.a, ...seen.b];
    assert.equal(all.length, 20, "each handled exactly once");
    assert.deepEqual([...new Set(all)].sort(), [...keys].sort());
    assert.ok(seen.a.length >= 1 && seen.b.length >= 1, `both handle some: ${seen.a.length}/${seen.b.length}`);
  } finally {
    await Promise.all([a.close(), b.close(), orders.close()]);
  }
});

scenario("nack.redelivery", async () => {
  const srv = await sharedServer();
  const tag = uniq("nack");
  const n = await connect(srv.ws, "notifier-token", ["notifications.send"]);
  const orders = await connect(srv.ws, "orders-token", ["notifications.send"]);
  try {
    const attempts = [];
    await n.subscribe(
      "notifications.send",
      (m, d) => {
        if (!mine(tag)(m)) return;
        attempts.push(d.attempt);
        if (d.attempt === 1) throw new RetryAfter(50, new Error("first try fails"));
      },
      { group: uniq("grp") },
    );
    await orders.publish(notification(tag));
    await until(() => attempts.length >= 2, 5000, "redelivery");
    await sleep(300);
    assert.deepEqual(attempts, [1, 2]);
  } finally {
    await Promise.all([n.close(), orders.close()]);
  }
});

scenario("handler.throws_nacks", async () => {
  const srv = await sharedServer();
  const tag = uniq("throw");
  const n = await connect(srv.ws, "notifier-token", ["notifications.send"]);
  const orders = await connect(srv.ws, "orders-token", ["notifications.send"]);
  try {
    const msgs = [notification(tag), notification(tag), notification(tag)];
    const bad = msgs[1].idempotencyKey;
    const seen = new Map();
    await n.subscribe(
      "notifications.send",
      (m, d) => {
        if (!mine(tag)(m)) return;
        seen.set(m.idempotencyKey, [...(seen.get(m.idempotencyKey) ?? []), d.attempt]);
        if (m.idempotencyKey === bad && d.attempt === 1) throw new Error("handler failure");
      },
      { group: uniq("grp"), maxInFlight: 4 },
    );
    for (const m of msgs) await orders.publish(m);
    await until(() => (seen.get(bad) ?? []).length >= 2 && seen.size === 3, 5000, "the failed one again");
    await sleep(300);
    assert.deepEqual(seen.get(bad), [1, 2]);
    assert.deepEqual(seen.get(msgs[0].idempotencyKey), [1]);
    assert.deepEqual(seen.get(msgs[2].idempotencyKey), [1]);
  } finally {
    await Promise.all([n.close(), orders.close()]);
  }
});

scenario("handler.retry_after_capped", async () => {
  const srv = await sharedServer();
  const tag = uniq("capped");
  const n = await connect(srv.ws, "notifier-token", ["notifications.send"]);
  const orders = await connect(srv.ws, "orders-token", ["notifications.send"]);
  try {
    const attempts = [];
    await n.subscribe(
      "notifications.send",
      (m, d) => {
        if (!mine(tag)(m)) return;
        attempts.push(d.attempt);
        throw new RetryAfter(1000 * 3600 * 1000, new Error("much later"));
      },
      { group: uniq("grp") },
    );
    await orders.publish(notification(tag));
    await until(() => attempts.length >= 1, 5000, "the first delivery");
    await sleep(3000); // past the ack wait (2 s): a refused nack would let it come back
    assert.deepEqual(attempts, [1]);
  } finally {
    await Promise.all([n.close(), orders.close()]);
  }
});

function paymentRequest() {
  return {
    type: "payment.authorization.requested",
    subject: "payments.authorize",
    intent: "authorize_payment",
    idempotencyKey: uniq("req"),
    classification: "pci",
    data: { merchantId: "m-1", orderId: uniq("o"), amount: 10, currency: "GBP", paymentToken: "tok_req" },
  };
}

scenario("request.reply", async () => {
  const srv = await sharedServer();
  const gw = await connect(srv.ws, "gateway-token", ["payments.authorize"]);
  const checkout = await connect(srv.ws, "checkout-token", ["payments.authorize"]);
  try {
    await approvePayments(gw);
    const req = paymentRequest();
    const reply = await checkout.request(req, { timeout: 5000 });
    assert.equal(reply.type, "payment.authorization.result");
    assert.equal(reply.data.approved, true);
    assert.equal(reply.data.orderId, req.data.orderId);
    assert.ok(reply.correlationId);
  } finally {
    await Promise.all([gw.close(), checkout.close()]);
  }
});

scenario("request.timeout", async () => {
  const srv = await sharedServer();
  const checkout = await connect(srv.ws, "checkout-token", ["payments.authorize"]);
  try {
    // REQUEST_TIMEOUT is the server's answer at the 300 ms asked for; the
    // client's own backstop (seconds later) would fail with TIMEOUT, and a
    // hang meets the bound below, which only catches it.
    const e = await Promise.race([checkout.request(paymentRequest(), { timeout: 300 }).then(() => assert.fail("the request was answered"), (e) => e), hangAfter(30_000)]);
    assert.notEqual(e, "hang", "the request still waits after 30 s");
    assert.ok(e instanceof PigeonError, String(e));
    assert.equal(e.code, "REQUEST_TIMEOUT");
    assert.equal(e.kind, "timeout");
  } finally {
    await checkout.close();
  }
});

scenario("receive.pull", async () => {
  const srv = await sharedServer();
  const tag = uniq("pull");
  const n = await connect(srv.ws, "notifier-token", ["notifications.send"]);
  const orders = await connect(srv.ws, "orders-token", ["notifications.send"]);
  try {
    const keys = [];
    for (let i = 0; i < 3; i++) {
      const m = notification(tag);
      keys.push(m.idempotencyKey);
      await orders.publish(m);
    }
    const got = [];
    const deadline = Date.now() + 5000;
    while (got.length < 3 && Date.now() < deadline) {
      const batch = await n.receive("notifications.send", { max: 10 });
      assert.ok(batch.length <= 10);
      for (const m of batch) {
        await n.ack("notifications.send", m.id);
        if (mine(tag)(m)) got.push(m);
      }
      if (batch.length === 0) await sleep(50);
    }
    assert.deepEqual(got.map((m) => m.idempotencyKey).sort(), [...keys].sort());
    const again = await n.receive("notifications.send", { max: 10 });
    const ids = new Set(got.map((m) => m.id));
    assert.ok(!again.some((m) => ids.has(m.id)), "acked messages are not received again");
    for (const m of again) await n.ack("notifications.send", m.id);
  } finally {
    await Promise.all([n.close(), orders.close()]);
  }
});

scenario("receive.pull_attempt", async () => {
  const srv = await sharedServer();
  const subject = "notifications.send";
  const a = await connect(srv.ws, "notifier-token", [subject]);
  const b = await connect(srv.ws, "notifier-token", [subject]);
  const orders = await connect(srv.ws, "orders-token", [subject]);
  try {
    const { message: sent } = await orders.publish(notification(uniq("attempt")));
    // Receives on s until the notification comes (its message and
    // attempt), acking every other one s is handed.
    const pullIt = async (s, ms, what) => {
      const deadline = Date.now() + ms;
      while (Date.now() < deadline) {
        const { messages, attempts } = await s.receiveAttempts(subject, { max: 10 });
        assert.equal(attempts.length, messages.length);
        let it;
        for (const [i, m] of messages.entries()) {
          if (m.id === sent.id) it = { message: m, attempt: attempts[i] };
          else await s.ack(subject, m);
        }
        if (it) return it;
        await sleep(50);
      }
      throw new Error(`timed out waiting for ${what}`);
    };
    const notPulled = async (s) => {
      const got = await s.receive(subject, { max: 10 });
      for (const m of got) if (m.id !== sent.id) await s.ack(subject, m);
      return !got.some((m) => m.id === sent.id);
    };
    const first = await pullIt(a, 5000, "A to receive the notification");
    assert.equal(first.attempt, 1);
    assert.equal(a.attemptOf(first.message), 1);
    // A does not answer: after the ack wait (2 s) B leases it again.
    const second = await pullIt(b, 10_000, "B to receive the notification after A's ack wait");
    assert.equal(second.message.sequence, first.message.sequence);
    assert.equal(second.attempt, 2);
    const notAllowed = (e) => e instanceof PigeonError && e.code === "ACK_NOT_ALLOWED";
    // A's late ack names attempt 1 (kept with the message A received).
    await assert.rejects(a.ack(subject, first.message), notAllowed, "A's late ack");
    // A's late nack names it explicitly, due again at once were it taken.
    await assert.rejects(a.nack(subject, first.message.id, { sequence: first.message.sequence, attempt: 1, delayMs: 0 }), notAllowed, "A's late nack");
    assert.ok(await notPulled(a), "A's late nack handed the notification out again");
    await b.ack(subject, second.message); // names attempt 2
    await sleep(2500);
    assert.ok(await notPulled(b), "B's ack settled the notification");
    assert.ok(await notPulled(a), "B's ack settled the notification");
  } finally {
    await Promise.all([a.close(), b.close(), orders.close()]);
  }
});

scenario("replay.reason_required", async () => {
  const srv = await sharedServer();
  const tag = uniq("replay");
  const orders = await connect(srv.ws, "orders-token", ["notifications.send"]);
  const ops = await connect(srv.ws, "notify-replay-token", ["notifications.send"]);
  try {
    const seqs = [];
    for (let i = 0; i < 4; i++) seqs.push((await orders.publish(notification(tag))).message.sequence);
    await assert.rejects(ops.replay("notifications.send", { fromSequence: seqs[0] }), (e) => e.code === "REPLAY_DENIED" && e.kind === "denial");
    const got = await ops.replay("notifications.send", { reason: "conformance: resend", fromSequence: seqs[1], toSequence: seqs[3] });
    assert.deepEqual(got.map((m) => m.sequence), seqs.slice(1));
    assert.ok(got.every(mine(tag)));
  } finally {
    await Promise.all([orders.close(), ops.close()]);
  }
});

scenario("grant.role_removed", async () => {
  const srv = await sharedServer();
  const admin = new HttpClient(srv.http, "admin-token");
  const account = `spiffe://conformance/ns/ts/sa/${uniq("reader")}`;
  const role = uniq("telemetry-reader");
  await admin.createAccount(account, { ifMissing: true });
  await admin.putRole(role, [{ subject: "events.telemetry", operations: ["receive", "ack"] }]);
  await admin.addRole(account, role);
  const { token } = await admin.issueGrant(account, [role]);
  const reader = await connect(srv.ws, token, ["events.telemetry"]);
  const sensor = await connect(srv.ws, "sensor-token", ["events.telemetry"]);
  try {
    const got = [];
    const sub = await reader.subscribe("events.telemetry", (m) => void got.push(m.data.value));
    const v = Math.random();
    await sensor.publish(telemetry("grant", "lab", v));
    await until(() => got.includes(v), 5000, "the first message");
    await admin.removeRole(account, role);
    await sensor.publish(telemetry("grant", "lab", v + 1));
    const end = await Promise.race([sub.done.then(() => "resolved", (e) => e), hangAfter(5000)]);
    assert.ok(end instanceof PigeonError, `subscription ended with ${end}`);
    assert.equal(end.code, "GRANT_REVOKED");
    await sensor.publish(telemetry("grant", "lab", v + 2));
    await sleep(200);
    assert.deepEqual(got, [v]);
  } finally {
    await Promise.all([reader.close(), sensor.close()]);
  }
});

scenario("pipelined.publish", async () => {
  const srv = await sharedServer();
  const sensor = await connect(srv.ws, "sensor-token", ["events.telemetry"]);
  try {
    const ds = await Promise.all(Array.from({ length: 1000 }, (_, i) => sensor.publish(telemetry("pipe", "lab", i))));
    assert.equal(ds.length, 1000);
    assert.ok(ds.every((d) => d.status === "accepted"));
    assert.equal(new Set(ds.map((d) => d.message.id)).size, 1000);
    for (let i = 1; i < ds.length; i++) assert.ok(ds[i].message.sequence > ds[i - 1].message.sequence, `sequence ${i}`);
    assert.deepEqual(ds.map((d) => d.message.data.value), Array.from({ length: 1000 }, (_, i) => i));
  } finally {
    await sensor.close();
  }
});

scenario("session.closed", async () => {
  const srv = await sharedServer();
  const tag = uniq("close");
  const n = await connect(srv.ws, "notifier-token", ["notifications.send"]);
  const orders = await connect(srv.ws, "orders-token", ["notifications.send"]);
  const group = uniq("grp");
  try {
    let started = 0;
    let finished = 0;
    await n.subscribe(
      "notifications.send",
      async (m) => {
        if (!mine(tag)(m)) return;
        started++;
        await sleep(300);
        finished++;
      },
      { group },
    );
    await orders.publish(notification(tag));
    await until(() => started === 1, 5000, "the handler to start");
    await n.close();
    assert.equal(finished, 1, "close() waited for the running handler");
    for (const p of [n.publish(notification(tag)), n.subscribe("notifications.send", () => {}), n.receive("notifications.send")]) {
      await assert.rejects(p, (e) => e instanceof PigeonError && e.code === "CLOSED" && e.kind === "closed");
    }
    // Its ack went out before the connection closed: the group has nothing to redeliver.
    const other = await connect(srv.ws, "notifier-token", ["notifications.send"]);
    try {
      const again = [];
      await other.subscribe("notifications.send", (m) => void (mine(tag)(m) && again.push(m)), { group });
      await sleep(2500);
      assert.equal(again.length, 0);
    } finally {
      await other.close();
    }
  } finally {
    await orders.close();
  }
});

test("stream(): the async-iterator form acks as the loop moves on", async () => {
  const srv = await sharedServer();
  await withTelemetry(srv, async (monitor, sensor) => {
    const it = await monitor.stream("events.telemetry", { selector: "/kind=stream" });
    const v = Math.random();
    for (let i = 0; i < 3; i++) await sensor.publish(telemetry("stream", "lab", v + i));
    const got = [];
    for await (const d of it) {
      got.push(d.message.data.value);
      assert.equal(d.attempt, 1);
      if (got.length === 3) break;
    }
    assert.deepEqual(got, [v, v + 1, v + 2]);
    assert.ok(it.subscription.finished, "break ends the subscription");
  });
});

test("pipelined publishes: one refused message fails alone", async () => {
  const srv = await sharedServer();
  const sensor = await connect(srv.ws, "sensor-token", ["events.telemetry"]);
  try {
    const ms = Array.from({ length: 50 }, (_, i) => telemetry("mixed", "lab", i));
    delete ms[10].data.value; // schema
    ms[20] = { ...ms[20], intent: "chat" }; // intent
    const rs = await sensor.publishAll(ms);
    assert.equal(rs[10].status, "rejected");
    assert.equal(rs[10].reason.code, "SCHEMA_INVALID");
    assert.equal(rs[20].status, "rejected");
    assert.equal(rs[20].reason.code, "INTENT_DENIED");
    assert.equal(rs.filter((r) => r.status === "fulfilled").length, 48);
    await assert.rejects(sensor.publish(telemetry("x", "\ud800", 1)), (e) => e.code === "INVALID_UTF8");
    await assert.rejects(sensor.publish({ ...telemetry("big", "lab", 1), pad: "x".repeat(2 << 20) }), (e) => e.code === "PAYLOAD_TOO_LARGE");
    assert.equal((await sensor.publish(telemetry("after", "lab", 1))).status, "accepted");
  } finally {
    await sensor.close();
  }
});

test("subscribe with start: deliveries right behind the answer all arrive", async () => {
  const srv = await sharedServer();
  await withTelemetry(srv, async (monitor, sensor) => {
    const v = Math.random();
    const ds = await Promise.all([0, 1, 2].map((i) => sensor.publish(telemetry("start", "lab", v + i))));
    const got = [];
    await monitor.subscribe("events.telemetry", (m) => void (m.data.kind === "start" && got.push(m.data.value)), {
      start: { sequence: ds[0].message.sequence },
      maxInFlight: 8,
    });
    await until(() => got.length === 3, 3000, "the three retained messages");
    assert.deepEqual([...got].sort(), [v, v + 1, v + 2]);
  });
});

test("ack none: at-most-once pub/sub delivery, nothing answered", async () => {
  const srv = await sharedServer();
  await withTelemetry(srv, async (monitor, sensor) => {
    const run = String(Math.random());
    const got = [];
    await monitor.subscribe("events.telemetry", (m) => void (m.data.site === run && got.push(m.data.value)), { ack: "none", maxInFlight: 4 });
    await Promise.all([0, 1, 2, 3].map((i) => sensor.publish(telemetry("atmost", run, i))));
    await until(() => got.length === 4, 5000, "four deliveries");
    assert.deepEqual([...got].sort(), [0, 1, 2, 3]);
  });
});
