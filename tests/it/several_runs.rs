//! `run stop|hold|release|resume` on several runs: ids (`pueue kill 1 2 3`) or a filter
//! (`scancel -u`); each run's outcome reported, one refused run not stopping the others, and
//! the exit code saying whether all, some or none were acted on.

use lachesis::model::RunState;
use uuid::Uuid;

use crate::support::{TestHome, stderr};

const QUICK: &str = "name: quick\nstages:\n  - {name: main, argv: [sh, -c, \"exit 0\"]}\n";

fn code(out: &std::process::Output) -> i32 {
    out.status.code().expect("an exit code")
}

#[tokio::test]
async fn several_ids_are_each_acted_on_and_a_bad_one_stops_none_of_the_others() {
    let mut home = TestHome::new();
    let [a, b, c]: [Uuid; 3] = std::array::from_fn(|_| home.submit(&["-w", "demo"]));

    let out = home.cli(&["run", "stop", &a.to_string()[..8], "zzzz", &b.to_string()]);
    assert_eq!(code(&out), 4, "some acted on, some refused: {}", stderr(&out));
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(stdout, format!("{a} stopped\n{b} stopped\n"));
    assert!(stderr(&out).contains("lachesis: no run matches 'zzzz'"), "{}", stderr(&out));
    assert_eq!(home.run(a).await.state, RunState::Stopped);
    assert_eq!(home.run(b).await.state, RunState::Stopped);
    assert_eq!(home.run(c).await.state, RunState::Pending);

    // Every one refused: 3, as one refused id always exited; the ended runs are said so.
    let out = home.cli(&["run", "hold", &a.to_string(), "nope"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).is_empty());
    assert_eq!(stderr(&out).lines().count(), 2, "{}", stderr(&out));

    // --json: an array of outcomes, in the order given, the same run given twice acted on once.
    let out =
        home.cli(&["run", "resume", "--json", &a.to_string(), "nope", &a.to_string()[..6], &b.to_string()]);
    assert_eq!(code(&out), 4);
    let outcomes: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let outcomes = outcomes.as_array().unwrap();
    assert_eq!(outcomes.len(), 3, "{outcomes:?}");
    assert_eq!(outcomes[0]["run"]["state"], "pending");
    assert_eq!(outcomes[0]["run"]["attempt"], 2);
    assert_eq!(outcomes[1]["target"], "nope");
    assert_eq!(outcomes[1]["error"], "no run matches 'nope'");
    assert_eq!(outcomes[2]["target"], b.to_string());
    assert_eq!(outcomes[2]["run"]["state"], "pending");

    // One id: one object, as before.
    let out = home.cli_ok(&["run", "hold", "--json", &c.to_string()]);
    let run: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(run["id"], c.to_string());
    assert!(run["held_at"].is_i64(), "{run}");
}

#[tokio::test]
async fn filters_pick_only_the_runs_the_command_applies_to() {
    let mut home = TestHome::new();
    home.workflow("quick", QUICK);
    let quick: Vec<Uuid> = (0..3).map(|_| home.submit(&["-w", "quick"])).collect();
    let demo: Vec<Uuid> = (0..2).map(|_| home.submit(&["-w", "demo"])).collect();

    // A workflow's pending runs, oldest first; the other workflow's untouched.
    let out = home.cli_ok(&["run", "hold", "--workflow", "quick"]);
    let held: Vec<&str> = out.lines().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(held, quick.iter().map(Uuid::to_string).collect::<Vec<_>>(), "{out}");
    for id in &demo {
        assert!(home.run(*id).await.held_at.is_none());
    }
    // Holding again picks none (hold takes the runs not held): said, and done.
    let out = home.cli(&["run", "hold", "--workflow", "quick"]);
    assert_eq!(code(&out), 0);
    assert!(stderr(&out).contains("no run to hold"), "{}", stderr(&out));

    // --all narrowed by a state; a stop of the pending runs leaves the ended ones alone.
    home.cli_ok(&["run", "release", "--all"]);
    home.cli_ok(&["run", "stop", quick[0].to_string().as_str()]);
    let out = home.cli_ok(&["run", "stop", "--all", "--state", "pending", "--json"]);
    let outcomes: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(outcomes.as_array().unwrap().len(), 4, "{outcomes}");
    for id in quick.iter().chain(&demo) {
        assert_eq!(home.run(*id).await.state, RunState::Stopped);
    }
    // The stopped runs are what resume's filter finds.
    let out = home.cli_ok(&["run", "resume", "--workflow", "demo"]);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.lines().all(|l| l.ends_with("pending (attempt 2)")), "{out}");

    // A state the command never moves a run out of is refused, and nothing is done.
    let out = home.cli(&["run", "hold", "--state", "running"]);
    assert_eq!(code(&out), 3);
    assert!(stderr(&out).contains("run hold acts on runs that are pending, not running"), "{}", stderr(&out));
    // Ids and filters do not mix, and a command with neither does not parse.
    assert_eq!(code(&home.cli(&["run", "stop", &demo[0].to_string(), "--all"])), 2);
    assert_eq!(code(&home.cli(&["run", "stop"])), 2);
    assert_eq!(home.run(demo[0]).await.state, RunState::Pending);
}

#[tokio::test]
async fn a_sweep_filter_acts_on_its_members_only() {
    let mut home = TestHome::new();
    let lone = home.submit(&["-w", "demo"]);
    let out: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["sweep", "start", "demo-sweep", "--json"])).unwrap();
    let sweep = out["id"].as_str().unwrap();
    let members: Vec<Uuid> =
        out["members"].as_array().unwrap().iter().map(|m| m.as_str().unwrap().parse().unwrap()).collect();

    let out = home.cli_ok(&["run", "hold", "--sweep", &sweep[..8]]);
    assert_eq!(out.lines().count(), members.len(), "{out}");
    for id in &members {
        assert!(home.run(*id).await.held_at.is_some());
    }
    assert!(home.run(lone).await.held_at.is_none());
    // An unknown sweep is refused, saying so.
    let out = home.cli(&["run", "release", "--sweep", "ffffffff"]);
    assert_eq!(code(&out), 3);
    assert!(stderr(&out).contains("ffffffff"), "{}", stderr(&out));
}
