//! Node leases: what becomes of a lost node's runs (failed, or queued again by the retry
//! policy; an ended one's stages released), and of a claim this node remembers in its ledger
//! but no longer holds after a restart.

use std::time::Duration;

use crate::model::{AfterStop, Millis, Run, RunState};
use crate::workflow::retry::{RetryDecision, after_node_lost};

/// What the reaper does with one run of a lost node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reap {
    /// Fails it (or, stopping, stops it) with the node's loss as the reason.
    Fail { reason: String },
    /// Queues its next attempt, not claimed before `not_before` (resuming where it can: the
    /// shell reads its checkpoints).
    Requeue { reason: String, not_before: Millis },
    /// A preemption's victim still stopping: queued again as its preemption promised (not
    /// charged to its retry policy; the shell weighs it with `preemption::requeue`), however
    /// the node that stopped it was lost.
    Preempted,
    /// An ended run whose stages were still being stopped: they are lost with the node.
    Release,
}

/// How often a node renews its lease: a few beats per lease, so one slow write does not cost
/// it; never more often than every 50 ms.
pub fn beat_every(lease: Duration) -> Duration {
    (lease / 4).max(Duration::from_millis(50))
}

/// Whether node `node`, last heard from at `heartbeat_at` under a lease of `lease_ms`, is
/// lost at `now` for the node `me` that looks (a node never reaps itself: its own lease is
/// renewed, or lost and taken again, by its heartbeat).
pub fn is_lost(node: &str, me: &str, heartbeat_at: Millis, lease_ms: Millis, now: Millis) -> bool {
    node != me && heartbeat_at.saturating_add(lease_ms) < now
}

/// Why a lost node's runs are settled: its id, its silence and its lease.
pub fn node_lost_reason(node: &str, silent: Duration, lease: Duration) -> String {
    format!(
        "node lost: node '{node}' sent no heartbeat for {:.1}s (lease {})",
        silent.as_secs_f64(),
        crate::workflow::Dur(lease),
    )
}

/// What becomes of `run`, held by a node lost for `why`, at `now`.
pub fn reap(run: &Run, why: &str, now: Millis) -> Reap {
    if run.state.is_terminal() {
        return Reap::Release;
    }
    if run.state == RunState::Stopping {
        // A pbt loser (stopping to continue from its donor) ends stopped with its mark, and
        // the sweep's pass queues it again from there; a victim is queued again here.
        return match run.after_stop() {
            AfterStop::Preempted => Reap::Preempted,
            AfterStop::Stopped | AfterStop::Exploited => Reap::Fail { reason: why.to_string() },
        };
    }
    match after_node_lost(run.spec.retry.as_ref(), run.charged_attempts()) {
        RetryDecision::RetryIn(wait) => Reap::Requeue {
            reason: format!(
                "{why}; queued again as attempt {} (retry policy), not before {}",
                run.attempt + 1,
                crate::workflow::Dur(wait)
            ),
            not_before: now.saturating_add(wait.as_millis() as Millis),
        },
        RetryDecision::Fail => Reap::Fail { reason: why.to_string() },
    }
}

/// A claim in this node's ledger, at its (re)join.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimFate {
    /// The store says this node still holds it: supervised as any run.
    Held,
    /// Of the node's own previous lease, never reaped, and the run no longer held: the daemon
    /// let it go itself and died before it forgot the line. Forgotten (leftovers killed).
    Released,
    /// Under a token that no longer holds the run (the node was reaped meanwhile): proved
    /// stale by a write under it, leftovers killed, an event said.
    Stale,
}

