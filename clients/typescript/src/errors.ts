/**
 * Errors. Every failure of the client is a {@link PigeonError}: a stable
 * `code` (the server's code, or one of the client's own below), a
 * `message`, `details` (always an object; a gate's refusal carries `gate`
 * and `decision`, a quarantined message `quarantineId`), the HTTP `status`
 * of the code, and a `kind` that tells the families apart.
 */

import { messageFault, numberDetail, typeName } from "./shape.js";
import type { MemberFault } from "./shape.js";
import { SpelledNumber } from "./spelled.js";

/** The family of an error. */
export type ErrorKind =
  /** a gate or policy refused the message (403 family: INTENT_DENIED, REGION_DENIED, …) */
  | "denial"
  /** a gate refused and quarantined the message (details.quarantineId is set) */
  | "quarantine"
  /** the contract is missing, expired, revoked, stale, or cannot be negotiated */
  | "contract"
  /** the connection failed, dropped, or the server sent something unreadable */
  | "transport"
  /** the call was used after close(), or the session ended */
  | "closed"
  /** a request or call timed out */
  | "timeout"
  /** the credential was refused */
  | "auth"
  /** anything else: bad arguments, not found, rate limits, server errors */
  | "other";

/** Codes the client produces itself (the server never sends them). */
export const ClientCodes = {
  /** the connection dropped or could not be made */
  SESSION_CLOSED: "SESSION_CLOSED",
  /** the session was closed with close() */
  CLOSED: "CLOSED",
  /** a frame from the server could not be parsed or matched */
  BAD_FRAME: "BAD_FRAME",
  /** the client gave up waiting for an answer */
  TIMEOUT: "TIMEOUT",
  /**
   * at-most-once deliveries were dropped because the subscription already had
   * MAX_QUEUED waiting for its handler, or MAX_QUEUED_BYTES of their data
   * (details: subject, dropped, maxQueued, maxQueuedBytes)
   */
  DELIVERIES_DROPPED: "DELIVERIES_DROPPED",
} as const;

const CONTRACT_CODES = new Set([
  "CONTRACT_REQUIRED",
  "CONTRACT_NOT_FOUND",
  "CONTRACT_EXPIRED",
  "CONTRACT_PRINCIPAL_MISMATCH",
  "CONTRACT_STALE",
  "CONTRACT_REVOKED",
  "SUBJECT_NOT_IN_CONTRACT",
  "OPERATION_NOT_IN_CONTRACT",
  "NO_PERMITTED_SUBJECTS",
  "GRANT_REVOKED",
  "TOO_MANY_CONTRACTS",
]);

const DENIAL_CODES = new Set([
  "FORBIDDEN",
  "POLICY_DENIED",
  "REPLAY_DENIED",
  "REGION_DENIED",
  "INTENT_DENIED",
  "ACK_NOT_ALLOWED",
  "SENSITIVE_FIELD_DENIED",
  "RAW_PAN_DETECTED",
  "IDEMPOTENCY_REQUIRED",
  "CLASSIFICATION_DENIED",
  "ENVELOPE_INVALID",
  "SCHEMA_INVALID",
  "DATA_QUALITY_FAILED",
  "SIGNATURE_REQUIRED",
  "SIGNATURE_INVALID",
  "ENCRYPTION_REQUIRED",
  "DELIVERY_EXHAUSTED",
  "HOPS_EXCEEDED",
]);

