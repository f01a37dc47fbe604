/**
 * The shape of a message the broker sends: each member of the envelope of
 * the type the Go struct `pigeon.Message` gives it (docs/protocol.md), as
 * the Go and Rust clients decode it. A member of another type (a `time`
 * that is a number, a `type` that is an object, a `signature` that is no
 * object, a signature's `v` that is no integer) makes a message no
 * broker's: a handler reading `message.time` as the string it is typed as
 * would be misled. JSON `null` reads as absent, as the broker reads it in
 * every envelope field. A member the envelope does not name is left as it
 * came, as every client leaves it; `data` holds any JSON value. The
 * message's `sequence` and `hops` are checked where it is handed over
 * (sequenceStored, sequenceDelivered, hopsHeld in errors.ts), since which
 * sequences are taken depends on where it came from.
 */

import { SpelledNumber } from "./spelled.js";

/** The envelope's members that hold a string (or null) in every message the broker sends. */
const STRING_MEMBERS = [
  "specversion",
  "id",
  "type",
  "source",
  "subject",
  "time",
  "intent",
  "idempotencyKey",
  "classification",
  "region",
  "replyTo",
  "correlationId",
  "reason",
  "contractId",
  "subjectId",
  "schemaId",
  "acceptedAt",
] as const;

/** The members of a signature that hold a string (or null). */
const SIGNATURE_STRINGS = ["kid", "alg", "sig"] as const;

/** A member of a message of the wrong type: its path ("time", "signature.v"), the type it must have, and what it holds. */
export interface MemberFault {
  member: string;
  want: string;
  /** what it holds: its number, its spelling ("2.0"), or its type ("number", "object", "array", "bool", …) */
  found: unknown;
}

/** What a value is, for a refusal's details: "null", "array", or its typeof. */
export function typeName(x: unknown): string {
  return x === null ? "null" : Array.isArray(x) ? "array" : typeof x;
}

/** What a refusal names of a number member: the number, its spelling ("5.0"), or its type. */
export function numberDetail(x: unknown): unknown {
  return x instanceof SpelledNumber ? x.spelling : typeof x === "number" ? x : typeName(x);
}

const absent = (x: unknown): boolean => x === undefined || x === null;
const isObj = (x: unknown): x is Record<string, unknown> => !!x && typeof x === "object" && !Array.isArray(x);

/**
 * The first member of message `m` (an object) whose type is not the
 * envelope's, undefined when there is none: a string member (see
 * STRING_MEMBERS) that is not a string; a `signature` that is not an
 * object, or whose `kid`, `alg` or `sig` is not a string, or whose `v` is
 * not an integer the client holds exactly (a fraction, a string, an
 * integer spelled 2.0 or 2e0, which the reader hands over as that
 * spelling, see sigv.ts; beyond 2^53-1, which JSON.parse rounds: no form
 * the broker or a client signs, the Go client takes up to 2^63-1 and
 * never verifies them). Each absent or null member is taken. Costs a
 * typeof per member present.
 */
export function messageFault(m: Record<string, unknown>): MemberFault | undefined {
  for (const k of STRING_MEMBERS) {
    const v = m[k];
    if (!absent(v) && typeof v !== "string") return { member: k, want: "a string", found: typeName(v) };
  }
  const sig = m.signature;
  if (absent(sig)) return undefined;
  if (!isObj(sig)) return { member: "signature", want: "an object", found: typeName(sig) };
  for (const k of SIGNATURE_STRINGS) {
    const v = sig[k];
    if (!absent(v) && typeof v !== "string") return { member: `signature.${k}`, want: "a string", found: typeName(v) };
  }
  const v = sig.v;
  if (!absent(v) && !Number.isSafeInteger(v)) {
    return { member: "signature.v", want: "an integer", found: typeof v === "number" ? v : typeName(v) };
  }
  return undefined;
}
