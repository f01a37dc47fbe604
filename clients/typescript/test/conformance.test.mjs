// Every scenario of clients/conformance/scenarios.json listed for
// typescript, against a real `pigeon serve`; the last test checks that each
// of them ran.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { scenarios, ran, stopShared } from "./harness.mjs";
import "./scenarios/ws_basic.mjs";
import "./scenarios/ws_delivery.mjs";
import "./scenarios/ws_at_most_once.mjs";
import "./scenarios/ws_transport.mjs";
import "./scenarios/e2e.mjs";
import "./scenarios/http.mjs";
import "./scenarios/ws_brief.mjs";
import "./scenarios/ws_stream.mjs";
import "./scenarios/ws_resume.mjs";
import "./scenarios/ws_renew.mjs";

after(stopShared);

test("every typescript scenario ran", () => {
  const want = scenarios.filter((s) => s.clients.includes("typescript")).map((s) => s.id);
  const missing = want.filter((id) => !ran.has(id));
  assert.deepEqual(missing, [], `scenarios that did not run (or failed): ${missing.join(", ")}`);
});
