//! Keeping secrets out of everything lachesis writes down or shows (store, events, logs, printed
//! commands, messages): one verb, redact, for command lines, output streams, URLs and text.

mod argv;
mod home_file;
mod names;
mod stream;
mod url;

pub use argv::{redact_argv, secret_flag_values};
pub use home_file::load_or_create_secret;
pub use names::{REDACTED, SECRET_ARG_PREFIX, SECRET_VARS, redact_text};
pub use stream::{copy_redacted, filter_main, secrets_for};
pub use url::{redact_url, redact_url_in};
