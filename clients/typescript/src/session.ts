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
 * `maxInFlight` at a time, and one message's handler once at a time (a
 * delivery of a message whose handler still runs waits for it; see
 * Subscription's pump); none starts once close() began. Their acks leave
 * in batches. When the connection
 * drops, every call waiting on it fails with a transport error
 * (SESSION_CLOSED, or SHUTTING_DOWN after the server said so), never hangs;
 * the session then reconnects with backoff, negotiates again and resumes its
 * subscriptions. A refusal to renegotiate ends the session with that error.
 * The contract is renewed in place before it expires (ConnectOptions.autoRenew).
 */
import { ClientCodes, escapeControls, finiteMs, fromWire, settleBody, isServerCode, PigeonError, retryDelayMs, transportError, refusedDelivery, unheldMessage, unansweringReply, heldMessages, attemptOf, pullAttempts } from "./errors.js";
import { dial, DEFAULT_MAX_FRAME_BYTES, WS_FRAME_TOO_LARGE, type DialOptions, type WebSocketConstructor } from "./socket.js";
import { answer, closedError, Conn, errText, DEFAULT_CALL_TIMEOUT_MS, DEFAULT_MAX_BUFFERED_BYTES, MAX_TIMER_MS, timerMs, type ConnOwner, isContract, isObj, sleep, utf8Length, type Frame } from "./conn.js";
import { callerSlot, checkSubscribeOptions, Subscription, UNANSWERED, type ReleaseReason, type Slot, type SlotHandler } from "./subscription.js";
import type { Contract, Decision, Message, Pulled, ReplayOptions, SettleOptions, Start } from "./types.js";
import { loneSurrogate } from "./jcs.js";
import { requestOf } from "./crypto.js";
import { parseTime } from "./times.js";
import { readDecision } from "./decision.js";

export { Subscription };

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
  /** handshake timeout, and the negotiation's after it (default 10 000 ms each) */
  connectTimeoutMs?: number;
  /**
   * how long a call waits for its answer when it has no bound of its own
   * (publish, subscribe, ack, nack, receive, replay, renew, unsubscribe; default
   * 30 000 ms; 0: for ever): it then fails with `TIMEOUT`. A publish that
   * timed out may still have been accepted: publish again with the same
   * idempotency key to learn its fate.
   */
  callTimeoutMs?: number;
  /**
   * the largest frame the session reads, in bytes (default 64 MiB,
   * DEFAULT_MAX_FRAME_BYTES: the broker's largest answers, a replay or
   * receive of its 16 MiB read budget, fit with room to spare). A larger
   * frame ends the connection as a lost one (SESSION_CLOSED, details
   * maxFrameBytes and closeCode 1009; the session then reconnects, or ends
   * when `reconnect` is false): the `ws` package refuses
   * it from its header, before buffering it; another WebSocket (a browser's)
   * has read it, and it goes no further.
   */
  maxFrameBytes?: number;
  /**
   * the most bytes a connection lets wait unsent in its socket (default
   * 16 MiB): beyond it, a call (publish, ack, receive, …) fails at once
   * with RATE_LIMITED instead of being buffered, for the server is not
   * reading; nothing already taken is dropped. Pings are always sent, so
   * that with pings on a server that stopped reading is found and the
   * connection dropped; with pings off this bound is what keeps the
   * client's memory.
   */
  maxBufferedBytes?: number;
  /**
   * errors that belong to no call: an unreadable frame, a lost connection, a
   * failed reconnect. Without a listener they are printed with
   * console.error, control characters (C0, DEL, C1, U+2028, U+2029) escaped
   * as \xNN or \uNNNN: a server's text cannot forge log lines or drive a terminal.
   */
  onError?: (err: PigeonError) => void;
  /** called after each successful reconnect with the new contract */
  onReconnect?: (contract: Contract) => void;
  /**
   * Renew the contract in place on its own (default true): shortly before it expires
   * (a tenth of its remaining life ahead, at least 5 s), the session sends `renew` (with
   * `ttl`), keeping the contract id and the subscriptions running under it.
   * A renewal that fails is tried again (after a quarter of the life left,
   * at most 5 s, at least 100 ms) until the contract expires, each failure
   * reported to onError; but a refusal the server would give again to every
   * renewal of that contract (CONTRACT_REVOKED, CONTRACT_EXPIRED,
   * CONTRACT_NOT_FOUND, CONTRACT_PRINCIPAL_MISMATCH, CONTRACT_STALE,
   * GRANT_REVOKED, UNAUTHENTICATED) is reported once and not tried again.
   * The server never takes a contract past the credential the connection
   * was opened with: once a renewal cannot move the expiry later, the
   * session stops renewing that contract. Every renewal of one contract the
   * session sends by itself, whatever became of the last, comes a floor
   * after the last at least: a quarter of the lifetime the contract was
   * negotiated for, between 100 ms and 1 s (the lower bound is a quarter of
   * `ttl` when that is shorter); the first always comes, and one the floor
   * puts past the expiry is not sent (reported once). Either way, a reconnect
   * negotiates a new contract, which is renewed again. `false`: the
   * contract expires after `ttl` unless {@link Session.renew} is called.
   */
  autoRenew?: boolean;
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
  /**
   * "explicit" (default): every delivery is acked or nacked. "none": at most
   * once, pub/sub only: the server counts a delivery done once it sent it,
   * so the client answers nothing (a handler that throws is not retried) and
   * nothing is redelivered. `window` then holds nothing back (no delivery
   * waits for an answer): `maxInFlight` still bounds the handlers running at
   * once, and the deliveries beyond wait queued in the client, at most
   * `MAX_QUEUED` (4096) of them and `MAX_QUEUED_BYTES` (64 MiB) of their
   * data: beyond either they are dropped rather than queued without
   * limit, counted in `Subscription.dropped` and reported to
   * onError as DELIVERIES_DROPPED at drop counts 1, 2, 4, 8, … (the same
   * bound holds for `stream`, whose loop takes the handler's place). A
   * reconnect resumes after the last message received. On a work-queue
   * subject the server refuses it (INVALID_ARGUMENT).
   */
  ack?: "explicit" | "none";
}

/** One delivery handed to a handler or an iterator. */
export interface Delivery {
  message: Message;
  /** counts deliveries of this message, from 1: an integer of 1 to MAX_ATTEMPT (2^31-1); a delivery with another is refused */
  attempt: number;
  /** the subscription's server id */
  sub: string;
}

