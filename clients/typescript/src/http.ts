/**
 * The HTTP client (docs/http.md), with the reference clients' surface:
 * connect, publish, request, receive, subjects, audit, receipts,
 * quarantine; plus ack, nack, replay, quarantine release, contract
 * revocation, and the account, role, grant and key routes an admin uses.
 *
 * Concurrency contract: an HttpClient holds no connection of its own (each
 * call is one fetch), so any number of calls may run at once. `connect`
 * replaces the contract later calls use.
 */
import { markSpelledIntegers } from "./sigv.js";
import { markSpelledAttempts } from "./attempts.js";
import { frameText, hasStrings, isContract, isObj, timerMs } from "./conn.js";
import { readDecision } from "./decision.js";
import { duplicateMember, loneSurrogate } from "./jcs.js";
import { listsMoreThan } from "./entries.js";
import { attemptOf, ClientCodes, escapeControls, finiteMs, fromWire, heldMessages, PigeonError, pullAttempts, retryDelayMs, settleBody, transportError, unansweringReply, unheldMessage } from "./errors.js";
import { isKeyEntry, requestOf, selectKey, verifyMessageWithKeys, type PublicKey } from "./crypto.js";
import type { Contract, Decision, Message, Pulled, Receipt, ReceiptsPage, ReplayOptions, SettleOptions } from "./types.js";

export interface HttpOptions {
  /** x-pigeon-region of every call */
  region?: string;
  /** a fetch implementation (default: the global fetch) */
  fetch?: typeof fetch;
  /** per-call timeout in ms, besides a request's own (default 30 000) */
  timeoutMs?: number;
  /** the largest response body read (default MAX_RESPONSE_BYTES, 256 MiB); beyond it the call fails with PAYLOAD_TOO_LARGE */
  maxResponseBytes?: number;
  /**
   * called with the BAD_FRAME of each message a receive or a replay answer
   * leaves out (see heldMessages; default: written to the console, control
   * characters escaped)
   */
  onError?: (err: PigeonError) => void;
}

/**
 * The largest response body an HttpClient reads by default (256 MiB, as the
 * Python client): a server or proxy that sends more, or without end, fails
 * the call with PAYLOAD_TOO_LARGE once the bound is passed, rather than
 * fill the memory.
 */
export const MAX_RESPONSE_BYTES = 256 << 20;

/**
 * The most records one page of the audit log (`audit`), the quarantine
 * (`quarantine`) or a message's receipts (`receipts`) holds, 10 000: the
 * server's default and cap of `max` (`maxRecords` in server/routes.go). An
 * answer listing more is no server's: it is refused, BAD_FRAME, counted on
 * its text before JSON.parse builds a record (256 MiB of `{}` entries is
 * about 89 million objects, several GiB once parsed).
 */
export const MAX_PAGE_RECORDS = 10_000;

/**
 * The most keys an account publishes, 64 (`pigeon.MaxAccountKeys`,
 * signature.go; the server loads no more): a `fetchKeys` answer listing
 * more is refused, BAD_FRAME, as a page past {@link MAX_PAGE_RECORDS} is.
 */
export const MAX_ACCOUNT_KEYS = 64;

/**
 * The list of a listing answer: the answer's member holding it, and the
 * most entries the server ever sends there.
 */
type Listed = readonly [member: string, most: number];

/**
 * The most times {@link HttpClient.allReceipts} waits out a 429 for one
 * page (5): the next 429 for that page ends the walk with it.
 */
export const RECEIPTS_RETRIES = 5;

/**
 * The longest {@link HttpClient.allReceipts} waits on one 429 (30 s): a
 * longer `Retry-After` is waited this long, then the page asked again.
 */
export const RECEIPTS_MAX_WAIT_MS = 30_000;

/** The `Retry-After` (ms) of each 429 call() refused with, when it named one in seconds. */
const retryAfters = new WeakMap<PigeonError, number>();

/**
 * How long to wait before asking again after the 429 `e`: the answer's
 * `Retry-After` in seconds, else the error's `details.retryAfterMs` (the
 * broker sends both), else 1 s; at most {@link RECEIPTS_MAX_WAIT_MS}.
 */
function retryWaitMs(e: PigeonError): number {
  const told = retryAfters.get(e);
  const ms = e.details.retryAfterMs;
  const wait = told ?? (typeof ms === "number" && Number.isFinite(ms) && ms >= 0 ? ms : 1000);
  return Math.min(wait, RECEIPTS_MAX_WAIT_MS);
}

/** A `Retry-After` of delay-seconds (RFC 9110), in ms; undefined for any other (an HTTP date, garbage). */
function retryAfterMs(v: string | null | undefined): number | undefined {
  const m = typeof v === "string" ? /^\s*([0-9]{1,10})\s*$/.exec(v) : null;
  return m ? Number(m[1]) * 1000 : undefined;
}

