// Negotiation, publish decisions, gate refusals and contract errors over WebSocket.
import assert from "node:assert/strict";
import { connect, HttpClient, PigeonError } from "../../dist/index.js";
import { scenario, sharedServer, payment, sleep, hangAfter } from "../harness.mjs";

async function rejectsWith(p, code) {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof PigeonError, `expected a PigeonError, got ${e}`);
    assert.equal(e.code, code, `${e.code}: ${e.message}`);
    return e;
  }
  assert.fail(`expected ${code}, got success`);
}

scenario("negotiate.granted", async () => {
  const srv = await sharedServer();
  const before = Date.now();
  const s = await connect(srv.ws, "checkout-token", ["payments.authorize"], { ttl: 60_000 });
  try {
    const c = s.contract;
    assert.match(c.id, /^ctr_/);
    assert.equal(c.subjects.length, 1);
    assert.equal(c.subjects[0].name, "payments.authorize");
    assert.deepEqual(c.subjects[0].operations, ["publish"]);
    const exp = Date.parse(c.expiresAt);
    assert.ok(exp > Date.now(), "expiry in the future");
    assert.ok(exp <= before + 60_000 + 2_000, "ttl honoured");
  } finally {
    await s.close();
  }
});

scenario("negotiate.none_permitted", async () => {
  const srv = await sharedServer();
  const e = await rejectsWith(connect(srv.ws, "catalog-token", ["payments.authorize"]), "NO_PERMITTED_SUBJECTS");
  assert.equal(e.kind, "contract");
  assert.ok(e.isContract);
});

scenario("negotiate.unknown_token", async () => {
  const srv = await sharedServer();
  const e = await rejectsWith(connect(srv.ws, "nobody-token", ["payments.authorize"]), "UNAUTHENTICATED");
  assert.equal(e.status, 401);
  assert.equal(e.kind, "auth");
});

scenario("publish.accepted", async () => {
  const srv = await sharedServer();
  const s = await connect(srv.ws, "checkout-token", ["payments.authorize"]);
  try {
    const d = await s.publish(payment());
    assert.equal(d.status, "accepted");
    assert.match(d.message.id, /^msg_/);
    assert.ok(d.message.sequence >= 1);
  } finally {
    await s.close();
  }
});

scenario("publish.duplicate", async () => {
  const srv = await sharedServer();
  const s = await connect(srv.ws, "checkout-token", ["payments.authorize"]);
  try {
    const m = payment();
    const first = await s.publish(m);
    assert.equal(first.status, "accepted");
    const again = await s.publish({ ...m });
    assert.equal(again.status, "duplicate");
    assert.equal(again.message.id, first.message.id);
    assert.equal(again.message.sequence, first.message.sequence);
  } finally {
    await s.close();
  }
});

scenario("deny.schema", async () => {
  const srv = await sharedServer();
  const s = await connect(srv.ws, "checkout-token", ["payments.authorize"]);
  try {
    const m = payment();
    delete m.data.amount;
    const e = await rejectsWith(s.publish(m), "SCHEMA_INVALID");
    assert.equal(e.kind, "quarantine");
    assert.match(e.quarantineId, /^qr_/);
    assert.equal(e.details.quarantineId, e.quarantineId);
  } finally {
    await s.close();
  }
});

scenario("deny.intent", async () => {
  const srv = await sharedServer();
  const s = await connect(srv.ws, "checkout-token", ["payments.authorize"]);
  try {
    const e = await rejectsWith(s.publish(payment({ intent: "refund_payment" })), "INTENT_DENIED");
    assert.equal(e.status, 403);
    // The subject quarantines policy violations: a denial that was also quarantined.
    assert.ok(e.isDenial);
    assert.ok(!e.isContract && !e.isTransport);
  } finally {
    await s.close();
  }
});

