// Brief publish answers (docs/protocol.md, "Brief answers"): the session
// asks for them and puts the data it sent back, so that a publish's result
// is the very message a subscriber receives. The subjects of the
// conformance catalog all have schemas, so these tests start a server of
// their own with one subject without a schema, which takes any data.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "../../dist/index.js";
import { Server, uniq, until } from "../harness.mjs";

const WRITER = "spiffe://clients/ns/test/sa/writer";
const SUBJECT = "notes.any";

let server;
let catalog;
/** A server whose catalog is notes.any (pub/sub, no schema) and the writer's token. */
async function notesServer() {
  if (server) return server;
  catalog = mkdtempSync(join(tmpdir(), "pigeon-ts-brief-"));
  mkdirSync(join(catalog, "subjects"));
  mkdirSync(join(catalog, "schemas"));
  const allow = [{ effect: "allow", principals: [WRITER] }];
  writeFileSync(join(catalog, "subjects", `${SUBJECT}.json`), JSON.stringify({
    name: SUBJECT, version: "v1", mode: "pubsub", intents: ["note"],
    policy: { publish: allow, receive: allow, ack: allow },
  }));
  writeFileSync(join(catalog, "tokens.yaml"), `tokens:\n  - { token: writer-token, principal: "${WRITER}" }\n`);
  // The flags given last win over the conformance catalog's.
  server = await Server.start({ args: ["--policies", catalog, "--tokens", join(catalog, "tokens.yaml")] });
  return server;
}

after(async () => {
  await server?.stop();
  if (catalog) rmSync(catalog, { recursive: true, force: true });
});

const note = (over = {}) => ({ type: "note", subject: SUBJECT, intent: "note", ...over });

// The data shapes.
const SHAPES = [
  ["an object", { data: { text: "hi", n: [1, 2.5, -3e-7, { x: null }], ok: true } }],
  ["escapes and non-ASCII", { data: { text: "café \"q\" \\ ✓ 😀 \n\t\u0001 </script>", nested: { "ключ": ["ü", { "\u2028": "" }] } } }],
  ["an empty object", { data: {} }],
  ["no data", {}],
  ["data undefined", { data: undefined }],
  ["null", { data: null }],
  ["a string", { data: "just text" }],
  ["a number", { data: 1.5e300 }],
  ["an array", { data: [{}, [], ""] }],
];

// Members that name data in another case: the server refuses the message
// (member names are case-sensitive), and the client sends them as given.
const OTHER_CASE = [
  ["Data", { Data: { upper: true } }],
  ["data then DATA", { data: { first: 1 }, DATA: { last: 2 } }],
];

/** Subscribes s to notes.any; returns the messages delivered, by id. */
async function deliveries(s) {
  const got = new Map();
  await s.subscribe(SUBJECT, (m) => void got.set(m.id, m));
  return got;
}

test("brief answers: a publish's result is the message delivered, whatever its data", async () => {
  const srv = await notesServer();
  const s = await connect(srv.ws, "writer-token", [SUBJECT]);
  try {
    const got = await deliveries(s);
    for (const [name, over] of SHAPES) {
      const m = note(over);
      const sent = JSON.stringify(m);
      const d = await s.publish(m);
      assert.equal(d.status, "accepted", name);
      await until(() => got.has(d.message.id), 5000, `the delivery of ${name}`);
      assert.deepEqual(d.message, got.get(d.message.id), name);
      assert.ok("data" in d.message, `${name}: the result has data`);
      assert.equal(JSON.stringify(m), sent, `${name}: the caller's message is not touched`);
      if (typeof d.message.data === "object" && d.message.data !== null) {
        assert.notEqual(d.message.data, m.data, `${name}: the result's data is its own`);
      }
    }
    assert.deepEqual(got.size, SHAPES.length);
    // Publishes called together leave together, in one publish_batch.
    const ds = await Promise.all(SHAPES.map(([, over]) => s.publish(note(over))));
    await until(() => ds.every((d) => got.has(d.message.id)), 5000, "the batch's deliveries");
    ds.forEach((d, i) => {
      assert.equal(d.status, "accepted", SHAPES[i][0]);
      assert.deepEqual(d.message, got.get(d.message.id), `batched: ${SHAPES[i][0]}`);
    });
  } finally {
    await s.close();
  }
});

test("brief answers: a member naming data in another case is refused, alone and in a batch", async () => {
  const srv = await notesServer();
  const s = await connect(srv.ws, "writer-token", [SUBJECT]);
  try {
    for (const [name, over] of OTHER_CASE) {
      await assert.rejects(s.publish(note(over)), (e) => e.code === "ENVELOPE_INVALID" && /only in case/.test(e.message), name);
    }
    const [ok, bad] = await Promise.allSettled([s.publish(note({ data: { v: 1 } })), s.publish(note({ Data: { v: 2 } }))]);
    assert.equal(ok.status, "fulfilled");
    assert.equal(ok.value.status, "accepted");
    assert.deepEqual(ok.value.message.data, { v: 1 });
    assert.equal(bad.status, "rejected");
    assert.equal(bad.reason.code, "ENVELOPE_INVALID");
  } finally {
    await s.close();
  }
});

test("brief answers: a duplicate's result carries the original's data, not the data sent", async () => {
  const srv = await notesServer();
  const s = await connect(srv.ws, "writer-token", [SUBJECT]);
  try {
    const got = await deliveries(s);
    const key = uniq("dup");
    const first = await s.publish(note({ idempotencyKey: key, data: { v: 1, text: "ü" } }));
    assert.equal(first.status, "accepted");
    await until(() => got.has(first.message.id), 5000, "the original's delivery");
    assert.deepEqual(first.message, got.get(first.message.id));
    const again = await s.publish(note({ idempotencyKey: key, data: { v: 2 } }));
    assert.equal(again.status, "duplicate");
    assert.deepEqual(again.message, first.message);
    // The same in a batch, beside a new message with data of its own.
    const key2 = uniq("dup");
    const [dup, fresh, fresh2] = await Promise.all([
      s.publish(note({ idempotencyKey: key, data: { v: 3 } })),
      s.publish(note({ idempotencyKey: key2 })),
      s.publish(note({ idempotencyKey: key2, data: { v: 4 } })),
    ]);
    assert.equal(dup.status, "duplicate");
    assert.deepEqual(dup.message, first.message);
    assert.equal(fresh.status, "accepted");
    assert.deepEqual(fresh.message.data, {});
    assert.equal(fresh2.status, "duplicate");
    assert.deepEqual(fresh2.message, fresh.message);
  } finally {
    await s.close();
  }
});
