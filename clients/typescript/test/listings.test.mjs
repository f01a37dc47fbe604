// The listings of the HTTP API: subjects, audit records, quarantine
// records, an account's keys, a message's receipts. Each call asks for one
// page and holds that page alone, its answer read up to maxResponseBytes
// (256 MiB by default); the walk of receipt pages (allReceipts) yields each
// page before it asks for the next. So no listing of the client gathers
// records across pages (the CLI's `quarantine list` walks every page, and
// stops at 1000 records by default). A page holds at most the server's cap
// of records (MAX_PAGE_RECORDS, an account's keys MAX_ACCOUNT_KEYS): an
// answer listing more is refused, BAD_FRAME, counted on its text before
// JSON.parse builds a record (256 MiB of `{}` entries is about 89 million
// objects). The catalog (subjects) has no such cap on the server. A
// listing answer whose list is not a list of objects is refused, BAD_FRAME
// (tests/test_http_listings.py holds the same tables for the Python
// client). An account's keys are read by their own rule
// (key_lists.test.mjs): `keys` must be there, and an entry that is no key
// is left out.
import assert from "node:assert/strict";
import { test } from "node:test";
import { HttpClient, keyPairFrom, MAX_ACCOUNT_KEYS, MAX_PAGE_RECORDS, PigeonError, publicKeys } from "../dist/index.js";

/** An HttpClient whose fetch answers every request with `answer(path)` (a JSON text), keeping the paths asked. */
function answering(answer, options = {}) {
  const paths = [];
  const fetch = async (url) => {
    const u = new URL(url);
    paths.push(u.pathname + u.search);
    return new Response(answer(u.pathname + u.search), { status: 200, headers: { "content-type": "application/json" } });
  };
  return { h: new HttpClient("http://127.0.0.1:9", "t", { fetch, ...options }), paths };
}

// Each listing: its call, the member of the answer holding its list, and
// its entry of an id.
const LISTINGS = [
  ["subjects", (h) => h.subjects(), "subjects", (id) => ({ id })],
  ["audit", (h) => h.audit({ from: 1, max: 2 }), "records", (id) => ({ id })],
  ["quarantine", (h) => h.quarantine({ max: 2 }), "records", (id) => ({ id })],
];

// Each answer: its JSON text (`M` stands for the listing's member, `R1`
// and `R2` for its entries of the ids r1 and r2), and the ids of the list
// the call returns (undefined: refused, BAD_FRAME).
const ANSWERS = [
  ["a list of objects", `{"M":[R1,R2]}`, ["r1", "r2"]],
  ["an empty list", `{"M":[]}`, []],
  ["absent", `{}`, []],
  ["null", `{"M":null}`, []],
  ["a string", `{"M":"abc"}`, undefined],
  ["an object", `{"M":{"a":1}}`, undefined],
  ["a number", `{"M":7}`, undefined],
  ["an entry that is not an object", `{"M":[R1,"r2"]}`, undefined],
  ["an answer that is not an object", `[R1]`, undefined],
];

for (const [listing, call, member, entry] of LISTINGS) {
  test(`the ${listing} listing asks for one page and returns its list of objects, and refuses any other shape`, async () => {
    const wrong = [];
    for (const [name, template, ids] of ANSWERS) {
      const text = template.replace("M", member).replace("R1", JSON.stringify(entry("r1"))).replace("R2", JSON.stringify(entry("r2")));
      const want = ids?.map(entry);
      const { h, paths } = answering(() => text);
      let got;
      try {
        got = await call(h);
      } catch (e) {
        got = e instanceof PigeonError && e.code === "BAD_FRAME" ? undefined : `${e.code}: ${e.message}`;
      }
      if (JSON.stringify(got) !== JSON.stringify(want)) wrong.push(`${name}: ${JSON.stringify(got)}`);
      if (paths.length !== 1) wrong.push(`${name}: ${paths.length} requests`);
    }
    assert.deepEqual(wrong, []);
  });
}

test("a quarantine page is one request, bounded by maxResponseBytes, whatever records it holds", async () => {
  const records = Array.from({ length: 50 }, (_, i) => ({ id: `qr_${i}`, time: "2026-01-01T00:00:00Z", data: "x".repeat(100) }));
  const page = JSON.stringify({ records });
  const { h, paths } = answering(() => page);
  assert.equal((await h.quarantine({ max: 50 })).length, 50);
  assert.deepEqual(paths, ["/v1/quarantine?max=50"], "the next page is the caller's to ask for");
  const small = answering(() => page, { maxResponseBytes: 1024 });
  await assert.rejects(small.h.quarantine(), (e) => e instanceof PigeonError && e.code === "PAYLOAD_TOO_LARGE");
});