/** Resolves after `ms`, or rejects with `signal`'s reason once it aborts. */
function abortableSleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, timerMs(ms));
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** An HTTP method: a token (RFC 9110), letters only as every route's is. */
const METHOD = /^[A-Za-z]{1,16}$/;
/** A path of this client's routes: from the origin's root, no control characters, spaces or backslashes. */
const PATH = /^\/(?!\/)[^\u0000-\u0020\u007f\\]*$/;

/**
 * Percent-encodes one path segment (principal ids hold "/" and ":"). An
 * empty segment, "." or ".." is refused (INVALID_ARGUMENT): the URL parser
 * removes dot segments, so `removeRole("..", "admin")`
 * would send DELETE /v1/roles/admin and `removeRole(account, "..")` DELETE
 * /v1/accounts/{account}.
 */
export const segment = (s: string): string => {
  if (s === "" || s === "." || s === "..") throw new PigeonError("INVALID_ARGUMENT", `${JSON.stringify(s)} cannot be a path segment`);
  return encodeURIComponent(s);
};

/** An HTTP client for one bearer token. */
export class HttpClient {
  readonly baseUrl: string;
  /** the contract of the last connect() */
  contract: Contract | undefined;
  private readonly fetchFn: typeof fetch;

  // A #private field: console.log and util.inspect do not show it.
  readonly #token: string;

