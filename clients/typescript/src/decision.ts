/**
 * A publish decision read as the Go client reads it (transport/ws:
 * decodeFromServer, resolvePublishes): a `publish`'s `decision` answer,
 * each slot of a `publish_batch`'s `decisions` answer, and the answer of
 * HTTP `POST /v1/messages` and of a quarantine release. Go decodes each
 * member of a decision to its type first (`status` a string; `message` an
 * envelope, `pigeon.Message`, each member of its type, `sequence` and
 * `hops` unsigned integers; a slot's `error` an error object,
 * `wire.Error`) and only then reads what it says: the error, when there is
 * one; else the message, with a status a broker answers a publish with.
 * A decision that does not read so is no broker's; the broker judged the
 * message, and may have stored it, so the publish fails saying that it may
 * have been accepted: it is not to be taken for refused and published
 * again without an idempotency key. In a `decisions` answer such a slot
 * fails its own publish alone, and the others resolve with their own.
 */

import { ClientCodes, fromWire, hopsHeld, PigeonError, sequenceHeld, type ErrorDetails } from "./errors.js";
import { messageFault, numberDetail, typeName } from "./shape.js";
import type { Decision, Message } from "./types.js";

/** Slot `index` of the `results` of a `decisions` answer to `of` messages; undefined: a lone publish's decision. */
export type SlotAt = { index: number; of: number } | undefined;

type Obj = Record<string, unknown>;
const isObj = (x: unknown): x is Obj => !!x && typeof x === "object" && !Array.isArray(x);
const absent = (x: unknown): boolean => x === undefined || x === null;

/** The statuses a broker answers a publish with (a refusal is an error). */
const ANSWERED: ReadonlySet<unknown> = new Set(["accepted", "duplicate"]);

/**
 * What `d`, a decision the server sent for one publish (`at`: where), says:
 * the Decision the publish resolves with, or the PigeonError it fails with.
 *
 * - BAD_FRAME, saying that the message may have been accepted, for a
 *   decision Go does not decode: not an object (a slot); a `status` that
 *   is not a string; a `message` that is not an object, or has a member of
 *   another type than the envelope gives it (messageFault, shape.ts), a
 *   `sequence` that is not an integer of 0 to 2^53-1 (beyond it JSON.parse
 *   rounds it to another message's; one spelled 5.0 or -0 is none, see
 *   sigv.ts) or a `hops` that is not an integer of 0 to 2^32-1; an `error`
 *   (a slot's) that is not an error object (its `code` and `message`
 *   strings, its `details` an object, each when present and not null).
 * - The server's error, for a slot whose `error` is one (as an `error`
 *   frame is read, fromWire), whatever else the slot holds.
 * - BAD_FRAME, saying that the message may have been accepted, for a
 *   decision without a message, or whose status is neither `accepted` nor
 *   `duplicate`.
 *
 * `details` names the status (when a string), the message's id (or its
 * type), the slot (`index`, `results`), and what was refused (`member`
 * and `found`, or `sequence` or `hops`).
 */
export function readDecision(d: unknown, at?: SlotAt): Decision | PigeonError {
  if (!isObj(d)) return unread(at, "it is not an object", { result: typeName(d) });
  const { status, message: m, error } = d;
  const details: ErrorDetails = {};
  if (typeof status === "string") details.status = status;
  if (isObj(m)) details.messageId = typeof m.id === "string" ? m.id : typeName(m.id);
  if (!absent(status) && typeof status !== "string") return unread(at, "its status is not a string", { ...details, status: typeName(status) });
  if (!absent(m)) {
    if (!isObj(m)) return unread(at, "its message is not an object", { ...details, message: typeName(m) });
    const fault = messageFault(m);
    if (fault) return unread(at, `its message's ${fault.member} is not ${fault.want}`, { ...details, member: fault.member, found: fault.found });
    if (!sequenceHeld(m)) {
      return unread(at, "its message's sequence is not an integer of 0 to 2^53-1, which this client cannot hold exactly", { ...details, sequence: numberDetail(m.sequence) });
    }
    if (!hopsHeld(m)) return unread(at, "its message's hops is not an integer of 0 to 2^32-1", { ...details, hops: numberDetail(m.hops) });
  }
  if (at && !absent(error)) {
    const fault = errorFault(error);
    if (fault) return unread(at, `its error ${fault}`, { ...details, error: isObj(error) ? "an object" : typeName(error) });
    return fromWire(error);
  }
  if (absent(m)) return unread(at, "it has no message", details);
  if (!ANSWERED.has(status)) {
    const said = typeof status === "string" ? `status ${quoted(status)}` : "no status";
    return new PigeonError(ClientCodes.BAD_FRAME, `the server answered ${what(at)} with ${said}, which no broker sends: the message may have been accepted`, { ...details, ...where(at) });
  }
  return { status: status as Decision["status"], message: m as Message };
}

/**
 * Why `e`, a slot's error, is no error object (`wire.Error`: a `code` and
 * a `message` that are strings, `details` an object, each when present
 * and not null); undefined when it is one.
 */
function errorFault(e: unknown): string | undefined {
  if (!isObj(e)) return "is not an object";
  for (const k of ["code", "message"] as const) {
    if (!absent(e[k]) && typeof e[k] !== "string") return `${k} is not a string`;
  }
  if (!absent(e.details) && !isObj(e.details)) return "details is not an object";
  return undefined;
}

/** The BAD_FRAME of a decision that cannot be read (why), saying that the message may have been accepted. */
function unread(at: SlotAt, why: string, details: ErrorDetails): PigeonError {
  return new PigeonError(
    ClientCodes.BAD_FRAME,
    `the server's answer for ${what(at)} could not be read (${why}): the message may have been accepted`,
    { ...details, ...where(at) },
  );
}

/** "this message", with its slot in a batch. */
function what(at: SlotAt): string {
  return at ? `this message (index ${at.index} of the ${at.of} results of its publish_batch)` : "this message";
}

/** A slot's place, for details. */
function where(at: SlotAt): ErrorDetails {
  return at ? { index: at.index, results: at.of } : {};
}

/** s as a JSON string, its first 64 characters when longer. */
function quoted(s: string): string {
  return s.length > 64 ? `${JSON.stringify(s.slice(0, 64))}…` : JSON.stringify(s);
}