// The server's stable codes (errors.go at the repository's root);
// test/dupkey.test.mjs holds them to clients/conformance/codes.json.
const SERVER_CODES: ReadonlySet<string> = new Set([
  "ACK_NOT_ALLOWED", "AUDIT_TAMPERED", "BAD_REQUEST", "CLASSIFICATION_DENIED", "CLUSTER_UNCONFIRMED", "CONFLICT",
  "CONTRACT_EXPIRED", "CONTRACT_NOT_FOUND", "CONTRACT_PRINCIPAL_MISMATCH", "CONTRACT_REQUIRED", "CONTRACT_REVOKED",
  "CONTRACT_STALE", "DATA_QUALITY_FAILED", "DELIVERY_EXHAUSTED", "DUPLICATE_KEY", "ENCRYPTION_REQUIRED",
  "ENVELOPE_INVALID", "FILTER_INVALID", "FORBIDDEN", "GRANT_REVOKED", "HOPS_EXCEEDED", "IDEMPOTENCY_REQUIRED",
  "IDENTITY_UNAVAILABLE", "INTENT_DENIED", "INTERNAL", "INVALID_ARGUMENT", "INVALID_UTF8", "MESSAGE_ID_TAKEN",
  "MESSAGE_NOT_FOUND",
  "METHOD_NOT_ALLOWED", "NOT_FOUND", "NO_PERMITTED_SUBJECTS", "OPERATION_NOT_IN_CONTRACT", "PAYLOAD_TOO_LARGE",
  "POLICY_DENIED", "POLICY_INVALID", "PROGRAM_INVALID", "PROGRAM_LIMIT_EXCEEDED", "PROGRAM_NOT_FOUND",
  "PROGRAM_TIMEOUT", "PROGRAM_TRAPPED", "PROGRAM_VERSION_PRUNED", "QUARANTINE_NOT_FOUND", "RATE_LIMITED",
  "RAW_PAN_DETECTED", "REGION_DENIED", "REPLAY_DENIED", "REQUEST_TIMEOUT", "SCHEMA_INVALID", "SELECTOR_INVALID",
  "SENSITIVE_FIELD_DENIED", "SESSION_CLOSED", "SHUTTING_DOWN", "SIGNATURE_INVALID", "SIGNATURE_REQUIRED",
  "STORE_CORRUPT", "STORE_FULL", "STORE_NO_QUORUM", "STORE_UNAVAILABLE", "SUBJECT_NOT_FOUND",
  "SUBJECT_NOT_IN_CONTRACT", "TOO_MANY_CONTRACTS", "TOO_MANY_GROUPS", "TOO_MANY_SUBSCRIPTIONS", "UNAUTHENTICATED",
]);

/** Whether code is one of the server's stable codes (not the client's own). */
export function isServerCode(code: string): boolean {
  return SERVER_CODES.has(code);
}

// The server's statuses (wire.HTTPStatus); test/unit.test.mjs holds them to
// clients/conformance/codes.json. TIMEOUT is the client's own.
const STATUS: Record<string, number> = {
  BAD_REQUEST: 400, DUPLICATE_KEY: 400, INVALID_UTF8: 400, SELECTOR_INVALID: 400, FILTER_INVALID: 400,
  POLICY_INVALID: 400, INVALID_ARGUMENT: 400,
  UNAUTHENTICATED: 401,
  NOT_FOUND: 404, SUBJECT_NOT_FOUND: 404, MESSAGE_NOT_FOUND: 404, QUARANTINE_NOT_FOUND: 404, PROGRAM_NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405, CONFLICT: 409, MESSAGE_ID_TAKEN: 409, PROGRAM_VERSION_PRUNED: 410, PAYLOAD_TOO_LARGE: 413,
  SENSITIVE_FIELD_DENIED: 422, RAW_PAN_DETECTED: 422, IDEMPOTENCY_REQUIRED: 422, CLASSIFICATION_DENIED: 422,
  ENVELOPE_INVALID: 422, SCHEMA_INVALID: 422, DATA_QUALITY_FAILED: 422, SIGNATURE_REQUIRED: 422,
  SIGNATURE_INVALID: 422, ENCRYPTION_REQUIRED: 422, DELIVERY_EXHAUSTED: 422, PROGRAM_INVALID: 422,
  PROGRAM_LIMIT_EXCEEDED: 422, HOPS_EXCEEDED: 422,
  RATE_LIMITED: 429, TOO_MANY_CONTRACTS: 429, TOO_MANY_SUBSCRIPTIONS: 429, TOO_MANY_GROUPS: 429,
  SHUTTING_DOWN: 503, SESSION_CLOSED: 503, STORE_UNAVAILABLE: 503, STORE_NO_QUORUM: 503, CLUSTER_UNCONFIRMED: 503,
  IDENTITY_UNAVAILABLE: 503,
  REQUEST_TIMEOUT: 504, PROGRAM_TIMEOUT: 504, TIMEOUT: 504,
  STORE_FULL: 507,
};

