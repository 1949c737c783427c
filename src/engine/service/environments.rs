//! Environments: discover, select, show and edit the configuration of the next run.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::environments::{
    DiscoveredEnv, Discovery, EnvKind, LockedProfile, LookupError, Selection, check_name, check_value,
    discover_all, introspect, verifiers,
};
use crate::workflow::Workflow;

use super::runs::RunEnvironment;
use super::{Result, Service, ServiceError};

/// Introspection imports atroposlib (seconds) and the environment, which may do anything.
const INTROSPECT_TIMEOUT: Duration = Duration::from_secs(120);

/// The configuration as `config show` and `rl_get_current_config` present it.
#[derive(Debug, Serialize)]
pub struct ConfigView {
    pub environment: String,
    /// `atropos` or `verifiers`.
    pub kind: EnvKind,
    /// Where it came from: `package NAME VERSION` or `directory PATH`.
    pub source: Option<String>,
    pub env_file: String,
    pub config_class: String,
    pub fell_back: Option<String>,
    pub workflow: String,
    pub configurable_fields: Vec<FieldView>,
    /// The `env` fields the locked profile fixes, with their locked values.
    pub locked_fields: Vec<FieldView>,
    /// The whole locked profile (env, openai, tinker, …) of the workflow.
    pub locked_profile: Map<String, Value>,
    /// The workflow's own vars with their defaults (a verifiers environment's training keys:
    /// `model_name`, `lora_rank`, …), set per run with `--var NAME=VALUE`.
    pub workflow_vars: BTreeMap<String, String>,
}

#[derive(Debug, Serialize)]
pub struct FieldView {
    pub name: String,
    #[serde(rename = "type")]
    pub type_name: String,
    pub value: Value,
    pub default: Value,
    pub description: Option<String>,
    pub locked: bool,
    /// No default: a run needs a value for it.
    pub required: bool,
}

impl Service {
    /// Every environment of every kind: the Atropos classes and vf-init layouts under the
    /// environment directories, and the verifiers packages installed in `LACHESIS_PYTHON`
    /// (which is asked once where it imports from; no environment's code runs).
    pub async fn environments(&self) -> Discovery {
        let site = verifiers::python_site(&self.settings.python).await;
        let dirs = self.settings.environment_dirs.clone();
        // Reading files and parsing is blocking work: off the daemon's one thread.
        let scan =
            tokio::task::spawn_blocking(move || discover_all(&dirs, site.as_ref().map_err(Clone::clone)));
        scan.await.unwrap_or_else(|err| {
            let mut discovery = Discovery::default();
            discovery.warnings.push(crate::environments::DiscoveryWarning {
                path: std::path::PathBuf::new(),
                reason: format!("discovery failed: {err}"),
            });
            discovery
        })
    }

    /// Imports one environment's module in the Python, bounded by `timeout` (killed past it):
    /// what `env list --check` asks for, and listing never does. Only verifiers environments
    /// are imported (an Atropos one is introspected by `env select`); `None` for the others.
    pub async fn check_environment(
        &self,
        env: &DiscoveredEnv,
        timeout: Duration,
    ) -> Option<std::result::Result<(), String>> {
        match env.kind {
            EnvKind::Verifiers => Some(verifiers::import_check(&self.settings.python, env, timeout).await),
            EnvKind::Atropos => None,
        }
    }

    pub async fn environment(&self, name: &str) -> Result<DiscoveredEnv> {
        check_name(name)?;
        Ok(self.environments().await.find(name)?.clone())
    }

    /// The workflow whose locked profile governs an environment of `kind`'s configuration: the
    /// one that trains the kind (`tinker-verifiers`), else the catalog's default.
    fn profile_workflow(&self, kind: EnvKind) -> Result<Workflow> {
        let catalog = self.settings.catalog()?;
        let name = kind.training_workflow().map_or_else(|| catalog.default_name(), str::to_string);
        Ok(catalog.load(&name)?)
    }

    /// Selects an environment and loads its configurable fields with their defaults: an
    /// Atropos one's config class by introspection (Python), a verifiers one's
    /// `load_environment` parameters from its source. Persisted, so every surface sees it.
    pub async fn select_environment(&self, name: &str) -> Result<Selection> {
        let env = self.environment(name).await?;
        let workflow = self.profile_workflow(env.kind)?;
        let introspection = match env.kind {
            EnvKind::Atropos => {
                let python = std::path::Path::new(&self.settings.python);
                introspect(python, &env.file_path, &env.class_name, INTROSPECT_TIMEOUT).await?
            }
            EnvKind::Verifiers => verifiers::parameters(&env.file_path)
                .map_err(|reason| LookupError::Unreadable { name: env.name.clone(), reason })?,
        };
        let locked = LockedProfile { profile: &workflow.locked };
        let selection = Selection::new(&env, introspection, locked, chrono::Local::now());
        self.store.put_selection(&selection).await?;
        Ok(selection)
    }

    pub async fn environment_selection(&self) -> Result<Selection> {
        self.store.selection().await?.ok_or(ServiceError::NoSelection)
    }

