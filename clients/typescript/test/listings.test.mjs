// The listings of the HTTP API: subjects, audit records, quarantine
// records, an account's keys, a message's receipts. Each call asks for one
// page and holds that page alone, its answer read up to maxResponseBytes
// (256 MiB by default); the walk of receipt pages (allReceipts) yields each
// page before it asks for the next. So no listing of the client gathers
// records across pages, and none needs a cap on the records it holds (the
// CLI's `quarantine list` walks every page, and stops at 1000 records by
// default). A listing answer whose list is not a list of objects is
// refused, BAD_FRAME (tests/test_http_listings.py holds the same table for
// the Python client).
import assert from "node:assert/strict";
import { test } from "node:test";
import { HttpClient, PigeonError } from "../dist/index.js";

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

// Each listing: its call and the member of the answer holding its list.
const LISTINGS = [
  ["subjects", (h) => h.subjects(), "subjects"],
  ["audit", (h) => h.audit({ from: 1, max: 2 }), "records"],
  ["quarantine", (h) => h.quarantine({ max: 2 }), "records"],
  ["keys", (h) => h.fetchKeys("acct"), "keys"],
];

// Each answer: its JSON text (`M` stands for the listing's member), and the
// list the call returns (undefined: refused, BAD_FRAME).
const ANSWERS = [
  ["a list of objects", `{"M":[{"id":"r1"},{"id":"r2"}]}`, [{ id: "r1" }, { id: "r2" }]],
  ["an empty list", `{"M":[]}`, []],
  ["absent", `{}`, []],
  ["null", `{"M":null}`, []],
  ["a string", `{"M":"abc"}`, undefined],
  ["an object", `{"M":{"a":1}}`, undefined],
  ["a number", `{"M":7}`, undefined],
  ["an entry that is not an object", `{"M":[{"id":"r1"},"r2"]}`, undefined],
  ["an answer that is not an object", `[{"id":"r1"}]`, undefined],
];

for (const [listing, call, member] of LISTINGS) {
  test(`the ${listing} listing asks for one page and returns its list of objects, and refuses any other shape`, async () => {
    const wrong = [];
    for (const [name, text, want] of ANSWERS) {
      const { h, paths } = answering(() => text.replace("M", member));
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