  constructor(baseUrl: string, token: string, private readonly options: HttpOptions = {}) {
    this.#token = token;
    const u = new URL(baseUrl);
    if (u.protocol === "ws:") u.protocol = "http:";
    if (u.protocol === "wss:") u.protocol = "https:";
    this.baseUrl = u.origin;
    this.fetchFn = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /**
   * One call: the parsed JSON body, or the server's typed error with its
   * status. `signal` abandons it: the call rejects with the signal's
   * reason.
   */
  async call<T = any>(method: string, path: string, body?: unknown, opts: { contract?: boolean; timeoutMs?: number; signal?: AbortSignal } = {}): Promise<T> {
    return this.send<T>(method, path, body, opts);
  }

  /**
   * call(); with `list`, a 2xx answer whose member `list[0]` is an array of
   * more than `list[1]` entries is refused, BAD_FRAME, before it is parsed.
   */
  private async send<T>(method: string, path: string, body: unknown, opts: { contract?: boolean; timeoutMs?: number; signal?: AbortSignal }, list?: Listed): Promise<T> {
    // The path is appended to the origin: "@evil.example/…" or
    // ".evil.example/…" would send the token to another host, a CR or LF
    // (which the URL parser drops) change the route.
    if (typeof method !== "string" || !METHOD.test(method)) throw new PigeonError("INVALID_ARGUMENT", `not an HTTP method: ${JSON.stringify(method)}`);
    if (typeof path !== "string" || !PATH.test(path)) throw new PigeonError("INVALID_ARGUMENT", `not a path from the server's root: ${JSON.stringify(path)}`);
    const headers: Record<string, string> = { authorization: `Bearer ${this.#token}` };
    if (this.options.region) headers["x-pigeon-region"] = this.options.region;
    if (opts.contract) {
      if (!this.contract) throw new PigeonError("CONTRACT_REQUIRED", "connect() first: no contract");
      headers["x-pigeon-contract"] = this.contract.id;
    }
    if (body !== undefined) headers["content-type"] = "application/json";
    const caller = opts.signal;
    if (caller?.aborted) throw caller.reason;
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), timerMs(opts.timeoutMs ?? this.options.timeoutMs ?? 30_000));
    const onAbort = () => ctl.abort();
    caller?.addEventListener("abort", onAbort, { once: true });
    let res: Response;
    let text: string;
    try {
      // A string holding a lone surrogate: INVALID_UTF8 here, nothing sent.
      const sent = body === undefined ? undefined : frameText(body);
      res = await this.fetchFn(this.baseUrl + path, {
        method,
        headers,
        body: sent,
        signal: ctl.signal,
        // The broker never redirects; a redirect (a proxy's, a hostile
        // server's) would send the body and the contract to another origin.
        redirect: "error",
      });
      text = await readBounded(res, this.options.maxResponseBytes ?? MAX_RESPONSE_BYTES, ctl);
    } catch (e) {
      if (caller?.aborted) throw caller.reason;
      if (e instanceof PigeonError) throw e;
      if (ctl.signal.aborted) throw new PigeonError(ClientCodes.TIMEOUT, `${method} ${path} timed out`);
      throw transportError(`${method} ${path} failed: ${String((e as Error)?.message ?? e)}`, e);
    } finally {
      clearTimeout(timer);
      caller?.removeEventListener("abort", onAbort);
    }
    if (list && res.ok && listsMoreThan(text, list[0], list[1])) {
      const [member, most] = list;
      throw new PigeonError(ClientCodes.BAD_FRAME, `${method} ${path}: the answer lists more than ${most} ${member}, more than the server sends in one answer`, { member, most }, res.status);
    }
    let parsed: any;
    try {
      parsed = text === "" ? {} : JSON.parse(text);
      markSpelledIntegers(text, parsed); // a signature's "v", a message's sequence or hops, spelled 2.0 or 2e0
      markSpelledAttempts(text, parsed); // a lease attempt spelled 1.0 or 1e0
    } catch (e) {
      throw new PigeonError(ClientCodes.BAD_FRAME, `${method} ${path}: the answer (HTTP ${res.status}) is not JSON`, {}, res.status, { cause: e });
    }
    // As a WebSocket frame: an object with two members of one name (at any
    // depth; JSON.parse kept the last, another reader the first) or a
    // string holding a lone surrogate is refused, the server's error too.
    const dup = duplicateMember(text);
    if (dup || loneSurrogate(text)) {
      const why = dup ? `the member ${JSON.stringify(dup.name)} twice in one object` : "a string holding a lone surrogate";
      throw new PigeonError(ClientCodes.BAD_FRAME, `${method} ${path}: the answer (HTTP ${res.status}) has ${why}`, {}, res.status);
    }
    if (!res.ok) {
      const err = parsed && parsed.error ? fromWire(parsed.error, res.status) : new PigeonError("INTERNAL", `${method} ${path}: HTTP ${res.status}`, {}, res.status);
      const wait = res.status === 429 ? retryAfterMs(res.headers?.get?.("retry-after")) : undefined;
      if (wait !== undefined) retryAfters.set(err, wait);
      throw err;
    }
    // Every answer of the API is an object: null, an array or a number
    // would make the caller's reading of it throw a TypeError.
    if (!isObj(parsed)) throw new PigeonError(ClientCodes.BAD_FRAME, `${method} ${path}: the answer (HTTP ${res.status}) is not a JSON object`, {}, res.status);
    return parsed as T;
  }

  /** call(), then `check` of the answer: BAD_FRAME when the server's answer is not of the shape the route has. */
  private async expect<T>(what: string, check: (r: Record<string, unknown>) => boolean, method: string, path: string, body?: unknown, opts: { contract?: boolean; timeoutMs?: number; signal?: AbortSignal; list?: Listed } = {}): Promise<T> {
    const { list, ...callOpts } = opts;
    const r = await this.send<Record<string, unknown>>(method, path, body, callOpts, list);
    if (!check(r)) throw new PigeonError(ClientCodes.BAD_FRAME, `${method} ${path}: the answer has no ${what}`, {});
    return r as T;
  }

  /** Negotiates a contract on `subjects` (POST /v1/contracts); later calls use it. */
  async connect(subjects: string[], options: { ttl?: number } = {}): Promise<Contract> {
    const body: Record<string, unknown> = { subjects };
    if (options.ttl !== undefined) body.ttlMs = finiteMs("ttl", options.ttl);
    const r = await this.expect<{ contract: Contract }>("contract", hasContract, "POST", "/v1/contracts", body);
    this.contract = r.contract;
    return r.contract;
  }

  /** Reads a contract (its holder only). */
  async getContract(id = this.contract?.id ?? ""): Promise<Contract> {
    return (await this.expect<{ contract: Contract }>("contract", hasContract, "GET", `/v1/contracts/${segment(id)}`)).contract;
  }

  /** Revokes a contract (its holder only); default: the current one. */
  async revoke(id = this.contract?.id ?? ""): Promise<void> {
    await this.call("DELETE", `/v1/contracts/${segment(id)}`);
  }

  /** Publishes one message: `accepted` (202) or `duplicate` (200), else the gate's error. */
  async publish(message: Message): Promise<Decision> {
    return heldDecision(await this.expect<Record<string, unknown>>("decision", isObj, "POST", "/v1/messages", message, { contract: true }));
  }

  /**
   * Publishes a request and waits for its reply (POST /v1/requests):
   * REQUEST_TIMEOUT (504) when none comes within `timeout` ms; BAD_FRAME
   * for a reply whose sequence or hops the client cannot hold, or that
   * does not answer the request (as Session.request: an id is
   * drawn for a request without an id, a signature or an idempotency key,
   * and `message` itself is not changed).
   */
  async request(message: Message, options: { timeout?: number } = {}): Promise<Message> {
    const req = requestOf(message);
    const body: Record<string, unknown> = { message: req };
    if (options.timeout !== undefined) body.timeoutMs = finiteMs("timeout", options.timeout);
    const r = await this.expect<{ status: string; message: Message }>("reply", (r) => isObj(r.message), "POST", "/v1/requests", body, {
      contract: true,
      timeoutMs: (options.timeout ?? 30_000) + 10_000,
    });
    const unheld = unheldMessage(r.message, "reply") ?? unansweringReply(req, r.message);
    if (unheld) throw unheld;
    return r.message;
  }

  /**
   * Pulls up to `max` messages; `ack: "explicit"` leases them until
   * ack/nack (pass the message received: its lease attempt is sent back;
   * see {@link HttpClient.receiveAttempts}). One whose sequence or hops the
   * client cannot hold, or an entry that is not a message object, is left
   * out, its BAD_FRAME to the onError option (see heldMessages).
   */
  async receive(subject: string, options: { max?: number; ack?: "auto" | "explicit" } = {}): Promise<Message[]> {
    return (await this.receiveAttempts(subject, options)).messages;
  }

  /**
   * {@link HttpClient.receive}, with the attempt of each message's lease in
   * step with the messages (1 for its first delivery; 0 when not leased:
   * an automatic receive, a pubsub subject, a server that does not tell
   * it). The client keeps it with each message object it hands out
   * ({@link HttpClient.attemptOf}), and ack and nack of that message send
   * it: once its lease ran out and the message was leased again, even to
   * another worker of the same principal, the late answer settles nothing
   * (403 ACK_NOT_ALLOWED) instead of the newer lease. An answer whose
   * `attempts` is not a list in step with the messages is refused,
   * BAD_FRAME; a message whose attempt is not an integer of 1 to 2^31-1
   * (MAX_ATTEMPT) is left out, its BAD_FRAME to onError (see heldMessages).
   */
  async receiveAttempts(subject: string, options: { max?: number; ack?: "auto" | "explicit" } = {}): Promise<Pulled> {
    const r = await this.expect<{ messages?: Message[] | null; attempts?: unknown }>("messages", (r) => isList(r.messages), "POST", `/v1/subjects/${segment(subject)}/receive`, options, { contract: true });
    const list = r.messages ?? [];
    const attempts = pullAttempts({ messages: list, attempts: r.attempts }, "receive");
    const kept = heldMessages(list, "receive", (e) => this.report(e), attempts);
    return { messages: kept, attempts: kept.map(attemptOf) };
  }

  /**
   * The lease attempt an explicit receive answered `message` with (the
   * message object it handed out; see {@link HttpClient.receiveAttempts});
   * 0 when not leased or not handed out by a receive.
   */
  attemptOf(message: Message): number {
    return attemptOf(message);
  }

  /**
   * Settles a message leased by an explicit receive: pass the message
   * received (its id, sequence and lease attempt are sent), or its id,
   * with `sequence` the message's sequence and `attempt` its lease's. With
   * the sequence, a late ack never settles a newer message published under
   * the id once retention trimmed the one received; with the attempt, never
   * the newer lease of the message (another worker's of the same
   * principal) once the one received ran out (403 ACK_NOT_ALLOWED).
   */
  async ack(subject: string, message: string | Message, options: SettleOptions = {}): Promise<void> {
    await this.call("POST", `/v1/subjects/${segment(subject)}/ack`, settleBody(message, options.sequence, options.attempt), { contract: true });
  }

  /**
   * Gives a leased message back, due again after `delayMs` (at most 12
   * hours, the most the server takes: a longer one is shortened to it);
   * `message`, `sequence` and `attempt` as for {@link HttpClient.ack}.
   */
  async nack(subject: string, message: string | Message, options: SettleOptions & { delayMs?: number } = {}): Promise<void> {
    const body: Record<string, unknown> = settleBody(message, options.sequence, options.attempt);
    if (options.delayMs !== undefined) body.delayMs = retryDelayMs(finiteMs("delayMs", options.delayMs));
    await this.call("POST", `/v1/subjects/${segment(subject)}/nack`, body, { contract: true });
  }

  /** Returns retained messages in sequence order, less any left out as receive's are. */
  async replay(subject: string, options: ReplayOptions = {}): Promise<Message[]> {
    const r = await this.expect<{ messages?: Message[] | null }>("messages", (r) => isList(r.messages), "POST", `/v1/subjects/${segment(subject)}/replay`, options, { contract: true });
    return heldMessages(r.messages ?? [], "replay", (e) => this.report(e));
  }

  /** Hands err to the onError option, else to the console (control characters escaped: the text may be a server's). */
  private report(err: PigeonError): void {
    const fn = this.options.onError;
    if (!fn) {
      console.error(`pigeon: ${escapeControls(String(err.code))}: ${escapeControls(String(err.message))}`);
      return;
    }
    try {
      fn(err);
    } catch {
      /* a listener's own failure is its own */
    }
  }

  /** The catalog. */
  async subjects(): Promise<Record<string, unknown>[]> {
    return (await this.expect<{ subjects: Record<string, unknown>[] }>("subjects", (r) => isObjArray(r.subjects), "GET", "/v1/subjects")).subjects ?? [];
  }

  /**
   * One page of the hash-chained audit records, oldest first (role
   * auditor): at most `max` from audit sequence `from` on; the next page is
   * `from` set past the page's last `seq`. Each call asks for one page and
   * holds it alone (its answer read up to maxResponseBytes): nothing
   * gathers records across pages. BAD_FRAME for an answer whose `records`
   * is not a list of objects, or lists more than {@link MAX_PAGE_RECORDS}
   * (refused before they are parsed).
   */
  async audit(options: { from?: number; max?: number } = {}): Promise<Record<string, any>[]> {
    return (await this.expect<{ records: Record<string, any>[] }>("records", (r) => isObjArray(r.records), "GET", `/v1/audit${query(options)}`, undefined, { list: ["records", MAX_PAGE_RECORDS] })).records ?? [];
  }

  /**
   * One page of the receipts of message `id` (role auditor; GET
   * /v1/audit/receipts/{id}): who was handed it, and when, in order of the
   * audit record, then of the message's sequence. At most `max` (the
   * server's default and cap: 10 000); `after` is a page's `next` (or an
   * audit sequence alone), and a malformed one is the server's 400
   * BAD_REQUEST. `next` is there when more are recorded: ask again with
   * `after` set to it, or walk every page with
   * {@link HttpClient.allReceipts}. 429 RATE_LIMITED (with its retry
   * delay) while the server reads the log for two others, or for this
   * principal's one before: this call does not wait it out (one request,
   * the caller's to retry), allReceipts does. `signal` abandons the call.
   *
   * An answer is refused, BAD_FRAME, unless `receipts` is a list of receipt
   * objects (strings where the route has strings; `auditSeq` and `seq`
   * integers of 0 to 2^53-1, which JSON.parse keeps exactly), each after
   * `after` and after the one before it, and `next` is absent or a cursor
   * (digits, or digits, a colon and digits, each at most 2^64-1) of a
   * page that holds a receipt, not before its last one: a page never
   * repeats a receipt, and a `next` never leads back. An answer listing more
   * than {@link MAX_PAGE_RECORDS} receipts is refused before they are parsed.
   */
  async receipts(id: string, options: { after?: string; max?: number; signal?: AbortSignal } = {}): Promise<ReceiptsPage> {
    const path = `/v1/audit/receipts/${segment(id)}${query({ after: options.after, max: options.max })}`;
    const r = await this.expect<{ receipts?: unknown; next?: unknown }>("receipts", (r) => isList(r.receipts), "GET", path, undefined, { signal: options.signal, list: ["receipts", MAX_PAGE_RECORDS] });
    return receiptsPage(r, options.after, `GET ${path}`);
  }

  /**
   * Every receipt of message `id` (role auditor), page after page of at
   * most `max` ({@link HttpClient.receipts}), following each page's
   * `next` until a page has none. Each page comes after the one before it
   * (receipts refuses a `next` that repeats or goes back, BAD_FRAME), so a
   * server cannot make the walk ask the same page forever. Each page
   * reads the log anew: a delivery recorded meanwhile comes in a later
   * page.
   *
   * A 429 (the server reading the log for two other walks, or for this
   * principal's one before) is waited out: the walk waits the answer's
   * `Retry-After` (else its `retryAfterMs`, else 1 s; at most
   * {@link RECEIPTS_MAX_WAIT_MS}), then asks for the same page again, up
   * to {@link RECEIPTS_RETRIES} times a page; the next 429 ends the walk
   * with it, as any other error does. `signal` ends the walk, a wait or a
   * page's request included, with the signal's reason.
   */
  async *allReceipts(id: string, options: { max?: number; signal?: AbortSignal } = {}): AsyncGenerator<Receipt, void, undefined> {
    const { max, signal } = options;
    let after: string | undefined;
    for (;;) {
      let page: ReceiptsPage;
      for (let waited = 0; ; waited++) {
        try {
          page = await this.receipts(id, { after, max, signal });
          break;
        } catch (e) {
          if (signal?.aborted) throw signal.reason;
          if (!(e instanceof PigeonError) || e.status !== 429 || waited >= RECEIPTS_RETRIES) throw e;
          await abortableSleep(retryWaitMs(e), signal);
        }
      }
      yield* page.receipts;
      if (page.next === undefined) return;
      after = page.next;
    }
  }

  /**
   * One page of the quarantined messages, redacted, oldest first (role
   * auditor). A page stops at `max` or the server's read budget; the next
   * page is `since` and `after` set to the `time` and `id` of the page's
   * last record. Each call asks for one page and holds it alone (its
   * answer read up to maxResponseBytes): walking the pages is the
   * caller's, a page at a time, so nothing here gathers records across
   * pages (the CLI's `quarantine list`, which walks them, stops at 1000
   * records by default). BAD_FRAME for an answer whose `records` is not a
   * list of objects, or lists more than {@link MAX_PAGE_RECORDS} (refused
   * before they are parsed).
   */
  async quarantine(options: { since?: string; after?: string; max?: number } = {}): Promise<Record<string, any>[]> {
    return (await this.expect<{ records: Record<string, any>[] }>("records", (r) => isObjArray(r.records), "GET", `/v1/quarantine${query(options)}`, undefined, { list: ["records", MAX_PAGE_RECORDS] })).records ?? [];
  }

  /** One quarantine record (role auditor); BAD_FRAME for an answer whose `record` is not an object with a string `id`. */
  async quarantineRecord(id: string): Promise<Record<string, any>> {
    return (await this.expect<{ record: Record<string, any> }>("record", (r) => hasStrings(r.record, "id"), "GET", `/v1/quarantine/${segment(id)}`)).record;
  }

  /** Re-publishes a quarantined message through every gate under this client's contract. */
  async release(id: string): Promise<Decision> {
    return heldDecision(await this.expect<Record<string, unknown>>("decision", isObj, "POST", `/v1/quarantine/${segment(id)}/release`, { contractId: this.contract?.id }, { contract: true }));
  }

  // ---------- accounts, roles, grants, keys ----------

  /**
   * Creates an account (admin); `ifMissing` tolerates 409 CONFLICT. The
   * account answered; BAD_FRAME for an answer whose `account` is not an
   * object with a string `id`.
   */
  async createAccount(id: string, options: { attributes?: Record<string, string>; roles?: string[]; ifMissing?: boolean } = {}): Promise<Record<string, any> | undefined> {
    const { ifMissing, ...rest } = options;
    try {
      return (await this.expect<{ account: Record<string, any> }>("account", (r) => hasStrings(r.account, "id"), "POST", "/v1/accounts", { id, ...rest })).account;
    } catch (e) {
      if (ifMissing && e instanceof PigeonError && e.status === 409) return undefined;
      throw e;
    }
  }

  /** Defines a role (admin); the role answered, BAD_FRAME for an answer whose `role` is not an object with a string `name`. */
  async putRole(name: string, permissions: { subject: string; operations: string[]; selector?: string }[]): Promise<Record<string, any>> {
    return (await this.expect<{ role: Record<string, any> }>("role", (r) => hasStrings(r.role, "name"), "PUT", `/v1/roles/${segment(name)}`, { permissions })).role;
  }

  /** Gives an account a role (admin). */
  async addRole(account: string, role: string): Promise<void> {
    await this.call("PUT", `/v1/accounts/${segment(account)}/roles/${segment(role)}`);
  }

  /** Takes a role from an account (admin). */
  async removeRole(account: string, role: string): Promise<void> {
    await this.call("DELETE", `/v1/accounts/${segment(account)}/roles/${segment(role)}`);
  }

  /** Issues a grant token for some of an account's roles (admin); BAD_FRAME for an answer without the three strings. */
  async issueGrant(account: string, roles: string[], options: { ttl?: number } = {}): Promise<{ token: string; jti: string; expiresAt: string }> {
    const body: Record<string, unknown> = { account, roles };
    if (options.ttl !== undefined) body.ttlMs = finiteMs("ttl", options.ttl);
    return this.expect("token, jti and expiresAt strings", (r) => hasStrings(r, "token", "jti", "expiresAt"), "POST", "/v1/grants", body);
  }

  /** Publishes an account's public keys (the account itself or an admin). */
  async publishKeys(account: string, keys: PublicKey[]): Promise<void> {
    await this.call("PUT", `/v1/accounts/${segment(account)}/keys`, { keys });
  }

  /**
   * An account's published keys (any authenticated principal), read as
   * every client reads them (docs/protocol.md, "Published keys"). The
   * answer is the object the server sends, `{"keys":[…]}` (`[]` for an
   * account without keys, or no account): any other answer (`keys` null,
   * absent or not a list; a bare list, a number, null; an empty body) is
   * refused, BAD_FRAME, not read as no keys; so is a list of more than
   * {@link MAX_ACCOUNT_KEYS} entries (before they are parsed). The list is
   * read entry by entry: an entry that is no key as the server lists one
   * (see isKeyEntry: not an object; a kid, use, alg or key absent or not a
   * string; a kid, use, alg or key the server never lists) is left out, and
   * costs the caller none of the other keys, as in the Python and Rust
   * clients.
   */
  async fetchKeys(account: string): Promise<PublicKey[]> {
    const r = await this.expect<{ keys: unknown[] }>("list of keys", (r) => Array.isArray(r.keys), "GET", `/v1/accounts/${segment(account)}/keys`, undefined, { list: ["keys", MAX_ACCOUNT_KEYS] });
    return r.keys.filter(isKeyEntry);
  }
}

