//! RFC 3339 times as the protocol writes them, read as the Go code reads
//! them (see [`parse_rfc3339`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = if z >= 0 { z } else { z - 146096 } / 146097;
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// An instant as the Go code holds one (`time.Time`): Unix seconds,
/// floored, and the nanoseconds after them (0 to 999,999,999), so an
/// instant before 1970 has a negative second and nanoseconds counted
/// forward from it. Ordered as time runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    pub unix_seconds: i64,
    pub nanos: u32,
}

impl Timestamp {
    /// Go's zero `time.Time`, `0001-01-01T00:00:00Z`: as a signing key's
    /// `notBefore` or `notAfter`, no bound (`PublicKey.ValidAt` reads a
    /// zero edge as none).
    pub const GO_ZERO: Timestamp = Timestamp { unix_seconds: -62_135_596_800, nanos: 0 };

    /// The instant `ms` milliseconds after the Unix epoch.
    pub fn from_unix_ms(ms: i64) -> Timestamp {
        Timestamp { unix_seconds: ms.div_euclid(1000), nanos: (ms.rem_euclid(1000) * 1_000_000) as u32 }
    }

    /// Milliseconds since the Unix epoch, the nanoseconds past the
    /// millisecond dropped (toward the past, as Go's `Truncate`).
    pub fn unix_ms(self) -> i64 {
        self.unix_seconds * 1000 + i64::from(self.nanos / 1_000_000)
    }

    /// The instant truncated to a multiple of `unit` nanoseconds (a
    /// divisor of a second), toward the past, as Go's `Time.Truncate`.
    pub(crate) fn truncate(self, unit: u32) -> Timestamp {
        Timestamp { unix_seconds: self.unix_seconds, nanos: self.nanos - self.nanos % unit }
    }
}

/// The days of `month` (1 to 12) of `year` in the proleptic Gregorian
/// calendar, as Go's time package counts them: 29 February in a leap year
/// only (every fourth, but not a century unless a fourth one).
fn days_in(month: i64, year: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Reads `s` as RFC 3339, exactly as the broker and the Go client read a
/// message's time (`pigeon`'s `parseRFC3339`, then `time.Parse`; the
/// cases of `clients/conformance/vectors/times.json` hold every client to
/// Go's reading): `YYYY-MM-DDTHH:MM:SS`, an optional `.` and one or more
/// digits (any number: the first nine are kept, the rest dropped), then
/// `Z` or `+HH:MM`/`-HH:MM`. Upper-case `T` and `Z` only; ASCII digits
/// only. The year is 0001 to 9999 (0000 is refused, as the broker
/// refuses it), the month 01 to 12, the day 01 to the month's last (29
/// February in a leap year only), the hour 00 to 23, the minute and the
/// second 00 to 59 (no leap second, as Go), an offset's hour 00 to 23 and
/// its minute 00 to 59. Anything else (another separator, a comma before
/// the fraction, a missing or extra part, white space, a sign before the
/// year, the empty text) is no time: `None`.
pub fn parse_rfc3339(s: &str) -> Option<Timestamp> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        b[r].iter().try_fold(0i64, |n, &c| c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0')))
    };
    let (y, mo, d, h, mi, se) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    if y < 1 || !(1..=12).contains(&mo) || d < 1 || d > days_in(mo, y) || h > 23 || mi > 59 || se > 59 {
        return None;
    }
    let mut i = 19;
    let mut nanos = 0u32;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            if i - start < 9 {
                nanos = nanos * 10 + u32::from(b[i] - b'0');
            }
            i += 1;
        }
        if i == start {
            return None;
        }
        for _ in (i - start).min(9)..9 {
            nanos *= 10;
        }
    }
    let offset = match &b[i..] {
        [b'Z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let o = (oh * 60 + om) * 60;
            if *sign == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return None,
    };
    let unix_seconds = ((days_from_civil(y, mo, d) * 24 + h) * 60 + mi) * 60 + se - offset;
    Some(Timestamp { unix_seconds, nanos })
}

/// Reads an RFC 3339 time as [`parse_rfc3339`] does, to milliseconds since
/// the Unix epoch (the fraction truncated toward the past, as Go's
/// `Truncate`).
pub fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    parse_rfc3339(s).map(Timestamp::unix_ms)
}

/// Formats milliseconds since the Unix epoch as `2026-11-29T12:00:00.000Z`.
pub fn format_rfc3339_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", y, m, d, rem / 3_600_000, rem / 60_000 % 60, rem / 1000 % 60, rem % 1000)
}

/// `d` in whole milliseconds, for a frame's `delayMs`, `ttlMs` or
/// `timeoutMs`, at most `i64::MAX` (what the broker reads): `as u64` on
/// `as_millis()` would wrap, and a "never" of 2^64 ms + 384 ms would come
/// back as 384 ms.
pub(crate) fn wire_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).map_or(i64::MAX as u64, |ms| ms.min(i64::MAX as u64))
}

/// The longest redelivery delay the broker takes (12 hours,
/// `pigeon.MaxRetryDelay`): a nacked message stays leased until it is due,
/// so the broker refuses a longer `delayMs` `INVALID_ARGUMENT`.
pub(crate) const MAX_RETRY_DELAY: Duration = Duration::from_secs(12 * 60 * 60);

/// A nack's `delay` as its `delayMs`: shortened to [`MAX_RETRY_DELAY`],
/// as a handler's longer `retry_after` is, rather than refused.
pub(crate) fn retry_delay_ms(d: Duration) -> u64 {
    wire_ms(d.min(MAX_RETRY_DELAY))
}

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn round_trip() {
        let t = parse_rfc3339_ms("2026-11-29T12:00:00.123Z").unwrap();
        assert_eq!(format_rfc3339_ms(t), "2026-11-29T12:00:00.123Z");
        assert_eq!(parse_rfc3339_ms("2026-11-29T12:00:02.5+01:00").unwrap(), parse_rfc3339_ms("2026-11-29T11:00:02.500Z").unwrap());
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert!(parse_rfc3339_ms("2026-11-29 12:00:00Z").is_none());
    }

    #[test]
    fn a_timestamp_holds_milliseconds_before_and_after_the_epoch() {
        for ms in [-62_135_596_800_000, -1001, -1, 0, 1, 999, 1000, 1_796_466_030_123] {
            let t = Timestamp::from_unix_ms(ms);
            assert!(t.nanos < 1_000_000_000);
            assert_eq!(t.unix_ms(), ms);
        }
        assert_eq!(Timestamp::from_unix_ms(-1), Timestamp { unix_seconds: -1, nanos: 999_000_000 });
        let t = parse_rfc3339("1969-12-31T23:59:59.9995Z").unwrap();
        assert_eq!((t.truncate(1_000_000), t.unix_ms()), (Timestamp { unix_seconds: -1, nanos: 999_000_000 }, -1));
        assert_eq!(parse_rfc3339("0001-01-01T00:00:00Z"), Some(Timestamp::GO_ZERO));
    }

    #[test]
    fn durations_beyond_the_wire_range_saturate_instead_of_wrapping() {
        assert_eq!(wire_ms(Duration::from_millis(1500)), 1500);
        // 2^64 ms + 384 ms would wrap to 384 ms: a "never" that comes at once.
        let wraps = Duration::from_millis(1u64 << 63) * 2 + Duration::from_millis(384);
        assert_eq!(wire_ms(wraps), i64::MAX as u64);
        assert_eq!(wire_ms(Duration::MAX), i64::MAX as u64);
        assert_eq!(wire_ms(Duration::from_millis(i64::MAX as u64)), i64::MAX as u64);
    }
}
