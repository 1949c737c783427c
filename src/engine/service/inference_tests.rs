//! Inference tests: queue, find, inspect, stop.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::engine::store::StoreError;
use crate::inference::spec::{
    DEFAULT_CONCURRENCY, DEFAULT_GROUP_SIZE, DEFAULT_MODELS, DEFAULT_STEPS, DEFAULT_TIMEOUT,
    LOCKED_TEST_FIELDS,
};
use crate::inference::{InferenceSpec, Provider};
use crate::model::{EnvKind, InferenceTest, TestTask, TestTrigger};
use crate::workflow::Dur;

use super::{Result, Service, ServiceError};

/// What a surface asks for when it starts an inference test; unset fields take defaults.
/// Also the JSON body of `POST /tests` (with `env` for the environment).
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestRequest {
    #[serde(rename = "env")]
    pub env_name: Option<String>,
    #[serde(default)]
    pub models: Vec<String>,
    pub steps: Option<u32>,
    pub group_size: Option<u32>,
    /// An OpenAI-compatible base URL; OpenRouter when absent.
    pub provider: Option<String>,
    pub server_type: Option<String>,
    /// The environment variable holding the provider's key.
    pub api_key_env: Option<String>,
    pub timeout: Option<Dur>,
    pub concurrency: Option<usize>,
    /// Whose locked profile supplies the tokenizer and limits (the default workflow if absent).
    pub workflow: Option<String>,
    /// A verifiers environment's arguments for this test, as a JSON object on top of its
    /// configured values (`--env-args`).
    pub env_args: Option<String>,
    #[serde(skip)]
    pub schedule_id: Option<Uuid>,
}

/// An inference test with its per-model tasks and its events.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TestStatus {
    pub test: InferenceTest,
    pub tasks: Vec<TestTask>,
    /// Groups each model has written so far (its JSONL grows by one line per group), in task
    /// order; the environment prints little else while it works.
    pub groups_written: Vec<usize>,
    pub events: Vec<crate::model::Event>,
}

impl Service {
    /// Validates and queues an inference test; the daemon runs it.
    pub async fn submit_test(&self, request: TestRequest) -> Result<InferenceTest> {
        let spec = self.test_spec(&request).await?;
        let test = crate::model::InferenceTest::queued(
            Uuid::new_v4(),
            spec,
            request.schedule_id,
            &self.settings.home.join("tests"),
        );
        let tasks = test.pending_tasks();
        self.store.insert_test(&test, &tasks).await?;
        self.wake_queued().await;
        Ok(test)
    }

