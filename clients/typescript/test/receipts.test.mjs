// HttpClient.receipts and allReceipts (GET /v1/audit/receipts/{id})
// against a server the client cannot trust: an answer that is not a page
// of receipts the client can hold exactly, in order, is refused
// (BAD_FRAME), and a next that repeats or leads back ends the walk with
// that error rather than asking the same pages forever. Each refusal test
// failed before the checks were written.
import assert from "node:assert/strict";
import { test } from "node:test";
import { HttpClient, PigeonError, RECEIPTS_MAX_WAIT_MS, RECEIPTS_RETRIES } from "../dist/index.js";

const receipt = (auditSeq, seq, over = {}) => ({
  event: "replay.executed",
  time: "2026-12-05T08:00:00Z",
  principal: "spiffe://merchant-prod/ns/ops/sa/notify-replay",
  contractId: "ctr_1",
  ref: "audit",
  auditSeq,
  subject: "notifications.send",
  seq,
  ...over,
});
const json = (x) => (typeof x === "string" ? x : JSON.stringify(x));

/** An HttpClient whose every answer is `answer(url)` (200, JSON text or a value); `urls` keeps what it asked. */
function client(answer, { limit = 50 } = {}) {
  const urls = [];
  const fetch = async (url) => {
    urls.push(url);
    // A walk that never ends fails here, not by hanging the suite.
    if (urls.length > limit) throw new Error(`asked ${urls.length} times`);
    return new Response(json(answer(url)), { status: 200, headers: { "content-type": "application/json" } });
  };
  return { h: new HttpClient("http://127.0.0.1:9", "auditor-token", { fetch }), urls };
}

const badFrame = (pattern) => (e) => {
  assert.ok(e instanceof PigeonError, String(e));
  assert.equal(e.code, "BAD_FRAME", e.message);
  assert.match(e.message, pattern);
  return true;
};

// 2^53 + 1: JSON.parse reads it as 2^53, another record's place.
const BIG = "9007199254740993";
const SAFE = 2 ** 53 - 1;