/**
 * How old (ms) a cached key list may be when {@link KeyCache.encryptionKey}
 * picks the key to seal for (10 s), whatever the cache's `ttlMs`: an
 * account that removes an encryption key from its list (its private half
 * leaked) is sealed for under it by a cache's users for at most this long
 * after the change (and a fetch's round trip), not for the `ttlMs`.
 * Verification has its own bound, {@link VERIFY_MAX_AGE_MS}.
 */
export const SEAL_MAX_AGE_MS = 10_000;

/**
 * How old (ms) a cached key list may be when {@link KeyCache.verify} checks
 * a signature with it (10 s), whatever the cache's `ttlMs`: an account that
 * removes a signing key from its list (its private half leaked) has
 * signatures made with it accepted by a cache's users for at most this
 * long after the change (and a fetch's round trip), not for the `ttlMs`.
 * {@link KeyCache.get} keeps the list for the `ttlMs`: verify through
 * {@link KeyCache.verify}, not with the list `get` returns.
 */
export const VERIFY_MAX_AGE_MS = 10_000;

/**
 * Caches accounts' published keys for `ttlMs` (default 5 min); sealing
 * takes lists at most `sealMaxAgeMs` old (default {@link SEAL_MAX_AGE_MS};
 * see {@link KeyCache.encryptionKey}), verification lists at most
 * `verifyMaxAgeMs` old (default {@link VERIFY_MAX_AGE_MS}; see
 * {@link KeyCache.verify}).
 */
