//! Schedules: list, add (the schedule's own fields, and the test each firing runs), show,
//! pause, resume and remove.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::answer::{Answer, Body, ok};
use crate::api::{AppState, Failure};
use crate::service::TestRequest;

pub async fn schedules(State(s): State<AppState>) -> Answer {
    ok(s.service.schedules().await?)
}

/// The schedule's own fields, and the test each firing runs (every other field, read as a
/// `TestRequest`, which rejects fields neither it nor the schedule knows: serde's `flatten`
/// would let unknown fields through).
#[derive(Deserialize)]
#[serde(try_from = "serde_json::Map<String, Value>")]
pub struct ScheduleBody {
    name: String,
    cron: String,
    tz: Option<String>,
    webhooks: Vec<String>,
    max_drop: Option<f64>,
    test: TestRequest,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleFields {
    name: String,
    cron: String,
    tz: Option<String>,
    #[serde(default)]
    webhooks: Vec<String>,
    max_drop: Option<f64>,
}

impl TryFrom<serde_json::Map<String, Value>> for ScheduleBody {
    type Error = serde_json::Error;
    fn try_from(mut body: serde_json::Map<String, Value>) -> Result<Self, Self::Error> {
        let own: serde_json::Map<String, Value> = ["name", "cron", "tz", "webhooks", "max_drop"]
            .into_iter()
            .filter_map(|key| body.remove_entry(key))
            .collect();
        let own: ScheduleFields = serde_json::from_value(Value::Object(own))?;
        let test: TestRequest = serde_json::from_value(Value::Object(body))?;
        Ok(ScheduleBody {
            name: own.name,
            cron: own.cron,
            tz: own.tz,
            webhooks: own.webhooks,
            max_drop: own.max_drop,
            test,
        })
    }
}

pub async fn add_schedule(State(s): State<AppState>, Body(body): Body<ScheduleBody>) -> Response {
    let added = s
        .service
        .add_schedule(&body.name, &body.cron, body.tz.as_deref(), &body.test, body.webhooks, body.max_drop)
        .await;
    match added {
        Ok(schedule) => (StatusCode::CREATED, axum::Json(json!(schedule))).into_response(),
        Err(err) => Failure::from(err).into_response(),
    }
}

pub async fn schedule(State(s): State<AppState>, Path(name): Path<String>) -> Answer {
    let detail = s.service.schedule_detail(&name).await?;
    ok(json!({ "schedule": detail.schedule, "tests": detail.tests }))
}

pub async fn pause_schedule(State(s): State<AppState>, Path(name): Path<String>) -> Answer {
    ok(s.service.pause_schedule(&name, true).await?)
}

pub async fn resume_schedule(State(s): State<AppState>, Path(name): Path<String>) -> Answer {
    ok(s.service.pause_schedule(&name, false).await?)
}

pub async fn remove_schedule(State(s): State<AppState>, Path(name): Path<String>) -> Answer {
    ok(s.service.remove_schedule(&name).await?)
}
