//! `lachesis test …`: inference tests of an environment against hosted (or local) models.

use std::process::ExitCode;
use std::time::Duration;

use lachesis::jobs::inference::output_path;
use lachesis::jobs::{Job, JobState, JobTask};
use lachesis::model::short_id;
use lachesis::service::{Service, TestRequest};
use lachesis::settings::Settings;
use lachesis::workflow::Dur;

use super::CliResult;
use super::output::{duration, is_tty, print_json, table, time};

/// What an inference test runs; shared by `test start` and `schedule add`.
#[derive(clap::Args)]
pub struct TestOptions {
    /// Environment [default: the selected one]
    #[arg(long)]
    env: Option<String>,
    /// Models, comma-separated [default: qwen/qwen3-8b, z-ai/glm-4.7-flash, minimax/minimax-m2.5]
    #[arg(long, value_delimiter = ',')]
    models: Vec<String>,
    /// Steps (groups) per model [default: 3]
    #[arg(long)]
    steps: Option<u32>,
    /// Completions per step [default: 16]
    #[arg(long)]
    group_size: Option<u32>,
    /// OpenAI-compatible base URL [default: OpenRouter, key from OPENROUTER_API_KEY]
    #[arg(long)]
    provider: Option<String>,
    /// openai, vllm or sglang (with --provider)
    #[arg(long)]
    server_type: Option<String>,
    /// Environment variable holding the provider's key (with --provider)
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
            schedule_id: None,
        }
    }
}

#[derive(clap::Subcommand)]
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
            let job = service.submit_test(request).await?;
            if !json {
                println!("{}", job.id);
            }
            if wait {
                return wait_for(&service, job, json).await;
            }
            if json {
                print_json(&job)?;
            }
        }
        TestCommand::List { limit, json } => {
            let jobs = service.list_jobs(limit).await?;
            if json {
                print_json(&jobs)?;
            } else if jobs.is_empty() {
                println!("no inference tests");
            } else {
                let mut t = table(["ID", "ENV", "STATE", "MODELS", "CREATED", "DURATION", "REASON"]);
                for j in &jobs {
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
            let (job, tasks) = service.job_status(&id).await?;
            let events = service.store.events(job.id, 0).await?;
            if json {
                print_json(&serde_json::json!({ "job": job, "tasks": tasks, "events": events }))?;
            } else {
                print_job(&job, &tasks);
                println!();
                for event in &events {
                    let subject = event.stage.as_deref().map(|s| format!("{s}: ")).unwrap_or_default();
                    println!("{}  {subject}{}", time(Some(event.at)), event.message);
                }
            }
        }
        TestCommand::Stop { id } => {
            let job = service.cancel_job(&id).await?;
            println!("{} {}", job.id, job.state);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_job(job: &Job, tasks: &[JobTask]) {
    println!("test      {}", job.id);
    println!("env       {} ({})", job.env_name, job.spec.env_file.display());
    println!("state     {}{}", job.state, job.reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default());
    println!(
        "settings  {} steps x {} completions per model, provider {} ({})",
        job.spec.steps, job.spec.group_size, job.spec.provider.base_url, job.spec.provider.server_type
    );
    println!("directory {}", job.job_dir.display());
    let results = job
        .results
        .as_ref()
        .and_then(|r| r.get("models"))
        .and_then(|m| m.as_array())
        .cloned()
        .unwrap_or_default();
    let mut t = table(["MODEL", "STATE", "STEPS", "CORRECT", "ACCURACY", "STEP SUCCESS", "ERROR"]);
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
        let state = if task.timed_out { "timed out".to_string() } else { task.state.to_string() };
        t.add_row([
            task.model.clone(),
            state,
            get("steps_tested"),
            correct,
            get("accuracy"),
            get("step_success_rate"),
            error,
        ]);
    }
    println!("{t}");
    if let Some(summary) = job.results.as_ref().and_then(|r| r.get("summary")) {
        println!(
            "summary   {}/{} models succeeded, best {}, average accuracy {}, environment working: {}",
            summary["models_succeeded"],
            summary["models_tested"],
            summary["best_model"].as_str().unwrap_or("-"),
            summary["avg_accuracy"],
            summary["environment_working"]
        );
    }
}

/// Follows a job to its end, showing each model's groups written so far against the expected
/// number (the environment prints little; its JSONL grows by one line per group).
async fn wait_for(service: &Service, job: Job, json: bool) -> CliResult {
    let bar = (is_tty() && !json).then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    });
    let mut last = String::new();
    loop {
        let (job, tasks) = service.job_status(&job.id.to_string()).await?;
        let progress: Vec<String> = tasks
            .iter()
            .map(|t| {
                let written = std::fs::read(output_path(&job.job_dir, &t.model))
                    .map(|b| b.iter().filter(|c| **c == b'\n').count())
                    .unwrap_or(0);
                format!("{} {written}/{} groups ({})", t.model, job.spec.steps, t.state)
            })
            .collect();
        let line = format!("{}: {}", job.state, progress.join(" · "));
        match &bar {
            Some(bar) => bar.set_message(line.clone()),
            None if line != last && !json => println!("{line}"),
            None => {}
        }
        last = line;
        if job.state.is_terminal() && !tasks.iter().any(|t| t.state.is_live()) {
            if let Some(bar) = bar {
                bar.finish_and_clear();
            }
            if json {
                print_json(&serde_json::json!({ "job": job, "tasks": tasks }))?;
            } else {
                print_job(&job, &tasks);
            }
            let ok = matches!(job.state, JobState::Succeeded);
            return Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
