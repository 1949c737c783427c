//! What a name or a stage log path in a workflow may be: plain, bounded, and for logs inside
//! the run directory and off the files lachesis writes there.

use std::path::Path;

use super::MAX_NAME_LEN;

/// Letters, digits, '-', '_' and '.', not starting with '.' (so never `.` or `..`), at most
/// [`MAX_NAME_LEN`] bytes: safe as a file name and on one line.
pub fn is_simple_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
}

pub const NAME_RULE: &str = "must be 1 to 64 letters, digits, '-', '_' or '.' (not starting with '.')";

/// Files of the run directory a stage log may not be: lachesis writes them.
const RESERVED_RUN_FILES: &[&str] = &[".status", "config.yaml", ".env"];

/// A stage log must stay inside the run directory and off the files lachesis writes there
/// (the exit records in `.status/`, the run's config).
pub fn check_log_path(log: &str) -> Result<(), String> {
    use std::path::Component;
    let shown = crate::text::one_line(log);
    if log.trim().is_empty() {
        return Err("must name a file".into());
    }
    if log.chars().any(char::is_control) {
        return Err(format!("'{shown}' has a control character"));
    }
    let path = Path::new(log);
    let mut parts = 0;
    for component in path.components() {
        match component {
            Component::Normal(part) => {
                if parts == 0 && RESERVED_RUN_FILES.iter().any(|r| part == *r) {
                    return Err(format!("'{shown}' is a file lachesis keeps in the run directory"));
                }
                parts += 1;
            }
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(format!("'{shown}' must stay inside the run directory (no '..')"));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!("'{shown}' must be relative to the run directory"));
            }
        }
    }
    if parts == 0 || log.ends_with('/') {
        return Err(format!("'{shown}' must name a file"));
    }
    Ok(())
}