/**
 * The HTTP status of a code (docs/http.md, "Status by code"); 500 when
 * unknown, as the server answers INTERNAL, STORE_CORRUPT, AUDIT_TAMPERED
 * and PROGRAM_TRAPPED.
 */
export function statusOf(code: string): number {
  // Own members only: "constructor" or "__proto__" is no status.
  if (Object.hasOwn(STATUS, code)) return STATUS[code]!;
  if (CONTRACT_CODES.has(code) || DENIAL_CODES.has(code)) return code === "TOO_MANY_CONTRACTS" ? 429 : 403;
  return 500;
}

function kindOf(code: string, details: Record<string, unknown>): ErrorKind {
  if (typeof details.quarantineId === "string" && details.quarantineId !== "") return "quarantine";
  if (CONTRACT_CODES.has(code)) return "contract";
  if (DENIAL_CODES.has(code)) return "denial";
  switch (code) {
    case "SESSION_CLOSED":
    case "SHUTTING_DOWN":
    case "BAD_FRAME":
      return "transport";
    case "CLOSED":
      return "closed";
    case "REQUEST_TIMEOUT":
    case "TIMEOUT":
      return "timeout";
    case "UNAUTHENTICATED":
      return "auth";
  }
  return "other";
}

/** Details of an error; always an object. */
export interface ErrorDetails {
  gate?: string;
  quarantineId?: string;
  decision?: Record<string, unknown>;
  [k: string]: unknown;
}

/** The one error type of the client. */
export class PigeonError extends Error {
  override readonly name = "PigeonError";
  readonly code: string;
  readonly details: ErrorDetails;
  readonly status: number;
  readonly kind: ErrorKind;

  constructor(code: string, message: string, details?: ErrorDetails | null, status?: number, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.details = details && typeof details === "object" ? details : {};
    this.status = status ?? statusOf(code);
    this.kind = kindOf(code, this.details);
  }

  /** The quarantine record's id when the message was quarantined. */
  get quarantineId(): string | undefined {
    return typeof this.details.quarantineId === "string" ? this.details.quarantineId : undefined;
  }
  /** The gate that refused the message, when a gate did. */
  get gate(): string | undefined {
    return typeof this.details.gate === "string" ? this.details.gate : undefined;
  }
  /** A gate or policy refused the message (whether or not it was also quarantined). */
  get isDenial(): boolean { return this.kind === "denial" || this.kind === "quarantine"; }
  get isQuarantine(): boolean { return this.kind === "quarantine"; }
  get isContract(): boolean { return this.kind === "contract"; }
  get isTransport(): boolean { return this.kind === "transport"; }
  get isClosed(): boolean { return this.kind === "closed"; }
  get isTimeout(): boolean { return this.kind === "timeout"; }

  toJSON(): { code: string; message: string; details: ErrorDetails } {
    return { code: this.code, message: this.message, details: this.details };
  }
}

/** Builds a PigeonError from the wire form `{code, message, details}`. */
export function fromWire(e: unknown, status?: number): PigeonError {
  if (e && typeof e === "object") {
    const o = e as { code?: unknown; message?: unknown; details?: unknown };
    if (typeof o.code === "string" && o.code !== "") {
      return new PigeonError(
        o.code,
        typeof o.message === "string" ? o.message : o.code,
        o.details && typeof o.details === "object" && !Array.isArray(o.details) ? (o.details as ErrorDetails) : {},
        status,
      );
    }
  }
  return new PigeonError(ClientCodes.BAD_FRAME, "error without a code from the server", { error: e as unknown }, status);
}

/**
 * `v` milliseconds for a frame or request body (a delay, ttl or timeout):
 * INVALID_ARGUMENT when not a finite number, which JSON.stringify would
 * send as null, the server's "not given" (its default backoff or ttl).
 */
export function finiteMs(name: string, v: number): number {
  if (typeof v !== "number" || !Number.isFinite(v)) throw new PigeonError("INVALID_ARGUMENT", `${name} must be a finite number of milliseconds, not ${String(v)}`);
  return v;
}

