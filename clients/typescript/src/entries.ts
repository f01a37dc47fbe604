/**
 * The entries of a listing answer counted on its text, before JSON.parse
 * builds them: a page of the audit log, the quarantine or a message's
 * receipts holds at most the server's cap of records, and an answer that
 * lists more is refused without building the records (256 MiB of `{}`
 * entries is about 89 million objects, several GiB once parsed).
 */

const isSpace = (c: number): boolean => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;

/** The string the JSON string literal `s` names, or undefined when it is none. */
function decoded(s: string): string | undefined {
  try {
    const v: unknown = JSON.parse(s);
    return typeof v === "string" ? v : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether the JSON text `t` is an object whose member `name` (compared
 * unescaped: `"\u0072ecords"` is `records`, as JSON.parse reads it) is an
 * array of more than `most` entries; each array of a member of that name
 * is counted (an object holding a name twice is refused later anyway).
 * One pass over the text, which stops at the entry past `most`; nothing
 * else is built. Text that is not JSON may give either answer, and never
 * throws: JSON.parse refuses it after.
 */
export function listsMoreThan(t: string, name: string, most: number): boolean {
  let depth = 0; // the containers open
  let topObject = false; // the outermost value is an object
  let expectKey = false; // in the outermost object: a member name comes next
  let member: string | undefined; // in the outermost object: the name of the member read last
  let counting = false; // in an array of member `name`
  let fresh = false; // in it: the next value starts an entry
  let n = 0;
  for (let i = 0; i < t.length; i++) {
    const c = t.charCodeAt(i);
    if (isSpace(c)) continue;
    if (counting && depth === 2 && fresh && c !== 0x5d) {
      if (++n > most) return true;
      fresh = false;
    }
    if (c === 0x22) {
      // A string: it ends at the first quote that no backslash escapes.
      let j = i + 1;
      for (;;) {
        j = t.indexOf('"', j);
        if (j < 0) return false;
        let k = j - 1;
        while (t.charCodeAt(k) === 0x5c) k--;
        if ((j - 1 - k) % 2 === 0) break;
        j++;
      }
      if (depth === 1 && expectKey) {
        const raw = t.slice(i + 1, j);
        member = raw.includes("\\") ? decoded(t.slice(i, j + 1)) : raw;
        expectKey = false;
      }
      i = j;
      continue;
    }
    if (c === 0x7b) {
      if (++depth === 1) {
        topObject = true;
        expectKey = true;
      }
    } else if (c === 0x5b) {
      if (++depth === 2 && topObject && member === name) {
        counting = true;
        fresh = true;
        n = 0;
      }
    } else if (c === 0x7d || c === 0x5d) {
      if (depth === 2) counting = false;
      depth--;
    } else if (c === 0x2c) {
      if (depth === 1 && topObject) expectKey = true;
      else if (depth === 2 && counting) fresh = true;
    }
  }
  return false;
}
