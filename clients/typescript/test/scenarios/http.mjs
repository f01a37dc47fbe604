// The HTTP client.
import assert from "node:assert/strict";
import { connect, HttpClient, PigeonError } from "../../dist/index.js";
import { scenario, sharedServer, Server, payment, notification, uniq, PRINCIPALS, approvePayments } from "../harness.mjs";

scenario("http.publish", async () => {
  const srv = await sharedServer();
  const c = new HttpClient(srv.http, "checkout-token");
  const contract = await c.connect(["payments.authorize"]);
  assert.match(contract.id, /^ctr_/);
  const m = payment();
  const first = await c.publish(m);
  assert.equal(first.status, "accepted");
  const again = await c.publish(m);
  assert.equal(again.status, "duplicate");
  assert.equal(again.message.id, first.message.id);
  await assert.rejects(c.publish(payment({}, { paymentToken: "4111111111111111" })), (e) => {
    assert.ok(e instanceof PigeonError);
    assert.equal(e.code, "RAW_PAN_DETECTED");
    assert.equal(e.status, 422);
    assert.match(e.details.quarantineId, /^qr_/);
    assert.equal(e.kind, "quarantine");
    return true;
  });
});

scenario("http.receive_ack", async () => {
  const srv = await sharedServer();
  const tag = uniq("http");
  const orders = new HttpClient(srv.http, "orders-token");
  await orders.connect(["notifications.send"]);
  const seqs = [];
  for (let i = 0; i < 3; i++) seqs.push((await orders.publish(notification(tag))).message.sequence);
  const n = new HttpClient(srv.http, "notifier-token");
  await n.connect(["notifications.send"]);
  const got = [];
  for (let round = 0; round < 20 && got.length < 3; round++) {
    const ms = await n.receive("notifications.send", { max: 50, ack: "explicit" });
    for (const m of ms) {
      await n.ack("notifications.send", m.id);
      if (m.data.recipientId === tag) got.push(m.sequence);
    }
    if (ms.length === 0) break;
  }
  assert.deepEqual(got.sort((a, b) => a - b), seqs);
  // A nack of a message not leased to the caller is refused with a typed error.
  await assert.rejects(n.nack("notifications.send", "msg_nonexistent"), (e) => e instanceof PigeonError && e.status === 404);
  const ops = new HttpClient(srv.http, "notify-replay-token");
  await ops.connect(["notifications.send"]);
  await assert.rejects(ops.replay("notifications.send", { fromSequence: seqs[0] }), (e) => e.code === "REPLAY_DENIED" && e.status === 403);
  const replayed = await ops.replay("notifications.send", { reason: "conformance", fromSequence: seqs[0], toSequence: seqs[2] });
  assert.deepEqual(replayed.map((m) => m.sequence), seqs);
});

scenario("http.subjects_audit_quarantine", async () => {
  const srv = await sharedServer();
  const anyone = new HttpClient(srv.http, "checkout-token");
  const names = (await anyone.subjects()).map((s) => s.name);
  for (const n of ["chat.messages", "events.telemetry", "notifications.send", "payments.authorize"]) assert.ok(names.includes(n), n);

  // A raw PAN, quarantined.
  await anyone.connect(["payments.authorize"]);
  const qid = await anyone.publish(payment({}, { paymentToken: "4111111111111111" })).then(
    () => assert.fail("accepted a raw PAN"),
    (e) => e.quarantineId,
  );

  const auditor = new HttpClient(srv.http, "auditor-token");
  const records = await auditor.audit();
  assert.ok(records.length > 1);
  for (let i = 1; i < records.length; i++) {
    assert.equal(records[i].prevHash, records[i - 1].hash, `chain at ${records[i].seq}`);
    assert.equal(records[i].seq, records[i - 1].seq + 1);
  }
  const q = await auditor.quarantine();
  const rec = q.find((r) => r.id === qid);
  assert.ok(rec, "the raw-PAN record is listed");
  assert.equal(rec.code, "RAW_PAN_DETECTED");
  assert.equal(rec.message.data.paymentToken, "[REDACTED]");
  assert.ok(!JSON.stringify(q).includes("4111111111111111"), "no PAN anywhere");
  // Pages follow each other by the time and id of the last record.
  const [first] = await auditor.quarantine({ max: 1 });
  const next = await auditor.quarantine({ max: 1, since: first.time, after: first.id });
  assert.equal(next.length, q.length > 1 ? 1 : 0);
  if (next.length) assert.notEqual(next[0].id, first.id, "the next page starts after the last record");
  await assert.rejects(new HttpClient(srv.http, "checkout-token").audit(), (e) => e.code === "FORBIDDEN" && e.status === 403);

  // The admin releases it: its account gets the auditor role and a role
  // that may publish payments, and it negotiates a contract to publish under.
  const admin = new HttpClient(srv.http, "admin-token");
  const role = uniq("payments-releaser");
  await admin.putRole(role, [{ subject: "payments.authorize", operations: ["publish"] }]);
  await admin.createAccount(PRINCIPALS.admin, { ifMissing: true });
  await admin.addRole(PRINCIPALS.admin, "auditor");
  await admin.addRole(PRINCIPALS.admin, role);
  await admin.connect(["payments.authorize"]);
  let outcome;
  try {
    outcome = (await admin.release(qid)).status;
  } catch (e) {
    assert.ok(e instanceof PigeonError, String(e));
    assert.ok(e.kind === "denial" || e.kind === "quarantine", `${e.code}: ${e.message}`);
    outcome = e.code;
  }
  assert.ok(outcome, "released: accepted or refused with its code");
  await assert.rejects(admin.release(qid), (e) => e.code === "BAD_REQUEST" && e.status === 400);
});

