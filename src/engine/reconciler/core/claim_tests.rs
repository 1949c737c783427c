use super::*;
use crate::engine::reconciler::core::testing::run;
use crate::model::{Pools, RunState};

const NEEDS2: &str = "needs: {gpu: 2}\n";

fn pools() -> Pools {
    Pools::from_specs(&["gpu=0,1,2,3".parse().unwrap()], None).unwrap()
}

fn picker<'a>(pools: &'a Pools, free: usize, held: &[&str]) -> Picker<'a> {
    Picker {
        free,
        preempting: true,
        floor: None,
        held: held.iter().map(|s| s.to_string()).collect(),
        pools,
        sweeps: BTreeMap::new(),
        runs_dir: Path::new("/node/runs"),
        taken: 0,
        blocked: None,
    }
}

fn queued(n: u128, tail: &str, priority: i64) -> Run {
    let mut run = run(n, tail, RunState::Pending, priority, None);
    run.params.needs = run.spec.needs.clone();
    run
}

/// A port allocator that hands out 9000, 9001, … (the shell binds real ones).
fn ports_from(mut next: u16) -> impl FnMut(&BTreeSet<String>, &BTreeMap<String, u16>) -> Option<u16> {
    move |held, _| {
        while held.contains(&format!("port:{next}")) {
            next += 1;
        }
        next += 1;
        Some(next - 1)
    }
}

/// The units a pick took, "gpu=0,1", or what it said instead.
fn taken(pick: &Pick) -> String {
    match pick {
        Pick::Take { params, .. } => params
            .units
            .iter()
            .map(|(pool, units)| format!("{pool}={}", units.join(",")))
            .collect::<Vec<_>>()
            .join(" "),
        Pick::Skip => "skip".into(),
        Pick::Stop => "stop".into(),
    }
}

#[test]
fn a_claim_never_hands_one_unit_to_two_runs() {
    let pools = pools();
    let mut picker = picker(&pools, 8, &["gpu:1"]);
    let mut auto = ports_from(9000);
    // Queue order: each takes the lowest units neither held nor taken before it in the claim.
    let got: Vec<String> = [
        queued(1, NEEDS2, 0),
        queued(2, "needs: {gpu: 1}\n", 0),
        queued(3, NEEDS2, 0),
        queued(4, "needs: {gpu: 0}\n", 0),
    ]
    .iter()
    .map(|r| taken(&picker.pick(r, true, &mut auto)))
    .collect();
    assert_eq!(got, ["gpu=0,2", "gpu=3", "skip", "gpu="]);
    assert_eq!(
        picker.blocked.as_ref().map(|b| b.id),
        Some(Uuid::from_u128(3)),
        "the first run short of units"
    );
    assert_eq!(picker.taken, 3);
}

#[test]
fn each_queued_run_is_taken_skipped_or_ends_the_claim() {
    let pools = pools();
    let sweep = Uuid::from_u128(77);
    let member = |n, room: bool| {
        let mut run = queued(n, "", 0);
        run.params.sweep = Some(crate::model::sweep::MemberOf { sweep, k: n as u64 });
        (run, room)
    };
    // (the picker's state, the run, its labels fit) -> pick
    let cases: Vec<(&str, Picker, Run, bool, &str)> = vec![
        ("labels do not fit", picker(&pools, 1, &[]), queued(1, "", 0), false, "skip"),
        ("no slot left", picker(&pools, 0, &[]), queued(1, "", 0), true, "stop"),
        (
            "below the floor",
            Picker { floor: Some(5), ..picker(&pools, 1, &[]) },
            queued(1, "", 4),
            true,
            "skip",
        ),
        ("at the floor", Picker { floor: Some(5), ..picker(&pools, 1, &[]) }, queued(1, "", 5), true, ""),
        (
            "an exclusive label held",
            picker(&pools, 1, &["lock"]),
            queued(1, "resources: [lock]\n", 0),
            true,
            "skip",
        ),
        (
            "a unit another run holds as a label",
            picker(&pools, 1, &["gpu:0"]),
            queued(1, "needs: {gpu: 1}\n", 0),
            true,
            "gpu=1",
        ),
        (
            "a fixed port held",
            picker(&pools, 1, &["port:8000"]),
            queued(1, "ports: {api: 8000}\n", 0),
            true,
            "skip",
        ),
        ("an auto port", picker(&pools, 1, &["port:9000"]), queued(1, "ports: {api: auto}\n", 0), true, ""),
        (
            "a sweep with room",
            Picker {
                sweeps: [(sweep, SweepRoom { max_live: 2, in_flight: 1 })].into(),
                ..picker(&pools, 2, &[])
            },
            member(1, true).0,
            true,
            "",
        ),
        (
            "a sweep at max_live",
            Picker {
                sweeps: [(sweep, SweepRoom { max_live: 1, in_flight: 1 })].into(),
                ..picker(&pools, 2, &[])
            },
            member(2, false).0,
            true,
            "skip",
        ),
    ];
    for (what, mut picker, run, fits, want) in cases {
        let got = picker.pick(&run, fits, &mut ports_from(9000));
        assert_eq!(taken(&got), want, "{what}");
    }
}

