// The fields of a pushed delivery (deliver, deliver_batch), read as a
// receive message's are (test/delivery_fields.test.mjs), and as the Python
// and Rust clients read them:
// - a delivery without a sequence (absent or null) is refused as one of
//   sequence 0 is: the broker numbers every message it stores from 1 and
//   writes the number into every delivery (each comes from the log), and an
//   ack by the id alone settles whichever message holds the id, possibly a
//   newer one published under it. It was handed over and acked by its id;
// - a delivery whose attempt is not an integer of 1 to 2^31-1 (MAX_ATTEMPT,
//   the receive rule) is refused the same way: the broker writes an attempt
//   into every delivery, counted from 1. Any number was taken before (-1,
//   1.5, 2^53).
// A refused delivery is reported BAD_FRAME (op, batch index, messageId, the
// value), never handed over and never answered (the server's ack wait
// gives it back), acknowledged or at most once. Each test failed before
// its fix.
import assert from "node:assert/strict";
import { test } from "node:test";
import { PigeonError } from "../dist/index.js";
import { onSession, subscribingServer, until } from "./harness.mjs";

const OPTS = { reconnect: false, pingIntervalMs: 0 };
const json = (x) => JSON.stringify(x);
const msg = (id, seq) => ({ id, subject: "x", data: {}, ...(seq === undefined ? {} : { sequence: seq }) });

/**
 * A subscribing server keeping each ack and nack as [op, id, sequence],
 * and a subscription (ack: `ack`) on it handing each delivery to
 * `handled` as [id, attempt]; `push(texts, batch)` sends the deliveries,
 * each `{"attempt":…,"message":…}` text, as one deliver_batch or a
 * deliver each.
 */
async function pushing(ack, body) {
  const answered = [];
  const { srv, socket } = await subscribingServer((ws, f) => {
    if (f.op === "ack" || f.op === "nack") {
      if (f.messageIds) f.messageIds.forEach((id, i) => answered.push([f.op, id, f.sequences?.[i] ?? 0]));
      else answered.push([f.op, f.messageId, f.sequence ?? 0]);
    }
    ws.send(json({ op: "ok", re: f.id }));
  });
  const errors = [];
  const handled = [];
  const push = (texts, batch) => {
    if (batch) socket().send(`{"op":"deliver_batch","sub":"sub_1","deliveries":[${texts.join(",")}]}`);
    else for (const t of texts) socket().send(`{"op":"deliver","sub":"sub_1",${t.slice(1)}`);
  };
  await onSession(srv, { ...OPTS, onError: (e) => errors.push(e) }, async (s) => {
    await s.subscribe("x", (m, d) => {
      handled.push([m.id, d.attempt]);
    }, ack === "none" ? { ack: "none" } : {});
    await body({ push, answered, errors, handled });
  });
}

// A delivery's text: its attempt's (the JSON text, or null for none) and its message.
const entry = (m, attempt) => `{${attempt === null ? "" : `"attempt":${attempt},`}"message":${json(m)}}`;

for (const ack of ["explicit", "none"]) {
  for (const batch of [false, true]) {
    test(`a ${batch ? "deliver_batch entry" : "deliver"} without a sequence is refused as one of sequence 0 is (ack ${ack})`, async () => {
      await pushing(ack, async ({ push, answered, errors, handled }) => {
        const ms = [msg("m_a", 4), msg("m_none"), { ...msg("m_null"), sequence: null }, msg("m_zero", 0), msg("m_b", 5)];
        push(ms.map((m) => entry(m, "1")), batch);
        await until(() => handled.length === 2 && errors.length === 3 && (ack === "none" || answered.length === 2), 5000, "the deliveries and the reports");
        assert.deepEqual(handled.map(([id]) => id).sort(), ["m_a", "m_b"]);
        if (ack === "explicit") assert.deepEqual(answered.sort(), [["ack", "m_a", 4], ["ack", "m_b", 5]], "a refused delivery is not answered");
        else assert.deepEqual(answered, []);
        assert.ok(errors.every((e) => e instanceof PigeonError && e.code === "BAD_FRAME"), String(errors));
        const where = (i) => (batch ? { op: "deliver_batch", index: i } : { op: "deliver" });
        assert.deepEqual(
          errors.map((e) => e.details),
          [
            { ...where(1), messageId: "m_none", sequence: "undefined" },
            { ...where(2), messageId: "m_null", sequence: "object" },
            { ...where(3), messageId: "m_zero", sequence: 0 },
          ],
        );
      });
    });
  }
}

// The attempts a delivery may carry, and those it may not: the receive
// table (test/delivery_fields.test.mjs, integers of 1 to 2^31-1), with an
// absent attempt as well. Each row's value is the attempt of the middle of
// three deliveries.
const PUSHED = [
  ["1", "1", true],
  ["2^31-1", String(2 ** 31 - 1), true],
  ["absent", null, false],
  ["0", "0", false],
  ["negative", "-1", false],
  ["fraction", "1.5", false],
  ["integral fraction", "1.0", false],
  ["exponent", "1e0", false],
  ["2^31", String(2 ** 31), false],
  ["beyond 2^53", "9007199254740993", false],
  ["2^63-1", "9223372036854775807", false],
  ["a string", `"2"`, false],
  ["null", "null", false],
  ["a bool", "true", false],
  ["an object", "{}", false],
];

for (const ack of ["explicit", "none"]) {
  for (const batch of [false, true]) {
    test(`a ${batch ? "deliver_batch entry" : "deliver"} whose attempt is not an integer of 1 to 2^31-1 is refused alone (ack ${ack})`, async () => {
      await pushing(ack, async ({ push, answered, errors, handled }) => {
        const wrong = [];
        let seq = 0;
        for (const [name, attempt, taken] of PUSHED) {
          handled.length = 0;
          errors.length = 0;
          answered.length = 0;
          const [a, x, b] = [++seq, ++seq, ++seq];
          push([entry(msg("m_a", a), "2"), entry(msg("m_x", x), attempt), entry(msg("m_b", b), "3")], batch);
          const n = taken ? 3 : 2;
          await until(() => handled.length === n && errors.length === 3 - n && (ack === "none" || answered.length === n), 2000, `${name}: the deliveries`).catch((e) => wrong.push(`${e.message}: ${json({ handled, answered, errors: errors.map(String) })}`));
          const want = {
            handled: taken ? [["m_a", 2], ["m_b", 3], ["m_x", JSON.parse(attempt)]] : [["m_a", 2], ["m_b", 3]],
            answered: ack === "none" ? [] : taken ? [["ack", "m_a", a], ["ack", "m_b", b], ["ack", "m_x", x]] : [["ack", "m_a", a], ["ack", "m_b", b]],
            errors: taken ? [] : [["BAD_FRAME", batch ? "deliver_batch" : "deliver", batch ? 1 : undefined, "m_x"]],
          };
          const have = {
            handled: handled.slice().sort((p, q) => (p[0] < q[0] ? -1 : 1)),
            answered: answered.slice().sort(),
            errors: errors.map((e) => [e.code, e.details.op, e.details.index, e.details.messageId]),
          };
          if (json(have) !== json(want)) wrong.push(`${name}: ${json(have)}`);
        }
        assert.deepEqual(wrong, []);
      });
    });
  }
}
