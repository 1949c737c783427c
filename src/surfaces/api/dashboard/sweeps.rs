//! Sweeps: the list (`/ui/sweeps`: each sweep with its members by state) and one sweep
//! (`/ui/sweeps/{id}`): its leaderboard, as `lachesis sweep status` prints it, and one chart
//! of every member's curve of the metric by step, the winner highlighted and the
//! early-terminated members dashed with a cross where they were stopped. Both render what
//! `Service::sweeps_with_member_counts` and `Service::sweep_curves` return (one read of every member's
//! series, each curve thinned to a bounded number of points).

use std::fmt::Write;

use super::html::{badge, esc, time};
use super::svg::{MEMBER_COLOURS, MemberChart, MemberLine};
use crate::model::sweep::{SweepState, python_float, var_text};
use crate::model::{RunState, StateCounts};
use crate::service::{MemberStatus, Result, Service, SweepCurves, SweepStatus};

/// The members drawn in colour and named in the legend (the best ones); the others are drawn
/// grey and counted.
const KEYED: usize = MEMBER_COLOURS.len();

fn states_line(counts: &StateCounts<RunState>) -> String {
    let parts: Vec<String> = counts.iter().map(|(state, n)| format!("{n} {state}")).collect();
    if parts.is_empty() { "-".into() } else { parts.join(", ") }
}

pub async fn render_list(service: &Service) -> Result<String> {
    let sweeps = service.sweeps_with_member_counts().await?;
    let mut out = String::from("<h1>Sweeps</h1>");
    if sweeps.is_empty() {
        out.push_str(
            "<p class=\"muted\">No sweep (<code>lachesis sweep start FILE</code> starts one; \
             <code>lachesis sweep start demo-sweep</code> the bundled demo).</p>",
        );
        return Ok(out);
    }
    out.push_str(
        "<table id=\"sweeps\"><thead><tr><th>sweep</th><th>workflow</th><th>state</th><th>members</th>\
         <th>at most live</th><th>created</th><th>reason</th></tr></thead><tbody>",
    );
    for listed in &sweeps {
        let s = &listed.sweep;
        let _ = write!(
            out,
            "<tr data-sweep=\"{id}\"><td><a href=\"/ui/sweeps/{id}\">{short}</a></td><td>{}</td><td>{}</td>\
             <td>{} ({})</td><td>{}</td><td>{}</td><td class=\"reason\">{}</td></tr>",
            esc(&s.workflow),
            badge(s.state.as_str()),
            s.members,
            esc(&states_line(&listed.counts)),
            s.max_live.map_or_else(|| "-".into(), |n| n.to_string()),
            time(Some(s.created_at)),
            esc(&s.ended.as_ref().map(ToString::to_string).unwrap_or_default()),
            id = s.id,
            short = crate::model::short_id(&s.id),
        );
    }
    out.push_str("</tbody></table>");
    if sweeps.len() as i64 >= crate::service::SWEEP_LIST_LIMIT {
        let _ = write!(out, "<p class=\"muted\">The newest {} sweeps.</p>", crate::service::SWEEP_LIST_LIMIT);
    }
    Ok(out)
}

/// `2 · lr=0.001, steps=20`: how the chart names a member.
fn member_label(member: &MemberStatus) -> String {
    let parameters: Vec<String> =
        member.parameters.iter().map(|(name, value)| format!("{name}={}", var_text(value))).collect();
    match parameters.is_empty() {
        true => format!("member {}", member.k),
        false => format!("{} · {}", member.k, parameters.join(", ")),
    }
}

