/**
 * A running subscription of a WebSocket session: its handlers (at most
 * maxInFlight at once), its acks (gathered into one frame while the previous
 * one is answered) and the position it resumes from after a reconnect.
 */
import { ClientCodes, PigeonError, RetryAfter } from "./errors.js";
import { answer, type Conn, type Frame } from "./conn.js";
import type { Message, Start } from "./types.js";
import type { Handler, Session, SubscribeOptions } from "./session.js";

/**
 * The most deliveries of an `ack: "none"` subscription queued in the client,
 * waiting for a handler (or for the loop of a stream). The server does not
 * flow-control such a subscription (nothing is answered, so the window holds
 * nothing back): beyond this bound the client drops deliveries, as at most
 * once allows, rather than queue them without limit. Drops are counted in
 * {@link Subscription.dropped} and reported to onError as DELIVERIES_DROPPED
 * at drop counts 1, 2, 4, 8, … An acknowledged subscription is bounded by
 * its window, which the server keeps.
 */
export const MAX_QUEUED = 4096;

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
  // Resumption: the sequences handed and not yet acked, the highest acked
  // (at most once: the highest received, and no set).
  private readonly unacked = new Set<number>();
  private lastAcked = 0;
  private readonly maxInFlight: number;
  private stopping = false;
  private droppedCount = 0;
  /**
   * @internal Called when deliveries handed to the handler but not yet
   * worked on must be let go (the stream form's buffer); see ReleaseReason.
   */
  onRelease: ((reason: ReleaseReason) => void) | undefined;

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

  /**
   * How many deliveries of an `ack: "none"` subscription were dropped because
   * {@link MAX_QUEUED} were already waiting (0 for an acknowledged one).
   */
  get dropped(): number {
    return this.droppedCount;
  }

  /** @internal */
  async subscribeOn(c: Conn, start: Start | undefined): Promise<void> {
    const frame: Frame = { op: "subscribe", subject: this.subject, batch: true, window: this.options.window ?? Math.max(256, this.maxInFlight), maxInFlight: this.maxInFlight };
    if (this.options.selector) frame.selector = this.options.selector;
    if (this.options.filter) frame.filter = this.options.filter;
    if (this.options.group) frame.group = this.options.group;
    if (start !== undefined && start !== "new") frame.start = start;
    // Sent whenever given, so the server refuses a value it does not know.
    if (this.options.ack !== undefined) frame.ack = this.options.ack;
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
    // (the server gives them back); acks gathered for it are moot. At most
    // once, they were done when the server sent them: they still run.
    if (this.options.ack !== "none") {
      this.queue.length = 0;
      this.onRelease?.("lost");
    }
    this.acks = [];
  }

  /** @internal */
  enqueue(c: Conn, m: Message, attempt: number): void {
    // While stopping, a delivery stays unanswered: the server gives it back.
    if (this.finished || this.stopping) return;
    // At most once, a reconnect resumes after the last message received: one
    // received is never handed over again.
    if (typeof m.sequence === "number" && this.options.ack === "none") this.lastAcked = Math.max(this.lastAcked, m.sequence);
    else if (typeof m.sequence === "number") this.unacked.add(m.sequence);
    if (this.options.ack === "none" && this.queue.length >= MAX_QUEUED) {
      this.drop();
      return;
    }
    this.queue.push({ c, m, attempt });
    this.pump();
  }

  /** An at-most-once delivery that finds the queue full: dropped, counted, reported at 1, 2, 4, … */
  private drop(): void {
    const n = ++this.droppedCount;
    if ((n & (n - 1)) !== 0) return; // a slow handler does not flood onError
    this.session.report(
      new PigeonError(
        ClientCodes.DELIVERIES_DROPPED,
        `at-most-once deliveries of ${this.subject} dropped: the handler does not keep up (${n} so far; at most ${MAX_QUEUED} wait queued)`,
        { subject: this.subject, dropped: n, maxQueued: MAX_QUEUED },
      ),
    );
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
    let unanswered = false;
    let delayMs: number | undefined;
    try {
      unanswered = (await this.handler(d.m, { message: d.m, attempt: d.attempt, sub: this.id })) === UNANSWERED;
    } catch (e) {
      ok = false;
      if (e === UNANSWERED) unanswered = true;
      else if (e instanceof RetryAfter) delayMs = e.delayMs;
      else if (e && typeof (e as { retryAfterMs?: unknown }).retryAfterMs === "number") delayMs = (e as { retryAfterMs: number }).retryAfterMs;
    }
    const id = d.m.id;
    if (this.options.ack === "none" || unanswered) {
      // At most once: nothing is answered, whatever the handler did.
      // Unanswered: the unsubscribe that follows, or the lost connection,
      // gives it back to the server.
    } else if (!d.c.closed && typeof id === "string" && this.id) {
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
    this.onRelease?.("stopping");
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
    this.onRelease?.("finished");
    this.session.forget(this);
    if (err) this.rejectDone(err);
    else this.resolveDone();
    for (const f of this.idle.splice(0)) f();
  }

  /** Stops deliveries, waits for running handlers and their acks, and ends the subscription. */
  async unsubscribe(): Promise<void> {
    if (this.finished) return;
    if (this.stopping) {
      // Another unsubscribe, or the session's close, is ending it.
      await this.done.catch(() => undefined);
      return;
    }
    const c = this.conn;
    const sid = this.id;
    await this.drain();
    try {
      if (c && !c.closed && sid) {
        try {
          await c.call({ op: "unsubscribe", sub: sid });
        } catch (e) {
          if (!(e instanceof PigeonError) || e.kind !== "transport") throw e;
        }
      }
    } finally {
      // Ended whatever the answer: deliveries have stopped, and a stream's
      // loop waiting for the end is not left waiting.
      this.finish(undefined);
    }
  }
}

