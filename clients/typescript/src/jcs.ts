/**
 * RFC 8785 JSON Canonicalization Scheme (JCS) over parsed JSON values.
 *
 * It refuses, as the Go side does, what JCS cannot represent faithfully:
 * strings holding lone surrogates, non-finite numbers, values that are not
 * JSON (undefined, functions, symbols, bigints, class instances other than
 * plain objects and arrays), and nesting deeper than 10000. Duplicate member
 * names cannot occur in a parsed value; {@link parseStrict} refuses them in
 * text. A raw JSON value (`JSON.rawJSON`, where the runtime has it), which
 * JSON.stringify sends as its text, is written as that text's value; a raw
 * number whose value the canonical form would change (`9007199254740993`,
 * more digits than a double keeps, `1e-400`) is refused, as the broker
 * refuses it: two data differing there would have one canonical form.
 */
import { PigeonError } from "./errors.js";

const MAX_DEPTH = 10000;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function refuse(msg: string): never {
  throw new PigeonError("ENVELOPE_INVALID", `data has no canonical form: ${msg}`);
}

function str(s: string): string {
  if (LONE_SURROGATE.test(s)) refuse("a string holds a lone surrogate");
  // JSON.stringify escapes exactly as JCS does for well-formed strings:
  // \" \\ \b \f \n \r \t, other controls as \u00xx (lowercase), the rest literal.
  return JSON.stringify(s);
}

function num(n: number): string {
  if (!Number.isFinite(n)) refuse("a number is not finite");
  // ECMAScript's Number-to-String is JCS's number form; -0 is "0".
  return Object.is(n, -0) ? "0" : String(n);
}

/** The runtime's JSON.isRawJSON, where it has one (ES2025 JSON.parse source text access). */
const isRawJSON = (JSON as { isRawJSON?: (v: unknown) => boolean }).isRawJSON;

/**
 * Whether the JSON number text `lit` is exactly the decimal JCS writes for
 * it: the shortest decimal that reads back as the double nearest `lit` (as
 * the broker's exactNumber). Spellings of one value (1.0 and 1, 1e2 and
 * 100) are exact; 9007199254740993, 0.10000000000000001 and 1e-400 are not.
 */
export function exactNumber(lit: string): boolean {
  const [neg, digits, exp] = parseDecimal(lit);
  if (digits === "") return true; // zero, whatever its sign and exponent
  // Up to 15 significant digits in the range of normal doubles survive the
  // round trip through a double.
  const top = exp + digits.length - 1;
  if (digits.length <= 15 && top >= -307 && top <= 307) return true;
  const f = Number(lit);
  if (!Number.isFinite(f)) return false;
  // toExponential() without digits writes the shortest decimal that reads back as f.
  const [sneg, sdigits, sexp] = parseDecimal(f.toExponential());
  return sneg === neg && sexp === exp && sdigits === digits;
}

// parseDecimal splits a JSON number into its sign and its value as
// digits × 10^exp, digits without leading or trailing zeros ("" for zero).
// Exponents beyond ±1e9 saturate, which keeps them apart from any double's.
function parseDecimal(lit: string): [boolean, string, number] {
  let i = 0;
  const neg = lit[0] === "-";
  if (neg) i++;
  let digits = "";
  let frac = 0;
  let dot = false;
  for (; i < lit.length && lit[i] !== "e" && lit[i] !== "E"; i++) {
    const c = lit[i]!;
    if (c === ".") dot = true;
    else if (c === "0" && digits === "") { if (dot) frac++; }
    else { digits += c; if (dot) frac++; }
  }
  let exp = 0;
  if (i < lit.length) {
    i++;
    const eneg = lit[i] === "-";
    if (lit[i] === "+" || lit[i] === "-") i++;
    for (; i < lit.length; i++) if (exp < 1e9) exp = exp * 10 + (lit.charCodeAt(i) - 48);
    if (eneg) exp = -exp;
  }
  exp -= frac;
  let end = digits.length;
  while (end > 0 && digits[end - 1] === "0") { end--; exp++; }
  digits = digits.slice(0, end);
  return [neg, digits, digits === "" ? 0 : exp];
}

