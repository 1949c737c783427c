//! The bearer token every TCP listener requires: loaded or created in the home, kept only as
//! its digest, and checked by the middleware in front of every route but the public ones.

use std::path::{Path, PathBuf};

use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, AppState, Failure, dashboard};

/// Tokens shorter than this are refused: they could be guessed.
pub const MIN_TOKEN_LEN: usize = 16;

/// The file in the home that holds the daemon's API token when `LACHESIS_API_TOKEN` is unset.
pub const TOKEN_FILE: &str = "api-token";

/// The bearer token, kept only as its SHA-256 digest: requests are checked by comparing
/// fixed-length digests in constant time, so the timing tells nothing of the token's bytes or
/// its length.
pub struct ApiToken {
    digest: [u8; 32],
}

impl ApiToken {
    /// `origin` names where the token came from, for the error.
    pub fn new(token: &str, origin: &str) -> Result<ApiToken, ApiError> {
        if token.len() < MIN_TOKEN_LEN {
            return Err(ApiError::TokenTooShort { origin: origin.to_string(), len: token.len() });
        }
        Ok(ApiToken { digest: sha256(token.as_bytes()) })
    }

    pub fn matches(&self, given: &str) -> bool {
        let given = sha256(given.as_bytes());
        given.iter().zip(&self.digest).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

/// Where the API token is: `LACHESIS_API_TOKEN` when set, else `$home/api-token`.
pub fn token_path(home: &Path) -> PathBuf {
    home.join(TOKEN_FILE)
}

/// The token TCP listeners require: `LACHESIS_API_TOKEN` when set, else the one in
/// `$home/api-token`, created on first start (random, 32 bytes as hex, 0600 from the start).
/// Returns the token and where it came from.
pub fn load_or_create_token(home: &Path) -> Result<(ApiToken, String), ApiError> {
    if let Some(token) = crate::environ::var("LACHESIS_API_TOKEN") {
        return Ok((ApiToken::new(&token, "LACHESIS_API_TOKEN")?, "LACHESIS_API_TOKEN".into()));
    }
    let path = token_path(home);
    let (token, _) = crate::secrets::load_or_create_secret(&path)
        .map_err(|source| ApiError::TokenFile { path: path.clone(), source })?;
    let origin = path.display().to_string();
    Ok((ApiToken::new(&token, &origin)?, origin))
}

pub(super) async fn require_token(
    State(state): State<AppState>,
    request: Request<Body>,
    next: Next,
) -> Response {
    if let Some(token) = &state.token
        && !dashboard::is_public(request.uri().path())
    {
        let bearer = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_string);
        // The dashboard's login puts the token in a cookie instead.
        let given = bearer.or_else(|| dashboard::cookie_token(request.headers())).unwrap_or_default();
        if !token.matches(&given) {
            if dashboard::is_page(request.uri().path()) {
                return dashboard::login_required();
            }
            return Failure::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "a valid bearer token is required (the daemon's is in $LACHESIS_HOME/api-token)",
            )
            .into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn tokens_compare_by_digest_and_short_ones_are_refused() {
        let token = ApiToken::new("0123456789abcdef", "test").unwrap();
        assert!(token.matches("0123456789abcdef"));
        assert!(!token.matches("0123456789abcdeg") && !token.matches("0123456789abcdef0"));
        assert!(!token.matches(""));
        let err = ApiToken::new("short-token", "LACHESIS_API_TOKEN").err().unwrap().to_string();
        assert!(err.starts_with("the API token from LACHESIS_API_TOKEN is 11 bytes long"), "{err}");
    }

    #[test]
    fn the_token_file_is_created_once_with_mode_0600() {
        let home = tempfile::tempdir().unwrap();
        // SAFETY-free: the test only reads the variable's absence.
        if std::env::var_os("LACHESIS_API_TOKEN").is_some() {
            return;
        }
        let (first, origin) = load_or_create_token(home.path()).unwrap();
        let path = token_path(home.path());
        assert_eq!(origin, path.display().to_string());
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.trim().len(), 64);
        assert!(first.matches(text.trim()));
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let (again, _) = load_or_create_token(home.path()).unwrap();
        assert!(again.matches(text.trim()));
    }
}
