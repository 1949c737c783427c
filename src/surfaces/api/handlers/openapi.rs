//! The OpenAPI 3.1 document, generated from the route table.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::api::ROUTES;

pub async fn openapi() -> axum::Json<Value> {
    axum::Json(openapi_document())
}

/// OpenAPI 3.1, generated from the route table.
pub fn openapi_document() -> Value {
    let mut paths: BTreeMap<String, serde_json::Map<String, Value>> = BTreeMap::new();
    for route in ROUTES {
        let params: Vec<Value> = route
            .path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
            .map(|name| json!({ "name": name, "in": "path", "required": true, "schema": { "type": "string" } }))
            .collect();
        let mut op = json!({
            "summary": route.summary,
            "operationId": format!("{}{}", route.method, route.path.replace(['/', '{', '}', '.'], "_")),
            "parameters": params,
            "responses": {
                "200": { "description": "OK (201 for creations)", "content": { "application/json": {} } },
                "default": { "description": "An error", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } },
            },
        });
        if let Some(example) = route.body {
            op["requestBody"] = json!({
                "required": true,
                "content": { "application/json": { "schema": { "type": "object" }, "example": serde_json::from_str::<Value>(example).unwrap_or_default() } },
            });
        }
        paths.entry(route.path.to_string()).or_default().insert(route.method.to_string(), op);
    }
    json!({
        "openapi": "3.1.0",
        "info": { "title": "lachesis", "version": env!("CARGO_PKG_VERSION"), "description": "Queue, start and supervise RL training runs and inference tests." },
        "paths": paths,
        "components": {
            "schemas": { "Error": { "type": "object", "required": ["error", "message"], "properties": { "error": { "type": "string" }, "message": { "type": "string" } } } },
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
        },
        "security": [{ "bearer": [] }],
    })
}
