//! The morning report (`/ui/report?since=12h`): what `Service::report` returns, on one page:
//! the runs of the window with their outcome, step, duration, what they saved and their final
//! metrics; a failed run's last log lines; the inference tests with accuracy and regressions;
//! the counts; the sweeps with their members by outcome, best member and what early
//! termination saved.

use std::fmt::Write;
use std::time::Duration;

use super::html::{badge, duration, esc, progress_cell, time};
use crate::service::{Report, ReportRun, Result, Service};

fn cell(text: Option<String>) -> String {
    match text.filter(|t| !t.is_empty()) {
        Some(text) => esc(&text),
        None => "<span class=\"muted\">-</span>".into(),
    }
}

/// Since its first attempt started and, for a retried run, its last attempt's own time.
fn run_duration(run: &ReportRun) -> String {
    let Some(total) = run.total_ms.or(run.duration_ms) else { return "-".into() };
    match run.duration_ms {
        Some(last) if run.attempt > 1 => format!("{} (last attempt {})", duration(total), duration(last)),
        _ => duration(total),
    }
}

pub async fn render(service: &Service, window: Duration) -> Result<String> {
    Ok(body(&service.report(window).await?))
}

fn body(report: &Report) -> String {
    let mut out = format!(
        "<h1>Report</h1><form method=\"get\" action=\"/ui/report\" class=\"inline\">\
         <label>over the last <input name=\"since\" value=\"{window}\" size=\"6\"></label> \
         <button type=\"submit\">Show</button></form>\
         <p class=\"meta\">{since} to {until} ({zone})</p>",
        window = esc(&report.window),
        since = time(Some(report.since)),
        until = time(Some(report.until)),
        zone = crate::text::zone(),
    );
    let _ = write!(
        out,
        "<p class=\"tally\" id=\"report-tally\">runs: {} · tests: {} · waiting: {} pending, {} held, {} tests queued</p>",
        esc(&report.run_tally()),
        esc(&report.test_tally()),
        report.waiting.pending,
        report.waiting.held,
        report.waiting.queued_tests,
    );
    out.push_str("<h2>Runs</h2>");
    if report.runs.is_empty() {
        out.push_str("<p class=\"muted\">No run ended in the window, and none is running.</p>");
    } else {
        out.push_str(
            "<table id=\"report-runs\"><thead><tr><th>run</th><th>workflow</th><th>environment</th><th>outcome</th>\
             <th>attempt</th><th>step</th><th>duration</th><th>saved</th><th>metrics</th><th>reason</th></tr></thead><tbody>",
        );
        for run in &report.runs {
            let progress = run.progress.as_ref().and_then(|p| serde_json::to_value(p).ok());
            let _ = write!(
                out,
                "<tr data-run=\"{id}\"><td><a href=\"/ui/runs/{id}\">{short}</a></td><td>{}</td><td>{}</td><td>{}</td>\
                 <td class=\"attempt\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&run.workflow),
                cell(run.env_name.clone()),
                badge(run.state.as_str()),
                cell(run.attempt_line()),
                progress_cell(progress.as_ref()),
                run_duration(run),
                cell(run.saved_line()),
                cell(run.metrics_line()),
                cell(run.reason.clone()),
                id = run.id,
                short = crate::model::short_id(&run.id),
            );
        }
        out.push_str("</tbody></table>");
    }
    if report.more_runs > 0 {
        let _ = write!(
            out,
            "<p class=\"muted\">… and {} more runs (see <a href=\"/ui/runs\">Runs</a>)</p>",
            report.more_runs
        );
    }
    for run in report.runs.iter().filter(|r| !r.log_tail.is_empty()) {
        let _ = write!(
            out,
            "<h3 class=\"failed\"><a href=\"/ui/runs/{id}\">{short}</a> failed: last lines of {stage}</h3>\
             <pre class=\"log\" data-run=\"{id}\">{lines}</pre>",
            id = run.id,
            short = crate::model::short_id(&run.id),
            stage = esc(run.failed_stage.as_deref().unwrap_or("its log")),
            lines = esc(&run.log_tail.join("\n")),
        );
    }
    out.push_str("<h2>Inference tests</h2>");
    if report.tests.is_empty() {
        out.push_str("<p class=\"muted\">No inference test ended in the window, and none is running.</p>");
    } else {
        out.push_str(
            "<table id=\"report-tests\"><thead><tr><th>test</th><th>environment</th><th>schedule</th><th>outcome</th>\
             <th>duration</th><th>accuracy</th><th>regressions</th></tr></thead><tbody>",
        );
        for test in &report.tests {
            let _ = write!(
                out,
                "<tr data-test=\"{id}\"><td><a href=\"/ui/tests?id={id}\">{short}</a></td><td>{}</td><td>{}</td>\
                 <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&test.env_name),
                cell(test.schedule.clone()),
                badge(test.state.as_str()),
                test.duration_ms.map(duration).unwrap_or_else(|| "-".into()),
                cell(Some(test.accuracy_line())),
                cell(Some(test.regressions_line())),
                id = test.id,
                short = crate::model::short_id(&test.id),
            );
        }
        out.push_str("</tbody></table>");
    }
    if report.more_tests > 0 {
        let _ = write!(
            out,
            "<p class=\"muted\">… and {} more tests (see <a href=\"/ui/tests\">Inference tests</a>)</p>",
            report.more_tests
        );
    }
    if !report.sweeps.is_empty() {
        out.push_str(
            "<h2>Sweeps</h2><table id=\"report-sweeps\"><thead><tr><th>sweep</th><th>workflow</th><th>state</th>\
             <th>members</th><th>best</th><th>early termination</th></tr></thead><tbody>",
        );
        for sweep in &report.sweeps {
            let _ = write!(
                out,
                "<tr data-sweep=\"{id}\"><td><a href=\"/ui/sweeps/{id}\">{short}</a></td><td>{}</td><td>{}</td>\
                 <td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&sweep.workflow),
                badge(sweep.state.as_str()),
                esc(&sweep.members_line()),
                cell(sweep.best_line()),
                cell(sweep.early_termination_line()),
                id = sweep.id,
                short = crate::model::short_id(&sweep.id),
            );
        }
        out.push_str("</tbody></table>");
    }
    if report.more_sweeps > 0 {
        let _ = write!(
            out,
            "<p class=\"muted\">… and {} more sweeps (see <a href=\"/ui/sweeps\">Sweeps</a>)</p>",
            report.more_sweeps
        );
    }
    out
}