/// The chart of every member's curve: the leaderboard's best [`KEYED`] in colour.
pub fn member_chart(curves: &SweepCurves) -> Option<String> {
    let status = &curves.status;
    let lines = curves
        .curves()
        .enumerate()
        .map(|(rank, (member, curve))| {
            let winner = status.winner == Some(member.k);
            MemberLine {
                k: member.k,
                label: member_label(member),
                points: curve.points.iter().map(|p| (p.step as f64, p.value)).collect(),
                stopped: member.early_terminated.then(|| member.reason.clone().unwrap_or_default()),
                winner: match (winner, member.best, member.best_step) {
                    (true, Some(best), Some(step)) => Some((step as f64, best)),
                    _ => None,
                },
                keyed: rank < KEYED || winner,
                exploits: status
                    .exploits
                    .iter()
                    .filter(|e| e.k == member.k && e.applied_at.is_some())
                    .map(|e| (e.step as f64, format!("step {}: {}", e.boundary, e.describe())))
                    .collect(),
            }
        })
        .collect();
    let metric = status.metric.as_deref().unwrap_or("metric");
    MemberChart {
        title: format!("{metric} by step, every member"),
        y_label: match status.goal {
            Some(goal) => format!("{metric} ({goal})"),
            None => metric.to_string(),
        },
        lines,
    }
    .render()
}

/// A pbt sweep's lineage, its members in order of k; None without an exploit.
fn lineage(exploits: &[crate::model::sweep::pbt::ExploitRecord], status: &SweepStatus) -> Option<String> {
    let mut members: Vec<u64> = status.leaderboard.iter().map(|m| m.k).collect();
    members.sort_unstable();
    super::svg::lineage(&members, exploits)
}

fn number(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), python_float)
}

fn leaderboard(status: &SweepStatus) -> String {
    let parameters: Vec<String> =
        status.leaderboard.first().map(|m| m.parameters.keys().cloned().collect()).unwrap_or_default();
    let mut out = String::from(
        "<table id=\"leaderboard\" class=\"leaderboard\"><thead><tr><th>rank</th><th>member</th><th>run</th><th>state</th>",
    );
    for name in &parameters {
        let _ = write!(out, "<th class=\"parameter\">{}</th>", esc(name));
    }
    out.push_str(
        "<th>best</th><th>at step</th><th>last</th><th>readings</th><th>stopped at / why it ended</th></tr></thead><tbody>",
    );
    for (rank, m) in status.leaderboard.iter().enumerate() {
        let winner = status.winner == Some(m.k);
        let mut class = Vec::new();
        if winner {
            class.push("winner");
        }
        if m.early_terminated {
            class.push("early-terminated");
        }
        let _ = write!(
            out,
            "<tr data-k=\"{k}\" data-run=\"{run}\" data-state=\"{state}\" class=\"{class}\"><td>{rank}</td><td>{k}</td>\
             <td><a href=\"/ui/runs/{run}\">{short}</a></td><td>{badge}{mark}</td>",
            k = m.k,
            run = m.run,
            state = m.state.as_str(),
            class = class.join(" "),
            rank = if m.best.is_some() { (rank + 1).to_string() } else { "-".into() },
            short = crate::model::short_id(&m.run),
            badge = badge(m.state.as_str()),
            mark = match (winner, m.early_terminated) {
                (true, _) => " <span class=\"winner-mark\">★ winner</span>",
                (_, true) => " <span class=\"stopped-mark\">× early-terminated</span>",
                _ => "",
            },
        );
        for name in &parameters {
            let value = m.parameters.get(name).map_or_else(|| "-".into(), var_text);
            let _ = write!(out, "<td class=\"parameter\">{}</td>", esc(&value));
        }
        let _ = write!(
            out,
            "<td class=\"best\">{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"reason\">{}</td></tr>",
            number(m.best),
            m.best_step.map_or_else(|| "-".into(), |s| s.to_string()),
            number(m.last),
            m.iterations,
            esc(m.reason.as_deref().unwrap_or("")),
        );
    }
    out.push_str("</tbody></table>");
    out
}

