//! The configurable fields of an environment, as introspection reports them, and the typing
//! of a user's text into a value that fits a field.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldInfo {
    pub name: String,
    /// The annotation as written for people, e.g. `Optional[str]`, `List[str]`.
    pub type_name: String,
    pub kind: FieldKind,
    /// `None` is an accepted value.
    pub optional: bool,
    /// The class declares no default, so a value must be given.
    #[serde(default)]
    pub required: bool,
    /// The class default (`null` when required). Values JSON cannot hold are their Python repr.
    pub default: serde_json::Value,
    /// The value `config_init()` set, or the default when it was not called successfully.
    pub value: serde_json::Value,
    pub description: Option<String>,
}

/// Coarse type of a field, enough to turn a user's string into the right JSON value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldKind {
    Int,
    Float,
    Bool,
    Str,
    List,
    Dict,
    /// Anything else, including kinds a newer helper might report.
    #[serde(other)]
    Other,
}

/// Why a user-supplied value does not fit a field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field '{field}' expects {expected}, got '{raw}'")]
pub struct ValueError {
    pub field: String,
    pub expected: &'static str,
    pub raw: String,
}

/// Converts a string typed by a user (CLI flag, MCP argument) into the JSON value for `field`.
///
/// # Errors
///
/// [`ValueError`] when `raw` does not read as the field's kind.
///
/// Optional fields take `null`/`none` (any case) as None; for a string field that means the
/// literal words cannot be set, which matches how config files spell None.
pub fn check_value(field: &FieldInfo, raw: &str) -> Result<serde_json::Value, ValueError> {
    use serde_json::Value;

    let trimmed = raw.trim();
    if field.optional && (trimmed.eq_ignore_ascii_case("null") || trimmed.eq_ignore_ascii_case("none")) {
        return Ok(Value::Null);
    }
    // The text is echoed: on one line, so the error stays one line.
    let invalid =
        |expected| ValueError { field: field.name.clone(), expected, raw: crate::text::one_line(raw) };
    let annotation = strip_optional(field.type_name.trim());
    if let Some(allowed) = literal_values(annotation) {
        let value = match field.kind {
            FieldKind::Str => Value::String(raw.to_owned()),
            _ => check_value(&FieldInfo { type_name: String::new(), ..field.clone() }, raw)?,
        };
        return if allowed.contains(&value) { Ok(value) } else { Err(invalid("one of the Literal values")) };
    }
    if field.kind == FieldKind::List
        && let Some(item) = list_item_kind(annotation)
    {
        let Some(Value::Array(items)) = parse_list(trimmed) else {
            return Err(invalid("a list (a JSON array or comma-separated values)"));
        };
        let typed: Option<Vec<Value>> = items.into_iter().map(|v| typed_item(item, v)).collect();
        return typed.map(Value::Array).ok_or_else(|| invalid(item.list_of()));
    }
    match field.kind {
        FieldKind::Int => parse_int(trimmed).ok_or_else(|| invalid("an integer")),
        FieldKind::Float => parse_float(trimmed).ok_or_else(|| invalid("a number")),
        FieldKind::Bool => parse_bool(trimmed).map(Value::Bool).ok_or_else(|| invalid("true or false")),
        FieldKind::Str => Ok(Value::String(raw.to_owned())),
        FieldKind::List => {
            parse_list(trimmed).ok_or_else(|| invalid("a list (a JSON array or comma-separated values)"))
        }
        FieldKind::Dict => match serde_json::from_str(trimmed) {
            Ok(object @ Value::Object(_)) => Ok(object),
            _ => Err(invalid("a JSON object such as {\"key\": 1}")),
        },
        FieldKind::Other => {
            Ok(serde_json::from_str(trimmed).unwrap_or_else(|_| Value::String(raw.to_owned())))
        }
    }
}

/// `Optional[X]` → `X`; anything else as it is.
fn strip_optional(annotation: &str) -> &str {
    annotation.strip_prefix("Optional[").and_then(|rest| rest.strip_suffix(']')).unwrap_or(annotation)
}

