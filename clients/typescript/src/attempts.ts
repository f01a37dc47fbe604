/**
 * A lease attempt spelled as a non-integer number. JSON.parse reads
 * `"attempts":[1.0]` or `1e0` as the integer 1, where the Go, Python and
 * Rust clients refuse such an attempt (their decoders keep the spelling: a
 * float is no integer). The text is the only place the spelling survives,
 * so the reader looks for it there, as it does for a signature's `v`
 * (sigv.ts): a cheap test of each frame and answer (see SUSPECT) for an
 * `attempt` or `attempts` member holding a number with a fraction or an
 * exponent, or for an escape that could spell such a name
 * (ESCAPED_LETTER); only when one is there is the text walked
 * (spelledNumbers, spelled.ts, which sigv.ts shares) to find which
 * attempts those numbers were.
 * Each is handed over as a {@link SpelledAttempt}, which no lease's attempt
 * is (see attemptHeld in errors.ts): its message is refused alone, as one
 * of 1.5 is. The attempts looked at are a receive answer's `attempts`
 * entries (a `messages` frame or an HTTP answer), a `deliver` frame's
 * `attempt` and a `deliver_batch` entry's; a number anywhere else (in
 * data) is left as JSON.parse read it.
 */
import { ESCAPED_LETTER, SpelledNumber, spelledNumbers } from "./spelled.js";

/** An attempt the text spelled with a fraction or an exponent: `spelling` is that text ("1.0", "1e0"). */
export class SpelledAttempt extends SpelledNumber {}

/** An `attempt` or `attempts` member whose number (or a number of whose list) has a fraction or an exponent. */
const SUSPECT = /"attempts?"\s*:\s*(?:\[[^\]"{}]*?)?-?\d+[.eE]/;

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
  for (const { path, spelling } of spelledNumbers(text, MAX_DEPTH)) {
    // An attempt is a signed integer to Go, which reads -0 as 0: no
    // lease's attempt, refused as the 0 JSON.parse read.
    if (spelling === "-0") continue;
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
