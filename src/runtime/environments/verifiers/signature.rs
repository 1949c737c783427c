//! The `load_environment` of a verifiers module, read from its syntax tree (tree-sitter), never
//! imported: whether the module defines it (or re-exports it from another module), and its
//! parameters as configurable fields (name, type from the annotation, default, required).
//!
//! Decisions worth knowing:
//! - Only module-level definitions count, and the last one wins, as when Python runs the module.
//! - A default that is not a literal (`os.environ.get(…)`, a constant's name) is not evaluated:
//!   the field has no default lachesis knows, its description quotes the expression, and
//!   `load_environment` computes it when no value is configured.
//! - `*args` and `**kwargs` are not fields: nothing names them.

use serde_json::{Map, Value};
use tree_sitter::{Node, Parser};

use super::super::classes::{docstring, first_error_line, first_non_empty_line, string_value, text};
use super::super::fields::{FieldInfo, FieldKind};

/// The name verifiers calls.
pub(super) const LOAD_ENVIRONMENT: &str = "load_environment";
/// Nesting deeper than this in a default is not read (a hostile `[[[[…]]]]` must not recurse
/// without bound).
const MAX_LITERAL_DEPTH: usize = 32;

/// What a module says about `load_environment`.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Found {
    /// Defined here, with its parameters.
    Defined { fields: Vec<FieldInfo> },
    /// Imported from another module (`from .env import load_environment`): the module as written.
    Imported { from: String },
    /// Neither.
    Missing,
}

/// A module's `load_environment` and its docstring's first line.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ModuleInfo {
    pub(super) found: Found,
    pub(super) description: Option<String>,
}

/// Reads `source` (a module's text). `Err` says why it could not be read: one line.
pub(super) fn read_module(parser: &mut Parser, source: &[u8]) -> Result<ModuleInfo, String> {
    let text_source = std::str::from_utf8(source)
        .map_err(|err| format!("not valid UTF-8 at line {}", line_of(source, err)))?;
    let source = text_source.strip_prefix('\u{feff}').unwrap_or(text_source).as_bytes();
    let tree = parser.parse(source, None).ok_or_else(|| "parser produced no syntax tree".to_owned())?;
    let root = tree.root_node();
    if root.has_error() {
        return Err(format!("syntax error at line {}", first_error_line(root)));
    }
    let mut cursor = root.walk();
    let statements: Vec<Node> = root.named_children(&mut cursor).filter(|n| n.kind() != "comment").collect();
    let description = statements
        .first()
        .and_then(|first| docstring(*first, source))
        .and_then(|d| first_non_empty_line(&d).map(str::to_owned));
    let mut found = Found::Missing;
    for stmt in statements {
        let definition = match stmt.kind() {
            "decorated_definition" => stmt.child_by_field_name("definition"),
            _ => Some(stmt),
        };
        let Some(definition) = definition else { continue };
        match definition.kind() {
            "function_definition"
                if definition.child_by_field_name("name").and_then(|n| text(n, source))
                    == Some(LOAD_ENVIRONMENT) =>
            {
                let fields = definition
                    .child_by_field_name("parameters")
                    .map(|params| parameters(params, source))
                    .unwrap_or_default();
                found = Found::Defined { fields };
            }
            "import_from_statement" => {
                if let Some(from) = imports_load_environment(definition, source) {
                    found = Found::Imported { from };
                }
            }
            _ => {}
        }
    }
    Ok(ModuleInfo { found, description })
}

fn line_of(bytes: &[u8], err: std::str::Utf8Error) -> usize {
    bytes[..err.valid_up_to()].iter().filter(|&&b| b == b'\n').count() + 1
}

/// `from X import load_environment` (or `… as load_environment`): X as written.
fn imports_load_environment(stmt: Node, src: &[u8]) -> Option<String> {
    let module = text(stmt.child_by_field_name("module_name")?, src)?.to_owned();
    let mut cursor = stmt.walk();
    let binds = stmt.children_by_field_name("name", &mut cursor).any(|name| {
        let bound = match name.kind() {
            "aliased_import" => name.child_by_field_name("alias"),
            _ => Some(name),
        };
        bound.and_then(|b| text(b, src)) == Some(LOAD_ENVIRONMENT)
    });
    binds.then_some(module)
}