scenario("http.receipts_pages", async () => {
  // A server of its own: no worker of another scenario receives the
  // message, so its receipts are the three replays alone.
  const srv = await Server.start();
  try {
    const orders = new HttpClient(srv.http, "orders-token");
    await orders.connect(["notifications.send"]);
    // An id that holds "/", "?", "#" and a space: the path must carry it whole.
    const id = `${uniq("rcpt")}/a b?c#d`;
    const d = await orders.publish(notification(uniq("rcpt"), { id }));
    assert.equal(d.status, "accepted");
    assert.equal(d.message.id, id);
    const seq = d.message.sequence;
    const ops = new HttpClient(srv.http, "notify-replay-token");
    await ops.connect(["notifications.send"]);
    for (let i = 0; i < 3; i++) {
      const replayed = await ops.replay("notifications.send", { reason: `conformance receipts ${i}`, fromSequence: seq, toSequence: seq });
      assert.deepEqual(replayed.map((m) => m.id), [id]);
    }

    const auditor = new HttpClient(srv.http, "auditor-token");
    const first = await auditor.receipts(id, { max: 2 });
    assert.equal(first.receipts.length, 2);
    assert.equal(typeof first.next, "string");
    const second = await auditor.receipts(id, { max: 2, after: first.next });
    assert.equal(second.receipts.length, 1);
    assert.equal(second.next, undefined);
    const all = [...first.receipts, ...second.receipts];
    for (const r of all) {
      assert.equal(r.event, "replay.executed");
      assert.equal(r.principal, "spiffe://merchant-prod/ns/ops/sa/notify-replay");
      assert.equal(r.subject, "notifications.send");
      assert.equal(r.seq, seq);
    }
    assert.deepEqual(all.map((r) => r.ref), [0, 1, 2].map((i) => `conformance receipts ${i}`));
    for (let i = 1; i < all.length; i++) assert.ok(all[i].auditSeq > all[i - 1].auditSeq, "in auditSeq order");
    // The walk of every page gives the same three.
    const walked = [];
    for await (const r of auditor.allReceipts(id, { max: 2 })) walked.push(r);
    assert.deepEqual(walked, all);

    await assert.rejects(orders.receipts(id), (e) => e instanceof PigeonError && e.code === "FORBIDDEN" && e.status === 403);
    await assert.rejects(auditor.receipts(id, { after: "x:1" }), (e) => e instanceof PigeonError && e.code === "BAD_REQUEST" && e.status === 400);
  } finally {
    await srv.stop();
  }
});

scenario("http.request", async () => {
  const srv = await sharedServer();
  const c = new HttpClient(srv.http, "checkout-token");
  await c.connect(["payments.authorize"]);
  await assert.rejects(c.request(payment(), { timeout: 300 }), (e) => {
    assert.ok(e instanceof PigeonError, String(e));
    assert.equal(e.code, "REQUEST_TIMEOUT");
    assert.equal(e.status, 504);
    return true;
  });
  const gw = await connect(srv.ws, "gateway-token", ["payments.authorize"]);
  try {
    await approvePayments(gw);
    const req = payment();
    const reply = await c.request(req, { timeout: 5000 });
    assert.equal(reply.data.approved, true);
    assert.equal(reply.data.orderId, req.data.orderId);
  } finally {
    await gw.close();
  }
});