scenario("deny.region", async () => {
  const srv = await sharedServer();
  const s = await connect(srv.ws, "checkout-token", ["payments.authorize"]);
  try {
    const e = await rejectsWith(s.publish(payment({ region: "us" })), "REGION_DENIED");
    assert.ok(e.kind === "denial" || e.kind === "quarantine", e.kind);
  } finally {
    await s.close();
  }
});

scenario("deny.forbidden_field", async () => {
  const srv = await sharedServer();
  const s = await connect(srv.ws, "checkout-token", ["payments.authorize"]);
  try {
    const e = await rejectsWith(s.publish(payment({}, { card: { pan: "4111111111111111" } })), "SENSITIVE_FIELD_DENIED");
    assert.equal(e.kind, "quarantine");
    assert.ok(e.quarantineId);
    const auditor = new HttpClient(srv.http, "auditor-token");
    const rec = await auditor.quarantineRecord(e.quarantineId);
    assert.equal(rec.message.data.card.pan, "[REDACTED]");
    assert.equal(rec.code, "SENSITIVE_FIELD_DENIED");
  } finally {
    await s.close();
  }
});

scenario("deny.raw_pan", async () => {
  const srv = await sharedServer();
  const s = await connect(srv.ws, "checkout-token", ["payments.authorize"]);
  try {
    const e = await rejectsWith(s.publish(payment({}, { paymentToken: "4111111111111111" })), "RAW_PAN_DETECTED");
    assert.equal(e.kind, "quarantine");
    assert.ok(e.quarantineId);
  } finally {
    await s.close();
  }
});

scenario("contract.expired", async () => {
  const srv = await sharedServer();
  // Renewing is the caller's choice: automatic renewal is off.
  const s = await connect(srv.ws, "checkout-token", ["payments.authorize"], { ttl: 1000, autoRenew: false });
  try {
    const k0 = s.contract;
    await sleep(1300);
    const e = await rejectsWith(s.publish(payment()), "CONTRACT_EXPIRED");
    assert.equal(e.kind, "contract");
    // An expired contract cannot be renewed: an error, never a hang.
    const r = await Promise.race([rejectsWith(s.renew({ ttl: 60_000 }), "CONTRACT_EXPIRED"), hangAfter(10_000)]);
    assert.notEqual(r, "hang", "renew() of an expired contract did not settle");
    // A new contract (reconnect) publishes again.
    const k = await s.reconnect();
    assert.notEqual(k.id, k0.id, "a new contract");
    assert.ok(Date.parse(k.expiresAt) > Date.now());
    assert.equal((await s.publish(payment())).status, "accepted");
  } finally {
    await s.close();
  }
});

scenario("contract.revoked", async () => {
  const srv = await sharedServer();
  const s = await connect(srv.ws, "monitor-token", ["events.telemetry"]);
  const errors = [];
  s.onError((e) => errors.push(e));
  try {
    const sub = await s.subscribe("events.telemetry", () => {});
    await new HttpClient(srv.http, "monitor-token").revoke(s.contract.id);
    const e = await rejectsWith(s.publish({ type: "t", subject: "events.telemetry", intent: "report", data: { kind: "x", site: "y", value: 1 } }), "CONTRACT_REVOKED");
    assert.equal(e.kind, "contract");
    // The running subscription ends with the error, surfaced through done.
    const sensor = await connect(srv.ws, "sensor-token", ["events.telemetry"]);
    try {
      await sensor.publish({ type: "t", subject: "events.telemetry", intent: "report", data: { kind: "x", site: "y", value: 1 } });
    } finally {
      await sensor.close();
    }
    const se = await Promise.race([sub.done.then(() => "resolved", (err) => err), hangAfter(5000)]);
    assert.ok(se instanceof PigeonError, `subscription ended with ${se}`);
    assert.equal(se.code, "CONTRACT_REVOKED");
    assert.equal(sub.error.code, "CONTRACT_REVOKED");
  } finally {
    await s.close();
  }
});
