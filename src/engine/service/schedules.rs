//! Schedules: cron lines that queue an inference test (add, show, pause, remove). The daemon
//! fires them (`reconciler/schedules.rs`).

use uuid::Uuid;

use crate::model::{InferenceTest, Schedule};

use super::{Result, Service, ServiceError, TestRequest};

/// A schedule as `schedule show` presents it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ScheduleDetail {
    pub schedule: Schedule,
    /// The next due time in milliseconds (UTC), `None` when paused.
    pub next_due: Option<crate::model::Millis>,
    /// Its latest tests, newest first.
    pub tests: Vec<InferenceTest>,
    /// Its firings, catch-ups and skips.
    pub events: Vec<crate::model::Event>,
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
    ) -> Result<Schedule> {
        // The name is typed on command lines and shown in tables: a plain name.
        if !crate::workflow::is_simple_name(name) {
            let shown = crate::text::one_line(name);
            return Err(ServiceError::Schedule(format!("name: '{shown}' {}", crate::workflow::NAME_RULE)));
        }
        let policy = match max_drop {
            Some(drop) => crate::inference::regression::RegressionPolicy::new(drop)
                .map_err(|e| ServiceError::Schedule(e.to_string()))?,
            None => crate::inference::regression::RegressionPolicy::default(),
        };
        crate::cron::Cron::parse(cron, tz).map_err(|e| ServiceError::Schedule(e.to_string()))?;
        if self.store.schedules().await?.iter().any(|s| s.name == name) {
            return Err(ServiceError::Schedule(format!("a schedule called '{name}' already exists")));
        }
        for url in &webhooks {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ServiceError::Schedule(format!("webhook '{url}' must be an http(s) URL")));
            }
        }
        let now = crate::model::now_millis();
        let schedule = Schedule {
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
        Ok(shown(schedule))
    }

    /// A schedule as it may be shown: its webhooks' credentials redacted.
    pub async fn schedule(&self, name: &str) -> Result<Schedule> {
        self.stored_schedule(name).await.map(shown)
    }

    /// The schedule as stored, webhook credentials and all: never returned to a caller.
    async fn stored_schedule(&self, name: &str) -> Result<Schedule> {
        let all = self.store.schedules().await?;
        let names: Vec<String> = all.iter().map(|s| s.name.clone()).collect();
        all.into_iter().find(|s| s.name == name).ok_or_else(|| ServiceError::UnknownSchedule {
            name: name.to_string(),
            available: names.join(", "),
        })
    }

    /// Every schedule as it may be shown (webhook credentials redacted).
    pub async fn schedules(&self) -> Result<Vec<Schedule>> {
        Ok(self.store.schedules().await?.into_iter().map(shown).collect())
    }

    /// A schedule with its next due time, its latest tests and its history of firings.
    pub async fn schedule_detail(&self, name: &str) -> Result<ScheduleDetail> {
        let schedule = self.schedule(name).await?;
        let tests = self.store.schedule_tests(schedule.id, 10).await?;
        let events = self.store.events(schedule.id, 0).await?;
        let next_due = schedule.next_due(chrono::Utc::now());
        Ok(ScheduleDetail { schedule, next_due, tests, events })
    }

    pub async fn pause_schedule(&self, name: &str, paused: bool) -> Result<Schedule> {
        let mut schedule = self.stored_schedule(name).await?;
        schedule.paused = paused;
        if !paused {
            // Resuming doesn't catch up on the time it was paused for.
            schedule.last_fired = crate::model::now_millis();
        }
        self.store.update_schedule(&schedule).await?;
        self.wake().await;
        Ok(shown(schedule))
    }

    pub async fn remove_schedule(&self, name: &str) -> Result<Schedule> {
        let schedule = self.schedule(name).await?;
        self.store.delete_schedule(schedule.id).await?;
        Ok(schedule)
    }
}

/// `schedule` with each webhook's (and its provider's) user:password, query and fragment redacted: reads (CLI,
/// `--json`, HTTP, MCP) never carry a webhook's credentials.
fn shown(mut schedule: Schedule) -> Schedule {
    schedule.webhooks = schedule.webhooks.iter().map(|url| crate::secrets::redact_url(url)).collect();
    schedule.spec.provider.base_url = crate::secrets::redact_url(&schedule.spec.provider.base_url);
    schedule
}
