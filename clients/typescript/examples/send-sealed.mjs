#!/usr/bin/env node
// send-sealed: signs and seals one chat message for a recipient and
// publishes it on chat.messages; the cross-language scenario of the Python
// suite (cross.ts_to_python) runs it. It runs on the built client (dist/:
// `npm ci && npx tsc` in clients/typescript first).
//
//   node clients/typescript/examples/send-sealed.mjs --url ws://127.0.0.1:PORT/v1/ws \
//     --token alice-token --keys clients/conformance/vectors/go.json --as alice \
//     --to spiffe://conformance/ns/chat/sa/bob --room lobby --text "hello bob"
//
// It connects with --token on subject chat.messages, fetches the recipient's
// published keys (GET /v1/accounts/{id}/keys on the same host), seals
// {"text": <text>} (UTF-8 JSON) for the recipient's valid enc key with the
// clear fields kind=chat, room=<room>, signs the envelope with the fixed
// signing key of --as from the --keys file (its "keys" member), and publishes
// it with intent chat and type chat.message.
//
// Assumes: both accounts exist and the sender's public keys are published
// (the caller does that; the broker's signature gate checks them).
//
// Prints the decision as one JSON line on stdout and exits 0; on refusal
// prints the error code (and message) on stderr and exits 1.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

let client;
try {
  client = await import("../dist/index.js");
} catch (e) {
  process.stderr.write(`send-sealed: the client is not built (cd clients/typescript && npm ci && npx tsc): ${e.message}\n`);
  process.exit(2);
}
const { connect, HttpClient, keyPairFrom, sealFor, signMessage, utf8Encode, PigeonError } = client;

const { values: a } = parseArgs({
  options: {
    url: { type: "string" },
    token: { type: "string" },
    keys: { type: "string" },
    as: { type: "string" },
    to: { type: "string" },
    room: { type: "string", default: "lobby" },
    text: { type: "string" },
  },
});
for (const k of ["url", "token", "keys", "as", "to", "text"]) {
  if (!a[k]) {
    process.stderr.write(`send-sealed: --${k} is required\n`);
    process.exit(2);
  }
}

const file = JSON.parse(readFileSync(a.keys, "utf8"));
const k = file.keys?.[a.as];
if (!k) {
  process.stderr.write(`send-sealed: no keys for ${a.as} in ${a.keys}\n`);
  process.exit(2);
}
const me = keyPairFrom(k.signingSeed, k.encryptionPrivate, { signingKid: k.signingKid, encryptionKid: k.encryptionKid });

let session;
try {
  const recipientKeys = await new HttpClient(a.url, a.token).fetchKeys(a.to);
  const data = sealFor({ kind: "chat", room: a.room }, utf8Encode(JSON.stringify({ text: a.text })), recipientKeys, me);
  const m = signMessage({ type: "chat.message", subject: "chat.messages", intent: "chat", data }, me.signingKid, me.signingSeed);
  session = await connect(a.url, a.token, ["chat.messages"], { reconnect: false, pingIntervalMs: 0 });
  const d = await session.publish(m);
  process.stdout.write(JSON.stringify({ status: d.status, id: d.message.id, sequence: d.message.sequence, message: d.message }) + "\n");
  await session.close();
  process.exit(0);
} catch (e) {
  const code = e instanceof PigeonError ? e.code : "ERROR";
  process.stderr.write(`${code}: ${e?.message ?? e}\n`);
  try {
    await session?.close({ timeoutMs: 1000 });
  } catch {
    /* exiting anyway */
  }
  process.exit(1);
}