    /// Everything an inference test needs, resolved and checked now (environment file,
    /// provider and its key's presence, the locked tokenizer and limits).
    pub async fn test_spec(&self, request: &TestRequest) -> Result<InferenceSpec> {
        let catalog = self.settings.catalog()?;
        let workflow = catalog.load(&request.workflow.clone().unwrap_or_else(|| catalog.default_name()))?;
        let provider = match &request.provider {
            None => Provider::openrouter(),
            Some(url) => Provider {
                base_url: url.clone(),
                server_type: request.server_type.clone().unwrap_or_else(|| "openai".into()),
                api_key_env: request.api_key_env.clone(),
                health_check: false,
            },
        };
        let provider =
            Provider { api_key_env: request.api_key_env.clone().or(provider.api_key_env), ..provider };
        provider.check(&crate::inference::spec::allowed_key_vars(&workflow.credentials))?;
        if let Some(var) = &provider.api_key_env
            && !crate::environ::is_set(var)
        {
            return Err(ServiceError::MissingCredentials {
                workflow: "inference test".into(),
                wanted: vec![var.clone()],
                missing: vec![var.clone()],
            });
        }
        let chosen = self.run_environment(request.env_name.as_deref(), &BTreeMap::new(), &workflow).await;
        match chosen {
            Ok(env) if env.kind == EnvKind::Verifiers => {
                return self.verifiers_test_spec(request, &env, provider);
            }
            // A verifiers selection that can't be used (its module gone): say that, not what
            // Atropos discovery would say of the name.
            Err(err)
                if self.selected_kind(request.env_name.as_deref()).await? == Some(EnvKind::Verifiers) =>
            {
                return Err(err);
            }
            _ => {}
        }
        if request.env_args.is_some() {
            return Err(ServiceError::BadEnvArgs(
                "is for verifiers environments (an Atropos test takes its configuration from the selection)"
                    .into(),
            ));
        }
        let env = match &request.env_name {
            Some(name) => self.environment(name).await?,
            None => self.environment(&self.environment_selection().await?.env_name).await?,
        };
        let locked_env: BTreeMap<String, serde_json::Value> = LOCKED_TEST_FIELDS
            .iter()
            .filter_map(|f| {
                let value = workflow.locked.get("env")?.get(*f)?;
                Some((f.to_string(), value.clone()))
            })
            .collect();
        Ok(InferenceSpec {
            env_name: env.name.clone(),
            env_file: env.file_path.clone(),
            env_kind: env.kind,
            import_dir: env.source.import_dir().map(std::path::Path::to_path_buf),
            env_args: BTreeMap::new(),
            python: self.settings.python.clone(),
            models: requested_models(request),
            steps: request.steps.unwrap_or(DEFAULT_STEPS).max(1),
            group_size: request.group_size.unwrap_or(DEFAULT_GROUP_SIZE).max(1),
            provider,
            timeout: request.timeout.unwrap_or(Dur(DEFAULT_TIMEOUT)),
            concurrency: request.concurrency.unwrap_or(DEFAULT_CONCURRENCY).max(1),
            locked_env,
        })
    }

    /// A verifiers environment's test: `vf-eval` with the environment's configured arguments,
    /// the request's `--env-args` on top, each required parameter given a value.
    fn verifiers_test_spec(
        &self,
        request: &TestRequest,
        env: &super::runs::RunEnvironment,
        provider: Provider,
    ) -> Result<InferenceSpec> {
        if !crate::inference::spec::is_verifiers_env_id(&env.name) {
            return Err(ServiceError::NotAVerifiersId(env.name.escape_debug().to_string()));
        }
        let mut env_args: BTreeMap<String, serde_json::Value> =
            serde_json::from_str(&env.args_json()).unwrap_or_default();
        if let Some(text) = &request.env_args {
            let given: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(text).map_err(|e| {
                    ServiceError::BadEnvArgs(format!("is not a JSON object ({e}): {}", short(text)))
                })?;
            env_args.extend(given);
        }
        let required = env.fields.iter().flatten().filter(|f| f.required);
        if let Some(field) = required.into_iter().find(|f| env_args.get(&f.name).is_none_or(|v| v.is_null()))
        {
            return Err(ServiceError::MissingEnvArgument {
                env: env.name.clone(),
                parameter: field.name.clone(),
            });
        }
        Ok(InferenceSpec {
            env_name: env.name.clone(),
            env_file: env.file.clone(),
            env_kind: env.kind,
            import_dir: env
                .source
                .as_ref()
                .and_then(crate::environments::EnvSource::import_dir)
                .map(Into::into),
            env_args,
            python: self.settings.python.clone(),
            models: requested_models(request),
            steps: request.steps.unwrap_or(DEFAULT_STEPS).max(1),
            group_size: request.group_size.unwrap_or(DEFAULT_GROUP_SIZE).max(1),
            provider,
            timeout: request.timeout.unwrap_or(Dur(DEFAULT_TIMEOUT)),
            concurrency: request.concurrency.unwrap_or(DEFAULT_CONCURRENCY).max(1),
            // Atropos' tokenizer and limits: vf-eval takes none of them.
            locked_env: BTreeMap::new(),
        })
    }