/**
 * A handler: resolving acks the delivery, throwing nacks it (throw {@link RetryAfter} to set the delay).
 * On an `ack: "none"` subscription neither is sent.
 */
export type Handler = (message: Message, delivery: Delivery) => unknown | Promise<unknown>;


interface QueuedPublish {
  /** the message's JSON text, encoded when publish was called ("" once sent) */
  json: string;
  /** its length in UTF-8 */
  bytes: number;
  /** the JSON text of the data the server keeps for it, which a brief answer leaves out */
  data: string;
  resolve(d: Decision): void;
  reject(e: PigeonError): void;
}

/** One connection: its socket, its calls in flight. */

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
export class Session implements ConnOwner {
  private conn: Conn | undefined;
  private _contract: Contract | undefined;
  private maxFrame = 0;
  private closing = false;
  private closedFinal = false;
  private endError: PigeonError | undefined;
  private reconnecting: Promise<void> | undefined;
  // When the connection a reconnect made came up, and the backoff step that
  // reconnect had reached: a drop sooner than maxDelayMs after goes on from
  // there, so a server that accepts and drops at once is not dialled every
  // initialDelayMs forever.
  private upAt = 0;
  private backoffStep = 0;
  private readonly subs = new Set<Subscription>();
  private readonly bySid = new Map<string, Subscription>();
  private readonly pubQueue: QueuedPublish[] = [];
  private pubInFlight = 0;
  private pubFrameBusy = false;
  private readonly pubWaiters = new Fifo<() => void>();
  private pingTimer: ReturnType<typeof setInterval> | undefined;
  private renewTimer: ReturnType<typeof setTimeout> | undefined;
  // When the renewal loop last asked for a renewal (whatever became of it),
  // and of which contract: the next one of that contract waits the floor
  // (renewFloor) after it (see scheduleRenew). Set by the renewal loop
  // only, never from a server's answer.
  private triedAt = 0;
  private triedOf = "";
  // The lifetime the last negotiation granted (ms), measured from when it
  // was asked: what the floor is a quarter of. Never taken from renewals.
  private negotiatedLife = 0;
  /** the contract id whose "renewed for too short a time" was reported (once per contract) */
  private tooShortOf = "";
  private readonly errorListeners = new Set<(e: PigeonError) => void>();
  /** resolves once the first close() has closed the socket */
  private closeDone: Promise<void> = Promise.resolve();

  /** @internal use {@link connect} */
  // A #private field: console.log and util.inspect do not show it.
  readonly #token: string;
  private readonly callTimeoutMs: number;

  constructor(
    readonly url: string,
    token: string,
    readonly subjects: string[],
    private readonly options: ConnectOptions,
  ) {
    this.#token = token;
    this.callTimeoutMs = options.callTimeoutMs === undefined ? DEFAULT_CALL_TIMEOUT_MS : finiteMs("callTimeoutMs", options.callTimeoutMs);
    if (this.callTimeoutMs < 0) throw new PigeonError("INVALID_ARGUMENT", `callTimeoutMs must not be negative, not ${this.callTimeoutMs}`);
    if (!Array.isArray(subjects) || subjects.length === 0) throw new PigeonError("BAD_REQUEST", "at least one subject is required");
    checkConnectOptions(options);
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

  /**
   * @internal The most bytes a frame to the server may take: the maxFrame
   * of its contract answer, Infinity when it named none.
   */
  frameLimit(): number {
    return this.maxFrame > 0 ? this.maxFrame : Infinity;
  }

  /** @internal */
  report(e: PigeonError): void {
    if (this.errorListeners.size === 0) {
      // Never swallowed: without a listener the error goes to the console,
      // its control characters escaped (the code and message may be a
      // server's text: a newline would forge a log line, an ANSI escape
      // rewrite the terminal).
      console.error(`pigeon: ${escapeControls(String(e.code))}: ${escapeControls(String(e.message))}`);
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
    this.scheduleRenew();
  }

  private async dialConn(): Promise<Conn> {
    const maxFrame = this.options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
    const c = new Conn(this, this.callTimeoutMs, this.options.maxBufferedBytes ?? DEFAULT_MAX_BUFFERED_BYTES, maxFrame);
    const o: DialOptions = {
      maxFrameBytes: maxFrame,
      auth: this.options.auth,
      WebSocket: this.options.WebSocket,
      connectTimeoutMs: this.options.connectTimeoutMs,
      region: this.options.region,
    };
    c.sock = await dial(this.url, this.#token, o, {
      onText: (t) => c.onText(t),
      onBinary: () => this.report(new PigeonError(ClientCodes.BAD_FRAME, "the server sent a binary frame", {})),
      onClose: (code, reason) => this.onConnClosed(c, code, reason),
      onError: (message, code) => {
        c.sockError = message;
        // ws refused a frame beyond maxPayload: the connection ends now,
        // not when (or whether) the server answers ws's close frame.
        if (code === WS_FRAME_TOO_LARGE) this.abort(c, this.closeErrorOf(c, 1009, ""));
      },
    });
    try {
      const frame: Frame = { op: "negotiate", subjects: this.subjects };
      if (this.options.ttl !== undefined) frame.ttlMs = finiteMs("ttl", this.options.ttl);
      const asked = Date.now();
      // Bounded like the handshake: a server that upgrades and never answers
      // would otherwise hold connect() (or a reconnect) forever.
      const f = answer(await c.call(frame, this.options.connectTimeoutMs ?? 10_000), "contract", (f) => isContract(f.contract));
      // Lost as the contract arrived (in the same turn): not a connection
      // to keep, for the close that would start a reconnect has passed.
      if (c.closed) throw c.closeError ?? transportError("the connection closed as its contract arrived");
      this._contract = f.contract as Contract;
      this.maxFrame = typeof f.maxFrame === "number" ? f.maxFrame : 0;
      // The renewal floor is a quarter of what this negotiation granted.
      this.negotiatedLife = parseTime(this._contract.expiresAt) - asked;
      // A negotiated contract's first renewal always comes.
      this.triedOf = "";
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
      // Past the send buffer's bound too: a ping left unanswered is what
      // drops a connection whose server stopped reading.
      c.call({ op: "ping" }, this.options.pingTimeoutMs ?? 10_000, undefined, true).catch((e: PigeonError) => {
        if (e.code === ClientCodes.TIMEOUT && !c.closed) {
          this.report(transportError("the server did not answer a ping; dropping the connection"));
          c.fail(transportError("the server did not answer a ping"));
          this.onConnClosed(c, 1006, "ping timeout");
        }
      });
    }, timerMs(every));
    (this.pingTimer as { unref?: () => void }).unref?.();
  }

