//! What the outgoing HTTP clients (webhooks, W&B, progress endpoints, probes) share.

/// The one way lachesis makes an HTTP client. TLS is rustls with its `ring` provider,
/// installed here before the first client is built: reqwest's own default, aws-lc-rs, compiles
/// a large C library on every cold build for no gain here.
pub fn builder() -> reqwest::ClientBuilder {
    static PROVIDER: std::sync::Once = std::sync::Once::new();
    PROVIDER.call_once(|| {
        // Err only when a provider is installed already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder()
}

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