/// The named parameters of a `parameters` node, in order.
fn parameters(params: Node, src: &[u8]) -> Vec<FieldInfo> {
    let mut cursor = params.walk();
    params.named_children(&mut cursor).filter_map(|param| parameter(param, src)).collect()
}

fn parameter(param: Node, src: &[u8]) -> Option<FieldInfo> {
    let (name, annotation, default) = match param.kind() {
        "identifier" => (param, None, None),
        "typed_parameter" => {
            let name = param.named_child(0).filter(|n| n.kind() == "identifier")?;
            (name, param.child_by_field_name("type"), None)
        }
        "default_parameter" => (param.child_by_field_name("name")?, None, param.child_by_field_name("value")),
        "typed_default_parameter" => (
            param.child_by_field_name("name")?,
            param.child_by_field_name("type"),
            param.child_by_field_name("value"),
        ),
        // *args, **kwargs, the `*` and `/` markers
        _ => return None,
    };
    if name.kind() != "identifier" {
        return None;
    }
    let name = text(name, src)?.to_owned();
    let annotation = annotation.and_then(|a| text(a, src)).map(squeeze);
    let default_value =
        default.map(|d| literal(d, src, 0).ok_or_else(|| text(d, src).map(squeeze).unwrap_or_default()));
    Some(field(name, annotation.as_deref(), default_value))
}

/// A field from what the source says: its annotation, and its default (a literal's value, or
/// the expression's text when it is not one).
pub(super) fn field(
    name: String,
    annotation: Option<&str>,
    default: Option<Result<Value, String>>,
) -> FieldInfo {
    let typed = annotation.map(type_of);
    let (mut type_name, kind, mut optional) = match (&typed, &default) {
        (Some(typed), _) => (typed.name.clone(), typed.kind, typed.optional),
        (None, Some(Ok(value))) => inferred(value),
        (None, _) => ("any".to_owned(), FieldKind::Other, false),
    };
    let (required, default, description) = match default {
        None => (true, Value::Null, None),
        Some(Ok(value)) => (false, value, None),
        Some(Err(expression)) => (
            false,
            Value::Null,
            Some(format!(
                "default: {} (not a literal: load_environment computes it when no value is set)",
                crate::text::one_line(&expression)
            )),
        ),
    };
    if default.is_null() && !required && !optional && description.is_none() {
        // `x: int = None`: None is accepted, whatever the annotation says.
        optional = true;
        type_name = format!("Optional[{type_name}]");
    }
    FieldInfo { name, type_name, kind, optional, required, value: default.clone(), default, description }
}

/// An annotation, read for lachesis's checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TypeOf {
    /// As shown: `Optional[X]` for every spelling of an optional X (`X | None`, `Union[X, None]`).
    pub(super) name: String,
    pub(super) kind: FieldKind,
    pub(super) optional: bool,
}

pub(super) fn type_of(annotation: &str) -> TypeOf {
    let plain = unquote(annotation.trim());
    let plain = plain.strip_prefix("typing.").unwrap_or(plain);
    let alternatives: Vec<&str> =
        if let Some(inner) = plain.strip_prefix("Optional[").and_then(|r| r.strip_suffix(']')) {
            vec![inner.trim(), "None"]
        } else if let Some(inner) = plain.strip_prefix("Union[").and_then(|r| r.strip_suffix(']')) {
            split_top_level(inner, ',')
        } else {
            split_top_level(plain, '|')
        };
    let optional = alternatives.iter().any(|alt| *alt == "None" || *alt == "NoneType");
    let rest: Vec<&str> =
        alternatives.into_iter().filter(|alt| *alt != "None" && *alt != "NoneType").collect();
    let (inner, kind) = match rest.as_slice() {
        [one] => (unquote(one).to_owned(), kind_of(unquote(one))),
        [] => ("None".to_owned(), FieldKind::Other),
        many => (many.join(" | "), FieldKind::Other),
    };
    let name = if optional { format!("Optional[{inner}]") } else { inner };
    TypeOf { name, kind, optional }
}

