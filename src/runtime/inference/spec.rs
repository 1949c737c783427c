//! An inference test: against each model, through an OpenAI-compatible provider, an Atropos
//! environment's own `process` mode (writing one JSONL of scored groups per model), or for a
//! verifiers environment verifiers' own evaluator, `vf-eval` (saving its rollouts in the model's
//! working directory).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::model::EnvKind;
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

/// The variable `vf-eval` reads the provider's key from (its `--api-key-var`). The daemon puts
/// the key there, in that one process's environment only; the prefix makes the shim mask it in
/// the log.
pub const PROVIDER_KEY_VAR: &str = "LACHESIS_SECRET_ARG_PROVIDER_KEY";

/// The module `vf-eval` runs as (its console script's): run by the configured Python, so it is
/// the verifiers of the Python the environment is installed in.
pub const VF_EVAL_MODULE: &str = "verifiers.scripts.eval";

/// A verifiers test's working directory for one model: `vf-eval` saves under `./outputs/evals`.
pub fn model_dir(test_dir: &Path, model: &str) -> PathBuf {
    test_dir.join(format!("{}.vf-eval", file_stem(model)))
}

/// Whether `name` can be handed to `vf-eval` as an environment id: what verifiers imports
/// (dashes become underscores) and names its output directory after, so no path, no option.
pub fn is_verifiers_env_id(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && !name.starts_with(['-', '.'])
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.contains("..")
}

impl InferenceSpec {
    /// The file the model's results are read from: the groups JSONL of an Atropos test, the
    /// newest `results.jsonl` vf-eval saved for a verifiers test (its working directory while
    /// there is none yet).
    pub fn results_path(&self, test_dir: &Path, model: &str) -> PathBuf {
        match self.env_kind {
            EnvKind::Atropos => output_path(test_dir, model),
            EnvKind::Verifiers => {
                let dir = model_dir(test_dir, model);
                crate::inference::verifiers_results::find_results(&dir).unwrap_or(dir)
            }
        }
    }

    /// What the test found for one model once its process ended.
    pub fn read_result(&self, test_dir: &Path, model: &str) -> crate::inference::results::ModelResult {
        match self.env_kind {
            EnvKind::Atropos => {
                crate::inference::results::read_model_result(model, &output_path(test_dir, model))
            }
            EnvKind::Verifiers => {
                crate::inference::verifiers_results::read_verifiers_result(model, &model_dir(test_dir, model))
            }
        }
    }

    /// The process for one model. The provider's key is in no argument: atroposlib reads it from
    /// `--config` (see [`write_secret_config`]), vf-eval from the variable [`PROVIDER_KEY_VAR`];
    /// so `ps` never shows it.
    pub fn task_plan(&self, model: &str, test_dir: &Path) -> StagePlan {
        match self.env_kind {
            EnvKind::Atropos => self.process_plan(model, test_dir),
            EnvKind::Verifiers => self.vf_eval_plan(model, test_dir),
        }
    }

    /// `vf-eval ENV --model M … --save-results`, in the model's own directory: `--steps`
    /// examples, `--group-size` rollouts of each (at most one example's rollouts in flight), the
    /// environment's configured arguments as `--env-args`.
    fn vf_eval_plan(&self, model: &str, test_dir: &Path) -> StagePlan {
        let env_args = serde_json::to_string(&self.env_args).unwrap_or_else(|_| "{}".into());
        let argv: Vec<String> = vec![
            self.python.clone(),
            "-m".into(),
            VF_EVAL_MODULE.into(),
            "--model".into(),
            model.to_string(),
            "--api-base-url".into(),
            self.provider.base_url.clone(),
            "--api-key-var".into(),
            PROVIDER_KEY_VAR.into(),
            "--num-examples".into(),
            self.steps.to_string(),
            "--rollouts-per-example".into(),
            self.group_size.to_string(),
            "--max-concurrent".into(),
            self.group_size.to_string(),
            "--env-args".into(),
            env_args,
            "--save-results".into(),
            // The id last, after `--`: whatever it is, it is not an option.
            "--".into(),
            self.env_name.clone(),
        ];
        let mut env = BTreeMap::from([("PYTHONUNBUFFERED".to_string(), "1".to_string())]);
        if let Some(dir) = &self.import_dir {
            env.insert("PYTHONPATH".to_string(), dir.display().to_string());
        }
        model_task(model, test_dir, argv, model_dir(test_dir, model), env)
    }

