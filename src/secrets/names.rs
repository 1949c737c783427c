//! Which values are secrets, and what stands in for them.

/// Environment variables whose values are secrets wherever they turn up.
pub const SECRET_VARS: &[&str] = &[
    "TINKER_API_KEY",
    "WANDB_API_KEY",
    "OPENROUTER_API_KEY",
    "LACHESIS_API_TOKEN",
    "LACHESIS_WEBHOOK_SECRET",
];

/// Prefix of the environment variables carrying argv elements that hold secrets (a Slurm batch
/// script refers to them instead of the values, since Slurm keeps and shows the script text);
/// `lachesis redact` masks their values too.
pub const SECRET_ARG_PREFIX: &str = "LACHESIS_SECRET_ARG_";

/// What a secret is replaced with.
pub const REDACTED: &str = "***";

/// `text` with every occurrence of `secret` replaced by `***`. An empty secret changes nothing (it
/// would otherwise match between every character).
pub fn redact_text(text: &str, secret: &str) -> String {
    if secret.is_empty() { text.to_string() } else { text.replace(secret, REDACTED) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_text_replaces_every_occurrence() {
        assert_eq!(
            redact_text("--openai.api_key sk-1 then sk-1sk-1 end", "sk-1"),
            "--openai.api_key *** then ****** end"
        );
        assert_eq!(redact_text("nothing here", "sk-1"), "nothing here");
        assert_eq!(redact_text("keep", ""), "keep");
        assert_eq!(redact_text("ключ sk-ü ключ", "sk-ü"), "ключ *** ключ");
    }
}
