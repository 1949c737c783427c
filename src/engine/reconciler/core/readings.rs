//! What a run's readings count for: where an attempt's metric worker starts reading its source,
//! which readings are this attempt's (dedupe across attempts: the rows below the step it
//! resumed at are an earlier attempt's, kept by a trainer that rewrote the file), when landed
//! readings are news to the sweep decider and when a reading that is no number is said, how a
//! worker carries on after a batch or a failed write; and, for checkpoint lines, when the
//! worker reads on and when a recorded checkpoint lets a preemption go ahead. Rows are keyed
//! (metric readings by run, name, attempt and step; checkpoints by their line), so a file read
//! again after a restart records nothing twice: that is the store's, not decided here.

use std::time::Duration;

/// How often a followed file is looked at for new lines, and the unit of a failed write's wait.
pub const METRICS_FOLLOW: Duration = Duration::from_millis(500);
/// Failed writes of a batch after which a finishing worker gives up (a running one keeps it).
pub const FINAL_TRIES: u32 = 5;

/// Where an attempt's metric worker starts reading its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadFrom {
    /// A stage's log: where the log stood when this attempt's stage started.
    LogStart(u64),
    /// Where the file stood when the attempt's first stage started (kept by the loop then).
    Kept,
    /// A first attempt's file: from its start.
    Start,
    /// A later attempt's, with no mark kept (the daemon restarted since): where it stands now.
    Now,
}

/// Where to read from: a log's start for this attempt first, then the mark kept at the
/// attempt's start, else the file's start (first attempt) or where it stands (a later one).
pub fn read_from(log_start: Option<u64>, kept: bool, attempt: i64) -> ReadFrom {
    match (log_start, kept) {
        (Some(start), _) => ReadFrom::LogStart(start),
        (None, true) => ReadFrom::Kept,
        (None, false) if attempt == 1 => ReadFrom::Start,
        (None, false) => ReadFrom::Now,
    }
}

/// The lowest step an attempt keeps: the step it resumed at (below it, an earlier attempt's
/// rows), or any.
pub fn from_step(resumed_at: Option<i64>) -> i64 {
    resumed_at.unwrap_or(i64::MIN)
}

/// Whether readings that landed are news to the sweep decider: some are of the sweep's metric,
/// or its metric is not known (then any is).
pub fn news_for_sweep<'n>(metric: Option<&str>, mut names: impl Iterator<Item = &'n str>) -> bool {
    match metric {
        Some(metric) => names.any(|name| name == metric),
        None => true,
    }
}

/// Whether a reading of the sweep's metric that is no number is said now: a member's, at this
/// attempt's steps, and not said yet this attempt (a trainer that writes it as text writes it
/// each step).
pub fn say_not_a_number(member: bool, step: i64, from_step: i64, said: bool) -> bool {
    member && step >= from_step && !said
}

/// What a metric worker does after a write of its batch failed `failures` times in a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterFailure {
    /// Tries again after this wait (longer each time, within bounds).
    Retry(Duration),
    /// Its run has left `running` and the store still refuses: the rest is given up, said once.
    GiveUp,
}

pub fn after_failure(failures: u32, finishing: bool) -> AfterFailure {
    if finishing && failures >= FINAL_TRIES {
        return AfterFailure::GiveUp;
    }
    AfterFailure::Retry(METRICS_FOLLOW * failures.clamp(1, 20))
}

/// What a metric worker does after a batch was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterBatch {
    /// The file has more: read on at once.
    ReadOn,
    /// Read to its end with the run no longer running: the worker ends.
    End,
    /// Read to its end: wait for more lines, or for the run to leave `running`.
    Wait,
}

/// `finishing` was sampled before the batch was read, so a batch read after the ask read the
/// last lines.
pub fn after_batch(more: bool, finishing: bool) -> AfterBatch {
    match (more, finishing) {
        (true, _) => AfterBatch::ReadOn,
        (false, true) => AfterBatch::End,
        (false, false) => AfterBatch::Wait,
    }
}

/// Whether a checkpoint worker reads its next slice: only once the loop recorded the last one
/// (its checkpoints and any malformed line's problem), so what is read but not recorded stays
/// one slice.
pub fn checkpoints_read_on(unrecorded: usize, problem_unsaid: bool) -> bool {
    unrecorded == 0 && !problem_unsaid
}

