//! The figures: lachesis measured on this machine with real daemons in scratch homes (the
//! supervisor, the HTTP API, claims on PostgreSQL), driving the built `lachesis` binary as a
//! user would and the library only where a state takes too long to reach by hand (a long
//! history, a deep queue, claims one at a time). It prints figures; it passes or fails nothing.
//!
//! `cargo bench --bench figures -- [--http | --claims | --progress | --history | --logs | --queue |
//! --preemption | --sweeps | --sweep-pages | --inference | --environments]`

use std::path::Path;
use std::process::ExitCode;

use clap::Parser;

mod claims;
mod environments;
mod history;
mod inference;
mod logs;
pub mod preemption;
mod progress;
mod pueue;
pub mod queue;
mod supervisor;
mod sweep_pages;
mod sweeps;

use supervisor::BenchOptions;

type CliResult = Result<ExitCode, Box<dyn std::error::Error>>;

/// The `lachesis` binary Cargo built beside this bench (it starts the shim beside itself).
const LACHESIS: &str = env!("CARGO_BIN_EXE_lachesis");

fn main() -> ExitCode {
    match run(BenchArgs::parse()) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("figures: {err}");
            ExitCode::FAILURE
        }
    }
}

fn print_json(value: &impl serde::Serialize) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)
}

#[derive(clap::Parser)]
#[command(name = "figures", about = "Measure the supervisor: exit detection, recovery, throughput, memory")]
pub struct BenchArgs {
    /// (given by `cargo bench`; ignored)
    #[arg(long, hide = true)]
    bench: bool,
    /// Runs of `true` queued through the CLI for the throughput figure
    #[arg(long, default_value_t = 1000, value_parser = parse_runs)]
    runs: usize,
    /// Runs allowed at once during the throughput figure
    #[arg(long, default_value_t = 8, value_parser = parse_parallel)]
    parallel: usize,
    /// Live runs when the daemon is SIGKILLed, for the recovery figure
    #[arg(long, default_value_t = 100)]
    live: usize,
    /// Stage exits timed for the exit-detection figure
    #[arg(long, default_value_t = 200)]
    exits: usize,
    /// CLI processes submitting at once for the throughput figure
    #[arg(long, default_value_t = 4)]
    submitters: usize,
    /// Also measure the throughput figure through pueue, in the same run: the path of its
    /// `pueue` client, with `pueued` beside it (`cargo install pueue --locked --root DIR`)
    #[arg(long, value_name = "PATH")]
    pueue: Option<std::path::PathBuf>,
    /// Instead: load the HTTP API with status requests while runs start and stop
    #[arg(long)]
    http: bool,
    /// Requests per second (with --http)
    #[arg(long, default_value_t = 1000)]
    rate: u32,
    /// Seconds of load (with --http)
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Instead: progress figures (daemon CPU with runs polled over HTTP, stall-deadline delay,
    /// log follower throughput); --seconds is the CPU window
    #[arg(long)]
    progress: bool,
    /// Runs polled every 10 s (with --progress)
    #[arg(long, default_value_t = 50)]
    polled_runs: usize,
    /// Instead: claim throughput and latency with 1, 2 and 4 claiming nodes on PostgreSQL
    #[arg(long)]
    claims: bool,
    /// The PostgreSQL server for --claims (a scratch database is made and dropped per round)
    #[arg(long, default_value = "postgres://root@127.0.0.1:5432/postgres")]
    postgres: String,
    /// Pending runs per round (with --claims)
    #[arg(long, default_value_t = 2000)]
    claim_runs: usize,
    /// With --claims: half the pending runs wait for a dependency that is never met, the other
    /// half had theirs met (the claim must cost what it costs without them)
    #[arg(long)]
    with_deps: bool,
    /// With --claims: every pending run needs one unit of a 4-GPU pool, assigned at its claim
    /// as the daemon's picker does
    #[arg(long)]
    with_pools: bool,
    /// Instead: command, claim and idle-daemon costs with an empty store, then with a long
    /// history of finished runs
    #[arg(long)]
    history: bool,
    /// Finished runs inserted (with --history)
    #[arg(long, default_value_t = 100_000)]
    history_runs: usize,
    /// Also measure --history on a scratch database of the --postgres server
    #[arg(long)]
    history_postgres: bool,
    /// Instead: a live stage with a big (sparse) log read through results, HTTP logs, the
    /// dashboard and `run logs --tail` while runs of `true` start and end; the daemon's peak RSS
    #[arg(long)]
    logs: bool,
    /// The big log's size (with --logs)
    #[arg(long, default_value = "10GiB", value_name = "SIZE")]
    log_size: lachesis::logs::ByteSize,
    /// Instead: every dashboard page, `run status`, `run list` and `GET /runs` with a deep
    /// queue of pending runs behind a daemon's --max-parallel 2; the daemon's RSS
    #[arg(long)]
    queue: bool,
    /// Pending runs queued (with --queue)
    #[arg(long, default_value_t = 10_000, value_parser = parse_runs)]
    pending: usize,
    /// Instead: preemption figures (the urgent run's start against the victim's stop_grace,
    /// the work redone against the time since the checkpoint, a sampler of the units held, and
    /// the same workload without --preempt)
    #[arg(long)]
    preemption: bool,
    /// Preemptions measured (with --preemption)
    #[arg(long, default_value_t = 200, value_parser = parse_runs)]
    cycles: usize,
    /// Instead: a big sweep's pages (the leaderboard, every member's curve, its dashboard
    /// page, the report), in process and over HTTP
    #[arg(long)]
    sweep_pages: bool,
    /// Members of the sweep (with --sweep-pages)
    #[arg(long, default_value_t = 1000, value_parser = parse_runs)]
    page_members: usize,
    /// Readings of the metric per member that runs to its end (with --sweep-pages)
    #[arg(long, default_value_t = 200, value_parser = parse_runs)]
    page_readings: usize,
    /// Instead: sweep figures (a reading that condemns a member → the member stopped, with N
    /// members live; the daemon's peak RSS meanwhile; `sweep status` of a big sweep)
    #[arg(long)]
    sweeps: bool,
    /// Members of the live sweep, all live at once (with --sweeps)
    #[arg(long, default_value_t = 100, value_parser = parse_live_members)]
    sweep_members: usize,
    /// Live sweeps run one after the other, each stopping half its members (with --sweeps;
    /// 0: the status figure alone)
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=100))]
    sweep_rounds: u64,
    /// Members of the sweep whose `sweep status` is timed (with --sweeps)
    #[arg(long, default_value_t = 1000, value_parser = parse_status_members)]
    status_members: usize,
    /// Readings of the metric per member of that sweep (with --sweeps)
    #[arg(long, default_value_t = 100, value_parser = parse_runs)]
    status_readings: usize,
    /// Instead: an inference test's overhead over its evaluator's own run time, for a
    /// verifiers environment (vf-eval) and an Atropos one (`process`), side by side (needs
    /// LACHESIS_TEST_VERIFIERS_PYTHON and LACHESIS_TEST_PYTHON, as tests/run.sh sets them)
    #[arg(long)]
    inference: bool,
    /// Tests per kind (with --inference)
    #[arg(long, default_value_t = 5, value_parser = parse_runs)]
    inference_rounds: usize,
    /// Instead: `env list` with a Python holding many distributions (one in twenty a
    /// verifiers environment), as a process and in process
    #[arg(long)]
    environments: bool,
    /// Distributions installed (with --environments)
    #[arg(long, default_value_t = 200, value_parser = parse_runs)]
    distributions: usize,
    #[arg(long)]
    json: bool,
}