// rawValue is the value of a raw JSON text: a number only when the
// canonical form keeps its value.
function rawValue(text: string): unknown {
  const v: unknown = JSON.parse(text);
  if (typeof v === "number" && !exactNumber(text.trim())) {
    refuse("a number has more precision than a double keeps; send it as a string");
  }
  return v;
}

function write(v: unknown, depth: number, out: string[]): void {
  if (depth > MAX_DEPTH) refuse("nesting deeper than 10000");
  if (v === null) { out.push("null"); return; }
  if (isRawJSON !== undefined && typeof v === "object" && isRawJSON(v)) {
    write(rawValue((v as { rawJSON: string }).rawJSON), depth, out);
    return;
  }
  switch (typeof v) {
    case "boolean": out.push(v ? "true" : "false"); return;
    case "number": out.push(num(v)); return;
    case "string": out.push(str(v)); return;
    case "object": break;
    default: refuse(`a ${typeof v} is not JSON`);
  }
  if (Array.isArray(v)) {
    out.push("[");
    for (let i = 0; i < v.length; i++) {
      if (i > 0) out.push(",");
      write(v[i], depth + 1, out);
    }
    out.push("]");
    return;
  }
  const proto = Object.getPrototypeOf(v);
  if (proto !== Object.prototype && proto !== null) refuse("a value is not a plain object");
  // Sort by UTF-16 code units: the default sort of JS strings.
  const keys = Object.keys(v as object).sort();
  out.push("{");
  let first = true;
  for (const k of keys) {
    const x = (v as Record<string, unknown>)[k];
    if (x === undefined) continue;
    if (!first) out.push(",");
    first = false;
    out.push(str(k), ":");
    write(x, depth + 1, out);
  }
  out.push("}");
}

/** The JCS text of a parsed JSON value; throws ENVELOPE_INVALID when it has none. */
export function canonicalize(value: unknown): string {
  const out: string[] = [];
  try {
    write(value, 0, out);
  } catch (e) {
    // A nesting the stack cannot hold is refused like one past the limit.
    if (e instanceof RangeError) refuse("nesting too deep");
    throw e;
  }
  return out.join("");
}

/**
 * Parses JSON text as JSON.parse does, but refuses an object with two
 * members of one name (at any depth) and lone surrogate escapes, as the
 * server does (DUPLICATE_KEY, INVALID_UTF8).
 */
export function parseStrict(text: string): unknown {
  const value: unknown = JSON.parse(text);
  checkText(text);
  return value;
}

// checkText scans JSON text (already known valid) for duplicate member
// names and lone surrogate escapes.
function checkText(t: string): void {
  const stack: (Set<string> | null)[] = [];
  let i = 0;
  let expectKey = false;
  while (i < t.length) {
    const c = t[i]!;
    if (c === "{") { stack.push(new Set()); expectKey = true; i++; continue; }
    if (c === "[") { stack.push(null); expectKey = false; i++; continue; }
    if (c === "}" || c === "]") { stack.pop(); i++; continue; }
    if (c === ",") { expectKey = stack.length > 0 && stack[stack.length - 1] !== null; i++; continue; }
    if (c === ":") { expectKey = false; i++; continue; }
    if (c === '"') {
      let j = i + 1;
      while (t[j] !== '"') j += t[j] === "\\" ? 2 : 1;
      const raw = t.slice(i, j + 1);
      const s = JSON.parse(raw) as string;
      if (LONE_SURROGATE.test(s)) throw new PigeonError("INVALID_UTF8", "a string escapes a lone surrogate");
      if (expectKey) {
        const set = stack[stack.length - 1]!;
        if (set.has(s)) throw new PigeonError("DUPLICATE_KEY", "an object has two members of one name");
        set.add(s);
        expectKey = false;
      }
      i = j + 1;
      continue;
    }
    i++;
  }
}