test("a receipts answer the client cannot hold exactly is refused, BAD_FRAME", async () => {
  const cases = [
    ["receipts not a list", '{"receipts":{"0":{}}}', /no receipts/],
    ["receipts a string", '{"receipts":"none"}', /no receipts/],
    ["a receipt not an object", '{"receipts":[7]}', /entry 0.*not an object/],
    ["a receipt without an event", { receipts: [receipt(1, 1, { event: undefined })] }, /no string event/],
    ["a principal that is not a string", { receipts: [receipt(1, 1, { principal: 7 })] }, /no string principal/],
    ["a ref that is not a string", { receipts: [receipt(1, 1, { ref: ["x"] })] }, /ref that is not a string/],
    ["no auditSeq", { receipts: [receipt(undefined, 1)] }, /auditSeq/],
    ["an auditSeq beyond 2^53-1", `{"receipts":[${json(receipt(1, 1)).replace('"auditSeq":1', `"auditSeq":${BIG}`)}]}`, /auditSeq.*2\^53-1/],
    ["an auditSeq of 2^64-1", `{"receipts":[${json(receipt(1, 1)).replace('"auditSeq":1', '"auditSeq":18446744073709551615')}]}`, /auditSeq/],
    ["a negative auditSeq", { receipts: [receipt(-1, 1)] }, /auditSeq/],
    ["a fractional auditSeq", { receipts: [receipt(1.5, 1)] }, /auditSeq/],
    ["an auditSeq in a string", { receipts: [receipt("7", 1)] }, /auditSeq/],
    ["a seq beyond 2^53-1", `{"receipts":[${json(receipt(1, 1)).replace('"seq":1', `"seq":${BIG}`)}]}`, /seq.*2\^53-1/],
    ["a negative seq", { receipts: [receipt(1, -1)] }, /seq/],
    ["a seq that is true", { receipts: [receipt(1, true)] }, /seq/],
    ["a second receipt before the first", { receipts: [receipt(5, 1), receipt(4, 1)] }, /entry 1.*after the one before/],
    ["the same receipt twice", { receipts: [receipt(5, 1), receipt(5, 1)] }, /entry 1.*after the one before/],
    ["a next that is a number", { receipts: [receipt(5, 1)], next: 5 }, /next that is not a cursor/],
    ...["x:1", "1:2:3", "1:", ":1", "-1", " 5:1", "5:1 ", "+5", "0x5", "5:1e2", "١:١", "18446744073709551616", "5:18446744073709551616", "", "9".repeat(400)].map(
      (next) => [`a next of ${JSON.stringify(next.slice(0, 24))}`, { receipts: [receipt(5, 1)], next }, /next that is not a cursor/],
    ),
    ["a next with no receipt", { receipts: [], next: "5:1" }, /next and no receipt/],
    ["a next before the page's last receipt", { receipts: [receipt(5, 1), receipt(7, 2)], next: "7:1" }, /before the page's last receipt/],
  ];
  // Every case is tried, and the test names each one not refused as it should be.
  const wrong = [];
  for (const [name, answer, pattern] of cases) {
    const { h } = client(() => answer);
    await h.receipts("msg_1").then(
      (page) => wrong.push(`${name}: kept ${JSON.stringify(page).slice(0, 80)}`),
      (e) => {
        if (!(e instanceof PigeonError && e.code === "BAD_FRAME" && pattern.test(e.message))) wrong.push(`${name}: ${e?.code} ${e?.message}`);
      },
    );
  }
  assert.deepEqual(wrong, []);
});

test("a receipt that does not come after the cursor asked is refused", async () => {
  for (const [after, first] of [["5:1", [5, 1]], ["5:1", [4, 9]], ["5", [5, 3]], ["5", [5, 0]]]) {
    const { h } = client(() => ({ receipts: [receipt(...first)] }));
    await assert.rejects(h.receipts("msg_1", { after }), badFrame(/entry 0.*after the cursor asked/), `${after} then ${first}`);
  }
  // After the cursor: kept.
  for (const [after, first] of [["5:1", [5, 2]], ["5:1", [6, 0]], ["5", [6, 1]]]) {
    const { h } = client(() => ({ receipts: [receipt(...first)] }));
    assert.equal((await h.receipts("msg_1", { after })).receipts.length, 1, `${after} then ${first}`);
  }
});

test("a well-formed page is kept as the server sent it", async () => {
  const page = { receipts: [receipt(3, 0, { ref: undefined, subject: undefined, seq: undefined }), receipt(SAFE, SAFE)], next: `${SAFE}:${SAFE}` };
  const { h } = client(() => page);
  assert.deepEqual(await h.receipts("msg_1", { max: 2 }), JSON.parse(JSON.stringify(page)));
  // next at the page's last receipt's record, or past it (an audit sequence alone); the largest cursor the server writes.
  for (const next of ["9007199254740991", "18446744073709551615:18446744073709551615", "9007199254740992:0"]) {
    const { h } = client(() => ({ ...page, next }));
    assert.equal((await h.receipts("msg_1")).next, next);
  }
  // No next: the last page; an empty one.
  assert.deepEqual(await client(() => ({ receipts: [] })).h.receipts("msg_1"), { receipts: [] });
  assert.deepEqual(await client(() => ({})).h.receipts("msg_1"), { receipts: [] });
});

test("receipts percent-encodes the id in the path and sends after and max", async () => {
  const { h, urls } = client(() => ({ receipts: [] }));
  for (const id of ["msg/../../v1/accounts", "a?max=1", "a#b", "a b", "msg_1:2"]) await h.receipts(id, { after: "5:1", max: 2 });
  assert.deepEqual(
    urls.map((u) => new URL(u).pathname + new URL(u).search),
    ["msg%2F..%2F..%2Fv1%2Faccounts", "a%3Fmax%3D1", "a%23b", "a%20b", "msg_1%3A2"].map((p) => `/v1/audit/receipts/${p}?after=5%3A1&max=2`),
  );
  await h.receipts("msg_1");
  assert.equal(new URL(urls.at(-1)).search, "", "no query when none is given");
  for (const id of ["", ".", ".."]) await assert.rejects(h.receipts(id), (e) => e.code === "INVALID_ARGUMENT");
  assert.equal(urls.length, 6, "nothing sent for an id that cannot be a segment");
});

test("allReceipts follows next until a page has none", async () => {
  const pages = {
    "": { receipts: [receipt(2, 1), receipt(3, 1)], next: "3:1" },
    "3:1": { receipts: [receipt(3, 4), receipt(9, 1)], next: "9:1" },
    "9:1": { receipts: [receipt(12, 1)] },
  };
  const { h, urls } = client((u) => pages[new URL(u).searchParams.get("after") ?? ""]);
  const got = [];
  for await (const r of h.allReceipts("msg/1", { max: 2 })) got.push([r.auditSeq, r.seq]);
  assert.deepEqual(got, [[2, 1], [3, 1], [3, 4], [9, 1], [12, 1]]);
  assert.deepEqual(urls.map((u) => new URL(u).search), ["?max=2", "?after=3%3A1&max=2", "?after=9%3A1&max=2"]);
  assert.ok(urls.every((u) => new URL(u).pathname === "/v1/audit/receipts/msg%2F1"));
});

test("allReceipts ends with BAD_FRAME when a server repeats a cursor or leads back, rather than loop", async () => {
  const cases = [
    // The same page whatever is asked: next names the page's own start.
    ["the same page again", () => ({ receipts: [receipt(5, 1)], next: "5:1" })],
    ["a next before what was asked", (after) => (after ? { receipts: [receipt(6, 1)], next: "2:1" } : { receipts: [receipt(5, 1)], next: "5:1" })],
    ["a next and no receipt", (after) => (after ? { receipts: [], next: "9:9" } : { receipts: [receipt(5, 1)], next: "5:1" })],
    ["receipts again from the start", () => ({ receipts: [receipt(1, 1), receipt(2, 1)], next: "2:1" })],
    ["an empty page that names the start again", (after) => (after ? { receipts: [], next: "0:0" } : { receipts: [receipt(5, 1)], next: "5:1" })],
  ];
  const wrong = [];
  for (const [name, answer] of cases) {
    const { h, urls } = client((u) => answer(new URL(u).searchParams.get("after")));
    try {
      for await (const _ of h.allReceipts("msg_1"));
      wrong.push(`${name}: the walk ended without an error`);
    } catch (e) {
      if (!(e instanceof PigeonError && e.code === "BAD_FRAME")) wrong.push(`${name}: ${e?.code} ${e?.message}`);
    }
    if (urls.length > 2) wrong.push(`${name}: asked ${urls.length} times`);
  }
  assert.deepEqual(wrong, []);
});

/** The broker's 429 of a receipts request that finds no walk of the log free (retryAfter null: no Retry-After). */
const busy = (retryAfter = "1", retryAfterMs = 1000) =>
  new Response(JSON.stringify({ error: { code: "RATE_LIMITED", message: "busy", details: { retryAfterMs } } }), {
    status: 429,
    headers: { "content-type": "application/json", ...(retryAfter === null ? {} : { "retry-after": retryAfter }) },
  });
const ok200 = (x) => new Response(JSON.stringify(x), { status: 200, headers: { "content-type": "application/json" } });
const rateLimited = (e) => e instanceof PigeonError && e.code === "RATE_LIMITED" && e.status === 429;

test("receipts, one request, gives the server's 429 to the caller at once", async () => {
  let n = 0;
  const h = new HttpClient("http://127.0.0.1:9", "auditor-token", { fetch: async () => (n++, busy()) });
  await assert.rejects(h.receipts("msg_1"), rateLimited);
  assert.equal(n, 1, "not asked again");
});

// Before: the walk ended at the first 429, mid-walk, with RATE_LIMITED.
test("allReceipts waits out a 429's Retry-After and goes on from the same cursor", async () => {
  const asked = [];
  const fetch = async (url) => {
    const after = new URL(url).searchParams.get("after");
    asked.push({ after, at: performance.now() });
    if (after === null) return ok200({ receipts: [receipt(2, 1), receipt(5, 1)], next: "5:1" });
    // The second page: refused twice (the server reading the log for two others), then answered.
    if (asked.filter((a) => a.after === "5:1").length <= 2) return busy("1");
    return ok200({ receipts: [receipt(9, 1)] });
  };
  const h = new HttpClient("http://127.0.0.1:9", "auditor-token", { fetch });
  const got = [];
  for await (const r of h.allReceipts("msg_1", { max: 2 })) got.push([r.auditSeq, r.seq]);
  assert.deepEqual(got, [[2, 1], [5, 1], [9, 1]], "every receipt, none twice");
  assert.deepEqual(asked.map((a) => a.after), [null, "5:1", "5:1", "5:1"], "the same page asked again, not the first");
  // The second of one second each: a lower bound only (a slow machine waits longer).
  for (const i of [2, 3]) assert.ok(asked[i].at - asked[i - 1].at >= 900, `asked again ${asked[i].at - asked[i - 1].at} ms after a Retry-After of 1 s`);
});

test("allReceipts waits a bounded number of times a page, then gives the 429 to the caller", async () => {
  let n = 0;
  const h = new HttpClient("http://127.0.0.1:9", "auditor-token", { fetch: async () => (n++, busy("0", 0)) });
  await assert.rejects(h.allReceipts("msg_1").next(), rateLimited);
  assert.equal(n, RECEIPTS_RETRIES + 1, "one request, then one a wait");
});

test("allReceipts waits at most RECEIPTS_MAX_WAIT_MS, whatever Retry-After says", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  const flush = () => new Promise((r) => setImmediate(r));
  let n = 0;
  const fetch = async () => (++n === 1 ? busy("86400", 86_400_000) : ok200({ receipts: [receipt(3, 1)] }));
  const h = new HttpClient("http://127.0.0.1:9", "auditor-token", { fetch });
  const first = h.allReceipts("msg_1").next();
  for (let i = 0; i < 5; i++) await flush();
  assert.equal(n, 1);
  t.mock.timers.tick(RECEIPTS_MAX_WAIT_MS - 1);
  for (let i = 0; i < 5; i++) await flush();
  assert.equal(n, 1, "asked again before its wait");
  t.mock.timers.tick(1);
  for (let i = 0; i < 5; i++) await flush();
  assert.equal(n, 2, "not asked again once RECEIPTS_MAX_WAIT_MS passed");
  assert.deepEqual((await first).value, receipt(3, 1));
});

