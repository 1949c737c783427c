//! The HTTP API (`lachesis daemon --listen ADDR`): the service layer as JSON over HTTP. One
//! route table (`routes.rs`) builds both the router and the OpenAPI document, so the two can't
//! drift apart. Every TCP listener, loopback included, needs the bearer token
//! (`LACHESIS_API_TOKEN`, else `$LACHESIS_HOME/api-token`, created on first start); a unix socket
//! (`--listen unix:PATH`, mode 0600) is guarded by its file mode instead.

pub mod client;
mod dashboard;
pub mod home;
mod routes;

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{Request, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde_json::json;

pub use routes::ROUTES;

use crate::service::{ErrorKind, Service, ServiceError};
use crate::telemetry::Telemetry;

/// Request bodies are small JSON documents; anything bigger is refused.
pub const BODY_LIMIT: usize = 64 * 1024;

#[derive(Clone)]
pub struct AppState {
    pub service: Service,
    pub telemetry: Arc<Telemetry>,
    token: Option<Arc<ApiToken>>,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(
        "the API token from {origin} is {len} bytes long: use at least {MIN_TOKEN_LEN} (e.g. `openssl rand -hex 32`)"
    )]
    TokenTooShort { origin: String, len: usize },
    #[error("cannot create the API token file {path}: {source}")]
    TokenFile { path: PathBuf, source: std::io::Error },
    #[error("listening on {listen} needs the API token")]
    TokenRequired { listen: Listen },
    #[error("cannot listen on {listen}: {source}")]
    Bind { listen: Listen, source: std::io::Error },
    #[error("cannot listen on unix:{path}: it exists and is not a socket")]
    NotASocket { path: PathBuf },
}

/// An error answer: a stable machine code and a message for people.
pub struct Failure {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl Failure {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Failure {
        Failure { status, code, message: message.into() }
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (self.status, axum::Json(json!({ "error": self.code, "message": self.message }))).into_response()
    }
}

impl From<ServiceError> for Failure {
    fn from(err: ServiceError) -> Failure {
        Failure::new(status_of(err.kind()), err.code(), err.to_string())
    }
}

/// The HTTP status of each kind of service error.
fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        ErrorKind::Ambiguous | ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
        // Nothing was written and the same request can succeed once space returns.
        ErrorKind::StorageFull => StatusCode::INSUFFICIENT_STORAGE,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// Where the API listens: a TCP address (always behind the bearer token) or a unix socket
/// (guarded by its 0600 file mode, no token).
#[derive(Clone, Debug, PartialEq)]
pub enum Listen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::str::FromStr for Listen {
    type Err = String;

    fn from_str(text: &str) -> Result<Listen, String> {
        match text.strip_prefix("unix:") {
            Some("") => Err("'unix:' needs a socket path (unix:PATH)".into()),
            Some(path) => Ok(Listen::Unix(std::path::absolute(path).unwrap_or_else(|_| path.into()))),
            None => text
                .parse()
                .map(Listen::Tcp)
                .map_err(|_| format!("'{text}' is neither HOST:PORT (e.g. 127.0.0.1:7077) nor unix:PATH")),
        }
    }
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Tcp(addr) => write!(f, "{addr}"),
            Listen::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

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
    let file_err = |source| ApiError::TokenFile { path: path.clone(), source };
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| file_err(std::io::Error::other(e.to_string())))?;
    let fresh: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    // O_EXCL with mode 0600: the token is never readable by others, not even for a moment.
    let created = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path);
    match created {
        Ok(mut file) => {
            file.write_all(format!("{fresh}\n").as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(file_err)?;
            let token = ApiToken::new(&fresh, "")?;
            Ok((token, path.display().to_string()))
        }
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            // One an operator wrote by hand may be readable by others: it is the owner's alone.
            let meta = std::fs::metadata(&path).map_err(file_err)?;
            if meta.permissions().mode() & 0o077 != 0 {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(file_err)?;
            }
            let text = std::fs::read_to_string(&path).map_err(file_err)?;
            let origin = path.display().to_string();
            Ok((ApiToken::new(text.trim(), &origin)?, origin))
        }
        Err(err) => Err(file_err(err)),
    }
}