  /** @internal Ends connection c with err (a frame it cannot take), as a lost connection ends. */
  abort(c: Conn, err: PigeonError): void {
    if (c.closed) return;
    c.fail(err);
    this.onConnClosed(c, 1009, "", err);
  }

  /** The error a connection closed with `code` ends its calls with. */
  private closeErrorOf(c: Conn, code: number, reason: string): PigeonError {
    if (code === 1001) return new PigeonError("SHUTTING_DOWN", "the server is shutting down");
    if (code === 1009) {
      // Either side's frame limit: ws's maxPayload (its error event came
      // first), or the server's (a frame of the client's was too large).
      // A lost connection all the same (kind "transport"): calls fail, the
      // session reconnects, subscriptions resume.
      const max = this.options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
      const why = c.sockError ? `the server sent a frame larger than maxFrameBytes (${max}): ${c.sockError}` : "a frame was larger than the receiver's limit";
      return new PigeonError(ClientCodes.SESSION_CLOSED, `the connection closed (1009): ${why}`, { closeCode: 1009, maxFrameBytes: max });
    }
    if (code === 1008 && isServerCode(reason)) {
      // The server's refusal, as its code (UNAUTHENTICATED: the
      // credential refused when the server checked it again): the calls
      // waiting fail with it, as an error frame would fail them, and a
      // reconnect refused the same way ends the session with it.
      return new PigeonError(reason, `the server closed the connection (1008 ${reason})`, { closeCode: 1008 });
    }
    return transportError(`the connection closed (${code}${reason ? ` ${reason}` : ""})`);
  }

