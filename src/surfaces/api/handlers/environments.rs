//! What runs are made of: the workflows, the environments of every kind, the selection and its config.

use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::answer::{Answer, Body, ok};
use crate::api::AppState;

pub async fn workflows(State(s): State<AppState>) -> Answer {
    let catalog = s.service.settings.catalog().map_err(crate::service::ServiceError::from)?;
    let list: Vec<Value> = catalog
        .names()
        .into_iter()
        .map(|name| match catalog.load(&name) {
            Ok(wf) => json!({ "name": name, "description": wf.description, "stages": wf.stages.iter().map(|s| &s.name).collect::<Vec<_>>(), "credentials": wf.credentials }),
            Err(err) => json!({ "name": name, "error": err.to_string() }),
        })
        .collect();
    ok(list)
}

pub async fn environments(State(s): State<AppState>) -> Answer {
    let d = s.service.environments().await;
    ok(
        json!({ "environments": d.environments, "warnings": d.warnings.iter().map(|w| w.to_string()).collect::<Vec<_>>() }),
    )
}

pub async fn environment(State(s): State<AppState>, Path(name): Path<String>) -> Answer {
    ok(s.service.environment(&name).await?)
}

pub async fn config(State(s): State<AppState>) -> Answer {
    ok(s.service.environment_config().await?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelectBody {
    name: String,
}

pub async fn select(State(s): State<AppState>, Body(body): Body<SelectBody>) -> Answer {
    ok(s.service.select_environment(&body.name).await?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValueBody {
    value: Value,
}

pub async fn set_config(
    State(s): State<AppState>,
    Path(field): Path<String>,
    Body(body): Body<ValueBody>,
) -> Answer {
    let raw = match body.value {
        Value::String(text) => text,
        other => other.to_string(),
    };
    let value = s.service.set_environment_config(&field, &raw).await?;
    ok(json!({ "field": field, "value": value }))
}
