//! The workflow a member of a W&B `program:` sweep runs: one stage, in the sweep's directory,
//! running the command line W&B's agent would (`model::sweep::program`), with the environment
//! the agent gives it: `WANDB_SWEEP_ID`, `WANDB_RUN_ID` (the stage's, as every stage gets),
//! `WANDB_PROJECT` and `WANDB_ENTITY` from the file, and `WANDB_SWEEP_PARAM_PATH` naming the
//! member's config (which `wandb.init` reads into `wandb.config`). A small `sh` writes that file
//! (and `${args_json_file}`'s) in the run directory, then `exec`s the command, so the stage's
//! process is the program's.

use std::path::Path;

use serde_json::{Value, json};

use crate::model::sweep::program::{args_json, config_yaml};
use crate::model::sweep::{Expansion, PROGRAM_WORKFLOW, SweepSpec};

use super::{InvalidWorkflow, Workflow};

/// The stage's one name (its log is `program.log`, its W&B run id `{run}-program`).
pub const PROGRAM_STAGE: &str = "program";

/// Writes the member's config and JSON files, then becomes the command (`$@`).
const PRELUDE: &str = r#"printf '%s' "$LACHESIS_SWEEP_CONFIG" > "$WANDB_SWEEP_PARAM_PATH" && printf '%s' "$LACHESIS_SWEEP_ARGS_JSON" > "$LACHESIS_SWEEP_ARGS_JSON_FILE" && exec "$@""#;

/// `text` as a template's literal (`{` and `}` doubled): values are given, not filled in.
fn literal(text: &str) -> String {
    text.replace('{', "{{").replace('}', "}}")
}

/// Who a member is, to W&B and on disk.
pub struct MemberIdentity<'a> {
    /// The sweep's short id (`WANDB_SWEEP_ID`).
    pub sweep_id: &'a str,
    /// The display name the daemon finds the member's W&B run by (`WANDB_NAME`).
    pub display_name: &'a str,
    /// Where the program runs.
    pub directory: &'a Path,
    /// What `${interpreter}` is.
    pub python: &'a str,
}

/// The workflow the member with `values` runs.
pub fn member_workflow(
    spec: &SweepSpec,
    values: &[(String, Value)],
    who: &MemberIdentity<'_>,
) -> Result<Workflow, InvalidWorkflow> {
    let MemberIdentity { sweep_id, display_name, directory, python } = *who;
    let file = Path::new("(sweep program)");
    let Some(program) = &spec.program else {
        return Err(InvalidWorkflow {
            file: file.into(),
            field: "program".into(),
            problem: "the sweep runs a workflow, not a program".into(),
        });
    };
    let args_file = "{run_dir}/sweep-args.json";
    let command = program.argv(&Expansion {
        values,
        interpreter: "\u{0}python\u{0}",
        args_json_file: "\u{0}args\u{0}",
    });
    let mut argv: Vec<String> = vec!["/bin/sh".into(), "-c".into(), PRELUDE.into(), "wandb-agent".into()];
    // The placeholders are the two values that are templates themselves; the rest is literal.
    argv.extend(command.iter().map(|arg| {
        literal(arg).replace("\u{0}python\u{0}", &literal(python)).replace("\u{0}args\u{0}", args_file)
    }));
    let mut env = serde_json::Map::new();
    env.insert("WANDB_SWEEP_ID".into(), json!(sweep_id));
    env.insert("WANDB_NAME".into(), json!(literal(display_name)));
    env.insert("WANDB_SWEEP_PARAM_PATH".into(), json!("{run_dir}/sweep-config.yaml"));
    env.insert("LACHESIS_SWEEP_CONFIG".into(), json!(literal(&config_yaml(values))));
    env.insert("LACHESIS_SWEEP_ARGS_JSON".into(), json!(literal(&args_json(values))));
    env.insert("LACHESIS_SWEEP_ARGS_JSON_FILE".into(), json!(args_file));
    for (var, value) in [("WANDB_PROJECT", &spec.project), ("WANDB_ENTITY", &spec.entity)] {
        if let Some(value) = value {
            env.insert(var.into(), json!(literal(value)));
        }
    }
    let shown = program.program.as_deref().unwrap_or("its command");
    let mut workflow = json!({
        "name": PROGRAM_WORKFLOW,
        "description": format!("W&B sweep program {shown}, run as `wandb agent` runs it"),
        "stages": [{
            "name": PROGRAM_STAGE,
            "argv": argv,
            "cwd": literal(&directory.to_string_lossy()),
            "env": env,
        }],
    });
    match &spec.metrics {
        Some(metrics) => workflow["metrics"] = serde_json::to_value(metrics).unwrap_or(Value::Null),
        // Its metrics come from W&B, which the daemon reads only with a key.
        None => workflow["credentials"] = json!(["WANDB_API_KEY"]),
    }
    if let Some(metric) = &spec.metric {
        workflow["report"] = json!([metric.name]);
    }
    // JSON is YAML: the one parser checks it as it checks a workflow file.
    Workflow::parse(file, &workflow.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_runs_the_agent_s_command_with_its_files_and_identity() {
        let spec = SweepSpec::parse(
            "program: train.py\nmethod: grid\nproject: rl\ncommand: ['${env}', '${interpreter}', '${program}', '${args}', '${args_json_file}']\n\
             metrics: {log: {stage: program, pattern: 's=(?P<step>\\d+) r=(?P<reward>\\S+)'}}\n\
             metric: {name: reward}\nparameters: {lr: {values: [0.1]}, tag: {value: '{x}'}}\n",
        )
        .unwrap();
        let values = vec![("lr".to_string(), json!(1e-5)), ("tag".to_string(), json!("{x}"))];
        let who = MemberIdentity {
            sweep_id: "1a2b3c4d",
            display_name: "run-9f8e7d6c",
            directory: Path::new("/work/sweeps"),
            python: "/venv/bin/python",
        };
        let wf = member_workflow(&spec, &values, &who).unwrap();
        let stage = &wf.stages[0];
        assert_eq!(stage.name, "program");
        assert_eq!(
            &stage.argv[3..],
            [
                "wandb-agent",
                "/usr/bin/env",
                "/venv/bin/python",
                "train.py",
                "--lr=1e-05",
                "--tag={{x}}",
                "{run_dir}/sweep-args.json"
            ]
        );
        let vars = std::collections::BTreeMap::from([("run_dir".to_string(), "/runs/r".to_string())]);
        let plan = stage.plan(&vars, Path::new("/runs/r")).unwrap();
        assert_eq!(plan.argv[8], "--tag={x}", "a value's braces are its own");
        assert_eq!(plan.environ["WANDB_SWEEP_ID"], "1a2b3c4d");
        assert_eq!(plan.environ["WANDB_PROJECT"], "rl");
        assert_eq!(plan.environ["WANDB_NAME"], "run-9f8e7d6c");
        assert_eq!(plan.environ["WANDB_SWEEP_PARAM_PATH"], "/runs/r/sweep-config.yaml");
        assert_eq!(plan.environ["LACHESIS_SWEEP_ARGS_JSON"], r#"{"lr": 1e-05, "tag": "{x}"}"#);
        assert!(plan.environ["LACHESIS_SWEEP_CONFIG"].contains("\"lr\":\n  value: 1.0e-05"));
        assert_eq!(plan.cwd, Path::new("/work/sweeps"));
        assert!(wf.metrics.is_some() && wf.credentials.is_empty());
        assert_eq!(wf.report, ["reward"]);
    }
}
