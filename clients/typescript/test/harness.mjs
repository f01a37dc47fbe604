// The conformance harness (clients/conformance/README.md): builds the server
// once (or takes PIGEON_BIN), starts it on a port of 127.0.0.1 that it picks
// itself (and names in its banner) with the conformance catalog and tokens,
// and records which scenarios ran.
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, existsSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { WebSocketServer } from "ws";
import { connect } from "../dist/index.js";

export const CLIENT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const ROOT = resolve(CLIENT, "../..");
export const CONFORMANCE = join(ROOT, "clients/conformance");

let bin;
/** The server binary: PIGEON_BIN, else built once into a temporary folder. */
export function pigeonBin() {
  if (bin) return bin;
  if (process.env.PIGEON_BIN) return (bin = process.env.PIGEON_BIN);
  const dir = mkdtempSync(join(tmpdir(), "pigeon-ts-bin-"));
  bin = join(dir, "pigeon");
  execFileSync("go", ["build", "-o", bin, "./cmd/pigeon"], { cwd: ROOT, stdio: "inherit" });
  return bin;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** One `pigeon serve` process. */
export class Server {
  /** `data` is its data folder ("" keeps everything in memory), `extra` more serve flags. */
  constructor(data = "", extra = []) {
    this.port = 0; // the system picks it at the first run()
    this.data = data;
    this.extra = extra;
    this.proc = undefined;
    this.log = [];
  }
  get http() {
    return `http://127.0.0.1:${this.port}`;
  }
  get ws() {
    return `ws://127.0.0.1:${this.port}/v1/ws`;
  }

  /** Starts a server; `durable` gives it a temporary data folder, `args` more serve flags. */
  static async start({ durable = false, args = [] } = {}) {
    const s = new Server(durable ? mkdtempSync(join(tmpdir(), "pigeon-ts-data-")) : "", args);
    await s.run();
    return s;
  }

  /**
   * Starts `pigeon serve` and waits until it serves. The first run listens
   * on 127.0.0.1:0 and takes the port the system picked from the server's
   * banner, so that servers started side by side never race for a port; a
   * restart listens on the same port again, for the sessions that reconnect
   * to it. Throws, with the server's output so far, when the server exits
   * or says nothing of listening within 15 s.
   */
  async run() {
    const args = [
      "serve",
      "--addr", `127.0.0.1:${this.port}`,
      "--data", this.data,
      "--policies", join(CONFORMANCE, "policies"),
      "--tokens", join(CONFORMANCE, "tokens.yaml"),
      ...this.extra,
    ];
    const p = spawn(pigeonBin(), args, { stdio: ["ignore", "pipe", "pipe"] });
    this.proc = p;
    const keep = (b) => {
      this.log.push(b.toString());
      if (this.log.length > 200) this.log.shift();
    };
    p.stdout.on("data", keep);
    p.stderr.on("data", keep);
    const exited = new Promise((r) => p.once("exit", (code, sig) => r({ code, sig })));
    const closed = new Promise((r) => p.once("close", r)); // and its output read to the end
    this.exited = exited;
    const deadline = Date.now() + 15_000;
    try {
      this.port = await listeningPort(p, exited, 15_000);
      // The listener exists once the banner is out; /health answering 200
      // says the HTTP API is served on it too.
      const left = Math.max(deadline - Date.now(), 1000);
      const r = await fetch(`${this.http}/health`, { signal: AbortSignal.timeout(left) });
      if (r.status !== 200) throw new Error(`GET /health answered ${r.status}`);
    } catch (e) {
      await this.kill("SIGKILL");
      await Promise.race([closed, hangAfter(1000)]);
      const cmd = args.map((a) => (a === "" ? '""' : a)).join(" ");
      throw new Error(`pigeon ${cmd}: ${e.message}; its output so far:\n${this.log.join("")}`);
    }
  }

  /** Kills the process with sig and waits for it to exit. */
  async kill(sig = "SIGKILL") {
    if (!this.proc || this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    this.proc.kill(sig);
    await this.exited;
  }

  /** SIGTERM, and removes a temporary data folder. */
  async stop() {
    const t0 = Date.now();
    await this.kill("SIGTERM");
    if (process.env.PIGEON_TS_DEBUG) console.error(`stop ${this.port}: ${Date.now() - t0} ms`);
    if (this.data && existsSync(this.data)) rmSync(this.data, { recursive: true, force: true });
  }
}

// The line of the banner `pigeon serve` prints once it listens:
// "pigeon: health     http://127.0.0.1:PORT/health".
const LISTENING = /^pigeon: health +https?:\/\/\S+:(\d+)\/health/m;

/**
 * Resolves to the port `pigeon serve` (process p) says it listens on, read
 * from its stdout; rejects when it exits first or after ms.
 */
function listeningPort(p, exited, ms) {
  return new Promise((resolve, reject) => {
    let out = "";
    let timer;
    const settle = (f, v) => {
      clearTimeout(timer);
      p.stdout.off("data", read);
      f(v);
    };
    const read = (b) => {
      out += b.toString();
      const m = LISTENING.exec(out);
      if (m) settle(resolve, Number(m[1]));
    };
    p.stdout.on("data", read);
    timer = setTimeout(() => settle(reject, new Error(`it did not say it listens within ${ms} ms`)), ms);
    exited.then(({ code, sig }) => settle(reject, new Error(`it exited (${sig ?? `code ${code}`}) before it said it listens`)));
  });
}

/** A WebSocket server of the test's own, listening on a port of 127.0.0.1 the system picks. */
export async function wsServer() {
  const wss = new WebSocketServer({ host: "127.0.0.1", port: 0 });
  await new Promise((r, j) => {
    wss.once("listening", r);
    wss.once("error", j);
  });
  return wss;
}

let shared;
/** The server most scenarios share (in memory). */
export async function sharedServer() {
  shared ??= Server.start();
  return shared;
}
export async function stopShared() {
  if (shared) await (await shared).stop();
}

export const scenarios = JSON.parse(readFileSync(join(CONFORMANCE, "scenarios.json"), "utf8")).scenarios;
export const ran = new Set();

/**
 * A test for one scenario of scenarios.json, named by its id; it records
 * the id when the scenario passes.
 */
export function scenario(id, fn, options = {}) {
  if (!scenarios.some((s) => s.id === id && s.clients.includes("typescript"))) {
    throw new Error(`scenario ${id} is not listed for typescript`);
  }
  test(`scenario ${id}`, { timeout: options.timeout ?? 60_000 }, async (t) => {
    await fn(t);
    ran.add(id);
  });
}

let n = 0;
/** A unique tag for keys and ids of this run. */
export function uniq(prefix = "ts") {
  n++;
  return `${prefix}-${process.pid}-${Date.now().toString(36)}-${n}`;
}

/** Waits until cond() is true, polling, or throws after ms. */
export async function until(cond, ms = 5_000, what = "condition") {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await cond()) return;
    await sleep(20);
  }
  throw new Error(`timed out waiting for ${what}`);
}

