//! Webhook deliveries: the outbox's recent ones, newest first, and a failed one sent again.

use axum::extract::{Path, State};
use serde::Deserialize;

use super::answer::{Answer, Q, ok};
use crate::api::AppState;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveriesQuery {
    limit: Option<i64>,
    before: Option<i64>,
}

pub async fn deliveries(State(s): State<AppState>, Q(query): Q<DeliveriesQuery>) -> Answer {
    let limit = query.limit.unwrap_or(crate::service::DELIVERIES_SHOWN);
    ok(s.service.webhook_deliveries(limit, query.before).await?)
}

pub async fn resend(State(s): State<AppState>, Path(id): Path<String>) -> Answer {
    ok(s.service.resend_webhook(&id).await?)
}
