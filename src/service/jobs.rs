//! Inference-test jobs: queue, find, inspect, cancel.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::jobs::inference::{
    DEFAULT_CONCURRENCY, DEFAULT_GROUP_SIZE, DEFAULT_MODELS, DEFAULT_STEPS, DEFAULT_TIMEOUT,
    LOCKED_TEST_FIELDS,
};
use crate::jobs::{InferenceSpec, Job, JobEvent, JobTask, Provider};
use crate::store::StoreError;
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

impl Service {
    /// Validates and queues an inference test; the daemon runs it.
    pub async fn submit_test(&self, request: TestRequest) -> Result<Job> {
        let spec = self.test_spec(&request).await?;
        let job =
            crate::jobs::new_job(Uuid::new_v4(), spec, request.schedule_id, &self.settings.home.join("jobs"));
        let tasks = crate::jobs::pending_tasks(&job);
        self.store.insert_job(&job, &tasks).await?;
        self.wake().await;
        Ok(job)
    }

    /// Everything an inference test needs, resolved and checked now (environment file,
    /// provider and its key's presence, the locked tokenizer and limits).
    pub async fn test_spec(&self, request: &TestRequest) -> Result<InferenceSpec> {
        let catalog = self.settings.catalog()?;
        let workflow = catalog.load(&request.workflow.clone().unwrap_or_else(|| catalog.default_name()))?;
        let env = match &request.env_name {
            Some(name) => self.environment(name)?,
            None => self.environment(&self.selection().await?.env_name)?,
        };
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
        if let Some(var) = &provider.api_key_env
            && std::env::var_os(var).is_none()
        {
            return Err(ServiceError::MissingCredentials {
                workflow: "inference test".into(),
                wanted: vec![var.clone()],
                missing: vec![var.clone()],
            });
        }
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

    pub async fn resolve_job(&self, prefix: &str) -> Result<Job> {
        let prefix = prefix.trim();
        if let Ok(id) = Uuid::parse_str(prefix)
            && let Some(job) = self.store.job(id).await?
        {
            return Ok(job);
        }
        let mut matches = self.store.jobs_by_prefix(prefix, 6).await?;
        match matches.len() {
            0 => Err(ServiceError::UnknownJob(prefix.to_string())),
            1 => Ok(matches.remove(0)),
            _ => Err(ServiceError::AmbiguousRun {
                prefix: prefix.to_string(),
                candidates: matches.iter().map(|j| j.id.to_string()).collect(),
            }),
        }
    }

    pub async fn job_status(&self, prefix: &str) -> Result<(Job, Vec<JobTask>)> {
        let job = self.resolve_job(prefix).await?;
        let tasks = self.store.job_tasks(job.id).await?;
        Ok((job, tasks))
    }

    pub async fn list_jobs(&self, limit: i64) -> Result<Vec<Job>> {
        Ok(self.store.list_jobs(limit).await?)
    }

    /// Cancels a queued or running job (its processes are killed by the daemon).
    pub async fn cancel_job(&self, prefix: &str) -> Result<Job> {
        let mut job = self.resolve_job(prefix).await?;
        loop {
            if job.state.is_terminal() {
                return Err(ServiceError::JobEnded { id: job.id.to_string(), state: job.state });
            }
            match self.store.transition_job(&job, JobEvent::Cancel, Some("cancelled"), None).await {
                Ok(job) => {
                    self.wake().await;
                    return Ok(job);
                }
                Err(StoreError::JobConflict { .. }) => {
                    job = self
                        .store
                        .job(job.id)
                        .await?
                        .ok_or_else(|| ServiceError::UnknownJob(prefix.to_string()))?;
                }
                Err(err) => return Err(err.into()),
            }
        }
    }
}

impl Service {
    /// Adds a schedule whose firings enqueue the inference test `request` describes.
    pub async fn add_schedule(
        &self,
        name: &str,
        cron: &str,
        tz: Option<&str>,
        request: &TestRequest,
        webhooks: Vec<String>,
        max_drop: Option<f64>,
    ) -> Result<crate::jobs::Schedule> {
        let policy = match max_drop {
            Some(drop) => crate::jobs::schedule::RegressionPolicy::new(drop)
                .map_err(|e| ServiceError::Schedule(e.to_string()))?,
            None => crate::jobs::schedule::RegressionPolicy::default(),
        };
        crate::jobs::schedule::Cron::parse(cron, tz).map_err(|e| ServiceError::Schedule(e.to_string()))?;
        if self.store.schedules().await?.iter().any(|s| s.name == name) {
            return Err(ServiceError::Schedule(format!("a schedule called '{name}' already exists")));
        }
        for url in &webhooks {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ServiceError::Schedule(format!("webhook '{url}' must be an http(s) URL")));
            }
        }
        let now = crate::model::now_millis();
        let schedule = crate::jobs::Schedule {
            id: Uuid::new_v4(),
            name: name.to_string(),
            cron: cron.to_string(),
            tz: tz.map(str::to_string),
            spec: self.test_spec(request).await?,
            webhooks,
            policy,
            paused: false,
            // Due times count from now: a new schedule has missed nothing.
            last_fired: now,
            created_at: now,
        };
        self.store.insert_schedule(&schedule).await?;
        self.wake().await;
        Ok(schedule)
    }

    pub async fn schedule(&self, name: &str) -> Result<crate::jobs::Schedule> {
        let all = self.store.schedules().await?;
        let names: Vec<String> = all.iter().map(|s| s.name.clone()).collect();
        all.into_iter().find(|s| s.name == name).ok_or_else(|| ServiceError::UnknownSchedule {
            name: name.to_string(),
            available: names.join(", "),
        })
    }

    pub async fn schedules(&self) -> Result<Vec<crate::jobs::Schedule>> {
        Ok(self.store.schedules().await?)
    }

    pub async fn pause_schedule(&self, name: &str, paused: bool) -> Result<crate::jobs::Schedule> {
        let mut schedule = self.schedule(name).await?;
        schedule.paused = paused;
        if !paused {
            // Resuming doesn't catch up on the time it was paused for.
            schedule.last_fired = crate::model::now_millis();
        }
        self.store.update_schedule(&schedule).await?;
        self.wake().await;
        Ok(schedule)
    }

    pub async fn remove_schedule(&self, name: &str) -> Result<crate::jobs::Schedule> {
        let schedule = self.schedule(name).await?;
        self.store.delete_schedule(schedule.id).await?;
        Ok(schedule)
    }
}
