//! The module-level classes of one Python file, read from its syntax tree (tree-sitter): name,
//! bases, docstring, and the `name` and `env_config_cls` assignments of its body.

use std::fs;
use std::path::Path;

use tree_sitter::{Node, Parser};

use super::DiscoveredEnv;
use super::discovery::DEFAULT_CONFIG_CLASS;
use super::scan::file_name;

/// A module-level class as written in the source.
#[derive(Debug)]
pub(super) struct ClassDef {
    pub(super) name: String,
    /// Last dotted component of each positional base.
    pub(super) bases: Vec<String>,
    pub(super) docstring: Option<String>,
    pub(super) env_name: Option<String>,
    pub(super) config_class: Option<String>,
}

impl ClassDef {
    pub(super) fn to_env(&self, path: &Path) -> DiscoveredEnv {
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let description = self
            .docstring
            .as_deref()
            .and_then(first_non_empty_line)
            .map_or_else(|| format!("Environment from {}", file_name(path)), str::to_owned);
        DiscoveredEnv {
            name: self.env_name.clone().unwrap_or_else(|| stem.to_owned()),
            class_name: self.name.clone(),
            file_path: path.to_owned(),
            description,
            config_class: self.config_class.clone().unwrap_or_else(|| DEFAULT_CONFIG_CLASS.into()),
            kind: super::EnvKind::Atropos,
            source: super::EnvSource::Directory { dir: path.parent().unwrap_or(path).to_owned() },
        }
    }
}

pub(super) fn first_non_empty_line(text: &str) -> Option<&str> {
    text.lines().map(str::trim).find(|line| !line.is_empty())
}

pub(super) fn parse_file(parser: &mut Parser, path: &Path) -> Result<Vec<ClassDef>, String> {
    let bytes = fs::read(path).map_err(|err| format!("cannot read file: {err}"))?;
    let text = std::str::from_utf8(&bytes).map_err(|err| {
        let line = bytes[..err.valid_up_to()].iter().filter(|&&b| b == b'\n').count() + 1;
        format!("not valid UTF-8 at line {line}; only UTF-8 sources are scanned")
    })?;
    // A byte-order mark is legal in Python source but not part of the grammar.
    let source = text.strip_prefix('\u{feff}').unwrap_or(text).as_bytes();
    let tree = parser.parse(source, None).ok_or_else(|| "parser produced no syntax tree".to_owned())?;
    let root = tree.root_node();
    if root.has_error() {
        return Err(format!("syntax error at line {}", first_error_line(root)));
    }
    Ok(module_classes(root, source))
}

/// One-based line of the first error or missing node, descending only into subtrees that
/// contain one.
pub(super) fn first_error_line(root: Node) -> usize {
    let mut node = root;
    'descend: loop {
        if node.is_error() || node.is_missing() {
            break;
        }
        let mut cursor = node.walk();
        for child in node.children(&mut cursor) {
            if child.has_error() || child.is_missing() {
                node = child;
                continue 'descend;
            }
        }
        break;
    }
    node.start_position().row + 1
}

pub(super) fn module_classes(root: Node, src: &[u8]) -> Vec<ClassDef> {
    let mut cursor = root.walk();
    root.named_children(&mut cursor)
        .filter_map(|stmt| match stmt.kind() {
            "class_definition" => Some(stmt),
            "decorated_definition" => {
                stmt.child_by_field_name("definition").filter(|def| def.kind() == "class_definition")
            }
            _ => None,
        })
        .filter_map(|class| class_def(class, src))
        .collect()
}

pub(super) fn class_def(class: Node, src: &[u8]) -> Option<ClassDef> {
    let name = text(class.child_by_field_name("name")?, src)?.to_owned();
    let bases =
        class.child_by_field_name("superclasses").map(|args| base_names(args, src)).unwrap_or_default();
    let mut def = ClassDef { name, bases, docstring: None, env_name: None, config_class: None };
    if let Some(body) = class.child_by_field_name("body") {
        read_body(body, src, &mut def);
    }
    Some(def)
}

pub(super) fn base_names(args: Node, src: &[u8]) -> Vec<String> {
    let mut cursor = args.walk();
    // Keyword arguments (metaclass=…) and splats are not bases that name a class.
    args.named_children(&mut cursor).filter_map(|arg| last_component(arg, src)).map(str::to_owned).collect()
}

