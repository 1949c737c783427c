//! Command lines as they may be shown: values of secret flags and of secret variables redacted.

use super::{REDACTED as MASK, SECRET_VARS};

/// A flag whose name has the word key, token, secret or password (`--openai.api_key`, `--token`,
/// not `--tokenizer_name`).
fn is_secret_flag(flag: &str) -> bool {
    let name = flag.trim_start_matches('-').to_ascii_lowercase();
    flag.starts_with('-')
        && name
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|word| matches!(word, "key" | "apikey" | "token" | "secret" | "password"))
}

/// Values given to secret flags (`--openai.api_key VALUE`, `--token=VALUE`).
pub fn secret_flag_values(argv: &[String]) -> Vec<String> {
    let mut values = Vec::new();
    for (i, arg) in argv.iter().enumerate() {
        match arg.split_once('=') {
            Some((flag, value)) if is_secret_flag(flag) => values.push(value.to_string()),
            None if is_secret_flag(arg) => values.extend(argv.get(i + 1).cloned()),
            _ => {}
        }
    }
    values
}

/// The command line as it may be shown: values of `--…key`/`--…token`/`--…secret`/`--…password`
/// flags, and any argument equal to a secret variable's value, become `***`.
pub fn redact_argv(argv: &[String]) -> String {
    let secrets: Vec<String> =
        SECRET_VARS.iter().filter_map(|v| crate::environ::var(v)).filter(|v| !v.is_empty()).collect();
    let mut out = Vec::with_capacity(argv.len());
    let mut hide_next = false;
    for arg in argv {
        let shown = if hide_next || secrets.iter().any(|s| arg.contains(s.as_str())) {
            MASK.to_string()
        } else if let Some((flag, _)) = arg.split_once('=').filter(|(flag, _)| is_secret_flag(flag)) {
            format!("{flag}={MASK}")
        } else {
            arg.clone()
        };
        hide_next = is_secret_flag(arg) && !arg.contains('=');
        out.push(shown);
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn secret_flag_values_are_masked() {
        let shown = redact_argv(&args(&[
            "env.py",
            "process",
            "--openai.api_key",
            "sk-live-123",
            "--openai.model_name",
            "qwen",
        ]));
        assert_eq!(shown, "env.py process --openai.api_key *** --openai.model_name qwen");
        assert_eq!(
            redact_argv(&args(&["x", "--token=abc", "--env.tokenizer_name", "t"])),
            "x --token=*** --env.tokenizer_name t"
        );
        assert_eq!(redact_argv(&args(&["run-api", "--port", "8000"])), "run-api --port 8000");
    }
}
