//! Population-based training (`method: pbt`), Ray Tune's `PopulationBasedTraining` over a
//! sweep's members: every `perturbation_interval` steps of the metric, among the members that
//! reached the boundary, each one in the bottom quantile continues, as its next attempt, from
//! a checkpoint of a member drawn from the top quantile, with that member's configuration
//! explored ([`explore`]). Pure: the shell (`service::sweeps::exploit`) reads the members,
//! their lines of training ([`Line`]: readings, checkpoints) and the exploits so far, calls
//! [`decide`], writes each exploit with the loser's stop, then requeues it.
//!
//! The rule, for each member m running with readings in its current attempt:
//! - m is due at interval n = ⌊last step / perturbation_interval⌋ (n ≥ 1), boundary
//!   b = n · interval, unless b < `burn_in` or m was exploited at n already (an exploit rewinds
//!   m to a step at or before b, so it reaches n again: once per interval);
//! - the members taking part are the running ones whose current attempt has a reading at or
//!   past b, each scored by its first such reading (a member pending, waiting for a unit or
//!   preempted is not counted as behind), and those exploited at n, by the reading they were
//!   compared by then; with fewer than two nothing is decided. A score is fixed once a member
//!   crosses b, so a decision made again (another pass, a restarted daemon) is the same, and
//!   members are compared at about the same step: scored by their latest readings, a member
//!   would be compared again at every reading until it fell into the bottom, and the ones just
//!   back from an exploit, behind the others, would always be;
//! - as Ray: ranked by score, the bottom and top quantiles hold ⌈count · quantile_fraction⌉
//!   members each (at most half); m in the bottom is exploited: its donor is drawn, with the
//!   stream of (seed, m, n), from the top members with a resumable checkpoint at or before b,
//!   and m continues from the donor's latest such checkpoint with the donor's values explored.

pub mod config;
pub mod explore;
pub mod record;

#[cfg(test)]
mod bench;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde_json::Value;

pub use config::{Pbt, RawPbt};
pub use explore::explore;
pub use record::ExploitRecord;

use super::member::Member;
use super::random::Rng;
use super::spec::{Goal, Metric, SweepSpec};
use crate::model::RunState;

/// Keeps PBT's streams apart from a random sweep's draws of the same (seed, member).
const STREAM: u64 = 0x5042_5400;

/// What PBT weighs of a member beyond the member itself: its current line of training, as the
/// shell read it (only a running member's checkpoints are read).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Line {
    /// Its current attempt's readings of the metric, (step, value), by step.
    pub readings: Vec<(i64, f64)>,
    /// Its resumable checkpoints, (step, path), oldest first, of its current line: the point
    /// its current attempt resumed from, then that attempt's own.
    pub checkpoints: Vec<(i64, String)>,
}

/// A member where the decision stands it: what it has of [`Member`], its [`Line`] and its
/// exploits so far.
#[derive(Debug)]
struct Standing<'a> {
    k: u64,
    /// Running now, owed no exploit: only these are compared or copied (a pending or preempted
    /// member is not behind; a loser not yet requeued is another lineage's end).
    running: bool,
    line: &'a Line,
    /// Its configuration now: its last exploit's, else its initial draw, by parameter path.
    values: BTreeMap<String, Value>,
    /// The intervals it was exploited at already, each with the reading it was compared by
    /// then: it still counts in that boundary's quantiles (else, once the loser is out, the
    /// next worst would be exploited at the same boundary, and the next).
    exploited: BTreeMap<i64, f64>,
}

