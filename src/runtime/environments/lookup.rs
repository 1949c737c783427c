//! Selecting one discovered environment by name: a name no environment can have is refused
//! first, and a name several share is ambiguous rather than a guess.

use std::path::PathBuf;

use super::discovery::{DiscoveredEnv, Discovery};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("unknown environment '{name}' ({})", available_list(.available))]
    Unknown { name: String, available: Vec<String> },
    #[error("environment name '{name}' is ambiguous: it is defined in {}", path_list(.paths))]
    Ambiguous { name: String, paths: Vec<PathBuf> },
    /// A name no environment can have (`..`, `/`, a NUL or another control character): refused
    /// before anything is looked up. `name` is already shown on one line.
    #[error(
        "environment name '{name}' is not a name: it may not contain '/', '..', NUL or control characters"
    )]
    NotAName { name: String },
    /// Found, but its configuration cannot be read (a verifiers module gone or broken since).
    #[error("environment '{name}': {reason}")]
    Unreadable { name: String, reason: String },
}

/// Refuses a name no environment can have, before it reaches a lookup, a path or a message.
///
/// # Errors
///
/// [`LookupError::NotAName`], with the name quoted on one line.
pub fn check_name(name: &str) -> Result<(), LookupError> {
    let bad = name.is_empty()
        || name.len() > 256
        || name.contains('/')
        || name.contains("..")
        || name.chars().any(char::is_control);
    if bad {
        return Err(LookupError::NotAName { name: crate::text::one_line(name) });
    }
    Ok(())
}

fn available_list(names: &[String]) -> String {
    if names.is_empty() {
        "no environments were found".to_owned()
    } else {
        format!("available: {}", names.join(", "))
    }
}

fn path_list(paths: &[PathBuf]) -> String {
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    shown.join(" and ")
}

impl Discovery {
    /// Selects an environment by its `name`.
    ///
    /// # Errors
    ///
    /// [`LookupError::NotAName`] for a name no environment can have,
    /// [`LookupError::Unknown`] when no environment has that name, and
    /// [`LookupError::Ambiguous`] when several do: both are listed by [`discover`], but selecting
    /// either by that name would be a guess.
    pub fn find(&self, name: &str) -> Result<&DiscoveredEnv, LookupError> {
        check_name(name)?;
        let matches: Vec<&DiscoveredEnv> = self.environments.iter().filter(|env| env.name == name).collect();
        match matches.as_slice() {
            [one] => Ok(one),
            [] => Err(LookupError::Unknown { name: name.to_owned(), available: self.names() }),
            many => Err(LookupError::Ambiguous {
                name: name.to_owned(),
                paths: many.iter().map(|env| env.file_path.clone()).collect(),
            }),
        }
    }

    /// Sorted, distinct environment names.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.environments.iter().map(|e| e.name.clone()).collect();
        names.sort();
        names.dedup();
        names
    }
}

#[cfg(test)]
mod tests {
    use tempfile::TempDir;

    use super::*;
    use crate::environments::fixtures::{class_names, discover_one, write};

    #[test]
    fn duplicate_names_are_listed_but_ambiguous_to_select() {
        let dir = TempDir::new().unwrap();
        let a = write(dir.path(), "one/dup.py", "class DupA(BaseEnv):\n    name = \"dup\"\n");
        let b = write(dir.path(), "two/dup.py", "class DupB(BaseEnv):\n    name = \"dup\"\n");
        write(dir.path(), "solo.py", "class Solo(BaseEnv):\n    pass\n");
        let found = discover_one(&dir);
        assert_eq!(class_names(&found), ["DupA", "Solo", "DupB"]);
        assert_eq!(found.find("solo").map(|e| e.class_name.as_str()), Ok("Solo"));
        let err = found.find("dup").unwrap_err();
        assert_eq!(err, LookupError::Ambiguous { name: "dup".into(), paths: vec![a.clone(), b.clone()] });
        assert_eq!(
            err.to_string(),
            format!(
                "environment name 'dup' is ambiguous: it is defined in {} and {}",
                a.display(),
                b.display()
            )
        );
    }

    #[test]
    fn unknown_name_lists_what_is_available() {
        let dir = TempDir::new().unwrap();
        write(dir.path(), "b.py", "class B(BaseEnv):\n    name = \"beta\"\n");
        write(dir.path(), "a.py", "class A(BaseEnv):\n    name = \"alpha\"\n");
        let found = discover_one(&dir);
        let err = found.find("gamma").unwrap_err();
        assert_eq!(
            err,
            LookupError::Unknown { name: "gamma".into(), available: vec!["alpha".into(), "beta".into()] }
        );
        assert_eq!(err.to_string(), "unknown environment 'gamma' (available: alpha, beta)");

        let empty = Discovery::default();
        assert_eq!(
            empty.find("x").unwrap_err().to_string(),
            "unknown environment 'x' (no environments were found)"
        );
    }
}
