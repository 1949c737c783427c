//! A Slurm stage's job as the watcher polls it: what each answer of scontrol/sacct means for
//! the stage (still waiting, running now, ended with a status, or gone), and how many failed
//! queries in a row are borne before the job counts as lost.

use crate::model::Exit;

/// Failed queries in a row before a job counts as lost.
pub const TOLERATED_FAILURES: u32 = 20;

/// What one poll of a job answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Waiting for resources, a begin time, or a requeue.
    Pending,
    /// Running, or still tearing down.
    Running,
    /// Over, with the stage's exit.
    Ended(Exit),
    /// Cancelled before it ran, or unknown to Slurm: why.
    Vanished(String),
    /// The query itself failed: its error.
    Unanswered(String),
}

/// What the watcher does after a poll.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Poll again.
    Wait,
    /// Report that the stage's job started running (once), then poll again.
    ReportRunning,
    /// Poll again after a failed query, saying it will.
    Retry { error: String },
    /// The stage ended with this exit.
    Exited(Exit),
    /// The stage is gone without a status: why.
    Lost(String),
}

/// The watcher's memory between polls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Poll {
    /// Failed queries in a row.
    pub failures: u32,
    /// Its running is still to be reported (a job just submitted, or re-attached while waiting).
    pub report_running: bool,
}

impl Poll {
    /// The step for `answer` about job `job`.
    pub fn step(&mut self, job: u64, answer: Answer) -> Step {
        if !matches!(answer, Answer::Unanswered(_)) {
            self.failures = 0;
        }
        match answer {
            Answer::Pending => Step::Wait,
            Answer::Running if std::mem::take(&mut self.report_running) => Step::ReportRunning,
            Answer::Running => Step::Wait,
            Answer::Ended(exit) => Step::Exited(exit),
            Answer::Vanished(why) => Step::Lost(format!("Slurm job {job}: {why}")),
            Answer::Unanswered(error) if self.failures < TOLERATED_FAILURES => {
                self.failures += 1;
                Step::Retry { error }
            }
            Answer::Unanswered(error) => Step::Lost(format!("Slurm job {job} can't be queried: {error}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_answer_of_slurm_moves_the_stage_as_it_means() {
        let fresh = Poll { failures: 0, report_running: true };
        let lost = |s: &str| Step::Lost(s.into());
        // (watcher before, answer) -> (step, watcher after)
        let table = [
            (fresh, Answer::Pending, Step::Wait, fresh),
            (fresh, Answer::Running, Step::ReportRunning, Poll { report_running: false, ..fresh }),
            (
                Poll { report_running: false, ..fresh },
                Answer::Running,
                Step::Wait,
                Poll { report_running: false, ..fresh },
            ),
            (fresh, Answer::Ended(Exit::Code(3)), Step::Exited(Exit::Code(3)), fresh),
            (fresh, Answer::Ended(Exit::Signal(15)), Step::Exited(Exit::Signal(15)), fresh),
            (
                fresh,
                Answer::Vanished("CANCELLED before it ran".into()),
                lost("Slurm job 7: CANCELLED before it ran"),
                fresh,
            ),
            // A failed query is borne, up to a point; an answer resets the count.
            (
                fresh,
                Answer::Unanswered("timeout".into()),
                Step::Retry { error: "timeout".into() },
                Poll { failures: 1, ..fresh },
            ),
            (Poll { failures: 5, ..fresh }, Answer::Pending, Step::Wait, fresh),
            (
                Poll { failures: TOLERATED_FAILURES, ..fresh },
                Answer::Unanswered("timeout".into()),
                lost("Slurm job 7 can't be queried: timeout"),
                Poll { failures: TOLERATED_FAILURES, ..fresh },
            ),
        ];
        for (i, (mut poll, answer, step, after)) in table.into_iter().enumerate() {
            assert_eq!((poll.step(7, answer), poll), (step, after), "row {i}");
        }
    }
}
