// Acks and nacks name the sequence of the delivery they answer
// (docs/protocol.md "Sequences", docs/http.md): a message id names one
// message at a time only, and once retention trims a message a newer one
// may be published under its id; a late answer to the old delivery must
// never settle it. Each test failed before the client sent the sequence.
import assert from "node:assert/strict";
import { test } from "node:test";
import { mkdtempSync, mkdirSync, copyFileSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect, HttpClient, PigeonError } from "../dist/index.js";
import { CONFORMANCE, ok, onSession, RAW_CONTRACT, Server, subscribingServer, until } from "./harness.mjs";

const OPTS = { reconnect: false, pingIntervalMs: 0 };
const msg = (i, over = {}) => ({ id: `msg_${i}`, subject: "x", sequence: i, data: {}, ...over });
const deliver = (ws, m) => ws.send(JSON.stringify({ op: "deliver", sub: "sub_1", attempt: 1, message: m }));

test("a subscription's acks and nacks carry the sequence of the delivery they answer", async () => {
  const frames = [];
  let held; // the first ack stays unanswered until released: the next ones gather
  const { srv, socket } = await subscribingServer((ws, f) => {
    frames.push(f);
    if (f.op === "ack" && !held) held = () => ok(ws, f);
    else ok(ws, f);
  });
  await onSession(srv, OPTS, async (s) => {
    await s.subscribe("x", async (m) => {
      if (m.id === "msg_4") throw new Error("fails");
    }, { maxInFlight: 4 });
    deliver(socket(), msg(1));
    await until(() => held, 2000, "the first ack");
    for (const i of [2, 3]) deliver(socket(), msg(i));
    deliver(socket(), msg(4));
    await until(() => frames.some((f) => f.op === "nack"), 2000, "the nack");
    // Gathered while the first ack waits for its answer.
    await new Promise((r) => setTimeout(r, 50));
    held();
    await until(() => frames.filter((f) => f.op === "ack").length === 2, 2000, "the gathered acks");
    const [one, batch] = frames.filter((f) => f.op === "ack");
    assert.equal(one.messageId, "msg_1");
    assert.equal(one.sequence, 1);
    assert.deepEqual(batch.messageIds, ["msg_2", "msg_3"]);
    assert.deepEqual(batch.sequences, [2, 3], "in step with messageIds");
    const nack = frames.find((f) => f.op === "nack");
    assert.equal(nack.messageId, "msg_4");
    assert.equal(nack.sequence, 4);
  });
});

// A delivery without a sequence (absent or null) was acked naming none (0
// in sequences, none alone), which settles whichever message holds the id:
// it is now refused, never handed over nor answered (see
// test/delivery_push.test.mjs), and every ack names a sequence.
test("a delivery without a sequence is never answered; every ack names one", async () => {
  const frames = [];
  const errors = [];
  const { srv, socket } = await subscribingServer((ws, f) => {
    frames.push(f);
    ok(ws, f);
  });
  await onSession(srv, { ...OPTS, onError: (e) => errors.push(e) }, async (s) => {
    await s.subscribe("x", async () => {}, { maxInFlight: 4 });
    deliver(socket(), msg(1, { sequence: undefined }));
    deliver(socket(), msg(2, { sequence: null }));
    deliver(socket(), msg(3));
    await until(() => frames.length === 1 && errors.length === 2, 2000, "the ack and the reports");
    assert.deepEqual([frames[0].messageId, frames[0].sequence], ["msg_3", 3], JSON.stringify(frames[0]));
    assert.deepEqual(errors.map((e) => [e.code, e.details.messageId]), [["BAD_FRAME", "msg_1"], ["BAD_FRAME", "msg_2"]]);
  });
});