    /// The kind of the selection, when it is the environment `named` (or none is named).
    async fn selected_kind(&self, named: Option<&str>) -> Result<Option<EnvKind>> {
        let selection = self.store.selection().await?;
        Ok(selection.filter(|sel| named.is_none_or(|n| n == sel.env_name)).map(|sel| sel.kind))
    }

    pub async fn resolve_test(&self, prefix: &str) -> Result<InferenceTest> {
        let by_id = async |id| self.store.test(id).await;
        let by_prefix = async |prefix: &str| self.store.tests_by_prefix(prefix, 6).await;
        let id_of = |t: &InferenceTest| t.id;
        super::resolve_prefix(prefix, "tests", by_id, by_prefix, id_of, ServiceError::UnknownTest).await
    }

    pub async fn test_status(&self, prefix: &str) -> Result<TestStatus> {
        let test = self.resolve_test(prefix).await?;
        let tasks = self.store.test_tasks(test.id).await?;
        let events = self.store.events(test.id, 0).await?;
        let groups_written = tasks
            .iter()
            .map(|t| {
                let lines =
                    crate::inference::results::lines_in(&test.spec.results_path(&test.test_dir, &t.model));
                // vf-eval writes a line per rollout (all at its end): a group is an example's.
                match test.spec.env_kind {
                    EnvKind::Atropos => lines,
                    EnvKind::Verifiers => lines / (test.spec.group_size.max(1) as usize),
                }
            })
            .collect();
        Ok(TestStatus { test: shown_test(test), tasks, groups_written, events })
    }

    pub async fn tests(&self, limit: i64) -> Result<Vec<InferenceTest>> {
        Ok(self.store.list_tests(limit).await?.into_iter().map(shown_test).collect())
    }

    /// Stops a queued or running test (`test stop`): it ends cancelled, its processes killed by
    /// the daemon.
    pub async fn stop_test(&self, prefix: &str) -> Result<InferenceTest> {
        let mut test = self.resolve_test(prefix).await?;
        loop {
            if test.state.is_terminal() {
                return Err(ServiceError::TestEnded { id: test.id.to_string(), state: test.state });
            }
            match self.store.transition_test(&test, TestTrigger::Cancel, Some("cancelled"), None).await {
                Ok(test) => {
                    self.wake().await;
                    return Ok(test);
                }
                Err(StoreError::TestConflict { .. }) => {
                    test = self
                        .store
                        .test(test.id)
                        .await?
                        .ok_or_else(|| ServiceError::UnknownTest(prefix.to_string()))?;
                }
                Err(err) => return Err(err.into()),
            }
        }
    }
}

fn requested_models(request: &TestRequest) -> Vec<String> {
    if request.models.is_empty() {
        DEFAULT_MODELS.iter().map(|m| m.to_string()).collect()
    } else {
        request.models.clone()
    }
}

/// Given text for a one-line message: at most 60 characters, escaped.
fn short(text: &str) -> String {
    let cut: String = text.chars().take(60).collect();
    let more = if cut.len() < text.len() { "…" } else { "" };
    format!("{}{more}", cut.escape_debug())
}

/// `test` with its provider URL's user:password, query and fragment redacted, for reads.
fn shown_test(mut test: InferenceTest) -> InferenceTest {
    test.spec.provider.base_url = crate::secrets::redact_url(&test.spec.provider.base_url);
    test
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// What a refused `--env-args` echoes is one short line, whatever was given.
        #[test]
        fn a_refused_value_is_echoed_in_one_short_line(text in any::<String>()) {
            let shown = short(&text);
            prop_assert!(!shown.contains('\n') && !shown.contains('\r'));
            prop_assert!(shown.chars().count() <= 60 * 10 + 1, "{}", shown);
        }
    }

    #[test]
    fn long_values_are_cut() {
        assert_eq!(short("{not json"), "{not json");
        assert_eq!(short(&"x".repeat(70)), format!("{}…", "x".repeat(60)));
        assert_eq!(short("a\nb"), "a\\nb");
    }
}
