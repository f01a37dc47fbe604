/**
 * The WebSocket session (docs/protocol.md).
 *
 * Concurrency contract: a Session is used from one JavaScript thread, as
 * everything is; every method may be called while others are awaiting.
 * Frames are matched to calls by id, so any number of calls may be in
 * flight at once. Publishes are pipelined: each `publish` returns a promise
 * at once, and the messages queued while a publish frame is being answered
 * leave together in the next `publish_batch` frame, in call order (their
 * sequences follow that order). Handlers of a subscription run at most
 * `maxInFlight` at a time; their acks leave in batches. When the connection
 * drops, every call waiting on it fails with a transport error
 * (SESSION_CLOSED, or SHUTTING_DOWN after the server said so), never hangs;
 * the session then reconnects with backoff, negotiates again and resumes its
 * subscriptions. A refusal to renegotiate ends the session with that error.
 */
import { ClientCodes, fromWire, PigeonError, RetryAfter, transportError } from "./errors.js";
import { dial, type DialOptions, type WebSocketConstructor, type WebSocketLike } from "./socket.js";
import type { Contract, Decision, Message, ReplayOptions, Start } from "./types.js";

/** Options of {@link connect}. */
export interface ConnectOptions {
  /** the session's region (`?region=`); default: the server's */
  region?: string;
  /** the contract's lifetime in milliseconds (ttlMs); default: the server's (15 min) */
  ttl?: number;
  /** credential by "header" (default on Node) or "subprotocol" (default in browsers) */
  auth?: "header" | "subprotocol";
  /** a WebSocket implementation; default: the global one, else the `ws` package */
  WebSocket?: WebSocketConstructor;
  /** reconnect after a dropped connection (default true) */
  reconnect?: boolean | ReconnectOptions;
  /** application ping every this many ms (default 15 000; 0: none) */
  pingIntervalMs?: number;
  /** a ping unanswered this long drops the connection (default 10 000) */
  pingTimeoutMs?: number;
  /** publishes in flight or queued at once (default 4096: four full batches); beyond, publish waits for room */
  maxPendingPublishes?: number;
  /** handshake timeout (default 10 000 ms) */
  connectTimeoutMs?: number;
  /** errors that belong to no call: an unreadable frame, a lost connection, a failed reconnect */
  onError?: (err: PigeonError) => void;
  /** called after each successful reconnect with the new contract */
  onReconnect?: (contract: Contract) => void;
}

/** Backoff of reconnects. */
export interface ReconnectOptions {
  /** first delay (default 100 ms), doubled each attempt with jitter */
  initialDelayMs?: number;
  /** largest delay (default 5 000 ms) */
  maxDelayMs?: number;
  /** attempts before the session gives up and ends with the last error (default 20) */
  maxAttempts?: number;
}

/** Options of {@link Session.subscribe}. */
export interface SubscribeOptions {
  /** content selector, e.g. "/kind=chat/room=lobby" */
  selector?: string;
  /** CEL condition over principal and message */
  filter?: string;
  /** consumer group on a work-queue or request/reply subject */
  group?: string;
  /** how many handlers run at once (default 1) */
  maxInFlight?: number;
  /** deliveries the server may have on the wire unanswered (default: 256, or maxInFlight when larger) */
  window?: number;
  /** pub/sub only: where to start (default "new") */
  start?: Start;
}

/** One delivery handed to a handler or an iterator. */
export interface Delivery {
  message: Message;
  /** counts deliveries of this message, from 1 */
  attempt: number;
  /** the subscription's server id */
  sub: string;
}

/** A handler: resolving acks the delivery, throwing nacks it (throw {@link RetryAfter} to set the delay). */
export type Handler = (message: Message, delivery: Delivery) => unknown | Promise<unknown>;

/** A frame as it travels. */
type Frame = Record<string, unknown> & { op?: unknown; id?: unknown; re?: unknown };

interface PendingCall {
  resolve(f: Frame): void;
  reject(e: PigeonError): void;
  timer?: ReturnType<typeof setTimeout>;
  /** runs in the reader, before any later frame is handled */
  hook?: (f: Frame) => void;
}

interface QueuedPublish {
  /** the message's JSON text, encoded when publish was called */
  json: string;
  resolve(d: Decision): void;
  reject(e: PigeonError): void;
}

/** One connection: its socket, its calls in flight. */
class Conn {
  private nextId = 1;
  readonly pending = new Map<string, PendingCall>();
  closed = false;
  closeError: PigeonError | undefined;
  sock!: WebSocketLike;

  constructor(private readonly session: Session) {}

  send(frame: Frame): void {
    if (this.closed) throw this.closeError ?? transportError("the connection is closed");
    this.sock.send(JSON.stringify(frame));
  }

  call(frame: Frame, timeoutMs?: number, hook?: (f: Frame) => void): Promise<Frame> {
    return this.callRaw((id) => JSON.stringify({ ...frame, id }), String(frame.op), timeoutMs, hook);
  }