test("gathered acks are split into frames within the server's maxFrame", async () => {
  const acks = [];
  let held;
  // rawServer grants maxFrame 1 MiB: 5000 acks of 256-byte ids are more.
  const { srv, socket } = await subscribingServer((ws, f) => {
    if (f.op === "ack") {
      acks.push({ bytes: Buffer.byteLength(JSON.stringify(f)), ids: f.messageIds ?? [f.messageId], seqs: f.sequences ?? [f.sequence] });
      if (!held) return (held = () => ok(ws, f));
    }
    ok(ws, f);
  });
  const n = 5000;
  const long = (i) => `${"m".repeat(250)}${String(i).padStart(6, "0")}`;
  await onSession(srv, OPTS, async (s) => {
    let done = 0;
    await s.subscribe("x", async () => void done++, { maxInFlight: 64, window: 10000 });
    deliver(socket(), msg(0, { id: long(0), sequence: 1 }));
    await until(() => held, 2000, "the first ack");
    for (let i = 1; i <= n; i++) deliver(socket(), msg(i, { id: long(i), sequence: i + 1 }));
    await until(() => done === n + 1, 10_000, "the handlers");
    held();
    await until(() => acks.reduce((k, a) => k + a.ids.length, 0) === n + 1, 10_000, "every ack");
    assert.ok(acks.length > 2, `${acks.length} ack frames`);
    for (const a of acks) assert.ok(a.bytes <= 1 << 20, `an ack frame of ${a.bytes} bytes`);
    const seqs = acks.flatMap((a) => a.seqs);
    assert.deepEqual(seqs, Array.from({ length: n + 1 }, (_, i) => i + 1));
  });
});

test("pull acks and nacks over WebSocket name the sequence: of the message passed, or given", async () => {
  const frames = [];
  const { srv } = await subscribingServer((ws, f) => {
    frames.push(f);
    ok(ws, f);
  });
  await onSession(srv, OPTS, async (s) => {
    await s.ack("x", msg(7));
    await s.ack("x", "msg_8", { sequence: 8 });
    await s.ack("x", "msg_9");
    await s.nack("x", msg(10), { delayMs: 0 });
    await s.nack("x", "msg_11", { sequence: 11 });
    await assert.rejects(s.ack("x", "msg_12", { sequence: 1.5 }), (e) => e instanceof PigeonError && e.code === "INVALID_ARGUMENT");
    await assert.rejects(s.ack("x", { subject: "x" }), (e) => e instanceof PigeonError && e.code === "INVALID_ARGUMENT");
  });
  const strip = ({ id, ...f }) => f;
  assert.deepEqual(frames.map(strip), [
    { op: "ack", subject: "x", messageId: "msg_7", sequence: 7 },
    { op: "ack", subject: "x", messageId: "msg_8", sequence: 8 },
    { op: "ack", subject: "x", messageId: "msg_9" },
    { op: "nack", subject: "x", messageId: "msg_10", sequence: 10, delayMs: 0 },
    { op: "nack", subject: "x", messageId: "msg_11", sequence: 11 },
  ]);
});

test("HTTP acks and nacks name the sequence in their body", async () => {
  const bodies = [];
  const fetch = async (url, init) => {
    bodies.push({ path: new URL(url).pathname, body: JSON.parse(init.body) });
    return new Response("{}", { status: 200, headers: { "content-type": "application/json" } });
  };
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch });
  h.contract = RAW_CONTRACT;
  await h.ack("x", msg(3));
  await h.ack("x", "msg_4", { sequence: 4 });
  await h.nack("x", msg(5), { delayMs: 10 });
  await h.nack("x", "msg_6");
  assert.deepEqual(bodies, [
    { path: "/v1/subjects/x/ack", body: { messageId: "msg_3", sequence: 3 } },
    { path: "/v1/subjects/x/ack", body: { messageId: "msg_4", sequence: 4 } },
    { path: "/v1/subjects/x/nack", body: { messageId: "msg_5", sequence: 5, delayMs: 10 } },
    { path: "/v1/subjects/x/nack", body: { messageId: "msg_6" } },
  ]);
});

