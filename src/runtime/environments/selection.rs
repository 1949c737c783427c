//! The selected environment, its configurable values, the locked profile they sit beside, and
//! the config file a run is started with.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::fields::{FieldInfo, ValueError, check_value};
use crate::model::Millis;
use crate::workflow::template;

/// The environment chosen for the next run, shared by every surface through the store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    pub env_name: String,
    /// The file that defines it: the Atropos class's file, or the verifiers module.
    pub env_file: PathBuf,
    #[serde(default)]
    pub kind: super::EnvKind,
    /// Where it was found; `None` in a selection stored before environments had kinds.
    #[serde(default)]
    pub source: Option<super::EnvSource>,
    pub class_name: String,
    pub config_class: String,
    /// Set when introspection fell back to `BaseEnvConfig`, saying why.
    pub fell_back: Option<String>,
    /// Every field of the config class, locked or not, as introspection described them.
    pub fields: Vec<FieldInfo>,
    /// Current values of the configurable (non-locked) fields.
    pub config: BTreeMap<String, Value>,
    pub updated_at: Millis,
}

/// The infrastructure settings of a workflow that tools and agents may not change.
#[derive(Clone, Copy, Debug)]
pub struct LockedProfile<'a> {
    pub profile: &'a Map<String, Value>,
}

impl<'a> LockedProfile<'a> {
    /// The locked value of an `env` field, if it is locked.
    pub fn env_field(&self, name: &str) -> Option<&'a Value> {
        self.profile.get("env")?.as_object()?.get(name)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EditError {
    #[error("unknown field '{field}' for environment '{env}' (configurable fields: {})", available.join(", "))]
    Unknown { field: String, env: String, available: Vec<String> },
    #[error(
        "field '{field}' is locked to {value} by the workflow's locked profile (an operator can change it in the workflow file)"
    )]
    Locked { field: String, value: Value },
    #[error(transparent)]
    Invalid(#[from] ValueError),
}

impl Selection {
    /// A fresh selection: configurable fields take the environment's values, and an Atropos
    /// one's `wandb_name` becomes `{env}-{YYYYMMDD-HHMMSS}` so runs don't collide in W&B.
    pub fn new(
        env: &super::DiscoveredEnv,
        introspection: super::Introspection,
        locked: LockedProfile<'_>,
        now: chrono::DateTime<chrono::Local>,
    ) -> Selection {
        let config = introspection
            .fields
            .iter()
            .filter(|f| locked.env_field(&f.name).is_none())
            .map(|f| {
                let value = if f.value.is_null() { f.default.clone() } else { f.value.clone() };
                (f.name.clone(), value)
            })
            .collect::<BTreeMap<_, _>>();
        let mut config = config;
        if env.kind == super::EnvKind::Atropos {
            // A verifiers run's W&B name is the workflow's (locked), not the environment's.
            config.insert(
                "wandb_name".to_string(),
                Value::String(format!("{}-{}", env.name, now.format("%Y%m%d-%H%M%S"))),
            );
        }
        Selection {
            env_name: env.name.clone(),
            env_file: env.file_path.clone(),
            kind: env.kind,
            source: Some(env.source.clone()),
            class_name: env.class_name.clone(),
            config_class: introspection.config_class,
            fell_back: introspection.fell_back,
            fields: introspection.fields,
            config,
            updated_at: now.timestamp_millis(),
        }
    }

    pub fn configurable(&self, locked: LockedProfile<'_>) -> Vec<&FieldInfo> {
        self.fields.iter().filter(|f| locked.env_field(&f.name).is_none()).collect()
    }

    /// Checks `raw` against the field's type and the locked profile; returns the value to set.
    pub fn check_edit(&self, locked: LockedProfile<'_>, field: &str, raw: &str) -> Result<Value, EditError> {
        if let Some(value) = locked.env_field(field) {
            return Err(EditError::Locked { field: field.to_string(), value: value.clone() });
        }
        let Some(info) = self.fields.iter().find(|f| f.name == field) else {
            // A verifiers workflow locks the recipe's own keys, at the top of its profile.
            if self.kind == super::EnvKind::Verifiers
                && let Some(value) = locked.profile.get(field)
            {
                return Err(EditError::Locked { field: field.to_string(), value: value.clone() });
            }
            return Err(EditError::Unknown {
                field: field.to_string(),
                env: self.env_name.clone(),
                available: self.configurable(locked).iter().map(|f| f.name.clone()).collect(),
            });
        };
        Ok(check_value(info, raw)?)
    }
}

/// The config file of one run: the locked profile, with the configured `env` fields on top
/// (nulls and empty strings skipped), and the W&B names the trainer reports under. String
/// values may use the run's template variables (e.g. `{port.api}`).
pub fn run_config(
    locked: &Map<String, Value>,
    config: &BTreeMap<String, Value>,
    env_name: &str,
    run_short_id: &str,
    vars: &BTreeMap<String, String>,
) -> Value {
    let mut doc = Value::Object(locked.clone());
    let root = doc.as_object_mut().expect("an object");
    let env = root.entry("env").or_insert_with(|| Value::Object(Map::new()));
    if let Some(env) = env.as_object_mut() {
        for (name, value) in config {
            // Locked wins: a value configured under another workflow's profile can't override it.
            let empty = value.is_null() || value.as_str() == Some("");
            if !empty && !env.contains_key(name) {
                env.insert(name.clone(), value.clone());
            }
        }
    }
    let project = config.get("wandb_project").and_then(Value::as_str).unwrap_or("atropos-tinker").to_string();
    let tinker = root.entry("tinker").or_insert_with(|| Value::Object(Map::new()));
    if let Some(tinker) = tinker.as_object_mut() {
        tinker.insert("wandb_project".into(), Value::String(project));
        tinker.insert("wandb_run_name".into(), Value::String(format!("{env_name}-{run_short_id}")));
    }
    fill_templates(&mut doc, vars);
    doc
}

