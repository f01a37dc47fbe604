/**
 * Numbers a JSON text spells otherwise than the integer JSON.parse reads:
 * with a fraction or an exponent though their value is an integer (1.0,
 * 1e0, 20e-1), or as a negative zero (-0). JSON.parse reads 5.0 as 5 and
 * -0 as a zero, where the Go, Python and Rust clients keep the spelling 5.0
 * (a float is no integer) and refuse it where the wire has an integer: a
 * lease attempt (attempts.ts), a signature's or a sealed payload's `v`, a
 * message's `sequence` or `hops` (sigv.ts); and the Go client refuses -0
 * where the wire has an unsigned integer (strconv.ParseUint takes no
 * sign): a message's `sequence` or `hops` (sigv.ts). The text is the only
 * place the spelling survives. Each reader runs a cheap test of the text
 * first (a regular expression for its member holding such a number, and
 * {@link ESCAPED_LETTER}); only when it passes is the text walked
 * ({@link spelledNumbers}) to find where those numbers are.
 */

import { stringEnd } from "./jcs.js";

/**
 * A number the text spelled with a fraction or an exponent where the wire
 * has an integer, or as -0 where it has an unsigned one: `spelling` is
 * that text ("5.0", "1e0", "-0"). A reader puts it in place of the
 * integer JSON.parse read, so that no check takes it for one (a lease
 * attempt, attempts.ts; a message's sequence or hops, sigv.ts) and a
 * refusal can name the spelling.
 */
export class SpelledNumber {
  constructor(readonly spelling: string) {}
}

/**
 * An escape of a lower-case letter (\u0061 to \u007a): a member name
 * spelled with one (`"\u0076"`, `"\u0061ttempts"`) is still `v` or
 * `attempts` to JSON.parse, which a regular expression over the text for
 * the name does not see.
 */
export const ESCAPED_LETTER = /\\u00[67]/i;

const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;
/** A character of a JSON number past its first: a digit, '.', 'e', 'E', '+' or '-'. */
const inNumber = (c: number): boolean => isDigit(c) || c === 0x2e || c === 0x65 || c === 0x45 || c === 0x2b || c === 0x2d;

/**
 * Each number of the JSON text `t` (text JSON.parse accepted) within the
 * first `maxDepth` containers that has a fraction or an exponent and whose
 * value is an integer, or that is spelled -0 (its spelling tells the two
 * apart), with its path: the member name or index in each container
 * around it, outermost first. Names are decoded (and only those
 * within that depth, and only those with an escape), so that
 * `"\u0061ttempts"` is `attempts` and `"\u0076"` is `v`, as JSON.parse
 * reads them. One pass over the text.
 */
export function* spelledNumbers(t: string, maxDepth: number): Generator<{ path: (string | number)[]; spelling: string }> {
  const path: (string | number)[] = []; // per open container: the member name (object) or index (array) now read
  const inArray: boolean[] = [];
  let expectKey = false;
  for (let i = 0; i < t.length; ) {
    const c = t.charCodeAt(i);
    if (c === 0x22) {
      const j = stringEnd(t, i);
      if (expectKey) {
        if (path.length <= maxDepth) {
          const raw = t.slice(i + 1, j);
          path[path.length - 1] = raw.includes("\\") ? (JSON.parse(t.slice(i, j + 1)) as string) : raw;
        }
        expectKey = false;
      }
      i = j + 1;
      continue;
    }
    if (c === 0x2d || isDigit(c)) {
      let j = i + 1;
      while (j < t.length && inNumber(t.charCodeAt(j))) j++;
      if (path.length <= maxDepth) {
        const s = t.slice(i, j);
        if (s === "-0" || (/[.eE]/.test(s) && Number.isInteger(Number(s)))) yield { path: path.slice(), spelling: s };
      }
      i = j;
      continue;
    }
    if (c === 0x7b) {
      path.push("");
      inArray.push(false);
      expectKey = true;
    } else if (c === 0x5b) {
      path.push(0);
      inArray.push(true);
      expectKey = false;
    } else if (c === 0x7d || c === 0x5d) {
      path.pop();
      inArray.pop();
      expectKey = false;
    } else if (c === 0x2c) {
      const top = path.length - 1;
      expectKey = !inArray[top];
      if (inArray[top]) path[top] = (path[top] as number) + 1;
    }
    i++;
  }
}