export class KeyCache {
  private readonly cache = new Map<string, { at: number; keys: Promise<PublicKey[]> }>();
  constructor(
    private readonly client: HttpClient,
    private readonly ttlMs = 300_000,
    private readonly sealMaxAgeMs = SEAL_MAX_AGE_MS,
    private readonly verifyMaxAgeMs = VERIFY_MAX_AGE_MS,
  ) {}

  /**
   * The account's keys, from the cache while younger than `ttlMs`. Not for
   * verifying signatures: a key the account removed stays in the list
   * returned for the `ttlMs`; {@link KeyCache.verify} bounds that.
   */
  get(account: string): Promise<PublicKey[]> {
    const hit = this.cache.get(account);
    if (hit && Date.now() - hit.at < this.ttlMs) return hit.keys;
    return this.refresh(account);
  }

  /**
   * The key to seal for `account` now (for {@link sealFor}: `sealFor(clear,
   * payload, [key], me)`): its valid X25519 encryption key with the latest
   * notBefore (`selectKey(keys, "", "enc")`). Taken from a cached list no
   * older than `sealMaxAgeMs` (and `ttlMs`), else the list is read again;
   * so is a cached list in which no key is valid now (the one cached is
   * past its window). INVALID_ARGUMENT when the list read holds none.
   */
  async encryptionKey(account: string): Promise<PublicKey> {
    const hit = this.cache.get(account);
    if (hit && Date.now() - hit.at < Math.min(this.ttlMs, this.sealMaxAgeMs)) {
      const k = sealingKey(await hit.keys);
      if (k) return k;
    }
    const k = sealingKey(await this.refresh(account));
    if (!k) throw new PigeonError("INVALID_ARGUMENT", "the recipient publishes no encryption key valid now");
    return k;
  }