pub async fn render(service: &Service, id: &str) -> Result<(String, String)> {
    let curves = service.sweep_curves(id).await?;
    let status = &curves.status;
    let s = &status.sweep;
    let short = crate::model::short_id(&s.id);
    let counts: Vec<String> = status.counts.iter().map(|(state, n)| format!("{n} {state}")).collect();
    let mut body = format!(
        "<h1>Sweep {short} {}</h1><p class=\"meta\">workflow <b>{}</b> · members {} ({}){} · created {}</p>",
        badge(s.state.as_str()),
        esc(&s.workflow),
        s.members,
        esc(&counts.join(", ")),
        s.max_live.map(|n| format!(" · at most {n} at once")).unwrap_or_default(),
        time(Some(s.created_at)),
    );
    if let (Some(metric), Some(goal)) = (&status.metric, status.goal) {
        let _ = write!(body, "<p class=\"meta metric\">metric <b>{}</b> ({goal})</p>", esc(metric));
    }
    if let Some(reason) = &s.reason {
        let _ = write!(body, "<p class=\"reason\">{}</p>", esc(reason));
    }
    // A live sweep can be stopped; one a stop ended can be resumed (the service says why not
    // when it cannot).
    let target = super::html::url_segment(&s.id.to_string());
    let action = match s.state {
        SweepState::Live => Some((
            "stop",
            "Stop",
            format!("Stop sweep {short}: cancel its pending members and stop its running ones?"),
        )),
        SweepState::Stopped => {
            Some(("resume", "Resume", format!("Resume sweep {short}: run again the members its stop ended?")))
        }
        SweepState::Target | SweepState::Done => None,
    };
    if let Some((verb, label, confirm)) = action {
        let _ = write!(
            body,
            "<p class=\"actions\">{}</p>",
            super::html::action_button(&format!("/ui/sweeps/{target}/{verb}"), label, &confirm)
        );
    }
    if let Some(winner) = status.winner.and_then(|k| status.leaderboard.iter().find(|m| m.k == k)) {
        let _ = write!(
            body,
            "<p class=\"winner\">winner: member {} (<a href=\"/ui/runs/{run}\">{}</a>), {} {}</p>",
            winner.k,
            crate::model::short_id(&winner.run),
            esc(status.metric.as_deref().unwrap_or("best")),
            number(winner.best),
            run = winner.run,
        );
    }
    if let Some(unreported) = &status.unreported {
        let _ = write!(body, "<p class=\"muted unreported\">waiting: {}</p>", esc(unreported));
    }
    body.push_str("<h2>Curves</h2>");
    match member_chart(&curves) {
        Some(chart) => {
            let _ = write!(body, "<figure class=\"sweep-chart\">{chart}</figure>");
            if curves.curves().any(|(_, c)| c.readings > c.points.len()) {
                let _ = write!(
                    body,
                    "<p class=\"muted\">Long curves are drawn with at most {} points each: their first, their last \
                     and the lowest and highest of each stretch between.</p>",
                    curves.points_per_member
                );
            }
        }
        None if status.metric.is_none() => {
            body.push_str("<p class=\"muted\">The sweep names no metric: there is nothing to draw.</p>")
        }
        None => body.push_str("<p class=\"muted\">No member has reported the metric yet.</p>"),
    }
    if let Some(svg) = lineage(&status.exploits, status) {
        let _ = write!(body, "<h2>Lineage</h2><figure class=\"sweep-lineage\">{svg}</figure>");
        body.push_str("<ul class=\"exploits\">");
        for e in &status.exploits {
            let pending =
                if e.applied_at.is_none() { " <span class=\"muted\">(stopping)</span>" } else { "" };
            let _ = write!(
                body,
                "<li data-k=\"{}\">{} · {}{pending}</li>",
                e.k,
                time(Some(e.decided_at)),
                esc(&e.describe())
            );
        }
        body.push_str("</ul>");
    }
    body.push_str("<h2>Leaderboard</h2>");
    body.push_str(&leaderboard(status));
    Ok((format!("Sweep {short}"), body))
}