test("allReceipts reads Retry-After, else retryAfterMs, else waits 1 s", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  const flush = async () => {
    for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
  };
  for (const [name, refusal, wait] of [
    ["Retry-After", () => busy("3", 7000), 3000],
    ["an HTTP date: retryAfterMs", () => busy("Fri, 31 Dec 2099 23:59:59 GMT", 2000), 2000],
    ["no Retry-After: retryAfterMs", () => busy(null, 4000), 4000],
    ["neither", () => new Response('{"error":{"code":"RATE_LIMITED","message":"busy"}}', { status: 429 }), 1000],
  ]) {
    let n = 0;
    const h = new HttpClient("http://127.0.0.1:9", "auditor-token", { fetch: async () => (++n === 1 ? refusal() : ok200({ receipts: [] })) });
    const done = h.allReceipts("msg_1").next();
    await flush();
    t.mock.timers.tick(wait - 1);
    await flush();
    assert.equal(n, 1, `${name}: asked again before ${wait} ms`);
    t.mock.timers.tick(1);
    await flush();
    assert.equal(n, 2, `${name}: not asked again at ${wait} ms`);
    assert.equal((await done).done, true);
  }
});

test("an aborted signal ends allReceipts' wait, and its request", async () => {
  // Aborted while it waits out a long Retry-After.
  let n = 0;
  const h = new HttpClient("http://127.0.0.1:9", "auditor-token", { fetch: async () => (n++, busy("30")) });
  const ctl = new AbortController();
  const walk = h.allReceipts("msg_1", { signal: ctl.signal }).next();
  while (n === 0) await new Promise((r) => setImmediate(r));
  ctl.abort(new Error("the caller gave up"));
  await assert.rejects(walk, /the caller gave up/);
  assert.equal(n, 1, "not asked again");

  // Aborted while a page's request is on its way: the fetch is aborted too.
  let seen;
  const hanging = new HttpClient("http://127.0.0.1:9", "auditor-token", {
    fetch: (_url, init) =>
      new Promise((_, reject) => {
        seen = init.signal;
        init.signal.addEventListener("abort", () => reject(new Error("fetch aborted")));
      }),
  });
  const ctl2 = new AbortController();
  const walk2 = hanging.allReceipts("msg_1", { signal: ctl2.signal }).next();
  while (!seen) await new Promise((r) => setImmediate(r));
  ctl2.abort(new Error("stop now"));
  await assert.rejects(walk2, /stop now/);
  assert.equal(seen.aborted, true);

  // Aborted before: nothing is asked.
  let m = 0;
  const idle = new HttpClient("http://127.0.0.1:9", "auditor-token", { fetch: async () => (m++, ok200({ receipts: [] })) });
  await assert.rejects(idle.allReceipts("msg_1", { signal: AbortSignal.abort(new Error("already")) }).next(), /already/);
  assert.equal(m, 0);
});
