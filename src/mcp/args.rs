//! The tools' arguments, as agents see them in each tool's input schema.

use rmcp::schemars;
use serde::Deserialize;
use serde_json::Value;

use crate::service::RunRequest;

#[derive(Deserialize, schemars::JsonSchema)]
pub struct NameArgs {
    /// Environment name, from rl_list_environments
    pub name: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct EditArgs {
    /// A configurable field, from rl_get_current_config
    pub field: String,
    /// Its new value (number, boolean, string, list…)
    pub value: Value,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct RunArgs {
    /// The run id (or a unique prefix of it)
    pub run_id: String,
}

/// `rl_start_training`'s arguments: one run request, every field `run start --from` lines and
/// `POST /runs` bodies take (all optional; the reference takes none). Kept as given and read
/// by `RunRequest::from_value`, so a bad field is answered as an error that names it.
#[derive(Deserialize, Default)]
#[serde(transparent)]
pub struct StartArgs(pub serde_json::Map<String, Value>);

impl schemars::JsonSchema for StartArgs {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "StartArgs".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <RunRequest as schemars::JsonSchema>::json_schema(generator)
    }
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct TestArgs {
    /// Steps (groups) per model (default 3; more is rarely needed for a test)
    #[serde(default = "default_steps")]
    pub num_steps: u32,
    /// Completions per step (default 16, as in training)
    #[serde(default = "default_group_size")]
    pub group_size: u32,
    /// Model ids at the provider (default: qwen/qwen3-8b, z-ai/glm-4.7-flash, minimax/minimax-m2.7)
    #[serde(default)]
    pub models: Option<Vec<String>>,
    /// An OpenAI-compatible base URL (default: OpenRouter)
    #[serde(default)]
    pub provider: Option<String>,
    /// The provider's server type: openai (default), vllm or sglang
    #[serde(default)]
    pub server_type: Option<String>,
    /// The environment variable holding the provider's key (default OPENROUTER_API_KEY for OpenRouter)
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Wait for the results (default true); false answers at once with the test id
    #[serde(default)]
    pub wait: Option<bool>,
}

fn default_steps() -> u32 {
    crate::inference::spec::DEFAULT_STEPS
}

fn default_group_size() -> u32 {
    crate::inference::spec::DEFAULT_GROUP_SIZE
}
