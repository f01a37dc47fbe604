// A message a delivery (deliver, a deliver_batch entry), a receive or a
// replay hands over is one the broker could have sent: each member of the
// envelope of the type pigeon.Message gives it (docs/protocol.md), as the
// Go and Rust clients decode it. One with a member of another type (a
// sequence that is a string, negative, a fraction, spelled 5.0 or beyond
// 2^64-1; an id that is a number; a time that is a number; a type that is
// an object; hops negative or beyond 2^32-1; a signature that is no object
// or whose v is a fraction), or a message or an entry that is no object,
// is refused alone: reported BAD_FRAME (its op, its index in a list, its
// message's id when it is a string), never handed over and never acked,
// the others handed over and acked. The table is the Go client's
// (transport/ws, TestListEntryRefusedAlone), at each position of three
// entries. Before, a time that is a number, a type that is an object or a
// signature of another shape was handed over as it came, a sequence spelled
// 5.0 as 5, and a receive or replay message whose id is a number too.
import assert from "node:assert/strict";
import { test } from "node:test";
import { HttpClient, PigeonError } from "../dist/index.js";
import { onSession, RAW_CONTRACT, rawServer, subscribingServer, until } from "./harness.mjs";

const OPTS = { reconnect: false, pingIntervalMs: 0 };
const json = JSON.stringify;

// A stored message, id msg_x at sequence 5, as the broker writes it; each
// row spoils one member of it.
const MESSAGE = `{"specversion":"1.0","id":"msg_x","type":"job","source":"p","subject":"x","time":"2026-01-01T00:00:00Z","sequence":5,"data":{}}`;

// Entries no broker sends: MESSAGE with `old` replaced by `new`, a
// `message` in its place, or an `entry` in the entry's place (a
// deliver_batch's delivery, a receive or replay answer's message; no
// deliver has one). `id`: the message id the report names (a string),
// undefined when it names none.
const ROWS = [
  { name: "sequence a string", old: `"sequence":5`, new: `"sequence":"5"`, id: true },
  { name: "sequence negative", old: `"sequence":5`, new: `"sequence":-5`, id: true },
  { name: "sequence a fraction", old: `"sequence":5`, new: `"sequence":5.5`, id: true },
  { name: "sequence spelled 5.0", old: `"sequence":5`, new: `"sequence":5.0`, id: true },
  { name: "sequence spelled 5e0", old: `"sequence":5`, new: `"sequence":5e0`, id: true },
  { name: "sequence beyond 2^64-1", old: `"sequence":5`, new: `"sequence":18446744073709551616`, id: true },
  // JSON.parse cannot hold it exactly (it reads 2^53+1 as 2^53): refused, as is every sequence from 2^53 up.
  { name: "sequence beyond 2^53-1", old: `"sequence":5`, new: `"sequence":9007199254740993`, id: true },
  { name: "id a number", old: `"id":"msg_x"`, new: `"id":7` },
  { name: "time a number", old: `"time":"2026-01-01T00:00:00Z"`, new: `"time":20260101`, id: true },
  { name: "type an object", old: `"type":"job"`, new: `"type":{"name":"job"}`, id: true },
  { name: "source a bool", old: `"source":"p"`, new: `"source":true`, id: true },
  { name: "correlationId a list", old: `"data":{}`, new: `"data":{},"correlationId":["c"]`, id: true },
  { name: "hops negative", old: `"data":{}`, new: `"data":{},"hops":-1`, id: true },
  { name: "hops beyond 2^32-1", old: `"data":{}`, new: `"data":{},"hops":4294967296`, id: true },
  { name: "hops spelled 1.0", old: `"data":{}`, new: `"data":{},"hops":1.0`, id: true },
  { name: "signature a string", old: `"data":{}`, new: `"data":{},"signature":"sig"`, id: true },
  { name: "signature a list", old: `"data":{}`, new: `"data":{},"signature":[]`, id: true },
  { name: "signature kid a number", old: `"data":{}`, new: `"data":{},"signature":{"kid":7,"alg":"ed25519","sig":"x","v":2}`, id: true },
  { name: "signature form a fraction", old: `"data":{}`, new: `"data":{},"signature":{"kid":"k","alg":"ed25519","sig":"x","v":2.5}`, id: true },
  { name: "signature form spelled 2.0", old: `"data":{}`, new: `"data":{},"signature":{"kid":"k","alg":"ed25519","sig":"x","v":2.0}`, id: true },
  { name: "signature form escaped, spelled 2e0", old: `"data":{}`, new: `"data":{},"signature":{"kid":"k","alg":"ed25519","sig":"x","\\u0076":2e0}`, id: true },
  { name: "signature form a string", old: `"data":{}`, new: `"data":{},"signature":{"kid":"k","alg":"ed25519","sig":"x","v":"2"}`, id: true },
  { name: "message a number", message: `7` },
  { name: "message a list", message: `[${MESSAGE}]` },
  { name: "message null", message: `null` },
  { name: "entry a number", entry: `7` },
  { name: "entry a string", entry: `"msg_x"` },
  { name: "entry a list", entry: `[{"attempt":1,"message":${MESSAGE}}]` },
  { name: "entry a bool", entry: `true` },
  { name: "entry null", entry: `null` },
];

