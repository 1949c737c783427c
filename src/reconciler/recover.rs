//! Restart repair: for every run the store says is in flight, find out what became of its
//! stages while no daemon was watching.
//!
//! - a status file → the stage exited with that status;
//! - its shim alive with the recorded identity → re-attach (pidfd on the shim);
//! - otherwise → lost, and the run fails saying so. A pid whose start time or boot differs is
//!   someone else's process and is never signalled.

use std::time::Duration;

use rustix::process::Signal;
use tracing::{info, warn};
use uuid::Uuid;

use super::{ProcessEnd, Reconciler, Result, Supervised, read_end};
use crate::launch::process::{ExitWatch, Liveness, liveness, signal_group};
use crate::launch::status::StageFiles;
use crate::model::{Millis, NewEvent, ProcessIdentity, ProcessState, RunState, now_millis};

/// What became of one live-looking process.
pub(super) enum Found {
    Ended(ProcessEnd),
    Alive(ExitWatch),
}

impl Reconciler {
    pub(super) async fn recover(&mut self) -> Result {
        let runs = self.store.supervised_runs().await?;
        let mut reattached = 0;
        for run in runs {
            let id = run.id;
            let stages = self.store.stages(id).await?;
            let sup = match Supervised::new(run.clone(), stages) {
                Ok(sup) => sup,
                Err(err) => {
                    warn!(run = %run.short_id(), "cannot plan on restart: {err}");
                    continue;
                }
            };
            self.runs.insert(id, sup);
            reattached += self.recover_run(id).await?;
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
            let Some(sup) = self.runs.get_mut(&id) else {
                break;
            };
            if !sup.stages[idx].record.state.is_live() {
                continue;
            }
            let stage = &mut sup.stages[idx];
            match examine(
                &sup.files[idx],
                &mut stage.record.shim,
                &mut stage.record.process,
                &mut stage.record.started_at,
            ) {
                // Handled exactly like an exit seen live.
                Found::Ended(end) => self.on_ended(id, idx, end).await?,
                Found::Alive(watch) => {
                    reattached += 1;
                    let stage = &mut sup.stages[idx];
                    let pid = stage.record.process.as_ref().map_or(0, |p| p.pid);
                    if stage.record.state == ProcessState::Spawning {
                        stage.record.state = ProcessState::Starting;
                    }
                    let starting = stage.record.state == ProcessState::Starting;
                    let since = stage.record.started_at.unwrap_or_else(now_millis);
                    let event = NewEvent::stage(
                        &stage.name,
                        format!("re-attached after a daemon restart (pid {pid})"),
                    );
                    self.store.update_stage(stage, Some(&event)).await?;
                    let files = sup.files[idx].clone();
                    let run_starting = sup.run.state == RunState::Starting;
                    self.watch_reattached(super::Owner::Stage { run: id, idx }, watch, files);
                    if starting && run_starting {
                        let elapsed = Duration::from_millis(now_millis().saturating_sub(since).max(0) as u64);
                        self.start_readiness(id, idx, elapsed);
                    }
                }
            }
        }
        self.drive(id).await?;
        Ok(reattached)
    }
}

/// What became of a process recorded as live, from its status files and its identity. Fills in
/// identities the daemon never got to record (it died right after starting the shim).
pub(super) fn examine(
    files: &StageFiles,
    shim: &mut Option<ProcessIdentity>,
    process: &mut Option<ProcessIdentity>,
    started_at: &mut Option<Millis>,
) -> Found {
    if let Ok(Some(finished)) = files.read_finished() {
        return Found::Ended(ProcessEnd::Finished(finished));
    }
    if shim.is_none()
        && let Ok(Some(started)) = files.read_started()
    {
        *shim = Some(started.shim);
        *process = started.process;
        *started_at = Some(started.started_at);
    }
    let Some(shim) = shim.clone() else {
        return Found::Ended(ProcessEnd::Vanished(
            "the daemon stopped while starting it, and it never ran".into(),
        ));
    };
    match liveness(&shim) {
        Liveness::Alive => match ExitWatch::open(&shim) {
            Ok(Some(watch)) => return Found::Alive(watch),
            Ok(None) => {} // exited between the two looks: settled below
            Err(err) => warn!("cannot watch shim {}: {err}", shim.pid),
        },
        Liveness::Zombie | Liveness::Gone | Liveness::Reused => {}
    }
    // The shim is gone (or is a stranger now). Its status file may have landed meanwhile.
    match read_end(files, "") {
        ProcessEnd::Finished(finished) => Found::Ended(ProcessEnd::Finished(finished)),
        ProcessEnd::Vanished(_) => {
            // The stage process may outlive its shim; it is ours only if its identity matches.
            let orphan = process.as_ref().filter(|p| liveness(p) == Liveness::Alive);
            let why = match orphan {
                Some(process) => {
                    signal_group(process, Signal::KILL);
                    format!("its shim vanished; killed the orphaned process group {}", process.pid)
                }
                None if liveness(&shim) == Liveness::Reused => {
                    format!(
                        "process vanished while the daemon was down (pid {} now belongs to another process)",
                        shim.pid
                    )
                }
                None => "process vanished while the daemon was down, leaving no exit status".to_string(),
            };
            Found::Ended(ProcessEnd::Vanished(why))
        }
    }
}