/// The values of `Literal['a', 'b', 3, True]` as JSON; None when `annotation` is not a Literal
/// whose values all read back (then no membership check is made).
fn literal_values(annotation: &str) -> Option<Vec<serde_json::Value>> {
    use serde_json::Value;
    let inner = annotation.strip_prefix("Literal[")?.strip_suffix(']')?;
    let mut values = Vec::new();
    let mut rest = inner.trim();
    while !rest.is_empty() {
        let (value, after) = match rest.chars().next()? {
            quote @ ('\'' | '"') => {
                let end = rest[1..].find(quote)? + 1;
                let text = &rest[1..end];
                if text.contains('\\') {
                    return None; // escapes: leave the check to pydantic
                }
                (Value::String(text.to_owned()), &rest[end + 1..])
            }
            _ => {
                let end = rest.find(',').unwrap_or(rest.len());
                let token = rest[..end].trim();
                let value = match token {
                    "True" => Value::Bool(true),
                    "False" => Value::Bool(false),
                    "None" => Value::Null,
                    number => parse_int(number).or_else(|| parse_float(number))?,
                };
                (value, &rest[end..])
            }
        };
        values.push(value);
        rest = after.trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    (!values.is_empty()).then_some(values)
}

/// The item type of a list annotation (`List[str]`, `list[int]`, `Sequence[float]`,
/// `Tuple[bool, ...]`), when it is a scalar lachesis can check.
#[derive(Clone, Copy)]
enum ItemKind {
    Str,
    Int,
    Float,
    Bool,
}

impl ItemKind {
    fn list_of(self) -> &'static str {
        match self {
            ItemKind::Str => "a list of strings",
            ItemKind::Int => "a list of integers",
            ItemKind::Float => "a list of numbers",
            ItemKind::Bool => "a list of true/false values",
        }
    }
}

fn list_item_kind(annotation: &str) -> Option<ItemKind> {
    let (base, inner) = annotation.split_once('[')?;
    if !["List", "list", "Sequence", "Set", "set", "FrozenSet", "frozenset", "Tuple", "tuple"].contains(&base)
    {
        return None;
    }
    let inner = inner.strip_suffix(']')?;
    let item = inner.strip_suffix(", ...").unwrap_or(inner);
    match item.trim() {
        "str" => Some(ItemKind::Str),
        "int" => Some(ItemKind::Int),
        "float" => Some(ItemKind::Float),
        "bool" => Some(ItemKind::Bool),
        _ => None,
    }
}

/// One list item as `kind`: JSON items must already be of the kind (pydantic's strict reading
/// of `[1, 2]` for `List[str]`); comma-separated items arrive as text and are converted.
fn typed_item(kind: ItemKind, item: serde_json::Value) -> Option<serde_json::Value> {
    use serde_json::Value;
    match (kind, item) {
        (ItemKind::Str, Value::String(s)) => Some(Value::String(s)),
        (ItemKind::Int, Value::Number(n)) if n.is_i64() || n.is_u64() => Some(Value::Number(n)),
        (ItemKind::Int, Value::String(s)) => parse_int(s.trim()),
        (ItemKind::Float, Value::Number(n)) => Some(Value::Number(n)),
        (ItemKind::Float, Value::String(s)) => parse_float(s.trim()),
        (ItemKind::Bool, Value::Bool(b)) => Some(Value::Bool(b)),
        (ItemKind::Bool, Value::String(s)) => parse_bool(s.trim()).map(Value::Bool),
        _ => None,
    }
}

fn parse_int(text: &str) -> Option<serde_json::Value> {
    // Python allows digit separators (1_000); a leading, trailing or doubled `_` is not allowed.
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
        || !digits.chars().all(|c| c.is_ascii_digit() || c == '_')
    {
        return None;
    }
    let plain: String = text.chars().filter(|&c| c != '_').collect();
    if let Ok(n) = plain.parse::<i64>() {
        return Some(n.into());
    }
    plain.parse::<u64>().ok().map(Into::into)
}

fn parse_float(text: &str) -> Option<serde_json::Value> {
    let number: f64 = text.parse().ok()?;
    // `from_f64` refuses infinities and NaN (which `parse` accepts): JSON cannot carry them.
    serde_json::Number::from_f64(number).map(serde_json::Value::Number)
}

fn parse_bool(text: &str) -> Option<bool> {
    match text.to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" => Some(true),
        "false" | "no" | "0" => Some(false),
        _ => None,
    }
}

