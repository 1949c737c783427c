//! A W&B sweep file's `program:` and `command:`: what W&B's agent (`wandb agent`, 0.31) runs for
//! each member, read so that lachesis runs the same command line.
//!
//! - `command` defaults to `[${env}, ${interpreter}, ${program}, ${args}]`. An element that is a
//!   whole macro expands to its list (`${args}`: one `--name=value` per parameter); any other
//!   element is passed as written (W&B expands macros only as whole elements).
//! - A value is written as Python's `str` writes it (`1e-05`, `True`, `None`, `['a', 1]`), and
//!   `${args_json}` as Python's `json.dumps` (`{"lr": 1e-05}`), as the agent does.
//! - Deliberate differences, each said where it is refused or mapped: `${interpreter}` is the
//!   daemon's Python (`LACHESIS_PYTHON`), not whatever `python` the PATH finds; `${envvar:NAME}`
//!   is refused (it would put an environment value, perhaps a secret, in argv, which `ps`
//!   shows); an unknown macro is refused rather than dropped.

use serde_json::Value;

use super::format::python_float;
use super::spec::SweepError;

/// W&B's agent's macros.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Macro {
    Env,
    Interpreter,
    Program,
    Args,
    ArgsNoEquals,
    ArgsNoHyphens,
    ArgsNoBooleanFlags,
    ArgsJson,
    ArgsJsonFile,
    ArgsAppendHydra,
    ArgsOverrideHydra,
}

const MACROS: [(&str, Macro); 11] = [
    ("env", Macro::Env),
    ("interpreter", Macro::Interpreter),
    ("program", Macro::Program),
    ("args", Macro::Args),
    ("args_no_equals", Macro::ArgsNoEquals),
    ("args_no_hyphens", Macro::ArgsNoHyphens),
    ("args_no_boolean_flags", Macro::ArgsNoBooleanFlags),
    ("args_json", Macro::ArgsJson),
    ("args_json_file", Macro::ArgsJsonFile),
    ("args_append_hydra", Macro::ArgsAppendHydra),
    ("args_override_hydra", Macro::ArgsOverrideHydra),
];

/// One element of `command`.
#[derive(Clone, Debug, PartialEq)]
pub enum Part {
    Text(String),
    Macro(Macro),
}

/// A checked `program:` / `command:` pair.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// As written: a path relative to the sweep's directory.
    pub program: Option<String>,
    pub command: Vec<Part>,
}

/// Where the values of one member go in its command line.
pub struct Expansion<'a> {
    /// (parameter name, value), in the sweep's parameter order.
    pub values: &'a [(String, Value)],
    /// What `${interpreter}` is.
    pub interpreter: &'a str,
    /// The file `${args_json_file}` names (the member's; written before the program starts).
    pub args_json_file: &'a str,
}

fn invalid(path: &str, problem: impl Into<String>) -> SweepError {
    SweepError::Invalid { path: path.to_string(), problem: problem.into() }
}

impl Program {
    /// Checks `program` and `command` as a W&B file gives them.
    pub fn parse(program: Option<String>, command: Option<Vec<Value>>) -> Result<Program, SweepError> {
        if let Some(program) = &program {
            check_program(program)?;
        }
        let command = match command {
            None => vec![
                Part::Macro(Macro::Env),
                Part::Macro(Macro::Interpreter),
                Part::Macro(Macro::Program),
                Part::Macro(Macro::Args),
            ],
            Some(parts) if parts.is_empty() => return Err(invalid("command", "is empty: name what to run")),
            Some(parts) => {
                parts.iter().enumerate().map(|(i, part)| command_part(i, part)).collect::<Result<_, _>>()?
            }
        };
        if program.is_none() && command.contains(&Part::Macro(Macro::Program)) {
            return Err(invalid("program", "missing: the command runs ${program}"));
        }
        if !command
            .iter()
            .any(|part| matches!(part, Part::Text(_) | Part::Macro(Macro::Program | Macro::Interpreter)))
        {
            return Err(invalid("command", "names no program to run"));
        }
        Ok(Program { program, command })
    }

    /// The member's command line, as W&B's agent would make it.
    pub fn argv(&self, at: &Expansion<'_>) -> Vec<String> {
        let mut argv = Vec::new();
        for part in &self.command {
            match part {
                Part::Text(text) => argv.push(text.clone()),
                Part::Macro(which) => argv.extend(expand(*which, self.program.as_deref(), at)),
            }
        }
        argv
    }

    /// Whether the command reads `${args_json_file}` (a file to write before it starts).
    pub fn reads_json_file(&self) -> bool {
        self.command.contains(&Part::Macro(Macro::ArgsJsonFile))
    }
}

/// A relative path on one line without `..`: the program stays inside the sweep's directory.
fn check_program(program: &str) -> Result<(), SweepError> {
    let bad =
        |problem: &str| Err(invalid("program", format!("'{}' {problem}", crate::text::one_line(program))));
    if program.trim().is_empty() || program.len() > 4096 || program.chars().any(char::is_control) {
        return bad("is not a path on one line");
    }
    let path = std::path::Path::new(program);
    if path.is_absolute() {
        return bad("is absolute: name it relative to the sweep's directory");
    }
    if path.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return bad("leaves the sweep's directory (..)");
    }
    Ok(())
}

