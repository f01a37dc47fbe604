// Runs in a real browser (headless Chromium, test/browser.test.mjs): the
// client's ESM build, unbundled, resolved through the page's import map.
// It connects with the pigeon.bearer subprotocol (a browser cannot set
// headers), publishes, receives by push, meets a typed refusal, and seals
// and opens a payload with the browser's own crypto. Every step's outcome
// is posted back to the test's server; a thrown error is posted too.
import { connect, HttpClient, PigeonError, generateKeys, sealData, openData } from "@pigeon/client";

const q = new URLSearchParams(location.search);
const broker = q.get("broker");
const httpBase = broker.replace(/^ws/, "http").replace(/\/v1\/ws$/, "");
const results = {};

async function main() {
  results.nodeGlobals = typeof process !== "undefined";
  const monitor = await connect(broker, "monitor-token", ["events.telemetry"]);
  const sensor = await connect(broker, "sensor-token", ["events.telemetry"]);
  results.contract = { id: monitor.contract.id, subjects: monitor.contract.subjects.map((s) => s.name) };
  const got = [];
  const arrived = new Promise((resolve) => {
    monitor.subscribe("events.telemetry", (m) => {
      got.push(m.data);
      if (got.length === 3) resolve();
    });
  });
  await new Promise((r) => setTimeout(r, 100));
  const decisions = await Promise.all([1, 2, 3].map((v) => sensor.publish({ type: "telemetry.reading", subject: "events.telemetry", intent: "report", data: { kind: "temp", site: "browser", value: v } })));
  results.decisions = decisions.map((d) => d.status);
  await arrived;
  results.delivered = [...got];
  try {
    await sensor.publish({ type: "telemetry.reading", subject: "events.telemetry", intent: "delete", data: { kind: "temp", site: "browser", value: 4 } });
    results.refusal = "accepted";
  } catch (e) {
    results.refusal = { isPigeonError: e instanceof PigeonError, code: e.code, kind: e.kind };
  }
  try {
    await connect(broker, "nobody-token", ["events.telemetry"]);
    results.badToken = "connected";
  } catch (e) {
    results.badToken = { isPigeonError: e instanceof PigeonError, kind: e.kind };
  }
  // The HTTP client from the page: cross-origin calls with an
  // Authorization header, so the browser sends CORS preflights first.
  const http = new HttpClient(httpBase, "sensor-token");
  const hc = await http.connect(["events.telemetry"]);
  const hd = await http.publish({ type: "telemetry.reading", subject: "events.telemetry", intent: "report", data: { kind: "temp", site: "browser-http", value: 5 } });
  let httpRefusal;
  try {
    await http.publish({ type: "telemetry.reading", subject: "events.telemetry", intent: "delete", data: { kind: "temp", site: "browser-http", value: 6 } });
  } catch (e) {
    httpRefusal = { isPigeonError: e instanceof PigeonError, code: e.code, status: e.status };
  }
  results.http = { contract: hc.id.slice(0, 4), status: hd.status, refusal: httpRefusal };
  const alice = generateKeys();
  const bob = generateKeys();
  const sealed = sealData({ kind: "chat" }, new TextEncoder().encode("from the browser"), bob.encryptionKid, bob.encryptionPublic, alice.signingKid, alice.signingSeed);
  const opened = openData(sealed, bob.encryptionPrivate, alice.signingPublic);
  results.sealed = { clear: opened.clear, payload: new TextDecoder().decode(opened.payload) };
  await sensor.close();
  await monitor.close();
  results.closed = true;
}

main().then(
  () => post({ ok: true, results }),
  (e) => post({ ok: false, results, error: `${e?.code ?? ""} ${e?.message ?? e}`, stack: e?.stack }),
);

function post(body) {
  return fetch("/result", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
}
