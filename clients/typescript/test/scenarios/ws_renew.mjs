// Renewing a contract in place (docs/protocol.md "renew"): the session's
// renew() and its automatic renewal keep the contract id, and what runs
// under the contract (publishing, a subscription) goes on.
import assert from "node:assert/strict";
import { test } from "node:test";
import { connect, HttpClient, PigeonError } from "../../dist/index.js";
import { Server, sharedServer, telemetry, uniq, until, sleep, hangAfter, wsServer } from "../harness.mjs";

/** The contract lifetime of the short-lived sessions, in ms. */
const LIFE = 600;

/**
 * Publishes a telemetry reading of `site` from sensor every 50 ms and
 * waits, after each, until the monitor's handler has it (got holds the
 * values received), for `ms`; stops early when stop() says so.
 */
async function publishFor(sensor, site, got, ms, stop = () => false) {
  const end = Date.now() + ms;
  let i = 0;
  for (; Date.now() < end && !stop(); i++) {
    await sensor.publish(telemetry("renew", site, i));
    await until(() => got.includes(i) || stop(), 5_000, `reading ${i} delivered`);
    await sleep(50);
  }
  return i;
}

test("renew, automatic: 600 ms contracts are renewed in place for three lifetimes; publishing and the subscription go on", { timeout: 30_000 }, async () => {
  const srv = await sharedServer();
  const errors = [];
  const onError = (e) => errors.push(e);
  const monitor = await connect(srv.ws, "monitor-token", ["events.telemetry"], { ttl: LIFE, onError });
  const sensor = await connect(srv.ws, "sensor-token", ["events.telemetry"], { ttl: LIFE, onError });
  try {
    const km = monitor.contract;
    const ks = sensor.contract;
    const site = uniq("auto");
    const got = [];
    const sub = await monitor.subscribe("events.telemetry", (m) => {
      if (m.data.site === site) got.push(m.data.value);
    });
    const n = await publishFor(sensor, site, got, 3 * LIFE);
    assert.ok(n >= 10, `only ${n} readings in three lifetimes`);
    // Past the first expiry of both, by far: only renewals kept them.
    assert.ok(Date.now() > Date.parse(km.expiresAt) + LIFE, "the test outlived the first contracts");
    assert.ok(Date.now() > Date.parse(ks.expiresAt) + LIFE, "the test outlived the first contracts");
    assert.equal(sub.finished, false, `the subscription ended: ${sub.error?.code}`);
    assert.deepEqual(got, Array.from({ length: n }, (_, i) => i));
    for (const [s, k] of [[monitor, km], [sensor, ks]]) {
      assert.equal(s.contract.id, k.id, "renewed, not replaced");
      assert.ok(Date.parse(s.contract.expiresAt) > Date.parse(k.expiresAt), `expiresAt ${s.contract.expiresAt} did not move past ${k.expiresAt}`);
      assert.ok(Date.parse(s.contract.expiresAt) > Date.now(), "the contract in force has not expired");
    }
    assert.deepEqual(errors.map((e) => `${e.code}: ${e.message}`), []);
  } finally {
    await Promise.all([monitor.close(), sensor.close()]);
  }
});

test("renew, autoRenew false: the contract expires after its lifetime; the subscription ends and a publish fails with CONTRACT_EXPIRED", { timeout: 30_000 }, async () => {
  const srv = await sharedServer();
  const errors = [];
  const onError = (e) => errors.push(e);
  const monitor = await connect(srv.ws, "monitor-token", ["events.telemetry"], { ttl: LIFE, autoRenew: false, onError });
  const shortSensor = await connect(srv.ws, "sensor-token", ["events.telemetry"], { ttl: LIFE, autoRenew: false, onError });
  const sensor = await connect(srv.ws, "sensor-token", ["events.telemetry"], { ttl: 60_000, onError });
  try {
    const km = monitor.contract;
    assert.equal(monitor.renewTimer, undefined, "a renewal scheduled although autoRenew is false");
    const site = uniq("manual");
    const got = [];
    const sub = await monitor.subscribe("events.telemetry", (m) => {
      if (m.data.site === site) got.push(m.data.value);
    });
    // The long-lived sensor publishes until the subscription ends (it
    // must, soon after the first expiry).
    await publishFor(sensor, site, got, 3 * LIFE + 5_000, () => sub.finished);
    assert.equal(sub.finished, true, "the subscription outlived its contract");
    assert.ok(sub.error instanceof PigeonError, `the subscription ended without an error (${sub.error})`);
    assert.equal(sub.error.code, "CONTRACT_EXPIRED", sub.error.message);
    assert.ok(Date.now() >= Date.parse(km.expiresAt) - 50, "ended before its contract expired");
    assert.equal(monitor.contract.expiresAt, km.expiresAt, "renewed although autoRenew is false");
    assert.ok(got.length > 0, "nothing was delivered while the contract lived");
    await assert.rejects(sub.done, (e) => e.code === "CONTRACT_EXPIRED");
    // The short-lived sensor's contract expired too: its publish is refused.
    const r = await Promise.race([shortSensor.publish(telemetry("renew", site, -1)).then(() => "accepted", (e) => e), hangAfter(10_000)]);
    assert.ok(r instanceof PigeonError, `publish under an expired contract: ${r}`);
    assert.equal(r.code, "CONTRACT_EXPIRED", r.message);
    assert.equal(r.kind, "contract");
    assert.deepEqual(errors.map((e) => `${e.code}: ${e.message}`), []);
  } finally {
    await Promise.all([monitor.close(), shortSensor.close(), sensor.close()]);
  }
});