fn command_part(index: usize, part: &Value) -> Result<Part, SweepError> {
    let path = format!("command[{index}]");
    let text = match part {
        Value::String(text) => text.clone(),
        // W&B's agent takes `str(c)` of each element.
        Value::Number(_) | Value::Bool(_) => python_str(part),
        _ => return Err(invalid(&path, "must be a string")),
    };
    if text.chars().any(|c| c == '\0') || text.len() > 64 * 1024 {
        return Err(invalid(&path, "is not an argument (a NUL, or over 64 KiB)"));
    }
    if text.contains("${envvar:") {
        return Err(invalid(
            &path,
            "${envvar:…} is not expanded: it would put an environment value in argv, which `ps` shows; read the variable in the program",
        ));
    }
    if let Some(name) = text.strip_prefix("${").and_then(|rest| rest.strip_suffix('}')) {
        return match MACROS.iter().find(|(known, _)| *known == name) {
            Some((_, which)) => Ok(Part::Macro(*which)),
            None => Err(invalid(
                &path,
                format!(
                    "unknown macro '${{{}}}' (known: {})",
                    crate::text::one_line(name),
                    MACROS.map(|(name, _)| format!("${{{name}}}")).join(", ")
                ),
            )),
        };
    }
    Ok(Part::Text(text))
}

fn expand(which: Macro, program: Option<&str>, at: &Expansion<'_>) -> Vec<String> {
    let each = |f: &dyn Fn(&str, &Value) -> Vec<String>| -> Vec<String> {
        at.values.iter().flat_map(|(name, value)| f(name, value)).collect()
    };
    match which {
        Macro::Env => vec!["/usr/bin/env".into()],
        Macro::Interpreter => vec![at.interpreter.to_string()],
        Macro::Program => program.map(str::to_string).into_iter().collect(),
        Macro::Args => each(&|name, value| vec![format!("--{name}={}", python_str(value))]),
        Macro::ArgsNoEquals => each(&|name, value| vec![format!("--{name}"), python_str(value)]),
        Macro::ArgsNoHyphens => each(&|name, value| vec![format!("{name}={}", python_str(value))]),
        Macro::ArgsNoBooleanFlags => each(&|name, value| match value {
            Value::Bool(true) => vec![format!("--{name}")],
            Value::Bool(false) => vec![],
            _ => vec![format!("--{name}={}", python_str(value))],
        }),
        Macro::ArgsJson => vec![args_json(at.values)],
        Macro::ArgsJsonFile => vec![at.args_json_file.to_string()],
        Macro::ArgsAppendHydra => each(&|name, value| vec![format!("+{name}={}", python_str(value))]),
        Macro::ArgsOverrideHydra => each(&|name, value| vec![format!("++{name}={}", python_str(value))]),
    }
}

/// The member's values as Python's `json.dumps` writes the agent's dict (`${args_json}`, and the
/// `${args_json_file}` file).
pub fn args_json(values: &[(String, Value)]) -> String {
    let pairs: Vec<String> =
        values.iter().map(|(name, value)| format!("{}: {}", json_string(name), python_json(value))).collect();
    format!("{{{}}}", pairs.join(", "))
}

/// The member's values as W&B's agent writes them for `wandb.init` (`WANDB_SWEEP_PARAM_PATH`):
/// `wandb_version: 1`, then each parameter's `{value: …}`, in YAML that PyYAML reads back as
/// the same types (floats always with a `.` before their exponent).
pub fn config_yaml(values: &[(String, Value)]) -> String {
    let mut text = String::from("wandb_version: 1\n");
    for (name, value) in values {
        text.push_str(&format!("{}:\n  value: {}\n", json_string(name), yaml_value(value)));
    }
    text
}

/// Python's `str(value)` of a value as JSON holds it.
pub fn python_str(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => python_repr(other),
    }
}