const receipt = (auditSeq) => ({ event: "delivered", time: "2026-01-01T00:00:00Z", principal: "p", contractId: "c", auditSeq });

test("a walk of receipt pages yields each page before it asks for the next, holding one page at a time", async () => {
  // A server whose pages never end: page n holds receipts 2n-1 and 2n.
  const { h, paths } = answering((path) => {
    const after = Number(new URL(path, "http://x").searchParams.get("after") ?? 0);
    return JSON.stringify({ receipts: [receipt(after + 1), receipt(after + 2)], next: String(after + 2) });
  });
  const seen = [];
  for await (const r of h.allReceipts("m_1", { max: 2 })) {
    seen.push([r.auditSeq, paths.length]);
    if (seen.length === 5) break;
  }
  assert.deepEqual(seen, [[1, 1], [2, 1], [3, 2], [4, 2], [5, 3]]);
});

/** A sound signing key: the keys listing reads only sound keys. */
const SIG_KEY = publicKeys(keyPairFrom(new Uint8Array(32).fill(7), new Uint8Array(32).fill(107)))[0];

// Each listing the server caps: its call, the member holding its list, the
// most entries the server sends there, and entry i of a page.
const CAPPED = [
  ["audit", (h) => h.audit(), "records", MAX_PAGE_RECORDS, (i) => ({ seq: i + 1, note: "a [list], \"quoted\", {braced}" })],
  ["quarantine", (h) => h.quarantine(), "records", MAX_PAGE_RECORDS, (i) => ({ id: `qr_${i}`, message: { data: [[1, 2], { a: [3] }] } })],
  ["receipts", (h) => h.receipts("m_1"), "receipts", MAX_PAGE_RECORDS, (i) => receipt(i + 1)],
  ["keys", (h) => h.fetchKeys("acct"), "keys", MAX_ACCOUNT_KEYS, (i) => ({ ...SIG_KEY, kid: `k${i}` })],
];

/** The number of times fn() has JSON.parse read `text` whole, and what fn returned or threw. */
async function parsesOf(text, fn) {
  const parse = JSON.parse;
  let n = 0;
  JSON.parse = function (t, reviver) {
    if (t === text) n++;
    return parse.call(JSON, t, reviver);
  };
  let result;
  try {
    result = await fn();
  } catch (e) {
    result = e;
  } finally {
    JSON.parse = parse;
  }
  return [n, result];
}

for (const [listing, call, member, most, entry] of CAPPED) {
  test(`${listing}: an answer of ${most} entries is read, and one of more is refused, BAD_FRAME, before JSON.parse builds its entries`, async () => {
    const page = (n, name = member, comma = ",") => `{"${name}":[${Array.from({ length: n }, (_, i) => JSON.stringify(entry(i))).join(comma)}]}`;
    const full = page(most);
    const [, got] = await parsesOf(full, () => call(answering(() => full).h));
    assert.equal(Array.isArray(got) ? got.length : got.receipts?.length, most, `the full page is read: ${got}`);
    const refusals = [
      ["one more", page(most + 1)],
      ["one more, spaced out", page(most + 1, member, " \r\n,\t ").replace(":[", " : [ \n")],
      ["one more, under an escaped name", page(most + 1, member.replace(member[0], `\\u00${member.charCodeAt(0).toString(16)}`))],
      ["empty objects past the bound", `{"${member}":[${"{},".repeat(most * 10)}{}]}`],
    ];
    for (const [name, text] of refusals) {
      const [parsed, err] = await parsesOf(text, () => call(answering(() => text).h));
      const read = (v) => (v instanceof Error ? String(v) : `${(Array.isArray(v) ? v : v.receipts).length} entries handed over`);
      assert.ok(err instanceof PigeonError && err.code === "BAD_FRAME", `${name}: ${read(err)}`);
      assert.match(err.message, new RegExp(`more than ${most} ${member}`), name);
      assert.equal(parsed, 0, `${name}: the answer was parsed`);
    }
    // A list of that name deeper in the answer is not the page's.
    const nested = `{"x":${page(most + 1)},"${member}":[]}`;
    assert.deepEqual(await call(answering(() => nested).h).then((v) => (Array.isArray(v) ? v : v.receipts)), []);
  });
}
