//! What a stage's end does to its run: the completion rule, `require_total` and the retry
//! policy, by the run's state; and when a run a stage's exit decided ends.

use crate::model::{Exit, Millis, ProgressPoint, Run, RunState, RunTrigger};
use crate::workflow::retry::RetryDecision;

/// What the completion rule says of one stage's end, before the retry policy is asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing to decide: the run is stopping, retrying or over.
    Nothing,
    /// A deciding stage finished its work (subject to `require_total`).
    Finished,
    /// A failure, in words.
    Failure(String),
}

/// A stage's end, by the run's state: an exit 0 of a deciding stage is its work done whenever
/// it comes (before its start delay too: a trainer resumed at its last checkpoint exits at
/// once); an exit during start-up is a start failure only for a stage meant to stay up.
pub fn verdict(state: RunState, deciding: bool, stage: &str, what: &str, exit: Option<Exit>) -> Verdict {
    if !matches!(state, RunState::Starting | RunState::Running) {
        return Verdict::Nothing;
    }
    if deciding && exit.is_some_and(Exit::success) {
        return Verdict::Finished;
    }
    Verdict::Failure(match (state, exit) {
        (_, _) if deciding => format!("stage '{stage}' {what}"),
        (RunState::Starting, Some(_)) => format!("stage '{stage}' {what} during start-up"),
        (RunState::Starting, None) => format!("stage '{stage}' {what}"),
        _ => format!("stage '{stage}' {what} while the run was running"),
    })
}

/// Which last reading of the run's progress a stage's end takes before it is recorded, so the
/// run's last step lands before its end does (a follower's later reading of it finds the run
/// over and is dropped, and a failed run would never show where it stopped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LastReading {
    /// Nothing decided by this end: no reading.
    Skip,
    /// The followed log's or file's last lines.
    Tail,
    /// Those, or the HTTP source when the outcome hangs on the total (`require_total`).
    TailOrHttp,
}

/// The last reading for an end of `verdict`: a finished stage's (its progress watched from
/// now if it was not, the total maybe deciding), and a failure's of a run whose progress is
/// `watched` (one failing in start-up has reported no step, and gets no watcher for it).
pub fn last_reading(verdict: &Verdict, require_total: bool, watched: bool) -> LastReading {
    match verdict {
        Verdict::Nothing => LastReading::Skip,
        Verdict::Finished if require_total => LastReading::TailOrHttp,
        Verdict::Finished => LastReading::Tail,
        Verdict::Failure(_) if watched => LastReading::Tail,
        Verdict::Failure(_) => LastReading::Skip,
    }
}

/// With `require_total`, why a deciding stage's exit 0 is not a success: the last recorded step
/// has not reached the total. None when it is a success.
pub fn short_of_total(require_total: bool, last: Option<ProgressPoint>, stage: &str) -> Option<String> {
    if !require_total {
        return None;
    }
    match last {
        Some(p) if p.total.is_some_and(|t| p.step >= t) => None,
        Some(p) => Some(format!("stage '{stage}' exited 0 at step {} {}", p.step, of_total(p.total))),
        None => Some(format!("stage '{stage}' exited 0 before any step was reported")),
    }
}

/// `of 2500`, or what is known of the total.
pub fn of_total(total: Option<i64>) -> String {
    total.map_or_else(|| "of an unknown total".to_string(), |t| format!("of {t}"))
}

/// A failure of a started run: `retry` when the stage's `exit` is transient by the workflow's
/// retry policy and attempts are left (counted as the policy counts them: a preemption's
/// requeue charges none), else `fail`. None for a run not starting or running.
pub fn failure_move(run: &Run, reason: &str, exit: Option<Exit>) -> Option<(RunTrigger, String)> {
    if !matches!(run.state, RunState::Starting | RunState::Running) {
        return None;
    }
    let policy = run.spec.retry.as_ref();
    Some(
        match crate::workflow::retry::after_exit(policy, run.charged_attempts(), exit.and_then(Exit::code)) {
            RetryDecision::RetryIn(wait) => {
                let reason = format!(
                    "{reason} (transient by the retry policy): {}",
                    super::retries::next_attempt_words(run, wait)
                );
                (RunTrigger::Retry, reason)
            }
            RetryDecision::Fail => (RunTrigger::Fail, reason.to_string()),
        },
    )
}

