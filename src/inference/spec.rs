//! An inference test: the environment's own `process` mode against each model, through an
//! OpenAI-compatible provider, writing one JSONL of scored groups per model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::model::inference_spec::{InferenceSpec, Provider, ProviderError, SERVER_TYPES};
use crate::workflow::{DEFAULT_START_TIMEOUT, StagePlan};

/// The reference's three test models (its latest release moved the large one to MiniMax M2.7).
pub const DEFAULT_MODELS: [&str; 3] = ["qwen/qwen3-8b", "z-ai/glm-4.7-flash", "minimax/minimax-m2.7"];

/// atroposlib's ManagedServer refuses an OpenAI-type server (no token ids to track) unless this is
/// set; atroposlib documents it for exactly this evaluation use.
pub const ALLOW_DUMMY_MANAGED_SERVER: &str = "ATROPOS_ALLOW_DUMMY_MANAGED_SERVER";
pub const DEFAULT_STEPS: u32 = 3;
pub const DEFAULT_GROUP_SIZE: u32 = 16;
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
pub const DEFAULT_CONCURRENCY: usize = 2;

/// The locked `env` fields an inference test inherits from the workflow's profile.
pub const LOCKED_TEST_FIELDS: [&str; 4] =
    ["tokenizer_name", "max_token_length", "max_num_workers", "max_batches_offpolicy"];

/// The provider key every test may use.
pub const DEFAULT_KEY_VAR: &str = "OPENROUTER_API_KEY";

/// Extra variables an operator allows as provider keys (comma-separated).
pub const PROVIDER_KEYS_VAR: &str = "LACHESIS_PROVIDER_KEYS";

/// The variables a test may send to its provider as the key: OPENROUTER_API_KEY, the
/// `*_API_KEY` names among the workflow's credentials, and those in LACHESIS_PROVIDER_KEYS.
/// Anything else in the daemon's environment stays there.
pub fn allowed_key_vars(credentials: &[String]) -> Vec<String> {
    let mut allowed = vec![DEFAULT_KEY_VAR.to_string()];
    allowed.extend(credentials.iter().filter(|c| c.ends_with("_API_KEY")).cloned());
    if let Some(extra) = crate::environ::var(PROVIDER_KEYS_VAR) {
        allowed.extend(extra.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string));
    }
    allowed.sort();
    allowed.dedup();
    allowed
}

/// `qwen/qwen3-8b` → `qwen_qwen3-8b`: a model name as a file name.
pub fn file_stem(model: &str) -> String {
    model
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_') { c } else { '_' })
        .collect()
}

pub fn output_path(test_dir: &Path, model: &str) -> PathBuf {
    test_dir.join(format!("{}.jsonl", file_stem(model)))
}

/// The file that hands the provider's key to one model's process.
pub fn secret_config_path(test_dir: &Path, model: &str) -> PathBuf {
    test_dir.join(format!("{}.secret.yaml", file_stem(model)))
}

/// Writes `{openai: {api_key: KEY}}` to `path`, 0600 from its creation: atroposlib's `process
/// --config FILE` takes its settings from the file under the command-line flags. The daemon
/// removes the file when the model's process ends.
pub fn write_secret_config(path: &Path, api_key: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    // JSON is YAML, and serde_json escapes whatever the key holds.
    let text = serde_json::json!({ "openai": { "api_key": api_key } }).to_string();
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(text.as_bytes())?;
    file.write_all(b"\n")
}

/// The W&B run name a test's processes log under (when W&B is on): one per test, as the reference
/// names its test runs.
pub fn wandb_run_name(env_name: &str, test_dir: &Path) -> String {
    let id = test_dir.file_name().map(|n| n.to_string_lossy().chars().take(8).collect::<String>());
    format!("test_inference_lachesis_{env_name}_{}", id.unwrap_or_default())
}

pub fn log_path(test_dir: &Path, model: &str) -> PathBuf {
    test_dir.join(format!("{}.log", file_stem(model)))
}