/// As the daemon's `--max-parallel` takes it.
fn parse_parallel(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=4096).contains(&n) => Ok(n),
        _ => Err(format!("'{text}' is not a number of runs from 1 to 4096")),
    }
}

/// A live sweep's members, each a process: at least 4 (two winners, two losers).
fn parse_live_members(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (4..=1000).contains(&n) => Ok(n),
        _ => Err(format!("'{text}' is not a number of members from 4 to 1000")),
    }
}

/// A sweep's members, as `run_cap` bounds them.
fn parse_status_members(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=10_000).contains(&n) => Ok(n),
        _ => Err(format!("'{text}' is not a number of members from 1 to 10000")),
    }
}

/// A throughput figure needs runs to time; a million is hours of this machine's work.
fn parse_runs(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=1_000_000).contains(&n) => Ok(n),
        _ => Err(format!("'{text}' is not a number of runs from 1 to 1000000")),
    }
}

pub fn run(args: BenchArgs) -> CliResult {
    if args.http {
        return http(args);
    }
    if args.claims {
        return claims(args);
    }
    if args.progress {
        return progress(args);
    }
    if args.history {
        return history(args);
    }
    if args.logs {
        return logs(args);
    }
    if args.queue {
        return queue(args);
    }
    if args.preemption {
        return preemption(args);
    }
    if args.sweeps {
        return sweeps(args);
    }
    if args.sweep_pages {
        return sweep_pages(args);
    }
    if args.inference {
        return inference(args);
    }
    if args.environments {
        return environments(args);
    }
    // Checked before the minute of lachesis figures, not after it.
    if let Some(client) = &args.pueue {
        pueue::daemon_beside(client)?;
    }
    let options = BenchOptions {
        runs: args.runs,
        parallel: args.parallel,
        live: args.live,
        exits: args.exits,
        submitters: args.submitters,
        pueue: args.pueue,
    };
    let exe = Path::new(LACHESIS);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let report = runtime.block_on(supervisor::run(exe, &options, &|line| eprintln!("bench: {line}")))?;
    if args.json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    let e = &report.exit_detection_ms;
    println!(
        "exit detection (stage exit -> state committed, {} exits): p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        e.samples, e.p50, e.p90, e.p99, e.max
    );
    println!(
        "recovery after SIGKILL ({} live runs): all re-attached {:.0} ms after the daemon started",
        report.recovered_runs, report.recovery_ms
    );
    println!(
        "throughput ({} runs of `true` via the CLI from {} submitting loop(s), {} at once): {:.1} runs/s first submit -> last completed; daemon alone {:.1} runs/s ({:.1} ms of submitting per run)",
        report.throughput_runs,
        report.submitters,
        args.parallel,
        report.throughput_runs_per_s,
        report.daemon_runs_per_s,
        report.submit_ms_per_run
    );
    if let Some(pueue) = &report.pueue {
        println!(
            "the same through {} ({} runs, {} adding loop(s), {} at once): {:.1} runs/s first add -> last ended ({:.1} ms of adding per run); lachesis {:.1}x pueue",
            pueue.version,
            pueue.runs,
            pueue.submitters,
            args.parallel,
            pueue.runs_per_s,
            pueue.add_ms_per_run,
            report.throughput_runs_per_s / pueue.runs_per_s.max(1e-9)
        );
    }
    println!(
        "daemon alone, draining {} runs queued before it started: {:.1} runs/s",
        report.throughput_runs, report.drain_runs_per_s
    );
    println!("idle daemon RSS: {:.1} MB", report.idle_rss_mb);
    Ok(ExitCode::SUCCESS)
}