fn kind_of(annotation: &str) -> FieldKind {
    let annotation = annotation.strip_prefix("typing.").unwrap_or(annotation);
    let head = annotation.split('[').next().unwrap_or_default().trim();
    match head {
        "int" => FieldKind::Int,
        "float" => FieldKind::Float,
        "bool" => FieldKind::Bool,
        "str" => FieldKind::Str,
        "list" | "List" | "Sequence" | "tuple" | "Tuple" | "set" | "Set" | "frozenset" | "FrozenSet" => {
            FieldKind::List
        }
        "dict" | "Dict" | "Mapping" | "MutableMapping" => FieldKind::Dict,
        "Literal" => {
            let first = annotation.split_once('[').map(|(_, r)| r.trim_start()).unwrap_or_default();
            match first.chars().next() {
                Some('\'' | '"') => FieldKind::Str,
                Some(c) if c.is_ascii_digit() || c == '-' => FieldKind::Int,
                _ if first.starts_with("True") || first.starts_with("False") => FieldKind::Bool,
                _ => FieldKind::Other,
            }
        }
        _ => FieldKind::Other,
    }
}

/// The type an unannotated parameter's literal default has.
fn inferred(value: &Value) -> (String, FieldKind, bool) {
    let (name, kind) = match value {
        Value::Bool(_) => ("bool", FieldKind::Bool),
        Value::Number(n) if n.is_f64() => ("float", FieldKind::Float),
        Value::Number(_) => ("int", FieldKind::Int),
        Value::String(_) => ("str", FieldKind::Str),
        Value::Array(_) => ("list", FieldKind::List),
        Value::Object(_) => ("dict", FieldKind::Dict),
        Value::Null => return ("Optional[any]".to_owned(), FieldKind::Other, true),
    };
    (name.to_owned(), kind, false)
}

/// `"int"` (a string annotation) → `int`.
fn unquote(text: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = text.strip_prefix(quote).and_then(|t| t.strip_suffix(quote)) {
            return inner.trim();
        }
    }
    text
}