test("renew, explicit: renew() keeps the contract id, moves expiresAt later and never shortens it; the subscription goes on", { timeout: 30_000 }, async () => {
  const srv = await sharedServer();
  const monitor = await connect(srv.ws, "monitor-token", ["events.telemetry"], { ttl: 5_000, autoRenew: false });
  const sensor = await connect(srv.ws, "sensor-token", ["events.telemetry"], { ttl: 5_000, autoRenew: false });
  try {
    const k0 = monitor.contract;
    const site = uniq("explicit");
    const got = [];
    const sub = await monitor.subscribe("events.telemetry", (m) => {
      if (m.data.site === site) got.push(m.data.value);
    });
    await sleep(50);
    const k1 = await monitor.renew({ ttl: 60_000 });
    assert.equal(k1.id, k0.id, "renewed, not replaced");
    assert.ok(Date.parse(k1.expiresAt) > Date.parse(k0.expiresAt) + 50_000, `expiresAt ${k1.expiresAt} did not move past ${k0.expiresAt}`);
    assert.deepEqual(monitor.contract, k1, "the renewed contract is the session's");
    // Without options, the session's ttl: not later than the contract in force, so it stays.
    const k2 = await monitor.renew();
    assert.equal(k2.id, k0.id);
    assert.equal(k2.expiresAt, k1.expiresAt, "a renewal shortened the contract");
    assert.equal(monitor.contract.expiresAt, k1.expiresAt);
    // The sensor's renewal without options uses its ttl (5 s).
    const s0 = sensor.contract;
    await sleep(50);
    const s1 = await sensor.renew();
    assert.equal(s1.id, s0.id);
    assert.ok(Date.parse(s1.expiresAt) > Date.parse(s0.expiresAt), `expiresAt ${s1.expiresAt} did not move past ${s0.expiresAt}`);
    assert.ok(Date.parse(s1.expiresAt) < Date.now() + 10_000, "the session's ttl was not sent");
    await sensor.publish(telemetry("renew", site, 1));
    await until(() => got.includes(1), 5_000, "the reading delivered after the renewals");
    assert.equal(sub.finished, false);
  } finally {
    await Promise.all([monitor.close(), sensor.close()]);
  }
});

test("renew: the renewal timer never keeps the process alive, and close() cancels it", { timeout: 30_000 }, async () => {
  const srv = await sharedServer();
  const errors = [];
  const s = await connect(srv.ws, "sensor-token", ["events.telemetry"], { ttl: 200, onError: (e) => errors.push(e) });
  const k = s.contract;
  // White box: the session's timer (a Node Timeout) is armed, and unref'd.
  assert.ok(s.renewTimer, "no renewal scheduled after connect");
  assert.equal(s.renewTimer.hasRef(), false, "the renewal timer keeps the process alive");
  await s.close();
  assert.equal(s.renewTimer, undefined, "close() left the renewal timer armed");
  await sleep(400);
  assert.equal(s.contract.expiresAt, k.expiresAt);
  await assert.rejects(s.renew(), (e) => e.code === "CLOSED" || e.code === "SESSION_CLOSED");
  assert.deepEqual(errors, []);
});

