//! Preemption's decisions (issue 33, with `--preempt`): which runs may be claimed while victims
//! stop for an urgent run, what the urgent run is short of and who holds it, the victim's move
//! (its reason, the event on the urgent run), and its requeue once its stages are gone (the
//! work it redoes counted to its last stage's end, so a daemon's downtime is not added).
//! `model::preemption::choose_victims` picks the victims.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::model::preemption::{Holder, Shortage, choose_victims};
use crate::model::{Checkpoint, Millis, Pools, Run, RunParams, RunState, short_id};
use crate::workflow::PreemptSignal;

/// The pool name a parallel slot goes by in a shortage, when slots are short.
pub const SLOT: &str = "parallel slot";

/// The first run the claim could not place for lack of units or a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    pub id: Uuid,
    pub priority: i64,
    pub needs: BTreeMap<String, u32>,
}

impl Blocked {
    pub fn of(run: &Run) -> Blocked {
        Blocked {
            id: run.id,
            priority: run.priority,
            needs: run.params.needs.iter().map(|(pool, n)| (pool.clone(), *n)).collect(),
        }
    }
}

/// The runs the supervised victims stop for (each named by a stopping victim).
pub fn urgent_runs<'a>(supervised: impl IntoIterator<Item = &'a Run>) -> BTreeSet<Uuid> {
    supervised
        .into_iter()
        .filter(|run| run.state == RunState::Stopping)
        .filter_map(Run::preempted_by)
        .collect()
}

/// The lowest priority a run may have to be claimed now, given the urgent runs as the store
/// holds them: while victims stop for a pending run, the runs below it wait, so what the
/// victims free goes to it. None: any run.
pub fn floor<'a>(urgent: impl IntoIterator<Item = &'a Run>) -> Option<i64> {
    urgent.into_iter().filter(|run| run.state == RunState::Pending).map(|run| run.priority).max()
}

/// Whether a preemption is under way (a victim stops, or was asked to checkpoint first): no
/// other is decided meanwhile.
pub fn under_way<'a>(supervised: impl IntoIterator<Item = &'a Run>, asked: bool) -> bool {
    asked || supervised.into_iter().any(|run| run.preempted_by().is_some())
}

/// What `blocked` lacks: its needs (and a slot when `slots_short`) against the pools' units
/// not `held`.
pub fn shortage(
    blocked: &Blocked,
    pools: &Pools,
    held: &BTreeSet<String>,
    slots_short: bool,
    gap: i64,
    now: Millis,
) -> Shortage {
    let mut needed = blocked.needs.clone();
    let mut free = BTreeMap::new();
    for (pool, units) in pools.iter() {
        let unheld = units.iter().filter(|u| !held.contains(&crate::model::pool::unit_resource(pool, u)));
        free.insert(pool.clone(), unheld.count() as u32);
    }
    if slots_short {
        needed.insert(SLOT.to_string(), 1);
        free.insert(SLOT.to_string(), 0);
    }
    Shortage { needed, free, priority: blocked.priority, gap, now }
}

/// A supervised run as a holder of units (and of a slot, when slots are short); None for a run
/// not starting or running. Its `checkpoint_at` is filled by the shell when it may be chosen.
pub fn holder(run: &Run, slots_short: bool, now: Millis) -> Option<Holder<Uuid>> {
    if !matches!(run.state, RunState::Starting | RunState::Running) {
        return None;
    }
    let mut units: BTreeMap<String, u32> =
        run.units().iter().map(|(pool, units)| (pool.clone(), units.len() as u32)).collect();
    if slots_short {
        units.insert(SLOT.to_string(), 1);
    }
    Some(Holder {
        id: run.id,
        priority: run.priority,
        preemptible: run.spec.preemptible && run.preemptions < i64::from(run.spec.max_preemptions()),
        started_at: run.started_at.unwrap_or(now),
        checkpoint_at: None,
        units,
        min_runtime: run.spec.min_runtime().as_millis() as Millis,
    })
}

