// A message's hops (docs/protocol.md, "hops"): how many WebAssembly programs
// deep it is, set by the broker. A delivery exposes it (undefined when
// absent), one whose hops is no broker's is a bad frame as one whose
// sequence the client cannot hold is, it enters no signing input, and what
// a publisher writes there is replaced.
import assert from "node:assert/strict";
import { test } from "node:test";
import { connect, generateKeys, PigeonError, publicKeys, signMessage, verifyMessageWithKeys } from "../dist/index.js";
import { notification, onSession, Server, subscribingServer, until } from "./harness.mjs";

const OPTS = { reconnect: false, pingIntervalMs: 0 };
const msg = (i, over = {}) => ({ id: `msg_${i}`, subject: "x", sequence: i, data: {}, ...over });
const deliver = (ws, m) => ws.send(JSON.stringify({ op: "deliver", sub: "sub_1", attempt: 1, message: m }));

test("a delivered hops is exposed, an absent one is undefined", async () => {
  const { srv, socket } = await subscribingServer();
  await onSession(srv, OPTS, async (s) => {
    const got = [];
    await s.subscribe("x", (m) => {
      got.push(m);
    });
    deliver(socket(), msg(1, { hops: 3 }));
    deliver(socket(), msg(2));
    deliver(socket(), msg(3, { hops: 0 }));
    deliver(socket(), msg(4, { hops: 2 ** 32 - 1 }));
    await until(() => got.length === 4, 5000, "four deliveries");
    assert.deepEqual(got.map((m) => [m.id, m.hops]), [["msg_1", 3], ["msg_2", undefined], ["msg_3", 0], ["msg_4", 2 ** 32 - 1]]);
  });
});

test("a delivery whose hops is not an integer of 0 to 2^32-1 is BAD_FRAME, handed to no handler", async () => {
  const { srv, socket } = await subscribingServer();
  const errors = [];
  await onSession(srv, { ...OPTS, onError: (e) => errors.push(e) }, async (s) => {
    const got = [];
    await s.subscribe("x", (m) => {
      got.push(m.id);
    });
    const bad = [-1, 1.5, 2 ** 32, "3", true, [3], {}];
    bad.forEach((h, i) => deliver(socket(), msg(10 + i, { hops: h })));
    // One bad entry of a batch is refused alone; the other is delivered.
    socket().send(JSON.stringify({ op: "deliver_batch", sub: "sub_1", deliveries: [{ attempt: 1, message: msg(30, { hops: -2 }) }, { attempt: 1, message: msg(31, { hops: 1 }) }] }));
    deliver(socket(), msg(40, { hops: null }));
    await until(() => got.includes("msg_40"), 5000, "the last delivery");
    assert.deepEqual(got, ["msg_31", "msg_40"]);
    const frames = errors.filter((e) => e instanceof PigeonError && e.code === "BAD_FRAME" && /hops/.test(e.message));
    assert.equal(frames.length, bad.length + 1, errors.map(String).join("\n"));
  });
});

test("a signed message delivered with hops verifies", async () => {
  const k = generateKeys();
  const signed = signMessage({ subject: "x", type: "t", intent: "i", data: { text: "hi" } }, k.signingKid, k.signingSeed);
  const { srv, socket } = await subscribingServer();
  await onSession(srv, OPTS, async (s) => {
    const got = [];
    await s.subscribe("x", (m) => {
      got.push(m);
    });
    deliver(socket(), { ...signed, sequence: 1, hops: 3 });
    await until(() => got.length === 1, 5000, "the delivery");
    assert.equal(got[0].hops, 3);
    verifyMessageWithKeys(got[0], publicKeys(k));
    verifyMessageWithKeys({ ...got[0], hops: 9 }, publicKeys(k));
  });
});

test("a hops the publisher writes is replaced by the broker (a real server)", { timeout: 60_000 }, async () => {
  const srv = await Server.start();
  try {
    const orders = await connect(srv.ws, "orders-token", ["notifications.send"], OPTS);
    const n = await connect(srv.ws, "notifier-token", ["notifications.send"], OPTS);
    try {
      const d = await orders.publish(notification("hops", { hops: 9 }));
      assert.equal(d.status, "accepted");
      assert.equal(d.message.hops, undefined);
      const ms = await n.receive("notifications.send", { max: 10 });
      const mine = ms.find((m) => m.id === d.message.id);
      assert.ok(mine, "the message published");
      assert.equal(mine.hops, undefined);
      await n.ack("notifications.send", mine);
    } finally {
      await orders.close({ timeoutMs: 1000 });
      await n.close({ timeoutMs: 1000 });
    }
  } finally {
    await srv.stop();
  }
});
