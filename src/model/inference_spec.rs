//! What an inference test runs, as data: the environment, the models and the provider that
//! answers them. Building each model's process is `inference::spec`'s.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::workflow::Dur;

/// An inference test's work: each model runs the environment's `process` mode for `steps`
/// groups of `group_size`, through `provider`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InferenceSpec {
    pub env_name: String,
    pub env_file: PathBuf,
    /// Decides what each model runs: the Atropos environment's `process` mode, or `vf-eval`.
    /// Tests stored before kinds existed are Atropos tests.
    #[serde(default)]
    pub env_kind: crate::environments::EnvKind,
    /// The directory a not-installed environment imports from (put on `PYTHONPATH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub import_dir: Option<PathBuf>,
    /// The environment's configured arguments (a verifiers environment's `--env-args`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env_args: BTreeMap<String, serde_json::Value>,
    pub python: String,
    pub models: Vec<String>,
    pub steps: u32,
    pub group_size: u32,
    pub provider: Provider,
    pub timeout: Dur,
    pub concurrency: usize,
    /// tokenizer_name, max_token_length, … from the workflow's locked profile.
    pub locked_env: BTreeMap<String, serde_json::Value>,
}

/// Where completions come from. The key itself is never stored: only the name of the
/// environment variable that holds it, read by the daemon when it starts the process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Provider {
    pub base_url: String,
    /// `openai` (any OpenAI-compatible API), `vllm` or `sglang`.
    pub server_type: String,
    pub api_key_env: Option<String>,
    pub health_check: bool,
}

/// The `server_type` values atroposlib knows (`APIServerConfig.server_type`).
pub const SERVER_TYPES: [&str; 4] = ["openai", "vllm", "sglang", "trl"];

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("provider '{0}' must be an http(s) URL with a host (e.g. https://openrouter.ai/api/v1)")]
    NotHttp(String),
    #[error("server_type '{0}' is not one of openai, vllm, sglang, trl")]
    ServerType(String),
    #[error(
        "api_key_env '{name}' is not a provider key (allowed: {allowed}; an operator can allow more in LACHESIS_PROVIDER_KEYS)"
    )]
    KeyNotAllowed { name: String, allowed: String },
}

impl Provider {
    /// Refuses what would send a key somewhere unexpected: a provider that isn't an http(s)
    /// URL, an unknown server type, a key variable not in `allowed`.
    pub fn check(&self, allowed: &[String]) -> Result<(), ProviderError> {
        let url = reqwest::Url::parse(&self.base_url).ok();
        if !url.is_some_and(|u| {
            matches!(u.scheme(), "http" | "https") && u.host_str().is_some_and(|h| !h.is_empty())
        }) {
            return Err(ProviderError::NotHttp(crate::secrets::redact_url(&self.base_url)));
        }
        if !SERVER_TYPES.contains(&self.server_type.as_str()) {
            return Err(ProviderError::ServerType(self.server_type.clone()));
        }
        if let Some(name) = &self.api_key_env
            && !allowed.contains(name)
        {
            return Err(ProviderError::KeyNotAllowed { name: name.clone(), allowed: allowed.join(", ") });
        }
        Ok(())
    }

    pub fn openrouter() -> Provider {
        Provider {
            base_url: "https://openrouter.ai/api/v1".into(),
            server_type: "openai".into(),
            api_key_env: Some("OPENROUTER_API_KEY".into()),
            // OpenRouter has no health endpoint.
            health_check: false,
        }
    }
}