/// The whole rule for a stage's end: the move its run makes (and why), or None. `last` is the
/// run's last recorded step, read once the stage exited (only consulted for a finished one).
pub fn end_move(
    run: &Run,
    stage: &str,
    what: &str,
    exit: Option<Exit>,
    last: Option<ProgressPoint>,
) -> Option<(RunTrigger, String)> {
    let deciding = run.spec.deciding_stages().contains(&stage);
    match verdict(run.state, deciding, stage, what, exit) {
        Verdict::Nothing => None,
        Verdict::Finished => Some(match short_of_total(run.spec.completion.require_total, last, stage) {
            Some(reason) => (RunTrigger::Fail, reason),
            None => (RunTrigger::Complete, format!("stage '{stage}' finished")),
        }),
        Verdict::Failure(reason) => failure_move(run, &reason, exit),
    }
}

/// What the shell carries out, in order, for a stage's end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Record the stage's end (its event `what`) and, with `then`, its run's move (the trigger,
    /// why, and the run's end when an exit decides it): one commit.
    Record { what: String, then: Option<(RunTrigger, String)>, ended_at: Option<Millis> },
    /// Its run moved: take the run as stored.
    Adopt,
    /// Look at what the run asks next.
    Drive,
}

/// A stage's end, as the shell read it: the run, which stage, what happened (`what`, its
/// `exit`, when it exited by its status file), and the run's last step read just before.
pub struct End<'a> {
    pub run: &'a Run,
    pub stage: &'a str,
    pub what: &'a str,
    pub exit: Option<Exit>,
    pub exited_at: Option<Millis>,
    pub last: Option<ProgressPoint>,
}

/// The actions for `end` at `now`: its record with its run's move (`end_move`; a run an exit
/// ends, ended at that exit), the move adopted, and the run driven on. An end recorded
/// already (`live` false: a repair and a watcher both reported it, or a replay) only drives.
pub fn on_end(end: &End<'_>, live: bool, now: Millis) -> Vec<Action> {
    if !live {
        return vec![Action::Drive];
    }
    let then = end_move(end.run, end.stage, end.what, end.exit, end.last);
    let moved = then.is_some();
    let ended_at = end.exited_at.filter(|_| moved).map(|at| run_end_time(at, end.run.started_at, now));
    let mut actions = vec![Action::Record { what: end.what.to_string(), then, ended_at }];
    if moved {
        actions.push(Action::Adopt);
    }
    actions.push(Action::Drive);
    actions
}

