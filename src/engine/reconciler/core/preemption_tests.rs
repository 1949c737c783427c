use super::*;
use crate::engine::reconciler::core::testing::{gpus, run};
use RunState as S;

const PREEMPTIBLE: &str = "preemptible: true\nmin_runtime: 1m\nmax_preemptions: 2\n";
const MIN: Millis = 60_000;

fn checkpoint(step: i64, path: Option<&str>, at: Millis) -> Checkpoint {
    Checkpoint { attempt: 1, step, path: path.map(str::to_string), weights: None, at }
}

#[test]
fn events_name_what_was_taken() {
    let gpu = vec![("gpu".to_string(), vec!["2".to_string()])];
    assert_eq!(amounts(&gpu), "1 gpu unit");
    assert_eq!(named_units(&gpu), "gpu unit 2");
    let both = vec![("gpu".to_string(), vec!["0".to_string(), "3".to_string()]), (SLOT.to_string(), vec![])];
    assert_eq!(amounts(&both), "2 gpu units and a parallel slot");
    assert_eq!(named_units(&both), "gpu units 0,3 and a parallel slot");
}

#[test]
fn while_victims_stop_for_a_pending_run_runs_below_it_wait() {
    let urgent = run(9, "", S::Pending, 10, None);
    let mut victim = run(1, PREEMPTIBLE, S::Stopping, 0, Some(0));
    victim.params.preempted_by = Some(urgent.id);
    let plain_stop = run(2, PREEMPTIBLE, S::Stopping, 0, Some(0));
    // (supervised, the urgent runs as the store holds them) -> floor
    assert_eq!(urgent_runs([&victim, &plain_stop]), BTreeSet::from([urgent.id]));
    assert_eq!(floor([&urgent]), Some(10));
    let claimed = Run { state: S::Starting, ..urgent.clone() };
    assert_eq!(floor([&claimed]), None, "once it is claimed, the queue is open again");
    assert_eq!(urgent_runs([&plain_stop]), BTreeSet::new(), "a plain stop names no one");
    // A requeued victim (pending again) names no one, whatever its params kept.
    let requeued = Run { state: S::Pending, ..victim.clone() };
    assert_eq!(urgent_runs([&requeued]), BTreeSet::new());
    assert!(under_way([&victim], false));
    assert!(!under_way([&plain_stop, &requeued], false));
    assert!(under_way([&plain_stop], true), "a victim asked to checkpoint first");
}

#[test]
fn the_shortage_counts_free_units_and_a_slot_when_slots_are_short() {
    let pools = crate::model::Pools::from_specs(&["gpu=0,1,2,3".parse().unwrap()], None).unwrap();
    let blocked = Blocked { id: Uuid::from_u128(9), priority: 10, needs: [("gpu".to_string(), 2)].into() };
    let held: BTreeSet<String> =
        ["gpu:0", "gpu:1", "gpu:2", "port:80"].iter().map(|s| s.to_string()).collect();
    let short = shortage(&blocked, &pools, &held, false, 1, 5);
    assert_eq!((short.needed["gpu"], short.free["gpu"], short.priority, short.now), (2, 1, 10, 5));
    assert_eq!(short_pools(&short), ["gpu"]);
    let both = shortage(&blocked, &pools, &held, true, 1, 5);
    assert_eq!((both.needed[SLOT], both.free[SLOT]), (1, 0));
    assert_eq!(short_pools(&both), ["gpu", SLOT]);
    let enough = shortage(&blocked, &pools, &BTreeSet::new(), false, 1, 5);
    assert!(short_pools(&enough).is_empty());
}

#[test]
fn holders_are_the_started_runs_with_their_units() {
    let now = 10 * MIN;
    let mut running = run(1, PREEMPTIBLE, S::Running, 0, Some(0));
    running.params.units = gpus(&["1", "2"]);
    let holder = holder(&running, true, now).unwrap();
    assert_eq!(holder.units, BTreeMap::from([("gpu".to_string(), 2), (SLOT.to_string(), 1)]));
    assert_eq!((holder.preemptible, holder.started_at, holder.min_runtime), (true, 0, MIN));
    // Preempted as often as it may be: no longer preemptible.
    let mut spent = running.clone();
    spent.preemptions = 2;
    assert!(!self::holder(&spent, false, now).unwrap().preemptible);
    assert!(!self::holder(&run(2, "", S::Running, 0, Some(0)), false, now).unwrap().preemptible);
    for state in [S::Pending, S::Stopping, S::Retrying, S::Completed] {
        assert_eq!(self::holder(&run(3, PREEMPTIBLE, state, 0, Some(0)), false, now), None, "{state}");
    }
    // Not started yet (a claim in flight): its attempt counts from now.
    assert_eq!(self::holder(&run(4, PREEMPTIBLE, S::Starting, 0, None), false, now).unwrap().started_at, now);
}