  /** Sends the frame text build(id) makes and waits for its answer. */
  callRaw(build: (id: string) => string, op: string, timeoutMs?: number, hook?: (f: Frame) => void): Promise<Frame> {
    if (this.closed) return Promise.reject(this.closeError ?? transportError("the connection is closed"));
    const id = String(this.nextId++);
    return new Promise<Frame>((resolve, reject) => {
      const p: PendingCall = { resolve, reject, hook };
      if (timeoutMs !== undefined) {
        p.timer = setTimeout(() => {
          this.pending.delete(id);
          reject(new PigeonError(ClientCodes.TIMEOUT, `no answer to ${op} within ${timeoutMs} ms`));
        }, timeoutMs);
      }
      this.pending.set(id, p);
      try {
        this.sock.send(build(id));
      } catch (e) {
        this.pending.delete(id);
        if (p.timer) clearTimeout(p.timer);
        reject(e instanceof PigeonError ? e : transportError(`cannot send: ${String(e)}`, e));
      }
    });
  }

  onText(text: string): void {
    let f: unknown;
    try {
      f = JSON.parse(text);
    } catch (e) {
      this.session.report(new PigeonError(ClientCodes.BAD_FRAME, "the server sent a frame that is not JSON", { frame: text.slice(0, 200) }, undefined, { cause: e }));
      return;
    }
    if (!f || typeof f !== "object" || Array.isArray(f)) {
      this.session.report(new PigeonError(ClientCodes.BAD_FRAME, "the server sent a frame that is not a JSON object", { frame: text.slice(0, 200) }));
      return;
    }
    const fr = f as Frame;
    if (fr.re !== undefined) {
      const re = String(fr.re);
      const p = this.pending.get(re);
      if (!p) {
        this.session.report(new PigeonError(ClientCodes.BAD_FRAME, `the server answered an unknown frame id ${JSON.stringify(fr.re)}`, { op: fr.op }));
        return;
      }
      this.pending.delete(re);
      if (p.timer) clearTimeout(p.timer);
      if (fr.op === "error") p.reject(fromWire(fr.error));
      else if (typeof fr.op !== "string") p.reject(new PigeonError(ClientCodes.BAD_FRAME, "the server's answer has no op", {}));
      else {
        try {
          p.hook?.(fr);
        } catch {
          /* the caller's check of the answer reports it */
        }
        p.resolve(fr);
      }
      return;
    }
    switch (fr.op) {
      case "deliver":
        this.session.onDeliver(this, fr);
        return;
      case "deliver_batch":
        this.session.onDeliverBatch(this, fr);
        return;
      case "unsubscribed":
        this.session.onUnsubscribed(this, fr);
        return;
      case "error":
        this.session.report(fromWire(fr.error));
        return;
      default:
        this.session.report(new PigeonError(ClientCodes.BAD_FRAME, `the server sent an unknown push ${JSON.stringify(fr.op)}`, {}));
    }
  }

  /** Ends the connection: every call waiting fails with err. */
  fail(err: PigeonError): void {
    if (this.closed) return;
    this.closed = true;
    this.closeError = err;
    for (const [id, p] of this.pending) {
      this.pending.delete(id);
      if (p.timer) clearTimeout(p.timer);
      p.reject(err);
    }
    try {
      this.sock?.close(1000);
    } catch {
      /* already closing */
    }
  }
}

function answer(f: Frame, op: string, check: (f: Frame) => boolean): Frame {
  if (f.op !== op || !check(f)) {
    throw new PigeonError(ClientCodes.BAD_FRAME, `the server answered with an unexpected ${String(f.op)} frame`, { op: f.op });
  }
  return f;
}

const isObj = (x: unknown): x is Record<string, unknown> => !!x && typeof x === "object" && !Array.isArray(x);
const isDecision = (x: unknown): boolean =>
  isObj(x) && (x.status === "accepted" || x.status === "duplicate") && isObj(x.message);

