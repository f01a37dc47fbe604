/**
 * Times the server sends, read as the Go client and the broker read them:
 * RFC 3339 proper, the syntax of `pigeon`'s parseRFC3339 (signature.go),
 * which the broker's signature gate, its envelope gate and Go's
 * SignMessage and VerifyMessageWithKeys apply. `Date.parse` takes forms
 * that are no RFC 3339 ("Dec 5 2026", "2026-12-05" without a time, a time
 * without an offset read as local time) and reads some it does take
 * otherwise than Go: a signing key's window so spelled would choose a key
 * here that Go does not, or none where Go chooses one. Every time this
 * client reads from the server (a signing key's `notBefore` and
 * `notAfter`, a message's `time`, a contract's `issuedAt` and
 * `expiresAt`) is read here, and nowhere with `Date.parse`.
 */

/** Milliseconds since the Unix epoch, and the nanoseconds past that millisecond (0 to 999,999). */
export type ExactTime = readonly [ms: number, ns: number];

const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;

/** The number the n decimal digits of s at i spell, or -1 when one of them is no digit. */
function digits(s: string, i: number, n: number): number {
  let v = 0;
  for (let j = i; j < i + n; j++) {
    const c = s.charCodeAt(j);
    if (!isDigit(c)) return -1;
    v = v * 10 + (c - 0x30);
  }
  return v;
}

/** The days of month (1 to 12) of year in the proleptic Gregorian calendar, as Go's time package counts them. */
function daysIn(month: number, year: number): number {
  if (month === 2) return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28;
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

/**
 * Days from 1970-01-01 to year-month-day (proleptic Gregorian), for every
 * year RFC 3339 writes: Date.UTC reads the years 0 to 99 as 1900 to 1999.
 */
function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * (month > 2 ? month - 3 : month + 9) + 2) / 5) + day - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146097 + doe - 719468;
}

/**
 * Reads s as RFC 3339, exactly as the Go code reads a message's time
 * (`pigeon`'s parseRFC3339, then time.Parse): "YYYY-MM-DDTHH:MM:SS", an
 * optional "." and one or more digits (any number: Go keeps nine and
 * drops the rest), then "Z" or "+HH:MM"/"-HH:MM". Upper-case "T" and "Z"
 * only, as Go takes them. The year is 0001 to 9999 (0000 is refused, as
 * the broker refuses it: the Python client's dates start at year 1); the
 * month 01 to 12; the day 01 to the month's last (29 February only in a
 * leap year: every fourth, but not a century unless a fourth one); the
 * hour 00 to 23, the minute and the second 00 to 59 (no leap second, as
 * Go); an offset's hour 00 to 23 and its minute 00 to 59. Anything else
 * (another separator, a comma before the fraction, a missing or extra
 * part, white space, a sign before the year) is no time: undefined.
 * Otherwise the instant, as milliseconds since the Unix epoch (the
 * fraction truncated, as Go truncates) and the nanoseconds past that
 * millisecond.
 */
export function parseTimeExact(s: unknown): ExactTime | undefined {
  if (typeof s !== "string" || s.length < 20) return undefined;
  if (s[4] !== "-" || s[7] !== "-" || s[10] !== "T" || s[13] !== ":" || s[16] !== ":") return undefined;
  const year = digits(s, 0, 4);
  const month = digits(s, 5, 2);
  const day = digits(s, 8, 2);
  const hour = digits(s, 11, 2);
  const minute = digits(s, 14, 2);
  const second = digits(s, 17, 2);
  if (year < 1 || month < 1 || month > 12 || day < 1 || day > daysIn(month, year)) return undefined;
  if (hour < 0 || hour > 23 || minute < 0 || minute > 59 || second < 0 || second > 59) return undefined;
  let i = 19;
  let frac = 0; // nanoseconds, from the first nine digits
  if (s[i] === ".") {
    const from = ++i;
    while (i < s.length && isDigit(s.charCodeAt(i))) {
      if (i - from < 9) frac = frac * 10 + (s.charCodeAt(i) - 0x30);
      i++;
    }
    if (i === from) return undefined;
    for (let n = Math.min(i - from, 9); n < 9; n++) frac *= 10;
  }
  let offset = 0; // minutes east of UTC
  if (s.length === i + 1 && s[i] === "Z") {
    // UTC
  } else if (s.length === i + 6 && (s[i] === "+" || s[i] === "-") && s[i + 3] === ":") {
    const oh = digits(s, i + 1, 2);
    const om = digits(s, i + 4, 2);
    if (oh < 0 || oh > 23 || om < 0 || om > 59) return undefined;
    offset = (s[i] === "-" ? -1 : 1) * (oh * 60 + om);
  } else {
    return undefined;
  }
  const seconds = ((daysFromCivil(year, month, day) * 24 + hour) * 60 + minute - offset) * 60 + second;
  return [seconds * 1000 + Math.floor(frac / 1_000_000), frac % 1_000_000];
}

/**
 * Reads s as RFC 3339 (see {@link parseTimeExact}): milliseconds since the
 * Unix epoch, the fraction truncated, or NaN when s is no such time (not a
 * string included).
 */
export function parseTime(s: unknown): number {
  return parseTimeExact(s)?.[0] ?? NaN;
}
