//! Restart repair: for every run the store says is in flight, find out what became of its
//! stages while no daemon was watching.
//!
//! - its shim alive with the recorded identity → re-attach (pidfd on the shim), even if an exit
//!   file is there: a live shim means its stage has not been recorded as ended, so such a file is
//!   stale or forged; it is ignored with an event, and the shim overwrites it when it ends;
//! - otherwise a status file → the stage exited with that status;
//! - otherwise → lost, and the run fails saying so. A pid whose start time or boot differs is
//!   someone else's process and is never signalled.

use std::time::Duration;

use rustix::process::Signal;
use tracing::{info, warn};
use uuid::Uuid;

use super::core::restart::{self, ExitFile, Repair};
use super::{Msg, ProcessEnd, Reconciler, Result, Supervised, read_end};
use crate::launch::process::{ExitWatch, Liveness, liveness, signal_group};
use crate::launch::status::StageFiles;
use crate::model::{
    Millis, NewEvent, ProcessIdentity, ProcessState, ProcessTrigger, RunState, RunTrigger, now_millis,
};

/// How many more looks, and how far apart, restart repair gives a stage that left no trace
/// (no identity, no status file) before it counts as lost: a shim waiting out a full disk
/// tries to write its files every 2 s at most.
const TRACE_LOOKS: u32 = 5;
const TRACE_LOOK_EVERY: Duration = Duration::from_secs(1);

/// What became of one live-looking process.
pub(super) enum Found {
    Ended(ProcessEnd),
    /// Its shim runs; with a note when an exit file was there and was ignored for it.
    Alive(ExitWatch, Option<String>),
    /// No trace yet: looked at again, with this many looks left after it.
    LookAgain(u32),
}

impl Reconciler {
    pub(super) async fn recover(&mut self) -> Result {
        let runs = self.store.supervised_runs().await?;
        let mut reattached = 0;
        for run in runs {
            let id = run.id;
            // A claim cut short before its dependency values were written: write them now.
            let run =
                if run.state == RunState::Starting && super::core::dependencies::needs_after_values(&run) {
                    match self.resolve_after(run.clone()).await {
                        Ok((run, None)) => run,
                        Ok((run, Some(problem))) => {
                            if let Err(err) =
                                self.store.transition(&run, RunTrigger::Fail, Some(&problem), None).await
                            {
                                warn!(run = %run.short_id(), "cannot fail on restart: {err}");
                            }
                            continue;
                        }
                        Err(err) => {
                            warn!(run = %run.short_id(), "cannot read its dependencies on restart: {err}");
                            continue;
                        }
                    }
                } else {
                    run
                };
            let stages = self.store.stages(id).await?;
            let sup = match Supervised::new(run.clone(), stages) {
                Ok(sup) => sup,
                Err(err) => {
                    warn!(run = %run.short_id(), "cannot plan on restart: {err}");
                    continue;
                }
            };
            self.runs.insert(id, sup);
            // A write that cannot land (a full disk) holds this run's repair, not the others'.
            match self.recover_run(id).await {
                Ok(count) => reattached += count,
                Err(err) if super::outcome::holds(&err) => {
                    self.or_hold(id, Err(err), Msg::Drive { run: id })?
                }
                Err(err) => return Err(err),
            }
        }
        if !self.runs.is_empty() {
            info!(runs = self.runs.len(), stages = reattached, "recovered in-flight runs");
        }
        Ok(())
    }

    /// Re-attaches or settles each stage of one run; returns how many were re-attached.
    async fn recover_run(&mut self, id: Uuid) -> Result<usize> {
        let mut reattached = 0;
        let count = self.runs.get(&id).map_or(0, |s| s.stages.len());
        for idx in 0..count {
            if self.reattach_slurm(id, idx).await? {
                reattached += 1;
                continue;
            }
            if self.settle(id, idx, TRACE_LOOKS).await? {
                reattached += 1;
            }
        }
        self.handle_or_hold(Msg::Drive { run: id }).await?;
        Ok(reattached)
    }

    /// Looks again at a stage that had left no trace (`Msg::Examine`).
    pub(super) async fn on_examine(&mut self, id: Uuid, idx: usize, looks_left: u32) -> Result {
        self.settle(id, idx, looks_left).await?;
        self.drive(id).await
    }