/// The pools short: what each victim is said to give.
pub fn short_pools(shortage: &Shortage) -> Vec<String> {
    shortage
        .needed
        .iter()
        .filter(|(pool, needed)| **needed > shortage.free.get(*pool).copied().unwrap_or(0))
        .map(|(pool, _)| pool.clone())
        .collect()
}

/// What the shell carries out, in order, for a preemption decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Ask the victim to checkpoint now (its workflow names `preempt_signal`): `signal` to its
    /// live stages, `note` on it, and a timer of `wait`; it is stopped at its next checkpoint
    /// or when the timer fires (`ask_over`). No stage to signal: stop it now instead.
    Ask {
        victim: Uuid,
        urgent: Uuid,
        short: Vec<String>,
        signal: PreemptSignal,
        wait: std::time::Duration,
        note: String,
    },
    /// Stop the victim now for `urgent` (`victim_move`, committed before any signal).
    Stop { victim: Uuid, urgent: Uuid, short: Vec<String> },
}

/// The preemption for `urgent`, short of `shortage`, among `holders` (their checkpoints read
/// for those that may be chosen): the victims that free it at the least lost work, each asked
/// to checkpoint first or stopped at once. `runs` gives a victim's run. None chosen: nothing.
pub fn plan<'a>(
    urgent: Uuid,
    shortage: &Shortage,
    holders: &[Holder<Uuid>],
    runs: impl Fn(Uuid) -> Option<&'a Run>,
) -> Vec<Action> {
    let Some(choice) = choose_victims(shortage, holders) else { return Vec::new() };
    let short = short_pools(shortage);
    choice
        .victims
        .into_iter()
        .map(|victim| {
            let short = short.clone();
            match runs(victim).and_then(|run| Some((run.spec.preempt_signal?, run.spec.preempt_wait()))) {
                Some((signal, wait)) => {
                    let note = format!(
                        "asked to checkpoint now ({}) before its preemption by run {}: stopped at its next checkpoint, or in {}",
                        signal.name(),
                        short_id(&urgent),
                        crate::model::progress::span(wait)
                    );
                    Action::Ask { victim, urgent, short, signal, wait, note }
                }
                None => Action::Stop { victim, urgent, short },
            }
        })
        .collect()
}

/// A victim asked to checkpoint checkpointed, or its wait is over: it is stopped only while
/// the run it was asked for still waits (`urgent` as the store holds it now).
pub fn ask_over(urgent: Option<&Run>) -> bool {
    urgent.is_some_and(|run| run.state == RunState::Pending)
}

/// A victim's move to `stopping`, with what it is told and what the urgent run is told.
#[derive(Clone, Debug, PartialEq)]
pub struct VictimMove {
    /// Its params naming the run it stops for.
    pub params: RunParams,
    /// On the victim: for whom, what it gives, the work it will redo.
    pub reason: String,
    /// On the urgent run: what it took from whom.
    pub note: String,
}

/// The move that preempts `run` for `urgent`, short of `short`, at `now`; `last` is its last
/// resumable checkpoint. None for a run no longer starting or running.
pub fn victim_move(
    run: &Run,
    urgent: Uuid,
    short: &[String],
    last: Option<&Checkpoint>,
    now: Millis,
) -> Option<VictimMove> {
    if !matches!(run.state, RunState::Starting | RunState::Running) {
        return None;
    }
    let started = run.started_at.unwrap_or(now);
    let (since_at, since) = match last {
        Some(c) if c.at >= started => (c.at, format!("since the checkpoint at step {}", c.step)),
        _ => (started, "since its attempt started".to_string()),
    };
    let lost = std::time::Duration::from_millis((now - since_at).max(0) as u64);
    // What it gives of the short pools, by unit.
    let assigned = run.units();
    let given: Vec<(String, Vec<String>)> = short
        .iter()
        .map(|pool| (pool.clone(), assigned.get(pool).cloned().unwrap_or_default()))
        .filter(|(pool, units)| pool == SLOT || !units.is_empty())
        .collect();
    let reason = format!(
        "preempted by run {} for {}; ≈ {} of work {since} will be redone",
        short_id(&urgent),
        amounts(&given),
        crate::model::progress::span(lost)
    );
    let note = format!("took {} from run {}", named_units(&given), run.short_id());
    let mut params = run.params.clone();
    params.preempted_by = Some(urgent);
    params.preempted_at = Some(now);
    Some(VictimMove { params, reason, note })
}