/** The longest redelivery delay the broker takes (12 hours, `pigeon.MaxRetryDelay`). */
export const MAX_RETRY_DELAY_MS = 12 * 60 * 60 * 1000;

/**
 * A nack's `delayMs` as sent: whole milliseconds from 0 to
 * {@link MAX_RETRY_DELAY_MS}, a longer one shortened to it and a negative
 * one 0, as the Python client and the clients' push nacks do, rather than
 * sent for the broker to refuse INVALID_ARGUMENT. `v` is a number, not NaN.
 */
export function retryDelayMs(v: number): number {
  return Math.min(MAX_RETRY_DELAY_MS, Math.max(0, Math.round(v)));
}

/**
 * Whether a message's `sequence` is one this client holds exactly: absent,
 * null, or an integer of 0 to 2^53-1 (Number.MAX_SAFE_INTEGER). JSON.parse
 * rounds an integer beyond that (9007199254740993 reads as
 * 9007199254740992, another message's), reads 1e400 as Infinity, and a
 * fractional or negative one is no sequence of the broker's: an answer
 * naming such a value could not name the message received.
 */
export function sequenceHeld(m: { sequence?: unknown }): boolean {
  const s = m.sequence;
  return s === undefined || s === null || (typeof s === "number" && Number.isSafeInteger(s) && s >= 0);
}

/**
 * Whether the `sequence` of a message the server hands over (a reply; a
 * delivery, a receive or replay message must have one too, see
 * {@link sequenceStored}) is one of the broker's and held exactly:
 * absent, null, or an integer of 1 to 2^53-1. The broker numbers
 * a subject's messages from 1 and leaves 0 out, so a 0 is no broker's
 * (an answer naming it would name none, and settle whichever message holds
 * the id), as the Python and Rust clients refuse it.
 */
export function sequenceDelivered(m: { sequence?: unknown }): boolean {
  return sequenceHeld(m) && m.sequence !== 0;
}

/**
 * Whether the `sequence` of a message a delivery, a receive or a replay
 * hands the caller, read from the subject's log, is one of the broker's and held
 * exactly: an integer of 1 to 2^53-1, and present. The broker numbers
 * every message it stores from 1 and always sends the number with it, so
 * one without a sequence (absent or null) is no broker's, as one of 0 is:
 * an ack of it would name no sequence, and settle whichever message holds
 * the id. As the Python and Rust clients refuse it. (A reply never enters
 * the log: it has no sequence, see {@link sequenceDelivered}.)
 */
export function sequenceStored(m: { sequence?: unknown }): boolean {
  return m.sequence !== undefined && m.sequence !== null && sequenceDelivered(m);
}

/**
 * The largest lease attempt the client takes from a receive answer or
 * sends in an ack or a nack: 2^31-1, as the Go client (the reference)
 * reads `attempts`, and as the Python and Rust clients hold it. The broker
 * counts attempts from 1 up to a subject's `retry.maxAttempts`, far below.
 */
export const MAX_ATTEMPT = 2 ** 31 - 1;

/**
 * Whether `a` is a lease attempt a receive answer may name: an integer of
 * 1 to {@link MAX_ATTEMPT}, spelled as one (an attempt spelled with a
 * fraction or an exponent, 1.0 or 1e0, is a {@link SpelledAttempt} here:
 * see attempts.ts). The same set as the Python and Rust clients take.
 */
export function attemptHeld(a: unknown): a is number {
  return typeof a === "number" && Number.isInteger(a) && a >= 1 && a <= MAX_ATTEMPT;
}

/** What a refusal's details name of an attempt no lease's: the number, its spelling ("1.0"), or its type. */
const attemptDetail = numberDetail;

/**
 * Whether a message's `hops` is one the broker sets: absent, null (as an
 * absent sequence is), or an integer of 0 to 2^32-1 (docs/protocol.md,
 * "hops"). A `hops` of another type or out of range is no broker's, and a
 * handler reading `message.hops` as the number it is typed as would be
 * misled.
 */
export function hopsHeld(m: { hops?: unknown }): boolean {
  const h = m.hops;
  return h === undefined || h === null || (typeof h === "number" && Number.isInteger(h) && h >= 0 && h <= 0xffff_ffff);
}

