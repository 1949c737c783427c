//! A supervised process as the store keeps it: who it is, where it is in its life and how it
//! ended. A run's stages and an inference test's tasks share it, and record starts and ends
//! through it.

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
    /// Its shim started it: who both are, and since when. It is `state` now.
    pub fn started(
        &mut self,
        state: ProcessState,
        at: Millis,
        shim: ProcessIdentity,
        process: Option<ProcessIdentity>,
    ) {
        self.state = state;
        self.started_at = Some(at);
        self.shim = Some(shim);
        self.process = process;
    }

    /// It exited at `at` with `exit` (none when it never started: `spawn_error` says why).
    /// Returns what happened, in words for its event.
    pub fn exited(&mut self, exit: Option<Exit>, spawn_error: Option<&str>, at: Millis) -> String {
        self.state = ProcessState::Exited;
        self.exit = exit;
        self.ended_at = Some(at);
        match (exit, spawn_error) {
            (Some(exit), _) => format!("exited with {exit}"),
            (None, Some(error)) => format!("failed to start: {error}"),
            (None, None) => "exited".to_string(),
        }
    }

    /// It is gone without a recorded status. Returns what happened, in words for its event.
    pub fn lost(&mut self, why: &str, at: Millis) -> String {
        self.state = ProcessState::Lost;
        self.ended_at = Some(at);
        format!("lost: {why}")
    }
}