    /// Finds out what became of stage `idx` of run `id`, recorded as live: re-attaches to its
    /// shim (true) or records its end. A stage that left no trace yet (no identity, no status
    /// file) is looked at again `looks_left` more times, a second apart, before it counts as
    /// lost: its shim may still be waiting out a full disk to write its files.
    async fn settle(&mut self, id: Uuid, idx: usize, looks_left: u32) -> Result<bool> {
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(false) };
        let Some(tracked) = sup.stages.get_mut(idx) else { return Ok(false) };
        if !tracked.stage.record.state.is_live() {
            return Ok(false);
        }
        let stage = &mut tracked.stage;
        let (found, started) = examine(
            &tracked.files,
            &mut stage.record.shim,
            &mut stage.record.process,
            &mut stage.record.started_at,
            looks_left,
        );
        if let Found::LookAgain(looks_left) = found {
            let tx = self.tx.clone();
            tokio::spawn(async move {
                tokio::time::sleep(TRACE_LOOK_EVERY).await;
                let _ = tx.send(Msg::Examine { run: id, idx, looks_left });
            });
            return Ok(false);
        }
        if let Some(message) = started {
            let name = stage.name.clone();
            self.note(id, NewEvent::stage(&name, message)).await?;
        }
        let (watch, ignored) = match found {
            // Handled exactly like an exit seen live, held like one when it cannot land.
            Found::Ended(end) => {
                let msg = Msg::Ended { owner: super::Owner::Stage { run: id, idx }, end: end.clone() };
                if let Some(msg) = self.held.behind(id, msg) {
                    let ended = self.on_ended(id, idx, end).await;
                    self.or_hold(id, ended, msg)?;
                }
                return Ok(false);
            }
            Found::Alive(watch, ignored) => (watch, ignored),
            Found::LookAgain(_) => return Ok(false),
        };
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(false) };
        if let Some(note) = ignored {
            let name = sup.stages[idx].stage.name.clone();
            warn!(run = %id, stage = %name, "{note}");
            self.note(id, NewEvent::stage(&name, note)).await?;
        }
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(false) };
        let run_starting = sup.run.state == RunState::Starting;
        let stage = &mut sup.stages[idx].stage;
        let pid = stage.record.process.as_ref().map(|p| p.pid);
        stage.record.apply(ProcessTrigger::Reattach)?;
        let (message, check_readiness) =
            restart::reattached(pid, stage.record.state == ProcessState::Starting, run_starting);
        let since = stage.record.started_at.unwrap_or_else(now_millis);
        let event = NewEvent::stage(&stage.name, message);
        // What the shim's files and liveness told is a fact: watched either way, and its
        // record held until it lands.
        let written = self.store.update_stage(stage, Some(&event)).await;
        self.or_hold(id, written, Msg::Record { run: id, idx, event })?;
        let Some(sup) = self.runs.get_mut(&id) else { return Ok(true) };
        let files = sup.stages[idx].files.clone();
        self.watch_reattached(super::Owner::Stage { run: id, idx }, watch, files);
        if check_readiness {
            let elapsed = Duration::from_millis(now_millis().saturating_sub(since).max(0) as u64);
            self.start_readiness(id, idx, elapsed);
        }
        Ok(true)
    }
}

/// What became of a process recorded as live, from its status files and its identity
/// (`core::restart::repair` decides; this reads, and kills an orphan it says is ours), with the
/// event of its start when the store never recorded it. Fills in identities the daemon never
/// got to record (it died right after starting the shim).
pub(super) fn examine(
    files: &StageFiles,
    shim: &mut Option<ProcessIdentity>,
    process: &mut Option<ProcessIdentity>,
    started_at: &mut Option<Millis>,
    looks_left: u32,
) -> (Found, Option<String>) {
    let recorded = shim.is_some();
    let file = files.read_finished();
    if shim.is_none()
        && let Ok(Some(started)) = files.read_started()
    {
        *shim = Some(started.shim);
        *process = started.process;
        *started_at = Some(started.started_at);
    }
    let watch = shim.as_ref().and_then(|shim| match liveness(shim) {
        Liveness::Alive => ExitWatch::open(shim).unwrap_or_else(|err| {
            warn!("cannot watch shim {}: {err}", shim.pid);
            None
        }),
        Liveness::Zombie | Liveness::Gone | Liveness::Reused => None,
    });
    let evidence = match &file {
        Ok(Some(_)) => ExitFile::Valid,
        Ok(None) => ExitFile::Absent,
        Err(_) => ExitFile::Unreadable,
    };
    let decision = restart::repair(&restart::Found {
        recorded,
        shim: shim.as_ref().map(|s| s.pid),
        process: process.as_ref().map(|p| p.pid),
        shim_alive: watch.is_some(),
        file: evidence,
        file_ran: matches!(&file, Ok(Some(finished)) if finished.exit.is_some()),
        looks_left,
    });
    let found = match (decision.repair, watch, file) {
        (Repair::LookAgain { looks_left }, ..) => Found::LookAgain(looks_left),
        (Repair::NeverRan, ..) => Found::Ended(ProcessEnd::Vanished(restart::NEVER_RAN.into())),
        (Repair::Reattach { ignored }, Some(watch), _) => {
            let exit = files.exit.file_name().unwrap_or_default().to_string_lossy();
            let pid = shim.as_ref().map_or(0, |s| s.pid);
            Found::Alive(watch, ignored.then(|| restart::ignored_note(&exit, pid)))
        }
        (Repair::RecordExit { clear_leftovers }, _, Ok(Some(finished))) => {
            if clear_leftovers {
                files.remove_leftovers();
            }
            Found::Ended(ProcessEnd::Finished(finished))
        }
        // `ReadAgain`, the one left with its evidence.
        _ => read_again(files, shim.as_ref(), process.as_ref()),
    };
    (found, decision.started)
}