    pub async fn environment_config(&self) -> Result<ConfigView> {
        let selection = self.environment_selection().await?;
        let workflow = self.profile_workflow(selection.kind)?;
        let locked = LockedProfile { profile: &workflow.locked };
        let view = |f: &crate::environments::FieldInfo, value: Value, is_locked: bool| FieldView {
            name: f.name.clone(),
            type_name: f.type_name.clone(),
            value,
            default: f.default.clone(),
            description: f.description.clone(),
            locked: is_locked,
            required: f.required && !is_locked,
        };
        let mut configurable = Vec::new();
        let mut locked_fields = Vec::new();
        for field in &selection.fields {
            match locked.env_field(&field.name) {
                Some(value) => locked_fields.push(view(field, value.clone(), true)),
                None => {
                    let value = selection.config.get(&field.name).cloned().unwrap_or(Value::Null);
                    configurable.push(view(field, value, false));
                }
            }
        }
        if selection.kind == EnvKind::Verifiers {
            // The recipe's infrastructure keys are the profile itself, not `env` fields.
            locked_fields.extend(workflow.locked.iter().map(|(name, value)| FieldView {
                name: name.clone(),
                type_name: json_type(value).to_string(),
                value: value.clone(),
                default: value.clone(),
                description: Some(format!("set by workflow '{}'", workflow.name)),
                locked: true,
                required: false,
            }));
        }
        Ok(ConfigView {
            environment: selection.env_name,
            kind: selection.kind,
            source: selection.source.as_ref().map(crate::environments::EnvSource::describe),
            env_file: selection.env_file.to_string_lossy().into_owned(),
            config_class: selection.config_class,
            fell_back: selection.fell_back,
            workflow: workflow.name,
            configurable_fields: configurable,
            locked_fields,
            locked_profile: workflow.locked,
            workflow_vars: workflow.vars,
        })
    }

    /// Sets one configurable field of the selection, checked against locks and its type.
    pub async fn set_environment_config(&self, field: &str, raw: &str) -> Result<Value> {
        let mut selection = self.environment_selection().await?;
        let workflow = self.profile_workflow(selection.kind)?;
        let value = selection.check_edit(LockedProfile { profile: &workflow.locked }, field, raw)?;
        selection.config.insert(field.to_string(), value.clone());
        selection.updated_at = crate::model::now_millis();
        self.store.put_selection(&selection).await?;
        Ok(value)
    }

    /// The environment a run of `env_name` trains and the config values it starts with: the
    /// selection's (when it is that environment, or none is named), with `overrides` checked
    /// and on top.
    pub(super) async fn run_environment(
        &self,
        env_name: Option<&str>,
        overrides: &BTreeMap<String, String>,
        workflow: &Workflow,
    ) -> Result<RunEnvironment> {
        let selection = self.store.selection().await?;
        let locked = LockedProfile { profile: &workflow.locked };
        let selected = |sel: &Selection| RunEnvironment {
            name: sel.env_name.clone(),
            file: sel.env_file.clone(),
            kind: sel.kind,
            source: sel.source.clone(),
            config: sel.config.clone(),
            fields: Some(sel.fields.clone()),
        };
        let (mut env, fields) = match (env_name, selection) {
            (None, Some(sel)) => (selected(&sel), Some(sel)),
            (Some(name), Some(sel)) if sel.env_name == name => (selected(&sel), Some(sel)),
            (Some(name), _) => {
                let found = self.environment(name).await?;
                // A verifiers environment's parameters are read from its source (no Python), so
                // a required one without a value is refused now, not when the run starts.
                let fields = match found.kind {
                    EnvKind::Verifiers => Some(
                        verifiers::parameters(&found.file_path)
                            .map_err(|reason| LookupError::Unreadable { name: found.name.clone(), reason })?
                            .fields,
                    ),
                    EnvKind::Atropos => None,
                };
                let env = RunEnvironment {
                    name: found.name,
                    file: found.file_path,
                    kind: found.kind,
                    source: Some(found.source),
                    config: BTreeMap::new(),
                    fields,
                };
                (env, None)
            }
            (None, None) => return Err(ServiceError::NoSelection),
        };
        let (name, file) = (&env.name, &env.file);
        if !file.is_file() {
            // Deleted or moved since it was selected: the run would only fail when its env stage starts.
            return Err(ServiceError::EnvironmentFileMissing { name: name.clone(), path: file.clone() });
        }
        for (field, raw) in overrides {
            let value = match &fields {
                Some(sel) => sel.check_edit(locked, field, raw)?,
                None => {
                    // No introspection for an unselected environment: lock checks still apply.
                    if let Some(value) = locked.env_field(field) {
                        return Err(crate::environments::EditError::Locked {
                            field: field.clone(),
                            value: value.clone(),
                        }
                        .into());
                    }
                    let untyped = crate::environments::FieldInfo {
                        name: field.clone(),
                        type_name: "any".into(),
                        kind: crate::environments::FieldKind::Other,
                        optional: true,
                        required: false,
                        default: Value::Null,
                        value: Value::Null,
                        description: None,
                    };
                    check_value(&untyped, raw)?
                }
            };
            env.config.insert(field.clone(), value);
        }
        Ok(env)
    }
}

/// A JSON value's type, as a field's type is shown.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "none",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}