fn progress(args: BenchArgs) -> CliResult {
    let exe = Path::new(LACHESIS);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let options = progress::ProgressOptions {
        polled_runs: args.polled_runs,
        window: std::time::Duration::from_secs(args.seconds),
        stalled_runs: 50,
        follower_lines: 2_000_000,
        exits: args.exits,
    };
    let report = runtime.block_on(progress::run(exe, &options, &|line| eprintln!("bench: {line}")))?;
    if args.json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "daemon CPU over {} s: idle {:.3}% of a core; {} runs polled every {} s ({} readings) {:.3}%",
        report.window_s,
        report.idle_cpu_pct,
        report.polled_runs,
        report.poll_every_s,
        report.readings,
        report.polled_cpu_pct
    );
    let s = &report.stall_delay_ms;
    println!(
        "stall deadline -> failed committed ({} runs at once): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        s.samples, s.p50, s.p99, s.max
    );
    println!(
        "log follower: {:.0} lines/s ({} lines read and matched)",
        report.follower_lines_per_s, report.follower_lines
    );
    let (a, b) = (&report.exit_detection_ms, &report.exit_detection_while_following_ms);
    println!(
        "exit detection: p50 {:.0} ms, p99 {:.0} ms alone; p50 {:.0} ms, p99 {:.0} ms while a followed log floods",
        a.p50, a.p99, b.p50, b.p99
    );
    Ok(ExitCode::SUCCESS)
}

