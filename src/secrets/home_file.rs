//! A random secret kept in a file of the home (the API token, the webhook signing secret):
//! created on first use, 0600 from the start, and tightened to 0600 when found looser.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The secret in `path`, trimmed; when there is no file yet, 32 random bytes as hex, written
/// there first (O_EXCL, so two processes starting at once agree on one). The bool says whether
/// it was created now.
pub fn load_or_create_secret(path: &Path) -> std::io::Result<(String, bool)> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    let fresh: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    // O_EXCL with mode 0600: the secret is never readable by others, not even for a moment.
    let created = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path);
    match created {
        Ok(mut file) => {
            file.write_all(format!("{fresh}\n").as_bytes()).and_then(|()| file.sync_all())?;
            Ok((fresh, true))
        }
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            // One an operator wrote by hand may be readable by others: it is the owner's alone.
            let meta = std::fs::metadata(path)?;
            if meta.permissions().mode() & 0o077 != 0 {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
            }
            Ok((std::fs::read_to_string(path)?.trim().to_string(), false))
        }
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_private_then_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        let (first, created) = load_or_create_secret(&path).unwrap();
        assert!(created && first.len() == 64, "{first}");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(load_or_create_secret(&path).unwrap(), (first, false));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "a loose file is tightened");
    }
}
