/**
 * A lease attempt spelled as a non-integer number. JSON.parse reads
 * `"attempts":[1.0]` or `1e0` as the integer 1, where the Go, Python and
 * Rust clients refuse such an attempt (their decoders keep the spelling: a
 * float is no integer). The text is the only place the spelling survives,
 * so the reader looks for it there, as it does for a signature's `v`
 * (sigv.ts): a cheap test of each frame and answer (see suspect) for an
 * `attempt` or `attempts` member holding a number with a fraction or an
 * exponent, or for an escape that could spell such a name; only when one
 * is there is the text walked to find which attempts those numbers were.
 * Each is handed over as a {@link SpelledAttempt}, which no lease's attempt
 * is (see attemptHeld in errors.ts): its message is refused alone, as one
 * of 1.5 is. The attempts looked at are a receive answer's `attempts`
 * entries (a `messages` frame or an HTTP answer), a `deliver` frame's
 * `attempt` and a `deliver_batch` entry's; a number anywhere else (in
 * data) is left as JSON.parse read it.
 */

/** An attempt the text spelled with a fraction or an exponent: `spelling` is that text ("1.0", "1e0"). */
export class SpelledAttempt {
  constructor(readonly spelling: string) {}
}

/** An `attempt` or `attempts` member whose number (or a number of whose list) has a fraction or an exponent. */
const SUSPECT = /"attempts?"\s*:\s*(?:\[[^\]"{}]*?)?-?\d+[.eE]/;

/** An escape of a lower-case letter (\u0061 to \u007a): a member name spelled with one is still `attempts` to JSON.parse. */
const ESCAPED_LETTER = /\\u00[67]/i;

type Obj = Record<string, unknown>;
const isObj = (x: unknown): x is Obj => !!x && typeof x === "object" && !Array.isArray(x);

/**
 * Marks, in `parsed` (JSON.parse of `text`, a frame or an HTTP answer),
 * each lease attempt the text spells as a non-integer number whose value
 * is an integer: it becomes a {@link SpelledAttempt}. The attempts of a
 * receive answer (`attempts`, in a frame of op `messages` or an answer
 * without an op), of a `deliver` frame (`attempt`) and of a
 * `deliver_batch` frame's entries (`deliveries[i].attempt`). Costs two
 * regular expression tests for a text without such a member.
 */
export function markSpelledAttempts(text: string, parsed: unknown): void {
  if (!isObj(parsed) || !(SUSPECT.test(text) || ESCAPED_LETTER.test(text))) return;
  const op = parsed.op;
  for (const { path, spelling } of spelledNumbers(text)) {
    const [a, b, c] = path;
    const mark = new SpelledAttempt(spelling);
    if (path.length === 2 && a === "attempts" && typeof b === "number" && (op === undefined || op === "messages")) {
      const list = parsed.attempts;
      if (Array.isArray(list) && b < list.length) list[b] = mark;
    } else if (path.length === 1 && a === "attempt" && op === "deliver") {
      parsed.attempt = mark;
    } else if (path.length === 3 && a === "deliveries" && typeof b === "number" && c === "attempt" && op === "deliver_batch") {
      const list = parsed.deliveries;
      if (Array.isArray(list) && isObj(list[b])) list[b].attempt = mark;
    }
  }
}

/** The deepest number a mark looks at: `deliveries[i].attempt`, in the third container. */
const MAX_DEPTH = 3;

const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;
/** A character of a JSON number past its first: a digit, '.', 'e', 'E', '+' or '-'. */
const inNumber = (c: number): boolean => isDigit(c) || c === 0x2e || c === 0x65 || c === 0x45 || c === 0x2b || c === 0x2d;

/**
 * Each number of the JSON text `t` (text JSON.parse accepted) within the
 * first {@link MAX_DEPTH} containers that has a fraction or an exponent
 * and whose value is an integer, with its path: the member name or index
 * in each container around it, outermost first. Names are decoded (and
 * only those within that depth, and only those with an escape), so that
 * `"\u0061ttempts"` is `attempts`, as JSON.parse reads it.
 */
function* spelledNumbers(t: string): Generator<{ path: (string | number)[]; spelling: string }> {
  const path: (string | number)[] = []; // per open container: the member name (object) or index (array) now read
  const inArray: boolean[] = [];
  let expectKey = false;
  for (let i = 0; i < t.length; ) {
    const c = t.charCodeAt(i);
    if (c === 0x22) {
      // A string: its closing quote is the first one not escaped.
      let j = t.indexOf('"', i + 1);
      for (;;) {
        let k = j - 1;
        while (t.charCodeAt(k) === 0x5c) k--;
        if ((j - 1 - k) % 2 === 0) break;
        j = t.indexOf('"', j + 1);
      }
      if (expectKey) {
        if (path.length <= MAX_DEPTH) {
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
      if (path.length <= MAX_DEPTH) {
        const s = t.slice(i, j);
        if (/[.eE]/.test(s) && Number.isInteger(Number(s))) yield { path: path.slice(), spelling: s };
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
