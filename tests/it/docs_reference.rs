//! The generated references under `docs/reference/` match the code: every command's
//! `--help` (`commands.md`), the HTTP routes of the OpenAPI document (`http-api.md`) and the MCP
//! tools `lachesis mcp` lists (`mcp-tools.md`). Each file's generated part lies between two
//! markers; `LACHESIS_BLESS=1 cargo test --test it docs_reference` writes it again.

use std::process::Command;

use serde_json::Value;

use crate::docs::repo;
use crate::support::BIN;

const BEGIN: &str = "<!-- generated: LACHESIS_BLESS=1 cargo test --test it docs_reference -->";
const END: &str = "<!-- end of the generated part -->";

/// Compares the generated part of `path` with `generated`, or writes it with LACHESIS_BLESS=1.
fn check_generated(path: &str, generated: &str) {
    let full = repo().join(path);
    let text = std::fs::read_to_string(&full).unwrap_or_else(|err| panic!("{path}: {err}"));
    let (Some(begin), Some(end)) = (text.find(BEGIN), text.find(END)) else {
        panic!("{path} lacks the generated part's markers ({BEGIN} … {END})");
    };
    let current = &text[begin + BEGIN.len()..end];
    let wanted = format!("\n\n{}\n", generated.trim_end());
    if current == wanted {
        return;
    }
    if std::env::var_os("LACHESIS_BLESS").is_some_and(|v| v == "1") {
        let updated = format!("{}{BEGIN}{wanted}{}", &text[..begin], &text[end..]);
        std::fs::write(&full, updated).unwrap();
        return;
    }
    let first_difference = current.lines().zip(wanted.lines()).find(|(a, b)| a != b);
    panic!(
        "{path} is out of date with the code (first difference: {first_difference:?}); \
         LACHESIS_BLESS=1 cargo test --test it docs_reference writes it again"
    );
}

/// `lachesis WORDS --help`, with no variable set that help would show the value of.
fn help(words: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(words)
        .arg("--help")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "lachesis {words:?} --help failed");
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommands a help text lists (`Commands:` section), without `help`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter(|line| !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next().map(str::to_string))
        .filter(|name| name != "help")
        .collect()
}

/// Each command, depth first: `## lachesis WORDS` and its help.
fn command_pages(words: &mut Vec<String>, out: &mut String) {
    let args: Vec<&str> = words.iter().map(String::as_str).collect();
    let text = help(&args);
    let title =
        if words.is_empty() { "lachesis".to_string() } else { format!("lachesis {}", words.join(" ")) };
    let lines: Vec<&str> = text.trim_end().lines().map(str::trim_end).collect();
    out.push_str(&format!("## {title}\n\n```text\n{}\n```\n\n", lines.join("\n")));
    for sub in subcommands(&text) {
        words.push(sub);
        command_pages(words, out);
        words.pop();
    }
}

#[test]
fn the_command_reference_is_every_commands_help() {
    let mut generated = String::new();
    command_pages(&mut Vec::new(), &mut generated);
    assert!(generated.matches("\n## lachesis ").count() > 40, "few commands found");
    check_generated("docs/reference/commands.md", &generated);
}

/// A Markdown table cell: one line, `|` escaped.
fn cell(text: &str) -> String {
    text.replace('\n', " ").replace('|', "\\|").replace('<', "&lt;").replace('>', "&gt;")
}

#[tokio::test]
async fn the_http_reference_is_the_openapi_documents_routes() {
    let mut home = crate::support::TestHome::new();
    let app = lachesis::api::app(home.service().await, Default::default(), None);
    let request = axum::http::Request::get("/openapi.json").body(axum::body::Body::empty()).unwrap();
    let response = tower::ServiceExt::oneshot(app, request).await.unwrap();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let document: Value = serde_json::from_slice(&body).unwrap();
    let mut generated =
        String::from("| method | path | what it does | example body |\n| --- | --- | --- | --- |\n");
    let paths = document["paths"].as_object().expect("paths");
    for (path, operations) in paths {
        for (method, operation) in operations.as_object().unwrap() {
            let example = operation["requestBody"]["content"]["application/json"]["example"].to_string();
            let example = if example == "null" { String::new() } else { format!("`{}`", cell(&example)) };
            generated.push_str(&format!(
                "| {} | `{}` | {} | {example} |\n",
                method.to_uppercase(),
                path,
                cell(operation["summary"].as_str().unwrap_or_default())
            ));
        }
    }
    assert!(generated.lines().count() > 30, "few routes: {generated}");
    check_generated("docs/reference/http-api.md", &generated);
}

/// One argument of a tool's input schema: name, type, required, description.
fn argument_row(name: &str, schema: &Value, required: bool) -> String {
    let kind = match (&schema["type"], schema["anyOf"].as_array()) {
        (Value::String(kind), _) => kind.clone(),
        (Value::Array(kinds), _) => kinds.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" or "),
        (_, Some(any)) => any.iter().filter_map(|s| s["type"].as_str()).collect::<Vec<_>>().join(" or "),
        _ => String::new(),
    };
    let description = schema["description"].as_str().unwrap_or_default();
    format!(
        "| `{name}` | {} | {} | {} |\n",
        cell(&kind),
        if required { "yes" } else { "" },
        cell(description)
    )
}

#[test]
fn the_mcp_reference_is_the_tools_lachesis_mcp_lists() {
    let home = crate::support::TestHome::new();
    let (tools, _) = crate::mcp::mcp_session(&home, &[]);
    let mut tools = tools.as_array().expect("tools").clone();
    tools.sort_by_key(|tool| tool["name"].as_str().unwrap_or_default().to_string());
    let mut generated = String::new();
    for tool in &tools {
        let name = tool["name"].as_str().unwrap_or_default();
        generated
            .push_str(&format!("### {name}\n\n{}\n\n", tool["description"].as_str().unwrap_or_default()));
        let schema = &tool["inputSchema"];
        let required: Vec<&str> =
            schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        match schema["properties"].as_object().filter(|p| !p.is_empty()) {
            None => generated.push_str("No arguments.\n\n"),
            Some(properties) => {
                generated.push_str("| argument | type | required | meaning |\n| --- | --- | --- | --- |\n");
                for (arg, property) in properties {
                    generated.push_str(&argument_row(arg, property, required.contains(&arg.as_str())));
                }
                generated.push('\n');
            }
        }
    }
    assert!(tools.len() >= 13, "{} tools", tools.len());
    check_generated("docs/reference/mcp-tools.md", &generated);
}
