//! A small Weights & Biases client: finds a training run by its display name and reads its
//! summary and sampled history over W&B's GraphQL API (`graphql.rs` carries the requests,
//! `run_ref.rs` reads a run, `snapshot.rs` turns what it reads into the numbers lachesis stores).
//!
//! W&B hands several fields back as JSON encoded inside a JSON string (`summaryMetrics`, history
//! rows on some servers), and Python-side writers may leave `NaN`/`Infinity` in them; both are
//! decoded here, the non-finite numbers as null. The API key is sent only as HTTP basic auth
//! and is kept out of every error, log line and `Debug` output.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::error::{WandbError, decode};
use super::graphql::GraphQl;
use super::run_ref::{RunRef, embedded_json, run_url};
use super::snapshot::{history_keys_of, history_readings};
use crate::model::MetricReading;

/// Where the hosted W&B API lives.
pub const DEFAULT_BASE: &str = "https://api.wandb.ai";

/// Runs fetched per display-name lookup. Display names are not unique in W&B (a run relaunched
/// under the same name makes a second run), so a few are fetched and the newest is taken.
const RUNS_PER_LOOKUP: u32 = 10;

const FIND_RUN: &str = "query LachesisFindRun($project: String!, $entity: String!, $filters: JSONString!, \
$first: Int!, $order: String) { project(name: $project, entityName: $entity) { runs(filters: $filters, \
first: $first, order: $order) { edges { node { name displayName state summaryMetrics historyKeys } } } } }";

const HISTORY: &str = "query LachesisHistory($project: String!, $entity: String!, $name: String!, \
$specs: [JSONString!]!) { project(name: $project, entityName: $entity) { run(name: $name) { \
sampledHistory(specs: $specs) } } }";

const VIEWER: &str = "query LachesisViewer { viewer { entity } }";

/// Talks to one W&B server with one API key.
#[derive(Clone, Debug)]
pub struct WandbClient {
    graphql: GraphQl,
    entity: Option<String>,
    /// The key's default entity, asked once when `WANDB_ENTITY` is not set.
    default_entity: tokio::sync::OnceCell<String>,
}

impl WandbClient {
    /// `base` is the server root (`https://api.wandb.ai`); `timeout` bounds each request, connect
    /// to last byte.
    pub fn new(base: &str, entity: Option<String>, key: &str, timeout: Duration) -> Result<Self, WandbError> {
        let graphql = GraphQl::new(base, key, timeout)?;
        let entity = entity.map(|e| e.trim().to_string()).filter(|e| !e.is_empty());
        Ok(WandbClient { graphql, entity, default_entity: tokio::sync::OnceCell::new() })
    }

    /// A client from `WANDB_API_KEY`, `WANDB_BASE_URL` and `WANDB_ENTITY`; `None` when no key is
    /// set (W&B is optional).
    pub fn from_env(timeout: Duration) -> Result<Option<Self>, WandbError> {
        Self::from_lookup(crate::environ::var, timeout)
    }

    fn from_lookup(
        var: impl Fn(&str) -> Option<String>,
        timeout: Duration,
    ) -> Result<Option<Self>, WandbError> {
        // An empty variable is how shells and compose files unset things.
        let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let Some(key) = set("WANDB_API_KEY") else {
            return Ok(None);
        };
        let base = set("WANDB_BASE_URL").unwrap_or_else(|| DEFAULT_BASE.to_string());
        Self::new(&base, set("WANDB_ENTITY"), &key, timeout).map(Some)
    }

    pub fn base(&self) -> &str {
        self.graphql.base()
    }

    /// The newest run of `project` whose display name is `display_name`, or `None` when the
    /// project has no such run (or no such project exists).
    pub async fn find_run(&self, project: &str, display_name: &str) -> Result<Option<RunRef>, WandbError> {
        let entity = self.entity().await?;
        let variables = json!({
            "project": project,
            "entity": entity,
            // JSONString arguments are JSON text inside the JSON body.
            "filters": json!({ "display_name": display_name }).to_string(),
            "first": RUNS_PER_LOOKUP,
            "order": "-created_at",
        });
        let data = self.graphql.request("find_run", FIND_RUN, variables).await?;
        let Some(project_node) = data.get("project").filter(|p| !p.is_null()) else {
            tracing::debug!(project, entity = %entity, "W&B project not found");
            return Ok(None);
        };
        let edges = project_node
            .get("runs")
            .and_then(|runs| runs.get("edges"))
            .and_then(Value::as_array)
            .ok_or_else(|| decode("project.runs.edges is missing"))?;
        // The server filters already; checking again guards against a server whose filter is
        // looser (a prefix or pattern match would hand back someone else's run).
        let mut matching = edges
            .iter()
            .filter_map(|edge| edge.get("node"))
            .filter(|node| node.get("displayName").and_then(Value::as_str) == Some(display_name));
        let Some(node) = matching.next() else {
            return Ok(None);
        };
        let others = matching.count();
        if others > 0 {
            tracing::debug!(
                project,
                display_name,
                others,
                "several W&B runs share a display name; taking the newest"
            );
        }
        let mut run = RunRef::from_node(node, display_name)?;
        run.url = run_url(self.graphql.base(), &entity, project, &run.id);
        Ok(Some(run))
    }