  /**
   * Verifies m's signature with `account`'s published keys
   * ({@link verifyMessageWithKeys}: the key of the signature's kid, use
   * sig, valid at the message time), from a cached list no older than
   * `verifyMaxAgeMs` (and `ttlMs`), else the list is read again first: a
   * signing key the account removed (leaked) verifies for at most
   * `verifyMaxAgeMs` after its removal, not for the `ttlMs`. A failure does
   * not read the list again (a stream of bad kids costs at most one fetch
   * per `verifyMaxAgeMs`): a key published less than that ago may not
   * verify yet, so publish a new key ahead of its notBefore
   * (docs/security.md, "Rotation"). SIGNATURE_REQUIRED or
   * SIGNATURE_INVALID as verifyMessageWithKeys; a failed fetch rejects
   * with its error.
   */
  async verify(account: string, m: Partial<Message>): Promise<void> {
    const hit = this.cache.get(account);
    const keys = hit && Date.now() - hit.at < Math.min(this.ttlMs, this.verifyMaxAgeMs) ? await hit.keys : await this.refresh(account);
    verifyMessageWithKeys(m, keys);
  }

  /** Fetches the account's keys again. */
  refresh(account: string): Promise<PublicKey[]> {
    const keys = this.client.fetchKeys(account);
    this.cache.set(account, { at: Date.now(), keys });
    keys.catch(() => this.cache.delete(account));
    return keys;
  }
}