/// Expands `{var}` in strings whose placeholders are all known; other strings (a chat
/// template full of braces, say) are left exactly as written.
fn fill_templates(value: &mut Value, vars: &BTreeMap<String, String>) {
    match value {
        Value::String(text) if text.contains('{') => {
            if let Ok(expanded) = template::expand(text, vars) {
                *text = expanded;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| fill_templates(v, vars)),
        Value::Object(map) => map.values_mut().for_each(|v| fill_templates(v, vars)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environments::{DiscoveredEnv, FieldKind, Introspection};
    use serde_json::json;

    fn field(name: &str, kind: FieldKind, default: Value) -> FieldInfo {
        FieldInfo {
            name: name.into(),
            type_name: format!("{kind:?}").to_lowercase(),
            kind,
            optional: false,
            required: false,
            default: default.clone(),
            value: default,
            description: None,
        }
    }

    fn locked() -> Map<String, Value> {
        json!({"env": {"tokenizer_name": "Qwen/Qwen3-8B", "rollout_server_url": "http://127.0.0.1:{port.api}"},
               "openai": [{"base_url": "http://127.0.0.1:{port.trainer}/v1"}], "tinker": {"lora_rank": 32}, "slurm": false})
        .as_object()
        .unwrap()
        .clone()
    }

    fn selection() -> Selection {
        let env = DiscoveredEnv {
            name: "gsm8k".into(),
            class_name: "Gsm8kEnv".into(),
            file_path: "/envs/gsm8k.py".into(),
            description: String::new(),
            config_class: "BaseEnvConfig".into(),
            kind: crate::environments::EnvKind::Atropos,
            source: crate::environments::EnvSource::Directory { dir: "/envs".into() },
        };
        let introspection = Introspection {
            config_class: "BaseEnvConfig".into(),
            fell_back: None,
            fields: vec![
                field("group_size", FieldKind::Int, json!(4)),
                field("tokenizer_name", FieldKind::Str, json!("x")),
                field("wandb_name", FieldKind::Str, Value::Null),
                field("data_path", FieldKind::Str, json!("")),
            ],
        };
        let now = chrono::TimeZone::with_ymd_and_hms(&chrono::Local, 2026, 11, 22, 3, 4, 5).unwrap();
        Selection::new(&env, introspection, LockedProfile { profile: &locked() }, now)
    }

    #[test]
    fn selecting_loads_configurable_defaults_and_names_the_wandb_run() {
        let sel = selection();
        assert_eq!(sel.config["group_size"], json!(4));
        assert_eq!(sel.config["wandb_name"], json!("gsm8k-20261122-030405"));
        assert!(!sel.config.contains_key("tokenizer_name"), "locked fields are not configurable");
    }

    #[test]
    fn edits_are_checked_against_locks_names_and_types() {
        let sel = selection();
        let locked = locked();
        let profile = LockedProfile { profile: &locked };
        assert_eq!(sel.check_edit(profile, "group_size", "16").unwrap(), json!(16));
        let err = sel.check_edit(profile, "tokenizer_name", "gpt2").unwrap_err().to_string();
        assert!(err.starts_with("field 'tokenizer_name' is locked to \"Qwen/Qwen3-8B\""), "{err}");
        let err = sel.check_edit(profile, "group_sise", "16").unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown field 'group_sise' for environment 'gsm8k' (configurable fields: group_size, wandb_name, data_path)"
        );
        let err = sel.check_edit(profile, "group_size", "many").unwrap_err().to_string();
        assert_eq!(err, "field 'group_size' expects an integer, got 'many'");
    }

    #[test]
    fn the_run_config_layers_config_over_the_locked_profile() {
        let sel = selection();
        let vars = BTreeMap::from([
            ("port.api".to_string(), "8000".to_string()),
            ("port.trainer".to_string(), "8001".to_string()),
        ]);
        let doc = run_config(&locked(), &sel.config, "gsm8k", "ab12cd34", &vars);
        assert_eq!(doc["env"]["tokenizer_name"], "Qwen/Qwen3-8B");
        assert_eq!(doc["env"]["rollout_server_url"], "http://127.0.0.1:8000");
        assert_eq!(doc["openai"][0]["base_url"], "http://127.0.0.1:8001/v1");
        assert_eq!(doc["env"]["group_size"], 4);
        let mut sneaky = sel.config.clone();
        sneaky.insert("tokenizer_name".into(), json!("gpt2"));
        let doc = run_config(&locked(), &sneaky, "gsm8k", "ab12cd34", &vars);
        assert_eq!(doc["env"]["tokenizer_name"], "Qwen/Qwen3-8B", "locked values win");
        assert!(doc["env"].get("data_path").is_none(), "empty values are skipped");
        assert_eq!(doc["tinker"]["wandb_project"], "atropos-tinker");
        assert_eq!(doc["tinker"]["wandb_run_name"], "gsm8k-ab12cd34");
        assert_eq!(doc["tinker"]["lora_rank"], 32);
        assert_eq!(doc["slurm"], false);
    }
}
