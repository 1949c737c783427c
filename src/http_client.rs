//! What the outgoing HTTP clients (webhooks, W&B) share.

/// An error and its causes, joined with ": " (reqwest's own message alone says little, e.g.
/// "error sending request"; the cause says "connection refused").
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