impl InferenceSpec {
    /// The process for one model. The provider's key is in no argument: atroposlib reads it from
    /// `--config` (see [`write_secret_config`]), so `ps` never shows it.
    pub fn task_plan(&self, model: &str, test_dir: &Path) -> StagePlan {
        let mut argv: Vec<String> = vec![
            self.python.clone(),
            self.env_file.display().to_string(),
            "process".into(),
            "--config".into(),
            secret_config_path(test_dir, model).display().to_string(),
            "--env.total_steps".into(),
            self.steps.to_string(),
            "--env.group_size".into(),
            self.group_size.to_string(),
            "--env.data_path_to_save_groups".into(),
            output_path(test_dir, model).display().to_string(),
            // W&B only when a key is there to use it; offline `process` would otherwise fail.
            "--env.use_wandb".into(),
            crate::environ::is_set("WANDB_API_KEY").to_string(),
            "--env.wandb_name".into(),
            wandb_run_name(&self.env_name, test_dir),
        ];
        for (field, value) in &self.locked_env {
            let text = match value {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            argv.extend([format!("--env.{field}"), text]);
        }
        argv.extend([
            "--openai.base_url".into(),
            self.provider.base_url.clone(),
            "--openai.model_name".into(),
            model.to_string(),
            "--openai.server_type".into(),
            self.provider.server_type.clone(),
            "--openai.health_check".into(),
            self.provider.health_check.to_string(),
        ]);
        let cwd = self.env_file.parent().map_or_else(|| test_dir.to_path_buf(), Path::to_path_buf);
        let mut env = BTreeMap::from([("PYTHONUNBUFFERED".to_string(), "1".to_string())]);
        if self.provider.server_type == "openai" {
            env.insert(ALLOW_DUMMY_MANAGED_SERVER.to_string(), "1".to_string());
        }
        StagePlan {
            name: file_stem(model),
            argv,
            cwd,
            environ: env,
            log_path: log_path(test_dir, model),
            start_delay: None,
            probe: None,
            start_timeout: DEFAULT_START_TIMEOUT,
            log_limits: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::Dur;

    #[test]
    fn the_task_command_carries_the_test_and_locked_settings() {
        let spec = InferenceSpec {
            env_name: "gsm8k".into(),
            env_file: "/envs/gsm8k.py".into(),
            env_kind: Default::default(),
            import_dir: None,
            env_args: Default::default(),
            python: "python3".into(),
            models: vec!["qwen/qwen3-8b".into()],
            steps: 3,
            group_size: 16,
            provider: Provider::openrouter(),
            timeout: Dur(DEFAULT_TIMEOUT),
            concurrency: 2,
            locked_env: BTreeMap::from([
                ("tokenizer_name".to_string(), serde_json::json!("Qwen/Qwen3-8B")),
                ("max_token_length".to_string(), serde_json::json!(8192)),
            ]),
        };
        let plan = spec.task_plan("qwen/qwen3-8b", Path::new("/tests/j1"));
        let argv = plan.argv.join(" ");
        assert!(
            argv.starts_with(
                "python3 /envs/gsm8k.py process --config /tests/j1/qwen_qwen3-8b.secret.yaml --env.total_steps 3 --env.group_size 16"
            ),
            "{argv}"
        );
        assert!(!argv.contains("api_key"), "{argv}");
        assert!(argv.contains("--env.data_path_to_save_groups /tests/j1/qwen_qwen3-8b.jsonl"), "{argv}");
        assert!(argv.contains("--env.max_token_length 8192 --env.tokenizer_name Qwen/Qwen3-8B"), "{argv}");
        assert!(argv.contains(
            "--openai.model_name qwen/qwen3-8b --openai.server_type openai --openai.health_check false"
        ));
        assert_eq!(plan.log_path, PathBuf::from("/tests/j1/qwen_qwen3-8b.log"));
        // ManagedServer environments run against an OpenAI-type provider only with this set.
        assert_eq!(plan.environ.get(ALLOW_DUMMY_MANAGED_SERVER).map(String::as_str), Some("1"));
        let vllm = InferenceSpec {
            provider: Provider { server_type: "vllm".into(), ..Provider::openrouter() },
            ..spec.clone()
        };
        let plan = vllm.task_plan("qwen/qwen3-8b", Path::new("/tests/j1"));
        assert!(!plan.environ.contains_key(ALLOW_DUMMY_MANAGED_SERVER));
    }

    #[test]
    fn the_key_file_is_private_and_replaced() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = secret_config_path(dir.path(), "m");
        write_secret_config(&path, "old").unwrap();
        write_secret_config(&path, "sk-\"quoted\"").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"openai\":{\"api_key\":\"sk-\\\"quoted\\\"\"}}\n"
        );
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
