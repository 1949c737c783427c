//! The environment a run trains, as submission resolves it: which workflow trains it when the
//! request names none, whether the named workflow trains its kind, and the values its stages
//! are handed (`{env_args}`, `{env_import_dir}`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use crate::engine::service::{Result, Service, ServiceError};
use crate::environments::{EnvKind, EnvSource, FieldInfo};
use crate::workflow::{Catalog, Workflow};

/// The selected (or named) environment of one run, with the values it starts with.
#[derive(Clone, Debug)]
pub(in crate::engine::service) struct RunEnvironment {
    pub name: String,
    /// The file that defines it: the Atropos class's file, or the verifiers module.
    pub file: PathBuf,
    pub kind: EnvKind,
    /// Where it was found; `None` for a selection stored before environments had kinds.
    pub source: Option<EnvSource>,
    /// The configured values, the request's `--set` on top.
    pub config: BTreeMap<String, Value>,
    /// Its parameters as introspection described them, when it is the selected environment.
    pub fields: Option<Vec<FieldInfo>>,
}

impl RunEnvironment {
    /// `{env_args}`: the configured values of the environment's own parameters as one JSON
    /// object (what `load_environment(**args)` is called with). Values the selection keeps
    /// beside its parameters (a W&B name) are left out, and so is a null that is the
    /// parameter's default anyway; a named environment that was never selected has only the
    /// request's `--set` values.
    pub fn args_json(&self) -> String {
        let args: BTreeMap<&String, &Value> = self
            .config
            .iter()
            .filter(|(name, value)| match &self.fields {
                None => true,
                Some(fields) => fields
                    .iter()
                    .find(|f| &f.name == *name)
                    .is_some_and(|f| !(value.is_null() && f.default.is_null())),
            })
            .collect();
        serde_json::to_string(&args).unwrap_or_else(|_| "{}".into())
    }

    /// `{env_import_dir}`: the directory a not-installed environment imports from, or empty.
    pub fn import_dir(&self) -> String {
        let dir = self.source.as_ref().and_then(EnvSource::import_dir);
        dir.map(|d| d.to_string_lossy().into_owned()).unwrap_or_default()
    }

    /// Refuses a verifiers environment with a required parameter that has no value: its
    /// `load_environment` would fail only once the run started.
    pub fn check_required(&self) -> Result<()> {
        if self.kind != EnvKind::Verifiers {
            return Ok(());
        }
        let missing = self
            .fields
            .iter()
            .flatten()
            .find(|f| f.required && self.config.get(&f.name).is_none_or(Value::is_null));
        match missing {
            Some(field) => Err(ServiceError::MissingEnvArgument {
                env: self.name.clone(),
                parameter: field.name.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Refuses an environment of a kind the workflow does not train.
    pub fn check_trained_by(&self, workflow: &Workflow) -> Result<()> {
        match workflow.trains() {
            Some(trains) if trains != self.kind => Err(ServiceError::WrongEnvironmentKind {
                workflow: workflow.name.clone(),
                trains,
                env: self.name.clone(),
                kind: self.kind,
                instead: self.kind.training_workflow(),
            }),
            _ => Ok(()),
        }
    }
}

impl Service {
    /// The workflow a request runs: the one it names; else the one that trains the kind of the
    /// environment it names or the selection holds (`tinker-verifiers` for a verifiers one);
    /// else the catalog's default.
    pub(in crate::engine::service) async fn workflow_for(
        &self,
        catalog: &Catalog,
        named: Option<&str>,
        env: Option<&str>,
    ) -> Result<String> {
        if let Some(name) = named {
            return Ok(name.to_string());
        }
        let selection = self.store.selection().await?;
        let kind = match (env, selection) {
            (None, Some(sel)) => Some(sel.kind),
            (Some(name), Some(sel)) if sel.env_name == name => Some(sel.kind),
            (Some(name), _) => Some(self.environment(name).await?.kind),
            (None, None) => None,
        };
        Ok(kind.and_then(EnvKind::training_workflow).map_or_else(|| catalog.default_name(), str::to_string))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environments::FieldKind;
    use serde_json::json;

    fn field(name: &str, required: bool, default: Value) -> FieldInfo {
        FieldInfo {
            name: name.into(),
            type_name: "int".into(),
            kind: FieldKind::Int,
            optional: default.is_null(),
            required,
            default: default.clone(),
            value: default,
            description: None,
        }
    }

    fn reverse(config: Value) -> RunEnvironment {
        RunEnvironment {
            name: "vf-reverse".into(),
            file: "/envs/vf_reverse/vf_reverse.py".into(),
            kind: EnvKind::Verifiers,
            source: Some(EnvSource::Directory { dir: "/envs/vf_reverse".into() }),
            config: serde_json::from_value(config).unwrap(),
            fields: Some(vec![
                field("num_examples", false, json!(8)),
                field("seed", false, Value::Null),
                field("split", true, Value::Null),
            ]),
        }
    }

    #[test]
    fn env_args_are_the_parameters_configured_values() {
        let env = reverse(json!({"num_examples": 4, "seed": null, "split": "test", "wandb_name": "x"}));
        assert_eq!(env.args_json(), r#"{"num_examples":4,"split":"test"}"#);
        assert_eq!(env.import_dir(), "/envs/vf_reverse");
        let installed = RunEnvironment {
            source: Some(EnvSource::Package { package: "vf-reverse".into(), version: "0.1.0".into() }),
            ..env.clone()
        };
        assert_eq!(installed.import_dir(), "", "an installed package imports from site-packages");
        let named = RunEnvironment { fields: None, ..env };
        assert_eq!(
            named.args_json(),
            r#"{"num_examples":4,"seed":null,"split":"test","wandb_name":"x"}"#,
            "without a selection's parameters, every value given is passed"
        );
    }

    #[test]
    fn a_required_parameter_without_a_value_is_named() {
        let err = reverse(json!({"num_examples": 4, "split": null})).check_required().unwrap_err();
        assert_eq!(
            err.to_string(),
            "environment 'vf-reverse' needs a value for 'split' (its load_environment has no default for it): \
             `lachesis config set split VALUE`, or --set split=VALUE for one run"
        );
        assert!(reverse(json!({"split": "train"})).check_required().is_ok());
    }

    #[test]
    fn a_workflow_refuses_another_kind_in_one_line() {
        let atropos = Workflow::parse(
            std::path::Path::new("a.yaml"),
            "name: tinker-atropos\nstages:\n  - {name: env, argv: [\"{python}\", \"{env_file}\", serve]}\n",
        )
        .unwrap();
        let err = reverse(json!({"split": "train"})).check_trained_by(&atropos).unwrap_err();
        assert_eq!(
            err.to_string(),
            "environment 'vf-reverse' is of kind verifiers, and workflow 'tinker-atropos' trains atropos \
             environments (tinker-verifiers trains it; a run that names no workflow gets it)"
        );
    }
}