fn queue(args: BenchArgs) -> CliResult {
    let exe = Path::new(LACHESIS);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let report = runtime.block_on(queue::run(exe, args.pending, &|line| eprintln!("bench: {line}")))?;
    if args.json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    for figure in &report.figures {
        println!(
            "{} with {} pending, {} reads: p50 {:.1} ms, max {:.1} ms",
            figure.what, report.pending, figure.ms.samples, figure.ms.p50, figure.ms.max
        );
    }
    println!(
        "daemon RSS with {} pending: {:.1} MB (peak {:.1} MB)",
        report.pending, report.daemon_rss_mb, report.daemon_peak_rss_mb
    );
    Ok(ExitCode::SUCCESS)
}

fn inference(args: BenchArgs) -> CliResult {
    let exe = Path::new(LACHESIS);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let report =
        runtime.block_on(inference::run(exe, args.inference_rounds, &|line| eprintln!("bench: {line}")))?;
    if args.json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "inference test of one model, {} examples x {} rollouts (groups x completions), {} rounds per kind:",
        report.steps, report.group_size, report.rounds
    );
    for k in &report.kinds {
        println!(
            "  {:<9} test start --wait p50 {:.0} ms; its evaluator's process p50 {:.0} ms; overhead p50 {:.0} ms, p90 {:.0} ms, max {:.0} ms (the command alone p50 {:.0} ms)",
            k.kind,
            k.test_ms.p50,
            k.evaluator_ms.p50,
            k.overhead_ms.p50,
            k.overhead_ms.p90,
            k.overhead_ms.max,
            k.alone_ms.p50
        );
    }
    for skipped in &report.skipped {
        println!("  skipped {skipped}");
    }
    Ok(ExitCode::SUCCESS)
}

fn environments(args: BenchArgs) -> CliResult {
    let exe = Path::new(LACHESIS);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let report =
        runtime.block_on(environments::run(exe, args.distributions, &|line| eprintln!("bench: {line}")))?;
    if args.json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    let (list, found) = (&report.env_list_ms, &report.discovery_ms);
    println!(
        "env list --json, {} distributions ({} environments installed, {} listed): p50 {:.1} ms, max {:.1} ms ({} samples); discovery alone p50 {:.1} ms; asking the Python {:.1} ms",
        report.distributions,
        report.environments_installed,
        report.environments_listed,
        list.p50,
        list.max,
        list.samples,
        found.p50,
        report.python_ask_ms
    );
    Ok(ExitCode::SUCCESS)
}

