//! The web dashboard, served by the HTTP API under `/ui/` (`/` redirects to `/ui/runs`; the
//! JSON routes keep their paths). Pages are rendered on the server from the same service calls
//! as the CLI, HTTP and MCP surfaces; charts are SVG drawn here; the one stylesheet and script
//! are embedded. Pages follow the store through server-sent events: `/ui/changes` says when the
//! newest event id moves (the script then re-fetches the page and swaps its live parts), and
//! `/ui/runs/{id}/log?stage=` tails a stage's log (already redacted on disk).
//!
//! Access is the API's: with a token set, a page without it shows the login prompt. The login
//! form puts the token in an HttpOnly, SameSite=Strict cookie that `require_token` accepts.

mod access;
mod actions;
mod environments;
mod html;
mod live;
mod nodes;
mod pages;
mod report;
mod router;
mod run;
mod runs;
mod schedules;
mod svg;
mod sweeps;
mod tests_page;
mod webhooks;

pub use access::{cookie_token, is_page, is_public, login_required};
pub use router::router;