async fn require_token(State(state): State<AppState>, request: Request<Body>, next: Next) -> Response {
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

/// The application, with the token check when `token` is set.
pub fn app(service: Service, telemetry: Arc<Telemetry>, token: Option<Arc<ApiToken>>) -> Router {
    let state = AppState { service, telemetry, token };
    let mut router = Router::new();
    for route in ROUTES {
        router = router.route(route.path, (route.handler)());
    }
    router
        .merge(dashboard::router())
        .fallback(|| async {
            Failure::new(StatusCode::NOT_FOUND, "not_found", "no such route (see /openapi.json)")
        })
        .layer(middleware::map_response(routes::json_refusals))
        .layer(middleware::from_fn_with_state(state.clone(), require_token))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// Binds `listen` and serves until the task is dropped: a TCP address with `token` required,
/// a unix socket (mode 0600) without.
pub async fn serve(
    listen: Listen,
    token: Option<Arc<ApiToken>>,
    service: Service,
    telemetry: Arc<Telemetry>,
) -> Result<(), ApiError> {
    let bind_err = |source| ApiError::Bind { listen: listen.clone(), source };
    match &listen {
        Listen::Tcp(addr) => {
            let Some(token) = token else { return Err(ApiError::TokenRequired { listen }) };
            let listener = tokio::net::TcpListener::bind(addr).await.map_err(bind_err)?;
            tracing::info!(%listen, "HTTP API listening (bearer token required)");
            let _ = axum::serve(listener, app(service, telemetry, Some(token))).await;
        }
        Listen::Unix(path) => {
            let listener = bind_unix(path).map_err(|e| match e {
                UnixBindError::NotASocket => ApiError::NotASocket { path: path.clone() },
                UnixBindError::Io(source) => bind_err(source),
            })?;
            tracing::info!(%listen, "HTTP API listening (unix socket, mode 0600, no token)");
            let _ = axum::serve(listener, app(service, telemetry, None)).await;
        }
    }
    Ok(())
}

pub(crate) enum UnixBindError {
    NotASocket,
    Io(std::io::Error),
}

/// Binds a unix socket at `path`, replacing a stale socket (the daemon lock is held, so no
/// other daemon of this home listens there) but never another kind of file; mode 0600.
pub(crate) fn bind_unix(path: &Path) -> Result<tokio::net::UnixListener, UnixBindError> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            std::fs::remove_file(path).map_err(UnixBindError::Io)?;
        }
        Ok(_) => return Err(UnixBindError::NotASocket),
        Err(_) => {}
    }
    let listener = tokio::net::UnixListener::bind(path).map_err(UnixBindError::Io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(UnixBindError::Io)?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind of service error answers with its own status; the codes clients match on stay.
    #[test]
    fn each_kind_of_error_has_its_status() {
        use crate::model::RunState;
        let cases: [(ServiceError, StatusCode, &str); 8] = [
            (ServiceError::UnknownRun("x".into()), StatusCode::NOT_FOUND, "not_found"),
            (
                ServiceError::BadAssignment { what: "--var", text: "x".into() },
                StatusCode::BAD_REQUEST,
                "invalid",
            ),
            (
                ServiceError::Ambiguous { what: "runs", prefix: "a".into(), candidates: vec![] },
                StatusCode::CONFLICT,
                "ambiguous",
            ),
            (
                ServiceError::AlreadyEnded { id: "x".into(), state: RunState::Failed },
                StatusCode::CONFLICT,
                "already_ended",
            ),
            (ServiceError::NoSelection, StatusCode::CONFLICT, "no_selection"),
            (
                ServiceError::MissingCredentials { workflow: "w".into(), wanted: vec![], missing: vec![] },
                StatusCode::UNPROCESSABLE_ENTITY,
                "missing_credentials",
            ),
            (
                ServiceError::Edit(crate::environments::EditError::Locked {
                    field: "f".into(),
                    value: serde_json::json!(1),
                }),
                StatusCode::FORBIDDEN,
                "locked_field",
            ),
            (
                ServiceError::InBatch { index: 2, source: Box::new(ServiceError::UnknownTest("t".into())) },
                StatusCode::NOT_FOUND,
                "not_found",
            ),
        ];
        for (err, status, code) in cases {
            let failure = Failure::from(err);
            assert_eq!((failure.status, failure.code), (status, code), "{}", failure.message);
        }
        let kinds = [
            (ErrorKind::Conflict, StatusCode::CONFLICT),
            (ErrorKind::StorageFull, StatusCode::INSUFFICIENT_STORAGE),
            (ErrorKind::Internal, StatusCode::INTERNAL_SERVER_ERROR),
        ];
        for (kind, status) in kinds {
            assert_eq!(status_of(kind), status, "{kind:?}");
        }
    }

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
    fn listen_takes_an_address_or_a_unix_path() {
        assert_eq!("127.0.0.1:7".parse::<Listen>(), Ok(Listen::Tcp("127.0.0.1:7".parse().unwrap())));
        assert_eq!("unix:/tmp/l.sock".parse::<Listen>(), Ok(Listen::Unix("/tmp/l.sock".into())));
        assert!("unix:".parse::<Listen>().is_err() && "localhost".parse::<Listen>().is_err());
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