function closedError(): PigeonError {
  return new PigeonError(ClientCodes.CLOSED, "the session is closed");
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Connects to the WebSocket endpoint (ws://host/v1/ws, or http(s)://host,
 * whose /v1/ws is used) with a bearer token and negotiates a contract on
 * `subjects`. Rejects with the server's typed error: UNAUTHENTICATED (401)
 * for an unknown token, NO_PERMITTED_SUBJECTS for a contract refused, a
 * transport error when the server cannot be reached.
 */
export async function connect(url: string, token: string, subjects: string[], options: ConnectOptions = {}): Promise<Session> {
  const s = new Session(url, token, subjects, options);
  await s.open();
  return s;
}

/** A WebSocket session under one contract; see the module notes for the concurrency contract. */
export class Session {
  private conn: Conn | undefined;
  private _contract: Contract | undefined;
  private maxFrame = 0;
  private closing = false;
  private closedFinal = false;
  private endError: PigeonError | undefined;
  private reconnecting: Promise<void> | undefined;
  private readonly subs = new Set<Subscription>();
  private readonly bySid = new Map<string, Subscription>();
  private readonly pubQueue: QueuedPublish[] = [];
  private pubInFlight = 0;
  private pubFrameBusy = false;
  private readonly pubWaiters = new Fifo<() => void>();
  private pingTimer: ReturnType<typeof setInterval> | undefined;
  private readonly errorListeners = new Set<(e: PigeonError) => void>();

  /** @internal use {@link connect} */
  constructor(
    readonly url: string,
    private readonly token: string,
    readonly subjects: string[],
    private readonly options: ConnectOptions,
  ) {
    if (!Array.isArray(subjects) || subjects.length === 0) throw new PigeonError("BAD_REQUEST", "at least one subject is required");
    if (options.onError) this.errorListeners.add(options.onError);
  }

  /** The contract negotiated last. */
  get contract(): Contract {
    return this._contract!;
  }

  /** Whether close() was called or the session ended. */
  get closed(): boolean {
    return this.closing || this.closedFinal;
  }

  /** The error that ended the session (a failed reconnect), if any. */
  get error(): PigeonError | undefined {
    return this.endError;
  }

  /** Adds a listener of errors that belong to no call; returns a function that removes it. */
  onError(fn: (e: PigeonError) => void): () => void {
    this.errorListeners.add(fn);
    return () => this.errorListeners.delete(fn);
  }

  /** @internal */
  report(e: PigeonError): void {
    if (this.errorListeners.size === 0) {
      // Never swallowed: without a listener the error goes to the console.
      console.error(`pigeon: ${e.code}: ${e.message}`);
      return;
    }
    for (const fn of this.errorListeners) {
      try {
        fn(e);
      } catch {
        /* a listener's own failure is its own */
      }
    }
  }

  /** @internal dials and negotiates; used by connect and reconnects. */
  async open(): Promise<void> {
    const c = await this.dialConn();
    this.conn = c;
    this.startPing();
  }

  private async dialConn(): Promise<Conn> {
    const c = new Conn(this);
    const o: DialOptions = {
      auth: this.options.auth,
      WebSocket: this.options.WebSocket,
      connectTimeoutMs: this.options.connectTimeoutMs,
      region: this.options.region,
    };
    c.sock = await dial(this.url, this.token, o, {
      onText: (t) => c.onText(t),
      onBinary: () => this.report(new PigeonError(ClientCodes.BAD_FRAME, "the server sent a binary frame", {})),
      onClose: (code, reason) => this.onConnClosed(c, code, reason),
    });
    try {
      const frame: Frame = { op: "negotiate", subjects: this.subjects };
      if (this.options.ttl !== undefined) frame.ttlMs = this.options.ttl;
      const f = answer(await c.call(frame), "contract", (f) => isObj(f.contract) && typeof (f.contract as Contract).id === "string");
      this._contract = f.contract as Contract;
      this.maxFrame = typeof f.maxFrame === "number" ? f.maxFrame : 0;
    } catch (e) {
      c.fail(e instanceof PigeonError ? e : transportError(String(e), e));
      throw e;
    }
    return c;
  }

  private startPing(): void {
    const every = this.options.pingIntervalMs ?? 15_000;
    if (every <= 0 || this.pingTimer) return;
    this.pingTimer = setInterval(() => {
      const c = this.conn;
      if (!c || c.closed) return;
      c.call({ op: "ping" }, this.options.pingTimeoutMs ?? 10_000).catch((e: PigeonError) => {
        if (e.code === ClientCodes.TIMEOUT && !c.closed) {
          this.report(transportError("the server did not answer a ping; dropping the connection"));
          c.fail(transportError("the server did not answer a ping"));
          this.onConnClosed(c, 1006, "ping timeout");
        }
      });
    }, every);
    (this.pingTimer as { unref?: () => void }).unref?.();
  }

  private onConnClosed(c: Conn, code: number, reason: string): void {
    const err =
      code === 1001
        ? new PigeonError("SHUTTING_DOWN", "the server is shutting down")
        : transportError(`the connection closed (${code}${reason ? ` ${reason}` : ""})`);
    c.fail(err);
    if (this.conn !== c) return;
    this.conn = undefined;
    this.failPublishes(err);
    for (const s of this.subs) s.connectionLost();
    if (this.closing || this.closedFinal) return;
    if (this.options.reconnect === false) {
      this.end(err);
      return;
    }
    this.report(err);
    this.reconnecting ??= this.reconnectLoop().finally(() => {
      this.reconnecting = undefined;
    });
  }

  private async reconnectLoop(): Promise<void> {
    const r = typeof this.options.reconnect === "object" ? this.options.reconnect : {};
    const initial = r.initialDelayMs ?? 100;
    const maxDelay = r.maxDelayMs ?? 5_000;
    const maxAttempts = r.maxAttempts ?? 20;
    let last: PigeonError = transportError("the connection closed");
    for (let attempt = 0; attempt < maxAttempts; attempt++) {
      const delay = Math.min(maxDelay, initial * 2 ** attempt);
      await sleep(delay / 2 + Math.random() * (delay / 2));
      if (this.closing || this.closedFinal) return;
      try {
        const c = await this.dialConn();
        if (this.closing || this.closedFinal) {
          c.fail(closedError());
          return;
        }
        this.conn = c;
        for (const s of [...this.subs]) {
          // A refusal ends the subscription; a connection lost meanwhile
          // leaves it to the next reconnect.
          s.resume(c).catch((e: PigeonError) => {
            if (e.kind !== "transport") s.finish(e);
          });
        }
        this.options.onReconnect?.(this._contract!);
        this.flushPublishes();
        return;
      } catch (e) {
        last = e instanceof PigeonError ? e : transportError(String(e), e);
        // A refusal of the credential or the contract will not change by waiting.
        if (last.kind === "contract" || last.kind === "auth" || last.kind === "denial") break;
      }
    }
    this.end(new PigeonError(last.code, `cannot reconnect: ${last.message}`, last.details, last.status, { cause: last }));
  }

  private end(err: PigeonError): void {
    if (this.closedFinal) return;
    this.closedFinal = true;
    this.endError = err;
    if (this.pingTimer) clearInterval(this.pingTimer);
    this.failPublishes(err);
    for (const s of [...this.subs]) s.finish(err);
    this.report(err);
  }

  /** The connection to use: waits for a reconnect in progress. */
  private async ready(): Promise<Conn> {
    if (this.closing) throw closedError();
    if (this.closedFinal) throw this.endError ?? closedError();
    if (this.conn && !this.conn.closed) return this.conn;
    if (this.reconnecting) await this.reconnecting;
    if (this.closing) throw closedError();
    if (this.closedFinal) throw this.endError ?? closedError();
    if (this.conn && !this.conn.closed) return this.conn;
    throw transportError("not connected");
  }

  private async call(frame: Frame, timeoutMs?: number): Promise<Frame> {
    const c = await this.ready();
    return c.call(frame, timeoutMs);
  }

  // ---------- publish ----------

  /**
   * Admits one message through every gate: resolves to the decision
   * (`accepted`, or `duplicate` with the original message), rejects with the
   * gate's typed error. Many publishes may be in flight: they share frames.
   */
  async publish(message: Message): Promise<Decision> {
    if (this.closing) throw closedError();
    if (this.closedFinal) throw this.endError ?? closedError();
    if (!isObj(message)) throw new PigeonError("INVALID_ARGUMENT", "message must be an object");
    const max = this.options.maxPendingPublishes ?? 4096;
    while (this.pubInFlight >= max) {
      await new Promise<void>((r) => this.pubWaiters.push(r));
      if (this.closing) throw closedError();
      if (this.closedFinal) throw this.endError ?? closedError();
    }
    let json: string;
    try {
      json = JSON.stringify(message);
    } catch (e) {
      throw new PigeonError("INVALID_ARGUMENT", `message is not JSON: ${String(e)}`);
    }
    // JSON.stringify escapes a lone surrogate; the server refuses the whole
    // frame for it (INVALID_UTF8), so it is refused here, for this message alone.
    if (LONE_SURROGATE_ESCAPE.test(json)) throw new PigeonError("INVALID_UTF8", "the message holds a lone surrogate");
    // A frame over the server's limit would close the connection (1009).
    if (this.maxFrame > 0 && utf8Length(json) + 64 > this.maxFrame) {
      throw new PigeonError("PAYLOAD_TOO_LARGE", `the message is larger than the server's frame limit (${this.maxFrame} bytes)`);
    }
    this.pubInFlight++;
    return new Promise<Decision>((resolve, reject) => {
      const done = () => {
        this.pubInFlight--;
        this.pubWaiters.shift()?.();
      };
      this.pubQueue.push({
        json,
        resolve: (d) => {
          done();
          resolve(d);
        },
        reject: (e) => {
          done();
          reject(e);
        },
      });
      if (this.pubQueue.length === 1) queueMicrotask(() => this.flushPublishes());
    });
  }

  /** Publishes many messages; resolves to one settled result per message, in order. */
  publishAll(messages: Message[]): Promise<PromiseSettledResult<Decision>[]> {
    return Promise.allSettled(messages.map((m) => this.publish(m)));
  }

  private flushPublishes(): void {
    if (this.pubFrameBusy || this.pubQueue.length === 0) return;
    const c = this.conn;
    if (!c || c.closed) {
      if (!this.reconnecting) this.failPublishes(this.endError ?? transportError("not connected"));
      return;
    }
    // Up to 1000 messages, and no more bytes than the server reads in a frame.
    const limit = this.maxFrame > 0 ? this.maxFrame - 128 : Infinity;
    let n = 0;
    let bytes = 0;
    while (n < this.pubQueue.length && n < 1000) {
      const b = utf8Length(this.pubQueue[n]!.json) + 1;
      if (n > 0 && bytes + b > limit) break;
      bytes += b;
      n++;
    }
    const batch = this.pubQueue.splice(0, n);
    this.pubFrameBusy = true;
    const build =
      batch.length === 1
        ? (id: string) => `{"op":"publish","id":"${id}","message":${batch[0]!.json}}`
        : (id: string) => `{"op":"publish_batch","id":"${id}","messages":[${batch.map((q) => q.json).join(",")}]}`;
    c.callRaw(build, batch.length === 1 ? "publish" : "publish_batch")
      .then((f) => {
        if (batch.length === 1) {
          const a = answer(f, "decision", isDecision);
          batch[0]!.resolve({ status: a.status as Decision["status"], message: a.message as Message });
          return;
        }
        const a = answer(f, "decisions", (f) => Array.isArray(f.results) && f.results.length === batch.length);
        (a.results as unknown[]).forEach((r, i) => {
          if (isDecision(r)) {
            const d = r as Decision;
            batch[i]!.resolve({ status: d.status, message: d.message });
          } else if (isObj(r) && r.error) batch[i]!.reject(fromWire(r.error));
          else batch[i]!.reject(new PigeonError(ClientCodes.BAD_FRAME, "the server's decision has neither status nor error", {}));
        });
      })
      .catch((e: unknown) => {
        const err = e instanceof PigeonError ? e : transportError(String(e), e);
        if (err.code === ClientCodes.BAD_FRAME) this.report(err);
        for (const q of batch) q.reject(err);
      })
      .finally(() => {
        this.pubFrameBusy = false;
        this.flushPublishes();
      });
  }

  private failPublishes(err: PigeonError): void {
    for (const q of this.pubQueue.splice(0)) q.reject(err);
  }

  // ---------- request, pull, replay ----------

  /**
   * Publishes a request on a request/reply subject and resolves to the
   * reply. The server waits `timeout` ms (default 30 s) and then refuses
   * with REQUEST_TIMEOUT; the client gives up a little later on its own.
   */
  async request(message: Message, options: { timeout?: number } = {}): Promise<Message> {
    const frame: Frame = { op: "request", message };
    if (options.timeout !== undefined) frame.timeoutMs = options.timeout;
    const f = await this.call(frame, (options.timeout ?? 30_000) + 10_000);
    return answer(f, "reply", (f) => isObj(f.message)).message as Message;
  }

  /** Pulls up to `max` messages (leased on work-queue subjects: settle with ack/nack). */
  async receive(subject: string, options: { max?: number } = {}): Promise<Message[]> {
    const frame: Frame = { op: "receive", subject };
    if (options.max !== undefined) frame.max = options.max;
    return messages(await this.call(frame));
  }

  /** Acknowledges a received message. */
  async ack(subject: string, messageId: string): Promise<void> {
    answer(await this.call({ op: "ack", subject, messageId }), "ok", () => true);
  }

  /** Gives a received message back, due again after `delayMs` (default: the subject's backoff). */
  async nack(subject: string, messageId: string, options: { delayMs?: number } = {}): Promise<void> {
    const frame: Frame = { op: "nack", subject, messageId };
    if (options.delayMs !== undefined) frame.delayMs = options.delayMs;
    answer(await this.call(frame), "ok", () => true);
  }

  /** Returns retained messages of `subject` in sequence order. */
  async replay(subject: string, options: ReplayOptions = {}): Promise<Message[]> {
    return messages(await this.call({ op: "replay", subject, ...options }));
  }

  /** Application-level liveness check. */
  async ping(): Promise<void> {
    answer(await this.call({ op: "ping" }, this.options.pingTimeoutMs ?? 10_000), "pong", () => true);
  }

  /**
   * Negotiates a fresh contract on the same connection (for example after
   * CONTRACT_EXPIRED). Running subscriptions keep the contract they started under.
   */
  async renew(options: { ttl?: number } = {}): Promise<Contract> {
    const frame: Frame = { op: "negotiate", subjects: this.subjects };
    const ttl = options.ttl ?? this.options.ttl;
    if (ttl !== undefined) frame.ttlMs = ttl;
    const f = answer(await this.call(frame), "contract", (f) => isObj(f.contract));
    this._contract = f.contract as Contract;
    return this._contract;
  }

  /**
   * Replaces the connection now: dials again, negotiates a fresh contract,
   * resumes every subscription on the new connection (from its last
   * acknowledged position) and closes the old one. When dialing or
   * negotiating fails, the old connection is kept and the error thrown.
   */
  async reconnect(): Promise<Contract> {
    if (this.closing) throw closedError();
    if (this.closedFinal) throw this.endError ?? closedError();
    if (this.reconnecting) {
      await this.reconnecting;
      await this.ready();
      return this._contract!;
    }
    const c = await this.dialConn();
    if (this.closing || this.closedFinal) {
      c.fail(closedError());
      throw this.endError ?? closedError();
    }
    const old = this.conn;
    this.conn = c;
    old?.fail(transportError("the connection was replaced by reconnect()"));
    await Promise.all(
      [...this.subs].map(async (s) => {
        s.connectionLost();
        try {
          await s.resume(c);
        } catch (e) {
          s.finish(e instanceof PigeonError ? e : transportError(String(e), e));
        }
      }),
    );
    this.flushPublishes();
    return this._contract!;
  }

  // ---------- subscribe ----------

  /**
   * Starts push delivery of `subject` to `handler`. A handler that resolves
   * acks the delivery; one that throws nacks it (after {@link RetryAfter}'s
   * delay when it throws one). Resolves once the server confirmed the
   * subscription.
   */
  async subscribe(subject: string, handler: Handler, options: SubscribeOptions = {}): Promise<Subscription> {
    if (typeof handler !== "function") throw new PigeonError("INVALID_ARGUMENT", "handler must be a function");
    const c = await this.ready();
    const s = new Subscription(this, subject, handler, options);
    await s.subscribeOn(c, options.start);
    this.subs.add(s);
    return s;
  }

  /**
   * The async-iterator form of subscribe: yields each delivery; a delivery
   * is acked when the loop asks for the next one, and nacked when the loop
   * ends early (break or throw) while it is being worked on.
   */
  async stream(subject: string, options: SubscribeOptions = {}): Promise<AsyncIterableIterator<Delivery> & { subscription: Subscription }> {
    const buf: { d: Delivery; settle: (ok: boolean) => void }[] = [];
    let wake: (() => void) | undefined;
    let current: ((ok: boolean) => void) | undefined;
    const sub = await this.subscribe(
      subject,
      (_m, d) =>
        new Promise<void>((resolve, reject) => {
          buf.push({ d, settle: (ok) => (ok ? resolve() : reject(new Error("the consumer stopped"))) });
          wake?.();
        }),
      { ...options, maxInFlight: options.maxInFlight ?? 1 },
    );
    sub.done.catch(() => undefined).finally(() => wake?.());
    const it = {
      subscription: sub,
      [Symbol.asyncIterator]() {
        return it;
      },
      async next(): Promise<IteratorResult<Delivery>> {
        current?.(true);
        current = undefined;
        for (;;) {
          const x = buf.shift();
          if (x) {
            current = x.settle;
            return { value: x.d, done: false };
          }
          if (sub.finished) {
            if (sub.error) throw sub.error;
            return { value: undefined, done: true };
          }
          await new Promise<void>((r) => (wake = r));
          wake = undefined;
        }
      },
      async return(): Promise<IteratorResult<Delivery>> {
        current?.(false);
        current = undefined;
        await sub.unsubscribe();
        return { value: undefined, done: true };
      },
    };
    return it;
  }

  /** @internal */
  onDeliver(c: Conn, f: Frame): void {
    const s = typeof f.sub === "string" ? this.bySid.get(f.sub) : undefined;
    if (!isObj(f.message) || typeof f.attempt !== "number") {
      this.report(new PigeonError(ClientCodes.BAD_FRAME, "the server sent a deliver frame without a message or attempt", {}));
      return;
    }
    s?.enqueue(c, f.message as Message, f.attempt);
  }

  /** @internal */
  onDeliverBatch(c: Conn, f: Frame): void {
    const s = typeof f.sub === "string" ? this.bySid.get(f.sub) : undefined;
    if (!Array.isArray(f.deliveries)) {
      this.report(new PigeonError(ClientCodes.BAD_FRAME, "the server sent a deliver_batch frame without deliveries", {}));
      return;
    }
    for (const d of f.deliveries as unknown[]) {
      if (!isObj(d) || !isObj(d.message) || typeof d.attempt !== "number") {
        this.report(new PigeonError(ClientCodes.BAD_FRAME, "the server sent a malformed delivery", {}));
        continue;
      }
      s?.enqueue(c, d.message as Message, d.attempt);
    }
  }

  /** @internal */
  onUnsubscribed(_c: Conn, f: Frame): void {
    const s = typeof f.sub === "string" ? this.bySid.get(f.sub) : undefined;
    if (!s) return;
    const err = f.error ? fromWire(f.error) : new PigeonError("SESSION_CLOSED", "the server ended the subscription");
    // A server shutting down ends every subscription, then the connection:
    // the reconnect that follows resumes it (or ends it with the reason).
    if (err.code === "SHUTTING_DOWN" && this.options.reconnect !== false && !this.closing) return;
    s.finish(err);
  }

  /** @internal */
  bind(sid: string, s: Subscription | undefined, old?: string): void {
    if (old && this.bySid.get(old) === s) this.bySid.delete(old);
    if (s) this.bySid.set(sid, s);
    else this.bySid.delete(sid);
  }

  /** @internal */
  forget(s: Subscription): void {
    this.subs.delete(s);
    if (s.id && this.bySid.get(s.id) === s) this.bySid.delete(s.id);
  }

  /** @internal */
  send(c: Conn, frame: Frame): Promise<Frame> {
    return c.call(frame);
  }

  // ---------- close ----------

  /**
   * Closes the session: new calls fail at once with CLOSED; running handlers
   * finish (up to `timeoutMs`, default 10 s) and their acks are sent and
   * answered, the subscriptions end, then the connection closes with 1000.
   */
  async close(options: { timeoutMs?: number } = {}): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    if (this.pingTimer) clearInterval(this.pingTimer);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<void>((r) => (timer = setTimeout(r, options.timeoutMs ?? 10_000)));
    const c = this.conn;
    await Promise.race([Promise.all([...this.subs].map((s) => s.drain())), deadline]);
    if (c && !c.closed) {
      await Promise.race([
        Promise.all(
          [...this.subs].map((s) => (s.id ? c.call({ op: "unsubscribe", sub: s.id }).catch(() => undefined) : undefined)),
        ),
        deadline,
      ]);
    }
    clearTimeout(timer);
    for (const s of [...this.subs]) s.finish(undefined);
    this.failPublishes(closedError());
    this.closedFinal = true;
    this.conn = undefined;
    c?.fail(closedError());
  }
}