/**
 * Where a pushed delivery was: a `deliver` frame, or entry `index` of a
 * `deliver_batch`. The report of a refused delivery names it in its
 * `details`, as the Python client's does.
 */
export type DeliveryAt = { op: "deliver" } | { op: "deliver_batch"; index: number };

/** ` (deliver_batch entry i)` for a batch's entry, nothing for a lone deliver. */
function entryOf(at: DeliveryAt): string {
  return at.op === "deliver_batch" ? ` (deliver_batch entry ${at.index})` : "";
}

/** The details of a refused delivery: where it was, its message's id, then `extra`. */
function deliveryDetails(m: { id?: unknown }, at: DeliveryAt, extra: ErrorDetails): ErrorDetails {
  return { ...at, messageId: typeof m.id === "string" ? m.id : typeof m.id, ...extra };
}

/** What a refusal names of a sequence or hops: the number, its spelling ("5.0", see sigv.ts), or its typeof. */
function spelledOr(x: unknown): unknown {
  return x instanceof SpelledNumber ? x.spelling : typeof x === "number" ? x : typeof x;
}

/**
 * The BAD_FRAME of a delivery whose message has a member of the wrong
 * type (see messageFault, shape.ts): not handed over and not answered, as
 * one whose sequence the client cannot hold is not.
 */
function misshapenDelivery(m: { id?: unknown }, at: DeliveryAt, f: MemberFault): PigeonError {
  return new PigeonError(
    ClientCodes.BAD_FRAME,
    `the server sent a delivery${entryOf(at)} whose ${f.member} is not ${f.want}`,
    deliveryDetails(m, at, { member: f.member, found: f.found }),
  );
}

/**
 * The BAD_FRAME of a delivery whose hops is not the broker's (see
 * {@link hopsHeld}): the delivery is not handed over and not answered, as
 * one with a sequence the client cannot hold is not.
 */
export function unheldHops(m: { id?: unknown; hops?: unknown }, at: DeliveryAt): PigeonError {
  const h = m.hops;
  return new PigeonError(
    ClientCodes.BAD_FRAME,
    `the server sent a delivery${entryOf(at)} whose hops is not an integer of 0 to 2^32-1`,
    deliveryDetails(m, at, { hops: spelledOr(h) }),
  );
}

/**
 * The BAD_FRAME of a delivery whose sequence is absent, no broker's or one
 * the client cannot hold exactly (see {@link sequenceStored}): the delivery is not
 * handed over and not answered (an answer without the sequence could
 * settle a newer message under its id), so the server's ack wait gives it
 * back.
 */
export function unheldSequence(m: { id?: unknown; sequence?: unknown }, at: DeliveryAt): PigeonError {
  const s = m.sequence;
  return new PigeonError(
    ClientCodes.BAD_FRAME,
    `the server sent a delivery${entryOf(at)} whose sequence is not an integer of 1 to 2^53-1, which this client cannot answer exactly`,
    deliveryDetails(m, at, { sequence: spelledOr(s) }),
  );
}

/**
 * The BAD_FRAME of a pushed delivery `at` of `attempt` whose message
 * cannot be handed over, undefined when it can: an id that is no non-empty
 * string (an answer could not name it, so the handler would run it again
 * at each redelivery), a sequence no broker's or the client cannot hold
 * exactly, or none at all ({@link unheldSequence}: every delivery comes
 * from the subject's log, and the broker writes its sequence into each,
 * see {@link sequenceStored}; one spelled 5.0 is none, see sigv.ts), a
 * hops no broker's ({@link unheldHops}), any other member of the wrong
 * type (a `time` that is a number, a `type` that is an object, a
 * `signature` of another shape: see messageFault, shape.ts), an
 * attempt that is not an integer of 1 to {@link MAX_ATTEMPT} (the broker
 * writes one into every delivery, counted from 1; see {@link attemptHeld},
 * the receive rule). Such a delivery is reported, not handed over and not
 * answered: the server's ack wait gives it back. As the Python and Rust
 * clients refuse it.
 */