// Messages the broker does send, with members the rows above spoil: each
// is handed over (null reads as absent, as it does in every envelope
// field; a signature's v of another integer names a form that never
// verifies, and is still a message).
const TAKEN = [
  { name: "members null", old: `"type":"job"`, new: `"type":null,"signature":null,"hops":null,"reason":null` },
  { name: "time null", old: `"time":"2026-01-01T00:00:00Z"`, new: `"time":null` },
  { name: "signature of every member", old: `"data":{}`, new: `"data":{},"signature":{"kid":"k","alg":"ed25519","sig":"x","v":2}` },
  { name: "signature form 3", old: `"data":{}`, new: `"data":{},"signature":{"kid":"k","alg":"ed25519","sig":"x","v":3}` },
  { name: "signature form null", old: `"data":{}`, new: `"data":{},"signature":{"kid":"k","alg":"ed25519","sig":"x","v":null}` },
  { name: "hops 2^32-1", old: `"data":{}`, new: `"data":{},"hops":4294967295` },
  { name: "data's own 5.0", old: `"data":{}`, new: `"data":{"sequence":5.0,"v":2.5,"time":1}` },
  { name: "a member the envelope does not name", old: `"data":{}`, new: `"data":{},"extra":{"n":1.0}` },
];

const POSITIONS = [["first", 0], ["middle", 1], ["last", 2]];

/** The message text of id at seq (MESSAGE, spoiled by row when given). */
function messageText(id, seq, row) {
  let m = MESSAGE;
  if (row?.message) m = row.message;
  else if (row) m = m.replace(row.old, row.new);
  return m.replace(`"msg_x"`, json(id)).replace(`"sequence":5,`, `"sequence":${seq},`);
}

/**
 * Three entries, the row's at `at` (id `${tag}_x`, sequence 5 unless the
 * row spoils it) among two the broker writes (`${tag}_a` and `${tag}_b`,
 * at sequences base+1 and base+2, attempts 2 and 3): [id, attempt,
 * sequence, message text, entry text (a deliver_batch's, or undefined)].
 */
function entries(tag, base, row, at) {
  const good = [[`${tag}_a`, 2, base + 1], [`${tag}_b`, 3, base + 2]];
  const out = [];
  for (let i = 0; i < 3; i++) {
    if (i === at) out.push([`${tag}_x`, 1, 5, messageText(`${tag}_x`, 5, row), row.entry]);
    else {
      const [id, attempt, seq] = good.shift();
      out.push([id, attempt, seq, messageText(id, seq), undefined]);
    }
  }
  return out;
}

/** Whether e is the report of the refused entry: BAD_FRAME naming its op, its index (lists) and its message's id (when a string). */
function reportOf(e, op, index, id) {
  return (
    e instanceof PigeonError &&
    e.code === "BAD_FRAME" &&
    e.details.op === op &&
    e.details.index === index &&
    (id === undefined || e.details.messageId === id)
  );
}

const byId = (p, q) => (p[0] < q[0] ? -1 : p[0] > q[0] ? 1 : 0);

