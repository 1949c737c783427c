//! Time as every noun stores it.

/// Milliseconds since the Unix epoch: one integer type that both SQLite and PostgreSQL store as is.
pub type Millis = i64;

pub fn now_millis() -> Millis {
    chrono::Utc::now().timestamp_millis()
}