export function refusedDelivery(m: { id?: unknown; sequence?: unknown; hops?: unknown }, attempt: unknown, at: DeliveryAt): PigeonError | undefined {
  if (typeof m.id !== "string" || m.id === "") {
    return new PigeonError(ClientCodes.BAD_FRAME, `the server sent a delivery${entryOf(at)} whose message id is not a non-empty string`, deliveryDetails(m, at, {}));
  }
  if (!sequenceStored(m)) return unheldSequence(m, at);
  if (!hopsHeld(m)) return unheldHops(m, at);
  const fault = messageFault(m as Record<string, unknown>);
  if (fault) return misshapenDelivery(m, at, fault);
  if (!attemptHeld(attempt)) {
    return new PigeonError(
      ClientCodes.BAD_FRAME,
      `the server sent a delivery${entryOf(at)} whose attempt is not an integer of 1 to 2^31-1`,
      deliveryDetails(m, at, { attempt: attemptDetail(attempt) }),
    );
  }
  return undefined;
}

/**
 * The BAD_FRAME of a stored message an answer hands the caller (`what`: a
 * `reply`, or entry `index` of a `receive` or a `replay` answer) whose
 * sequence is no broker's or the client cannot hold exactly (see
 * {@link sequenceStored}: in a receive or replay answer none at all is no
 * broker's either, while a reply has none; one spelled 5.0 is none, see
 * sigv.ts), whose hops is not the broker's (see {@link hopsHeld}), or that
 * has any other member of the wrong type (an `id` that is a number, a
 * `time` that is a number, a `signature` of another shape: see
 * messageFault, shape.ts); undefined when it holds them all. Such a
 * message is refused as such a delivery is: a 0 or none names none, and a
 * rounded sequence another message, which a replay or a resume from it, or
 * an ack of it, would name. `details` names the answer (`op`), the entry
 * (`index`), the message (`messageId`) and the value refused (for a member
 * of the wrong type: the `member` and what it holds, `found`).
 */
export function unheldMessage(m: { id?: unknown; sequence?: unknown; hops?: unknown }, what: string, index?: number): PigeonError | undefined {
  if (typeof m !== "object" || m === null) return undefined;
  const held = what === "reply" ? sequenceDelivered(m) : sequenceStored(m);
  const hops = held && hopsHeld(m);
  const fault = hops ? messageFault(m as Record<string, unknown>) : undefined;
  if (hops && !fault) return undefined;
  const at = index === undefined ? "" : ` (entry ${index})`;
  const details: ErrorDetails = { op: what, messageId: typeof m.id === "string" ? m.id : typeof m.id };
  if (index !== undefined) details.index = index;
  if (fault) {
    return new PigeonError(ClientCodes.BAD_FRAME, `the server sent a ${what} message${at} whose ${fault.member} is not ${fault.want}`, {
      ...details,
      member: fault.member,
      found: fault.found,
    });
  }
  const field = held ? "hops" : "sequence";
  const range = held ? "0 to 2^32-1" : "1 to 2^53-1, which this client cannot hold exactly";
  details[field] = spelledOr(m[field]);
  return new PigeonError(ClientCodes.BAD_FRAME, `the server sent a ${what} message${at} whose ${field} is not an integer of ${range}`, details);
}

/**
 * The BAD_FRAME of a reply that does not answer `req`, the request as it
 * was sent (see requestOf); undefined when it does. A reply is the message
 * a responder published with `correlationId` the request's id: one without
 * a correlationId (absent, empty, not a string) answers no request, and
 * one naming another id answers another request, whose caller it was
 * meant for. With an idempotency key `req` may repeat an earlier request
 * of another id, whose reply is this one's: then any correlationId is
 * taken. `details` names the correlationId refused and the request's id.
 */
export function unansweringReply(req: { id?: unknown; idempotencyKey?: unknown }, reply: { correlationId?: unknown }): PigeonError | undefined {
  const c = reply.correlationId;
  if (typeof c !== "string" || c === "") {
    return new PigeonError(ClientCodes.BAD_FRAME, "the server sent a reply without a correlationId: it answers no request", {
      op: "reply",
      correlationId: typeof c === "string" ? c : typeName(c),
    });
  }
  if (typeof req.id === "string" && req.id !== "" && !req.idempotencyKey && c !== req.id) {
    return new PigeonError(ClientCodes.BAD_FRAME, `the server sent a reply to another request (correlationId ${JSON.stringify(c)}, not ${JSON.stringify(req.id)})`, {
      op: "reply",
      correlationId: c,
      requestId: req.id,
    });
  }
  return undefined;
}