const LONE_SURROGATE_ESCAPE = /(?:^|[^\\])(?:\\\\)*\\ud[89a-f]/;

/** A first-in first-out queue with O(1) shift (Array.shift is O(n) on long arrays). */
class Fifo<T> {
  private items: (T | undefined)[] = [];
  private head = 0;
  push(x: T): void {
    this.items.push(x);
  }
  shift(): T | undefined {
    if (this.head >= this.items.length) return undefined;
    const x = this.items[this.head];
    this.items[this.head++] = undefined;
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return x;
  }
}

/** The UTF-8 length of s, without encoding it. */
function utf8Length(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x80) n += c >= 0x800 && (c < 0xd800 || c > 0xdfff) ? 2 : 1;
  }
  return n;
}

function messages(f: Frame): Message[] {
  return answer(f, "messages", (f) => Array.isArray(f.messages)).messages as Message[];
}

/**
 * A running subscription. `done` settles when it ends: resolves after
 * unsubscribe() or close(), rejects with the error that ended it otherwise
 * (CONTRACT_REVOKED, GRANT_REVOKED, a failed reconnect, …).
 */
export class Subscription {
  /** the server's id; changes on reconnect */
  id = "";
  finished = false;
  error: PigeonError | undefined;
  readonly done: Promise<void>;
  private resolveDone!: () => void;
  private rejectDone!: (e: PigeonError) => void;
  private readonly queue: { c: Conn; m: Message; attempt: number }[] = [];
  private running = 0;
  private readonly idle: (() => void)[] = [];
  private conn: Conn | undefined;
  private acks: string[] = [];
  private ackBusy: Promise<void> | undefined;
  // Resumption: the sequences handed and not yet acked, the highest acked.
  private readonly unacked = new Set<number>();
  private lastAcked = 0;
  private readonly maxInFlight: number;
  private stopping = false;

