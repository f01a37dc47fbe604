// The client in a real browser: Debian's headless Chromium loads
// test/browser/page.mjs, which imports the ESM build (dist/) unbundled
// through an import map, talks to a real `pigeon serve` on another origin
// (allowed by --allowed-origins: CORS for HTTP, the origin check for the
// WebSocket) over both protocols, and posts what happened back to this test.
// Without a chromium binary the test is skipped, except under CI, where
// scripts/install-chromium.sh has put one there and its absence fails.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { createServer } from "node:http";
import { mkdtempSync, readFileSync, rmSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { extname, join, normalize } from "node:path";
import { CLIENT, Server, hangAfter } from "./harness.mjs";

function chromium() {
  for (const name of [process.env.CHROMIUM, "chromium", "chromium-browser", "google-chrome"]) {
    if (!name) continue;
    try {
      execFileSync("sh", ["-c", `command -v "${name}"`], { stdio: "pipe" });
      return name;
    } catch {
      /* not this one */
    }
  }
  return undefined;
}

const TYPES = { ".js": "text/javascript", ".mjs": "text/javascript", ".html": "text/html", ".map": "application/json" };

// The import map points bare names at files under node_modules, as a
// bundler would; "ws" maps to nothing the page loads (the browser's own
// WebSocket is used).
function pageHTML() {
  const imports = {
    "@pigeon/client": "/dist/index.js",
    "@noble/ciphers/": "/node_modules/@noble/ciphers/",
    "@noble/curves/": "/node_modules/@noble/curves/",
    "@noble/hashes/": "/node_modules/@noble/hashes/",
    ws: "/absent-ws.js",
  };
  return `<!doctype html><html><head><meta charset="utf-8"><title>pigeon client</title>
<script type="importmap">${JSON.stringify({ imports })}</script>
<script type="module" src="/test/browser/page.mjs"></script></head><body>pigeon client in a browser</body></html>`;
}

/** A static server for the page and the client's files; resolves the page's report. */
async function pageServer() {
  let report;
  const reported = new Promise((r) => (report = r));
  const srv = createServer((req, res) => {
    const url = new URL(req.url, "http://x");
    if (req.method === "POST" && url.pathname === "/result") {
      let body = "";
      req.on("data", (c) => (body += c));
      req.on("end", () => {
        res.end("ok");
        report(JSON.parse(body));
      });
      return;
    }
    if (url.pathname === "/") {
      res.setHeader("content-type", "text/html");
      return res.end(pageHTML());
    }
    const rel = normalize(decodeURIComponent(url.pathname)).replace(/^\/+/, "");
    const allowed = ["dist/", "node_modules/@noble/", "test/browser/"].some((p) => rel.startsWith(p));
    const file = join(CLIENT, rel);
    if (!allowed || rel.includes("..") || !existsSync(file)) {
      res.statusCode = 404;
      return res.end("not found");
    }
    res.setHeader("content-type", TYPES[extname(file)] ?? "application/octet-stream");
    res.end(readFileSync(file));
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${srv.address().port}`, reported, close: () => new Promise((r) => srv.close(r)) };
}

const browser = chromium();
const skip = browser ? false : process.env.CI ? false : "no chromium binary (scripts/install-chromium.sh installs Debian's)";

test("browser: WebSocket and HTTP sessions, refusals and sealing in headless Chromium", { skip, timeout: 120_000 }, async () => {
  assert.ok(browser, "CI must have chromium: scripts/install-chromium.sh");
  const broker = await Server.start({ args: ["--allowed-origins", "127.0.0.1:*"] });
  const page = await pageServer();
  const profile = mkdtempSync(join(tmpdir(), "pigeon-ts-chromium-"));
  const proc = spawn(browser, ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
    "--no-default-browser-check", `--user-data-dir=${profile}`, `${page.url}/?broker=${encodeURIComponent(broker.ws)}`], { stdio: ["ignore", "ignore", "pipe"] });
  const exited = new Promise((r) => proc.once("exit", r));
  let log = "";
  proc.stderr.on("data", (b) => (log = (log + b).slice(-4000)));
  try {
    const r = await Promise.race([page.reported, hangAfter(90_000)]);
    assert.notEqual(r, "hang", `the page reported nothing; chromium said:\n${log}`);
    assert.ok(r.ok, `the page failed: ${r.error}\n${r.stack}`);
    const res = r.results;
    assert.equal(res.nodeGlobals, false, "ran in the browser, not Node");
    assert.match(res.contract.id, /^ctr_/);
    assert.deepEqual(res.contract.subjects, ["events.telemetry"]);
    assert.deepEqual(res.decisions, ["accepted", "accepted", "accepted"]);
    assert.deepEqual(res.delivered.map((d) => d.value), [1, 2, 3]);
    assert.deepEqual(res.refusal, { isPigeonError: true, code: "INTENT_DENIED", kind: "denial" });
    assert.equal(res.badToken.isPigeonError, true);
    assert.deepEqual(res.sealed, { clear: { kind: "chat" }, payload: "from the browser" });
    assert.deepEqual(res.http, { contract: "ctr_", status: "accepted", refusal: { isPigeonError: true, code: "INTENT_DENIED", status: 403 } });
    assert.equal(res.closed, true);
  } finally {
    proc.kill("SIGKILL");
    await Promise.race([exited, hangAfter(10_000)]);
    await page.close();
    await broker.stop();
    // Chromium's helper processes may still be writing the profile; a
    // temporary folder left behind does not fail the test.
    try {
      rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
    } catch (e) {
      console.error(`left ${profile}: ${e.message}`);
    }
  }
});
