//! A supervised process as the store keeps it: who it is, where it is in its life and how it
//! ended. A run's stages and an inference test's tasks share it, and its state moves only by
//! its transition table (`next`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{Millis, UnknownState};

/// Where a process (a stage's or a task's) is in its own life, independent of its owner's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessState {
    /// Not started yet (or never will be, if its owner ended first).
    #[default]
    Pending,
    /// The shim is being started; its identity is not known yet.
    Spawning,
    /// Process alive, waiting for its delay or probe.
    Starting,
    /// Counted as up.
    Up,
    /// The process exited; its status is recorded.
    Exited,
    /// The process vanished without a recorded status, or could not be started.
    Lost,
}

impl ProcessState {
    pub const ALL: [ProcessState; 6] = [
        ProcessState::Pending,
        ProcessState::Spawning,
        ProcessState::Starting,
        ProcessState::Up,
        ProcessState::Exited,
        ProcessState::Lost,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ProcessState::Pending => "pending",
            ProcessState::Spawning => "spawning",
            ProcessState::Starting => "starting",
            ProcessState::Up => "up",
            ProcessState::Exited => "exited",
            ProcessState::Lost => "lost",
        }
    }

    /// A process may exist for this stage (or is about to).
    pub fn is_live(self) -> bool {
        matches!(self, ProcessState::Spawning | ProcessState::Starting | ProcessState::Up)
    }
}

impl fmt::Display for ProcessState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ProcessState {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ProcessState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownState::new("process", s, ProcessState::ALL.iter().map(|s| s.as_str())))
    }
}

/// What moves a process (a stage's or a task's) through its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProcessTrigger {
    /// Its shim is being started.
    Spawn,
    /// Starting it failed for a moment (the machine short of processes, files or memory): it
    /// waits to be started again.
    Defer,
    /// Its shim started it, or Slurm took its job: it waits for its delay or probe.
    Launch,
    /// Its delay passed or its probe answered (or it waits for nothing): it counts as up.
    Ready,
    /// A restarted daemon found it alive: one caught spawning is starting, others stay.
    Reattach,
    /// It exited, or could not be started at all.
    Exit,
    /// It vanished without a recorded status.
    Lose,
}

impl ProcessTrigger {
    pub const ALL: [ProcessTrigger; 7] = [
        ProcessTrigger::Spawn,
        ProcessTrigger::Defer,
        ProcessTrigger::Launch,
        ProcessTrigger::Ready,
        ProcessTrigger::Reattach,
        ProcessTrigger::Exit,
        ProcessTrigger::Lose,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ProcessTrigger::Spawn => "spawn",
            ProcessTrigger::Defer => "defer",
            ProcessTrigger::Launch => "launch",
            ProcessTrigger::Ready => "become ready",
            ProcessTrigger::Reattach => "be re-attached",
            ProcessTrigger::Exit => "exit",
            ProcessTrigger::Lose => "be lost",
        }
    }
}

impl fmt::Display for ProcessTrigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a {from} process cannot {trigger}")]
pub struct IllegalProcessMove {
    pub from: ProcessState,
    pub trigger: ProcessTrigger,
}

/// The state `trigger` moves a process in state `from` to, or why it can't. Only a live
/// process ends: one never spawned has nothing to exit, and an end is recorded once.
pub fn next(from: ProcessState, trigger: ProcessTrigger) -> Result<ProcessState, IllegalProcessMove> {
    use ProcessState as S;
    use ProcessTrigger as T;
    let to = match (from, trigger) {
        (S::Pending, T::Spawn) => S::Spawning,
        (S::Spawning, T::Defer) => S::Pending,
        (S::Spawning, T::Launch) => S::Starting,
        (S::Starting, T::Ready) => S::Up,
        (S::Spawning | S::Starting, T::Reattach) => S::Starting,
        (S::Up, T::Reattach) => S::Up,
        (S::Spawning | S::Starting | S::Up, T::Exit) => S::Exited,
        (S::Spawning | S::Starting | S::Up, T::Lose) => S::Lost,
        _ => return Err(IllegalProcessMove { from, trigger }),
    };
    Ok(to)
}

/// Who a process is: a pid alone can be reused, so a pid is only ever trusted together with
/// its start time (clock ticks since boot, /proc/PID/stat field 22) and the boot it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessIdentity {
    pub pid: i32,
    pub start_time: u64,
    pub boot_id: String,
}

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl Exit {
    pub fn success(self) -> bool {
        self == Exit::Code(0)
    }

    /// The exit code, for a process that was not ended by a signal.
    pub fn code(self) -> Option<i32> {
        match self {
            Exit::Code(code) => Some(code),
            Exit::Signal(_) => None,
        }
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(code) => write!(f, "code {code}"),
            Exit::Signal(signal) => write!(f, "signal {} ({})", signal, signal_name(*signal)),
        }
    }
}