/// A stage whose shim is gone without a status that could be read: its leftovers cleared, its
/// status file read again (it may have landed meanwhile), else `core::restart::vanished` says
/// why, and whether its orphaned process group, ours by its identity, is killed.
fn read_again(
    files: &StageFiles,
    shim: Option<&ProcessIdentity>,
    process: Option<&ProcessIdentity>,
) -> Found {
    files.remove_leftovers();
    let Some(shim) = shim else {
        return Found::Ended(ProcessEnd::Vanished(restart::NEVER_RAN.into()));
    };
    if let ProcessEnd::Finished(finished) = read_end(files, "") {
        return Found::Ended(ProcessEnd::Finished(finished));
    }
    // The stage process may outlive its shim; it is ours only if its identity matches.
    let orphan = process.filter(|p| liveness(p) == Liveness::Alive);
    let gone = restart::Gone {
        shim: shim.pid,
        orphan: orphan.map(|p| p.pid),
        shim_reused: orphan.is_none() && liveness(shim) == Liveness::Reused,
        disk_low: orphan.is_none() && status_disk_is_low(files),
    };
    let (kill, why) = restart::vanished(&gone);
    if let (Some(_), Some(process)) = (kill, orphan) {
        signal_group(process, Signal::KILL);
    }
    Found::Ended(ProcessEnd::Vanished(why))
}

/// Whether the filesystem of a stage's status files is below the reserve: then a missing exit
/// file is explained by the full disk, not by a stage that vanished unseen.
fn status_disk_is_low(files: &StageFiles) -> bool {
    let dir = files.exit.parent().unwrap_or(std::path::Path::new("."));
    crate::launch::space::space_at(dir).is_ok_and(|space| space.is_low())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(pid: i32) -> ProcessIdentity {
        crate::launch::process::identity_of(pid).unwrap()
    }

    #[tokio::test]
    async fn a_forged_exit_file_beside_a_live_shim_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let files = StageFiles::new(dir.path(), "trainer");
        let forged = crate::launch::status::Finished {
            exit: Some(crate::model::Exit::Code(0)),
            spawn_error: None,
            ended_at: 1,
        };
        crate::launch::status::write_atomic(&files.exit, &forged, crate::launch::status::Durability::Cached)
            .unwrap();
        // This test process plays the live shim.
        let mut shim = Some(identity(std::process::id() as i32));
        let (mut process, mut started_at) = (None, Some(1));
        match examine(&files, &mut shim, &mut process, &mut started_at, 0).0 {
            Found::Alive(_, Some(note)) => assert!(note.contains("ignored trainer.exit.json"), "{note}"),
            Found::Alive(_, None) => panic!("the ignored file is not noted"),
            Found::Ended(end) => panic!("the forged file was trusted: {end:?}"),
            Found::LookAgain(_) => panic!("a live shim is a trace"),
        }
    }

    #[tokio::test]
    async fn a_gone_shim_leaves_its_exit_file_as_the_word_and_no_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        let files = StageFiles::new(dir.path(), "env");
        let done = crate::launch::status::Finished {
            exit: Some(crate::model::Exit::Code(3)),
            spawn_error: None,
            ended_at: 5,
        };
        crate::launch::status::write_atomic(&files.exit, &done, crate::launch::status::Durability::Cached)
            .unwrap();
        let leftover = files.exit.with_file_name("env.exit.json.tmp77");
        std::fs::write(&leftover, b"").unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = identity(child.id() as i32);
        child.wait().unwrap();
        let (mut shim, mut process, mut started_at) = (Some(gone), None, Some(1));
        match examine(&files, &mut shim, &mut process, &mut started_at, 0).0 {
            Found::Ended(ProcessEnd::Finished(finished)) => assert_eq!(finished, done),
            Found::Ended(end) => panic!("not the file's status: {end:?}"),
            Found::Alive(..) | Found::LookAgain(_) => panic!("a gone shim is not alive"),
        }
        assert!(!leftover.exists(), "the empty temporary file is cleaned");
    }
}