/// When a run that a stage's exit decided ends: at that exit, kept within [started, now] so
/// a skewed or forged time cannot give a negative or future duration.
pub fn run_end_time(exited_at: Millis, run_started_at: Option<Millis>, now: Millis) -> Millis {
    exited_at.min(now).max(run_started_at.unwrap_or(Millis::MIN))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RunParams;
    use crate::workflow::Workflow;
    use RunState as S;
    use uuid::Uuid;

    const OK: Option<Exit> = Some(Exit::Code(0));
    const BAD: Option<Exit> = Some(Exit::Code(3));
    const TRANSIENT: Option<Exit> = Some(Exit::Code(75));
    const KILLED: Option<Exit> = Some(Exit::Signal(9));

    /// Two stages, `api` (stays up) and `trainer` (decides).
    fn run(state: RunState, require_total: bool, retry: bool, attempt: i64) -> Run {
        let mut yaml = String::from(
            "name: t\nstages:\n  - {name: api, argv: [x]}\n  - {name: trainer, argv: [y]}\ncompletion: {stages: [trainer]",
        );
        if require_total {
            yaml.push_str(", require_total: true}\nprogress: {log: {stage: trainer, pattern: 'Step (?P<step>\\d+)/(?P<total>\\d+)'}}\n");
        } else {
            yaml.push_str("}\n");
        }
        if retry {
            yaml.push_str("retry: {max_attempts: 2, backoff: 1s, retry_on_exit_codes: [75]}\n");
        }
        let spec = Workflow::parse(std::path::Path::new("t.yaml"), &yaml).unwrap();
        let mut run = Run::queued(Uuid::nil(), spec, "/tmp/r".into(), 0, RunParams::default());
        run.state = state;
        run.attempt = attempt;
        run
    }

    fn at(step: i64, total: Option<i64>) -> Option<ProgressPoint> {
        Some(ProgressPoint { attempt: 1, step, total, at: 0 })
    }

    /// One case: the run's state, the stage that ended and how, and the move (with its reason).
    type Case = (RunState, &'static str, Option<Exit>, Option<(RunTrigger, &'static str)>);

    #[test]
    fn a_stage_end_in_each_state() {
        use RunTrigger::{Complete, Fail};
        let table: &[Case] = &[
            // A deciding stage's exit 0 completes the run however early it comes.
            (S::Starting, "trainer", OK, Some((Complete, "stage 'trainer' finished"))),
            (S::Running, "trainer", OK, Some((Complete, "stage 'trainer' finished"))),
            // A deciding stage's failure is its run's failure, in start-up or not.
            (S::Starting, "trainer", BAD, Some((Fail, "stage 'trainer' exited with code 3"))),
            (S::Running, "trainer", BAD, Some((Fail, "stage 'trainer' exited with code 3"))),
            (S::Running, "trainer", KILLED, Some((Fail, "stage 'trainer' killed by signal 9"))),
            (S::Running, "trainer", None, Some((Fail, "stage 'trainer' vanished"))),
            // A stage meant to stay up that exits, even 0, fails its run.
            (S::Starting, "api", OK, Some((Fail, "stage 'api' exited with code 0 during start-up"))),
            (S::Starting, "api", None, Some((Fail, "stage 'api' vanished"))),
            (S::Running, "api", OK, Some((Fail, "stage 'api' exited with code 0 while the run was running"))),
            // Runs that are stopping, retrying, waiting or over are not decided by an exit.
            (S::Pending, "trainer", OK, None),
            (S::Stopping, "trainer", OK, None),
            (S::Stopping, "api", BAD, None),
            (S::Retrying, "trainer", BAD, None),
            (S::Stopped, "trainer", OK, None),
            (S::Completed, "api", BAD, None),
            (S::Failed, "trainer", OK, None),
        ];
        for (state, stage, exit, want) in table {
            let what = match exit {
                Some(Exit::Code(c)) => format!("exited with code {c}"),
                Some(Exit::Signal(s)) => format!("killed by signal {s}"),
                None => "vanished".to_string(),
            };
            let got = end_move(&run(*state, false, false, 1), stage, &what, *exit, None);
            let want = want.map(|(event, reason)| (event, reason.to_string()));
            assert_eq!(got, want, "{state} {stage} {exit:?}");
        }
    }

    #[test]
    fn require_total_holds_a_finished_stage_to_the_total() {
        use RunTrigger::{Complete, Fail};
        for (state, last, want) in [
            (S::Running, at(10, Some(10)), (Complete, "stage 'trainer' finished")),
            (S::Running, at(12, Some(10)), (Complete, "stage 'trainer' finished")),
            (S::Starting, at(10, Some(10)), (Complete, "stage 'trainer' finished")),
            (S::Running, at(4, Some(10)), (Fail, "stage 'trainer' exited 0 at step 4 of 10")),
            (S::Running, at(4, None), (Fail, "stage 'trainer' exited 0 at step 4 of an unknown total")),
            (S::Starting, None, (Fail, "stage 'trainer' exited 0 before any step was reported")),
        ] {
            let got = end_move(&run(state, true, false, 1), "trainer", "exited with code 0", OK, last);
            assert_eq!(got, Some((want.0, want.1.to_string())), "{state} {last:?}");
        }
        // Without require_total the step is not asked.
        let got =
            end_move(&run(S::Running, false, false, 1), "trainer", "exited with code 0", OK, at(1, Some(9)));
        assert_eq!(got.map(|m| m.0), Some(Complete));
    }

    #[test]
    fn the_retry_policy_turns_transient_exits_into_retries_while_attempts_last() {
        use RunTrigger::{Fail, Retry};
        for (state, attempt, stage, exit, want) in [
            (S::Running, 1, "trainer", TRANSIENT, Retry),
            (S::Starting, 1, "api", TRANSIENT, Retry),
            (S::Running, 2, "trainer", TRANSIENT, Fail), // the last attempt
            (S::Running, 1, "trainer", BAD, Fail),       // not a listed code
            (S::Running, 1, "trainer", KILLED, Fail),    // signals are never transient
            (S::Running, 1, "trainer", None, Fail),      // nor a vanished stage
        ] {
            let got = end_move(&run(state, false, true, attempt), stage, "ended", exit, None);
            assert_eq!(got.as_ref().map(|m| m.0), Some(want), "{state} attempt {attempt} {stage} {exit:?}");
        }
        let (_, reason) =
            end_move(&run(S::Running, false, true, 1), "trainer", "exited with code 75", TRANSIENT, None)
                .unwrap();
        assert_eq!(
            reason,
            "stage 'trainer' exited with code 75 (transient by the retry policy): attempt 2 of 2 starts in 1s"
        );
        // A deciding stage's exit 0 is never a retry.
        let got = end_move(&run(S::Running, false, true, 1), "trainer", "exited with code 0", OK, None);
        assert_eq!(got.map(|m| m.0), Some(RunTrigger::Complete));
    }

    #[test]
    fn an_end_that_decides_its_run_reads_the_last_step_before_it_is_recorded() {
        use LastReading::{Skip, Tail, TailOrHttp};
        let failure = Verdict::Failure("stage 'trainer' exited with code 3".into());
        // (verdict, require_total, progress watched) -> reading
        let table = [
            (Verdict::Nothing, false, true, Skip),
            (Verdict::Nothing, true, true, Skip),
            (Verdict::Finished, false, false, Tail),
            (Verdict::Finished, true, false, TailOrHttp),
            (Verdict::Finished, true, true, TailOrHttp),
            // A failed run's last step is its own too: read before its end lands.
            (failure.clone(), false, true, Tail),
            (failure.clone(), true, true, Tail),
            (failure, false, false, Skip),
        ];
        for (i, (verdict, require_total, watched, want)) in table.into_iter().enumerate() {
            assert_eq!(last_reading(&verdict, require_total, watched), want, "row {i}");
        }
    }

    #[test]
    fn a_stage_end_is_recorded_with_its_runs_move_then_adopted_and_driven() {
        use Action::{Adopt, Drive, Record};
        let running = run(S::Running, false, false, 1);
        let stopping = run(S::Stopping, false, false, 1);
        let end = |run, stage, what, exit, exited_at| End { run, stage, what, exit, exited_at, last: None };
        let record = |what: &str, then: Option<(RunTrigger, &str)>, ended_at| Record {
            what: what.into(),
            then: then.map(|(t, r)| (t, r.to_string())),
            ended_at,
        };
        // (end, live) -> actions at now = 9_000
        let table = [
            (
                end(&running, "trainer", "exited with code 0", OK, Some(5_000)),
                true,
                vec![
                    record(
                        "exited with code 0",
                        Some((RunTrigger::Complete, "stage 'trainer' finished")),
                        Some(5_000),
                    ),
                    Adopt,
                    Drive,
                ],
            ),
            (
                end(&running, "trainer", "lost: gone", None, None),
                true,
                vec![
                    record("lost: gone", Some((RunTrigger::Fail, "stage 'trainer' lost: gone")), None),
                    Adopt,
                    Drive,
                ],
            ),
            // A run stopping is not decided by its stages' ends: recorded, then driven on.
            (
                end(&stopping, "api", "exited with code 0", OK, Some(5_000)),
                true,
                vec![record("exited with code 0", None, None), Drive],
            ),
            // Recorded already: only driven.
            (end(&running, "trainer", "exited with code 0", OK, Some(5_000)), false, vec![Drive]),
        ];
        for (i, (end, live, want)) in table.into_iter().enumerate() {
            assert_eq!(on_end(&end, live, 9_000), want, "row {i}");
        }
    }

    #[test]
    fn a_run_ends_at_its_deciding_exit_within_its_lifetime() {
        assert_eq!(run_end_time(1_500, Some(1_000), 9_000), 1_500, "the exit's time, not now");
        assert_eq!(run_end_time(500, Some(1_000), 9_000), 1_000, "never before it started");
        assert_eq!(run_end_time(20_000, Some(1_000), 9_000), 9_000, "never in the future");
        assert_eq!(run_end_time(1_500, None, 9_000), 1_500);
    }
}
