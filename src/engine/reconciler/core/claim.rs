//! The picker: which pending runs, read in queue order, this node takes now. A run is taken
//! while a slot is free and its node labels fit, its sweep has room, its ports, exclusive labels
//! and pool units are free of every run this node holds and of those taken before it in the
//! same claim, and (while victims stop for an urgent run) its priority is not below that run's.
//! The first run that lacks units or a slot is noted for preemption.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use uuid::Uuid;

use super::preemption::Blocked;
use crate::model::{Pools, Run, RunParams};
use crate::workflow::PortSpec;

/// A port allocator: a free port outside what is held (`port:N`) and the ports taken so far.
pub type AutoPort<'f> = dyn FnMut(&BTreeSet<String>, &BTreeMap<String, u16>) -> Option<u16> + 'f;

/// What the picker says of one queued run.
#[derive(Clone, Debug, PartialEq)]
pub enum Pick {
    /// Claim it, with these params (its units, ports and run directory) and run directory.
    Take {
        params: Box<RunParams>,
        run_dir: PathBuf,
    },
    Skip,
    /// No slot left: the claim ends here.
    Stop,
}

/// A sweep's `max_live` and its members in flight on every node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SweepRoom {
    pub max_live: u32,
    pub in_flight: u32,
}

/// What the claim knows before it reads the queue.
pub struct Picker<'a> {
    /// Slots free (`max_parallel` less the runs supervised).
    pub free: usize,
    /// With `--preempt`: the first run that lacked units or a slot is noted.
    pub preempting: bool,
    /// While victims stop for an urgent run, runs below its priority wait.
    pub floor: Option<i64>,
    /// What the runs this node holds hold (exclusive labels, `port:N`, `gpu:1`), and what this
    /// claim has taken so far.
    pub held: BTreeSet<String>,
    pub pools: &'a Pools,
    pub sweeps: BTreeMap<Uuid, SweepRoom>,
    /// Where the runs this node claims keep their files.
    pub runs_dir: &'a Path,
    /// Runs taken so far.
    pub taken: usize,
    /// The first run that lacked units or a slot (with `preempting`).
    pub blocked: Option<Blocked>,
}

impl Picker<'_> {
    /// The pick for `run`: `fits` says whether this node's labels fit its `node_labels`;
    /// `auto_port` finds a free port outside what is held and taken (the shell binds one).
    pub fn pick(&mut self, run: &Run, fits: bool, auto_port: &mut AutoPort<'_>) -> Pick {
        if !fits {
            return Pick::Skip;
        }
        if self.taken == self.free {
            if self.preempting {
                self.blocked.get_or_insert_with(|| Blocked::of(run));
            }
            return Pick::Stop;
        }
        // What victims of a preemption free waits for the run they stop for.
        if self.floor.is_some_and(|floor| run.priority < floor) {
            return Pick::Skip;
        }
        let room = run.params.sweep.and_then(|member| self.sweeps.get_mut(&member.sweep));
        if room.as_ref().is_some_and(|room| room.in_flight >= room.max_live) {
            return Pick::Skip;
        }
        let Some(ports) = ports(run, &self.held, auto_port) else { return Pick::Skip };
        let resources = run.spec.resources(&ports);
        if !resources.is_disjoint(&self.held) {
            return Pick::Skip;
        }
        // Units no live run of this node holds (nor names as an exclusive label).
        let Some(units) = crate::model::pool::assign(self.pools, &self.held, &run.params.needs) else {
            if self.preempting {
                self.blocked.get_or_insert_with(|| Blocked::of(run));
            }
            return Pick::Skip;
        };
        let mut params = run.params.clone();
        // An earlier attempt's preemption (one that ended stopped, its node lost) is not this one's.
        params.preempted_by = None;
        params.preempted_at = None;
        self.held.extend(crate::model::pool::resources(&units));
        params.units = units;
        for (name, port) in &ports {
            params.resolved.insert(format!("port.{name}"), port.to_string());
        }
        self.held.extend(resources);
        if let Some(room) = room {
            room.in_flight += 1;
        }
        self.taken += 1;
        let run_dir = self.runs_dir.join(run.id.to_string());
        rebase_run_dir(&mut params, &run.run_dir, &run_dir);
        Pick::Take { params: Box::new(params), run_dir }
    }
}

