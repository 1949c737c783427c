//! `{name}` placeholders in workflow strings. `{{` and `}}` stand for literal braces, so argv
//! can still carry JSON.

use std::collections::BTreeMap;

use super::Workflow;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("unknown variable '{{{name}}}' (known: {known})")]
    Unknown { name: String, known: String },
    #[error("unclosed '{{' in '{text}' (write '{{{{' for a literal brace)")]
    Unclosed { text: String },
    #[error("stray '}}' in '{text}' (write '}}}}' for a literal brace)")]
    Stray { text: String },
    #[error("empty '{{}}' in '{text}'")]
    Empty { text: String },
}

enum Piece<'a> {
    Text(&'a str),
    Brace(char),
    Var(&'a str),
}

fn pieces(text: &str) -> Result<Vec<Piece<'_>>, TemplateError> {
    // The text is echoed in the error (a `--var` value can be anything): kept on one line.
    let text_of = || crate::text::one_line(text);
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(pos) = rest.find(['{', '}']) {
        out.push(Piece::Text(&rest[..pos]));
        let after = &rest[pos + 1..];
        if rest[pos..].starts_with("{{") {
            out.push(Piece::Brace('{'));
            rest = &rest[pos + 2..];
        } else if rest[pos..].starts_with("}}") {
            out.push(Piece::Brace('}'));
            rest = &rest[pos + 2..];
        } else if rest.as_bytes()[pos] == b'}' {
            return Err(TemplateError::Stray { text: text_of() });
        } else {
            let end = after.find('}').ok_or_else(|| TemplateError::Unclosed { text: text_of() })?;
            let name = after[..end].trim();
            if name.is_empty() {
                return Err(TemplateError::Empty { text: text_of() });
            }
            out.push(Piece::Var(name));
            rest = &after[end + 1..];
        }
    }
    out.push(Piece::Text(rest));
    Ok(out)
}

/// The variable names a template refers to.
pub fn variables(text: &str) -> Result<Vec<&str>, TemplateError> {
    Ok(pieces(text)?
        .into_iter()
        .filter_map(|piece| match piece {
            Piece::Var(name) => Some(name),
            _ => None,
        })
        .collect())
}

/// Checks that every placeholder names one of `known`.
pub fn check(text: &str, known: &[String]) -> Result<(), TemplateError> {
    for name in variables(text)? {
        if !known.iter().any(|k| k == name) {
            return Err(TemplateError::Unknown {
                name: crate::text::one_line(name),
                known: known.join(", "),
            });
        }
    }
    Ok(())
}

pub fn expand(text: &str, vars: &BTreeMap<String, String>) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(text.len());
    for piece in pieces(text)? {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Brace(c) => out.push(c),
            Piece::Var(name) => match vars.get(name) {
                Some(value) => out.push_str(value),
                None => {
                    let known = vars.keys().cloned().collect::<Vec<_>>().join(", ");
                    return Err(TemplateError::Unknown { name: crate::text::one_line(name), known });
                }
            },
        }
    }
    Ok(out)
}

impl Workflow {
    /// Whether any template of this workflow refers to `var`.
    pub fn uses_var(&self, var: &str) -> bool {
        let mentions = |text: &str| variables(text).is_ok_and(|vars| vars.contains(&var));
        self.stages.iter().any(|stage| {
            stage.argv.iter().any(|a| mentions(a))
                || stage.cwd.as_deref().is_some_and(mentions)
                || stage.environ.values().any(|v| mentions(v))
        }) || self.vars.values().any(|v| mentions(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> BTreeMap<String, String> {
        [("run_id", "r1"), ("port.api", "8000")].into_iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    #[test]
    fn expands_variables_and_escapes() {
        assert_eq!(expand("http://127.0.0.1:{port.api}/", &vars()).unwrap(), "http://127.0.0.1:8000/");
        assert_eq!(expand("{{\"id\": \"{run_id}\"}}", &vars()).unwrap(), "{\"id\": \"r1\"}");
        assert_eq!(expand("plain", &vars()).unwrap(), "plain");
        assert_eq!(expand("{ run_id }", &vars()).unwrap(), "r1");
    }

    #[test]
    fn reports_unknown_unclosed_stray_and_empty() {
        assert!(
            matches!(expand("{nope}", &vars()), Err(TemplateError::Unknown { name, .. }) if name == "nope")
        );
        assert!(matches!(expand("{run_id", &vars()), Err(TemplateError::Unclosed { .. })));
        assert!(matches!(expand("a}b", &vars()), Err(TemplateError::Stray { .. })));
        assert!(matches!(expand("{}", &vars()), Err(TemplateError::Empty { .. })));
    }

    #[test]
    fn check_lists_known_names() {
        let known = vec!["run_id".to_string()];
        let err = check("{run_dir}", &known).unwrap_err();
        assert_eq!(err.to_string(), "unknown variable '{run_dir}' (known: run_id)");
        assert!(check("{run_id}/x", &known).is_ok());
    }
}