fn python_repr(value: &Value) -> String {
    match value {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(number) => match (number.as_i64(), number.as_u64(), number.as_f64()) {
            (Some(int), _, _) => int.to_string(),
            (_, Some(int), _) => int.to_string(),
            (_, _, Some(float)) => python_float(float),
            _ => number.to_string(),
        },
        Value::String(text) => python_quote(text),
        Value::Array(items) => format!("[{}]", items.iter().map(python_repr).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", python_quote(k), python_repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Python's `repr` of a str: single quotes unless the text holds one and no double quote.
fn python_quote(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// `json.dumps` of a value: `, ` and `: ` separators, floats as `repr`, non-ASCII escaped.
fn python_json(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(_) => python_repr(value),
        Value::String(text) => json_string(text),
        Value::Array(items) => format!("[{}]", items.iter().map(python_json).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", json_string(k), python_json(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A JSON string as Python's `json.dumps` writes it (`ensure_ascii`).
fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A YAML value PyYAML reads back as the JSON value's type: JSON, with floats written as
/// PyYAML writes them (`1.0e-05`: YAML 1.1 reads `1e-05` as a string).
fn yaml_value(value: &Value) -> String {
    match value {
        Value::Number(number) if number.as_i64().is_none() && number.as_u64().is_none() => {
            let text = python_repr(value);
            match text.as_str() {
                "nan" => ".nan".into(),
                "inf" => ".inf".into(),
                "-inf" => "-.inf".into(),
                _ if !text.contains('.') && text.contains('e') => text.replacen('e', ".0e", 1),
                _ => text,
            }
        }
        Value::Array(items) => format!("[{}]", items.iter().map(yaml_value).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", json_string(k), yaml_value(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => python_json(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn values() -> Vec<(String, Value)> {
        vec![
            ("lr".into(), json!(1e-5)),
            ("batch".into(), json!(16)),
            ("opt".into(), json!("adam")),
            ("warm".into(), json!(false)),
            ("ks".into(), json!([1, "a"])),
        ]
    }

    fn argv(command: Option<Value>) -> Result<Vec<String>, SweepError> {
        let command = command.map(|c| c.as_array().unwrap().clone());
        let program = Program::parse(Some("train.py".into()), command)?;
        let values = values();
        Ok(program.argv(&Expansion {
            values: &values,
            interpreter: "/venv/bin/python",
            args_json_file: "/r/args.json",
        }))
    }

    #[test]
    fn the_default_command_is_the_agent_s() {
        assert_eq!(
            argv(None).unwrap(),
            [
                "/usr/bin/env",
                "/venv/bin/python",
                "train.py",
                "--lr=1e-05",
                "--batch=16",
                "--opt=adam",
                "--warm=False",
                "--ks=[1, 'a']"
            ]
        );
    }

    #[test]
    fn every_macro_expands_as_the_agent_expands_it() {
        let got = argv(Some(json!([
            "python3",
            "${program}",
            "${args_no_hyphens}",
            "${args_no_boolean_flags}",
            "${args_json}",
            "${args_json_file}",
            "${args_no_equals}",
            "--x=${args}",
            3
        ])))
        .unwrap();
        assert_eq!(&got[..2], ["python3", "train.py"]);
        assert_eq!(&got[2..7], ["lr=1e-05", "batch=16", "opt=adam", "warm=False", "ks=[1, 'a']"]);
        assert_eq!(&got[7..11], ["--lr=1e-05", "--batch=16", "--opt=adam", "--ks=[1, 'a']"]);
        assert_eq!(got[11], r#"{"lr": 1e-05, "batch": 16, "opt": "adam", "warm": false, "ks": [1, "a"]}"#);
        assert_eq!(got[12], "/r/args.json");
        assert_eq!(&got[13..15], ["--lr", "1e-05"]);
        // Only whole elements are macros.
        assert_eq!(&got[got.len() - 2..], ["--x=${args}", "3"]);
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_in_one_line() {
        let refused = |program: Option<&str>, command: Option<Value>| {
            let command = command.map(|c| c.as_array().unwrap().clone());
            Program::parse(program.map(str::to_string), command).unwrap_err().to_string()
        };
        assert!(refused(Some("../x.py"), None).contains("leaves the sweep's directory"));
        assert!(refused(Some("/abs/x.py"), None).contains("absolute"));
        assert!(refused(Some("a\nb"), None).contains("one line"));
        assert!(refused(Some("t.py"), Some(json!(["${nope}"]))).contains("unknown macro '${nope}'"));
        assert!(refused(Some("t.py"), Some(json!(["${envvar:KEY}"]))).contains("argv"));
        assert!(refused(Some("t.py"), Some(json!([]))).contains("empty"));
        assert!(refused(Some("t.py"), Some(json!([{"a": 1}]))).contains("must be a string"));
        assert!(refused(None, None).contains("program: missing"));
        assert!(refused(Some("t.py"), Some(json!(["${args}"]))).contains("no program"));
        let message = refused(Some("t.py"), Some(json!(["${nope\nx}"])));
        assert!(!message.contains('\n'), "{message}");
    }

    #[test]
    fn the_config_file_reads_back_as_pyyaml_would() {
        let text = config_yaml(&values());
        assert!(text.starts_with("wandb_version: 1\n"), "{text}");
        assert!(text.contains("\"lr\":\n  value: 1.0e-05\n"), "{text}");
        assert!(text.contains("\"warm\":\n  value: false\n"), "{text}");
        assert_eq!(yaml_value(&json!(0.5)), "0.5");
        assert_eq!(yaml_value(&json!(1e16)), "1.0e+16");
        assert_eq!(python_str(&json!(null)), "None");
        assert_eq!(python_str(&json!({"k": "it's"})), "{'k': \"it's\"}");
        assert_eq!(json_string("é\u{1F600}"), "\"\\u00e9\\ud83d\\ude00\"");
    }
}