  constructor(
    private readonly session: Session,
    readonly subject: string,
    private readonly handler: Handler,
    private readonly options: SubscribeOptions,
  ) {
    this.maxInFlight = Math.max(1, options.maxInFlight ?? 1);
    this.done = new Promise<void>((res, rej) => {
      this.resolveDone = res;
      this.rejectDone = rej;
    });
    this.done.catch(() => undefined); // observed through done or error
  }

  /** @internal */
  async subscribeOn(c: Conn, start: Start | undefined): Promise<void> {
    const frame: Frame = { op: "subscribe", subject: this.subject, batch: true, window: this.options.window ?? Math.max(256, this.maxInFlight), maxInFlight: this.maxInFlight };
    if (this.options.selector) frame.selector = this.options.selector;
    if (this.options.filter) frame.filter = this.options.filter;
    if (this.options.group) frame.group = this.options.group;
    if (start !== undefined && start !== "new") frame.start = start;
    // The answer comes before the first deliver of the sub, but several
    // frames may be handled in one turn: the hook binds the sub id in the
    // reader, before the next frame, so no delivery finds it unknown.
    const bindNow = (f: Frame) => {
      if (f.op !== "subscribed" || typeof f.sub !== "string") return;
      const old = this.id;
      this.id = f.sub;
      this.conn = c;
      this.session.bind(this.id, this, old);
    };
    answer(await c.call(frame, undefined, bindNow), "subscribed", (f) => typeof f.sub === "string");
  }