/**
 * The messages of a `receive` or `replay` answer that the client holds
 * exactly (see {@link unheldMessage}), in order; each other one is left
 * out and its BAD_FRAME passed to `report`, as a `deliver_batch` entry is:
 * the others go on. So is an entry that is not a message object (null, a
 * number, a string, an array): reading it as a message would throw a
 * TypeError in the caller. A leased one left out is not answered, so the
 * server's ack wait gives it back. `attempts`, when given, is in step with
 * `list` (see {@link pullAttempts}): each message kept keeps its own, for
 * {@link attemptOf} and the ack or nack of it, and one whose attempt is
 * not an integer of 1 to {@link MAX_ATTEMPT} is left out and reported the
 * same way (an ack naming a wrong attempt would be refused, or settle
 * another lease), the others kept.
 */
export function heldMessages<M>(list: M[], what: string, report: (e: PigeonError) => void, attempts?: readonly unknown[]): M[] {
  const out: M[] = [];
  for (let i = 0; i < list.length; i++) {
    const m: unknown = list[i];
    if (typeof m !== "object" || m === null || Array.isArray(m)) {
      report(new PigeonError(ClientCodes.BAD_FRAME, `the server sent a ${what} entry (entry ${i}) that is not a message object`, { op: what, index: i, entry: typeName(m) }));
      continue;
    }
    const unheld = unheldMessage(m as { id?: unknown; sequence?: unknown; hops?: unknown }, what, i);
    if (unheld) {
      report(unheld);
      continue;
    }
    const a: unknown = attempts?.[i];
    if (attempts && !attemptHeld(a)) {
      const id = (m as { id?: unknown }).id;
      report(
        new PigeonError(ClientCodes.BAD_FRAME, `the server sent a ${what} message (entry ${i}) whose attempt is not an integer of 1 to 2^31-1`, {
          op: what,
          index: i,
          messageId: typeof id === "string" ? id : typeof id,
          attempt: attemptDetail(a),
        }),
      );
      continue;
    }
    if (attemptHeld(a)) leaseAttempts.set(m, a);
    out.push(m as M);
  }
  return out;
}

/**
 * The lease attempt of each message a pull handed out, by the message
 * object: the attempt its ack or nack sends back (see {@link settleBody}).
 * Weak: a message the caller lets go is forgotten with it.
 */
const leaseAttempts = new WeakMap<object, number>();

/**
 * The lease attempt a receive (a Session's or an HttpClient's) answered
 * `message` with (the message object it handed out): 1 for its first delivery, more when its
 * lease ran out and it was leased again. 0 when it was not leased (a
 * pubsub subject, an automatic HTTP receive, a server that does not tell
 * it), or for any other object.
 */
export function attemptOf(message: unknown): number {
  return typeof message === "object" && message !== null ? (leaseAttempts.get(message) ?? 0) : 0;
}

/**
 * The `attempts` of a `receive` answer holding `messages` (its raw list,
 * before any entry is left out), in step with them; undefined for an
 * answer without `attempts`, which leased nothing (0 each). BAD_FRAME for an `attempts` that
 * cannot be told to the messages (not an array, null, another length),
 * rather than an attempt given to another message. Its entries are
 * returned as sent: one that is no lease's attempt refuses its message
 * alone (see {@link heldMessages}).
 */
export function pullAttempts(answer: Record<string, unknown>, what: string): readonly unknown[] | undefined {
  const n = Array.isArray(answer.messages) ? answer.messages.length : 0;
  const a = answer.attempts;
  if (a === undefined) return undefined;
  if (!Array.isArray(a)) {
    throw new PigeonError(ClientCodes.BAD_FRAME, `the server sent a ${what} answer whose attempts is not a list`, { op: what, attempts: typeName(a) });
  }
  if (a.length !== n) {
    throw new PigeonError(ClientCodes.BAD_FRAME, `the server sent a ${what} answer holding ${a.length} attempts for ${n} messages`, { op: what, attempts: a.length, messages: n });
  }
  return a as unknown[];
}