/// `text` split at `separator` outside brackets, each part trimmed.
fn split_top_level(text: &str, separator: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (at, c) in text.char_indices() {
        match c {
            '[' | '(' | '{' => depth += 1,
            ']' | ')' | '}' => depth = depth.saturating_sub(1),
            c if c == separator && depth == 0 => {
                parts.push(text[start..at].trim());
                start = at + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(text[start..].trim());
    parts
}

/// Whitespace runs (a multi-line annotation) as one space.
fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The value of a literal expression: numbers, strings, True/False/None, and lists, tuples and
/// string-keyed dicts of them. `None` for anything that needs running.
fn literal(node: Node, src: &[u8], depth: usize) -> Option<Value> {
    if depth > MAX_LITERAL_DEPTH {
        return None;
    }
    match node.kind() {
        "integer" => integer(text(node, src)?),
        "float" => float(text(node, src)?),
        "string" | "concatenated_string" => string_value(node, src).map(Value::String),
        "true" => Some(Value::Bool(true)),
        "false" => Some(Value::Bool(false)),
        "none" => Some(Value::Null),
        "parenthesized_expression" => literal(node.named_child(0)?, src, depth + 1),
        "unary_operator" => {
            let operand = literal(node.child_by_field_name("argument")?, src, depth + 1)?;
            match (text(node.child_by_field_name("operator")?, src)?, operand) {
                ("+", number @ Value::Number(_)) => Some(number),
                ("-", Value::Number(n)) => {
                    if let Some(i) = n.as_i64() {
                        i.checked_neg().map(Value::from)
                    } else {
                        serde_json::Number::from_f64(-n.as_f64()?).map(Value::Number)
                    }
                }
                _ => None,
            }
        }
        "list" | "tuple" => {
            let mut cursor = node.walk();
            let items: Option<Vec<Value>> = node
                .named_children(&mut cursor)
                .filter(|n| n.kind() != "comment")
                .map(|item| literal(item, src, depth + 1))
                .collect();
            items.map(Value::Array)
        }
        "dictionary" => {
            let mut map = Map::new();
            let mut cursor = node.walk();
            for pair in node.named_children(&mut cursor).filter(|n| n.kind() != "comment") {
                if pair.kind() != "pair" {
                    return None; // `**other`
                }
                let Value::String(key) = literal(pair.child_by_field_name("key")?, src, depth + 1)? else {
                    return None;
                };
                map.insert(key, literal(pair.child_by_field_name("value")?, src, depth + 1)?);
            }
            Some(Value::Object(map))
        }
        _ => None,
    }
}

fn integer(text: &str) -> Option<Value> {
    let digits: String = text.chars().filter(|&c| c != '_').collect();
    let lower = digits.to_ascii_lowercase();
    let parsed = if let Some(hex) = lower.strip_prefix("0x") {
        i64::from_str_radix(hex, 16).ok()
    } else if let Some(oct) = lower.strip_prefix("0o") {
        i64::from_str_radix(oct, 8).ok()
    } else if let Some(bin) = lower.strip_prefix("0b") {
        i64::from_str_radix(bin, 2).ok()
    } else {
        lower.parse::<i64>().ok()
    };
    parsed.map(Value::from)
}

fn float(text: &str) -> Option<Value> {
    let plain: String = text.chars().filter(|&c| c != '_').collect();
    if plain.ends_with(['j', 'J']) {
        return None; // complex
    }
    serde_json::Number::from_f64(plain.parse().ok()?).map(Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn read(source: &str) -> Result<ModuleInfo, String> {
        let mut parser = Parser::new();
        parser.set_language(&tree_sitter_python::LANGUAGE.into()).unwrap();
        read_module(&mut parser, source.as_bytes())
    }

    fn fields(source: &str) -> Vec<FieldInfo> {
        match read(source).unwrap().found {
            Found::Defined { fields } => fields,
            other => panic!("no definition: {other:?}"),
        }
    }

    fn summary(f: &FieldInfo) -> (String, String, FieldKind, bool, bool, Value) {
        (f.name.clone(), f.type_name.clone(), f.kind, f.optional, f.required, f.default.clone())
    }

    #[test]
    fn parameters_become_typed_fields() {
        let source = r#""""Reverse a word.

More.
"""
import verifiers as vf

def load_environment(
    split: str,
    num_examples: int = 8,
    temperature: float = -0.5,
    strict: bool = False,
    seed: int | None = None,
    tags: list[str] | None = None,
    weights: Optional[Dict[str, float]] = {"a": 1.0, "b": -2},
    mode: Literal["easy", "hard"] = "easy",
    model: "str" = 'gpt' 'x',
    plain = 3,
    untyped_none = None,
    cap: int = None,
    pair: tuple[int, int] = (1, 0x10),
    computed: str = os.environ.get("X", "y"),
    *args,
    size: Union[int, None] = 1_000,
    **kwargs,
) -> vf.Environment:
    return vf.SingleTurnEnv()
"#;
        let got: Vec<_> = fields(source).iter().map(summary).collect();
        let expect = |n: &str, t: &str, k, o, r, d: Value| (n.to_owned(), t.to_owned(), k, o, r, d);
        assert_eq!(
            got,
            vec![
                expect("split", "str", FieldKind::Str, false, true, Value::Null),
                expect("num_examples", "int", FieldKind::Int, false, false, json!(8)),
                expect("temperature", "float", FieldKind::Float, false, false, json!(-0.5)),
                expect("strict", "bool", FieldKind::Bool, false, false, json!(false)),
                expect("seed", "Optional[int]", FieldKind::Int, true, false, Value::Null),
                expect("tags", "Optional[list[str]]", FieldKind::List, true, false, Value::Null),
                expect(
                    "weights",
                    "Optional[Dict[str, float]]",
                    FieldKind::Dict,
                    true,
                    false,
                    json!({"a": 1.0, "b": -2})
                ),
                expect("mode", "Literal[\"easy\", \"hard\"]", FieldKind::Str, false, false, json!("easy")),
                expect("model", "str", FieldKind::Str, false, false, json!("gptx")),
                expect("plain", "int", FieldKind::Int, false, false, json!(3)),
                expect("untyped_none", "Optional[any]", FieldKind::Other, true, false, Value::Null),
                expect("cap", "Optional[int]", FieldKind::Int, true, false, Value::Null),
                expect("pair", "tuple[int, int]", FieldKind::List, false, false, json!([1, 16])),
                expect("computed", "str", FieldKind::Str, false, false, Value::Null),
                expect("size", "Optional[int]", FieldKind::Int, true, false, json!(1000)),
            ]
        );
        let computed = fields(source).into_iter().find(|f| f.name == "computed").unwrap();
        assert_eq!(
            computed.description.as_deref(),
            Some(
                "default: os.environ.get(\"X\", \"y\") (not a literal: load_environment computes it when no value is set)"
            )
        );
        assert_eq!(read(source).unwrap().description.as_deref(), Some("Reverse a word."));
    }

    #[test]
    fn the_last_module_level_definition_counts() {
        let source = "def load_environment(a: int = 1):\n    pass\n\nif X:\n    def load_environment(b=2):\n        pass\n\nclass C:\n    def load_environment(self, c=3):\n        pass\n\n@decorate\ndef load_environment(d: str = 'x', **kw):\n    pass\n";
        let got: Vec<_> = fields(source).iter().map(|f| f.name.clone()).collect();
        assert_eq!(got, ["d"]);
    }

    #[test]
    fn re_exports_missing_and_broken_modules() {
        assert_eq!(
            read("from .env import load_environment\n").unwrap().found,
            Found::Imported { from: ".env".into() }
        );
        assert_eq!(
            read("from pkg.impl import (other, make as load_environment)\n").unwrap().found,
            Found::Imported { from: "pkg.impl".into() }
        );
        assert_eq!(read("from .env import load_environment as other\n").unwrap().found, Found::Missing);
        assert_eq!(read("def load_env():\n    pass\n").unwrap().found, Found::Missing);
        assert_eq!(read("x = 1\ndef load_environment(:\n").unwrap_err(), "syntax error at line 2");
        let mut parser = Parser::new();
        parser.set_language(&tree_sitter_python::LANGUAGE.into()).unwrap();
        assert_eq!(read_module(&mut parser, b"x = 1\n\xff\n").unwrap_err(), "not valid UTF-8 at line 2");
    }

    #[test]
    fn deep_defaults_are_not_read() {
        let deep = format!("def load_environment(x={}1{}):\n    pass\n", "[".repeat(500), "]".repeat(500));
        let got = fields(&deep);
        assert_eq!(got[0].default, Value::Null);
        assert!(got[0].description.as_deref().is_some_and(|d| d.starts_with("default: [[[")), "{got:?}");
    }

    #[test]
    fn annotations_read_as_types() {
        let t = |a: &str| type_of(a);
        assert_eq!(
            t("None | str"),
            TypeOf { name: "Optional[str]".into(), kind: FieldKind::Str, optional: true }
        );
        assert_eq!(t("typing.Optional[bool]").kind, FieldKind::Bool);
        assert_eq!(
            t("int | str"),
            TypeOf { name: "int | str".into(), kind: FieldKind::Other, optional: false }
        );
        assert_eq!(t("dict[str, int | None]").kind, FieldKind::Dict);
        assert_eq!(t("Literal[1, 2]").kind, FieldKind::Int);
        assert_eq!(t("Literal[True]").kind, FieldKind::Bool);
        assert_eq!(t("vf.Parser").kind, FieldKind::Other);
        assert_eq!(t("").kind, FieldKind::Other);
    }

    proptest! {
        #[test]
        fn signatures_never_panic(params in "[a-z_:=|\\[\\]\\(\\)\\{\\}'\", 0-9.*-]{0,80}", annotation in "\\PC{0,40}") {
            let source = format!("def load_environment({params}):\n    pass\n");
            if let Ok(ModuleInfo { found: Found::Defined { fields }, .. }) = read(&source) {
                for f in fields {
                    prop_assert!(!f.name.is_empty());
                    prop_assert!(!f.required || f.default.is_null(), "a required field has no default");
                }
            }
            let _ = type_of(&annotation);
        }
    }
}