  private onConnClosed(c: Conn, code: number, reason: string, given?: PigeonError): void {
    const err = given ?? this.closeErrorOf(c, code, reason);
    c.fail(err);
    if (this.conn !== c) return;
    this.conn = undefined;
    // The reconnect negotiates a new contract, and schedules its renewal.
    this.cancelRenew();
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
    const from = Date.now() - this.upAt < maxDelay ? this.backoffStep : 0;
    for (let attempt = 0; attempt < maxAttempts; attempt++) {
      const delay = Math.min(maxDelay, initial * 2 ** Math.min(from + attempt, 30));
      await sleep(delay / 2 + Math.random() * (delay / 2));
      if (this.closing || this.closedFinal) return;
      try {
        const c = await this.dialConn();
        if (this.closing || this.closedFinal) {
          c.fail(closedError());
          return;
        }
        this.conn = c;
        this.upAt = Date.now();
        this.backoffStep = from + attempt + 1;
        this.scheduleRenew();
        for (const s of [...this.subs]) {
          // A refusal ends the subscription; a connection lost meanwhile
          // leaves it to the next reconnect.
          s.resume(c).catch((e: PigeonError) => {
            if (e.kind !== "transport") s.finish(e);
          });
        }
        this.flushPublishes();
        // The application's callback: its throw is its own, not a failed
        // reconnect (which would dial again over the live connection).
        try {
          this.options.onReconnect?.(this._contract!);
        } catch (e) {
          this.report(new PigeonError("INTERNAL", `onReconnect threw: ${errText(e)}`, {}, undefined, { cause: e }));
        }
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
    this.cancelRenew();
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
    let enc: Encoded;
    try {
      enc = encodeMessage(message);
    } catch (e) {
      if (e instanceof PigeonError) throw e;
      throw new PigeonError("INVALID_ARGUMENT", `message is not JSON: ${String(e)}`);
    }
    // A frame over the server's limit would close the connection (1009).
    if (this.maxFrame > 0 && enc.bytes + 64 > this.maxFrame) {
      throw new PigeonError("PAYLOAD_TOO_LARGE", `the message is larger than the server's frame limit (${this.maxFrame} bytes)`);
    }
    this.pubInFlight++;
    return new Promise<Decision>((resolve, reject) => {
      const done = () => {
        this.pubInFlight--;
        this.pubWaiters.shift()?.();
      };
      this.pubQueue.push({
        json: enc.json,
        bytes: enc.bytes,
        data: enc.data,
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
      const b = this.pubQueue[n]!.bytes + 1;
      if (n > 0 && bytes + b > limit) break;
      bytes += b;
      n++;
    }
    const batch = this.pubQueue.splice(0, n);
    this.pubFrameBusy = true;
    // Brief answers: an accepted message comes back without its data, which
    // is the data sent (put back by decided).
    const build =
      batch.length === 1
        ? (id: string) => `{"op":"publish","id":"${id}","brief":true,"message":${batch[0]!.json}}`
        : (id: string) => `{"op":"publish_batch","id":"${id}","brief":true,"messages":[${batch.map((q) => q.json).join(",")}]}`;
    const answered = c.callRaw(build, batch.length === 1 ? "publish" : "publish_batch");
    for (const q of batch) q.json = ""; // sent: only the data is kept until the answer
    answered
      .then((f) => {
        // Each decision is read as Go reads it (readDecision): one that
        // cannot be read fails its own publish, saying that the message may
        // have been accepted; in a batch the others resolve with their own.
        const settle = (q: QueuedPublish, d: Decision | PigeonError) => {
          if (d instanceof PigeonError) q.reject(d);
          else q.resolve(decided(d.status, d.message, q.data));
        };
        if (batch.length === 1) {
          const a = answer(f, "decision", () => true);
          settle(batch[0]!, readDecision({ status: a.status, message: a.message }));
          return;
        }
        const a = answer(f, "decisions", (f) => Array.isArray(f.results) && f.results.length === batch.length);
        (a.results as unknown[]).forEach((r, i) => settle(batch[i]!, readDecision(r, { index: i, of: batch.length })));
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
   * A reply whose sequence or hops the client cannot hold is refused,
   * BAD_FRAME (see unheldMessage); a reply has no sequence (it never
   * enters the subject's log). A request without an id, a signature
   * or an idempotency key is sent with an id drawn here (`message` itself
   * is not changed), and a reply that does not answer it (no
   * correlationId, or one naming another id) is refused, BAD_FRAME (see
   * unansweringReply).
   */
  async request(message: Message, options: { timeout?: number } = {}): Promise<Message> {
    const req = requestOf(message);
    const frame: Frame = { op: "request", message: req };
    if (options.timeout !== undefined) frame.timeoutMs = finiteMs("timeout", options.timeout);
    const f = await this.call(frame, (options.timeout ?? 30_000) + 10_000);
    const m = answer(f, "reply", (f) => isObj(f.message)).message as Message;
    const unheld = unheldMessage(m, "reply") ?? unansweringReply(req, m);
    if (unheld) throw unheld;
    return m;
  }

  /**
   * Pulls up to `max` messages (leased on work-queue subjects: settle with
   * ack/nack, passing the message received, whose lease attempt the ack or
   * nack sends back; see {@link Session.receiveAttempts}). A message whose
   * sequence or hops the client cannot hold, or an entry that is not a
   * message object, is left out, its BAD_FRAME to onError (see
   * heldMessages); so is one without a sequence, which the broker always
   * sends with a message of the log.
   */
  async receive(subject: string, options: { max?: number } = {}): Promise<Message[]> {
    return (await this.receiveAttempts(subject, options)).messages;
  }

  /**
   * {@link Session.receive}, with the attempt of each message's lease in
   * step with the messages (1 for its first delivery; 0 when not leased: a
   * pubsub subject, or a server that does not tell it). The client keeps it
   * with each message object it hands out ({@link Session.attemptOf}), and
   * ack and nack of that message send it: once its lease ran out and the
   * message was leased again, even to another session of the same
   * principal, the late answer settles nothing (ACK_NOT_ALLOWED) instead of
   * the newer lease. An answer whose `attempts` is not a list in step with
   * the messages is refused, BAD_FRAME; a message whose attempt is not an
   * integer of 1 to 2^31-1 (MAX_ATTEMPT) is left out, its BAD_FRAME to
   * onError, as one whose sequence is no broker's (see heldMessages).
   */
  async receiveAttempts(subject: string, options: { max?: number } = {}): Promise<Pulled> {
    const frame: Frame = { op: "receive", subject };
    if (options.max !== undefined) frame.max = options.max;
    const f = answer(await this.call(frame), "messages", (f) => Array.isArray(f.messages));
    const attempts = pullAttempts(f, "receive");
    const kept = heldMessages(f.messages as Message[], "receive", (e) => this.report(e), attempts);
    return { messages: kept, attempts: kept.map(attemptOf) };
  }

  /**
   * The lease attempt a receive answered `message` with (the message object
   * it handed out; see {@link Session.receiveAttempts}); 0 when not leased
   * or not handed out by a receive.
   */
  attemptOf(message: Message): number {
    return attemptOf(message);
  }

  /**
   * Acknowledges a received message: pass the message received (its id,
   * sequence and lease attempt are sent), or its id, with `sequence` the
   * message's sequence and `attempt` its lease's. With the sequence, a late
   * ack never settles a newer message published under the id once
   * retention trimmed the one received; with the attempt, never the newer
   * lease of the message (another session's of the same principal) once the
   * one received ran out: the server refuses it (ACK_NOT_ALLOWED). Without
   * them, it settles whichever message holds the id now, under whichever
   * lease the principal holds.
   */
  async ack(subject: string, message: string | Message, options: SettleOptions = {}): Promise<void> {
    answer(await this.call({ op: "ack", subject, ...settleBody(message, options.sequence, options.attempt) }), "ok", () => true);
  }

  /**
   * Gives a received message back, due again after `delayMs` (default: the
   * subject's backoff; at most 12 hours, the most the server takes: a
   * longer one is shortened to it); `message`, `sequence` and `attempt` as
   * for {@link Session.ack}: a late nack naming an older attempt hands
   * nothing out again.
   */
  async nack(subject: string, message: string | Message, options: SettleOptions & { delayMs?: number } = {}): Promise<void> {
    const frame: Frame = { op: "nack", subject, ...settleBody(message, options.sequence, options.attempt) };
    if (options.delayMs !== undefined) frame.delayMs = retryDelayMs(finiteMs("delayMs", options.delayMs));
    answer(await this.call(frame), "ok", () => true);
  }

  /**
   * Returns retained messages of `subject` in sequence order; one whose
   * sequence or hops the client cannot hold, or an entry that is not a
   * message object, is left out, its BAD_FRAME to onError (see
   * heldMessages).
   */
  async replay(subject: string, options: ReplayOptions = {}): Promise<Message[]> {
    return heldMessages(messages(await this.call({ op: "replay", subject, ...options })), "replay", (e) => this.report(e));
  }

  /** Application-level liveness check. */
  async ping(): Promise<void> {
    answer(await this.call({ op: "ping" }, this.options.pingTimeoutMs ?? 10_000), "pong", () => true);
  }

  /**
   * Renews the session's contract in place (the `renew` op): its expiry
   * moves to `ttl` ms from now (default: the session's `ttl`, else the
   * server's default lifetime), and it keeps its id, subjects and
   * operations, so the subscriptions running under it go on and nothing is
   * negotiated or subscribed again. Resolves to the renewed contract, which
   * becomes {@link Session.contract}. The server never takes a contract past
   * the credential the connection was opened with, nor shortens it: a
   * renewal that cannot extend it resolves to the same expiry (automatic
   * renewal stops for a contract when its renewal gets that answer). Refusals reject with the
   * server's typed error: CONTRACT_EXPIRED (an expired contract is not
   * brought back: {@link Session.reconnect} negotiates a new one),
   * CONTRACT_REVOKED, GRANT_REVOKED, CONTRACT_STALE, UNAUTHENTICATED,
   * RATE_LIMITED (renewals count toward the negotiation rate),
   * INVALID_ARGUMENT (`ttl` out of range). The session renews by itself
   * unless connected with `autoRenew: false`.
   */
  async renew(options: { ttl?: number } = {}): Promise<Contract> {
    return this.renewOn(await this.ready(), options.ttl ?? this.options.ttl);
  }

  /**
   * Sends `renew` on c and takes the answer as the session's contract when
   * it is still the contract in force there and the answer moves its
   * expiry later; then schedules the next automatic renewal from it.
   */
  private async renewOn(c: Conn, ttl: number | undefined): Promise<Contract> {
    const frame: Frame = { op: "renew" };
    if (ttl !== undefined) frame.ttlMs = finiteMs("ttl", ttl);
    const f = answer(await c.call(frame), "contract", (f) => isContract(f.contract));
    const k = f.contract as Contract;
    const cur = this._contract;
    // Replaced meanwhile (the new one has its own schedule), or an answer
    // overtaken by a later renewal: the contract in force stays.
    if (this.conn !== c || !cur || cur.id !== k.id || !(parseTime(k.expiresAt) > parseTime(cur.expiresAt))) return k;
    this._contract = k;
    if (typeof f.maxFrame === "number") this.maxFrame = f.maxFrame;
    this.scheduleRenew();
    return k;
  }

  /**
   * Schedules the automatic renewal of the contract in force: renewLead()
   * before its expiry, or after `delayMs` (a retry), and in either case the
   * floor (renewFloor) after the last renewal of that contract the loop sent
   * at least. Replaces any renewal scheduled before; nothing when autoRenew
   * is off, the session is closing, or the contract has expired. The timer
   * never keeps the process alive.
   */
  private scheduleRenew(delayMs?: number): void {
    this.cancelRenew();
    if (this.options.autoRenew === false || this.closing || this.closedFinal) return;
    const k = this._contract;
    const c = this.conn;
    if (!k || !c) return;
    const exp = parseTime(k.expiresAt);
    const now = Date.now();
    const left = exp - now;
    if (!(left > 0)) {
      // A renewal answered with a contract already expired (a few
      // milliseconds granted, the answer read late on a busy machine) is
      // too short to renew again, as one the floor puts past its expiry.
      if (k.id === this.triedOf) this.reportTooShort(k, delayMs !== undefined);
      return;
    }
    let due = now + (delayMs ?? left - renewLead(left));
    if (k.id === this.triedOf) {
      // Every renewal of one contract the loop sends, retries included, is
      // the floor after the last at least: a server that grants a few
      // milliseconds each time, or fails renewals at once, cannot make the
      // session renew every few milliseconds. The first always comes. One
      // the floor puts at or past the expiry does not come (reported once).
      const floor = this.triedAt + this.renewFloor();
      if (floor >= exp) {
        this.reportTooShort(k, delayMs !== undefined);
        return;
      }
      due = Math.max(due, floor);
    }
    this.armRenew(c, k, exp, due);
  }

  /** The floor of the automatic renewals of the contract in force (see renewFloor). */
  private renewFloor(): number {
    return renewFloor(this.negotiatedLife, this.options.ttl);
  }

  /**
   * Reports, once per contract, that it will not be renewed again before it
   * expires: its renewals are too short, or (`retry`) the last failed with
   * no time left for the floor.
   */
  private reportTooShort(k: Contract, retry: boolean): void {
    if (this.tooShortOf === k.id) return;
    this.tooShortOf = k.id;
    const why = retry
      ? "renewing the contract failed, with no time left to try again before it expires"
      : "the server renews the contract for too short a time to renew it again before it expires";
    this.report(
      new PigeonError("CONTRACT_EXPIRED", `${why}; it ends at its expiry (${k.expiresAt}) unless reconnect() replaces it`, {
        contract: k.id,
        expiresAt: k.expiresAt,
        floorMs: this.renewFloor(),
      }),
    );
  }

  /** Arms the renewal timer for `due` (ms since the epoch), in steps a timer can hold (at most 2^31−1 ms). */
  private armRenew(c: Conn, k: Contract, exp: number, due: number): void {
    const t = setTimeout(() => {
      if (due - Date.now() > 0) this.armRenew(c, k, exp, due);
      else void this.autoRenew(c, k, exp);
    }, Math.min(Math.max(due - Date.now(), 0), MAX_TIMER_MS));
    (t as { unref?: () => void }).unref?.();
    this.renewTimer = t;
  }

  private cancelRenew(): void {
    if (this.renewTimer !== undefined) clearTimeout(this.renewTimer);
    this.renewTimer = undefined;
  }

  /** A scheduled renewal of contract k (expiring at exp) on c. */
  private async autoRenew(c: Conn, k: Contract, exp: number): Promise<void> {
    this.renewTimer = undefined;
    // Renewed or replaced meanwhile (its own schedule is set), or over.
    const current = () => !this.closing && !this.closedFinal && this.conn === c && !c.closed && this._contract?.id === k.id && parseTime(this._contract.expiresAt) === exp;
    if (!current() || Date.now() >= exp) return;
    const ttl = this.options.ttl;
    this.triedAt = Date.now();
    this.triedOf = k.id;
    try {
      const got = await this.renewOn(c, ttl);
      if (!current()) return; // renewed: renewOn scheduled the next one
      if (got.id !== k.id) {
        // Not an answer about this contract (a broken or hostile server):
        // a failed renewal, tried again, as the Go client does; taken for
        // an expiry that did not move, it stopped the renewals for good.
        throw new PigeonError(ClientCodes.BAD_FRAME, `the server answered the renewal of ${k.id} with another contract (${JSON.stringify(got.id)})`);
      }
      // The expiry did not move. With a ttl shorter than the life left (an
      // explicit renew() with a longer one), try again when less is left;
      // otherwise it is the credential's end: stop renewing this contract.
      if (ttl !== undefined && Date.now() + ttl <= exp) this.scheduleRenew();
    } catch (e) {
      if (!current()) return;
      const left = exp - Date.now();
      const err = e instanceof PigeonError ? e : transportError(String(e), e);
      if (left <= 0) {
        this.report(new PigeonError(err.code, `renewing the contract failed; it has expired: ${err.message}`, err.details, err.status, { cause: err }));
        return;
      }
      if (FINAL_RENEWAL_REFUSALS.has(err.code)) {
        this.report(new PigeonError(err.code, `renewing the contract failed; renewal stopped (it would be refused again): ${err.message}`, err.details, err.status, { cause: err }));
        return;
      }
      this.report(new PigeonError(err.code, `renewing the contract failed; trying again: ${err.message}`, err.details, err.status, { cause: err }));
      this.scheduleRenew(Math.max(Math.min(left / 4, 5_000), 100));
    }
  }

  /**
   * Replaces the connection now: dials again, negotiates a fresh contract,
   * resumes every subscription on the new connection (from the lowest
   * sequence received and not yet handled successfully, else after the
   * highest acked, else at the `from` of its latest subscribed answer, else
   * at its original start: see Subscription) and closes the old one. When
   * dialing or negotiating fails, the old connection is kept and the error
   * thrown.
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
    this.scheduleRenew();
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
   * delay when it throws one); with `ack: "none"` nothing is answered.
   * Resolves once the server confirmed the subscription; rejects with the
   * server's typed error (e.g. INVALID_ARGUMENT for `ack: "none"` on a
   * work-queue subject).
   */
  async subscribe(subject: string, handler: Handler, options: SubscribeOptions = {}): Promise<Subscription> {
    if (typeof handler !== "function") throw new PigeonError("INVALID_ARGUMENT", "handler must be a function");
    // The caller's handler sees the message and the delivery, never the internal slot.
    return this.startSubscription(subject, (m, d) => handler(m, d), options);
  }

  /** Subscribes; onRelease is in place before the first delivery can arrive. */
  private async startSubscription(
    subject: string,
    handler: SlotHandler,
    options: SubscribeOptions,
    onRelease?: (reason: ReleaseReason) => void,
  ): Promise<Subscription> {
    checkSubscribeOptions(options);
    const c = await this.ready();
    const s = new Subscription(this, subject, handler, options);
    s.onRelease = onRelease;
    await s.subscribeOn(c, options.start);
    this.subs.add(s);
    return s;
  }

  /**
   * The async-iterator form of subscribe: yields each delivery; a delivery
   * is acked when the loop asks for the next one, and nacked when the loop
   * ends early (break, return or throw, or the iterator's `return()` or
   * `throw(err)`) while it is being worked on (with `ack: "none"`, neither).
   *
   * Up to `maxInFlight` deliveries (default 1) are taken from the
   * subscription ahead of the loop, counting the one the loop works on. When
   * the loop ends early, the iterator's `return()` unsubscribes at once: the
   * deliveries taken ahead but never yielded are left unanswered, so the
   * unsubscribe gives them back to the server without spending an attempt
   * (on a work-queue subject another consumer gets them at once), as the
   * queued deliveries of a handler are (docs/protocol.md "unsubscribe"); with
   * `ack: "none"` they are dropped. `throw(err)` does the same and then
   * rejects with err (the delivery being worked on is nacked with err's
   * {@link RetryAfter} delay when it is one).
   *
   * When the subscription ends without the loop, the loop ends too, and the
   * deliveries taken ahead are let go the same way: after `unsubscribe()` or
   * the session's `close()`, `next()` resolves `done`; when the
   * subscription fails (CONTRACT_REVOKED, a failed reconnect, …), `next()`
   * rejects with that error. A lost connection that the session recovers
   * from does not end the loop: an acknowledged subscription's deliveries
   * taken ahead on the lost connection are let go (they cannot be acked any
   * more: the resumed subscription delivers them again); at-most-once ones
   * are still yielded.
   *
   * `unsubscribe()` and `close()` do not wait for the loop (its body may be
   * the one awaiting them): they resolve once everything else is done, the
   * delivery the loop holds is answered at its next step (acked when it
   * moves on, nacked when it leaves), and the subscription ends (and, for
   * close, the connection closes, at the latest at its timeout) right after.
   * `next()` may be called again before the last call resolved: each call
   * gets a delivery of its own (or the end), and a call acks every delivery
   * handed out before it.
   */
  async stream(subject: string, options: SubscribeOptions = {}): Promise<AsyncIterableIterator<Delivery> & { subscription: Subscription }> {
    type Settle = (how: "ack" | "nack" | "unanswered", err?: unknown) => void;
    type Taken = { d: Delivery; settle: Settle; slot: Slot };
    // The deliveries taken ahead of the loop; each holds one of the
    // subscription's maxInFlight handler slots until it is settled.
    const buf: Taken[] = [];
    // Those handed to the loop and not yet answered: the one it works on
    // (more only when next() is called again before the last call resolved).
    const held: Taken[] = [];
    // Every next() waiting for a delivery or the end (a manual user may
    // call next() again before the last call resolved).
    const waiters: (() => void)[] = [];
    const wake = () => {
      for (const w of waiters.splice(0)) w();
    };
    // Once the subscription stops or ends, nothing more is taken ahead.
    let stopped = false;
    const release = (reason: ReleaseReason) => {
      if (reason !== "lost") stopped = true;
      for (const x of buf.splice(0)) x.settle("unanswered");
      wake();
    };
    const sub = await this.startSubscription(
      subject,
      (_m, d, slot) => {
        if (stopped) return UNANSWERED;
        return new Promise<unknown>((resolve, reject) => {
          buf.push({
            d,
            slot,
            settle: (how, err) => {
              if (how === "ack") resolve(undefined);
              else if (how === "unanswered") resolve(UNANSWERED);
              else reject(err ?? new Error("the consumer stopped"));
            },
          });
          wake();
        });
      },
      { ...options, maxInFlight: options.maxInFlight ?? 1 },
      release,
    );
    const answerHeld = (how: "ack" | "nack", err?: unknown) => {
      for (const x of held.splice(0)) x.settle(how, err);
    };
    /** Ends the subscription early: the deliveries the loop holds are nacked, those taken ahead are let go. */
    const stop = async (err?: unknown) => {
      answerHeld("nack", err);
      await sub.unsubscribe();
    };
    const it = {
      subscription: sub,
      [Symbol.asyncIterator]() {
        return it;
      },
      async next(): Promise<IteratorResult<Delivery>> {
        // Asking for the next one: what the loop held is done.
        answerHeld("ack");
        for (;;) {
          const x = buf.shift();
          if (x) {
            x.slot.loop = true;
            held.push(x);
            return { value: x.d, done: false };
          }
          if (sub.finished) {
            if (sub.error) throw sub.error;
            return { value: undefined, done: true };
          }
          await new Promise<void>((r) => waiters.push(r));
        }
      },
      async return(): Promise<IteratorResult<Delivery>> {
        await stop();
        return { value: undefined, done: true };
      },
      async throw(err?: unknown): Promise<IteratorResult<Delivery>> {
        await stop(err);
        throw err;
      },
    };
    return it;
  }

  /** @internal */
  onDeliver(c: Conn, f: Frame): void {
    const s = typeof f.sub === "string" ? this.bySid.get(f.sub) : undefined;
    // Each report of a refused delivery names the op (and in a batch the
    // entry's index), as the Python client's does.
    if (!isObj(f.message)) {
      this.report(new PigeonError(ClientCodes.BAD_FRAME, "the server sent a deliver frame without a message", { op: "deliver" }));
      return;
    }
    const refused = refusedDelivery(f.message, f.attempt, { op: "deliver" });
    if (refused) {
      this.report(refused);
      return;
    }
    if (s) s.enqueue(c, f.message as Message, f.attempt as number);
    else if (typeof f.sub === "string") this.endOrphan(c, f.sub, true);
  }

  /** @internal */
  onDeliverBatch(c: Conn, f: Frame): void {
    const s = typeof f.sub === "string" ? this.bySid.get(f.sub) : undefined;
    if (!Array.isArray(f.deliveries)) {
      this.report(new PigeonError(ClientCodes.BAD_FRAME, "the server sent a deliver_batch frame without deliveries", { op: "deliver_batch" }));
      return;
    }
    if (!s) {
      if (typeof f.sub === "string") this.endOrphan(c, f.sub, true);
      return;
    }
    for (const [index, d] of (f.deliveries as unknown[]).entries()) {
      if (!isObj(d) || !isObj(d.message)) {
        this.report(new PigeonError(ClientCodes.BAD_FRAME, `the server sent a malformed delivery (deliver_batch entry ${index})`, { op: "deliver_batch", index }));
        continue;
      }
      const refused = refusedDelivery(d.message, d.attempt, { op: "deliver_batch", index });
      if (refused) {
        this.report(refused);
        continue;
      }
      s.enqueue(c, d.message as Message, d.attempt as number);
    }
  }

  /**
   * @internal Ends a server subscription on c that no subscription of this
   * session owns (one that ended while its resubscription was on its way):
   * its deliveries are never answered, so it would hold them until their
   * ack wait. Sent once per id; deliveries on the wire for a subscription
   * already told to end are left alone (the unsubscribe gives them back).
   */
  endOrphan(c: Conn, sid: string, bounded = false): void {
    if (c.closed || c.ended.has(sid)) return;
    // A server (or anything writing on the connection) may name any number
    // of subscriptions this session never opened: at most MAX_ORPHAN_ENDS
    // of their unsubscribes are in flight, each forgotten once answered, so
    // they cost no memory without end (as in the Go client). A subscribe
    // answered after its subscription ended is always ended.
    if (bounded && c.orphanEnds >= MAX_ORPHAN_ENDS) return;
    c.ended.add(sid);
    c.orphanEnds++;
    c.call({ op: "unsubscribe", sub: sid }, ORPHAN_END_TIMEOUT_MS)
      .catch(() => undefined)
      .finally(() => {
        c.orphanEnds--;
        // The server sends no deliver of it after its answer.
        c.ended.delete(sid);
      });
  }

  /** @internal */
  onUnsubscribed(c: Conn, f: Frame): void {
    const s = typeof f.sub === "string" ? this.bySid.get(f.sub) : undefined;
    // Not remembered for a subscription this session does not own: the
    // server could name ever new ones.
    if (!s) return;
    c.ended.add(f.sub as string); // ended by the server: nothing to tell it
    const err = f.error ? fromWire(f.error) : new PigeonError("SESSION_CLOSED", "the server ended the subscription");
    // A server shutting down ends every subscription, then the connection:
    // the reconnect that follows resumes it (or ends it with the reason).
    if (err.code === "SHUTTING_DOWN" && this.options.reconnect !== false && !this.closing) return;
    s.finish(err);
  }

  /** @internal Whether sid is the id of a subscription other than s that c carries. */
  heldByAnother(c: Conn, sid: string, s: Subscription): boolean {
    const other = this.bySid.get(sid);
    return other !== undefined && other !== s && other.carriedBy(c);
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
   * Closes the session: new calls fail at once with CLOSED; deliveries not
   * yet handed over are let go (the server gives them back); running
   * handlers finish (up to `timeoutMs`, default 10 s) and their acks are
   * sent and answered, the subscriptions end, then the connection closes
   * with 1000.
   *
   * Like unsubscribe(), it never waits for the delivery its caller works
   * on: called from a handler (told by its async context, on Node 20.16+),
   * or while a stream's loop holds a delivery (the loop body may be the
   * caller), it resolves once everything else is done, and the rest
   * follows in the background: that handler's return (or the loop's next
   * step) answers its delivery, then the subscriptions end and the
   * connection closes (at the latest at `timeoutMs`).
   */
  async close(options: { timeoutMs?: number } = {}): Promise<void> {
    if (this.closing) {
      // A second close waits as the first does: for everything but its own
      // delivery (or a stream loop's), then for the end, unless that waits
      // for the caller.
      const own = callerSlot();
      const subs = [...this.subs];
      await Promise.race([Promise.all(subs.map((s) => s.settledExcept(own))), this.closeDone]);
      if (subs.some((s) => s.holdsExempt(own))) return;
      await this.closeDone;
      return;
    }
    this.closing = true;
    let closed!: () => void;
    this.closeDone = new Promise<void>((r) => (closed = r));
    if (this.pingTimer) clearInterval(this.pingTimer);
    this.cancelRenew();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<void>((r) => (timer = setTimeout(r, timerMs(options.timeoutMs ?? 10_000))));
    const c = this.conn;
    const own = callerSlot();
    const subs = [...this.subs];
    for (const s of subs) s.stop();
    await Promise.race([Promise.all(subs.map((s) => s.settledExcept(own))), deadline]);
    const rest = async () => {
      await Promise.race([Promise.all(subs.map((s) => s.idle())), deadline]);
      if (c && !c.closed) {
        await Promise.race([
          Promise.all(
            [...this.subs].map((s) => {
              // Not twice: an unsubscribe() under way has sent its own.
              if (!s.id || c.ended.has(s.id)) return undefined;
              c.ended.add(s.id);
              return c.call({ op: "unsubscribe", sub: s.id }).catch(() => undefined);
            }),
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
      closed();
    };
    // The caller's own delivery, or a stream loop's, is answered only once
    // the caller returns or the loop moves on: waiting for it could wait
    // until the deadline (or, for a handler awaiting close(), forever).
    if (subs.some((s) => s.holdsExempt(own))) {
      void rest();
      return;
    }
    await rest();
  }
}

/**
 * Refuses (INVALID_ARGUMENT) options that would misbehave rather than fail:
 * maxPendingPublishes 0 makes every publish wait for ever, a NaN ping
 * interval pings every millisecond, a reconnect delay of 0 redials a server
 * that drops each connection in a hot loop, a NaN timeout fires at once.
 */
function checkConnectOptions(o: ConnectOptions): void {
  const ms = (name: string, v: number | undefined, min: number) => {
    if (v === undefined) return;
    finiteMs(name, v);
    if (v < min) throw new PigeonError("INVALID_ARGUMENT", `${name} must be at least ${min}, not ${v}`);
  };
  if (o.ttl !== undefined) finiteMs("ttl", o.ttl);
  ms("pingIntervalMs", o.pingIntervalMs, 0);
  ms("pingTimeoutMs", o.pingTimeoutMs, 1);
  ms("connectTimeoutMs", o.connectTimeoutMs, 1);
  for (const [name, v] of [["maxFrameBytes", o.maxFrameBytes], ["maxBufferedBytes", o.maxBufferedBytes]] as const) {
    if (v !== undefined && !(Number.isSafeInteger(v) && v >= 1)) throw new PigeonError("INVALID_ARGUMENT", `${name} must be a positive integer of bytes, not ${String(v)}`);
  }
  const p = o.maxPendingPublishes;
  if (p !== undefined && !(Number.isSafeInteger(p) && p >= 1)) throw new PigeonError("INVALID_ARGUMENT", `maxPendingPublishes must be a positive integer, not ${String(p)}`);
  if (o.reconnect && typeof o.reconnect === "object") {
    const r = o.reconnect;
    ms("reconnect.initialDelayMs", r.initialDelayMs, 1);
    ms("reconnect.maxDelayMs", r.maxDelayMs, 1);
    const n = r.maxAttempts;
    if (n !== undefined && !(n === Infinity || (Number.isSafeInteger(n) && n >= 0))) throw new PigeonError("INVALID_ARGUMENT", `reconnect.maxAttempts must be a non-negative integer or Infinity, not ${String(n)}`);
  }
}

/** A message encoded for a publish frame. */
interface Encoded {
  /** its JSON text */
  json: string;
  /** the length of json in UTF-8 */
  bytes: number;
  /** the JSON text of the data the server keeps for it: its data, or {} when it has none */
  data: string;
}

/**
 * Encodes a message for a publish frame. Its data is serialized once and
 * written last; the rest is JSON.stringify's text. Member names are sent
 * as given: the server refuses a member whose name differs from a field's
 * only in case ("Data"), ENVELOPE_INVALID, for this message alone.
 * JSON.stringify escapes a lone surrogate, for which the server would
 * refuse the whole frame (INVALID_UTF8): it is refused here, for this
 * message alone. The checks run on the parts, before the text is put
 * together.
 */
function encodeMessage(message: Message): Encoded {
  const toJSON = (message as { toJSON?: unknown }).toJSON;
  const m: unknown = typeof toJSON === "function" ? toJSON.call(message, "") : message;
  let head: string;
  let data: string | undefined;
  if (!isObj(m)) {
    head = JSON.stringify(m);
  } else {
    let rest: Record<string, unknown> = m;
    if (Object.hasOwn(m, "data")) {
      let value: unknown;
      ({ data: value, ...rest } = m);
      data = JSON.stringify(value); // undefined for undefined, a function, a symbol: no data
    }
    head = JSON.stringify(rest);
  }
  if (loneSurrogate(head) || (data !== undefined && loneSurrogate(data))) {
    throw new PigeonError("INVALID_UTF8", "the message holds a lone surrogate");
  }
  if (data === undefined) return { json: head, bytes: utf8Length(head), data: "{}" };
  const bytes = utf8Length(head) + 8 + utf8Length(data);
  if (head === "{}") return { json: `{"data":${data}}`, bytes: bytes - 1, data };
  return { json: `${head.slice(0, -1)},"data":${data}}`, bytes, data };
}

/**
 * The decision on a publish that asked for a brief answer: an accepted
 * message without data gets the data sent, parsed from the text sent (a
 * value of its own, not the caller's). A server that answers in full (one
 * that ignores brief, or a duplicate, whose data is the original's) keeps
 * its data.
 */
function decided(status: Decision["status"], message: Message, data: string): Decision {
  if (status === "accepted" && !Object.hasOwn(message, "data")) message.data = JSON.parse(data);
  return { status, message };
}

/**
 * The most unsubscribes a connection has in flight for subscriptions that
 * deliveries name and the session does not own (the Go client's bound):
 * beyond it such deliveries are left unanswered, for the server's ack wait.
 */
export const MAX_ORPHAN_ENDS = 64;

/** How long an orphan's unsubscribe waits for its answer before it is forgotten. */
const ORPHAN_END_TIMEOUT_MS = 10_000;

/**
 * The refusals of a renewal that the server gives again to every later
 * renewal of the same contract (revoked, expired, unknown, another
 * principal's, stale after a policy change, its grant revoked, the
 * credential expired). On one of these the automatic renewal of that
 * contract stops instead of trying again: each try would be audited as
 * `contract.denied` and count toward the principal's negotiation rate. Every
 * other failure (RATE_LIMITED, INTERNAL, a timeout, a lost connection, …)
 * is tried again.
 */
const FINAL_RENEWAL_REFUSALS: ReadonlySet<string> = new Set([
  "CONTRACT_REVOKED",
  "CONTRACT_EXPIRED",
  "CONTRACT_NOT_FOUND",
  "CONTRACT_PRINCIPAL_MISMATCH",
  "CONTRACT_STALE",
  "GRANT_REVOKED",
  "UNAUTHENTICATED",
]);

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

function messages(f: Frame): Message[] {
  return answer(f, "messages", (f) => Array.isArray(f.messages)).messages as Message[];
}

/**
 * How long before a contract's expiry a session renews it, for `left` ms of
 * remaining life: a tenth of it, but at least 5 s (half of it for less than
 * 10 s), so that a short contract leaves room for a slow answer.
 */
export function renewLead(left: number): number {
  return Math.max(left / 10, Math.min(left / 2, 5_000));
}

/**
 * The least time between two renewals of one contract that the session
 * sends by itself (retries included), as in the Go client: a quarter of
 * the lifetime the last negotiation granted (`life`, ms, measured from when
 * it was asked), or of the lifetime the session asks for (`ttl`) when that
 * is shorter, so that each is renewed (at half its life) before it expires,
 * within [MIN_RENEW_FLOOR_MS, MAX_RENEW_FLOOR_MS]. The lower bound is a
 * quarter of `ttl` when that is shorter: the session's own choice. Never
 * taken from renewals: a server that grants ever shorter renewals, or fails
 * them at once, cannot drive the session faster than one renewal per
 * MIN_RENEW_FLOOR_MS.
 */
export function renewFloor(life: number, ttl: number | undefined): number {
  if (!(life > 0)) life = 0;
  let lower = MIN_RENEW_FLOOR_MS;
  if (ttl !== undefined && ttl > 0) {
    life = Math.min(life, ttl);
    lower = Math.min(lower, ttl / 4);
  }
  return Math.min(MAX_RENEW_FLOOR_MS, Math.max(lower, life / 4));
}

/** The largest floor between two automatic renewals of one contract (of contracts granted 4 s or more). */
export const MAX_RENEW_FLOOR_MS = 1_000;

/** The least floor between two automatic renewals of one contract, unless the session's own `ttl` asks for less. */
export const MIN_RENEW_FLOOR_MS = 100;
