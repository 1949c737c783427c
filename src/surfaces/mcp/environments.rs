//! Environment tools: list, select, read and edit the selected environment's configuration.

use serde_json::{Value, json};

use super::RlTools;
use super::answers::{self, answer};
use super::args::{EditArgs, NameArgs};
use crate::environments::EditError;
use crate::service::ServiceError;

impl RlTools {
    pub(super) async fn list_environments(&self) -> String {
        let discovery = self.service.environments().await;
        let environments: Vec<Value> = discovery
            .environments
            .iter()
            .map(|e| json!({ "name": e.name, "class_name": e.class_name, "file_path": e.file_path, "description": e.description, "kind": e.kind, "source": e.source.describe() }))
            .collect();
        answer(json!({
            "environments": environments,
            "count": environments.len(),
            "warnings": discovery.warnings.iter().map(|w| w.to_string()).collect::<Vec<_>>(),
            "tips": [
                "Use rl_select_environment(name) to pick one, then rl_get_current_config().",
                "Read the file_path with file tools to see how the environment loads data and scores answers.",
            ],
        }))
    }

    pub(super) async fn select_environment(&self, args: NameArgs) -> String {
        match self.service.select_environment(&args.name).await {
            Ok(selection) => answer(json!({
                "message": format!("Selected environment: {}", selection.env_name),
                "environment": selection.env_name,
                "kind": selection.kind,
                "file_path": selection.env_file,
                "configurable_fields": selection.config.len(),
                "fell_back": selection.fell_back,
            })),
            Err(err) => {
                let available = self.service.environments().await.names();
                answer(json!({ "error": answers::agent_error(&self.service, &err), "available": available }))
            }
        }
    }

    pub(super) async fn get_current_config(&self) -> String {
        match self.service.environment_config().await {
            Ok(view) => {
                let field = |f: &crate::service::FieldView| {
                    let mut item = json!({ "name": f.name, "type": f.type_name, "default": f.default, "description": f.description.clone().unwrap_or_default(), "current_value": f.value, "required": f.required });
                    if f.locked {
                        item["locked_value"] = f.value.clone();
                    }
                    item
                };
                answer(json!({
                    "environment": view.environment,
                    "kind": view.kind,
                    "configurable_fields": view.configurable_fields.iter().map(field).collect::<Vec<_>>(),
                    "locked_fields": view.locked_fields.iter().map(field).collect::<Vec<_>>(),
                    "workflow": view.workflow,
                    "workflow_vars": view.workflow_vars,
                    "tip": "Use rl_edit_config(field, value) to change any configurable field.",
                }))
            }
            Err(err) => answers::error(&self.service, &err),
        }
    }

    pub(super) async fn edit_config(&self, args: EditArgs) -> String {
        let raw = match &args.value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        match self.service.set_environment_config(&args.field, &raw).await {
            Ok(value) => {
                let config = self
                    .service
                    .environment_selection()
                    .await
                    .map(|s| json!(s.config))
                    .unwrap_or(Value::Null);
                answer(
                    json!({ "message": format!("Updated {} = {value}", args.field), "field": args.field, "value": value, "config": config }),
                )
            }
            Err(ServiceError::Edit(EditError::Locked { field, value })) => answer(json!({
                "error": format!("Field '{field}' is locked and cannot be changed"),
                "locked_value": value,
            })),
            Err(ServiceError::Edit(EditError::Unknown { field, .. })) => {
                let all = self.service.environment_config().await.map(|view| {
                    view.configurable_fields
                        .iter()
                        .chain(&view.locked_fields)
                        .map(|f| f.name.clone())
                        .collect()
                });
                answer(json!({
                    "error": format!("Unknown field '{field}'"),
                    "available_fields": all.unwrap_or_else(|_| Vec::<String>::new()),
                }))
            }
            Err(err) => answers::error(&self.service, &err),
        }
    }
}