/// The fate of a ledger claim under `token`, given whether the node holds it now and the
/// previous lease its registration adopted.
pub fn claim_fate(held: bool, token: i64, previous: Option<i64>) -> ClaimFate {
    match (held, previous == Some(token)) {
        (true, _) => ClaimFate::Held,
        (false, true) => ClaimFate::Released,
        (false, false) => ClaimFate::Stale,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::reconciler::core::testing::run;
    use RunState as S;

    const RETRY: &str = "retry: {max_attempts: 2, backoff: 30s, on_node_lost: true}\n";
    const WHY: &str = "node lost: node 'b' sent no heartbeat for 12.0s (lease 10s)";

    #[test]
    fn a_lost_nodes_runs_fail_or_queue_again_by_their_retry_policy() {
        let requeue = |attempt: i64| Reap::Requeue {
            reason: format!("{WHY}; queued again as attempt {} (retry policy), not before 30s", attempt + 1),
            not_before: 31_000,
        };
        let fail = Reap::Fail { reason: WHY.into() };
        // (workflow tail, state, attempt, preemptions) -> reap at 1_000
        let table = [
            ("", S::Running, 1, 0, fail.clone()),
            (RETRY, S::Running, 1, 0, requeue(1)),
            (RETRY, S::Starting, 1, 0, requeue(1)),
            (RETRY, S::Retrying, 1, 0, requeue(1)),
            (RETRY, S::Running, 2, 0, fail.clone()),
            // A preemption charged no attempt: one is left.
            (RETRY, S::Running, 2, 1, requeue(2)),
            // A stop asked for is a stop, node or no node.
            (RETRY, S::Stopping, 1, 0, fail.clone()),
            (RETRY, S::Completed, 1, 0, Reap::Release),
            ("", S::Failed, 1, 0, Reap::Release),
        ];
        for (i, (tail, state, attempt, preemptions, want)) in table.into_iter().enumerate() {
            let mut lost = run(1, tail, state, 0, Some(0));
            (lost.attempt, lost.preemptions) = (attempt, preemptions);
            assert_eq!(reap(&lost, WHY, 1_000), want, "row {i}");
        }
        // A preemption's victim, stopping, is queued again as its preemption promised; a pbt
        // loser, stopping, ends stopped with its mark (the sweep's pass continues it).
        let mut victim = run(1, RETRY, S::Stopping, 0, Some(0));
        victim.params.preempted_by = Some(uuid::Uuid::from_u128(9));
        assert_eq!(reap(&victim, WHY, 1_000), Reap::Preempted);
        let mut loser = run(1, RETRY, S::Stopping, 0, Some(0));
        loser.params.exploit_interval = Some(2);
        assert_eq!(reap(&loser, WHY, 1_000), fail);
        assert_eq!(node_lost_reason("b", Duration::from_millis(12_040), Duration::from_secs(10)), WHY);
    }

    #[test]
    fn a_node_beats_a_few_times_per_lease_and_is_lost_once_it_lapsed() {
        // (lease) -> beat
        for (lease, beat) in [(10_000, 2_500), (1_000, 250), (100, 50), (0, 50)] {
            assert_eq!(beat_every(Duration::from_millis(lease)), Duration::from_millis(beat), "{lease}");
        }
        // (node, heard at, now) -> lost, for node 'a' looking, leases of 10 s
        let table = [
            ("b", 0, 10_000, false),
            ("b", 0, 10_001, true),
            ("b", 5_000, 10_001, false),
            ("a", 0, 99_000, false),
        ];
        for (i, (node, heard, now, lost)) in table.into_iter().enumerate() {
            assert_eq!(is_lost(node, "a", heard, 10_000, now), lost, "row {i}");
        }
    }

    #[test]
    fn a_remembered_claim_is_held_released_or_stale() {
        assert_eq!(claim_fate(true, 3, Some(3)), ClaimFate::Held);
        assert_eq!(claim_fate(true, 1, None), ClaimFate::Held);
        assert_eq!(claim_fate(false, 3, Some(3)), ClaimFate::Released);
        assert_eq!(claim_fate(false, 2, Some(3)), ClaimFate::Stale);
        assert_eq!(claim_fate(false, 2, None), ClaimFate::Stale);
    }
}