    /// Up to `samples` rows of `keys` (plus `_step`, always) from run `run_id`'s history, as W&B
    /// samples them, oldest first. Each row holds the keys that were logged at that step.
    pub async fn history(
        &self,
        project: &str,
        run_id: &str,
        keys: &[&str],
        samples: u32,
    ) -> Result<Vec<Map<String, Value>>, WandbError> {
        let entity = self.entity().await?;
        // Rows are useless for a curve without their step.
        let mut wanted: Vec<&str> = Vec::with_capacity(keys.len() + 1);
        if !keys.contains(&"_step") {
            wanted.push("_step");
        }
        wanted.extend_from_slice(keys);
        let spec = json!({ "keys": wanted, "samples": samples.max(1) }).to_string();
        let variables = json!({ "project": project, "entity": entity, "name": run_id, "specs": [spec] });
        let data = self.graphql.request("history", HISTORY, variables).await?;
        let no_run = || WandbError::NoRun { project: project.to_string(), run: run_id.to_string() };
        let run = data
            .get("project")
            .filter(|p| !p.is_null())
            .ok_or_else(no_run)?
            .get("run")
            .filter(|r| !r.is_null())
            .ok_or_else(no_run)?;
        let sampled = match embedded_json(run.get("sampledHistory"), "sampledHistory")? {
            Some(Value::Array(per_spec)) => per_spec,
            None => return Ok(Vec::new()),
            Some(_) => return Err(decode("sampledHistory is not a list")),
        };
        // One list of rows per spec; a server that flattens the single spec's list is read too.
        let rows = match sampled.first() {
            None => return Ok(Vec::new()),
            Some(Value::Array(_)) => match sampled.into_iter().next() {
                Some(Value::Array(rows)) => rows,
                _ => Vec::new(),
            },
            Some(_) => sampled,
        };
        let total = rows.len();
        let rows: Vec<Map<String, Value>> = rows
            .into_iter()
            .filter_map(|row| match row {
                Value::Object(map) => Some(map),
                Value::String(text) => match crate::pyjson::from_str::<Value>(&text) {
                    Ok(Value::Object(map)) => Some(map),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        if rows.len() < total {
            // One odd row should not cost the whole curve.
            tracing::debug!(
                run = run_id,
                skipped = total - rows.len(),
                "skipped W&B history rows that are not objects"
            );
        }
        Ok(rows)
    }

    /// The metric history of `run` (found with `find_run`) by name, up to `samples` sampled rows
    /// per key: the keys results and the report show (`HISTORY_KEYS`), the `named` ones (a
    /// sweep's metric, whatever its key; at most `MAX_NAMED_KEYS`), then up to `MAX_OTHER_KEYS`
    /// more of the keys W&B says the run logs (not its `_` keys), each reading under its W&B key. Keys are
    /// asked for one at a time: W&B samples only rows holding every key asked for, and eval
    /// metrics are logged at other steps than training ones. Only keys the run has history for
    /// are asked for, when W&B says which those are. NaN and infinities are dropped.
    pub async fn metric_readings(
        &self,
        project: &str,
        run: &RunRef,
        named: &[&str],
        samples: u32,
    ) -> Result<Vec<MetricReading>, WandbError> {
        let mut readings = Vec::new();
        for key in history_keys_of(run, named) {
            let rows = self.history(project, &run.id, &[key], samples).await?;
            readings.extend(history_readings(&rows, key));
        }
        Ok(readings)
    }

    /// The entity runs are looked up under: `WANDB_ENTITY`, else the key's default entity.
    async fn entity(&self) -> Result<String, WandbError> {
        if let Some(entity) = &self.entity {
            return Ok(entity.clone());
        }
        let entity = self
            .default_entity
            .get_or_try_init(|| async {
                let data = self.graphql.request("viewer", VIEWER, json!({})).await?;
                data.get("viewer")
                    .and_then(|v| v.get("entity"))
                    .and_then(Value::as_str)
                    .filter(|e| !e.is_empty())
                    .map(str::to_string)
                    .ok_or(WandbError::NoEntity)
            })
            .await?;
        Ok(entity.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{Value, json};

    use super::super::fake_server::{Fake, KEY, Reply, assert_no_key, node, ok, runs, within};
    use super::super::snapshot::HISTORY_KEYS;
    use super::*;

    #[tokio::test]
    async fn find_run_decodes_the_summary_from_a_json_string() {
        let summary = r#"{"_step": 120, "train/reward_mean": 0.42, "train/percent_correct": 0.61,
            "eval/percent_correct": 0.58, "train/loss": NaN, "_runtime": 301.5}"#;
        let fake = Fake::start(move |_| runs(vec![node("ab12cd34", "gsm8k-ab12cd34", summary)])).await;
        let client = fake.client(KEY, Some("team"));
        let run =
            within(client.find_run("atropos-tinker", "gsm8k-ab12cd34")).await.expect("find").expect("run");
        assert_eq!(run.id, "ab12cd34");
        assert_eq!(run.display_name, "gsm8k-ab12cd34");
        assert_eq!(run.state.as_deref(), Some("running"));
        assert_eq!(run.summary.get("_step"), Some(&json!(120)));
        assert_eq!(run.summary.get("train/reward_mean"), Some(&json!(0.42)));
        // NaN from Python's json.dumps is read as null, not a decode failure.
        assert_eq!(run.summary.get("train/loss"), Some(&Value::Null));
        assert_eq!(run.history_keys, vec!["_step".to_string(), "train/loss".to_string()]);
        assert_eq!(run.last_step, Some(120));
        assert_eq!(
            run.url.as_deref(),
            Some(format!("{}/team/atropos-tinker/runs/ab12cd34", fake.base).as_str())
        );

        let bodies = fake.bodies();
        assert_eq!(bodies.len(), 1);
        let vars = &bodies[0]["variables"];
        assert_eq!(vars["project"], "atropos-tinker");
        assert_eq!(vars["entity"], "team");
        let filters = vars["filters"].as_str().expect("filters is a JSON string");
        assert_eq!(
            serde_json::from_str::<Value>(filters).expect("filters JSON"),
            json!({"display_name": "gsm8k-ab12cd34"})
        );
        let query = bodies[0]["query"].as_str().expect("query");
        assert!(query.contains("summaryMetrics") && query.contains("entityName: $entity"), "{query}");
    }

    #[tokio::test]
    async fn find_run_takes_an_exact_display_name_and_the_first_of_several() {
        let fake = Fake::start(|_| {
            runs(vec![
                node("other", "gsm8k-ab12cd34-old", "{}"),
                node("newest", "gsm8k-ab12cd34", r#"{"_step": 3}"#),
                node("older", "gsm8k-ab12cd34", r#"{"_step": 1}"#),
            ])
        })
        .await;
        let run = within(fake.client(KEY, Some("team")).find_run("p", "gsm8k-ab12cd34")).await.expect("find");
        assert_eq!(run.map(|r| r.id).as_deref(), Some("newest"));
    }

    #[tokio::test]
    async fn find_run_is_none_without_edges_or_project() {
        let fake = Fake::start(|body| {
            if body["variables"]["project"] == "missing" {
                ok(json!({ "project": null }))
            } else {
                runs(vec![])
            }
        })
        .await;
        let client = fake.client(KEY, Some("team"));
        assert_eq!(within(client.find_run("p", "nope")).await.expect("find"), None);
        assert_eq!(within(client.find_run("missing", "nope")).await.expect("find"), None);
    }

    #[tokio::test]
    async fn summary_given_as_an_object_or_null_is_accepted() {
        let fake = Fake::start(|body| {
            let mut n = node("r1", "x", "");
            n["summaryMetrics"] =
                if body["variables"]["project"] == "obj" { json!({"_step": 7}) } else { Value::Null };
            runs(vec![n])
        })
        .await;
        let client = fake.client(KEY, Some("team"));
        let run = within(client.find_run("obj", "x")).await.expect("find").expect("run");
        assert_eq!(run.summary.get("_step"), Some(&json!(7)));
        let run = within(client.find_run("null", "x")).await.expect("find").expect("run");
        assert!(run.summary.is_empty());
    }

    #[tokio::test]
    async fn malformed_json_is_a_decode_error() {
        let fake = Fake::start(|body| match body["variables"]["project"].as_str() {
            Some("body") => Reply::Json(200, r#"{"data": {"project": "#.into()),
            Some("summary") => runs(vec![node("r1", "x", r#"{"_step": 1,"#)]),
            Some("nodata") => Reply::Json(200, "{}".into()),
            _ => ok(json!({ "project": { "runs": {} } })),
        })
        .await;
        let client = fake.client(KEY, Some("team"));
        for project in ["body", "summary", "nodata", "shape"] {
            let error = within(client.find_run(project, "x")).await.expect_err(project);
            assert!(matches!(error, WandbError::Decode { .. }), "{project}: {error:?}");
            assert!(error.to_string().starts_with("cannot decode W&B's answer: "), "{error}");
            assert_no_key(&error);
        }
    }

    #[tokio::test]
    async fn history_reads_the_sampled_rows() {
        let fake = Fake::start(|body| {
            let rows = match body["variables"]["name"].as_str() {
                // The shape W&B gives: one list of row objects per spec.
                Some("objects") => {
                    json!([[{"_step": 0, "train/loss": 1.5}, {"_step": 10, "train/loss": 1.25}]])
                }
                // Rows as JSON text, as some servers send them; junk rows are skipped.
                Some("strings") => {
                    json!([[r#"{"_step": 0, "train/loss": 1.5}"#, 7, r#"{"_step": 10, "train/loss": NaN}"#]])
                }
                Some("empty") => json!([[]]),
                _ => return ok(json!({ "project": { "run": null } })),
            };
            ok(json!({ "project": { "run": { "sampledHistory": rows } } }))
        })
        .await;
        let client = fake.client(KEY, Some("team"));
        let rows = within(client.history("p", "objects", &["train/loss"], 500)).await.expect("history");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].get("_step"), Some(&json!(10)));
        assert_eq!(rows[1].get("train/loss"), Some(&json!(1.25)));

        let rows =
            within(client.history("p", "strings", &["_step", "train/loss"], 500)).await.expect("history");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].get("train/loss"), Some(&json!(1.5)));
        assert_eq!(rows[1].get("train/loss"), Some(&Value::Null));

        assert!(within(client.history("p", "empty", &["train/loss"], 10)).await.expect("history").is_empty());
        let error = within(client.history("p", "gone", &["train/loss"], 10)).await.expect_err("no run");
        assert!(matches!(&error, WandbError::NoRun { run, .. } if run == "gone"), "{error:?}");

        // specs is a list of JSON strings, `_step` always asked for and never twice.
        let bodies = fake.bodies();
        for (body, keys) in
            bodies.iter().zip([json!(["_step", "train/loss"]), json!(["_step", "train/loss"])])
        {
            let specs = body["variables"]["specs"].as_array().expect("specs list");
            assert_eq!(specs.len(), 1);
            let spec: Value =
                serde_json::from_str(specs[0].as_str().expect("spec string")).expect("spec JSON");
            assert_eq!(spec, json!({ "keys": keys, "samples": 500 }));
        }
        assert!(bodies[0]["query"].as_str().is_some_and(|q| q.contains("sampledHistory(specs: $specs)")));
    }

    #[tokio::test]
    async fn metric_history_asks_key_by_key_for_the_keys_the_run_has() {
        let fake = Fake::start(|body| {
            let key = body["variables"]["specs"][0]
                .as_str()
                .and_then(|spec| serde_json::from_str::<Value>(spec).ok())
                .and_then(|spec| spec["keys"][1].as_str().map(str::to_string))
                .unwrap_or_default();
            let rows = json!([[{"_step": 1, key.clone(): 0.5}, {"_step": 3, key: 0.25}]]);
            ok(json!({ "project": { "run": { "sampledHistory": rows } } }))
        })
        .await;
        let client = fake.client(KEY, Some("team"));
        let mut run = RunRef::finished_with(json!({}));
        run.history_keys = vec!["_step".into(), "eval/percent_correct".into(), "train/loss".into()];
        let readings = within(client.metric_readings("p", &run, &[], 100)).await.expect("history");
        let got: Vec<(&str, i64, f64)> =
            readings.iter().map(|r| (r.name.as_str(), r.step, r.value)).collect();
        assert_eq!(
            got,
            vec![
                ("eval/percent_correct", 1, 0.5),
                ("eval/percent_correct", 3, 0.25),
                ("train/loss", 1, 0.5),
                ("train/loss", 3, 0.25)
            ]
        );
        assert_eq!(fake.bodies().len(), 2, "only the two keys the run logged");

        // W&B did not say which keys the run has: every metric key is asked for.
        run.history_keys.clear();
        within(client.metric_readings("p", &run, &[], 100)).await.expect("history");
        assert_eq!(fake.bodies().len(), 2 + HISTORY_KEYS.len());

        // Keys beyond the results' are read by name too, W&B's own left out.
        run.history_keys = vec!["_runtime".into(), "env/all/reward/total".into(), "train/loss".into()];
        let readings = within(client.metric_readings("p", &run, &[], 100)).await.expect("history");
        assert!(readings.iter().any(|r| r.name == "env/all/reward/total" && r.step == 3));
        assert_eq!(fake.bodies().len(), 2 + HISTORY_KEYS.len() + 2);

        // A named key (a sweep's metric) is asked for even when W&B does not say the run logs
        // keys at all.
        run.history_keys.clear();
        let readings = within(client.metric_readings("p", &run, &["my/score"], 100)).await.expect("history");
        assert!(readings.iter().any(|r| r.name == "my/score" && r.step == 1), "{readings:?}");
        assert_eq!(fake.bodies().len(), 2 + HISTORY_KEYS.len() + 2 + HISTORY_KEYS.len() + 1);
    }

    #[tokio::test]
    async fn without_an_entity_the_keys_default_entity_is_asked_once() {
        let fake = Fake::start(|body| {
            if body["query"].as_str().is_some_and(|q| q.contains("viewer")) {
                ok(json!({ "viewer": { "entity": "me" } }))
            } else {
                runs(vec![node("r1", "x", "{}")])
            }
        })
        .await;
        let client = fake.client(KEY, None);
        for _ in 0..2 {
            let run = within(client.find_run("p", "x")).await.expect("find").expect("run");
            assert!(run.url.is_some_and(|u| u.ends_with("/me/p/runs/r1")));
        }
        let bodies = fake.bodies();
        assert_eq!(bodies.len(), 3, "one viewer query, then two lookups");
        assert_eq!(bodies[2]["variables"]["entity"], "me");
    }

    #[tokio::test]
    async fn a_key_without_a_default_entity_says_so() {
        let fake = Fake::start(|_| ok(json!({ "viewer": null }))).await;
        let error = within(fake.client(KEY, None).find_run("p", "x")).await.expect_err("no entity");
        assert!(matches!(error, WandbError::NoEntity), "{error:?}");
    }

    #[test]
    fn from_env_needs_a_key_and_reads_base_and_entity() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
        };
        let timeout = Duration::from_secs(1);
        assert!(WandbClient::from_lookup(vars(&[]), timeout).expect("ok").is_none());
        assert!(WandbClient::from_lookup(vars(&[("WANDB_API_KEY", " ")]), timeout).expect("ok").is_none());

        let client =
            WandbClient::from_lookup(vars(&[("WANDB_API_KEY", "k1\n"), ("WANDB_ENTITY", "")]), timeout)
                .expect("ok")
                .expect("client");
        assert_eq!(
            (client.base(), client.entity.as_deref(), client.graphql.key()),
            (DEFAULT_BASE, None, "k1")
        );

        let client = WandbClient::from_lookup(
            vars(&[
                ("WANDB_API_KEY", "k1"),
                ("WANDB_BASE_URL", "http://wandb.local:8080/"),
                ("WANDB_ENTITY", "team"),
            ]),
            timeout,
        )
        .expect("ok")
        .expect("client");
        assert_eq!((client.base(), client.entity.as_deref()), ("http://wandb.local:8080", Some("team")));

        let error = WandbClient::from_lookup(
            vars(&[("WANDB_API_KEY", "k1"), ("WANDB_BASE_URL", "wandb.local")]),
            timeout,
        )
        .expect_err("bad base");
        assert!(matches!(error, WandbError::Config { .. }), "{error:?}");
    }

    #[test]
    fn the_key_never_shows_in_debug_output() {
        let client =
            WandbClient::new(DEFAULT_BASE, Some("team".into()), KEY, Duration::from_secs(1)).expect("client");
        let shown = format!("{client:?} {client:#?}");
        assert!(!shown.contains(KEY) && shown.contains("***"), "{shown}");
        let error =
            WandbClient::new(&format!("{KEY}://x"), None, KEY, Duration::from_secs(1)).expect_err("bad base");
        assert_no_key(&error);
        assert!(matches!(
            WandbClient::new(DEFAULT_BASE, None, " \n", Duration::from_secs(1)),
            Err(WandbError::Config { .. })
        ));
    }
}
