//! Environments: every kind the service finds (name, kind, where from, description), what the
//! listing warned about, and the selection with its configuration.

use std::fmt::Write;

use super::html::esc;
use crate::environments::EnvSource;
use crate::service::{Result, Service, ServiceError};

pub async fn render(service: &Service) -> Result<String> {
    let discovery = service.environments().await;
    let mut body = String::from("<h1>Environments</h1>");
    match service.environment_config().await {
        Ok(view) => {
            let _ = write!(
                body,
                "<p class=\"meta\">selected <b>{}</b> ({}{}) · trained by workflow <b>{}</b> · {} configurable fields</p>",
                esc(&view.environment),
                esc(view.kind.as_str()),
                view.source.as_deref().map(|s| format!(", {}", esc(s))).unwrap_or_default(),
                esc(&view.workflow),
                view.configurable_fields.len(),
            );
        }
        Err(ServiceError::NoSelection) => body.push_str("<p class=\"muted\">no environment is selected</p>"),
        Err(err) => {
            let _ = write!(body, "<p class=\"muted\">{}</p>", esc(&err.to_string()));
        }
    }
    body.push_str(
        "<table class=\"environments\"><thead><tr><th>name</th><th>kind</th><th>from</th><th>description</th>\
         </tr></thead><tbody>",
    );
    for env in &discovery.environments {
        let from = match &env.source {
            EnvSource::Package { .. } => env.source.describe(),
            EnvSource::Directory { .. } => env.file_path.display().to_string(),
        };
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&env.name),
            esc(env.kind.as_str()),
            esc(&from),
            esc(&env.description),
        );
    }
    body.push_str("</tbody></table>");
    if !discovery.warnings.is_empty() {
        body.push_str("<h2>Warnings</h2><ul class=\"warnings\">");
        for warning in &discovery.warnings {
            let _ = write!(body, "<li>{}</li>", esc(&crate::text::one_line(&warning.to_string())));
        }
        body.push_str("</ul>");
    }
    Ok(body)
}