// One escape of JSON text, from its backslash: an escaped surrogate pair
// (well formed), a lone surrogate escape (group 1), or any other escape
// (its first character only: the rest holds no backslash).
const ESCAPE = /\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|(u[dD][89a-fA-F][0-9a-fA-F]{2})|[^])/g;

/**
 * Whether the JSON text `t` (text JSON.parse accepted, or JSON.stringify
 * wrote) has a string holding a lone surrogate: an escape of one
 * (`"\ud800"` not followed by an escaped low surrogate, `"\udc00"` not
 * preceded by a high one), as JSON.stringify writes it, or the code unit
 * itself. The server refuses such text whole (INVALID_UTF8): it is no
 * Unicode text, and readers differ on it (U+FFFD, an error, the code unit).
 */
export function loneSurrogate(t: string): boolean {
  if (LONE_SURROGATE.test(t)) return true;
  if (!/\\u[dD][89a-fA-F]/.test(t)) return false; // no surrogate escape at all: the usual case
  ESCAPE.lastIndex = 0;
  for (let m = ESCAPE.exec(t); m; m = ESCAPE.exec(t)) if (m[1] !== undefined) return true;
  return false;
}

/**
 * Where the JSON string that opens at t[i] (a quote) closes: the index of
 * its closing quote, the first one not escaped (JSON text has one).
 */
export function stringEnd(t: string, i: number): number {
  let j = t.indexOf('"', i + 1);
  for (;;) {
    let k = j - 1;
    while (t.charCodeAt(k) === 0x5c) k--;
    if ((j - 1 - k) % 2 === 0) return j;
    j = t.indexOf('"', j + 1);
  }
}

/**
 * The first member name that one object of `t` holds twice (compared
 * unescaped: "a" and "\u0061" are one name), and whether that object is
 * t's outermost; undefined when there is none. `t` is text JSON.parse
 * accepted. Only names are decoded, and only those with an escape; each
 * open object's names are kept in one array (a Set past 16).
 */
export function duplicateMember(t: string): { name: string; top: boolean } | undefined {
  // Per open object or array (innermost last): its names (null for an
  // array), the Set they moved to once there were many, and where its
  // names start in `names`.
  const names: string[] = [];
  const from: number[] = [];
  const sets: (Set<string> | null | undefined)[] = []; // undefined: an object without a Set; null: an array
  let expectKey = false;
  for (let i = 0; i < t.length; ) {
    const c = t.charCodeAt(i);
    if (c === 0x22) {
      const j = stringEnd(t, i);
      if (expectKey) {
        const raw = t.slice(i + 1, j);
        const name = raw.includes("\\") ? (JSON.parse(t.slice(i, j + 1)) as string) : raw;
        const top = sets.length - 1;
        const set = sets[top];
        if (set) {
          if (set.has(name)) return { name, top: top === 0 };
          set.add(name);
        } else {
          for (let n = from[top]!; n < names.length; n++) if (names[n] === name) return { name, top: top === 0 };
          names.push(name);
          if (names.length - from[top]! > 16) {
            sets[top] = new Set(names.splice(from[top]!));
          }
        }
        expectKey = false;
      }
      i = j + 1;
      continue;
    }
    if (c === 0x7b) {
      sets.push(undefined);
      from.push(names.length);
      expectKey = true;
    } else if (c === 0x5b) {
      sets.push(null);
      from.push(names.length);
    } else if (c === 0x7d || c === 0x5d) {
      sets.pop();
      names.length = from.pop()!;
    } else if (c === 0x2c) {
      expectKey = sets[sets.length - 1] !== null;
    }
    i++;
  }
  return undefined;
}
