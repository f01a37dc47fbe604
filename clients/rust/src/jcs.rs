//! RFC 8785 JSON Canonicalization Scheme (JCS) of a `serde_json::Value`:
//! members sorted by their names' UTF-16 code units, no whitespace, minimal
//! string escapes, numbers in ECMAScript's shortest round-trip form.

use serde_json::Value;

/// The JCS form of `v`, as UTF-8 bytes.
pub fn canonicalize(v: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    write_value(&mut out, v);
    out
}

fn write_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            let f = match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => i as f64,
                (None, Some(u)) => u as f64,
                _ => n.as_f64().unwrap_or(0.0),
            };
            out.extend_from_slice(format_number(f).as_bytes())
        }
        Value::String(s) => write_string(out, s),
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, x);
            }
            out.push(b']');
        }
        Value::Object(m) => {
            let mut keys: Vec<(&String, &Value)> = m.iter().collect();
            keys.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push(b'{');
            for (i, (k, x)) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(out, k);
                out.push(b':');
                write_value(out, x);
            }
            out.push(b'}');
        }
    }
}

/// Writes `s` as a JSON string with JCS's escapes.
pub fn write_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\u{08}' => out.extend_from_slice(b"\\b"),
            '\u{0c}' => out.extend_from_slice(b"\\f"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 => out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes()),
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

/// ECMAScript's Number.prototype.toString of a finite double.
pub fn format_number(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return "0".to_string();
    }
    if x < 0.0 {
        return format!("-{}", format_number(-x));
    }
    // Shortest round-trip digits and decimal exponent from Rust's `{:e}`.
    let sci = format!("{:e}", x);
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let k = digits.len() as i32;
    let n = exp.parse::<i32>().unwrap_or(0) + 1;
    if k <= n && n <= 21 {
        format!("{}{}", digits, "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{}", "0".repeat((-n) as usize), digits)
    } else {
        let e = n - 1;
        let sign = if e < 0 { '-' } else { '+' };
        if k == 1 {
            format!("{}e{}{}", digits, sign, e.abs())
        } else {
            format!("{}.{}e{}{}", &digits[..1], &digits[1..], sign, e.abs())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn numbers() {
        for (x, s) in [
            (1.5, "1.5"),
            (1e30, "1e+30"),
            (2e-3, "0.002"),
            (1e-7, "1e-7"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (-0.0, "0"),
            (0.1, "0.1"),
            (123456789.0, "123456789"),
            (12345678901234567891.0, "12345678901234567000"),
            (1.2345e-7, "1.2345e-7"),
            (-5e-324, "-5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
        ] {
            assert_eq!(format_number(x), s, "{x}");
        }
    }
}
