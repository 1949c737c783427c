//! JSON as Python's `json` module writes it: bare `NaN`, `Infinity` and `-Infinity` (a diverged
//! loss, a score that is not a number) read as null instead of failing the whole document.
//! atroposlib's output files and W&B's summaries are both written this way.

use serde::de::DeserializeOwned;

/// Parses `text`, reading non-finite tokens outside strings as null. The error is the strict
/// parser's, so it points at the real problem when there was no such token.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    match serde_json::from_str(text) {
        Ok(value) => Ok(value),
        Err(error) if text.contains("NaN") || text.contains("Infinity") => {
            serde_json::from_str(&replace_non_finite(text)).map_err(|_| error)
        }
        Err(error) => Err(error),
    }
}

/// `text` with bare `NaN`, `Infinity` and `-Infinity` tokens (outside strings) replaced by `null`.
fn replace_non_finite(text: &str) -> String {
    const TOKENS: [&str; 3] = ["-Infinity", "Infinity", "NaN"];
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    let (mut copied, mut i) = (0, 0);
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        // Tokens start with an ASCII byte, so `i` and the end of the token are char boundaries.
        match TOKENS.iter().find(|t| bytes[i..].starts_with(t.as_bytes())) {
            Some(token) => {
                out.push_str(&text[copied..i]);
                out.push_str("null");
                i += token.len();
                copied = i;
            }
            None => i += 1,
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// `from_str` over bytes; invalid UTF-8 is a parse error, as in `serde_json::from_slice`.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    match std::str::from_utf8(bytes) {
        Ok(text) => from_str(text),
        Err(_) => serde_json::from_slice(bytes),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn non_finite_numbers_become_null_outside_strings_only() {
        let text = r#"{"a": NaN, "b": -Infinity, "c": [Infinity], "d": "NaN \" Infinity", "é": 1}"#;
        let value = from_str::<Value>(text).expect("lenient");
        assert_eq!(value, json!({"a": null, "b": null, "c": [null], "d": "NaN \" Infinity", "é": 1}));
        assert!(from_str::<Value>(r#"{"a": NaNa}"#).is_err());
        assert!(from_str::<Value>("").is_err());
    }
}
