/**
 * One WebSocket connection of a session: its socket and the calls in flight
 * on it, matched to their answers by frame id. Pushes (deliveries, ended
 * subscriptions) go to the owner.
 */
import { ClientCodes, fromWire, PigeonError, transportError } from "./errors.js";
import type { WebSocketLike } from "./socket.js";
import { markSpelledIntegers } from "./sigv.js";
import { markSpelledAttempts } from "./attempts.js";
import { duplicateMember, loneSurrogate } from "./jcs.js";
import { parseTime } from "./times.js";

/** What a connection reports to and routes through. */
export interface ConnOwner {
  report(e: PigeonError): void;
  /** ends connection c with err (a frame it cannot take): its calls fail, the session reconnects or ends */
  abort(c: Conn, err: PigeonError): void;
  onDeliver(c: Conn, f: Frame): void;
  onDeliverBatch(c: Conn, f: Frame): void;
  onUnsubscribed(c: Conn, f: Frame): void;
}

/** A frame as it travels. */
export type Frame = Record<string, unknown> & { op?: unknown; id?: unknown; re?: unknown };

interface PendingCall {
  resolve(f: Frame): void;
  reject(e: PigeonError): void;
  timer?: ReturnType<typeof setTimeout>;
  /** runs in the reader, before any later frame is handled */
  hook?: (f: Frame) => void;
}


/** The bound of a call that names none (SessionOptions.callTimeoutMs). */
export const DEFAULT_CALL_TIMEOUT_MS = 30_000;

/** The longest delay setTimeout and setInterval hold; a longer one fires at once. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * `ms` as a timer can hold it: a delay beyond MAX_TIMER_MS (~24.8 days),
 * which setTimeout and setInterval take as 1 ms, waits that long instead.
 */
export const timerMs = (ms: number): number => Math.min(ms, MAX_TIMER_MS);

/**
 * The most bytes a connection lets wait unsent in its socket by default
 * (ConnectOptions.maxBufferedBytes, 16 MiB: sixteen of the broker's largest
 * frames).
 */
export const DEFAULT_MAX_BUFFERED_BYTES = 16 << 20;

/** How many timed-out calls a connection remembers, to drop their late answers quietly. */
const MAX_ABANDONED = 1024;

export class Conn {
  private nextId = 1;
  readonly pending = new Map<string, PendingCall>();
  closed = false;
  closeError: PigeonError | undefined;
  sock!: WebSocketLike;
  /** server subscriptions on this connection the client has told to end (unsubscribe sent) */
  readonly ended = new Set<string>();
  /** unsubscribes in flight for server subscriptions the session does not own (Session.endOrphan) */
  orphanEnds = 0;
  /**
   * Ids of calls that timed out, oldest first, at most MAX_ABANDONED: their
   * answers may still come and are dropped quietly, not reported as frames
   * answering an unknown id.
   */
  private readonly abandoned = new Set<string>();

  /** the message of the socket's last error event (e.g. `ws` refusing a frame beyond maxPayload) */
  sockError: string | undefined;

  /**
   * @param callTimeoutMs the bound of a call given none of its own (0: none),
   * so that a server that never answers a call cannot hold it, and its entry
   * in `pending`, for ever
   * @param maxBufferedBytes the most bytes left unsent in the socket
   * before a call is refused (see room())
   * @param maxFrameBytes the largest frame read (checked here too, for a
   * WebSocket implementation that has no bound of its own)
   */
  constructor(
    private readonly session: ConnOwner,
    private readonly callTimeoutMs = DEFAULT_CALL_TIMEOUT_MS,
    private readonly maxBufferedBytes = DEFAULT_MAX_BUFFERED_BYTES,
    private readonly maxFrameBytes = Infinity,
  ) {}

  /**
   * Throws RATE_LIMITED when the socket already holds maxBufferedBytes
   * unsent: the server is not reading (with pings off nothing else would
   * notice), and every frame sent would stay in memory. A frame is always
   * taken while less is waiting, so the socket holds at most the bound and
   * one frame. A refused frame was never sent: its call fails at once and
   * may be made again; what the socket took is kept (its calls end with
   * their answer, their timeout or the connection).
   */
  private room(): void {
    const waiting = this.sock.bufferedAmount;
    if (typeof waiting === "number" && waiting >= this.maxBufferedBytes) {
      throw new PigeonError(
        "RATE_LIMITED",
        `the connection's send buffer is full (${waiting} bytes unsent, maxBufferedBytes ${this.maxBufferedBytes}): the server is not reading`,
        { bufferedBytes: waiting, maxBufferedBytes: this.maxBufferedBytes },
      );
    }
  }

