/**
 * A running subscription of a WebSocket session: its handlers (at most
 * maxInFlight at once), its acks (gathered into one frame while the previous
 * one is answered) and the position it resumes from after a reconnect.
 *
 * Resuming (an acknowledged subscription on a pub/sub subject): the server
 * keeps a cursor per subscription and redelivers a nacked or unanswered
 * delivery only on that same subscription, so after a lost connection
 * whatever the resumed subscription does not ask for again is never
 * delivered again. The client therefore keeps the set of sequences it was
 * handed and has not yet handled successfully. A handler's success (the
 * ack) removes its sequence and raises the highest-acked mark, once the ack
 * is queued: an ack the server refuses or never answers does not put it
 * back (the handler succeeded; kept, the lowest sequence would make the
 * resume deliver again every message after it, and a redelivery the
 * server sends while the connection lives adds it again); a failure
 * (nack) keeps it in the set (while the connection lives the server
 * redelivers it, and a redelivery that succeeds removes it); so does a
 * success that can no longer be acked (its connection is gone). On resume
 * the subscription starts from the lowest sequence in the set if any, else
 * after the highest acked, else at the `from` of its latest `subscribed`
 * answer (the first sequence the server subscription delivers: where its
 * start stood when it subscribed, so that what was published while the
 * connection was down is not skipped), else at its original start (a server
 * that does not name `from`); then the set is cleared (the resumed
 * subscription's deliveries add to it again, and its `subscribed` answer
 * names the next `from`). A `from` below the sequence a resume asked for
 * means the subject was numbered anew (the broker lost its store): the
 * highest acked is forgotten, so the next resume continues in the new
 * numbering rather than ask for the old position again. The set holds at most {@link MAX_OUTSTANDING}
 * sequences: when full, the lowest quarter is forgotten.
 * Deliveries still queued in the client from the lost connection are
 * dropped, not run: the resumed subscription delivers them again. A
 * duplicate after a resume is allowed (at least once); a skipped one is not.
 * At most once (`ack: "none"`), a resume starts after the last message
 * received, else at `from`, else at the original start. A work-queue or
 * request/reply subscription names no `from`: its group keeps its place.
 */
import { ClientCodes, PigeonError, RetryAfter, retryDelayMs } from "./errors.js";
import { answer, closedError, utf8Length, type Conn, type Frame } from "./conn.js";
import type { Message, Start } from "./types.js";
import type { Delivery, Session, SubscribeOptions } from "./session.js";

/**
 * The most deliveries of an `ack: "none"` subscription queued in the client,
 * waiting for a handler (or for the loop of a stream). The server does not
 * flow-control such a subscription (nothing is answered, so the window holds
 * nothing back): beyond this bound, or beyond {@link MAX_QUEUED_BYTES} of
 * their data, the client drops deliveries, as at most once allows, rather
 * than queue them without limit. Drops are counted in
 * {@link Subscription.dropped} and reported to onError as DELIVERIES_DROPPED
 * at drop counts 1, 2, 4, 8, … An acknowledged subscription is bounded by
 * its window: deliveries beyond it waiting in the client (a server that
 * ignores the window) are left unanswered, for the server's ack wait to
 * give back, and reported to onError as BAD_FRAME at counts 1, 2, 4, …
 */
export const MAX_QUEUED = 4096;

/**
 * The most data, in bytes, of the deliveries of an `ack: "none"`
 * subscription queued in the client (64 MiB): a delivery that would take the
 * queued data past it is dropped as one beyond {@link MAX_QUEUED} is, so
 * that a stuck handler cannot make the client hold gigabytes of large
 * messages. One delivery of any size is queued when none is. A delivery's
 * size is the UTF-8 length of its data as JSON text: the client keeps no
 * frame text, so it is the data serialized again (JSON.stringify, compact),
 * which may differ by a few bytes from the text the server sent (escapes,
 * number forms). It is measured only for a delivery that has to wait (a
 * free handler takes the others at once).
 */
export const MAX_QUEUED_BYTES = 64 << 20;