    fn process_plan(&self, model: &str, test_dir: &Path) -> StagePlan {
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
        model_task(model, test_dir, argv, cwd, env)
    }
}

/// One model's process, whichever evaluator: named and logged by the model, up as soon as it
/// starts (a test has no readiness to wait for).
fn model_task(
    model: &str,
    test_dir: &Path,
    argv: Vec<String>,
    cwd: PathBuf,
    env: BTreeMap<String, String>,
) -> StagePlan {
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
    fn a_verifiers_test_runs_vf_eval_with_no_key_in_its_argv() {
        let spec = InferenceSpec {
            env_name: "vf-arith".into(),
            env_file: "/envs/vf_arith/vf_arith.py".into(),
            env_kind: EnvKind::Verifiers,
            import_dir: Some("/envs/vf_arith".into()),
            env_args: BTreeMap::from([
                ("unanswerable".to_string(), serde_json::json!(2)),
                ("split".to_string(), serde_json::json!("it's \"test\"")),
            ]),
            python: "/venv/bin/python".into(),
            models: vec!["qwen/qwen3-8b".into()],
            steps: 4,
            group_size: 3,
            provider: Provider { api_key_env: Some("STUB_KEY".into()), ..Provider::openrouter() },
            timeout: Dur(DEFAULT_TIMEOUT),
            concurrency: 2,
            locked_env: BTreeMap::from([("tokenizer_name".to_string(), serde_json::json!("Qwen/Qwen3-8B"))]),
        };
        let plan = spec.task_plan("qwen/qwen3-8b", Path::new("/tests/j1"));
        assert_eq!(
            plan.argv,
            [
                "/venv/bin/python",
                "-m",
                "verifiers.scripts.eval",
                "--model",
                "qwen/qwen3-8b",
                "--api-base-url",
                "https://openrouter.ai/api/v1",
                "--api-key-var",
                "LACHESIS_SECRET_ARG_PROVIDER_KEY",
                "--num-examples",
                "4",
                "--rollouts-per-example",
                "3",
                "--max-concurrent",
                "3",
                "--env-args",
                r#"{"split":"it's \"test\"","unanswerable":2}"#,
                "--save-results",
                "--",
                "vf-arith",
            ]
        );
        // The key is named, never given: vf-eval reads the variable the daemon sets in its
        // environment, whose prefix the shim masks.
        assert!(PROVIDER_KEY_VAR.starts_with(crate::secrets::SECRET_ARG_PREFIX));
        assert!(!plan.argv.iter().any(|a| a.contains("STUB_KEY") || a.contains("api_key")));
        assert_eq!(plan.cwd, PathBuf::from("/tests/j1/qwen_qwen3-8b.vf-eval"));
        assert_eq!(plan.log_path, PathBuf::from("/tests/j1/qwen_qwen3-8b.log"));
        assert_eq!(plan.environ.get("PYTHONPATH").map(String::as_str), Some("/envs/vf_arith"));
        assert!(!plan.environ.contains_key(ALLOW_DUMMY_MANAGED_SERVER));
        let installed = InferenceSpec { import_dir: None, env_args: BTreeMap::new(), ..spec };
        let plan = installed.task_plan("m", Path::new("/tests/j1"));
        assert!(!plan.environ.contains_key("PYTHONPATH"), "an installed package imports from site-packages");
        assert!(plan.argv.windows(2).any(|w| w == ["--env-args", "{}"]));
    }

    #[test]
    fn verifiers_ids_are_module_names_not_paths_or_options() {
        for ok in ["vf-arith", "reverse_text", "gsm8k", "wordle.v2"] {
            assert!(is_verifiers_env_id(ok), "{ok}");
        }
        for bad in ["", "../x", "a/b", "-x", ".hidden", "a..b", "nul\0", "sp ace", "x/", "ü"] {
            assert!(!is_verifiers_env_id(bad), "{bad:?}");
        }
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