impl<'a> Standing<'a> {
    fn of(spec: &SweepSpec, member: &Member, line: &'a Line, exploits: &[ExploitRecord]) -> Standing<'a> {
        let mine = exploits.iter().filter(|e| e.k == member.k);
        let owed = mine.clone().any(|e| e.applied_at.is_none());
        Standing {
            k: member.k,
            running: member.state == RunState::Running && !owed,
            line,
            values: match mine.clone().max_by_key(|e| e.interval) {
                Some(last) => last.values.clone(),
                None => member.values(spec),
            },
            exploited: mine.map(|e| (e.interval, e.score.unwrap_or(f64::NAN))).collect(),
        }
    }
}

/// One exploit: member `k` continues from `donor`'s checkpoint with `values`.
#[derive(Clone, Debug, PartialEq)]
pub struct Exploit {
    pub k: u64,
    /// The interval n, and its boundary n · perturbation_interval (a step of the metric).
    pub interval: i64,
    pub boundary: i64,
    pub donor: u64,
    /// The donor's checkpoint it continues from: (step, path).
    pub step: i64,
    pub path: String,
    /// The loser's values before, and after (the donor's, explored).
    pub before: BTreeMap<String, Value>,
    pub values: BTreeMap<String, Value>,
    /// The latest readings compared: the loser's and the donor's.
    pub score: f64,
    pub donor_score: f64,
}

/// The exploits due now among `members` (see the module's rule), in order of k: each member
/// with its line of training in `lines` (by k; none read: no readings, no checkpoints) and the
/// sweep's exploits so far, `exploits` (its lineage: each member's values now, the intervals it
/// was exploited at, and those owed their requeue).
pub fn decide(
    spec: &SweepSpec,
    pbt: &Pbt,
    metric: &Metric,
    members: &[Member],
    lines: &BTreeMap<u64, Line>,
    exploits: &[ExploitRecord],
) -> Vec<Exploit> {
    let unread = Line::default();
    let standings: Vec<Standing<'_>> = members
        .iter()
        .map(|member| Standing::of(spec, member, lines.get(&member.k).unwrap_or(&unread), exploits))
        .collect();
    let interval = pbt.perturbation_interval;
    let mut due = Vec::new();
    for member in standings.iter().filter(|m| m.running) {
        let Some(&(last_step, _)) = member.line.readings.last() else { continue };
        let n = last_step.div_euclid(interval);
        let boundary = n.saturating_mul(interval);
        if n < 1 || boundary < pbt.burn_in || member.exploited.contains_key(&n) {
            continue;
        }
        let Some((bottom, top)) =
            quantiles(&standings, boundary, pbt.perturbation_interval, pbt.quantile_fraction, metric.goal)
        else {
            continue;
        };
        let Some(&(_, score)) = bottom.iter().find(|(m, _)| m.k == member.k) else { continue };
        let donors: Vec<(&Standing<'_>, f64, &(i64, String))> = top
            .iter()
            // A donor reached the boundary itself (one exploited there is no donor).
            .filter(|(donor, _)| donor.running && !donor.exploited.contains_key(&n))
            .filter_map(|(donor, donor_score)| {
                let checkpoint = donor.line.checkpoints.iter().rev().find(|(step, _)| *step <= boundary)?;
                Some((*donor, *donor_score, checkpoint))
            })
            .collect();
        if donors.is_empty() {
            continue;
        }
        let mut rng = Rng::keyed(spec.seed ^ STREAM, member.k, n as u64);
        let (donor, donor_score, (step, path)) = donors[rng.below(donors.len() as u128) as usize];
        let values = explore(&spec.parameters, pbt, &donor.values, &mut rng);
        due.push(Exploit {
            k: member.k,
            interval: n,
            boundary,
            donor: donor.k,
            step: *step,
            path: path.clone(),
            before: member.values.clone(),
            values,
            score,
            donor_score,
        });
    }
    due
}

/// A bottom or top quantile: its members with their scores.
type Quantile<'s, 'a> = Vec<(&'s Standing<'a>, f64)>;

/// The bottom and top quantiles at `boundary` (worst first), as Ray sizes them; None below two
/// members. Taking part: the members exploited at it, by the reading they were compared by
/// then, and the running members whose current attempt reached it, by their first reading at
/// or past it.
fn quantiles<'s, 'a>(
    members: &'s [Standing<'a>],
    boundary: i64,
    interval: i64,
    fraction: f64,
    goal: Goal,
) -> Option<(Quantile<'s, 'a>, Quantile<'s, 'a>)> {
    let n = boundary / interval.max(1);
    let mut taking_part: Vec<(&Standing<'a>, f64)> = members
        .iter()
        .filter_map(|m| {
            let crossed =
                || m.line.readings.iter().find(|(step, _)| m.running && *step >= boundary).map(|r| r.1);
            Some((m, m.exploited.get(&n).copied().or_else(crossed)?))
        })
        .filter(|(_, value)| value.is_finite())
        .collect();
    if taking_part.len() < 2 {
        return None;
    }
    // Better last: a minimized metric's scores are negated, as Ray negates them.
    let oriented = |value: f64| if goal == Goal::Minimize { -value } else { value };
    taking_part.sort_by(|(a, x), (b, y)| oriented(*x).total_cmp(&oriented(*y)).then(a.k.cmp(&b.k)));
    let count = taking_part.len();
    let size = ((count as f64 * fraction).ceil() as usize).min(count / 2);
    if size == 0 {
        return None;
    }
    let bottom = taking_part[..size].to_vec();
    let top = taking_part[count - size..].to_vec();
    Some((bottom, top))
}

/// `lr 1e-05 → 1.2e-05, kl 0.1 → 0.1`: each searched value that changed, for events.
pub fn changes(before: &BTreeMap<String, Value>, after: &BTreeMap<String, Value>) -> String {
    let text = |value: Option<&Value>| value.map_or("-".to_string(), super::format::var_text);
    let changed: Vec<String> = after
        .iter()
        .filter(|(path, value)| before.get(*path) != Some(*value))
        .map(|(path, value)| format!("{path} {} → {}", text(before.get(path)), text(Some(value))))
        .collect();
    if changed.is_empty() { "no value changed".to_string() } else { changed.join(", ") }
}

/// What PBT needs of a sweep beyond its keys: a metric to rank by, a parameter to explore, a
/// workflow (a `program:` has no checkpoints to continue from), and no hyperband (PBT's losers
/// continue from the winners rather than stop).
pub fn check(spec: &SweepSpec) -> Result<(), super::SweepError> {
    let invalid = |path: &str, problem: &str| super::SweepError::Invalid {
        path: path.to_string(),
        problem: problem.to_string(),
    };
    if spec.metric.is_none() {
        return Err(invalid("metric", "missing: a pbt sweep ranks its members by it"));
    }
    if spec.early_terminate.is_some() {
        return Err(invalid(
            "early_terminate",
            "a pbt sweep's losers continue from the winners' checkpoints instead of stopping: drop it",
        ));
    }
    if spec.program.is_some() {
        return Err(invalid(
            "program",
            "a pbt member continues from another member's checkpoint: name a workflow with `checkpoints:` and `resume_args:`",
        ));
    }
    if !spec.parameters.iter().any(|param| !matches!(param.domain, super::Domain::Constant(_))) {
        return Err(invalid("parameters", "a pbt sweep needs one to explore (not only constants `value:`)"));
    }
    Ok(())
}