  /** @internal resubscribes on a new connection from the last acknowledged position. */
  async resume(c: Conn): Promise<void> {
    if (this.finished) return;
    let start: Start | undefined = this.options.start;
    const lowest = this.unacked.size > 0 ? Math.min(...this.unacked) : 0;
    if (lowest > 0) start = { sequence: lowest };
    else if (this.lastAcked > 0) start = { sequence: this.lastAcked + 1 };
    this.unacked.clear();
    await this.subscribeOn(c, start);
  }

  /** @internal */
  connectionLost(): void {
    // Deliveries queued on the lost connection cannot be answered: drop them
    // (the server gives them back); acks gathered for it are moot.
    this.queue.length = 0;
    this.acks = [];
  }

  /** @internal */
  enqueue(c: Conn, m: Message, attempt: number): void {
    if (this.finished) return;
    if (typeof m.sequence === "number") this.unacked.add(m.sequence);
    this.queue.push({ c, m, attempt });
    this.pump();
  }

  private pump(): void {
    while (this.running < this.maxInFlight && this.queue.length > 0 && !this.finished && !this.stopping) {
      const d = this.queue.shift()!;
      this.running++;
      void this.run(d);
    }
  }

  private async run(d: { c: Conn; m: Message; attempt: number }): Promise<void> {
    let ok = true;
    let delayMs: number | undefined;
    try {
      await this.handler(d.m, { message: d.m, attempt: d.attempt, sub: this.id });
    } catch (e) {
      ok = false;
      if (e instanceof RetryAfter) delayMs = e.delayMs;
      else if (e && typeof (e as { retryAfterMs?: unknown }).retryAfterMs === "number") delayMs = (e as { retryAfterMs: number }).retryAfterMs;
    }
    const id = d.m.id;
    if (!d.c.closed && typeof id === "string" && this.id) {
      if (ok) {
        this.acks.push(id);
        if (typeof d.m.sequence === "number") {
          this.unacked.delete(d.m.sequence);
          this.lastAcked = Math.max(this.lastAcked, d.m.sequence);
        }
        this.flushAcks(d.c);
      } else {
        if (typeof d.m.sequence === "number") this.unacked.delete(d.m.sequence);
        const frame: Frame = { op: "nack", sub: this.id, messageId: id };
        if (delayMs !== undefined) frame.delayMs = Math.max(0, Math.round(delayMs));
        d.c.call(frame).catch((e: PigeonError) => this.ackFailed(e));
      }
    }
    this.running--;
    if (this.running === 0) for (const f of this.idle.splice(0)) f();
    this.pump();
  }

