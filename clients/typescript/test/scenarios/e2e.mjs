// End-to-end signing and sealing, and the cross-language vectors.
import assert from "node:assert/strict";
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { execFile } from "node:child_process";
import { test } from "node:test";
import {
  connect,
  HttpClient,
  KeyCache,
  PigeonError,
  b64decode,
  b64encode,
  canonicalSigningInput,
  keyPairFrom,
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

/** Checks every case of a vectors file, as a recipient would. */
function checkVectors(v, keys) {
  assert.ok(v.signed.length > 0 && v.sealed.length > 0 && v.sealedData.length > 0);
  for (const c of v.signed) {
    assert.equal(td.decode(canonicalSigningInput(c.message)), c.signingInput, `${c.name}: signing input`);
    verifyMessage(c.message, keys[c.signer].signingPublic);
    assert.equal(c.message.signature.kid, keys[c.signer].signingKid);
    // Ed25519 is deterministic: signing the same message gives the same bytes.
    const again = signMessage({ ...c.message, signature: undefined }, c.message.signature.kid, keys[c.signer].signingSeed);
    assert.equal(again.signature.sig, c.message.signature.sig, `${c.name}: signature`);
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
  return {
    note: "Generated by the TypeScript client's tests with PIGEON_WRITE_VECTORS=1 (clients/typescript). Keys are the fixed test keys of go.json.",
    signed,
    sealed,
    sealedData,
    tampered,
  };
}

scenario("vectors.go", async () => {
  checkVectors(goVectors, fixedKeys());
});

scenario("vectors.own", async () => {
  const keys = fixedKeys();
  if (process.env.PIGEON_WRITE_VECTORS === "1") {
    writeFileSync(OWN, JSON.stringify(makeVectors(keys), null, 1) + "\n");
  }
  assert.ok(existsSync(OWN), "vectors/typescript.json is checked in (write it with PIGEON_WRITE_VECTORS=1)");
  checkVectors(JSON.parse(readFileSync(OWN, "utf8")), keys);
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

scenario("e2e.sign_seal", async () => {
  const srv = await sharedServer();
  const keys = fixedKeys();
  await publishChatKeys(srv, keys);
  const alice = await connect(srv.ws, "alice-token", ["chat.messages"]);
  const bob = await connect(srv.ws, "bob-token", ["chat.messages"]);
  try {
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
  } finally {
    await Promise.all([alice.close(), bob.close()]);
  }
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
