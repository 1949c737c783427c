//! Files the command line reads on a user's behalf (`--from`, `--pipeline`): read with a limit,
//! so `/dev/zero` or a runaway file is refused in one line rather than filling memory.

use std::io::Read;
use std::path::Path;

/// The text of `path` (`-`: standard input), refused past `limit` bytes or when it is not UTF-8;
/// `flag` names it in the error.
pub fn read_text(path: &Path, limit: u64, flag: &str) -> Result<String, String> {
    let shown = path.display();
    let mut text = String::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin().take(limit + 1).read_to_string(&mut text)
    } else {
        let file = std::fs::File::open(path).map_err(|e| format!("cannot read {flag} {shown}: {e}"))?;
        file.take(limit + 1).read_to_string(&mut text)
    };
    read.map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData => format!("cannot read {flag} {shown}: it is not UTF-8 text"),
        _ => format!("cannot read {flag} {shown}: {e}"),
    })?;
    if text.len() as u64 > limit {
        return Err(format!(
            "cannot read {flag} {shown}: it is larger than {}",
            lachesis::launch::space::human_bytes(limit)
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_file_is_refused_at_the_limit() {
        let err = read_text(Path::new("/dev/zero"), 1024, "--from").unwrap_err();
        assert!(err.contains("larger than") && !err.contains('\n'), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sweep.jsonl");
        std::fs::write(&file, "{}\n").unwrap();
        assert_eq!(read_text(&file, 1024, "--from").unwrap(), "{}\n");
        std::fs::write(&file, [0xff, 0xfe]).unwrap();
        assert!(read_text(&file, 1024, "--from").unwrap_err().contains("not UTF-8"));
    }
}