/**
 * @internal The most sequences an acknowledged subscription remembers to
 * resume from (see the file's comment), as the Go client: when the set
 * holds this many, the lowest quarter is forgotten before another is added.
 * Only failures the server stopped redelivering (exhausted) stay that long,
 * and those are in its quarantine or audit already; without the bound, a
 * handler that keeps failing on such a subject would grow the set for as
 * long as the client runs.
 */
export const MAX_OUTSTANDING = 1 << 16;

/**
 * @internal The sequences of a subscription handed over and not yet handled
 * successfully, at most {@link MAX_OUTSTANDING} of them: a resume starts
 * from the lowest.
 */
export class Outstanding {
  private readonly seqs = new Set<number>();

  get size(): number {
    return this.seqs.size;
  }

  /** Notes that seq was handed over; a full set forgets its lowest quarter first. */
  add(seq: number): void {
    if (this.seqs.size >= MAX_OUTSTANDING) {
      const sorted = [...this.seqs].sort((a, b) => a - b);
      for (const s of sorted.slice(0, sorted.length >> 2)) this.seqs.delete(s);
    }
    this.seqs.add(seq);
  }

  delete(seq: number): void {
    this.seqs.delete(seq);
  }

  /** The lowest sequence held; 0 when none is. */
  lowest(): number {
    let lowest = 0;
    for (const s of this.seqs) if (lowest === 0 || s < lowest) lowest = s;
    return lowest;
  }

  /** Empties the set and returns what it held. */
  take(): number[] {
    const taken = [...this.seqs];
    this.seqs.clear();
    return taken;
  }
}

/** A delivery waiting for a handler: size is its data's (see MAX_QUEUED_BYTES), 0 when not counted. */
interface Queued {
  c: Conn;
  m: Message;
  attempt: number;
  size: number;
}

/**
 * The sequence of a delivered message as a position to resume from: a
 * positive safe integer, else none. JSON.parse rounds a sequence beyond
 * 2^53 and reads 1e400 as Infinity (sent back as null); a negative or
 * fractional one would hide the lowest unhandled sequence from a resume.
 * A server never sends one: such a message is still handed over, but not
 * counted for resuming.
 */
export function position(m: Message): number | undefined {
  const s = m.sequence;
  return typeof s === "number" && Number.isSafeInteger(s) && s > 0 ? s : undefined;
}

/**
 * The message m is, for running its handler once at a time: its id and
 * sequence (undefined without a string id). A message id names one
 * message at a time only: a later message published under it once
 * retention trimmed the first (a higher sequence) is another, whose
 * handler need not wait for the old one's (each answer names its own
 * sequence, and the server settles the two apart).
 */
function runKey(m: Message): string | undefined {
  return typeof m.id === "string" ? `${position(m) ?? ""}:${m.id}` : undefined;
}

/** What an ack frame takes besides its sub and ids: its op, id and field names. */
const ACK_FRAME_BASE = 256;

/**
 * At most what an ack of message id adds to an ack frame, in bytes: the id
 * as JSON.stringify writes it (a printable ASCII character one byte, a
 * quote or a backslash two, any other character at most six), its quotes
 * and comma, and its sequence in `sequences`.
 */
function ackCost(id: string): number {
  return (/^[\x20\x21\x23-\x5b\x5d-\x7e]*$/.test(id) ? id.length : 6 * id.length) + 32;
}

/**
 * The subscribe options a server accepts (docs/protocol.md: maxInFlight and
 * window 1 to 10000; start.sequence a position), refused here before
 * anything is sent: a window of 0 (the server's default) would leave every
 * delivery unanswered in the client, a NaN one (sent as null) would bound
 * nothing, a NaN maxInFlight would run no handler. maxInFlight 0 (or
 * absent) is the default, 1.
 */
