/**
 * A signature's `v`, or a message's `sequence` or `hops`, spelled as a
 * non-integer number, and a message's `sequence` or `hops` spelled -0.
 * JSON.parse reads `"v": 2.0` or `2e0` as 2, the second signing form,
 * `"sequence": 5.0` as 5 and `"hops": -0` as a zero, where the Go, Python
 * and Rust clients refuse a message so spelling 5.0 (their decoders keep
 * the spelling: a float is no integer), and the Go client one so spelling
 * -0 (it decodes `sequence` and `hops` as unsigned integers, which take no
 * sign). The frame text
 * is the only place the spelling survives, so the reader looks for it
 * there, as it does for a lease attempt (attempts.ts): a cheap test of
 * each frame (see suspect) for a `"v"`, `"sequence"` or `"hops"` member
 * holding a number with a fraction or an exponent or spelled -0, or for
 * an escape that could spell the name (ESCAPED_LETTER: JSON.parse reads
 * `"\u0076"` as `v`); only when one is there is the text walked
 * (spelledNumbers, spelled.ts, which attempts.ts shares) to find which
 * envelope members those numbers were. Such a signature's `v` becomes its
 * text ("2.0"), which names no form: verifyMessage refuses it
 * (SIGNATURE_INVALID), canonicalSigningInput too (ENVELOPE_INVALID), and
 * the message check (messageFault, shape.ts) refuses the message that
 * holds it, as it refuses one whose `sequence` or `hops` is a
 * {@link SpelledNumber}. The `v` of a sealed payload (the message data's
 * `sealed` member, seal.SealData) is marked as a signature's: the Go,
 * Python and Rust clients decode it as an integer and refuse `1.0` or
 * `1e0`, so openData refuses the spelling too (SEAL_TAMPERED). A `v` of
 * -0 is left as the zero JSON.parse read (a signed integer to Go, whose
 * -0 is 0; no form this client verifies either). A `"v"`, `"sequence"` or
 * `"hops"` anywhere else (in data) is left as JSON.parse read it.
 */
import { ESCAPED_LETTER, SpelledNumber, spelledNumbers } from "./spelled.js";

/** A `"v"`, `"sequence"` or `"hops"` member whose number has a fraction or an exponent, or is -0. */
const SUSPECT = /"(?:v|sequence|hops)"\s*:\s*(?:-?\d+[.eE]|-0)/;

/** The names SUSPECT looks for, as a long text is searched for them. */
const NAMES = ['"v"', '"sequence"', '"hops"'];

/** From this length on, indexOf finds the members faster than SUSPECT scans the text. */
const LONG_TEXT = 1 << 20;

/**
 * Whether text holds a `"v"`, `"sequence"` or `"hops"` member whose number
 * has a fraction or an exponent, or is -0: the cheap test, on every frame. A regular
 * expression on shorter texts; on a long one (large data, few messages)
 * indexOf finds each member of those names (a few per message) and what
 * follows it is read by hand.
 */
function suspect(text: string): boolean {
  if (text.length < LONG_TEXT) return SUSPECT.test(text);
  for (const name of NAMES) {
    for (let i = text.indexOf(name); i >= 0; i = text.indexOf(name, i + name.length)) {
      let j = skipSpace(text, i + name.length);
      if (text.charCodeAt(j) !== 0x3a) continue; // ':'
      j = skipSpace(text, j + 1);
      const minus = text.charCodeAt(j) === 0x2d; // '-'
      if (minus) j++;
      const digits = j;
      while (isDigit(text.charCodeAt(j))) j++;
      const c = text.charCodeAt(j);
      if (j > digits && (c === 0x2e || c === 0x65 || c === 0x45)) return true; // '.', 'e', 'E'
      if (minus && j === digits + 1 && text.charCodeAt(digits) === 0x30) return true; // -0
    }
  }
  return false;
}

const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;

/** The index of the first character at or after i that is not JSON whitespace. */
function skipSpace(text: string, i: number): number {
  for (;;) {
    const c = text.charCodeAt(i);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return i;
    i++;
  }
}

type Obj = Record<string, unknown>;
const isObj = (x: unknown): x is Obj => !!x && typeof x === "object" && !Array.isArray(x);

/**
 * The deepest `v` a mark looks at: a sealed payload's in a `deliver_batch`
 * entry's message (`deliveries[i].message.data.sealed.v`), in the sixth
 * container.
 */
const MAX_DEPTH = 6;

/**
 * Marks, in `parsed` (JSON.parse of `text`), every envelope signature,
 * and every sealed payload of message data (`data.sealed`), whose `v` the
 * text spells as a non-integer number equal to an integer (2.0, 2e0,
 * 20e-1), however the text spells the member names: its `v` becomes that
 * spelling, a string; and every message whose `sequence` or `hops` the
 * text so spells, or spells -0: it becomes a {@link SpelledNumber}, which
 * no check of a message handed over or decided takes. Looks at the
 * messages of a frame or an HTTP answer: `message`, `messages[i]`,
 * `deliveries[i].message`, `results[i].message`. Costs two regular
 * expression tests for a text without such a member or an escaped letter.
 */
export function markSpelledIntegers(text: string, parsed: unknown): void {
  if (!isObj(parsed) || !(suspect(text) || ESCAPED_LETTER.test(text))) return;
  for (const { path, spelling } of spelledNumbers(text, MAX_DEPTH)) {
    const last = path[path.length - 1];
    if (last !== "v" && last !== "sequence" && last !== "hops") continue;
    if (last === "v" && spelling === "-0") continue;
    const [m, rest] = messageAt(parsed, path);
    if (!isObj(m)) continue;
    if (last !== "v") {
      if (rest.length === 1 && typeof m[last] === "number") m[last] = new SpelledNumber(spelling);
      continue;
    }
    let holder: unknown;
    if (rest.length === 2 && rest[0] === "signature") holder = m.signature;
    else if (rest.length === 3 && rest[0] === "data" && rest[1] === "sealed" && isObj(m.data)) holder = m.data.sealed;
    if (isObj(holder) && typeof holder.v === "number") holder.v = spelling;
  }
}

/**
 * The message of `parsed` a path into it runs through (`message`,
 * `messages[i]`, `deliveries[i].message`, `results[i].message`), and the
 * rest of the path past it; undefined when the path runs through none.
 */
function messageAt(parsed: Obj, path: (string | number)[]): [unknown, (string | number)[]] {
  const [a, b, c] = path;
  if (a === "message") return [parsed.message, path.slice(1)];
  if (typeof b !== "number") return [undefined, []];
  const list = a === "messages" || a === "deliveries" || a === "results" ? parsed[a] : undefined;
  if (!Array.isArray(list) || b >= list.length) return [undefined, []];
  if (a === "messages") return [list[b], path.slice(2)];
  return c === "message" && isObj(list[b]) ? [list[b].message, path.slice(3)] : [undefined, []];
}
