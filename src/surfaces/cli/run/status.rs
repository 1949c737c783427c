//! `lachesis run status`: one run and its stages, once or until it ends.

use std::process::ExitCode;

use lachesis::model::{now_millis, short_id};
use lachesis::service::{RunStatus, Service};

use crate::cli::CliResult;
use crate::cli::output::{duration, print_json, stage_state, table, time};

#[derive(clap::Args)]
pub struct StatusArgs {
    /// Run id or a unique prefix of it
    id: String,
    /// Keep showing progress until the run ends
    #[arg(long)]
    watch: bool,
    #[arg(long)]
    json: bool,
}

pub async fn run(service: &Service, StatusArgs { id, watch, json }: StatusArgs) -> CliResult {
    if watch {
        return super::watch::follow_progress(service, &id, json).await;
    }
    let status = service.run_status(&id).await?;
    if json {
        print_json(&status)?;
    } else {
        print_status(&status);
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn print_status(status: &RunStatus) {
    let r = &status.run;
    println!("run       {}", r.id);
    println!(
        "workflow  {}{}",
        r.workflow,
        r.env_name.as_ref().map(|e| format!(" (env {e})")).unwrap_or_default()
    );
    println!("state     {}{}", r.state, r.reason.as_ref().map(|e| format!(": {e}")).unwrap_or_default());
    if let Some(at) = r.held_at {
        println!("held      since {} (`lachesis run release {}` queues it)", time(Some(at)), short_id(&r.id));
    }
    match (&status.resumed_from, r.attempt) {
        (Some(from), attempt) => {
            println!("attempt   {attempt}, resumed from step {} ({})", from.step, from.path)
        }
        (None, attempt) if attempt > 1 => println!("attempt   {attempt}"),
        _ => {}
    }
    if r.preemptions > 0 {
        let redone = std::time::Duration::from_millis(r.preempted_work_ms.max(0) as u64);
        let times = if r.preemptions == 1 { "once".to_string() } else { format!("{} times", r.preemptions) };
        println!("preempted {times}; ≈ {} of work redone", lachesis::model::progress::span(redone));
    }
    if let Some(progress) = &r.progress {
        println!("progress  {}", progress.line());
    }
    if let Some(checkpoint) = &status.checkpoint {
        println!("checkpoint {}", crate::cli::checkpoints::line(checkpoint));
    }
    if let Some(line) = lachesis::model::headline_line(&status.metrics) {
        println!("metrics   {line}");
    }
    if let Some(member) = &r.sweep {
        println!("sweep     {}", member.describe());
    }
    if let Some(node) = &r.node {
        println!("node      {node}");
    }
    if !r.needs.is_empty() {
        println!("needs     {}", r.needs);
    }
    for (pool, units) in &r.units {
        println!("units     {pool} {}", if units.is_empty() { "none".into() } else { units.join(",") });
    }
    if let Some(at) = r.time_limit_at {
        let left = std::time::Duration::from_millis((at - now_millis()).max(0) as u64);
        println!("time left {} (time limit)", lachesis::model::progress::span(left));
    }
    if let Some(why) = &status.waiting_for {
        println!("waiting   for {why}");
    }
    for dep in &status.after {
        println!("after     {}: {}", dep.describe(), dep.settled.as_str());
    }
    if let (Some(at), lachesis::model::RunState::Pending) = (r.not_before, r.state) {
        println!("retry at  {}", time(Some(at)));
    }
    println!("created   {}", time(Some(r.created_at)));
    if r.started_at.is_some() {
        println!("started   {}", time(r.started_at));
    }
    if r.ended_at.is_some() {
        println!("ended     {} (after {})", time(r.ended_at), duration(r.started_at, r.ended_at));
    }
    if let (Some(first), Some(since)) = (status.first_started_at, status.since_first_start_ms)
        && r.attempt > 1
    {
        let end = r.ended_at.unwrap_or_else(now_millis);
        println!(
            "attempts  {} since the first started ({}); attempt {} took {}",
            duration(Some(0), Some(since)),
            time(Some(first)),
            r.attempt,
            duration(r.started_at, r.started_at.map(|_| end))
        );
    }
    println!("directory {}", r.run_dir.display());
    for w in &status.wandb_runs {
        let url = w.url.as_ref().map(|u| format!("  {u}")).unwrap_or_default();
        println!("wandb     {} {}{url}", w.stage, w.id);
    }
    let mut t = table(["STAGE", "STATE", "PID", "STARTED", "UP AFTER", "RAN FOR", "LOG"]);
    for s in &status.stages {
        let pid = match (&s.record.process, s.slurm_job) {
            (_, Some(job)) => format!("slurm {job}"),
            (Some(p), None) => p.pid.to_string(),
            (None, None) => "-".into(),
        };
        t.add_row([
            s.name.clone(),
            stage_state(s, r.state.is_terminal()),
            pid,
            time(s.record.started_at),
            duration(s.record.started_at, s.ready_at),
            duration(s.record.started_at, s.record.ended_at.or(s.record.started_at.map(|_| now_millis()))),
            s.log_path.display().to_string(),
        ]);
    }
    println!("{t}");
}