#[test]
fn a_victims_move_names_the_urgent_run_what_it_gives_and_the_work_lost() {
    let urgent = Uuid::from_u128(0xabcdef12_u128 << 96);
    let mut victim = run(1, PREEMPTIBLE, S::Running, 0, Some(MIN));
    victim.params.units = gpus(&["2", "3"]);
    let gpu = vec!["gpu".to_string()];
    // (its last resumable checkpoint, now, the pools short) -> (reason, note)
    let table = [
        (
            Some(checkpoint(40, Some("s/40"), 5 * MIN)),
            6 * MIN,
            gpu.clone(),
            "preempted by run abcdef12 for 2 gpu units; ≈ 1m of work since the checkpoint at step 40 will be redone",
            "took gpu units 2,3 from run 00000000",
        ),
        // A checkpoint older than the attempt was redone already: the attempt's start counts.
        (
            Some(checkpoint(40, Some("s/40"), 0)),
            3 * MIN,
            gpu.clone(),
            "preempted by run abcdef12 for 2 gpu units; ≈ 2m of work since its attempt started will be redone",
            "took gpu units 2,3 from run 00000000",
        ),
        (
            None,
            MIN + 30_000,
            vec!["gpu".to_string(), SLOT.to_string()],
            "preempted by run abcdef12 for 2 gpu units and a parallel slot; ≈ 30s of work since its attempt started will be redone",
            "took gpu units 2,3 and a parallel slot from run 00000000",
        ),
    ];
    for (i, (last, now, short, reason, note)) in table.into_iter().enumerate() {
        let decided = victim_move(&victim, urgent, &short, last.as_ref(), now).unwrap();
        assert_eq!((decided.reason.as_str(), decided.note.as_str()), (reason, note), "row {i}");
        assert_eq!(decided.params.preempted_by, Some(urgent), "row {i}");
        assert_eq!(decided.params.preempted_at, Some(now), "row {i}: when it was told to stop");
        assert_eq!(decided.params.units, victim.params.units, "row {i}: it holds its units until it is gone");
    }
    // A run that moved meanwhile (a stop request, its end) is not preempted.
    for state in [S::Stopping, S::Completed, S::Pending] {
        let moved = Run { state, ..victim.clone() };
        assert_eq!(victim_move(&moved, urgent, &gpu, None, MIN), None, "{state}");
    }
}