test("renew, automatic: a revoked contract's renewal is refused once and not tried again (one contract.denied, one error); a reconnect renews the new contract", { timeout: 30_000 }, async () => {
  // A server of its own: its audit log holds this test's records only.
  const srv = await Server.start();
  const errors = [];
  const s = await connect(srv.ws, "sensor-token", ["events.telemetry"], { ttl: 2_000, onError: (e) => errors.push(e) });
  try {
    const k = s.contract;
    assert.ok(s.renewTimer, "no renewal scheduled after connect");
    await new HttpClient(srv.http, "sensor-token").revoke(k.id);
    // The renewal falls due after half the life (1 s); the retries of a
    // failed one would follow every quarter of the life left, at least
    // every 100 ms, until the contract expires. Wait past its expiry.
    await sleep(Date.parse(k.expiresAt) - Date.now() + 500);
    const denied = (await new HttpClient(srv.http, "auditor-token").audit()).filter((r) => r.type === "contract.denied" && r.contractId === k.id);
    assert.deepEqual(denied.map((r) => r.code), ["CONTRACT_REVOKED"], "renewals of the revoked contract the server refused");
    assert.deepEqual(errors.map((e) => e.code), ["CONTRACT_REVOKED"], errors.map((e) => e.message).join("; "));
    assert.match(errors[0].message, /renewal stopped/);
    assert.equal(s.renewTimer, undefined, "a renewal is still scheduled");
    // A new contract has a schedule of its own.
    const k2 = await s.reconnect();
    assert.notEqual(k2.id, k.id);
    assert.ok(s.renewTimer, "no renewal scheduled for the new contract");
  } finally {
    await s.close();
    await srv.stop();
  }
});

test("renew, automatic: a refusal that is final for the contract stops its renewal; any other failure is tried again until a renewal passes", { timeout: 30_000 }, async () => {
  const FINAL = ["CONTRACT_REVOKED", "CONTRACT_EXPIRED", "CONTRACT_NOT_FOUND", "CONTRACT_PRINCIPAL_MISMATCH", "CONTRACT_STALE", "GRANT_REVOKED", "UNAUTHENTICATED"];
  const TRANSIENT = ["RATE_LIMITED", "INTERNAL", "SHUTTING_DOWN"];
  // Long enough for three renewals a floor apart (a quarter of the
  // negotiated lifetime, at most 1 s): the first at half the life, the
  // retries 1 s after it and after each other, all before the expiry.
  const LIFE_MS = 6_000;
  // A server of the test's own: each connection's token is the code it
  // refuses renewals with; a transient code is refused twice, then the
  // renewal passes (for a minute). It counts the renew frames of each.
  const wss = await wsServer();
  const renews = new Map();
  wss.on("connection", (ws, req) => {
    const code = req.headers.authorization.replace("Bearer ", "");
    const contract = { id: `ctr_${code}`, principal: "p", subjects: [], issuedAt: "", expiresAt: new Date(Date.now() + LIFE_MS).toISOString(), region: "uk" };
    ws.on("message", (raw) => {
      const f = JSON.parse(raw.toString());
      if (f.op === "negotiate") ws.send(JSON.stringify({ op: "contract", re: f.id, contract }));
      if (f.op !== "renew") return;
      const n = (renews.get(code) ?? 0) + 1;
      renews.set(code, n);
      if (FINAL.includes(code) || n <= 2) ws.send(JSON.stringify({ op: "error", re: f.id, error: { code, message: `refused ${n}` } }));
      else ws.send(JSON.stringify({ op: "contract", re: f.id, contract: { ...contract, expiresAt: new Date(Date.now() + 60_000).toISOString() } }));
    });
  });
  const url = `ws://127.0.0.1:${wss.address().port}/v1/ws`;
  const errors = new Map();
  const sessions = await Promise.all(
    [...FINAL, ...TRANSIENT].map((code) => {
      errors.set(code, []);
      return connect(url, code, ["x"], { pingIntervalMs: 0, reconnect: false, onError: (e) => errors.get(code).push(e) });
    }),
  );
  try {
    // Past the expiry of the first contracts, with room for the retries.
    await sleep(LIFE_MS + 500);
    for (const code of FINAL) {
      assert.equal(renews.get(code), 1, `renewals refused ${code}`);
      assert.deepEqual(errors.get(code).map((e) => `${e.code}: ${e.message}`), [`${code}: renewing the contract failed; renewal stopped (it would be refused again): refused 1`]);
    }
    for (const [i, code] of TRANSIENT.entries()) {
      const s = sessions[FINAL.length + i];
      assert.equal(renews.get(code), 3, `renewals refused ${code} twice, then one passed`);
      assert.deepEqual(errors.get(code).map((e) => e.code), [code, code]);
      for (const e of errors.get(code)) assert.match(e.message, /trying again/);
      assert.ok(Date.parse(s.contract.expiresAt) > Date.now() + 30_000, `${code}: the contract was not renewed`);
      assert.ok(s.renewTimer, `${code}: the next renewal is not scheduled`);
    }
  } finally {
    await Promise.all(sessions.map((s) => s.close({ timeoutMs: 1000 })));
    for (const c of wss.clients) c.terminate();
    await new Promise((r) => wss.close(r));
  }
});