export function checkSubscribeOptions(o: SubscribeOptions): void {
  const bad = (what: string, v: unknown) => new PigeonError("INVALID_ARGUMENT", `${what} must be an integer from 1 to 10000, not ${String(v)}`);
  if (o.maxInFlight !== undefined && o.maxInFlight !== 0 && !(Number.isInteger(o.maxInFlight) && o.maxInFlight >= 1 && o.maxInFlight <= 10_000)) throw bad("maxInFlight", o.maxInFlight);
  if (o.window !== undefined && !(Number.isInteger(o.window) && o.window >= 1 && o.window <= 10_000)) throw bad("window", o.window);
  const st = o.start as unknown;
  if (st !== undefined && st !== "new" && st !== "first") {
    const seq = st && typeof st === "object" ? (st as { sequence?: unknown }).sequence : undefined;
    if (!(Number.isSafeInteger(seq) && (seq as number) >= 0)) {
      throw new PigeonError("INVALID_ARGUMENT", `start must be "new", "first" or {sequence: N}, N a non-negative safe integer, not ${JSON.stringify(st) ?? String(st)}`);
    }
  }
}

/** The size of m's data counted against MAX_QUEUED_BYTES: the UTF-8 length of its JSON text. */
function dataSize(m: Message): number {
  const t = JSON.stringify(m.data); // undefined when there is none
  return t === undefined ? 0 : utf8Length(t);
}

/**
 * @internal What a handler resolves to (or throws) to leave its delivery
 * unanswered: neither acked nor nacked. The stream form settles the
 * deliveries its loop never took with it when the subscription stops or
 * loses its connection: like a delivery still queued, the unsubscribe that
 * follows (or the lost connection) gives it back to the server.
 */
export const UNANSWERED: unique symbol = Symbol("pigeon.unanswered");

/**
 * @internal Why a subscription lets go of the deliveries waiting in a
 * stream's buffer: "stopping" (unsubscribe or close began), "finished" (it
 * ended, with or without an error), "lost" (an acknowledged subscription's
 * connection closed: they cannot be answered any more).
 */
export type ReleaseReason = "stopping" | "finished" | "lost";

/**
 * @internal One delivery being worked on: a handler call, or a delivery a
 * stream took ahead of its loop or handed to it. It counts as running until
 * the handler returns (for a stream: until the loop moves on or leaves).
 */
export interface Slot {
  readonly sub: Subscription;
  /** the handler returned; its answer is on its way */
  done: boolean;
  /**
   * a stream's loop holds it: it is answered at the loop's next step, which
   * unsubscribe() and close() do not wait for (the loop body may be the one
   * calling them); the subscription ends right after that answer
   */
  loop: boolean;
}

/** The part of Node's AsyncLocalStorage used here. */
interface SlotStorage {
  run<R>(store: Slot, fn: () => R): R;
  getStore(): Slot | undefined;
}

/**
 * Tells which handler call an unsubscribe() or close() comes from, through
 * its async context: Node's AsyncLocalStorage (process.getBuiltinModule,
 * Node 20.16+; other runtimes that provide it). Undefined where there is
 * none (browsers): there a handler cannot be told from any other caller.
 */
const slotStorage: SlotStorage | undefined = (() => {
  try {
    const p = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process;
    const m = p?.getBuiltinModule?.("node:async_hooks") as { AsyncLocalStorage?: new () => SlotStorage } | undefined;
    return m?.AsyncLocalStorage ? new m.AsyncLocalStorage() : undefined;
  } catch {
    return undefined;
  }
})();

/**
 * @internal The handler call whose async context the caller runs in, if
 * its handler has not returned yet: a handler (or what it awaits) calling
 * unsubscribe() or close().
 */
export function callerSlot(): Slot | undefined {
  const s = slotStorage?.getStore();
  return s && !s.done ? s : undefined;
}

