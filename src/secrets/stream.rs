//! Copying a process's output with secrets replaced by `***`. Programs print their
//! configuration (atroposlib's `process` prints its server config, API key and all), so the
//! only place to keep keys out of logs is between the program and the file.

use std::io::{self, Read, Write};

const MASK: &[u8] = super::REDACTED.as_bytes();

/// The secrets a stage could print: values of the secret variables and of
/// `LACHESIS_SECRET_ARG_*` in its environment, and of secret flags in its argv. Short values are
/// ignored: masking `x` would garble the log.
pub fn secrets_for(argv: &[String]) -> Vec<Vec<u8>> {
    let handed = std::env::vars()
        .filter(|(name, _)| name.starts_with(super::SECRET_ARG_PREFIX))
        .map(|(_, value)| value);
    let mut secrets: Vec<Vec<u8>> = super::SECRET_VARS
        .iter()
        .filter_map(|var| std::env::var(var).ok())
        .chain(handed)
        .chain(super::argv::secret_flag_values(argv))
        .filter(|value| value.len() >= 8)
        .map(String::into_bytes)
        .collect();
    secrets.sort();
    secrets.dedup();
    secrets
}

/// Copies `input` to `output` until EOF, replacing every secret. A secret split across two
/// reads is caught: the bytes that could begin one are held back until the next read decides.
pub fn copy_redacted(mut input: impl Read, mut output: impl Write, secrets: &[Vec<u8>]) -> io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut chunk = [0u8; 8192];
    loop {
        let n = match input.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        buf.extend_from_slice(&chunk[..n]);
        let masked = mask(&buf, secrets);
        let keep = held_back(&masked, secrets);
        output.write_all(&masked[..masked.len() - keep])?;
        output.flush()?;
        buf = masked[masked.len() - keep..].to_vec();
    }
    output.write_all(&buf)?;
    output.flush()
}

fn mask(text: &[u8], secrets: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    'scan: while i < text.len() {
        for secret in secrets {
            if text[i..].starts_with(secret) {
                out.extend_from_slice(MASK);
                i += secret.len();
                continue 'scan;
            }
        }
        out.push(text[i]);
        i += 1;
    }
    out
}

/// Length of the longest tail of `text` that is the start of some secret.
fn held_back(text: &[u8], secrets: &[Vec<u8>]) -> usize {
    let longest = secrets.iter().map(Vec::len).max().unwrap_or(0);
    (1..longest.min(text.len() + 1))
        .rev()
        .find(|&n| secrets.iter().any(|s| s.len() > n && s.starts_with(&text[text.len() - n..])))
        .unwrap_or(0)
}

/// `lachesis redact`: copies stdin to stdout with secrets replaced by `***`. The secrets are the
/// values of the secret variables and of `LACHESIS_SECRET_ARG_*` in our environment (which is
/// the job's), never anything on the command line. Returns the process exit code.
pub fn filter_main() -> i32 {
    let mut secrets = secrets_for(&[]);
    secrets.extend(
        std::env::vars_os()
            .filter(|(name, _)| name.to_str().is_some_and(|n| n.starts_with(super::SECRET_ARG_PREFIX)))
            .filter_map(|(_, value)| value.into_string().ok())
            .filter(|value| value.len() >= 8)
            .map(String::into_bytes),
    );
    secrets.sort();
    secrets.dedup();
    match copy_redacted(io::stdin().lock(), io::stdout().lock(), &secrets) {
        Ok(()) => 0,
        Err(e) => {
            let _ = writeln!(io::stderr(), "lachesis redact: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out its bytes in fixed-size pieces, to split secrets across reads.
    struct Pieces<'a>(&'a [u8], usize);

    impl Read for Pieces<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.1.min(self.0.len()).min(out.len());
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn secrets_are_masked_even_when_split_across_reads() {
        let secrets = vec![b"sk-secret-123".to_vec(), b"tnkr-abcdefgh".to_vec()];
        let text = b"APIServerConfig(api_key='sk-secret-123', other='tnkr-abcdefgh')\nsk-secret-12 is not it\nend sk-";
        for piece in [1, 2, 3, 5, 7, 64] {
            let mut out = Vec::new();
            copy_redacted(Pieces(text, piece), &mut out, &secrets).unwrap();
            assert_eq!(
                String::from_utf8(out).unwrap(),
                "APIServerConfig(api_key='***', other='***')\nsk-secret-12 is not it\nend sk-",
                "pieces of {piece}"
            );
        }
    }

    #[test]
    fn without_a_possible_prefix_nothing_is_held_back() {
        let secrets = vec![b"sk-secret-123".to_vec()];
        assert_eq!(held_back(b"line\n", &secrets), 0);
        assert_eq!(held_back(b"key sk-se", &secrets), 5);
    }
}