/// How the loop's claim looks at the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Look {
    /// No slot free and no preemption: nothing to read.
    Nothing,
    /// The last claim found less than it had room for (or no room, looking only to preempt):
    /// ask whether any run waits before taking the write lock.
    AskFirst,
    /// Read the queue and claim.
    Claim,
}

/// The look for a claim with `free` slots, `preempting` or not, after a claim that left the
/// queue `drained` (a submission's poke clears that: its run is there to claim).
pub fn look(free: usize, preempting: bool, drained: bool) -> Look {
    match (free, preempting, drained) {
        (0, false, _) => Look::Nothing,
        (0, true, _) | (_, _, true) => Look::AskFirst,
        _ => Look::Claim,
    }
}

/// Whether the queue counts as drained after a claim that `took` runs with `free` slots:
/// not while a run is left blocked (preemption may place it), nor when runs it picked were
/// another writer's at that instant (`lost`: it looks again shortly, in case they were let go).
pub fn drained_after(took: usize, free: usize, blocked: bool, lost: usize) -> bool {
    took < free && !blocked && lost == 0
}

/// What the shell carries out, in order, to get a claimed run under way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// It cannot start: fail it, saying why (its stages never start).
    Fail(String),
    /// Make its run directory (and config file); a later attempt's old status files go first,
    /// since they would read as this attempt's exits. Failing, the run fails saying so.
    PrepareRunDir { clear_status: bool },
    /// Start its first stage.
    Drive,
}

/// The start of a claimed run of `attempt`, after what the shell found: the ledger line that
/// could not be written, the credentials the daemon's environment lacks, the problem with its
/// dependencies' values. The first problem fails it; otherwise its directory, then its stages.
pub fn start(ledger: Option<String>, missing: &[String], after: Option<String>, attempt: i64) -> Vec<Start> {
    let problem = ledger
        .or_else(|| {
            (!missing.is_empty()).then(|| format!("the daemon's environment lacks {}", missing.join(", ")))
        })
        .or(after);
    match problem {
        Some(problem) => vec![Start::Fail(problem)],
        None => vec![Start::PrepareRunDir { clear_status: attempt > 1 }, Start::Drive],
    }
}

/// Points the run's resolved values at the claiming node's run directory (they were resolved
/// where the run was submitted, which may be another machine).
pub fn rebase_run_dir(params: &mut RunParams, old: &Path, new: &Path) {
    if old == new {
        return;
    }
    let (old, new) = (old.to_string_lossy(), new.to_string_lossy());
    for value in params.resolved.values_mut() {
        if value.contains(&*old) {
            *value = value.replace(&*old, &new);
        }
    }
}

/// Its ports: those resolved already, fixed ones as declared, `auto` ones from `auto_port`.
/// None if no free port.
fn ports(run: &Run, held: &BTreeSet<String>, auto_port: &mut AutoPort<'_>) -> Option<BTreeMap<String, u16>> {
    let already = ports_of(&run.params.resolved);
    let mut ports = BTreeMap::new();
    for (name, spec) in &run.spec.ports {
        let port = match (already.get(name), spec) {
            (Some(port), _) => *port,
            (None, PortSpec::Fixed(port)) => *port,
            (None, PortSpec::Auto(_)) => auto_port(held, &ports)?,
        };
        ports.insert(name.clone(), port);
    }
    Some(ports)
}

/// The `port.NAME` values among resolved variables.
pub fn ports_of(resolved: &BTreeMap<String, String>) -> BTreeMap<String, u16> {
    resolved
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("port.")?.to_string(), v.parse().ok()?)))
        .collect()
}

#[cfg(test)]
#[path = "claim_tests.rs"]
mod tests;
