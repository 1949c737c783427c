//! `lachesis test …`: inference tests of an environment against hosted (or local) models.

use std::process::ExitCode;
use std::time::Duration;

use lachesis::model::short_id;
use lachesis::model::{InferenceTest, TestState, TestTask};
use lachesis::service::{Service, TestRequest, TestStatus};
use lachesis::settings::Settings;
use lachesis::workflow::Dur;

use super::CliResult;
use super::output::{duration, is_tty, print_json, table, time};

// What an inference test runs; shared by `test start` and `schedule add`. (A plain comment: a
// doc comment would be the about text of every command that flattens it.)
#[derive(clap::Args)]
pub struct TestOptions {
    /// Environment [default: the selected one]
    #[arg(long)]
    env: Option<String>,
    /// Models, comma-separated [default: qwen/qwen3-8b, z-ai/glm-4.7-flash, minimax/minimax-m2.7]
    #[arg(long, value_delimiter = ',')]
    models: Vec<String>,
    /// Steps (groups; a verifiers environment's examples) per model [default: 3]
    #[arg(long)]
    steps: Option<u32>,
    /// Completions per step (a verifiers environment's rollouts per example) [default: 16]
    #[arg(long)]
    group_size: Option<u32>,
    /// A verifiers environment's arguments for this test, a JSON object over its configured
    /// values (vf-eval's --env-args)
    #[arg(long)]
    env_args: Option<String>,
    /// OpenAI-compatible base URL [default: OpenRouter, key from OPENROUTER_API_KEY]
    #[arg(long)]
    provider: Option<String>,
    /// openai, vllm, sglang or trl (with --provider)
    #[arg(long)]
    server_type: Option<String>,
    /// Environment variable holding the provider's key (with --provider): OPENROUTER_API_KEY,
    /// a *_API_KEY credential of the workflow, or one listed in LACHESIS_PROVIDER_KEYS
    #[arg(long)]
    api_key_env: Option<String>,
    /// Per-model time limit; the process group is killed after it [default: 10m]
    #[arg(long)]
    timeout: Option<Dur>,
    /// Models tested at once [default: 2]
    #[arg(long)]
    concurrency: Option<usize>,
    /// Workflow whose locked profile gives tokenizer and limits [default: the default one]
    #[arg(long, short)]
    workflow: Option<String>,
}

impl TestOptions {
    pub fn request(self) -> TestRequest {
        TestRequest {
            env_name: self.env,
            models: self.models,
            steps: self.steps,
            group_size: self.group_size,
            provider: self.provider,
            server_type: self.server_type,
            api_key_env: self.api_key_env,
            timeout: self.timeout,
            concurrency: self.concurrency,
            workflow: self.workflow,
            env_args: self.env_args,
            schedule_id: None,
        }
    }
}

