//! How a parameter's value becomes a workflow var's text: floats as Python's `repr` shows
//! them, since that is what W&B's agent passes and what a user's sweep file and W&B's UI show.
//!
//! - the shortest digits that read back as the same float (Rust and Python agree on those);
//! - fixed notation when the decimal exponent is in -4..16, with `.0` on whole numbers:
//!   `0.001`, `3.0`, `123456.5`;
//! - otherwise scientific, with a sign and at least two exponent digits: `1e-05`, `2.5e-07`,
//!   `1e+16`;
//! - `nan`, `inf`, `-inf` (a parsed sweep never produces them).
//!
//! Integers are written as integers, strings as they are, booleans `true`/`false`, and lists
//! and mappings as compact JSON.

use serde_json::Value;

/// `x` as Python's `repr(x)` writes it.
pub fn python_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    // `{:e}` finds how many digits round-trip ("-1.2345e-5", "3e0"), but breaks an exact tie
    // between two such strings upwards; Python takes the even one, as correctly rounding to
    // that many digits does.
    let shortest = format!("{x:e}");
    let digits = shortest.split('e').next().unwrap_or("").chars().filter(char::is_ascii_digit).count();
    let sci = format!("{x:.*e}", digits.saturating_sub(1));
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exponent) {
        let point = exponent + 1; // digits before the decimal point
        let text = if point <= 0 {
            format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
        } else if point as usize >= digits.len() {
            format!("{digits}{}.0", "0".repeat(point as usize - digits.len()))
        } else {
            format!("{}.{}", &digits[..point as usize], &digits[point as usize..])
        };
        format!("{sign}{text}")
    } else {
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exponent.unsigned_abs())
    }
}

/// A parameter's value as the text of a workflow var.
pub fn var_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Number(number) => match (number.as_i64(), number.as_u64(), number.as_f64()) {
            (Some(int), _, _) => int.to_string(),
            (_, Some(int), _) => int.to_string(),
            (_, _, Some(float)) => python_float(float),
            _ => number.to_string(),
        },
        Value::Bool(flag) => flag.to_string(),
        Value::Null => "null".to_string(),
        Value::Array(_) | Value::Object(_) => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_read_as_python_repr() {
        let table = [
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (0.001, "0.001"),
            (3.0, "3.0"),
            (-3.0, "-3.0"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (2.5e-7, "2.5e-07"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456.5, "123456.5"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1.5e300, "1.5e+300"),
            (5e-324, "5e-324"),
            (-0.00012, "-0.00012"),
            // Exact ties between two shortest strings go to the even digit, as in Python.
            (779974396281802.0 + 0.25, "779974396281802.2"),
            (-1946628812582478.0 - 0.25, "-1946628812582478.2"),
            (f64::NAN, "nan"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for (x, want) in table {
            assert_eq!(python_float(x), want, "{x:e}");
        }
    }

    #[test]
    fn values_become_var_text() {
        assert_eq!(var_text(&serde_json::json!(32)), "32");
        assert_eq!(var_text(&serde_json::json!(0.5)), "0.5");
        assert_eq!(var_text(&serde_json::json!(2.0)), "2.0");
        assert_eq!(var_text(&serde_json::json!("adam")), "adam");
        assert_eq!(var_text(&serde_json::json!(true)), "true");
        assert_eq!(var_text(&serde_json::json!([1, "a"])), "[1,\"a\"]");
    }
}