export { sleep };

// ---------- messages of the catalog ----------

export function payment(over = {}, data = {}) {
  return {
    type: "payment.authorization.requested",
    subject: "payments.authorize",
    intent: "authorize_payment",
    idempotencyKey: uniq("pay"),
    classification: "pci",
    ...over,
    data: { merchantId: "m-1", orderId: uniq("o"), amount: 42.5, currency: "GBP", paymentToken: "tok_abc", ...data },
  };
}

export function notification(tag, over = {}) {
  return {
    type: "notification.send.requested",
    subject: "notifications.send",
    intent: "send_notification",
    idempotencyKey: uniq("ntf"),
    classification: "pii",
    ...over,
    data: { recipientId: tag, channel: "email", templateId: "welcome" },
  };
}

export function telemetry(kind, site, value) {
  return { type: "telemetry.reading", subject: "events.telemetry", intent: "report", data: { kind, site, value } };
}

export const PRINCIPALS = {
  alice: "spiffe://conformance/ns/chat/sa/alice",
  bob: "spiffe://conformance/ns/chat/sa/bob",
  admin: "spiffe://merchant-prod/ns/ops/sa/admin",
};

/** Resolves to "hang" after ms, without keeping the process alive. */
export function hangAfter(ms) {
  return new Promise((r) => setTimeout(() => r("hang"), ms).unref());
}

/**
 * Runs fn with a monitor (receives) and a sensor (publishes) session on
 * events.telemetry of srv, and closes both after it, whatever it does.
 */
export async function withTelemetry(srv, fn) {
  const monitor = await connect(srv.ws, "monitor-token", ["events.telemetry"]);
  const sensor = await connect(srv.ws, "sensor-token", ["events.telemetry"]);
  try {
    return await fn(monitor, sensor);
  } finally {
    await Promise.all([monitor.close(), sensor.close()]);
  }
}