fn sweep_pages(args: BenchArgs) -> CliResult {
    let exe = Path::new(LACHESIS);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let report = runtime.block_on(sweep_pages::run(exe, args.page_members, args.page_readings, &|line| {
        eprintln!("bench: {line}")
    }))?;
    if args.json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "a sweep of {} members, {} readings (up to {} a member), its chart {} points:",
        report.members, report.readings, report.readings_per_member, report.chart_points
    );
    for figure in &report.figures {
        let size = figure.bytes.map(|b| format!(", {:.0} KiB", b as f64 / 1024.0)).unwrap_or_default();
        println!(
            "  {}: p50 {:.1} ms, max {:.1} ms ({} samples){size}",
            figure.what, figure.ms.p50, figure.ms.max, figure.ms.samples
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn preemption(args: BenchArgs) -> CliResult {
    let exe = Path::new(LACHESIS);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let report = runtime.block_on(preemption::run(exe, args.cycles, &|line| eprintln!("bench: {line}")))?;
    if args.json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    let (l, w) = (&report.latency_over_grace_ms, &report.work_redone_minus_since_checkpoint_ms);
    println!(
        "urgent run pending -> starting, minus the victim's stop_grace ({} ms), {} preemptions: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms (goal: <= 1000 ms)",
        report.stop_grace_ms, report.preemptions, l.p50, l.p99, l.max
    );
    println!(
        "work redone minus the time from the last checkpoint to the decision: p50 {:.0} ms, max {:.0} ms, min {:.0} ms (the victim's stop); to the victim's requeue: max |difference| {:.0} ms",
        w.p50, w.max, report.work_redone_difference_min_ms, report.work_redone_vs_requeue_max_ms
    );
    println!(
        "sampler (every 20 ms): {} samples ({} while the victim stopped), {} with a unit held by two live runs",
        report.samples, report.samples_during_stop, report.violations
    );
    println!(
        "without --preempt: {} urgent runs queued behind the victim, {} preemptions",
        report.off_urgent_runs, report.off_preemptions
    );
    Ok(ExitCode::SUCCESS)
}

fn sweeps(args: BenchArgs) -> CliResult {
    let exe = Path::new(LACHESIS);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let options = sweeps::SweepsOptions {
        live_members: args.sweep_members,
        rounds: args.sweep_rounds as usize,
        status_members: args.status_members,
        readings_per_member: args.status_readings,
    };
    let report = runtime.block_on(sweeps::run(exe, &options, &|line| eprintln!("bench: {line}")))?;
    if args.json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    let (d, s) = (&report.reading_to_decision_ms, &report.reading_to_stopped_ms);
    println!(
        "the reading that condemns a member -> the member stopped, {} members live, {} stops: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms (goal: p99 < 1000 ms); -> the stop decided: p50 {:.0} ms, p99 {:.0} ms",
        report.live_members, report.stops, s.p50, s.p99, s.max, d.p50, d.p99
    );
    println!(
        "daemon peak RSS (VmHWM) over {} rounds of {} live members: {:.1} MB (goal: < 64 MB)",
        report.rounds, report.live_members, report.daemon_peak_rss_mb
    );
    for (what, p) in [("--json", &report.status_json_ms), ("(table)", &report.status_table_ms)] {
        println!(
            "`sweep status ID {what}` of a {}-member sweep, {} readings each, whole process, {} calls: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (goal: < 100 ms)",
            report.status_members, report.readings_per_member, p.samples, p.p50, p.p99, p.max
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn logs(args: BenchArgs) -> CliResult {
    let exe = Path::new(LACHESIS);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let report =
        runtime.block_on(logs::run(exe, args.log_size.0, args.exits, &|line| eprintln!("bench: {line}")))?;
    if args.json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    let size = lachesis::launch::space::human_bytes(report.log_bytes);
    for (what, p) in [
        ("results (GET /runs/ID/results)", &report.results_ms),
        ("HTTP logs (GET /runs/ID/logs)", &report.http_logs_ms),
        ("dashboard run page (GET /ui/runs/ID)", &report.dashboard_run_ms),
        ("`run logs ID --tail 200` (whole process)", &report.cli_tail_ms),
    ] {
        println!(
            "{what} on a {size} log, {} reads: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            p.samples, p.p50, p.p99, p.max
        );
    }
    println!("daemon peak RSS (VmHWM): {:.1} MB", report.daemon_peak_rss_mb);
    let (a, b) = (&report.exit_detection_ms, &report.exit_detection_while_reading_ms);
    println!(
        "exit detection: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms alone; p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms during the reads",
        a.p50, a.p99, a.max, b.p50, b.p99, b.max
    );
    Ok(ExitCode::SUCCESS)
}

fn http(args: BenchArgs) -> CliResult {
    let exe = Path::new(LACHESIS);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let report = runtime
        .block_on(supervisor::http_load(exe, args.rate, args.seconds, &|line| eprintln!("bench: {line}")))?;
    if args.json {
        print_json(&report)?;
    } else {
        let l = &report.latency_ms;
        println!(
            "HTTP status requests: {} at {}/s for {} s while {} runs started and stopped: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, {} errors",
            report.requests,
            report.rate,
            report.seconds,
            report.runs_churned,
            l.p50,
            l.p99,
            l.max,
            report.errors
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn history(args: BenchArgs) -> CliResult {
    let exe = Path::new(LACHESIS);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let postgres = args.history_postgres.then_some(args.postgres.as_str());
    let report = runtime
        .block_on(history::history(exe, args.history_runs, postgres, &|line| eprintln!("bench: {line}")))?;
    if args.json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    for b in &report.backends {
        let (e, f) = (&b.empty, &b.full);
        println!("{} — empty store vs {} finished runs (ratio):", b.backend, f.finished_runs);
        let row = |what: &str, empty: f64, full: f64, unit: &str| {
            println!(
                "  {what:<34} {empty:>8.2} {unit:<5} {full:>8.2} {unit:<5} {:>5.2}x",
                full / empty.max(1e-9)
            );
        };
        row("run start p50", e.start_ms.p50, f.start_ms.p50, "ms");
        row("run start CPU p50", e.start_cpu_ms, f.start_cpu_ms, "ms");
        row("run status <8-char prefix> p50", e.status_prefix_ms.p50, f.status_prefix_ms.p50, "ms");
        row("run status CPU p50", e.status_cpu_ms, f.status_cpu_ms, "ms");
        row("run list (first page) p50", e.list_ms.p50, f.list_ms.p50, "ms");
        row("run list CPU p50", e.list_cpu_ms, f.list_cpu_ms, "ms");
        row("exit detection p50", e.exit_detection_ms.p50, f.exit_detection_ms.p50, "ms");
        row("exit detection p99", e.exit_detection_ms.p99, f.exit_detection_ms.p99, "ms");
        row("claim + run throughput", e.claim_runs_per_s, f.claim_runs_per_s, "run/s");
        row("idle daemon CPU", e.idle_cpu_percent, f.idle_cpu_percent, "%");
        row("idle daemon RSS", e.idle_rss_mb, f.idle_rss_mb, "MB");
    }
    Ok(ExitCode::SUCCESS)
}

fn claims(args: BenchArgs) -> CliResult {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let report = runtime.block_on(claims::claims(
        &args.postgres,
        args.claim_runs,
        &[1, 2, 4],
        args.with_deps,
        args.with_pools,
        &|line| eprintln!("bench: {line}"),
    ))?;
    if args.json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    let alone = report.rounds.first().map(|r| (r.claim_ms.p50, r.claim_ms.p99));
    for round in &report.rounds {
        let added = alone.map_or(String::new(), |(p50, p99)| {
            format!(
                "; added by contention: p50 {:+.2} ms, p99 {:+.2} ms",
                round.claim_ms.p50 - p50,
                round.claim_ms.p99 - p99
            )
        });
        println!(
            "claims, {} node(s) on one PostgreSQL: {} runs{}, {:.0} runs/s; one claim p50 {:.2} ms, p99 {:.2} ms{added}; claimed twice: {}",
            round.claimers,
            round.runs,
            if round.waiting > 0 {
                format!(" ({} more left waiting for a dependency)", round.waiting)
            } else {
                String::new()
            },
            round.runs_per_s,
            round.claim_ms.p50,
            round.claim_ms.p99,
            round.duplicates
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Milliseconds for one authenticated GET of `url` to answer in full; an error status is an error.
async fn timed_get(http: &reqwest::Client, token: &str, url: &str) -> supervisor::BenchResult<f64> {
    let start = std::time::Instant::now();
    let response = http.get(url).bearer_auth(token).send().await?;
    let status = response.status();
    let body = response.bytes().await?;
    if !status.is_success() {
        return Err(format!("GET {url}: {status}: {}", String::from_utf8_lossy(&body)).into());
    }
    Ok(start.elapsed().as_secs_f64() * 1000.0)
}