#[derive(clap::Subcommand)]
#[command(defer = true)]
pub enum TestCommand {
    /// Queue an inference test: the environment's `process` mode against each model
    Start {
        #[command(flatten)]
        options: Box<TestOptions>,
        /// Wait for the results, showing groups written per model
        #[arg(long)]
        wait: bool,
        #[arg(long)]
        json: bool,
    },
    /// List inference tests, newest first
    List {
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// Show one inference test with its per-model results
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Cancel a queued or running inference test
    Stop { id: String },
}

pub async fn run(settings: Settings, command: TestCommand) -> CliResult {
    let service = Service::open(settings).await?;
    match command {
        TestCommand::Start { options, wait, json } => {
            let request = options.request();
            let test = service.submit_test(request).await?;
            if !json {
                println!("{}", test.id);
            }
            if wait {
                return wait_for(&service, test, json).await;
            }
            if json {
                print_json(&test)?;
            }
        }
        TestCommand::List { limit, json } => {
            let tests = service.tests(limit).await?;
            if json {
                print_json(&tests)?;
            } else if tests.is_empty() {
                println!("no inference tests");
            } else {
                let mut t = table(["ID", "ENV", "STATE", "MODELS", "CREATED", "DURATION", "REASON"]);
                for j in &tests {
                    t.add_row([
                        short_id(&j.id),
                        j.env_name.clone(),
                        j.state.to_string(),
                        j.spec.models.len().to_string(),
                        time(Some(j.created_at)),
                        duration(j.started_at, j.ended_at),
                        j.reason.clone().unwrap_or_default(),
                    ]);
                }
                println!("{t}");
            }
        }
        TestCommand::Show { id, json } => {
            let TestStatus { test, tasks, events, .. } = service.test_status(&id).await?;
            if json {
                print_json(&serde_json::json!({ "test": test, "tasks": tasks, "events": events }))?;
            } else {
                print_test(&test, &tasks);
                println!();
                for event in &events {
                    let subject = event.stage.as_deref().map(|s| format!("{s}: ")).unwrap_or_default();
                    println!("{}  {subject}{}", time(Some(event.at)), event.message);
                }
            }
        }
        TestCommand::Stop { id } => {
            let test = service.stop_test(&id).await?;
            println!("{} {}", test.id, test.state);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_test(test: &InferenceTest, tasks: &[TestTask]) {
    println!("test      {}", test.id);
    println!("env       {} ({}, {})", test.env_name, test.spec.env_kind, test.spec.env_file.display());
    println!(
        "state     {}{}",
        test.state,
        test.reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default()
    );
    let (steps, completions) = match test.spec.env_kind {
        lachesis::model::EnvKind::Atropos => ("steps", "completions"),
        lachesis::model::EnvKind::Verifiers => ("examples", "rollouts"),
    };
    println!(
        "settings  {} {steps} x {} {completions} per model, provider {} ({})",
        test.spec.steps,
        test.spec.group_size,
        lachesis::secrets::redact_url(&test.spec.provider.base_url),
        test.spec.provider.server_type
    );
    println!("directory {}", test.test_dir.display());
    let results = test
        .results
        .as_ref()
        .and_then(|r| r.get("models"))
        .and_then(|m| m.as_array())
        .cloned()
        .unwrap_or_default();
    // A verifiers test is judged by its mean reward over vf-eval's rollouts, an Atropos one by
    // its accuracy.
    let verifiers = test.spec.env_kind == lachesis::model::EnvKind::Verifiers;
    let (figure, figure_key) = if verifiers { ("REWARD", "reward") } else { ("ACCURACY", "accuracy") };
    let mut t = table(["MODEL", "STATE", "STEPS", "CORRECT", figure, "STEP SUCCESS", "ERROR"]);
    for task in tasks {
        let r = results.iter().find(|r| r["model"] == task.model.as_str());
        let get = |key: &str| r.map(|r| r[key].to_string()).unwrap_or_else(|| "-".into());
        let correct = r.map_or_else(
            || "-".into(),
            |r| format!("{}/{}", r["correct_completions"], r["total_completions"]),
        );
        let error = r
            .and_then(|r| r["error"].as_str())
            .and_then(|e| e.lines().next())
            .unwrap_or_default()
            .to_string();
        let state = if task.timed_out { "timed out".to_string() } else { task.record.state.to_string() };
        t.add_row([
            task.model.clone(),
            state,
            get("steps_tested"),
            correct,
            get(figure_key),
            get("step_success_rate"),
            error,
        ]);
    }
    println!("{t}");
    // The table has room for an error's first line; its cause (e.g. the environment's exception,
    // in the lines after) is shown whole here.
    for r in &results {
        if let Some(error) = r["error"].as_str().filter(|e| e.lines().nth(1).is_some()) {
            println!("error of {}:", r["model"].as_str().unwrap_or("?"));
            for line in error.lines() {
                println!("  {line}");
            }
        }
    }
    if let Some(summary) = test.results.as_ref().and_then(|r| r.get("summary")) {
        let average = if verifiers {
            ("reward", &summary["avg_reward"])
        } else {
            ("accuracy", &summary["avg_accuracy"])
        };
        println!(
            "summary   {}/{} models succeeded, best {}, average {} {}, environment working: {}",
            summary["models_succeeded"],
            summary["models_tested"],
            summary["best_model"].as_str().unwrap_or("-"),
            average.0,
            average.1,
            summary["environment_working"]
        );
    }
}

/// Follows a test to its end, showing each model's groups written so far against the expected
/// number (the environment prints little; its JSONL grows by one line per group).
async fn wait_for(service: &Service, test: InferenceTest, json: bool) -> CliResult {
    let bar = (is_tty() && !json).then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    });
    let mut last = String::new();
    loop {
        let TestStatus { test, tasks, groups_written, .. } =
            service.test_status(&test.id.to_string()).await?;
        let progress: Vec<String> = tasks
            .iter()
            .zip(&groups_written)
            .map(|(t, written)| {
                // vf-eval saves every example at its end; an Atropos environment a group at a time.
                let unit = match test.spec.env_kind {
                    lachesis::model::EnvKind::Atropos => "groups",
                    lachesis::model::EnvKind::Verifiers => "examples",
                };
                format!("{} {written}/{} {unit} ({})", t.model, test.spec.steps, t.record.state)
            })
            .collect();
        let line = format!("{}: {}", test.state, progress.join(" · "));
        match &bar {
            Some(bar) => bar.set_message(line.clone()),
            None if line != last && !json => println!("{line}"),
            None => {}
        }
        last = line;
        if test.state.is_terminal() && !tasks.iter().any(|t| t.record.state.is_live()) {
            if let Some(bar) = bar {
                bar.finish_and_clear();
            }
            if json {
                print_json(&serde_json::json!({ "test": test, "tasks": tasks }))?;
            } else {
                print_test(&test, &tasks);
            }
            let ok = matches!(test.state, TestState::Succeeded);
            return Ok(crate::cli::exit_code::ok_or_not(ok));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