#[test]
fn a_requeue_counts_the_work_to_the_last_stage_end_so_downtime_is_not_added() {
    let source = "checkpoints: {log: {stage: trainer, pattern: 'ckpt (?P<step>\\d+) (?P<path>\\S+)'}}\n";
    let urgent = Uuid::from_u128(0x1234abcd_u128 << 96);
    let mut victim = run(1, &format!("{PREEMPTIBLE}{source}"), S::Stopping, 0, Some(0));
    victim.params.preempted_by = Some(urgent);
    victim.params.units = gpus(&["0"]);
    victim.attempt = 1;
    let saved = [checkpoint(10, Some("s/10"), 2 * MIN), checkpoint(12, None, 3 * MIN)];
    let (exited, lost_at) = (|at| Some(StageEnd::Exited(at)), |at| Some(StageEnd::Lost(at)));
    const GRACE: Millis = 30_000;
    // (told to stop at, stages' ends, now) -> lost: its stages ended at 5m; a daemon down until
    // 60m adds nothing.
    let table = [
        (Some(4 * MIN), vec![exited(4 * MIN), exited(5 * MIN)], 5 * MIN, 3 * MIN),
        (Some(4 * MIN), vec![exited(4 * MIN), exited(5 * MIN)], 60 * MIN, 3 * MIN),
        // A stage's end in the future (a skewed clock) counts as now.
        (Some(4 * MIN), vec![exited(90 * MIN)], 6 * MIN, 4 * MIN),
        // No stage ever ended (none started): now.
        (Some(4 * MIN), vec![None], 7 * MIN, 5 * MIN),
        // Lost without a status, noticed while a daemon watched (before its grace was over).
        (Some(4 * MIN), vec![lost_at(4 * MIN + 10_000)], 5 * MIN, 2 * MIN + 10_000),
        // Lost while the daemon was down, noticed at its restart at 60m: to its stop and grace.
        (Some(4 * MIN), vec![lost_at(60 * MIN)], 60 * MIN, 2 * MIN + GRACE),
        (Some(4 * MIN), vec![exited(4 * MIN + 5_000), lost_at(60 * MIN)], 60 * MIN, 2 * MIN + GRACE),
        // A decision of an older daemon, its time not recorded: when it was noticed.
        (None, vec![lost_at(60 * MIN)], 60 * MIN, 58 * MIN),
    ];
    for (i, (stopped_at, ended, now, lost)) in table.into_iter().enumerate() {
        victim.params.preempted_at = stopped_at;
        let back = requeue(&victim, &ended, GRACE, &saved, now);
        assert_eq!(back.lost, lost, "row {i}");
        assert_eq!(back.reason, "queued again after its preemption by run 1234abcd");
        assert_eq!(back.note, "attempt 2 resumes from step 10 (s/10)");
        assert_eq!(back.params.preempted_by, None, "the requeue clears the decision");
        assert_eq!(back.params.preempted_at, None, "and when it was taken");
    }
    // The workflow names no checkpoints: from step 0, said so; work since the attempt started.
    let mut plain = run(2, PREEMPTIBLE, S::Stopping, 0, Some(MIN));
    plain.params.preempted_by = Some(urgent);
    let back = requeue(&plain, &[Some(StageEnd::Exited(3 * MIN))], 0, &[], 9 * MIN);
    assert_eq!(
        (back.lost, back.note.as_str()),
        (2 * MIN, "attempt 2 starts from step 0: the workflow names no checkpoints")
    );
    assert_eq!(back.params.preempted_by, None);
}

#[test]
fn a_preemption_asks_victims_that_name_a_signal_to_checkpoint_and_stops_the_others() {
    let pools = Pools::from_specs(&["gpu=0,1".parse().unwrap()], None).unwrap();
    let mut urgent = run(9, "needs: {gpu: 2}\n", S::Pending, 10, None);
    urgent.params.needs = urgent.spec.needs.clone();
    let asked = "preempt_signal: SIGUSR1\npreempt_wait: 30s\n";
    let mut a = run(1, &format!("{PREEMPTIBLE}{asked}"), S::Running, 0, Some(0));
    a.params.units = gpus(&["0"]);
    let mut b = run(2, PREEMPTIBLE, S::Running, 0, Some(0));
    b.params.units = gpus(&["1"]);
    let held: BTreeSet<String> =
        [&a, &b].iter().flat_map(|r| crate::model::pool::resources(r.units()).collect::<Vec<_>>()).collect();
    let now = 10 * MIN;
    let short = shortage(&Blocked::of(&urgent), &pools, &held, false, 1, now);
    let holders: Vec<_> = [&a, &b].iter().filter_map(|r| holder(r, false, now)).collect();
    let runs = |id: Uuid| [&a, &b].into_iter().find(|r| r.id == id);
    let gpu = vec!["gpu".to_string()];
    assert_eq!(
        plan(urgent.id, &short, &holders, runs),
        [
            Action::Ask {
                victim: a.id,
                urgent: urgent.id,
                short: gpu.clone(),
                signal: crate::workflow::PreemptSignal::Usr1,
                wait: std::time::Duration::from_secs(30),
                note: "asked to checkpoint now (SIGUSR1) before its preemption by run 00000000: stopped at its next checkpoint, or in 30s".into(),
            },
            Action::Stop { victim: b.id, urgent: urgent.id, short: gpu },
        ]
    );
    // Nothing frees enough (b is protected by its priority): no action.
    let higher = Run { priority: 20, ..b.clone() };
    let holders: Vec<_> = [&a, &higher].iter().filter_map(|r| holder(r, false, now)).collect();
    assert_eq!(plan(urgent.id, &short, &holders, runs), []);
    // The wait is over: stopped only while the urgent run still waits.
    assert!(ask_over(Some(&urgent)));
    assert!(!ask_over(Some(&Run { state: S::Starting, ..urgent.clone() })));
    assert!(!ask_over(None), "gone (stopped and deleted)");
}
