//! The `[project]` table of a `pyproject.toml`, as much as discovery needs: the name and
//! description a `vf-init` layout declares. Not a TOML parser: keys whose value is not a one-line
//! string, and every other table, are skipped; what cannot be read is simply absent.

/// The project a `pyproject.toml` declares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Project {
    pub(super) name: Option<String>,
    pub(super) description: Option<String>,
}

pub(super) fn parse_project(text: &str) -> Project {
    let mut project = Project::default();
    let mut in_project = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            // `[project]` itself; `[project.urls]` and `[[tool…]]` are other tables.
            in_project =
                line.strip_prefix('[').and_then(|rest| rest.split_once(']')).is_some_and(|(table, after)| {
                    table.trim() == "project" && after.trim_start().is_empty_or_comment()
                });
            continue;
        }
        if !in_project {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let slot = match key.trim().trim_matches('"') {
            "name" => &mut project.name,
            "description" => &mut project.description,
            _ => continue,
        };
        if slot.is_none() {
            *slot = one_line_string(value.trim());
        }
    }
    project
}

trait CommentOrEmpty {
    fn is_empty_or_comment(&self) -> bool;
}

impl CommentOrEmpty for str {
    fn is_empty_or_comment(&self) -> bool {
        self.is_empty() || self.starts_with('#')
    }
}

/// A TOML basic (`"…"`, common escapes) or literal (`'…'`) string on one line, followed only by
/// a comment; `None` for anything else (a multi-line string, a number, an array).
fn one_line_string(value: &str) -> Option<String> {
    if value.starts_with("\"\"\"") || value.starts_with("'''") {
        return None;
    }
    if let Some(rest) = value.strip_prefix('\'') {
        let (inner, after) = rest.split_once('\'')?;
        return after.trim_start().is_empty_or_comment().then(|| inner.to_owned());
    }
    let rest = value.strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = rest.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return rest[at + 1..].trim_start().is_empty_or_comment().then_some(out),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                '"' => out.push('"'),
                '\\' => out.push('\\'),
                other => {
                    out.push('\\');
                    out.push(other);
                }
            },
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_project_table_as_vf_init_writes_it() {
        let text = r#"
[build-system]
name = "not-this"

[project]
name = "reverse-text"   # the environment id
description = "Reverse a \"word\"."
version = '0.1.2'
tags = ["single-turn"]
dependencies = [
    "verifiers>=0.1.9",
]

[project.urls]
name = "also-not-this"
"#;
        assert_eq!(
            parse_project(text),
            Project { name: Some("reverse-text".into()), description: Some("Reverse a \"word\".".into()) }
        );
    }

    #[test]
    fn values_that_are_not_one_line_strings_are_absent() {
        let text = "[project]\nname = \"\"\"multi\nline\"\"\"\nname = 1\ndescription = \"open\n";
        assert_eq!(parse_project(text), Project::default());
        assert_eq!(parse_project("name = \"outside\"\n"), Project::default());
    }

    proptest! {
        #[test]
        fn never_panics(text in "(\\[project\\]\n)?\\PC*(\n\\PC*){0,6}") {
            let _ = parse_project(&text);
        }
    }
}
