//! How nouns are named to people: short ids, and the error for a state name no state has.

use uuid::Uuid;

/// The first 8 hex digits of an id: what people type and read.
pub fn short_id(id: &Uuid) -> String {
    id.simple().to_string()[..8].to_string()
}

/// A state name that no state of `kind` has.
#[derive(Debug, thiserror::Error)]
#[error("unknown {kind} state '{text}' (expected one of: {expected})")]
pub struct UnknownState {
    pub kind: &'static str,
    pub text: String,
    pub expected: String,
}

impl UnknownState {
    /// `text` is not one of `names`, the states of a `kind`.
    pub fn new<'a>(kind: &'static str, text: &str, names: impl IntoIterator<Item = &'a str>) -> UnknownState {
        let expected = names.into_iter().collect::<Vec<_>>().join(", ");
        UnknownState { kind, text: text.to_string(), expected }
    }
}