/** @internal The internal form of a handler: the stream form needs the delivery's slot. */
export type SlotHandler = (message: Message, delivery: Delivery, slot: Slot) => unknown;

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
  private readonly queue: Queued[] = [];
  /** the size of the data queue holds (ack "none"; see MAX_QUEUED_BYTES) */
  private queuedBytes = 0;
  private running = 0;
  /** the messages (runKey) whose handler runs (see pump: a message runs once at a time) */
  private readonly runningIds = new Set<string>();
  /**
   * deliveries of a message whose handler was running when their turn
   * came, by message (runKey), in arrival order: each waits for that
   * handler to return (see pump); counted with the queue against its bounds
   */
  private readonly parked = new Map<string, Queued[]>();
  private parkedCount = 0;
  /** deliveries waiting in the client: queued, or parked behind a run of their message */
  private get waiting(): number {
    return this.queue.length + this.parkedCount;
  }
  /** the deliveries being worked on (running of them) */
  private readonly slots = new Set<Slot>();
  /** woken when a slot finishes or the subscription stops or ends */
  private readonly waiters: (() => void)[] = [];
  private conn: Conn | undefined;
  /** a resubscription in flight (reconnect): the id it binds is the one to end */
  private resuming: Promise<void> | undefined;
  // Acks gathered while the previous ack frame is answered: each id with
  // the sequence of the delivery it answers (0: none known).
  private acks: { id: string; seq: number }[] = [];
  private ackBusy: Promise<void> | undefined;
  // Resumption (see the file's comment): the sequences received and not yet
  // handled successfully (a nack keeps its sequence), the highest acked (at
  // most once: the highest received, and no set).
  private readonly unacked = new Outstanding();
  private lastAcked = 0;
  /** the `from` of the latest subscribed answer (pub/sub); 0: not named */
  private from = 0;
  private readonly maxInFlight: number;
  private stopping = false;
  private droppedCount = 0;
  /** deliveries of an acknowledged subscription that came beyond its window (left unanswered) */
  private overflowCount = 0;
  /** the window asked of the server: deliveries it may have unanswered */
  private get window(): number {
    return this.options.window ?? Math.max(256, this.maxInFlight);
  }
  /**
   * @internal Called when deliveries handed to the handler but not yet
   * worked on must be let go (the stream form's buffer); see ReleaseReason.
   */
  onRelease: ((reason: ReleaseReason) => void) | undefined;

  constructor(
    private readonly session: Session,
    readonly subject: string,
    private readonly handler: SlotHandler,
    private readonly options: SubscribeOptions,
  ) {
    this.maxInFlight = Math.max(1, options.maxInFlight ?? 1);
    this.done = new Promise<void>((res, rej) => {
      this.resolveDone = res;
      this.rejectDone = rej;
    });
    this.done.catch(() => undefined); // observed through done or error
  }

  /**
   * How many deliveries of an `ack: "none"` subscription were dropped because
   * {@link MAX_QUEUED} were already waiting, or their data would have taken
   * the queue past {@link MAX_QUEUED_BYTES} (0 for an acknowledged one).
   */
  get dropped(): number {
    return this.droppedCount;
  }

  /** @internal */
  async subscribeOn(c: Conn, start: Start | undefined): Promise<void> {
    const frame: Frame = { op: "subscribe", subject: this.subject, batch: true, window: this.window, maxInFlight: this.maxInFlight };
    if (this.options.selector) frame.selector = this.options.selector;
    if (this.options.filter) frame.filter = this.options.filter;
    if (this.options.group) frame.group = this.options.group;
    if (start !== undefined && start !== "new") frame.start = start;
    // Sent whenever given, so the server refuses a value it does not know.
    if (this.options.ack !== undefined) frame.ack = this.options.ack;
    // The answer comes before the first deliver of the sub, but several
    // frames may be handled in one turn: the hook binds the sub id in the
    // reader, before the next frame, so no delivery finds it unknown.
    let taken = false;
    const bindNow = (f: Frame) => {
      if (f.op !== "subscribed" || typeof f.sub !== "string") return;
      if (this.session.heldByAnother(c, f.sub, this)) {
        // The id of another live subscription of this connection: bound,
        // its deliveries would come here (and it would end with this one).
        // Refused; nothing is ended on the server (the id is the other's).
        taken = true;
        return;
      }
      if (this.finished || this.session.closed) {
        // Ended (or the session closed) while this subscribe was on its
        // way: end what it started; nothing of it is handed to the handler.
        this.session.endOrphan(c, f.sub);
        return;
      }
      const old = this.id;
      this.id = f.sub;
      // A missing from (a work queue, an older server) keeps the last one.
      if (Number.isSafeInteger(f.from) && (f.from as number) > 0) {
        this.from = f.from as number;
        // The server starts before the sequence asked for: the subject was
        // numbered anew (the broker lost its store), and what this
        // subscription handled counts for nothing on it.
        if (typeof start === "object" && this.from < start.sequence) this.lastAcked = 0;
      }
      this.conn = c;
      this.session.bind(this.id, this, old);
    };
    const ans = await c.call(frame, undefined, bindNow);
    if (this.session.closed) {
      // close() began while the subscribe was on its way: it was never
      // bound (see bindNow), and it ends here.
      this.finish(undefined);
      throw closedError();
    }
    if (taken) {
      throw new PigeonError(ClientCodes.BAD_FRAME, `the server gave subscription id ${JSON.stringify(ans.sub)} to a second subscription`, { op: ans.op });
    }
    answer(ans, "subscribed", (f) => typeof f.sub === "string");
  }

  /** @internal Whether this subscription is live on c. */
  carriedBy(c: Conn): boolean {
    return this.conn === c && !this.finished;
  }

  /**
   * @internal Resubscribes on a new connection: from the lowest sequence
   * received and not yet handled successfully, else after the highest
   * acked, else at the `from` of the latest subscribed answer, else at the
   * original start (see the file's comment). The set is cleared before the
   * subscribe leaves (the new deliveries may follow its answer at once) and
   * given back when the subscribe fails, so that the next resume still
   * starts there.
   */
  async resume(c: Conn): Promise<void> {
    // A subscription being unsubscribed is not started again: what it had
    // on the lost connection went back with it, and its end has nothing
    // more to wait for there.
    if (this.finished || this.stopping) return;
    let start: Start | undefined = this.from > 0 ? { sequence: this.from } : this.options.start;
    const lowest = this.unacked.lowest();
    if (lowest > 0) start = { sequence: lowest };
    else if (this.lastAcked > 0) start = { sequence: this.lastAcked + 1 };
    const kept = this.unacked.take();
    const p = this.subscribeOn(c, start);
    this.resuming = p.then(
      () => undefined,
      () => undefined,
    );
    try {
      await p;
    } catch (e) {
      for (const s of kept) this.unacked.add(s);
      throw e;
    }
  }

  /** @internal */
  connectionLost(): void {
    // Deliveries queued on the lost connection cannot be answered: drop them
    // (their sequences stay in unacked: the resume asks for them again);
    // acks gathered for it are moot. At most once, they were done when the
    // server sent them: they still run.
    if (this.options.ack !== "none") {
      this.clearQueue();
      this.onRelease?.("lost");
    }
    this.acks = [];
  }

  /** @internal */
  enqueue(c: Conn, m: Message, attempt: number): void {
    // While stopping (or once the session's close() began), a delivery
    // stays unanswered: the server gives it back.
    if (this.finished || this.stopping || this.session.closed) return;
    // A delivery on a connection this subscription has left (a server that
    // numbers subscriptions per connection may name the same id on both)
    // cannot be answered: the resumed subscription delivers it again.
    if (c !== this.conn || c.closed) return;
    // At most once, a reconnect resumes after the last message received: one
    // received is never handed over again.
    if (this.options.ack !== "none" && this.waiting >= this.window) {
      // More deliveries waiting than the window the client asked for, which
      // a server that keeps the window never sends: left unanswered, for the
      // server's ack wait to give back, rather than queued without end (as
      // the Go client does). Reported at counts 1, 2, 4, …
      const n = ++this.overflowCount;
      if ((n & (n - 1)) === 0) {
        this.session.report(
          new PigeonError(
            ClientCodes.BAD_FRAME,
            `deliveries of ${this.subject} beyond the subscription's window (${this.window}) left unanswered (${n} so far)`,
            { subject: this.subject, window: this.window, count: n },
          ),
        );
      }
      return;
    }
    const seq = position(m);
    if (seq !== undefined && this.options.ack === "none") this.lastAcked = Math.max(this.lastAcked, seq);
    else if (seq !== undefined) this.unacked.add(seq);
    let size = 0;
    // At most once, a delivery that has to wait is bounded in number and
    // in data; one a free handler takes at once is not counted.
    if (this.options.ack === "none" && (this.waiting > 0 || this.running >= this.maxInFlight)) {
      size = dataSize(m);
      if (this.waiting > 0 && (this.waiting >= MAX_QUEUED || this.queuedBytes + size > MAX_QUEUED_BYTES)) {
        this.drop();
        return;
      }
      this.queuedBytes += size;
    }
    this.queue.push({ c, m, attempt, size });
    this.pump();
  }

  /** An at-most-once delivery that finds the queue full: dropped, counted, reported at 1, 2, 4, … */
  private drop(): void {
    const n = ++this.droppedCount;
    if ((n & (n - 1)) !== 0) return; // a slow handler does not flood onError
    this.session.report(
      new PigeonError(
        ClientCodes.DELIVERIES_DROPPED,
        `at-most-once deliveries of ${this.subject} dropped: the handler does not keep up (${n} so far; at most ${MAX_QUEUED} deliveries and ${MAX_QUEUED_BYTES >> 20} MiB of data wait queued)`,
        { subject: this.subject, dropped: n, maxQueued: MAX_QUEUED, maxQueuedBytes: MAX_QUEUED_BYTES },
      ),
    );
  }

  /** Lets go of the deliveries queued (none is handed over). */
  private clearQueue(): void {
    this.queue.length = 0;
    this.parked.clear();
    this.parkedCount = 0;
    this.queuedBytes = 0;
  }

  /**
   * Hands queued deliveries to the handler, at most maxInFlight at once;
   * none once the subscription stops, ends, or the session's close()
   * began.
   *
   * A message's handler runs once at a time. A delivery of a message
   * whose handler is still running on this subscription (a server that
   * delivered it again, its ack wait passed, or the resumed subscription
   * after a lost connection while the handler of the lost one still runs)
   * is parked until that handler returns, then runs (at least once: the
   * handler sees the message again, in turn, never concurrently), answered
   * on its own connection; an ack the server no longer expects
   * (ACK_NOT_ALLOWED) is dropped quietly. Parked deliveries count against
   * the window (or, at most once, MAX_QUEUED and MAX_QUEUED_BYTES) like
   * queued ones, and are let go with them.
   */
  private pump(): void {
    while (this.running < this.maxInFlight && this.queue.length > 0 && !this.finished && !this.stopping && !this.session.closed) {
      const d = this.queue.shift()!;
      const key = runKey(d.m);
      if (key !== undefined) {
        if (this.runningIds.has(key)) {
          this.park(key, d); // its size stays counted
          continue;
        }
        this.runningIds.add(key);
      }
      this.queuedBytes -= d.size;
      this.running++;
      void this.run(d);
    }
  }

  /** Parks d behind the running handler of its message (key: its runKey). */
  private park(key: string, d: Queued): void {
    const list = this.parked.get(key);
    if (list) list.push(d);
    else this.parked.set(key, [d]);
    this.parkedCount++;
  }

  /** The handler of message key (a runKey) returned: its next parked delivery, if any, goes first in the queue. */
  private unpark(key: string): void {
    const list = this.parked.get(key);
    if (!list) return;
    const d = list.shift()!;
    if (list.length === 0) this.parked.delete(key);
    this.parkedCount--;
    this.queue.unshift(d);
  }

  private async run(d: Queued): Promise<void> {
    const key = runKey(d.m); // as pump took it, whatever the handler does to the message
    // What the answer names, taken before the handler runs: a handler (or
    // a stream's reader) that edits its message's id or sequence must not
    // make the answer settle another message published under an id, nor
    // move the resume position.
    const id = d.m.id;
    const seq = position(d.m);
    let ok = true;
    let unanswered = false;
    let delayMs: number | undefined;
    const slot: Slot = { sub: this, done: false, loop: false };
    this.slots.add(slot);
    try {
      // In the slot's async context: an unsubscribe() or close() the
      // handler makes does not wait for the handler itself.
      const info = { message: d.m, attempt: d.attempt, sub: this.id };
      unanswered = (await (slotStorage ? slotStorage.run(slot, () => this.handler(d.m, info, slot)) : this.handler(d.m, info, slot))) === UNANSWERED;
    } catch (e) {
      ok = false;
      if (e === UNANSWERED) unanswered = true;
      else if (e instanceof RetryAfter) delayMs = e.delayMs;
      else if (e && typeof (e as { retryAfterMs?: unknown }).retryAfterMs === "number") delayMs = (e as { retryAfterMs: number }).retryAfterMs;
    }
    if (this.options.ack === "none" || unanswered) {
      // At most once: nothing is answered, whatever the handler did.
      // Unanswered: the unsubscribe that follows, or the lost connection,
      // gives it back to the server (its sequence stays in unacked).
    } else if (!d.c.closed && typeof id === "string" && this.id) {
      // The answer names the delivery's sequence as well as its id: a late
      // answer never settles a newer message published under the id once
      // retention trimmed the one delivered (the server refuses it).
      if (ok) {
        this.acks.push({ id, seq: seq ?? 0 });
        if (seq !== undefined) {
          this.unacked.delete(seq);
          this.lastAcked = Math.max(this.lastAcked, seq);
        }
        this.flushAcks(d.c);
      } else {
        // A failure keeps its sequence in unacked: the server redelivers it
        // on this subscription only, so a resume must ask for it again.
        const frame: Frame = { op: "nack", sub: this.id, messageId: id };
        if (seq !== undefined) frame.sequence = seq;
        // A delay that is not a number (NaN, a string that is not one) is
        // no delay: the subject's backoff, never null on the wire.
        const delay = delayMs === undefined ? Number.NaN : Number(delayMs);
        // A handler's longer RetryAfter waits the longest the broker takes
        // (12 hours), as it does in the Go client.
        if (!Number.isNaN(delay)) frame.delayMs = retryDelayMs(delay);
        d.c.call(frame).catch((e: PigeonError) => this.ackFailed(e));
      }
    }
    slot.done = true;
    this.slots.delete(slot);
    if (key !== undefined) {
      this.runningIds.delete(key);
      this.unpark(key);
    }
    this.running--;
    this.changed();
    this.pump();
  }

  private changed(): void {
    for (const f of this.waiters.splice(0)) f();
  }

  private async until(cond: () => boolean): Promise<void> {
    while (!cond()) await new Promise<void>((r) => this.waiters.push(r));
  }

  /** Whether a delivery that unsubscribe() or close() does not wait for still runs: own (the caller's), or one a stream's loop holds. */
  private exempt(s: Slot, own: Slot | undefined): boolean {
    return !s.done && (s === own || s.loop);
  }

  /** @internal whether a delivery the end cannot wait for now (own, or a stream loop's) still runs. */
  holdsExempt(own: Slot | undefined): boolean {
    for (const s of this.slots) if (this.exempt(s, own)) return true;
    return false;
  }

  /**
   * Sends the acks gathered, as one frame, or as many as the server's
   * maxFrame asks for (a window of thousands of long ids is more than one
   * frame holds: the server would close the connection), one at a time.
   */
  private flushAcks(c: Conn): void {
    if (this.ackBusy || this.acks.length === 0 || c.closed) return;
    const limit = this.session.frameLimit();
    let n = 1;
    let size = ACK_FRAME_BASE + ackCost(this.id) + ackCost(this.acks[0]!.id);
    while (n < this.acks.length && (size += ackCost(this.acks[n]!.id)) <= limit) n++;
    const acks = this.acks.splice(0, n);
    const frame: Frame = { op: "ack", sub: this.id };
    if (acks.length === 1) {
      frame.messageId = acks[0]!.id;
      if (acks[0]!.seq > 0) frame.sequence = acks[0]!.seq;
    } else {
      frame.messageIds = acks.map((a) => a.id);
      frame.sequences = acks.map((a) => a.seq);
    }
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

  /**
   * @internal Stops deliveries: nothing more is handed to the handler (or
   * a stream's loop); those queued, and those a stream took ahead of its
   * loop, stay unanswered: the unsubscribe (or the closed connection) gives
   * them back to the server without an attempt spent.
   */
  stop(): void {
    if (this.stopping || this.finished) return;
    this.stopping = true;
    this.clearQueue();
    this.onRelease?.("stopping");
    this.changed();
  }

  /** Waits for the acks gathered so far to be sent and answered. */
  private async acksFlushed(): Promise<void> {
    while (this.ackBusy || (this.acks.length > 0 && this.conn && !this.conn.closed)) {
      if (!this.ackBusy && this.conn) this.flushAcks(this.conn);
      await this.ackBusy;
    }
  }

  /**
   * @internal Waits for the running deliveries, except own (the caller's)
   * and those a stream's loop holds, and for their acks.
   */
  async settledExcept(own: Slot | undefined): Promise<void> {
    await this.until(() => this.finished || [...this.slots].every((s) => this.exempt(s, own)));
    await this.acksFlushed();
  }

  /** @internal Waits for every running delivery and its ack. */
  async idle(): Promise<void> {
    await this.until(() => this.finished || this.slots.size === 0);
    await this.acksFlushed();
  }

  /**
   * Ends a stopping subscription once nothing runs: its acks answered, it
   * sends the unsubscribe on the connection and under the id it has then
   * (a reconnect meanwhile may have moved it), and finishes. Resolves to
   * the server's refusal of the unsubscribe, if any.
   */
  private async endWhenIdle(): Promise<unknown> {
    let err: unknown;
    try {
      await this.idle();
      await this.resuming;
      for (;;) {
        const c = this.conn;
        const sid = this.id;
        // Not twice: the session's close() may have told the server already.
        if (this.finished || !c || c.closed || !sid || c.ended.has(sid)) break;
        c.ended.add(sid);
        try {
          await c.call({ op: "unsubscribe", sub: sid });
        } catch (e) {
          // A lost or closed connection ended the server's subscription too.
          if (!(e instanceof PigeonError) || (e.kind !== "transport" && e.kind !== "closed")) err = e;
        }
        // A resubscription that bound another id meanwhile is ended too.
        if (this.conn === c && this.id === sid) break;
      }
    } finally {
      // Ended whatever the answer: deliveries have stopped, and a stream's
      // loop waiting for the end is not left waiting.
      this.finish(undefined);
    }
    return err;
  }

  /** @internal ends the subscription with err (undefined: a normal end). */
  finish(err: PigeonError | undefined): void {
    if (this.finished) return;
    this.finished = true;
    this.error = err;
    this.clearQueue();
    this.onRelease?.("finished");
    this.session.forget(this);
    if (err) this.rejectDone(err);
    else this.resolveDone();
    this.changed();
  }

  /**
   * Stops deliveries, waits for running handlers and their acks, and ends
   * the subscription: the unsubscribe gives the deliveries not yet handed
   * over back to the server without an attempt spent.
   *
   * It never waits for the delivery its caller works on. Called from one of
   * this subscription's own handlers (or from anything that handler awaits
   * or starts), it waits for the other running handlers and their acks and
   * then resolves; the subscription ends once the calling handler returns:
   * its delivery is answered by that return (ack) or throw (nack), then the
   * unsubscribe is sent and `done` settles. A handler is told from other
   * callers by its async context (AsyncLocalStorage, on Node 20.16+); where
   * the runtime has none (browsers), call it from a handler without awaiting
   * it (`void sub.unsubscribe()`). Likewise, it does not wait for a stream's
   * loop (which may be the caller): the delivery the loop holds is answered
   * at its next step (acked when it moves on, nacked when it leaves), and
   * the subscription ends right after; the loop ends at that step.
   *
   * Rejects with the server's refusal of the unsubscribe (the subscription
   * has ended all the same); a lost connection is no error: the server's
   * subscription ended with it.
   */
  async unsubscribe(): Promise<void> {
    if (this.finished) return;
    const own = callerSlot();
    const first = !this.stopping;
    this.stop();
    // The first to stop it ends it; a later call (or one after close()
    // began) waits for that end.
    const ending = first ? this.endWhenIdle() : undefined;
    await this.settledExcept(own);
    if (this.holdsExempt(own)) {
      // The end follows the caller's own delivery (or the loop's): waiting
      // for it here could wait forever. A refusal goes to onError.
      void ending?.then((err) => {
        if (err instanceof PigeonError) this.session.report(err);
      });
      return;
    }
    if (ending) {
      const err = await ending;
      if (err !== undefined) throw err;
    } else {
      await this.done.catch(() => undefined);
    }
  }
}