/// `BaseEnv`, `a.b.BaseEnv` and `BaseEnv[Cfg]` all name `BaseEnv`.
pub(super) fn last_component<'s>(node: Node, src: &'s [u8]) -> Option<&'s str> {
    match node.kind() {
        "identifier" => text(node, src),
        "attribute" => text(node.child_by_field_name("attribute")?, src),
        "subscript" => last_component(node.child_by_field_name("value")?, src),
        _ => None,
    }
}

pub(super) fn read_body(body: Node, src: &[u8], def: &mut ClassDef) {
    let mut cursor = body.walk();
    let statements: Vec<Node> = body.named_children(&mut cursor).filter(|n| n.kind() != "comment").collect();
    // Python only treats the first statement as the docstring.
    def.docstring = statements.first().and_then(|first| docstring(*first, src));
    for stmt in &statements {
        let Some((target, value)) = simple_assignment(*stmt) else {
            continue;
        };
        // Later assignments win, as they do when Python executes the class body.
        match text(target, src) {
            Some("name") => {
                def.env_name = string_value(value, src).filter(|n| !n.trim().is_empty());
            }
            Some("env_config_cls") => {
                def.config_class = last_component(value, src).map(str::to_owned);
            }
            _ => {}
        }
    }
}

pub(super) fn docstring(stmt: Node, src: &[u8]) -> Option<String> {
    if stmt.kind() != "expression_statement" || stmt.named_child_count() != 1 {
        return None;
    }
    string_value(stmt.named_child(0)?, src)
}

/// `target = value` or `target: T = value`, with a plain identifier target.
pub(super) fn simple_assignment(stmt: Node) -> Option<(Node, Node)> {
    if stmt.kind() != "expression_statement" {
        return None;
    }
    let assignment = stmt.named_child(0).filter(|n| n.kind() == "assignment")?;
    let target = assignment.child_by_field_name("left").filter(|n| n.kind() == "identifier")?;
    let value = assignment.child_by_field_name("right")?;
    Some((target, value))
}

/// The value of a plain string literal (or implicit concatenation of them). f-strings, t-strings
/// and bytes are not plain strings: their value is unknown until run time, or not text.
pub(super) fn string_value(node: Node, src: &[u8]) -> Option<String> {
    match node.kind() {
        "string" => literal_value(text(node, src)?),
        "concatenated_string" => {
            let mut cursor = node.walk();
            node.named_children(&mut cursor).map(|part| string_value(part, src)).collect()
        }
        _ => None,
    }
}

pub(super) fn literal_value(literal: &str) -> Option<String> {
    let prefix_len = literal.find(['"', '\''])?;
    let prefix = literal[..prefix_len].to_ascii_lowercase();
    if prefix.contains(['b', 'f', 't']) {
        return None;
    }
    let quoted = &literal[prefix_len..];
    let quote = ["\"\"\"", "'''", "\"", "'"].into_iter().find(|q| quoted.starts_with(q))?;
    let inner = quoted.strip_prefix(quote)?.strip_suffix(quote)?;
    Some(if prefix.contains('r') { inner.to_owned() } else { unescape(inner) })
}

/// Decodes the common escapes; others are kept as written, which is good enough for a name or
/// a one-line description.
pub(super) fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(q @ ('\\' | '\'' | '"')) => out.push(q),
            // Backslash-newline is a line continuation inside the literal.
            Some('\n') => {}
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

pub(super) fn text<'s>(node: Node, src: &'s [u8]) -> Option<&'s str> {
    node.utf8_text(src).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_literals() {
        assert_eq!(literal_value(r#""plain""#).as_deref(), Some("plain"));
        assert_eq!(literal_value(r#"u'unicode'"#).as_deref(), Some("unicode"));
        assert_eq!(literal_value(r#"R"raw\n""#).as_deref(), Some(r"raw\n"));
        assert_eq!(literal_value("'''a\\\nb'''").as_deref(), Some("ab"));
        assert_eq!(literal_value(r#""q\"q""#).as_deref(), Some("q\"q"));
        assert_eq!(literal_value(r#""keep \x41""#).as_deref(), Some(r"keep \x41"));
        assert_eq!(literal_value(r#"f"{x}""#), None);
        assert_eq!(literal_value(r#"rb"x""#), None);
        assert_eq!(literal_value(r#"t"x""#), None);
        assert_eq!(literal_value(r#""unterminated"#), None);
        assert_eq!(literal_value("nope"), None);
    }
}
