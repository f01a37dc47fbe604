//! RFC 8785 JSON Canonicalization Scheme (JCS) of a `serde_json::Value`, by
//! `serde_jcs`: members sorted by their names' UTF-16 code units, no
//! whitespace, minimal string escapes, numbers in ECMAScript's shortest
//! round-trip form. The conformance vectors (`vectors/go.json`) check it
//! byte for byte against the Go implementation.

use crate::error::{Error, Result};
use serde_json::Value;

/// The JCS form of `v`, as UTF-8 bytes.
pub fn canonicalize(v: &Value) -> Result<Vec<u8>> {
    serde_jcs::to_vec(v).map_err(|e| Error::new("ENVELOPE_INVALID", format!("no canonical form: {e}")))
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
            ("12345678901234567891", "12345678901234567000"),
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
}