fn parse_list(text: &str) -> Option<serde_json::Value> {
    use serde_json::Value;

    if text.starts_with('[') {
        return match serde_json::from_str(text) {
            Ok(array @ Value::Array(_)) => Some(array),
            _ => None,
        };
    }
    // Items stay strings: pydantic turns "3" into 3 for a list of ints, but would refuse 3 for
    // a list of strings.
    let items = text
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| Value::String(item.to_owned()))
        .collect();
    Some(Value::Array(items))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(name: &str, kind: FieldKind, optional: bool) -> FieldInfo {
        FieldInfo {
            name: name.to_owned(),
            type_name: String::new(),
            kind,
            optional,
            required: false,
            default: serde_json::Value::Null,
            value: serde_json::Value::Null,
            description: None,
        }
    }

    fn ok(kind: FieldKind, raw: &str) -> serde_json::Value {
        check_value(&field("f", kind, false), raw).unwrap_or_else(|err| panic!("{raw:?} as {kind:?}: {err}"))
    }

    fn bad(kind: FieldKind, raw: &str) -> String {
        match check_value(&field("f", kind, false), raw) {
            Ok(value) => panic!("{raw:?} as {kind:?} was accepted as {value}"),
            Err(err) => err.to_string(),
        }
    }

    // ---- check_value --------------------------------------------------------------------------

    #[test]
    fn check_int() {
        assert_eq!(ok(FieldKind::Int, "4"), json!(4));
        assert_eq!(ok(FieldKind::Int, " -12 "), json!(-12));
        assert_eq!(ok(FieldKind::Int, "+7"), json!(7));
        assert_eq!(ok(FieldKind::Int, "1_000"), json!(1000));
        assert_eq!(ok(FieldKind::Int, "18446744073709551615"), json!(u64::MAX));
        for raw in ["abc", "", "4.0", "1e3", "0x10", "_1", "1_", "1__0", "-", "99999999999999999999", "4 5"] {
            bad(FieldKind::Int, raw);
        }
        let err = check_value(&field("group_size", FieldKind::Int, false), "abc").unwrap_err();
        assert_eq!(err.to_string(), "field 'group_size' expects an integer, got 'abc'");
        assert_eq!(err, ValueError { field: "group_size".into(), expected: "an integer", raw: "abc".into() });
    }

    #[test]
    fn check_float() {
        assert_eq!(ok(FieldKind::Float, "0.5"), json!(0.5));
        assert_eq!(ok(FieldKind::Float, "3"), json!(3.0));
        assert!(ok(FieldKind::Float, "3").is_f64());
        assert_eq!(ok(FieldKind::Float, "-1e-3"), json!(-0.001));
        assert_eq!(ok(FieldKind::Float, ".25"), json!(0.25));
        for raw in ["abc", "", "nan", "inf", "-infinity", "NaN", "1,5", "0.5.1"] {
            bad(FieldKind::Float, raw);
        }
        assert_eq!(bad(FieldKind::Float, "x"), "field 'f' expects a number, got 'x'");
    }

    #[test]
    fn check_bool() {
        for raw in ["true", "True", "TRUE", "yes", "Yes", "1", " true "] {
            assert_eq!(ok(FieldKind::Bool, raw), json!(true), "{raw}");
        }
        for raw in ["false", "False", "no", "NO", "0"] {
            assert_eq!(ok(FieldKind::Bool, raw), json!(false), "{raw}");
        }
        for raw in ["", "2", "y", "maybe", "null"] {
            bad(FieldKind::Bool, raw);
        }
        assert_eq!(bad(FieldKind::Bool, "maybe"), "field 'f' expects true or false, got 'maybe'");
    }

    #[test]
    fn check_str_keeps_the_text_as_typed() {
        assert_eq!(ok(FieldKind::Str, "Qwen/Qwen3-8B"), json!("Qwen/Qwen3-8B"));
        assert_eq!(ok(FieldKind::Str, "  spaced  "), json!("  spaced  "));
        assert_eq!(ok(FieldKind::Str, ""), json!(""));
        assert_eq!(ok(FieldKind::Str, "42"), json!("42"));
        // Not optional: the words are just text.
        assert_eq!(ok(FieldKind::Str, "none"), json!("none"));
    }

    #[test]
    fn check_list() {
        assert_eq!(ok(FieldKind::List, "[1, \"a\", null]"), json!([1, "a", null]));
        assert_eq!(ok(FieldKind::List, "a, b ,c"), json!(["a", "b", "c"]));
        assert_eq!(ok(FieldKind::List, "1,2"), json!(["1", "2"]));
        assert_eq!(ok(FieldKind::List, "single"), json!(["single"]));
        assert_eq!(ok(FieldKind::List, "a,,b,"), json!(["a", "b"]));
        assert_eq!(ok(FieldKind::List, ""), json!([]));
        assert_eq!(ok(FieldKind::List, "[]"), json!([]));
        assert_eq!(
            bad(FieldKind::List, "[1, 2"),
            "field 'f' expects a list (a JSON array or comma-separated values), got '[1, 2'"
        );
        bad(FieldKind::List, "[1] x");
    }

    #[test]
    fn check_dict() {
        assert_eq!(ok(FieldKind::Dict, r#"{"a": 1, "b": [true]}"#), json!({"a": 1, "b": [true]}));
        assert_eq!(ok(FieldKind::Dict, " {} "), json!({}));
        for raw in ["", "a=1", "[1]", "1", "{'a': 1}", "null"] {
            bad(FieldKind::Dict, raw);
        }
        assert_eq!(
            bad(FieldKind::Dict, "a=1"),
            r#"field 'f' expects a JSON object such as {"key": 1}, got 'a=1'"#
        );
    }

    #[test]
    fn check_other_prefers_json() {
        assert_eq!(ok(FieldKind::Other, "3"), json!(3));
        assert_eq!(ok(FieldKind::Other, "{\"k\": 1}"), json!({"k": 1}));
        assert_eq!(ok(FieldKind::Other, "true"), json!(true));
        assert_eq!(ok(FieldKind::Other, "STOP_TRAIN"), json!("STOP_TRAIN"));
        assert_eq!(ok(FieldKind::Other, "[1,"), json!("[1,"));
        assert_eq!(ok(FieldKind::Other, "null"), json!(null));
    }

    fn typed(name: &str, type_name: &str, kind: FieldKind) -> FieldInfo {
        FieldInfo { type_name: type_name.into(), ..field(name, kind, type_name.starts_with("Optional[")) }
    }

    #[test]
    fn literals_accept_only_their_values() {
        let mode = typed("mode", "Literal['a', 'b']", FieldKind::Str);
        assert_eq!(check_value(&mode, "a"), Ok(json!("a")));
        let err = check_value(&mode, "c").unwrap_err().to_string();
        assert_eq!(err, "field 'mode' expects one of the Literal values, got 'c'");
        let level = typed("level", "Optional[Literal[1, 2, 3]]", FieldKind::Int);
        assert_eq!(check_value(&level, "2"), Ok(json!(2)));
        assert_eq!(check_value(&level, "none"), Ok(json!(null)));
        assert!(check_value(&level, "4").is_err());
        let mixed = typed("m", "Literal['x', 2, True]", FieldKind::Other);
        assert_eq!(check_value(&mixed, "2"), Ok(json!(2)));
        assert!(check_value(&mixed, "3").is_err());
    }

    #[test]
    fn typed_lists_check_their_items() {
        let names = typed("names", "List[str]", FieldKind::List);
        assert_eq!(check_value(&names, "a,b"), Ok(json!(["a", "b"])));
        assert_eq!(check_value(&names, "[\"a\"]"), Ok(json!(["a"])));
        let err = check_value(&names, "[1,2]").unwrap_err().to_string();
        assert_eq!(err, "field 'names' expects a list of strings, got '[1,2]'");
        let sizes = typed("sizes", "list[int]", FieldKind::List);
        assert_eq!(check_value(&sizes, "1, 2"), Ok(json!([1, 2])));
        assert_eq!(check_value(&sizes, "[3]"), Ok(json!([3])));
        assert!(check_value(&sizes, "1, x").is_err());
        assert!(check_value(&sizes, "[1.5]").is_err());
        let untyped = typed("any", "List[Dict[str, int]]", FieldKind::List);
        assert_eq!(check_value(&untyped, "[{\"a\": 1}]"), Ok(json!([{"a": 1}])));
    }

    #[test]
    fn check_optional_accepts_none() {
        let kinds = [
            FieldKind::Int,
            FieldKind::Float,
            FieldKind::Bool,
            FieldKind::Str,
            FieldKind::List,
            FieldKind::Dict,
            FieldKind::Other,
        ];
        for kind in kinds {
            let optional = field("f", kind, true);
            for raw in ["null", "None", "NONE", " none "] {
                assert_eq!(check_value(&optional, raw), Ok(json!(null)), "{kind:?} {raw}");
            }
        }
        let wandb_name = field("wandb_name", FieldKind::Str, true);
        assert_eq!(check_value(&wandb_name, "run-1"), Ok(json!("run-1")));
        let limit = field("max_reasoning_tokens", FieldKind::Int, true);
        assert_eq!(check_value(&limit, "128"), Ok(json!(128)));
        assert_eq!(
            check_value(&limit, "lots").unwrap_err().to_string(),
            "field 'max_reasoning_tokens' expects an integer, got 'lots'"
        );
        // Not optional: null is refused where the kind has no null.
        assert_eq!(bad(FieldKind::Int, "null"), "field 'f' expects an integer, got 'null'");
    }
}