for (const op of ["deliver", "deliver_batch"]) {
  for (const row of [...ROWS, ...TAKEN]) {
    if (op === "deliver" && row.entry) continue; // no deliver holds an entry
    const taken = TAKEN.includes(row);
    test(`${op}: a message with ${row.name} is ${taken ? "handed over" : "refused alone, never acked"}, the others handed over and acked`, async () => {
      const answered = [];
      const { srv, socket } = await subscribingServer((ws, f) => {
        if (f.op === "ack") {
          if (f.messageIds) f.messageIds.forEach((id, i) => answered.push([id, f.sequences?.[i] ?? 0]));
          else answered.push([f.messageId, f.sequence ?? 0]);
        }
        ws.send(json({ op: "ok", re: f.id }));
      });
      const errors = [];
      const handled = [];
      const wrong = [];
      await onSession(srv, { ...OPTS, onError: (e) => errors.push(e) }, async (s) => {
        await s.subscribe("x", (m, d) => void handled.push([m.id, d.attempt, m.sequence]), { maxInFlight: 10 });
        let base = 100;
        for (const [pos, at] of POSITIONS) {
          handled.length = answered.length = errors.length = 0;
          const tag = `m${(base += 10)}`;
          const all = entries(tag, base, row, at);
          const texts = all.map(([, attempt, , m, e]) => e ?? `{"attempt":${attempt},"message":${m}}`);
          if (op === "deliver_batch") socket().send(`{"op":"deliver_batch","sub":"sub_1","deliveries":[${texts.join(",")}]}`);
          else for (const t of texts) socket().send(`{"op":"deliver","sub":"sub_1",${t.slice(1)}`);
          // Then a delivery of its own: once it is handled and acked, those before it were read.
          const end = [`${tag}_end`, 1, base + 9];
          socket().send(`{"op":"deliver","sub":"sub_1","attempt":1,"message":${messageText(end[0], end[2])}}`);
          const kept = all.filter(([id]) => taken || id !== `${tag}_x`).map(([id, attempt, seq]) => [id, attempt, seq]);
          const want = { handled: [...kept, end].sort(byId), answered: [...kept, end].map(([id, , seq]) => [id, seq]).sort(byId), errors: taken ? 0 : 1 };
          const have = () => ({ handled: handled.slice().sort(byId), answered: answered.slice().sort(byId), errors: errors.length });
          await until(() => json(have()) === json(want), 3000, `${pos}: the deliveries`).catch(() => wrong.push(`${pos}: ${json(have())} (${errors.map(String)}), not ${json(want)}`));
          const index = op === "deliver_batch" ? at : undefined;
          if (!taken && !reportOf(errors[0], op, index, row.id ? `${tag}_x` : undefined)) wrong.push(`${pos}: the report ${String(errors[0])} ${json(errors[0]?.details)}`);
        }
      });
      assert.deepEqual(wrong, []);
    });
  }
}

for (const op of ["receive", "replay"]) {
  for (const row of [...ROWS, ...TAKEN]) {
    const taken = TAKEN.includes(row);
    test(`${op}: a message with ${row.name} is ${taken ? "handed over" : "left out alone, never acked"}, the others handed over and acked`, async () => {
      let answer = "";
      const answered = [];
      const srv = await rawServer((ws, f) => {
        if (f.op === op) ws.send(`{"op":"messages","re":"${f.id}",${answer}}`);
        else {
          if (f.op === "ack") answered.push([f.messageId, f.attempt ?? 0, f.sequence ?? 0]);
          ws.send(json({ op: "ok", re: f.id }));
        }
      });
      const errors = [];
      const wrong = [];
      const fetch = async () => new Response(`{${answer}}`, { status: 200, headers: { "content-type": "application/json" } });
      const h = new HttpClient("http://127.0.0.1:9", "t", { fetch, onError: (e) => errors.push(e) });
      h.contract = RAW_CONTRACT;
      await onSession(srv, { ...OPTS, onError: (e) => errors.push(e) }, async (s) => {
        let base = 100;
        for (const [transport, pull] of [
          ["ws", () => (op === "receive" ? s.receiveAttempts("x") : s.replay("x").then((messages) => ({ messages })))],
          ["http", () => (op === "receive" ? h.receiveAttempts("x", { ack: "explicit" }) : h.replay("x").then((messages) => ({ messages })))],
        ]) {
          for (const [pos, at] of POSITIONS) {
            errors.length = 0;
            const tag = `m${(base += 10)}`;
            const all = entries(tag, base, row, at);
            answer = `"messages":[${all.map(([, , , m, e]) => e ?? m).join(",")}]`;
            if (op === "receive") answer += `,"attempts":[${all.map(([, attempt]) => attempt).join(",")}]`;
            const got = await pull();
            const kept = all.filter(([id]) => taken || id !== `${tag}_x`).map(([id, attempt, seq]) => [id, op === "receive" ? attempt : 0, seq]);
            const seen = got.messages.map((m, i) => [m.id, got.attempts?.[i] ?? 0, m.sequence]);
            if (json(seen) !== json(kept)) wrong.push(`${transport} ${pos}: handed over ${json(seen)}, not ${json(kept)}`);
            if (errors.length !== (taken ? 0 : 1)) wrong.push(`${transport} ${pos}: reports ${errors.map(String)}`);
            else if (!taken && !reportOf(errors[0], op, at, row.id ? `${tag}_x` : undefined)) wrong.push(`${transport} ${pos}: the report ${String(errors[0])} ${json(errors[0].details)}`);
            if (op === "receive" && transport === "ws") {
              answered.length = 0;
              for (const m of got.messages) await s.ack("x", m);
              const acked = kept.map(([id, attempt, seq]) => [id, attempt, seq]);
              if (json(answered) !== json(acked)) wrong.push(`${transport} ${pos}: acked ${json(answered)}, not ${json(acked)}`);
            }
          }
        }
      });
      assert.deepEqual(wrong, []);
    });
  }
}