/// A victim's requeue once its stages are gone.
#[derive(Clone, Debug, PartialEq)]
pub struct Requeue {
    /// Its next attempt's params: no longer naming the urgent run; resuming when it can.
    pub params: RunParams,
    /// Why it is pending again.
    pub reason: String,
    /// What its next attempt starts from.
    pub note: String,
    /// The work it redoes, in ms.
    pub lost: Millis,
}

/// How a victim's stage ended, as recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageEnd {
    /// Its exit status says when it ended.
    Exited(Millis),
    /// Gone without a status, noticed at this time (by a restarted daemon, maybe much later).
    Lost(Millis),
}

impl StageEnd {
    /// When the victim's work in this stage ended, as well as is known: a lost stage's end is
    /// bounded by its stop (decided at `stopped_at`, killed after `grace` at the latest while a
    /// daemon watched), never pushed later by a daemon's downtime.
    fn at(self, stopped_at: Option<Millis>, grace: Millis) -> Millis {
        match (self, stopped_at) {
            (StageEnd::Exited(at), _) | (StageEnd::Lost(at), None) => at,
            (StageEnd::Lost(noticed), Some(stopped)) => noticed.min(stopped.saturating_add(grace)),
        }
    }
}

/// The requeue of `run`, stopping for another with its stages gone: `ended` are its stages'
/// ends (none for a stage that never started), `grace` its stages' stop grace, `checkpoints`
/// its checkpoints (oldest first). The work redone ends where the victim did, at its last
/// stage's end, not at `now`, which a daemon restarted meanwhile makes later by its downtime;
/// a stage lost without a status while no daemon watched is bounded by its stop.
pub fn requeue(
    run: &Run,
    ended: &[Option<StageEnd>],
    grace: Millis,
    checkpoints: &[Checkpoint],
    now: Millis,
) -> Requeue {
    let by = run.preempted_by().map(|by| short_id(&by)).unwrap_or_default();
    let started = run.started_at.unwrap_or(run.updated_at);
    let since = Checkpoint::last_resumable(checkpoints).map_or(started, |c| c.at.max(started));
    let stopped_at = run.params.preempted_at;
    let ended = ended.iter().flatten().map(|end| end.at(stopped_at, grace)).max();
    let ended = ended.map_or(now, |at| at.min(now));
    let lost = (ended - since).max(0);
    let mut cleared = run.clone();
    cleared.params.preempted_by = None;
    cleared.params.preempted_at = None;
    let (params, note) = super::retries::next_attempt(&cleared, checkpoints, true).unwrap_or_else(|| {
        let note =
            format!("attempt {} starts from step 0: the workflow names no checkpoints", run.attempt + 1);
        (cleared.params.clone(), note)
    });
    Requeue { params, reason: format!("queued again after its preemption by run {by}"), note, lost }
}

/// "1 gpu unit", "2 gpu units and a parallel slot".
fn amounts(given: &[(String, Vec<String>)]) -> String {
    let parts: Vec<String> = given
        .iter()
        .map(|(pool, units)| match (pool.as_str(), units.len()) {
            (SLOT, _) => "a parallel slot".to_string(),
            (_, 1) => format!("1 {pool} unit"),
            (_, n) => format!("{n} {pool} units"),
        })
        .collect();
    parts.join(" and ")
}

/// "gpu unit 2", "gpu units 2,3 and a parallel slot".
fn named_units(given: &[(String, Vec<String>)]) -> String {
    let parts: Vec<String> = given
        .iter()
        .map(|(pool, units)| match (pool.as_str(), units.len()) {
            (SLOT, _) => "a parallel slot".to_string(),
            (_, 1) => format!("{pool} unit {}", units[0]),
            (_, _) => format!("{pool} units {}", units.join(",")),
        })
        .collect();
    parts.join(" and ")
}

#[cfg(test)]
#[path = "preemption_tests.rs"]
mod tests;