pub fn signal_name(signal: i32) -> &'static str {
    match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => "signal",
    }
}

/// A process's life as recorded: its state, who its shim and the process are, and its end.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessRecord {
    pub state: ProcessState,
    pub shim: Option<ProcessIdentity>,
    pub process: Option<ProcessIdentity>,
    pub started_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    pub exit: Option<Exit>,
}

impl ProcessRecord {
    /// Moves it by `trigger`, as the table allows; unchanged when it does not.
    pub fn apply(&mut self, trigger: ProcessTrigger) -> Result<(), IllegalProcessMove> {
        self.state = next(self.state, trigger)?;
        Ok(())
    }

    /// Its shim started it: who both are, and since when. It waits for its delay or probe now.
    pub fn started(
        &mut self,
        at: Millis,
        shim: ProcessIdentity,
        process: Option<ProcessIdentity>,
    ) -> Result<(), IllegalProcessMove> {
        self.apply(ProcessTrigger::Launch)?;
        self.started_at = Some(at);
        self.shim = Some(shim);
        self.process = process;
        Ok(())
    }

    /// It exited at `at` with `exit` (none when it never started: `spawn_error` says why).
    /// Returns what happened, in words for its event.
    pub fn exited(
        &mut self,
        exit: Option<Exit>,
        spawn_error: Option<&str>,
        at: Millis,
    ) -> Result<String, IllegalProcessMove> {
        self.apply(ProcessTrigger::Exit)?;
        self.exit = exit;
        self.ended_at = Some(at);
        Ok(match (exit, spawn_error) {
            (Some(exit), _) => format!("exited with {exit}"),
            (None, Some(error)) => format!("failed to start: {error}"),
            (None, None) => "exited".to_string(),
        })
    }

    /// It is gone without a recorded status. Returns what happened, in words for its event.
    pub fn lost(&mut self, why: &str, at: Millis) -> Result<String, IllegalProcessMove> {
        self.apply(ProcessTrigger::Lose)?;
        self.ended_at = Some(at);
        Ok(format!("lost: {why}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProcessState as S;
    use ProcessTrigger as T;

    /// Every legal move, written out: `next` must agree on every (state, trigger) pair.
    const LEGAL: &[(ProcessState, ProcessTrigger, ProcessState)] = &[
        (S::Pending, T::Spawn, S::Spawning),
        (S::Spawning, T::Defer, S::Pending),
        (S::Spawning, T::Launch, S::Starting),
        (S::Starting, T::Ready, S::Up),
        (S::Spawning, T::Reattach, S::Starting),
        (S::Starting, T::Reattach, S::Starting),
        (S::Up, T::Reattach, S::Up),
        (S::Spawning, T::Exit, S::Exited),
        (S::Starting, T::Exit, S::Exited),
        (S::Up, T::Exit, S::Exited),
        (S::Spawning, T::Lose, S::Lost),
        (S::Starting, T::Lose, S::Lost),
        (S::Up, T::Lose, S::Lost),
    ];

    #[test]
    fn the_table_is_exactly_the_legal_moves() {
        for from in ProcessState::ALL {
            for trigger in ProcessTrigger::ALL {
                let expected = LEGAL.iter().find(|(f, t, _)| *f == from && *t == trigger).map(|m| m.2);
                match (next(from, trigger), expected) {
                    (Ok(to), Some(want)) => assert_eq!(to, want, "{from} --{trigger}-->"),
                    (Err(err), None) => assert_eq!(err, IllegalProcessMove { from, trigger }),
                    (got, want) => panic!("{from} --{trigger}--> gave {got:?}, table says {want:?}"),
                }
            }
        }
    }

    #[test]
    fn an_ended_process_stays_ended_and_only_a_pending_one_spawns() {
        for from in [S::Exited, S::Lost] {
            assert!(ProcessTrigger::ALL.into_iter().all(|t| next(from, t).is_err()), "{from} moved");
        }
        for trigger in ProcessTrigger::ALL {
            let to_spawning = ProcessState::ALL.into_iter().filter(|f| next(*f, trigger) == Ok(S::Spawning));
            assert!(to_spawning.eq((trigger == T::Spawn).then_some(S::Pending)), "{trigger}");
        }
    }

    #[test]
    fn an_illegal_move_leaves_the_record_as_it_was() {
        let mut record = ProcessRecord::default();
        let err = record.exited(Some(Exit::Code(0)), None, 5).unwrap_err();
        assert_eq!(err.to_string(), "a pending process cannot exit");
        assert_eq!(record, ProcessRecord::default());
        record.apply(T::Spawn).unwrap();
        assert_eq!(record.exited(None, Some("no such file"), 7).unwrap(), "failed to start: no such file");
        assert_eq!((record.state, record.ended_at), (S::Exited, Some(7)));
    }
}