  private flushAcks(c: Conn): void {
    if (this.ackBusy || this.acks.length === 0 || c.closed) return;
    const ids = this.acks;
    this.acks = [];
    const frame: Frame = ids.length === 1 ? { op: "ack", sub: this.id, messageId: ids[0] } : { op: "ack", sub: this.id, messageIds: ids };
    this.ackBusy = c
      .call(frame)
      .then(
        () => undefined,
        (e: PigeonError) => this.ackFailed(e),
      )
      .finally(() => {
        this.ackBusy = undefined;
        this.flushAcks(c);
      });
  }

  private ackFailed(e: PigeonError): void {
    // ACK_NOT_ALLOWED: the delivery's ack wait passed and it went back; a
    // lost connection: the server gives it back. Either way it comes again.
    if (e.kind !== "transport" && e.code !== "ACK_NOT_ALLOWED") this.session.report(e);
  }

  /** @internal waits for running handlers and the acks they produced. */
  async drain(): Promise<void> {
    // Deliveries not yet started stay unanswered: the server gives them back.
    this.stopping = true;
    this.queue.length = 0;
    if (this.running > 0) await new Promise<void>((r) => this.idle.push(r));
    while (this.ackBusy || (this.acks.length > 0 && this.conn && !this.conn.closed)) {
      if (!this.ackBusy && this.conn) this.flushAcks(this.conn);
      await this.ackBusy;
    }
  }

  /** @internal ends the subscription with err (undefined: a normal end). */
  finish(err: PigeonError | undefined): void {
    if (this.finished) return;
    this.finished = true;
    this.error = err;
    this.queue.length = 0;
    this.session.forget(this);
    if (err) this.rejectDone(err);
    else this.resolveDone();
    for (const f of this.idle.splice(0)) f();
  }

  /** Stops deliveries, waits for running handlers and their acks, and ends the subscription. */
  async unsubscribe(): Promise<void> {
    if (this.finished) return;
    const c = this.conn;
    const sid = this.id;
    await this.drain();
    if (c && !c.closed && sid) {
      try {
        await c.call({ op: "unsubscribe", sub: sid });
      } catch (e) {
        if (!(e instanceof PigeonError) || e.kind !== "transport") throw e;
      }
    }
    this.finish(undefined);
  }
}
