//! The HTTP API (`lachesis daemon --listen ADDR`): the service layer as JSON over HTTP. One
//! route table (`routes.rs`) builds both the router and the OpenAPI document, so the two can't
//! drift apart. Every TCP listener, loopback included, needs the bearer token
//! (`LACHESIS_API_TOKEN`, else `$LACHESIS_HOME/api-token`, created on first start); a unix socket
//! (`--listen unix:PATH`, mode 0600) is guarded by its file mode instead.

pub mod client;
mod dashboard;
mod failure;
mod handlers;
pub mod home;
mod routes;
mod serve;
mod token;

pub use failure::Failure;
pub use routes::ROUTES;
pub use serve::{ApiError, AppState, BODY_LIMIT, Listen, app, serve};
pub(crate) use serve::{UnixBindError, bind_unix};
pub use token::{ApiToken, MIN_TOKEN_LEN, TOKEN_FILE, load_or_create_token, token_path};