/** The key of `keys` to seal for now: the valid enc key with the latest notBefore, when it is an X25519 key. */
function sealingKey(keys: readonly PublicKey[]): PublicKey | undefined {
  const k = selectKey(keys, "", "enc");
  return k && k.alg === "x25519" ? k : undefined;
}

function query(o: Record<string, unknown>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(o)) if (v !== undefined) q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : "";
}

/** The largest number of a receipt cursor: each of its two is one of the server's uint64s. */
const U64_MAX = (1n << 64n) - 1n;
/** A receipt cursor as the server writes and reads it: an audit sequence, or one, a colon and a message sequence. */
const CURSOR = /^([0-9]{1,20})(?::([0-9]{1,20}))?$/;

/**
 * The place `s` names in the order of receipts, [auditSeq, seq] (an audit
 * sequence alone is after every receipt of its record); undefined unless
 * it is a cursor the server reads.
 */
function receiptCursor(s: unknown): [bigint, bigint] | undefined {
  const m = typeof s === "string" ? CURSOR.exec(s) : null;
  if (!m) return undefined;
  const c: [bigint, bigint] = [BigInt(m[1]), m[2] === undefined ? U64_MAX : BigInt(m[2])];
  return c[0] <= U64_MAX && c[1] <= U64_MAX ? c : undefined;
}

