//! RFC 3339 times as the protocol writes them (UTC, milliseconds).

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

/// Parses an RFC 3339 time (`2026-11-29T12:00:00Z`, with optional fraction
/// and offset) to milliseconds since the Unix epoch.
pub fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !(b[10] == b'T' || b[10] == b't') || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        if !t.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        t.parse().ok()
    };
    let (y, mo, d, h, mi, se) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut i = 19;
    let mut ms = 0i64;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let frac = &s[start..i];
        let mut digits: String = frac.chars().take(3).collect();
        while digits.len() < 3 {
            digits.push('0');
        }
        ms = digits.parse().ok()?;
    }
    let off = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        c @ (b'+' | b'-') if b.len() == i + 6 && b[i + 3] == b':' => {
            let oh = num(i + 1..i + 3)?;
            let om = num(i + 4..i + 6)?;
            let o = (oh * 60 + om) * 60_000;
            if *c == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo, d);
    Some(((days * 24 + h) * 60 + mi) * 60_000 + se * 1000 + ms - off)
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
    fn durations_beyond_the_wire_range_saturate_instead_of_wrapping() {
        assert_eq!(wire_ms(Duration::from_millis(1500)), 1500);
        // 2^64 ms + 384 ms would wrap to 384 ms: a "never" that comes at once.
        let wraps = Duration::from_millis(1u64 << 63) * 2 + Duration::from_millis(384);
        assert_eq!(wire_ms(wraps), i64::MAX as u64);
        assert_eq!(wire_ms(Duration::MAX), i64::MAX as u64);
        assert_eq!(wire_ms(Duration::from_millis(i64::MAX as u64)), i64::MAX as u64);
    }
}
