// End-to-end signing and sealing, and the cross-language vectors.
import assert from "node:assert/strict";
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { execFile } from "node:child_process";
import { test } from "node:test";
import { ed25519 } from "@noble/curves/ed25519.js";
import {
  connect,
  HttpClient,
  KeyCache,
  PigeonError,
  b64decode,
  b64encode,
  canonicalSigningInput,
  keyPairFrom,
  newMessageId,
  open,
  openData,
  publicKeys,
  seal,
  sealData,
  sealFor,
  signMessage,
  utf8Decode,
  utf8Encode,
  verifyAndOpen,
  verifyMessage,
} from "../../dist/index.js";
import { scenario, sharedServer, CLIENT, CONFORMANCE, PRINCIPALS, until, sleep } from "../harness.mjs";

const goVectors = JSON.parse(readFileSync(join(CONFORMANCE, "vectors/go.json"), "utf8"));
const OWN = join(CONFORMANCE, "vectors/typescript.json");

/** alice's and bob's fixed key pairs, from go.json. */
export function fixedKeys() {
  const out = {};
  for (const [name, k] of Object.entries(goVectors.keys)) {
    out[name] = keyPairFrom(k.signingSeed, k.encryptionPrivate, { signingKid: k.signingKid, encryptionKid: k.encryptionKid });
    assert.equal(b64encode(out[name].signingPublic), k.signingPublic);
    assert.equal(b64encode(out[name].encryptionPublic), k.encryptionPublic);
  }
  return out;
}

const td = new TextDecoder();

/** The signed case made in the first form (a signature without v), which every client verifies too. */
const FIRST_FORM = "first-form";

/**
 * Signs m in the first form (["pigeon-sig-v1", subject, id, time, data], a
 * signature without v), as clients did before the second form: the client
 * no longer makes it, but still verifies it.
 */
export function signFirstForm(m, kid, seed) {
  m.signature = { kid, alg: "ed25519", sig: "" };
  m.signature.sig = b64encode(ed25519.sign(canonicalSigningInput(m), seed));
  return m;
}

