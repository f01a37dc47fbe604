/**
 * The WebSocket underneath a session: the global WebSocket in browsers (and
 * runtimes that have one), the `ws` package on Node, which has none before
 * Node 22. Node sends the credential in the Authorization header; a browser
 * cannot, so it offers the `pigeon.bearer.<token>` subprotocol beside
 * `pigeon.v1`.
 */
import { timerMs } from "./conn.js";
import { fromWire, PigeonError, transportError } from "./errors.js";

/** The constructor of a WHATWG-style WebSocket (global WebSocket, ws). */
export type WebSocketConstructor = new (url: string, protocols?: string | string[], options?: unknown) => WebSocketLike;

/** The part of the WebSocket interface the client uses. */
export interface WebSocketLike {
  readonly readyState: number;
  readonly protocol?: string;
  /** bytes accepted by send() and not yet written to the network (WHATWG WebSocket, ws) */
  readonly bufferedAmount?: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: string, listener: (ev: any) => void): void;
  /** `ws` only: the HTTP response of a refused upgrade */
  on?(event: string, listener: (...args: any[]) => void): unknown;
}

export interface DialOptions {
  /** "header" (Authorization: Bearer) or "subprotocol" (pigeon.bearer.<token>) */
  auth?: "header" | "subprotocol";
  /** a WebSocket implementation to use instead of the global one or `ws` */
  WebSocket?: WebSocketConstructor;
  /** how long the handshake may take (default 10 s) */
  connectTimeoutMs?: number;
  region?: string;
  /** the largest frame the `ws` package reads (its maxPayload); default DEFAULT_MAX_FRAME_BYTES */
  maxFrameBytes?: number;
}

/**
 * The largest frame a session reads by default (64 MiB). The broker's
 * largest frames are the answers of replay and receive: at most its
 * MaxReadBytes (16 MiB by default) of messages and one message more (each
 * at most its 1 MiB frame limit), and of publish_batch (twice its frame
 * limit and 576 bytes a message); 64 MiB leaves room for a broker
 * configured with larger reads, and keeps `ws`'s own default (100 MiB) from
 * letting a hostile server make the client buffer that much per frame.
 */
export const DEFAULT_MAX_FRAME_BYTES = 64 << 20;

/** Events of an open socket. */
export interface SocketHandlers {
  onText(text: string): void;
  onBinary(): void;
  onClose(code: number, reason: string): void;
  /** an error of the open socket (before its close event): `ws`'s refusal of a frame beyond maxPayload, … */
  onError?(message: string, code: string | undefined): void;
}

/** Turns http(s):// into ws(s):// and adds ?region= when given. */
export function wsURL(url: string, region?: string): string {
  const u = new URL(url);
  if (u.protocol === "http:") u.protocol = "ws:";
  else if (u.protocol === "https:") u.protocol = "wss:";
  if (u.protocol !== "ws:" && u.protocol !== "wss:") throw new PigeonError("INVALID_ARGUMENT", `not a WebSocket URL: ${url}`);
  if (u.pathname === "/" || u.pathname === "") u.pathname = "/v1/ws";
  if (region) u.searchParams.set("region", region);
  return u.toString();
}

let nodeWS: Promise<WebSocketConstructor> | undefined;

