//! RFC 8785 JSON Canonicalization Scheme (JCS) of a `serde_json::Value`, by
//! `serde_jcs`: members sorted by their names' UTF-16 code units, no
//! whitespace, minimal string escapes, numbers in ECMAScript's shortest
//! round-trip form. The conformance vectors (`vectors/go.json`) check it
//! byte for byte against the Go implementation.

use crate::error::{Error, Result};
use serde_json::Value;

/// The JCS form of `v`, as UTF-8 bytes. `ENVELOPE_INVALID` when `v` has
/// none, which includes a number whose value the canonical form would
/// change (its value is not that of the shortest decimal JCS writes for
/// it, as the broker checks): an integer beyond 2^53 such as
/// 9007199254740993 (serde_json keeps `u64` and `i64` exactly, JCS writes
/// the nearest double), or, with serde_json's `arbitrary_precision`, more
/// digits than a double keeps or an underflow to 0. Two data differing
/// there would have one canonical form, so one signature would verify for
/// both; the broker refuses such data too. Send such values as strings.
pub fn canonicalize(v: &Value) -> Result<Vec<u8>> {
    check_numbers(v)?;
    serde_jcs::to_vec(v).map_err(|e| Error::new("ENVELOPE_INVALID", format!("no canonical form: {e}")))
}

fn check_numbers(v: &Value) -> Result<()> {
    match v {
        Value::Number(n) => {
            if exact_number(&n.to_string()) {
                Ok(())
            } else {
                Err(Error::new(
                    "ENVELOPE_INVALID",
                    "no exact canonical form: a number has more precision than a double keeps; send it as a string",
                ))
            }
        }
        Value::Array(a) => a.iter().try_for_each(check_numbers),
        Value::Object(o) => o.values().try_for_each(check_numbers),
        _ => Ok(()),
    }
}

/// Whether the JSON number `lit` is exactly the decimal JCS writes for it:
/// the shortest decimal that reads back as the double nearest `lit` (as
/// the broker's `exactNumber`). Spellings of one value (`1.0`, `1`; `1e2`,
/// `100`) are exact.
pub(crate) fn exact_number(lit: &str) -> bool {
    let (neg, digits, exp) = parse_decimal(lit);
    if digits.is_empty() {
        return true; // zero, whatever its sign and exponent
    }
    // Up to 15 significant digits in the range of normal doubles survive
    // the round trip through a double.
    let top = exp + digits.len() as i64 - 1;
    if digits.len() <= 15 && (-307..=307).contains(&top) {
        return true;
    }
    let f: f64 = match lit.parse() {
        Ok(f) if f64::is_finite(f) => f,
        _ => return false,
    };
    // The canonical writer's own spelling of f: the shortest decimal that
    // reads back as f, the even one of two (ECMAScript's Number::toString;
    // Rust's `{:e}` breaks that tie the other way).
    let Ok(short) = serde_jcs::to_string(&f) else { return false };
    let (sneg, sdigits, sexp) = parse_decimal(&short);
    sneg == neg && sexp == exp && sdigits == digits
}

/// The sign of the JSON number `lit` and its value as digits × 10^exp,
/// digits without leading or trailing zeros (none for zero). Exponents
/// beyond ±1e9 saturate, which keeps them apart from any double's.
fn parse_decimal(lit: &str) -> (bool, Vec<u8>, i64) {
    let b = lit.as_bytes();
    let mut i = 0;
    let neg = b.first() == Some(&b'-');
    if neg {
        i += 1;
    }
    let (mut digits, mut frac, mut dot) = (Vec::new(), 0i64, false);
    while i < b.len() && b[i] != b'e' && b[i] != b'E' {
        match b[i] {
            b'.' => dot = true,
            b'0' if digits.is_empty() => frac += dot as i64,
            c => {
                digits.push(c);
                frac += dot as i64;
            }
        }
        i += 1;
    }
    let mut exp = 0i64;
    if i < b.len() {
        i += 1;
        let eneg = b.get(i) == Some(&b'-');
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        for &c in &b[i..] {
            if exp < 1_000_000_000 {
                exp = exp * 10 + i64::from(c - b'0');
            }
        }
        if eneg {
            exp = -exp;
        }
    }
    exp -= frac;
    while digits.last() == Some(&b'0') {
        digits.pop();
        exp += 1;
    }
    if digits.is_empty() {
        exp = 0;
    }
    (neg, digits, exp)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn numbers_and_order() {
        for (text, want) in [
            ("1.50", "1.5"),
            ("1E30", "1e+30"),
            ("2e-3", "0.002"),
            ("1e-7", "1e-7"),
            ("1e21", "1e+21"),
            ("1e20", "100000000000000000000"),
            ("-0", "0"),
            ("0.1", "0.1"),
            ("123456789", "123456789"),
            ("12345678901234567000", "12345678901234567000"),
            ("5e-324", "5e-324"),
        ] {
            let v: Value = serde_json::from_str(text).unwrap();
            assert_eq!(String::from_utf8(canonicalize(&v).unwrap()).unwrap(), want, "{text}");
        }
        let v: Value = serde_json::from_str(r#"{"\ufb33":1,"\ud83d\ude00":2,"b":[{"z":1,"a":"\u0001/"}]}"#).unwrap();
        assert_eq!(
            String::from_utf8(canonicalize(&v).unwrap()).unwrap(),
            "{\"b\":[{\"a\":\"\\u0001/\",\"z\":1}],\"\u{1f600}\":2,\"\u{fb33}\":1}"
        );
    }

    #[test]
    fn refuses_numbers_the_canonical_form_rounds() {
        for text in [
            "9007199254740993",
            "-9007199254740993",
            "1234567890123456789",
            "12345678901234567891",
            "12345678901234567168",
            "18446744073709551615",
            r#"{"a":[1,{"b":12345678901234567891}]}"#,
        ] {
            let v: Value = serde_json::from_str(text).unwrap();
            let e = canonicalize(&v).unwrap_err();
            assert_eq!(e.code, "ENVELOPE_INVALID", "{text}");
        }
        for text in ["9007199254740992", "-9007199254740992", "9007199254740994", "12345678901234567000", "-0", "1e21"] {
            let v: Value = serde_json::from_str(text).unwrap();
            assert!(canonicalize(&v).is_ok(), "{text}");
        }
    }

    #[test]
    fn exact_number_as_the_broker() {
        for (lit, want) in [
            ("0", true),
            ("-0", true),
            ("0.0", true),
            ("0e5", true),
            ("1e-400", false),
            ("-1e-400", false),
            ("5e-324", true),
            ("0.5e-323", true),
            ("2.5e-324", false),
            ("1.7976931348623157e308", true),
            ("17976931348623157e292", true),
            ("1e309", false),
            ("9007199254740992", true),
            ("9007199254740993", false),
            ("123456789012345", true),
            ("1234567890123456", true),
            ("0.1", true),
            ("0.10000000000000001", false),
            ("100000000000000000000", true),
            ("1E21", true),
            ("1.0", true),
            ("1e2", true),
            ("100.000", true),
            ("-123456789.012345", true),
            ("12345678901234567000", true),
            ("12345678901234567168", false),
            // Two shortest decimals read back as the double: JCS writes the even one.
            ("-809017603862647.2", true),
            ("-809017603862647.3", false),
            ("2094929664364739.2", true),
            ("20949296643647.393e2", false),
        ] {
            assert_eq!(exact_number(lit), want, "{lit}");
        }
    }
}
