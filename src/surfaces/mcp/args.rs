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
    /// The provider's server type: openai (default), vllm, sglang or trl
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

/// `rl_start_sweep`'s arguments: the sweep by `file` or inline as `sweep`. Kept as given and
/// read by [`SweepRequest::from_args`], so a bad field is answered as an error that names it.
#[derive(Deserialize, Default)]
#[serde(transparent)]
pub struct StartSweepArgs(pub serde_json::Map<String, Value>);

impl schemars::JsonSchema for StartSweepArgs {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "StartSweepArgs".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <SweepRequest as schemars::JsonSchema>::json_schema(generator)
    }
}

/// A sweep to start, as an agent gives it.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SweepRequest {
    /// A sweep file: a name in the workflows directory's sweeps/ (e.g. demo-sweep), or a path inside the workflows directory
    #[serde(default)]
    pub file: Option<String>,
    /// The sweep itself instead of a file: an object in W&B's sweep format with lachesis' keys (method grid|random|bayes|pbt, workflow, metric {name, goal, target}, parameters, early_terminate {type: hyperband, min_iter, eta}, run_cap, max_live, seed; for pbt: perturbation_interval, quantile_fraction, resample_probability, perturbation_factors, burn_in), or the same as YAML text
    #[serde(default)]
    pub sweep: Option<Value>,
    /// Queue every member held: none starts until released (default false)
    #[serde(default)]
    pub hold: Option<bool>,
}

impl SweepRequest {
    /// The request in `args`, or one line naming what is wrong.
    pub fn from_args(args: StartSweepArgs) -> Result<SweepRequest, String> {
        serde_path_to_error::deserialize(Value::Object(args.0)).map_err(|e| {
            let path = e.path().to_string();
            let problem = e.into_inner().to_string();
            crate::text::one_line(&if path == "." { problem } else { format!("{path}: {problem}") })
        })
    }
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct SweepIdArgs {
    /// The sweep id (or a unique prefix of it), from rl_start_sweep
    pub sweep_id: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct SweepStatusArgs {
    /// The sweep id (or a unique prefix of it), from rl_start_sweep
    pub sweep_id: String,
    /// How many members of the leaderboard to show, best first (default 20)
    #[serde(default)]
    pub top: Option<usize>,
}