async function implementation(o: DialOptions): Promise<{ ctor: WebSocketConstructor; node: boolean }> {
  if (o.WebSocket) return { ctor: o.WebSocket, node: false };
  // On Node the ws package is used even where a global WebSocket exists: it
  // sends the Authorization header and reads the body of a refused upgrade.
  const onNode = typeof process !== "undefined" && !!process.versions?.node;
  const g = (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
  if (g && !onNode) return { ctor: g, node: false };
  nodeWS ??= import("ws").then((m) => (m.WebSocket ?? (m as { default: unknown }).default) as unknown as WebSocketConstructor);
  return { ctor: await nodeWS, node: true };
}

/** Opens a socket; rejects with the server's typed error when the upgrade is refused. */
export async function dial(url: string, token: string, o: DialOptions, h: SocketHandlers): Promise<WebSocketLike> {
  const { ctor, node } = await implementation(o);
  const auth = o.auth ?? (node ? "header" : "subprotocol");
  const protocols = ["pigeon.v1"];
  if (auth === "subprotocol") protocols.push(`pigeon.bearer.${token}`);
  const target = wsURL(url, o.region);
  let sock: WebSocketLike;
  try {
    sock = node
      ? new ctor(target, protocols, {
          headers: auth === "header" ? { Authorization: `Bearer ${token}` } : {},
          perMessageDeflate: false,
          // ws's own default is 100 MiB: a frame beyond this bound ends
          // the connection (1009) as its header is read, before its
          // payload is buffered.
          maxPayload: o.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES,
          handshakeTimeout: timerMs(o.connectTimeoutMs ?? 10_000),
        })
      : new ctor(target, protocols);
  } catch (e) {
    throw transportError(`cannot connect to ${target}: ${String(e)}`, e);
  }
  return await new Promise<WebSocketLike>((resolve, reject) => {
    let settled = false;
    const fail = (err: PigeonError) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      try { sock.close(); } catch { /* already gone */ }
      reject(err);
    };
    const timer = setTimeout(() => fail(transportError(`connecting to ${target} timed out`)), timerMs(o.connectTimeoutMs ?? 10_000));
    if (node && sock.on) {
      sock.on("unexpected-response", (_req: unknown, res: NodeResponse) => {
        const chunks: Uint8Array[] = [];
        let size = 0;
        const refused = () => fail(new PigeonError("SESSION_CLOSED", `upgrade refused with HTTP ${res.statusCode}`, {}, res.statusCode));
        res.on("data", (c: Uint8Array) => {
          // The body of a refusal is a short error: one larger (or without
          // end) is not read into memory, nor waited for.
          size += c.length;
          if (size > MAX_REFUSAL_BYTES) refused();
          else chunks.push(c);
        });
        res.on("end", () => {
          if (size > MAX_REFUSAL_BYTES) return;
          const body = new TextDecoder().decode(concatAll(chunks));
          try {
            const parsed = JSON.parse(body) as { error?: unknown };
            if (parsed && parsed.error) return fail(fromWire(parsed.error, res.statusCode));
          } catch { /* not JSON */ }
          fail(new PigeonError("SESSION_CLOSED", `upgrade refused with HTTP ${res.statusCode}`, {}, res.statusCode));
        });
        res.on("error", () => fail(new PigeonError("SESSION_CLOSED", `upgrade refused with HTTP ${res.statusCode}`, {}, res.statusCode)));
      });
    }
    sock.addEventListener("open", () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(sock);
    });
    sock.addEventListener("error", (ev: { message?: string; error?: unknown }) => {
      if (settled) {
        h.onError?.(errorText(ev), errorCode(ev));
        return;
      }
      fail(transportError(`cannot connect to ${target}: ${ev?.message ?? "connection failed"}`, ev?.error));
    });
    sock.addEventListener("close", (ev: { code: number; reason: string }) => {
      if (!settled) {
        fail(transportError(`connection to ${target} closed during the handshake (${ev.code})`));
        return;
      }
      h.onClose(ev.code, ev.reason);
    });
    sock.addEventListener("message", (ev: { data: unknown }) => {
      if (typeof ev.data === "string") h.onText(ev.data);
      else h.onBinary();
    });
  });
}

/** The text of an error event, never throwing. */
function errorText(ev: { message?: unknown; error?: unknown } | undefined): string {
  try {
    const m = ev?.message ?? (ev?.error as { message?: unknown } | undefined)?.message;
    return typeof m === "string" ? m : "socket error";
  } catch {
    return "socket error";
  }
}

/** The code of an error event's error (`ws`: WS_ERR_…), never throwing. */
function errorCode(ev: { error?: unknown } | undefined): string | undefined {
  try {
    const c = (ev?.error as { code?: unknown } | undefined)?.code;
    return typeof c === "string" ? c : undefined;
  } catch {
    return undefined;
  }
}

/** `ws`'s code for a frame beyond maxPayload. */
export const WS_FRAME_TOO_LARGE = "WS_ERR_UNSUPPORTED_MESSAGE_LENGTH";

/** The most of a refused upgrade's body the client reads (its error). */
const MAX_REFUSAL_BYTES = 64 << 10;

interface NodeResponse {
  statusCode: number;
  on(ev: string, fn: (...a: any[]) => void): void;
}

function concatAll(chunks: Uint8Array[]): Uint8Array {
  let n = 0;
  for (const c of chunks) n += c.length;
  const out = new Uint8Array(n);
  let o = 0;
  for (const c of chunks) {
    out.set(c, o);
    o += c.length;
  }
  return out;
}
