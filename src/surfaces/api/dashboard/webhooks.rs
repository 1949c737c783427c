//! Webhook deliveries: the outbox's newest ones (target redacted), what each receiver last
//! answered, and a button that sends a failed one again.

use std::fmt::Write;

use serde::Deserialize;

use super::html::{action_button, badge, esc, time};
use crate::model::DeliveryState;
use crate::service::{DELIVERIES_SHOWN, Result, Service};

#[derive(Deserialize)]
pub(super) struct DeliveriesQuery {
    before: Option<i64>,
}

pub(super) async fn render(service: &Service, query: &DeliveriesQuery) -> Result<String> {
    let page = service.webhook_deliveries(DELIVERIES_SHOWN, query.before).await?;
    let mut body = String::from("<h1>Webhook deliveries</h1>");
    if page.deliveries.is_empty() {
        body.push_str(
            "<p class=\"muted\">No delivery yet: <code>LACHESIS_WEBHOOKS</code> and schedules' webhooks name the receivers.</p>",
        );
        return Ok(body);
    }
    body.push_str(
        "<table class=\"webhooks\"><thead><tr><th>delivery</th><th>state</th><th>event</th><th>about</th>\
         <th>target</th><th>attempts</th><th>last answer</th><th>updated</th><th></th></tr></thead><tbody>",
    );
    for d in &page.deliveries {
        let about = match uuid::Uuid::parse_str(&d.subject) {
            Ok(id) => format!("<a href=\"/ui/runs/{id}\">{}</a>", crate::model::short_id(&id)),
            Err(_) => esc(&d.subject),
        };
        let resend = match d.state {
            DeliveryState::Failed => {
                action_button(&format!("/ui/webhooks/{}/resend", d.id), "resend", "Send this delivery again?")
            }
            DeliveryState::Pending | DeliveryState::Delivered => String::new(),
        };
        let _ = write!(
            body,
            "<tr><td><code title=\"{id}\">{short}</code></td><td>{}</td><td>{}</td><td>{about}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{resend}</td></tr>",
            badge(d.state.as_str()),
            esc(&d.event),
            esc(&d.target),
            d.attempts,
            esc(d.last_answer.as_deref().unwrap_or("-")),
            time(Some(d.updated_at)),
            id = d.id,
            short = d.short_id(),
        );
    }
    body.push_str("</tbody></table>");
    if let Some(before) = page.next_before {
        let _ = write!(body, "<p><a href=\"/ui/webhooks?before={before}\">older deliveries</a></p>");
    }
    Ok(body)
}