  send(frame: Frame): void {
    if (this.closed) throw this.closeError ?? transportError("the connection is closed");
    this.room();
    this.sock.send(frameText(frame));
  }

  /** Sends frame and waits for its answer; `always` skips the send buffer's bound (a ping: tiny, and what finds a server that stopped reading). */
  call(frame: Frame, timeoutMs?: number, hook?: (f: Frame) => void, always = false): Promise<Frame> {
    return this.callRaw((id) => frameText({ ...frame, id }), String(frame.op), timeoutMs, hook, always);
  }

  /** Sends the frame text build(id) makes and waits for its answer. */
  callRaw(build: (id: string) => string, op: string, timeoutMs?: number, hook?: (f: Frame) => void, always = false): Promise<Frame> {
    if (this.closed) return Promise.reject(this.closeError ?? transportError("the connection is closed"));
    if (!always) {
      try {
        this.room();
      } catch (e) {
        return Promise.reject(e);
      }
    }
    const id = String(this.nextId++);
    const bound = timerMs(timeoutMs ?? this.callTimeoutMs);
    return new Promise<Frame>((resolve, reject) => {
      const p: PendingCall = { resolve, reject, hook };
      if (bound > 0) {
        p.timer = setTimeout(() => {
          this.pending.delete(id);
          this.abandon(id);
          reject(new PigeonError(ClientCodes.TIMEOUT, `no answer to ${op} within ${bound} ms`));
        }, bound);
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
    // A connection the session let go (failed, replaced) may still carry
    // frames the server sent before it saw the close: their calls have
    // failed already, and its deliveries cannot be answered any more.
    if (this.closed) return;
    // ws refuses a larger frame before buffering it (maxPayload); another
    // implementation has read it whole, but it goes no further. Its length
    // in UTF-16 units is at most its length in bytes.
    if (text.length > this.maxFrameBytes) {
      // A lost connection (kind "transport"): the session reconnects.
      this.session.abort(this, new PigeonError(ClientCodes.SESSION_CLOSED, `the server sent a frame larger than maxFrameBytes (${this.maxFrameBytes})`, { closeCode: 1009, maxFrameBytes: this.maxFrameBytes }));
      return;
    }
    try {
      this.handle(text);
    } catch (e) {
      // Nothing a frame holds may throw out of the socket's reader (which
      // would end the process): a field that cannot be turned into text
      // ({"toString": 1}), data nested too deep to serialize, …
      this.session.report(new PigeonError(ClientCodes.BAD_FRAME, `the server sent a frame the client cannot handle: ${errText(e)}`, {}, undefined, { cause: e }));
    }
  }

  private handle(text: string): void {
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
    // An object with two members of one name, at any depth (data
    // included): JSON.parse kept the last, another reader the first; the
    // server never sends one (it refuses them, DUPLICATE_KEY). The frame
    // is refused whole: the call it answers fails, when its "re" is there
    // once; otherwise it is reported, and a delivery in it is not handed
    // over (the server's ack wait gives it back).
    // A string holding a lone surrogate (an escape of one: "\ud800") is
    // refused the same way: the server never sends one (it refuses them,
    // INVALID_UTF8), and readers differ on what it is.
    const dup = duplicateMember(text);
    const lone = !dup && loneSurrogate(text);
    if (dup || lone) {
      const why = dup ? `the member ${JSON.stringify(dup.name)} twice in one object` : "a string holding a lone surrogate";
      const err = new PigeonError(ClientCodes.BAD_FRAME, `the server sent a frame with ${why}`, { op: typeof fr.op === "string" ? fr.op : undefined });
      const re = dup && dup.top && dup.name === "re" ? undefined : typeof fr.re === "string" || typeof fr.re === "number" ? String(fr.re) : undefined;
      const p = re === undefined ? undefined : this.pending.get(re);
      if (p && re !== undefined) {
        this.pending.delete(re);
        if (p.timer) clearTimeout(p.timer);
        p.reject(err);
      } else this.session.report(err);
      return;
    }
    // A signature's "v", a message's sequence or hops, spelled 2.0 or 2e0, its name escaped or not (two regular expression tests).
    markSpelledIntegers(text, fr);
    // A lease attempt spelled 1.0 or 1e0 (two regular expression tests).
    markSpelledAttempts(text, fr);
    if (fr.re !== undefined) {
      if (typeof fr.re !== "string" && typeof fr.re !== "number") {
        this.session.report(new PigeonError(ClientCodes.BAD_FRAME, "the server answered a frame id that is neither a string nor a number", {}));
        return;
      }
      const re = String(fr.re);
      const p = this.pending.get(re);
      if (!p && this.abandoned.delete(re)) return; // the late answer of a call that timed out
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

  private abandon(id: string): void {
    this.abandoned.add(id);
    if (this.abandoned.size > MAX_ABANDONED) {
      for (const old of this.abandoned) {
        this.abandoned.delete(old);
        break;
      }
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

/** The message of a thrown value, never throwing itself. */
export function errText(e: unknown): string {
  try {
    return e instanceof Error ? e.message : String(e);
  } catch {
    return "an unprintable value";
  }
}

export function answer(f: Frame, op: string, check: (f: Frame) => boolean): Frame {
  if (f.op !== op || !check(f)) {
    throw new PigeonError(ClientCodes.BAD_FRAME, `the server answered with an unexpected ${String(f.op)} frame`, { op: f.op });
  }
  return f;
}

export const isObj = (x: unknown): x is Record<string, unknown> => !!x && typeof x === "object" && !Array.isArray(x);
/** Absent, null or a string: a member the route may leave out. */
const isOptionalString = (x: unknown): boolean => x === undefined || x === null || typeof x === "string";
/** An object whose members `names` are strings. */
export const hasStrings = (x: unknown, ...names: string[]): x is Record<string, unknown> => isObj(x) && names.every((k) => typeof x[k] === "string");
/**
 * No time (absent, null or empty, as the Python client reads them), or an
 * RFC 3339 time as Go reads one (parseTime, times.ts). A contract's
 * issuedAt or expiresAt of any other value was taken as no time: the
 * session computed NaN from it and never renewed the contract, saying
 * nothing; and one Date.parse reads but Go does not ("Dec 5 2026",
 * "2026-12-05", a time without an offset, read as local time) was renewed
 * on another schedule than the Go client's.
 */
const isOptionalTime = (x: unknown): boolean => x === undefined || x === null || x === "" || !Number.isNaN(parseTime(x));
/**
 * A contract of the route's shape, as every answer that hands one over
 * (negotiate, renew, POST /v1/contracts, GET /v1/contracts/{id}) is
 * checked: an object with a string id, a principal and a region that are
 * strings when present, issuedAt and expiresAt times when present (RFC 3339
 * as Go reads it, see parseTime; absent, null or empty: no time), and subjects absent, null or a list of objects,
 * each with a string name and operations absent, null or a list of
 * strings; as the Python client's Contract.from_wire. Any other reached the
 * caller as a Contract of other types than its own (operations a string).
 */
export const isContract = (x: unknown): x is Record<string, unknown> =>
  hasStrings(x, "id") &&
  isOptionalString(x.principal) &&
  isOptionalString(x.region) &&
  isOptionalTime(x.issuedAt) &&
  isOptionalTime(x.expiresAt) &&
  (x.subjects === undefined ||
    x.subjects === null ||
    (Array.isArray(x.subjects) &&
      x.subjects.every((s) => hasStrings(s, "name") && (s.operations === undefined || s.operations === null || (Array.isArray(s.operations) && s.operations.every((o) => typeof o === "string"))))));

export function closedError(): PigeonError {
  return new PigeonError(ClientCodes.CLOSED, "the session is closed");
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, timerMs(ms)));

/** The UTF-8 length of s, without encoding it. */
export function utf8Length(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x80) n += c >= 0x800 && (c < 0xd800 || c > 0xdfff) ? 2 : 1;
  }
  return n;
}

/**
 * A frame's text, refused (INVALID_UTF8, nothing sent) when a string in it
 * holds a lone surrogate: JSON.stringify writes it as an escape ("\ud800"),
 * for which the server would refuse the whole frame.
 */
export function frameText(frame: unknown): string {
  const t = JSON.stringify(frame);
  if (loneSurrogate(t)) throw new PigeonError("INVALID_UTF8", "a string in the frame holds a lone surrogate, which is not Unicode text");
  return t;
}