/** Checks every case of a vectors file, as a recipient would. */
function checkVectors(v, keys) {
  assert.ok(v.signed.length > 0 && v.sealed.length > 0 && v.sealedData.length > 0);
  for (const c of v.signed) {
    assert.equal(td.decode(canonicalSigningInput(c.message)), c.signingInput, `${c.name}: signing input`);
    verifyMessage(c.message, keys[c.signer].signingPublic);
    assert.equal(c.message.signature.kid, keys[c.signer].signingKid);
    const again = signMessage({ ...c.message, signature: undefined }, c.message.signature.kid, keys[c.signer].signingSeed);
    assert.equal(again.signature.v, 2, `${c.name}: signMessage makes the second form`);
    if (c.name === FIRST_FORM) {
      assert.ok(!("v" in c.message.signature), `${c.name}: a signature without v`);
      assert.match(c.signingInput, /^\["pigeon-sig-v1",/, `${c.name}: the first form`);
      // Signed again, it is in the second form, which verifies too.
      assert.notEqual(again.signature.sig, c.message.signature.sig, `${c.name}: signed again in the second form`);
      verifyMessage(again, keys[c.signer].signingPublic);
    } else {
      assert.equal(c.message.signature.v, 2, `${c.name}: signed in the second form (v 2)`);
      assert.match(c.signingInput, /^\["pigeon-sig-v2",/, `${c.name}: the second form`);
      // Ed25519 is deterministic: signing the same message gives the same bytes.
      assert.equal(again.signature.sig, c.message.signature.sig, `${c.name}: signature`);
    }
  }
  for (const c of v.sealed) {
    const pt = open(c.sealed, keys[c.recipient].encryptionPrivate, keys[c.sender].signingPublic);
    assert.deepEqual(b64encode(pt), c.plaintext, c.name);
  }
  for (const c of v.sealedData) {
    const { clear, payload } = openData(c.data, keys[c.recipient].encryptionPrivate, keys[c.sender].signingPublic);
    assert.deepEqual(clear, c.clear, c.name);
    assert.equal(b64encode(payload), c.payload, c.name);
  }
  for (const c of v.tampered ?? []) {
    if (c.kind === "signature") {
      assert.throws(() => verifyMessage(c.message, keys[c.signer].signingPublic), (e) => e instanceof PigeonError && e.code === "SIGNATURE_INVALID", c.name);
    } else {
      assert.throws(() => open(c.sealed, keys[c.recipient].encryptionPrivate, keys[c.sender].signingPublic), (e) => e instanceof PigeonError, c.name);
    }
  }
}

/** Makes this client's vectors: signed messages and sealed payloads with the fixed keys. */
function makeVectors(keys) {
  const signed = [
    { id: "msg_ts_1", subject: "chat.messages", time: "2026-11-29T12:00:00.000Z", data: { kind: "chat", room: "lobby", text: "hello from ts" } },
    { id: "msg_ts_2", subject: "events.telemetry", time: "2026-11-29T12:00:01.5+01:00", data: { b: 1e30, a: 0.002, c: -0, d: 1e-7, e: 123456789, s: "tab\t \u0001 é 漢 😀 \u2028 /<&", "😀": 1, "דּ": 2 } },
    { id: "msg_ts_3", subject: "events.telemetry", time: "2026-11-29T12:00:02Z" },
  ].map((m, i) => {
    const msg = { type: "vector", intent: "chat", ...m };
    signMessage(msg, keys.alice.signingKid, keys.alice.signingSeed);
    return { name: `ts-${i + 1}`, signer: "alice", message: msg, signingInput: td.decode(canonicalSigningInput(msg)) };
  });
  // Every field the second form covers besides subject, id, time and data, with escapes.
  const fields = signMessage({
    id: "msg_ts_4", subject: "payments.authorize", time: "2026-11-29T12:00:03Z",
    type: "payment.authorization.requested", intent: "authorize_payment", idempotencyKey: "k-\u00e9-ts",
    replyTo: "inbox.checkout", correlationId: "corr \"ts\" \\ 1", reason: "retry\n<after>\t\u0001 \u2028 漢 😀",
    data: { amount: "42.50", note: "q\"bs\\" },
  }, keys.alice.signingKid, keys.alice.signingSeed);
  signed.push({ name: "envelope-fields", signer: "alice", message: fields, signingInput: td.decode(canonicalSigningInput(fields)) });
  const first = signFirstForm({ id: "msg_ts_5", subject: "chat.messages", time: "2026-11-29T12:00:04Z", type: "vector", intent: "chat", data: { form: 1 } },
    keys.bob.signingKid, keys.bob.signingSeed);
  signed.push({ name: FIRST_FORM, signer: "bob", message: first, signingInput: td.decode(canonicalSigningInput(first)) });
  const sealed = [
    ["short", "alice", "bob", utf8Encode("hello bob, from typescript")],
    ["empty", "bob", "alice", new Uint8Array(0)],
    ["binary", "alice", "bob", Uint8Array.from({ length: 700 }, (_, i) => (i * 37) & 0xff)],
  ].map(([name, sender, recipient, pt]) => ({
    name,
    sender,
    recipient,
    plaintext: b64encode(pt),
    sealed: seal(pt, keys[recipient].encryptionKid, keys[recipient].encryptionPublic, keys[sender].signingKid, keys[sender].signingSeed),
  }));
  const clear = { kind: "chat", room: "lobby" };
  const payload = utf8Encode(JSON.stringify({ text: "meet at noon, says ts" }));
  const sealedData = [
    {
      name: "chat",
      sender: "alice",
      recipient: "bob",
      clear,
      payload: b64encode(payload),
      data: sealData(clear, payload, keys.bob.encryptionKid, keys.bob.encryptionPublic, keys.alice.signingKid, keys.alice.signingSeed),
    },
  ];
  const t = structuredClone(sealed[0].sealed);
  const ct = b64decode(t.ciphertext);
  ct[0] ^= 1;
  t.ciphertext = b64encode(ct);
  const tm = structuredClone(signed[0].message);
  tm.data.text = "hellO from ts";
  const tampered = [
    { name: "signed-data-changed", kind: "signature", signer: "alice", message: tm },
    { name: "sealed-ciphertext-flipped", kind: "sealed", sender: "alice", recipient: "bob", sealed: t },
  ];
  // The second form's own fields, and the form itself, changed on the envelope-fields case.
  for (const [name, edit] of [
    ["signed-intent-changed", (m) => void (m.intent = "refund_payment")],
    ["signed-type-changed", (m) => void (m.type = "payment.refund.requested")],
    ["signed-replyTo-changed", (m) => void (m.replyTo = "inbox.elsewhere")],
    ["signed-idempotencyKey-removed", (m) => void delete m.idempotencyKey],
    ["signed-correlationId-changed", (m) => void (m.correlationId = "corr 8")],
    ["signed-reason-changed", (m) => void delete m.reason],
    ["signed-v-removed", (m) => void delete m.signature.v],
    ["signed-v-1", (m) => void (m.signature.v = 1)],
    ["signed-v-3", (m) => void (m.signature.v = 3)],
  ]) {
    const m = structuredClone(fields);
    edit(m);
    tampered.push({ name, kind: "signature", signer: "alice", message: m });
  }
  return {
    note: "Generated by the TypeScript client's tests with PIGEON_WRITE_VECTORS=1 (clients/typescript). Keys are the fixed test keys of go.json.",
    signed,
    sealed,
    sealedData,
    tampered,
  };
}

scenario("vectors.go", async () => {
  const names = (cases) => cases.map((c) => c.name);
  assert.deepEqual(names(goVectors.signed), ["plain", "member-order", "numbers", "escapes", "empty-data", "nested", "envelope-fields", FIRST_FORM]);
  assert.deepEqual(names(goVectors.tampered), [
    "signed-data-changed", "signed-subject-changed", "signed-intent-changed", "signed-type-changed", "signed-replyTo-changed",
    "signed-idempotencyKey-removed", "signed-correlationId-changed", "signed-reason-changed", "signed-v-removed", "signed-v-1", "signed-v-3",
    "sealed-ciphertext-flipped", "sealed-sender-kid-swapped",
  ]);
  checkVectors(goVectors, fixedKeys());
});

scenario("vectors.own", async () => {
  const keys = fixedKeys();
  if (process.env.PIGEON_WRITE_VECTORS === "1") {
    writeFileSync(OWN, JSON.stringify(makeVectors(keys), null, 1) + "\n");
  }
  assert.ok(existsSync(OWN), "vectors/typescript.json is checked in (write it with PIGEON_WRITE_VECTORS=1)");
  const own = JSON.parse(readFileSync(OWN, "utf8"));
  assert.deepEqual(own.signed.map((c) => c.name), ["ts-1", "ts-2", "ts-3", "envelope-fields", FIRST_FORM]);
  assert.equal(own.tampered.length, 11);
  checkVectors(own, keys);
  // A fresh set made now verifies too.
  checkVectors(makeVectors(keys), keys);
});

/** Creates alice's and bob's accounts (tolerating existing ones) and publishes their keys. */
export async function publishChatKeys(srv, keys) {
  const admin = new HttpClient(srv.http, "admin-token");
  for (const who of ["alice", "bob"]) {
    await admin.createAccount(PRINCIPALS[who], { ifMissing: true });
    await new HttpClient(srv.http, `${who}-token`).publishKeys(PRINCIPALS[who], publicKeys(keys[who]));
  }
}

/** Alice and Bob, their keys published, each on a session of chat.messages; closes both after body. */
async function chatPair(body) {
  const srv = await sharedServer();
  const keys = fixedKeys();
  await publishChatKeys(srv, keys);
  const alice = await connect(srv.ws, "alice-token", ["chat.messages"]);
  const bob = await connect(srv.ws, "bob-token", ["chat.messages"]);
  try {
    await body({ srv, keys, alice, bob });
  } finally {
    await Promise.all([alice.close(), bob.close()]);
  }
}

scenario("e2e.sign_seal", async () => {
  await chatPair(async ({ srv, keys, alice, bob }) => {
  const bobKeys = new KeyCache(new HttpClient(srv.http, "bob-token"));
  const aliceKeys = new KeyCache(new HttpClient(srv.http, "alice-token"));
  const opened = [];
  const failures = [];
  await bob.subscribe(
    "chat.messages",
    async (m) => {
      try {
        const senderKeys = await bobKeys.get(m.source);
        const { clear, payload } = verifyAndOpen(m, senderKeys, keys.bob);
        opened.push({ clear, text: JSON.parse(utf8Decode(payload)).text, source: m.source });
      } catch (e) {
        failures.push(e);
      }
    },
    { selector: "/kind=chat/room=lobby" },
  );
  const text = `hello bob ${Math.random()}`;
  const data = sealFor({ kind: "chat", room: "lobby" }, utf8Encode(JSON.stringify({ text })), await aliceKeys.get(PRINCIPALS.bob), keys.alice);
  const m = signMessage({ type: "chat.message", subject: "chat.messages", intent: "chat", data }, keys.alice.signingKid, keys.alice.signingSeed);
  const d = await alice.publish(m);
  assert.equal(d.status, "accepted");
  await until(() => opened.length + failures.length >= 1, 5000, "bob to receive");
  assert.deepEqual(failures, []);
  assert.deepEqual(opened[0], { clear: { kind: "chat", room: "lobby" }, text, source: PRINCIPALS.alice });

  // Unsigned: SIGNATURE_REQUIRED; signed but in clear: ENCRYPTION_REQUIRED.
  const unsigned = { type: "chat.message", subject: "chat.messages", intent: "chat", data: sealFor({ kind: "chat", room: "lobby" }, utf8Encode("{}"), await aliceKeys.get(PRINCIPALS.bob), keys.alice) };
  await assert.rejects(alice.publish(unsigned), (e) => e instanceof PigeonError && e.code === "SIGNATURE_REQUIRED");
  const clearMsg = signMessage({ type: "chat.message", subject: "chat.messages", intent: "chat", data: { kind: "chat", room: "lobby", text: "in clear" } }, keys.alice.signingKid, keys.alice.signingSeed);
  await assert.rejects(alice.publish(clearMsg), (e) => e instanceof PigeonError && e.code === "ENCRYPTION_REQUIRED");
  await sleep(100);
  assert.equal(opened.length, 1);
  });
});

test("e2e: the broker takes second-form signatures, delivers them with v 2, and refuses a covered field changed after signing; a first-form signature still passes", async () => {
  await chatPair(async ({ srv, keys, alice, bob }) => {
  const aliceKeys = await new HttpClient(srv.http, "bob-token").fetchKeys(PRINCIPALS.alice);
  const bobKeys = await new HttpClient(srv.http, "alice-token").fetchKeys(PRINCIPALS.bob);
  const room = `v2-${Math.random()}`;
  const got = [];
  await bob.subscribe("chat.messages", (m) => void got.push(m), { selector: `/kind=chat/room=${room}` });
  const message = (text, idempotencyKey) => ({
    type: "chat.message", subject: "chat.messages", intent: "chat", idempotencyKey,
    data: sealFor({ kind: "chat", room }, utf8Encode(JSON.stringify({ text })), bobKeys, keys.alice),
  });
  const key = `v2-${Math.random()}`;

  // Second form: accepted; the decision and the delivery carry v 2 and verify, every field included.
  const m = signMessage(message("second form", `${key}-1`), keys.alice.signingKid, keys.alice.signingSeed);
  assert.equal(m.signature.v, 2);
  const d = await alice.publish(m);
  assert.equal(d.status, "accepted");
  assert.deepEqual(d.message.signature, m.signature);
  await until(() => got.length >= 1, 5000, "bob to receive the second-form message");
  assert.deepEqual(got[0].signature, { ...m.signature, v: 2 });
  assert.equal(got[0].idempotencyKey, `${key}-1`);
  assert.equal(JSON.parse(utf8Decode(verifyAndOpen(got[0], aliceKeys, keys.bob).payload)).text, "second form");

  // A covered field changed after signing: the broker refuses it, and so does the client.
  const changed = { ...signMessage(message("changed", `${key}-2`), keys.alice.signingKid, keys.alice.signingSeed), idempotencyKey: `${key}-3` };
  assert.throws(() => verifyMessage(changed, keys.alice.signingPublic), (e) => e instanceof PigeonError && e.code === "SIGNATURE_INVALID");
  await assert.rejects(alice.publish(changed), (e) => e instanceof PigeonError && e.code === "SIGNATURE_INVALID");
  // So is a v the client refuses.
  const v3 = signMessage(message("v3", `${key}-4`), keys.alice.signingKid, keys.alice.signingSeed);
  v3.signature.v = 3;
  await assert.rejects(alice.publish(v3), (e) => e instanceof PigeonError && e.code === "SIGNATURE_INVALID");

  // First form (no v): still accepted and verified, even with the idempotency key changed after signing (what it leaves unsigned).
  const unsigned = { ...message("first form", `${key}-5`), id: newMessageId(), time: new Date().toISOString() };
  const first = { ...signFirstForm(unsigned, keys.alice.signingKid, keys.alice.signingSeed), idempotencyKey: `${key}-6` };
  const d1 = await alice.publish(first);
  assert.equal(d1.status, "accepted");
  await until(() => got.length >= 2, 5000, "bob to receive the first-form message");
  assert.ok(!("v" in got[1].signature), "a first-form signature is delivered without v");
  assert.equal(JSON.parse(utf8Decode(verifyAndOpen(got[1], aliceKeys, keys.bob).payload)).text, "first form");
  await sleep(100);
  assert.equal(got.length, 2, "nothing refused was delivered");
  });
});

test("examples/send-sealed.mjs: bob opens what the script sent", async () => {
  const srv = await sharedServer();
  const keys = fixedKeys();
  await publishChatKeys(srv, keys);
  const bob = await connect(srv.ws, "bob-token", ["chat.messages"]);
  try {
    const opened = [];
    const aliceKeys = await new HttpClient(srv.http, "bob-token").fetchKeys(PRINCIPALS.alice);
    await bob.subscribe("chat.messages", (m) => void opened.push(JSON.parse(utf8Decode(verifyAndOpen(m, aliceKeys, keys.bob).payload)).text), {
      selector: "/kind=chat/room=side",
    });
    const text = `via script ${Math.random()}`;
    const { stdout, code } = await run(process.execPath, [
      join(CLIENT, "examples/send-sealed.mjs"),
      "--url", srv.ws, "--token", "alice-token", "--keys", join(CONFORMANCE, "vectors/go.json"),
      "--as", "alice", "--to", PRINCIPALS.bob, "--room", "side", "--text", text,
    ]);
    assert.equal(code, 0);
    const lines = stdout.trim().split("\n");
    assert.equal(lines.length, 1);
    assert.equal(JSON.parse(lines[0]).status, "accepted");
    await until(() => opened.length === 1, 5000, "bob to open it");
    assert.deepEqual(opened, [text]);
    // A refusal: exit 1 and the code on stderr.
    const bad = await run(process.execPath, [
      join(CLIENT, "examples/send-sealed.mjs"),
      "--url", srv.ws, "--token", "bob-token", "--keys", join(CONFORMANCE, "vectors/go.json"),
      "--as", "alice", "--to", PRINCIPALS.bob, "--text", "bob signing as alice",
    ]);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /^SIGNATURE_INVALID/);
  } finally {
    await bob.close();
  }
});

function run(cmd, args) {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout: 20_000 }, (err, stdout, stderr) => resolve({ code: err ? (err.code ?? 1) : 0, stdout, stderr }));
  });
}
