//! Signed deliveries: every body carries `X-Lachesis-Signature: sha256=<hex>`, the HMAC-SHA256
//! of its raw bytes under a secret only the daemon and the receiver know (GitHub's scheme).
//! The secret comes from `LACHESIS_WEBHOOK_SECRET`, else from `$LACHESIS_HOME/webhook-secret`
//! (created on first use, 0600); it is held here only, never written to argv, logs or the store.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The header carrying the signature.
pub const SIGNATURE_HEADER: &str = "X-Lachesis-Signature";
/// The variable that sets the secret (it wins over the file).
pub const SECRET_VAR: &str = "LACHESIS_WEBHOOK_SECRET";
/// The file in the home holding the secret when the variable is unset.
pub const SECRET_FILE: &str = "webhook-secret";

/// SHA-256's block size: HMAC pads (or hashes) the key to it.
const BLOCK: usize = 64;

/// HMAC-SHA256 (RFC 2104): H((K ^ opad) || H((K ^ ipad) || message)). Written over `sha2`
/// (already a dependency) rather than adding a crate for its twenty lines; the unit tests hold
/// it to RFC 4231's vectors.
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    inner.update(message);
    let inner = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner);
    outer.finalize().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error(
        "{SECRET_VAR} is set but empty: unset it (a secret is then kept in {SECRET_FILE}) or give it a value"
    )]
    Empty,
    #[error("webhook signing secret {path}: {source}")]
    File { path: PathBuf, source: std::io::Error },
}

/// Signs webhook bodies. Its `Debug` says where the secret came from, never the secret.
#[derive(Clone)]
pub struct Signer {
    key: Vec<u8>,
    origin: String,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer").field("origin", &self.origin).finish_non_exhaustive()
    }
}

impl Signer {
    pub fn new(secret: &str, origin: &str) -> Signer {
        Signer { key: secret.as_bytes().to_vec(), origin: origin.to_string() }
    }

    /// The daemon's signer: `LACHESIS_WEBHOOK_SECRET`, else `$home/webhook-secret`, created now
    /// if missing.
    pub fn load(home: &Path) -> Result<Signer, SecretError> {
        if let Some(secret) = crate::environ::var(SECRET_VAR) {
            if secret.is_empty() {
                return Err(SecretError::Empty);
            }
            return Ok(Signer::new(&secret, SECRET_VAR));
        }
        let path = home.join(SECRET_FILE);
        let (secret, _) = crate::secrets::load_or_create_secret(&path)
            .map_err(|source| SecretError::File { path: path.clone(), source })?;
        Ok(Signer::new(&secret, &path.display().to_string()))
    }

    /// Where the secret came from (the variable's name or the file's path).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The header value for `body`: `sha256=` and the HMAC in lowercase hex.
    pub fn sign(&self, body: &[u8]) -> String {
        format!("sha256={}", hex(&hmac_sha256(&self.key, body)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
    }

    /// RFC 4231 section 4: test cases 1-4, 6 and 7 (5 truncates the output, which we never do).
    #[test]
    fn matches_rfc_4231() {
        let cases: [(Vec<u8>, Vec<u8>, &str); 6] = [
            (
                vec![0x0b; 20],
                b"Hi There".to_vec(),
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
            ),
            (
                b"Jefe".to_vec(),
                b"what do ya want for nothing?".to_vec(),
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            ),
            (
                vec![0xaa; 20],
                vec![0xdd; 50],
                "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
            ),
            (
                unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"),
                vec![0xcd; 50],
                "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
            ),
            (
                vec![0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First".to_vec(),
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
            ),
            (
                vec![0xaa; 131],
                b"This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.".to_vec(),
                "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
            ),
        ];
        for (key, data, want) in cases {
            assert_eq!(hex(&hmac_sha256(&key, &data)), want);
        }
        // A key exactly one block long is used as it is, not hashed.
        assert_ne!(hmac_sha256(&[7; 64], b"x"), hmac_sha256(&Sha256::digest([7u8; 64]), b"x"));
    }

    #[test]
    fn signs_as_github_does_and_never_shows_the_secret() {
        let signer = Signer::new("It's a Secret to Everybody", "test");
        // GitHub's documented example of its X-Hub-Signature-256.
        assert_eq!(
            signer.sign(b"Hello, World!"),
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
        assert!(!format!("{signer:?}").contains("Secret"));
    }

    #[test]
    fn the_home_file_is_created_once() {
        let home = tempfile::tempdir().unwrap();
        let first = Signer::load(home.path()).unwrap();
        let again = Signer::load(home.path()).unwrap();
        assert_eq!(first.sign(b"x"), again.sign(b"x"));
        assert!(first.origin().ends_with(SECRET_FILE));
    }
}