const cursorBefore = (a: [bigint, bigint], b: [bigint, bigint]): boolean => a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]);
/** An integer JSON.parse kept exactly: 0 to 2^53-1. */
const isHeldCount = (x: unknown): x is number => typeof x === "number" && Number.isSafeInteger(x) && x >= 0;

/** Why `x` is not a receipt of the server's, or undefined when it is one. */
function receiptProblem(x: unknown): string | undefined {
  if (!isObj(x)) return "is not an object";
  for (const k of ["event", "time", "principal", "contractId"]) if (typeof x[k] !== "string") return `has no string ${k}`;
  for (const k of ["ref", "subject"]) if (x[k] !== undefined && x[k] !== null && typeof x[k] !== "string") return `has a ${k} that is not a string`;
  if (!isHeldCount(x.auditSeq)) return "has an auditSeq that is not an integer of 0 to 2^53-1";
  if (x.seq !== undefined && x.seq !== null && !isHeldCount(x.seq)) return "has a seq that is not an integer of 0 to 2^53-1";
  return undefined;
}

/**
 * The page a receipts answer holds (see {@link HttpClient.receipts}), or
 * BAD_FRAME: a receipt that is not the server's, or out of order (not after
 * `after`, which the caller gave, or the one before it), or a `next` that
 * is no cursor, comes with no receipt, or comes before the page's last.
 */
function receiptsPage(r: { receipts?: unknown; next?: unknown }, after: string | undefined, what: string): ReceiptsPage {
  const bad = (why: string, details: Record<string, unknown> = {}) => new PigeonError(ClientCodes.BAD_FRAME, `${what}: the answer has ${why}`, details);
  const list = (r.receipts ?? []) as unknown[];
  let last = after ? receiptCursor(after) : undefined;
  for (let i = 0; i < list.length; i++) {
    const x = list[i] as Receipt;
    const why = receiptProblem(x);
    if (why) throw bad(`a receipt (entry ${i}) that ${why}`, { index: i });
    const c: [bigint, bigint] = [BigInt(x.auditSeq), BigInt(x.seq ?? 0)];
    if (last && !cursorBefore(last, c)) {
      throw bad(`a receipt (entry ${i}) that does not come after ${i === 0 ? "the cursor asked" : "the one before it"}`, { index: i, auditSeq: x.auditSeq, seq: x.seq });
    }
    last = c;
  }
  if (r.next === undefined || r.next === null) return { receipts: list as Receipt[] };
  const next = receiptCursor(r.next);
  if (!next) throw bad("a next that is not a cursor (digits, or digits, a colon and digits, each at most 2^64-1)");
  if (list.length === 0 || !last) throw bad("a next and no receipt: the next page would ask the same again");
  if (cursorBefore(next, last)) throw bad(`a next (${r.next as string}) before the page's last receipt: the next page would repeat receipts`);
  return { receipts: list as Receipt[], next: r.next as string };
}

const hasContract = (r: Record<string, unknown>): boolean => isContract(r.contract);
/**
 * A list; absent or null (a server that omits an empty list) is taken as
 * none. Its entries are checked one by one (see heldMessages).
 */
const isList = (x: unknown): boolean => x === undefined || x === null || Array.isArray(x);
/** A list of objects; absent or null (a server that omits an empty list) is taken as none. */
const isObjArray = (x: unknown): boolean => x === undefined || x === null || (Array.isArray(x) && x.every(isObj));

/**
 * The response's body as text, at most `limit` bytes: beyond, the read is
 * cancelled (and the request aborted) and the call fails with
 * PAYLOAD_TOO_LARGE, before the rest is read.
 */
async function readBounded(res: Response, limit: number, ctl: AbortController): Promise<string> {
  const declared = Number(res.headers?.get?.("content-length") ?? Number.NaN);
  const tooLarge = () => {
    ctl.abort();
    return new PigeonError("PAYLOAD_TOO_LARGE", `the response is larger than ${limit} bytes (maxResponseBytes)`, {}, res.status);
  };
  if (declared > limit) {
    void res.body?.cancel().catch(() => undefined);
    throw tooLarge();
  }
  if (!res.body) return await res.text();
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      void reader.cancel().catch(() => undefined);
      throw tooLarge();
    }
    chunks.push(value);
  }
  const all = new Uint8Array(size);
  let o = 0;
  for (const c of chunks) {
    all.set(c, o);
    o += c.byteLength;
  }
  return new TextDecoder().decode(all);
}

/** The decision answer a publish or a release resolves with, read as a WebSocket decision is (see readDecision). */
function heldDecision(a: Record<string, unknown>): Decision {
  const d = readDecision({ status: a.status, message: a.message });
  if (d instanceof PigeonError) throw d;
  return d;
}
