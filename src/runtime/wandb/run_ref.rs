//! A W&B run as this client reads it: found by display name, with its summary, the keys it has
//! history for and the address of its page.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::{WandbError, decode};
use super::snapshot::whole;

/// A W&B run found by display name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRef {
    /// W&B's run id (`node.name`), the one `history` takes and the run URL ends with.
    pub id: String,
    pub display_name: String,
    /// `running`, `finished`, `crashed`, `failed`, `killed`, … as W&B reports it.
    pub state: Option<String>,
    /// `summaryMetrics`, decoded: the last value logged under each key.
    pub summary: Map<String, Value>,
    /// The metric names the run has history for (`historyKeys.keys`), sorted.
    #[serde(default)]
    pub history_keys: Vec<String>,
    /// `historyKeys.lastStep`.
    #[serde(default)]
    pub last_step: Option<i64>,
    /// The run's page in the W&B web UI.
    #[serde(default)]
    pub url: Option<String>,
}

#[cfg(test)]
impl RunRef {
    /// A finished run `r1` whose summary is `summary`.
    pub(crate) fn finished_with(summary: Value) -> RunRef {
        RunRef {
            id: "r1".into(),
            display_name: "x".into(),
            state: Some("finished".into()),
            summary: summary.as_object().cloned().unwrap_or_default(),
            history_keys: vec![],
            last_step: None,
            url: Some("https://wandb.ai/team/p/runs/r1".into()),
        }
    }
}

impl RunRef {
    /// The run a `runs` query's node describes (its URL is set by the caller, who knows the
    /// entity it was found under).
    pub(super) fn from_node(node: &Value, display_name: &str) -> Result<RunRef, WandbError> {
        let id = node
            .get("name")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| decode("run node has no name"))?
            .to_string();
        let state = node.get("state").and_then(Value::as_str).map(str::to_string);
        let summary = match embedded_json(node.get("summaryMetrics"), "summaryMetrics")? {
            Some(Value::Object(map)) => map,
            None => Map::new(),
            Some(_) => return Err(decode("summaryMetrics is not an object")),
        };
        // historyKeys is informative only: a shape this client does not know leaves it empty
        // rather than losing the summary.
        let keys = embedded_json(node.get("historyKeys"), "historyKeys").ok().flatten();
        let mut history_keys: Vec<String> = keys
            .as_ref()
            .and_then(|k| k.get("keys"))
            .and_then(Value::as_object)
            .map(|k| k.keys().cloned().collect())
            .unwrap_or_default();
        history_keys.sort();
        let last_step = keys.as_ref().and_then(|k| k.get("lastStep")).and_then(whole);
        Ok(RunRef {
            id,
            display_name: display_name.to_string(),
            state,
            summary,
            history_keys,
            last_step,
            url: None,
        })
    }
}

/// A field W&B sends as JSON text inside the JSON (`JSONString`), decoded; some servers send the
/// object itself, which is taken as it is. `None` for a missing or null field.
pub(super) fn embedded_json(field: Option<&Value>, name: &str) -> Result<Option<Value>, WandbError> {
    match field {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if text.trim().is_empty() => Ok(None),
        Some(Value::String(text)) => crate::pyjson::from_str::<Value>(text)
            .map(|v| Some(v).filter(|v| !v.is_null()))
            .map_err(|e| WandbError::Decode { detail: format!("{name}: {e}") }),
        Some(other) => Ok(Some(other.clone())),
    }
}

/// The run's page: the hosted API at `api.wandb.ai` has its UI at `wandb.ai`; a self-hosted server
/// serves both from one address.
pub fn run_url(base: &str, entity: &str, project: &str, id: &str) -> Option<String> {
    let mut url = reqwest::Url::parse(base).ok()?;
    if url.host_str() == Some("api.wandb.ai") {
        url.set_host(Some("wandb.ai")).ok()?;
    }
    url.set_query(None);
    url.set_fragment(None);
    // A base with `user:pass@` must not leak into a URL shown to people.
    url.set_username("").ok()?;
    url.set_password(None).ok()?;
    url.path_segments_mut().ok()?.pop_if_empty().extend([entity, project, "runs", id]);
    Some(url.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wandb::DEFAULT_BASE;

    #[test]
    fn run_urls_point_at_the_web_ui() {
        assert_eq!(
            run_url(DEFAULT_BASE, "team", "p", "r1").as_deref(),
            Some("https://wandb.ai/team/p/runs/r1")
        );
        assert_eq!(
            run_url("http://u:pw@wandb.local:8080", "team", "my project", "r1").as_deref(),
            Some("http://wandb.local:8080/team/my%20project/runs/r1")
        );
    }
}
