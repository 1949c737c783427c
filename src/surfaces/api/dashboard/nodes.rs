//! Nodes (PostgreSQL only): the daemons sharing the store, their labels, heartbeat age, lease
//! and the runs each holds.

use std::fmt::Write;

use super::html::{badge, duration, esc, time};
use crate::model::RunQuery;
use crate::service::{Result, Service, ServiceError};

/// Recent runs looked through for the ones each node holds.
const RECENT_RUNS: i64 = 1000;

pub async fn render(service: &Service) -> Result<String> {
    let mut body = String::from("<h1>Nodes</h1>");
    let nodes = match service.nodes().await {
        Ok(nodes) => nodes,
        Err(err @ ServiceError::NeedsPostgres(_)) => {
            let _ = write!(body, "<p class=\"muted\">{}</p>", esc(&err.to_string()));
            return Ok(body);
        }
        Err(err) => return Err(err),
    };
    let runs = service.runs(&RunQuery { state: None, limit: Some(RECENT_RUNS) }).await?;
    body.push_str(
        "<table class=\"nodes\"><thead><tr><th>node</th><th>health</th><th>host</th><th>labels</th>\
         <th>heartbeat</th><th>lease</th><th>started</th><th>runs held</th></tr></thead><tbody>",
    );
    for view in &nodes {
        let node = &view.node;
        let labels: Vec<String> = node.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let held: Vec<String> = runs
            .iter()
            .filter(|r| !r.state.is_terminal() && r.node.as_deref() == Some(node.id.as_str()))
            .map(|r| format!("<a href=\"/ui/runs/{}\">{}</a>", r.id, crate::model::short_id(&r.id)))
            .collect();
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} ago</td><td>{}</td><td>{}</td><td>{} {}</td></tr>",
            esc(&node.id),
            badge(view.health),
            esc(&node.hostname),
            esc(&labels.join(", ")),
            duration(view.heartbeat_age_ms),
            duration(node.lease_ms),
            time(Some(node.started_at)),
            node.runs,
            held.join(" "),
        );
    }
    body.push_str("</tbody></table>");
    Ok(body)
}
