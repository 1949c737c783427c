//! Where the API listens and the application it serves there: the route table and the
//! dashboard behind the token check.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::middleware;

use super::token::{ApiToken, MIN_TOKEN_LEN, require_token};
use super::{Failure, ROUTES, dashboard, handlers};
use crate::service::Service;
use crate::telemetry::Telemetry;

/// Request bodies are small JSON documents; anything bigger is refused.
pub const BODY_LIMIT: usize = 64 * 1024;

#[derive(Clone)]
pub struct AppState {
    pub service: Service,
    pub telemetry: Arc<Telemetry>,
    pub(super) token: Option<Arc<ApiToken>>,
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
        .layer(middleware::map_response(handlers::answer::json_refusals))
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
///
/// The socket is bound under a name of its own beside `path`, made 0600, and only then renamed
/// onto `path`: whoever finds `path` finds it private, never in the moment between `bind`
/// (which creates it with the umask's mode) and `chmod`.
pub(crate) fn bind_unix(path: &Path) -> Result<tokio::net::UnixListener, UnixBindError> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {}
        Ok(_) => return Err(UnixBindError::NotASocket),
        Err(_) => {}
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let fresh = path.with_file_name(format!(".{name}.{}", std::process::id()));
    let _ = std::fs::remove_file(&fresh);
    let listener = tokio::net::UnixListener::bind(&fresh).map_err(UnixBindError::Io)?;
    let placed = std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::rename(&fresh, path));
    if let Err(err) = placed {
        let _ = std::fs::remove_file(&fresh);
        return Err(UnixBindError::Io(err));
    }
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_takes_an_address_or_a_unix_path() {
        assert_eq!("127.0.0.1:7".parse::<Listen>(), Ok(Listen::Tcp("127.0.0.1:7".parse().unwrap())));
        assert_eq!("unix:/tmp/l.sock".parse::<Listen>(), Ok(Listen::Unix("/tmp/l.sock".into())));
        assert!("unix:".parse::<Listen>().is_err() && "localhost".parse::<Listen>().is_err());
    }
}
