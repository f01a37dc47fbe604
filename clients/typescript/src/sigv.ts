/**
 * A signature's `v` spelled as a non-integer number. JSON.parse reads
 * `"v": 2.0` or `2e0` as 2, the second signing form, where the Go, Python
 * and Rust clients refuse such a signature (their decoders keep the
 * spelling). The frame text is the only place the spelling survives, so the
 * reader looks for it there: a search of each frame (see suspect) for a
 * `"v"` member holding a number with a fraction or an exponent; only when
 * one is there is the frame parsed a second time, with those numbers
 * turned into marked strings, to find which envelope signatures they were.
 * Such a signature's `v` is handed over as its text ("2.0"), which names no
 * form: verifyMessage refuses it (SIGNATURE_INVALID), canonicalSigningInput
 * too (ENVELOPE_INVALID). The `v` of a sealed payload (the message data's
 * `sealed` member, seal.SealData) is marked the same way: the Go, Python
 * and Rust clients decode it as an integer and refuse `1.0` or `1e0`, so
 * openData refuses the spelling too (SEAL_TAMPERED). A `"v"` anywhere else
 * (in data) is left as JSON.parse read it.
 */

/** A `"v"` member whose number has a fraction or an exponent. */
const SUSPECT = /"v"\s*:\s*-?\d+[.eE]/;

/** From this length on, indexOf finds the `"v"` members faster than SUSPECT scans the text. */
const LONG_TEXT = 1 << 20;

/**
 * Whether text holds a `"v"` member whose number has a fraction or an
 * exponent: the cheap test, on every frame. A regular expression on
 * shorter texts; on a long one (large data, few messages) indexOf finds
 * each `"v"` (one per signed message) and what follows it is read by hand.
 */
function suspect(text: string): boolean {
  if (text.length < LONG_TEXT) return SUSPECT.test(text);
  for (let i = text.indexOf('"v"'); i >= 0; i = text.indexOf('"v"', i + 3)) {
    let j = skipSpace(text, i + 3);
    if (text.charCodeAt(j) !== 0x3a) continue; // ':'
    j = skipSpace(text, j + 1);
    if (text.charCodeAt(j) === 0x2d) j++; // '-'
    const digits = j;
    while (isDigit(text.charCodeAt(j))) j++;
    const c = text.charCodeAt(j);
    if (j > digits && (c === 0x2e || c === 0x65 || c === 0x45)) return true; // '.', 'e', 'E'
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

/** Each `"v"` member and its whole number, for the rewrite. */
const MEMBER = /"v"(\s*:\s*)(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)/g;

/** The prefix of the string a rewritten number becomes (text no server writes as a signature's v). */
const MARK = "\u0000pigeon-v:";

type Obj = Record<string, unknown>;
const isObj = (x: unknown): x is Obj => !!x && typeof x === "object" && !Array.isArray(x);

/**
 * Marks, in `parsed` (JSON.parse of `text`), every envelope signature,
 * and every sealed payload of message data (`data.sealed`), whose `v` the
 * text spells as a non-integer number equal to an integer (2.0, 2e0,
 * 20e-1): its `v` becomes that spelling, a string. Looks at the messages
 * of a frame or an HTTP answer: `message`, `messages[i]`,
 * `deliveries[i].message`, `results[i].message`. Costs one regular
 * expression test for a text without such a member.
 */
export function markNonIntegerV(text: string, parsed: unknown): void {
  if (!isObj(parsed) || !suspect(text)) return;
  let any = false;
  const marked = text.replace(MEMBER, (all, colon: string, num: string) => {
    // A fraction or exponent whose value is an integer: the spelling a
    // strict decoder refuses where JSON.parse reads the integer.
    if (!/[.eE]/.test(num) || !Number.isInteger(Number(num))) return all;
    any = true;
    return `"v"${colon}${JSON.stringify(MARK + num)}`;
  });
  if (!any) return;
  let again: unknown;
  try {
    again = JSON.parse(marked);
  } catch {
    return; // a "v" inside a string key's text: the rewrite broke nothing it needs
  }
  if (!isObj(again)) return;
  for (const [a, b] of messagePairs(parsed, again)) {
    markV(a.signature, b.signature);
    if (isObj(a.data) && isObj(b.data)) markV(a.data.sealed, b.data.sealed);
  }
}

/** Hands the spelling marked in b (the second parse) to a's `v`. */
function markV(a: unknown, b: unknown): void {
  if (isObj(a) && isObj(b) && typeof b.v === "string" && b.v.startsWith(MARK)) a.v = b.v.slice(MARK.length);
}

/** The messages of a frame or answer, in both parses, side by side. */
function* messagePairs(a: Obj, b: Obj): Generator<[Obj, Obj]> {
  if (isObj(a.message) && isObj(b.message)) yield [a.message, b.message];
  for (const [list, inner] of [["messages", false], ["deliveries", true], ["results", true]] as const) {
    const la = a[list];
    const lb = b[list];
    if (!Array.isArray(la) || !Array.isArray(lb) || la.length !== lb.length) continue;
    for (let i = 0; i < la.length; i++) {
      const x: unknown = inner && isObj(la[i]) ? (la[i] as Obj).message : la[i];
      const y: unknown = inner && isObj(lb[i]) ? (lb[i] as Obj).message : lb[i];
      if (isObj(x) && isObj(y)) yield [x, y];
    }
  }
}