/**
 * A policy folder with the conformance schemas and one work-queue subject,
 * jobs.seq, keeping a single message: publishing a few dozen more trims
 * the first, and frees its id.
 */
function retentionPolicies() {
  const dir = mkdtempSync(join(tmpdir(), "pigeon-ts-policies-"));
  mkdirSync(join(dir, "schemas"));
  mkdirSync(join(dir, "subjects"));
  copyFileSync(join(CONFORMANCE, "policies/schemas/telemetry.v1.json"), join(dir, "schemas/telemetry.v1.json"));
  const allow = (p) => [{ effect: "allow", principals: [`spiffe://conformance/ns/${p}`] }];
  writeFileSync(
    join(dir, "subjects/jobs.seq.json"),
    JSON.stringify({
      name: "jobs.seq",
      version: "v1",
      mode: "workQueue",
      intents: ["report"],
      schema: { name: "telemetry.v1", compatibility: "backward" },
      retention: { maxMessages: 1 },
      data: { classification: "internal" },
      policy: {
        publish: [{ ...allow("edge/sa/sensor")[0], intents: ["report"] }],
        receive: allow("ops/sa/monitor"),
        ack: allow("ops/sa/monitor"),
      },
    }),
  );
  return dir;
}

test("a late ack of a message whose id was reused is refused by the server, over WebSocket and HTTP", async () => {
  const dir = retentionPolicies();
  const srv = await Server.start({ args: ["--policies", dir] });
  const job = (id, value) => ({ id, type: "telemetry.reading", subject: "jobs.seq", intent: "report", data: { kind: "t", site: "s", value } });
  try {
    const sensor = await connect(srv.ws, "sensor-token", ["jobs.seq"], OPTS);
    const monitor = await connect(srv.ws, "monitor-token", ["jobs.seq"], OPTS);
    const http = new HttpClient(srv.http, "monitor-token");
    await http.connect(["jobs.seq"]);
    try {
      for (const [name, late, settle] of [
        ["ws ack", (m) => monitor.ack("jobs.seq", m), (m) => monitor.ack("jobs.seq", m)],
        ["ws nack", (m) => monitor.nack("jobs.seq", m, { delayMs: 0 }), (m) => monitor.ack("jobs.seq", m)],
        ["http ack", (m) => http.ack("jobs.seq", m), (m) => http.ack("jobs.seq", m)],
        ["http nack", (m) => http.nack("jobs.seq", m, { delayMs: 0 }), (m) => http.ack("jobs.seq", m)],
      ]) {
        const id = `job-${name.replace(" ", "-")}`;
        const receive = (max) => (name.startsWith("ws") ? monitor.receive("jobs.seq", { max }) : http.receive("jobs.seq", { max, ack: "explicit" }));
        const first = (await sensor.publish(job(id, 0))).message;
        const [old] = await receive(1);
        assert.equal(old.id, id, name);
        assert.equal(old.sequence, first.sequence, name);
        // Past the bound by its slack: the subject is trimmed to its newest
        // message, and the id is free again.
        for (let i = 1; i <= 40; i++) await sensor.publish(job(`${id}-other-${i}`, i));
        let again;
        await until(async () => {
          const d = await sensor.publish(job(id, 99));
          if (d.status === "accepted") again = d.message;
          return again !== undefined;
        }, 10_000, `${name}: the id free again`);
        assert.ok(again.sequence > old.sequence, name);
        const got = await receive(100);
        const fresh = got.find((m) => m.id === id);
        assert.equal(fresh?.sequence, again.sequence, name);
        // The late answer to the old delivery settles nothing.
        await assert.rejects(late(old), (e) => e instanceof PigeonError && e.code === "ACK_NOT_ALLOWED", name);
        assert.deepEqual(await receive(100), [], `${name}: the newer message is still leased`);
        for (const m of got) await settle(m);
      }
    } finally {
      await sensor.close({ timeoutMs: 1000 });
      await monitor.close({ timeoutMs: 1000 });
    }
  } finally {
    await srv.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
