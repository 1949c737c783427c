//! Inference tests: queue, find, inspect, stop.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::engine::store::StoreError;
use crate::inference::spec::{
    DEFAULT_CONCURRENCY, DEFAULT_GROUP_SIZE, DEFAULT_MODELS, DEFAULT_STEPS, DEFAULT_TIMEOUT,
    LOCKED_TEST_FIELDS,
};
use crate::inference::{InferenceSpec, Provider};
use crate::model::{InferenceTest, TestTask, TestTrigger};
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
        let env = match &request.env_name {
            Some(name) => self.environment(name).await?,
            None => self.environment(&self.selection().await?.env_name).await?,
        };
        let locked_env: BTreeMap<String, serde_json::Value> = LOCKED_TEST_FIELDS
            .iter()
            .filter_map(|f| {
                let value = workflow.locked.get("env")?.get(*f)?;
                Some((f.to_string(), value.clone()))
            })
            .collect();
        let models: Vec<String> = if request.models.is_empty() {
            DEFAULT_MODELS.iter().map(|m| m.to_string()).collect()
        } else {
            request.models.clone()
        };
        Ok(InferenceSpec {
            env_name: env.name.clone(),
            env_file: env.file_path.clone(),
            env_kind: env.kind,
            import_dir: env.source.import_dir().map(std::path::Path::to_path_buf),
            env_args: BTreeMap::new(),
            python: self.settings.python.clone(),
            models,
            steps: request.steps.unwrap_or(DEFAULT_STEPS).max(1),
            group_size: request.group_size.unwrap_or(DEFAULT_GROUP_SIZE).max(1),
            provider,
            timeout: request.timeout.unwrap_or(Dur(DEFAULT_TIMEOUT)),
            concurrency: request.concurrency.unwrap_or(DEFAULT_CONCURRENCY).max(1),
            locked_env,
        })
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
                crate::inference::results::lines_in(&crate::inference::spec::output_path(
                    &test.test_dir,
                    &t.model,
                ))
            })
            .collect();
        Ok(TestStatus { test: shown_test(test), tasks, groups_written, events })
    }

    pub async fn list_tests(&self, limit: i64) -> Result<Vec<InferenceTest>> {
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

/// `test` with its provider URL's user:password, query and fragment redacted, for reads.
fn shown_test(mut test: InferenceTest) -> InferenceTest {
    test.spec.provider.base_url = crate::secrets::redact_url(&test.spec.provider.base_url);
    test
}