/**
 * The `messageId`, `sequence` and `attempt` of an ack or a nack body: of
 * `message`, a message received (its id, its sequence when positive, and
 * the lease attempt a receive handed it out with, see
 * {@link attemptOf}) or its id; `sequence` and `attempt`, when given, are
 * sent instead (0: none). INVALID_ARGUMENT for a message without a string
 * id, a sequence that is not a non-negative safe integer (JSON.stringify
 * would send a rounded or null one), an attempt that is not an integer of
 * 0 to {@link MAX_ATTEMPT} (no lease's), or a message received
 * whose sequence is not one (beyond 2^53-1 JSON.parse rounded it, see
 * {@link sequenceHeld}): rather than an answer without the sequence, which
 * settles whichever message holds the id now. Pass the id alone to answer
 * so anyway.
 */
export function settleBody(
  message: string | { id?: unknown; sequence?: unknown },
  sequence?: number,
  attempt?: number,
): { messageId: string; sequence?: number; attempt?: number } {
  const id = typeof message === "string" ? message : message?.id;
  if (typeof id !== "string") throw new PigeonError("INVALID_ARGUMENT", "an ack or a nack names a message id (a string) or a message received");
  let seq = typeof message === "string" ? undefined : message.sequence;
  if (sequence === undefined && typeof message !== "string" && !sequenceHeld(message)) {
    throw new PigeonError("INVALID_ARGUMENT", "the message's sequence is not an integer of 0 to 2^53-1: the answer cannot name it exactly", {
      sequence: typeof seq === "number" ? seq : typeof seq,
    });
  }
  if (sequence !== undefined) {
    if (typeof sequence !== "number" || !Number.isSafeInteger(sequence) || sequence < 0) throw new PigeonError("INVALID_ARGUMENT", `sequence must be a non-negative safe integer, not ${String(sequence)}`);
    seq = sequence;
  }
  let att = attemptOf(message);
  if (attempt !== undefined) {
    if (attempt !== 0 && !attemptHeld(attempt)) throw new PigeonError("INVALID_ARGUMENT", `attempt must be an integer of 0 to 2^31-1, not ${String(attempt)}`);
    att = attempt;
  }
  const body: { messageId: string; sequence?: number; attempt?: number } = { messageId: id };
  if (typeof seq === "number" && Number.isSafeInteger(seq) && seq > 0) body.sequence = seq;
  if (att > 0) body.attempt = att;
  return body;
}

/**
 * Control characters that must not reach a log line as they are: C0 (tab
 * and newline included), DEL, C1 (U+0080–U+009F, among them the one-byte
 * CSI of ANSI escapes) and the Unicode line and paragraph separators.
 */
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g;

/**
 * s with every control character (see CONTROL) written as a \xNN or
 * \uNNNN escape, so that text a server supplied (an error's code or
 * message) cannot forge log lines, move the cursor or recolour a terminal.
 * Text without one is returned as it is.
 */
export function escapeControls(s: string): string {
  CONTROL.lastIndex = 0;
  if (!CONTROL.test(s)) return s;
  return s.replace(CONTROL, (c) => {
    const n = c.charCodeAt(0);
    return n <= 0xff ? `\\x${n.toString(16).padStart(2, "0")}` : `\\u${n.toString(16).padStart(4, "0")}`;
  });
}

/** A transport error (the connection failed or dropped). */
export function transportError(message: string, cause?: unknown, code: string = ClientCodes.SESSION_CLOSED): PigeonError {
  return new PigeonError(code, message, {}, undefined, { cause });
}

/**
 * Thrown (or returned as the rejection) by a handler to nack its delivery
 * with a retry delay: the message comes back after `delayMs`.
 */
export class RetryAfter extends Error {
  override readonly name = "RetryAfter";
  constructor(readonly delayMs: number, readonly reason?: unknown) {
    super(`retry after ${delayMs} ms`, { cause: reason });
  }
}