/** The gateway's part of request/reply: session s approves every payment request. */
export function approvePayments(s) {
  return s.subscribe("payments.authorize", async (m) => {
    await s.publish({
      type: "payment.authorization.result",
      subject: "payments.authorize",
      intent: "authorize_payment",
      classification: "pci",
      correlationId: m.id,
      data: { approved: true, orderId: m.data.orderId },
    });
  });
}

/**
 * A WebSocket of the test's own: `serve(sock, frame, n)` answers frame on
 * the n-th connection; `sock.push(obj)` and `sock.drop()` act as the
 * server. `sock.sent` counts the frames sent. With `stuck`, the socket
 * never drains after the negotiation: every later frame stays in
 * `bufferedAmount`, unserved, as with a server that stopped reading.
 */
export function fakeWebSocket(serve, { stuck = false } = {}) {
  const socks = [];
  class Fake {
    constructor() {
      this.readyState = 0;
      this.protocol = "pigeon.v1";
      this.bufferedAmount = 0;
      this.sent = 0;
      this.listeners = {};
      socks.push(this);
      setTimeout(() => {
        this.readyState = 1;
        this.emit("open", {});
      }, 1);
    }
    addEventListener(type, fn) {
      (this.listeners[type] ??= []).push(fn);
    }
    emit(type, ev) {
      for (const fn of this.listeners[type] ?? []) fn(ev);
    }
    push(obj) {
      this.emit("message", { data: JSON.stringify(obj) });
    }
    drop(code = 1006) {
      if (this.readyState === 3) return;
      this.readyState = 3;
      this.emit("close", { code, reason: "" });
    }
    send(text) {
      if (this.readyState !== 1) throw new Error("not open");
      const f = JSON.parse(text);
      this.sent++;
      if (stuck && f.op !== "negotiate") {
        this.bufferedAmount += Buffer.byteLength(text);
        return;
      }
      serve(this, f, socks.indexOf(this) + 1);
    }
    close(code = 1000) {
      setTimeout(() => this.drop(code), 1);
    }
  }
  return { Fake, socks };
}

/** The contract a rawServer grants by default. */
export const RAW_CONTRACT = { id: "ctr_raw", principal: "p", subjects: [], issuedAt: "", expiresAt: "", region: "uk" };

/**
 * A raw endpoint: answers negotiate with contract() (RAW_CONTRACT by
 * default) and ping, then hands each other frame to onFrame(ws, f, n) (n:
 * the connection's number, from 1); onConnection(ws, n) learns of each
 * connection.
 */
export async function rawServer(onFrame, { contract = () => RAW_CONTRACT, onConnection = () => {} } = {}) {
  const wss = await wsServer();
  let n = 0;
  wss.on("connection", (ws) => {
    const k = ++n;
    onConnection(ws, k);
    ws.on("message", (raw) => {
      const f = JSON.parse(raw.toString());
      if (f.op === "negotiate") ws.send(JSON.stringify({ op: "contract", re: f.id, contract: contract(), maxFrame: 1 << 20 }));
      else if (f.op === "ping") ws.send(JSON.stringify({ op: "pong", re: f.id }));
      else onFrame(ws, f, k);
    });
  });
  const stop = async () => {
    for (const c of wss.clients) c.terminate();
    await new Promise((r) => wss.close(r));
  };
  return { url: `ws://127.0.0.1:${wss.address().port}/v1/ws`, wss, stop, connections: () => n };
}

/** Answers frame f "ok" on ws. */
export const ok = (ws, f) => ws.send(JSON.stringify({ op: "ok", re: f.id }));

/**
 * A rawServer that answers subscribe with subscription "sub_1" and hands
 * every other frame to onFrame(ws, f) (by default: answers it "ok");
 * socket() is the socket of the connection that sent the last frame, for
 * the test to write to.
 */
export async function subscribingServer(onFrame = ok) {
  let socket;
  const srv = await rawServer((ws, f) => {
    socket = ws;
    if (f.op === "subscribe") ws.send(JSON.stringify({ op: "subscribed", re: f.id, sub: "sub_1" }));
    else onFrame(ws, f);
  });
  return { srv, socket: () => socket };
}

/** Connects a session of opts to srv, runs body(s), then closes the session and stops srv. */
export async function onSession(srv, opts, body) {
  try {
    const s = await connect(srv.url, "t", ["x"], opts);
    try {
      await body(s);
    } finally {
      await s.close({ timeoutMs: 1000 });
    }
  } finally {
    await srv.stop();
  }
}