#[test]
fn a_taken_run_gets_its_ports_units_and_this_nodes_run_dir_and_no_old_preemption() {
    let pools = pools();
    let mut picker = picker(&pools, 2, &["port:9000"]);
    let mut run = queued(1, "ports: {api: auto, db: 5432}\nneeds: {gpu: 1}\n", 0);
    run.params.resolved.insert("out".into(), "/runs/1/out".into());
    run.params.preempted_by = Some(Uuid::from_u128(5));
    let Pick::Take { params, run_dir } = picker.pick(&run, true, &mut ports_from(9000)) else {
        panic!("not taken")
    };
    assert_eq!(run_dir, Path::new("/node/runs/00000000-0000-0000-0000-000000000001"));
    assert_eq!(params.resolved["out"], "/node/runs/00000000-0000-0000-0000-000000000001/out");
    assert_eq!((params.resolved["port.api"].as_str(), params.resolved["port.db"].as_str()), ("9001", "5432"));
    assert_eq!(params.preempted_by, None, "an earlier attempt's preemption is not this one's");
    assert!(
        ["port:9001", "port:5432", "gpu:0"].iter().all(|r| picker.held.contains(*r)),
        "{:?}",
        picker.held
    );
    // The next run of the claim sees them taken; a port resolved before is kept.
    let mut again = queued(2, "ports: {api: auto}\nneeds: {gpu: 1}\n", 0);
    again.params.resolved.insert("port.api".into(), "9001".into());
    assert_eq!(picker.pick(&again, true, &mut ports_from(9000)), Pick::Skip, "its port is taken");
    again.params.resolved.insert("port.api".into(), "9100".into());
    assert_eq!(taken(&picker.pick(&again, true, &mut ports_from(9000))), "gpu=1");
    assert_eq!(picker.pick(&queued(3, "", 0), true, &mut ports_from(9000)), Pick::Stop);
}

#[test]
fn a_claim_reads_the_queue_unless_it_has_no_room_and_asks_first_after_draining_it() {
    use super::{Look, drained_after, look};
    // (free slots, preempting, drained) -> look
    let table = [
        (0, false, false, Look::Nothing),
        (0, false, true, Look::Nothing),
        (0, true, false, Look::AskFirst),
        (2, false, true, Look::AskFirst),
        (2, true, true, Look::AskFirst),
        (2, false, false, Look::Claim),
        (2, true, false, Look::Claim),
    ];
    for (i, (free, preempting, drained, want)) in table.into_iter().enumerate() {
        assert_eq!(look(free, preempting, drained), want, "row {i}");
    }
    // (took, free, a run left blocked, picks lost to another writer) -> drained
    let table = [
        (1, 2, false, 0, true),
        (2, 2, false, 0, false),
        (1, 2, true, 0, false),
        (1, 2, false, 1, false),
        (0, 0, false, 0, false),
    ];
    for (i, (took, free, blocked, lost, want)) in table.into_iter().enumerate() {
        assert_eq!(drained_after(took, free, blocked, lost), want, "row {i}");
    }
}

#[test]
fn a_claimed_run_starts_unless_a_problem_fails_it_the_first_one_said() {
    use super::{Start, start};
    let lacks = ["WANDB_API_KEY".to_string()];
    let ledger = || Some("cannot record the claim: disk full".to_string());
    let after = || Some("run abc failed".to_string());
    // (ledger problem, missing credentials, dependencies' problem, attempt) -> actions
    let table = [
        (None, &[][..], None, 1, vec![Start::PrepareRunDir { clear_status: false }, Start::Drive]),
        (None, &[][..], None, 2, vec![Start::PrepareRunDir { clear_status: true }, Start::Drive]),
        (ledger(), &lacks[..], after(), 1, vec![Start::Fail("cannot record the claim: disk full".into())]),
        (
            None,
            &lacks[..],
            after(),
            1,
            vec![Start::Fail("the daemon's environment lacks WANDB_API_KEY".into())],
        ),
        (None, &[][..], after(), 2, vec![Start::Fail("run abc failed".into())]),
    ];
    for (i, (ledger, missing, after, attempt, want)) in table.into_iter().enumerate() {
        assert_eq!(start(ledger, missing, after, attempt), want, "row {i}");
    }
}