/// Whether recorded checkpoints let a preemption go ahead: its victim was asked to checkpoint
/// first, and has.
pub fn preemption_due(recorded: usize, asked_to_checkpoint: bool) -> bool {
    recorded > 0 && asked_to_checkpoint
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempts_worker_reads_from_its_own_start() {
        // (log start, mark kept, attempt) -> read from
        let table = [
            (Some(4_096), true, 3, ReadFrom::LogStart(4_096)),
            (Some(0), false, 1, ReadFrom::LogStart(0)),
            (None, true, 2, ReadFrom::Kept),
            (None, true, 1, ReadFrom::Kept),
            (None, false, 1, ReadFrom::Start),
            (None, false, 2, ReadFrom::Now),
        ];
        for (i, (log_start, kept, attempt, want)) in table.into_iter().enumerate() {
            assert_eq!(read_from(log_start, kept, attempt), want, "row {i}");
        }
    }

    #[test]
    fn readings_below_the_resumed_step_are_an_earlier_attempts() {
        // (resumed at, step) -> kept by this attempt
        let table = [(None, i64::MIN, true), (None, 0, true), (Some(20), 19, false), (Some(20), 20, true)];
        for (i, (resumed, step, kept)) in table.into_iter().enumerate() {
            assert_eq!(step >= from_step(resumed), kept, "row {i}");
        }
        // And a value that is no number below it is not said either.
        assert!(!say_not_a_number(true, 19, from_step(Some(20)), false));
    }

    #[test]
    fn the_sweep_decider_hears_of_its_metric_and_a_bad_value_once() {
        let names = ["loss", "lr"];
        // (the sweep's metric) -> news
        let table = [(Some("loss"), true), (Some("reward"), false), (None, true)];
        for (metric, news) in table {
            assert_eq!(news_for_sweep(metric, names.iter().copied()), news, "{metric:?}");
        }
        assert!(!news_for_sweep(Some("loss"), std::iter::empty()));
        // (member, step, from step, said) -> say
        let table = [
            (true, 5, 0, false, true),
            (true, 5, 0, true, false),
            (false, 5, 0, false, false),
            (true, -1, 0, false, false),
        ];
        for (i, (member, step, from, said, say)) in table.into_iter().enumerate() {
            assert_eq!(say_not_a_number(member, step, from, said), say, "row {i}");
        }
    }

    #[test]
    fn a_worker_waits_longer_after_each_failed_write_and_gives_up_only_when_finishing() {
        // (failures, finishing) -> next
        let table = [
            (1, false, AfterFailure::Retry(METRICS_FOLLOW)),
            (2, false, AfterFailure::Retry(METRICS_FOLLOW * 2)),
            (100, false, AfterFailure::Retry(METRICS_FOLLOW * 20)),
            (4, true, AfterFailure::Retry(METRICS_FOLLOW * 4)),
            (FINAL_TRIES, true, AfterFailure::GiveUp),
        ];
        for (failures, finishing, want) in table {
            assert_eq!(
                after_failure(failures, finishing),
                want,
                "{failures} failures, finishing {finishing}"
            );
        }
        // (more, finishing) -> next
        let table = [
            (true, true, AfterBatch::ReadOn),
            (true, false, AfterBatch::ReadOn),
            (false, true, AfterBatch::End),
            (false, false, AfterBatch::Wait),
        ];
        for (more, finishing, want) in table {
            assert_eq!(after_batch(more, finishing), want, "more {more}, finishing {finishing}");
        }
    }

    #[test]
    fn checkpoints_are_read_a_slice_at_a_time_and_let_a_preemption_go_once_recorded() {
        // (unrecorded, problem unsaid) -> read on
        let table = [(0, false, true), (3, false, false), (0, true, false)];
        for (unrecorded, problem, want) in table {
            assert_eq!(checkpoints_read_on(unrecorded, problem), want, "{unrecorded} {problem}");
        }
        // (recorded, asked) -> the preemption goes ahead
        let table = [(1, true, true), (0, true, false), (2, false, false)];
        for (recorded, asked, want) in table {
            assert_eq!(preemption_due(recorded, asked), want, "{recorded} {asked}");
        }
    }
}