// A publish decision's message is read as Go reads it, each member of its
// type (see test/decision_shapes.test.mjs): a sequence spelled 5.0 or a
// hops spelled 1.0 is refused, as the Go client refuses a float there (a
// hops so spelled was read as 1 before).
test("a publish decision refuses a sequence spelled 5.0 and a hops spelled 1.0", async () => {
  let body = "";
  const fetch = async () => new Response(body, { status: 202, headers: { "content-type": "application/json" } });
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch });
  h.contract = RAW_CONTRACT;
  body = `{"status":"accepted","message":${messageText("m_d", 5).replace(`"sequence":5`, `"sequence":5.0`)}}`;
  await assert.rejects(h.publish({ subject: "x", data: {} }), (e) => e instanceof PigeonError && e.code === "BAD_FRAME" && e.details.sequence === "5.0");
  body = `{"status":"accepted","message":${messageText("m_d", 5).replace(`"data":{}`, `"data":{},"hops":1.0`)}}`;
  await assert.rejects(h.publish({ subject: "x", data: {} }), (e) => e instanceof PigeonError && e.code === "BAD_FRAME" && e.details.hops === "1.0");
  body = `{"status":"accepted","message":${messageText("m_d", 5).replace(`"data":{}`, `"data":{},"hops":1`)}}`;
  const d = await h.publish({ subject: "x", data: {} });
  assert.deepEqual([d.message.sequence, d.message.hops], [5, 1]);
});

// The reader finds a sequence or hops spelled 5.0 however the text spells
// the member's name, and in a text of 1 MiB or more too, where it looks
// for the names with indexOf rather than a regular expression.
test("a sequence or hops spelled 5.0 is found behind an escaped name and in a long answer", async () => {
  let body = "";
  const errors = [];
  const fetch = async () => new Response(body, { status: 200, headers: { "content-type": "application/json" } });
  const h = new HttpClient("http://127.0.0.1:9", "t", { fetch, onError: (e) => errors.push(e) });
  h.contract = RAW_CONTRACT;
  const big = `"data":{"pad":"${"p".repeat(1 << 20)}"}`;
  const cases = [
    ["escaped name", `"\\u0073equence":5.0`, `"sequence"`, `"data":{}`],
    ["escaped hops", `"\\u0068ops":1e0`, "", `"data":{}`],
    ["long text", `"sequence" : 5.0`, `"sequence"`, big],
    ["long text, hops", `"hops":10e-1`, "", big],
  ];
  for (const [name, spoiled, field, data] of cases) {
    errors.length = 0;
    const bad = messageText("m_bad", 5).replace(`"sequence":5`, field ? spoiled : `"sequence":5,${spoiled}`).replace(`"data":{}`, data);
    body = `{"messages":[${bad},${messageText("m_good", 6).replace(`"data":{}`, data)}]}`;
    const got = await h.replay("x");
    assert.deepEqual(got.map((m) => [m.id, m.sequence]), [["m_good", 6]], name);
    assert.equal(errors.length, 1, name);
    assert.equal(errors[0].details.messageId, "m_bad", name);
  }
});
