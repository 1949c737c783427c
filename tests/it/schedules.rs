//! Schedules through the daemon. The due-time arithmetic (weekday ranges, time zones, DST,
//! catch-up counting, regression against a baseline) is tested with an injectable clock in
//! `tests::schedule`; here the daemon acts on it.

use std::time::Duration;

use crate::support::{TestHome, stderr, wait_for};

fn home_with_envs() -> TestHome {
    let mut home = TestHome::new();
    home.environ = vec![
        ("LACHESIS_ENV_DIRS".into(), crate::atropos::envs_dir().display().to_string()),
        // A test that can't succeed quickly: the schedule mechanics are what is tested here.
        ("LACHESIS_PYTHON".into(), "false".into()),
    ];
    home
}

const LOCAL: [&str; 4] = ["--provider", "http://127.0.0.1:9/v1", "--models", "m1"];

#[tokio::test]
async fn schedules_are_validated_listed_paused_and_removed() {
    let home = home_with_envs();
    let err = stderr(&home.cli(&["schedule", "add", "bad", "--cron", "0 25 * * *", "--env", "arith"]));
    assert!(err.contains("invalid cron expression '0 25 * * *': hour 25 is out of range"), "{err}");
    let err = stderr(&home.cli(&[
        "schedule",
        "add",
        "bad",
        "--cron",
        "0 3 * * *",
        "--tz",
        "Mars/Base",
        "--env",
        "arith",
    ]));
    assert!(err.contains("unknown time zone 'Mars/Base'"), "{err}");
    let mut args = vec![
        "schedule",
        "add",
        "weekdays",
        "--cron",
        "0 9 * * 1-5",
        "--env",
        "arith",
        "--tz",
        "Europe/Paris",
    ];
    args.extend(LOCAL);
    let added = home.cli_ok(&args);
    assert!(added.starts_with("added schedule weekdays (0 9 * * 1-5); next due "), "{added}");
    // Due times read in the schedule's own zone, named.
    assert!(added.trim_end().ends_with(" 09:00:00 Europe/Paris"), "{added}");
    let err = stderr(&home.cli(&args));
    assert!(err.contains("a schedule called 'weekdays' already exists"), "{err}");
    let list: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["schedule", "list", "--json"])).unwrap();
    let next = list[0]["next_due"].as_i64().unwrap();
    let weekday =
        chrono::DateTime::from_timestamp_millis(next).unwrap().with_timezone(&chrono_tz::Europe::Paris);
    use chrono::{Datelike, Timelike};
    assert!(weekday.weekday().number_from_monday() <= 5 && weekday.hour() == 9, "{weekday}");
    let table = home.cli_ok(&["schedule", "list"]);
    assert!(table.contains(" 09:00:00 Europe/Paris"), "{table}");
    home.cli_ok(&["schedule", "pause", "weekdays"]);
    assert!(home.cli_ok(&["schedule", "list"]).contains("paused"));
    home.cli_ok(&["schedule", "resume", "weekdays"]);
    home.cli_ok(&["schedule", "rm", "weekdays"]);
    let err = stderr(&home.cli(&["schedule", "show", "weekdays"]));
    assert!(err.contains("unknown schedule 'weekdays'"), "{err}");
}

/// Waits for the schedule's first event starting with `prefix` and returns its message.
async fn schedule_note(service: &lachesis::service::Service, schedule: uuid::Uuid, prefix: &str) -> String {
    wait_for(&format!("a schedule note starting with {prefix:?}"), Duration::from_secs(20), || {
        let service = service.clone();
        let prefix = prefix.to_string();
        async move {
            let events = service.events_after(schedule, 0).await.unwrap();
            events.into_iter().map(|e| e.message).find(|m| m.starts_with(&prefix))
        }
    })
    .await
}

async fn add_missed_schedule(home: &mut TestHome, days_down: i64) -> lachesis::model::Schedule {
    let mut args = vec!["schedule", "add", "nightly", "--cron", "0 3 * * *", "--env", "arith"];
    args.extend(LOCAL);
    home.cli_ok(&args);
    // As if the daemon had been down for `days_down` days since the schedule last fired.
    let service = home.service().await;
    let mut schedule = service.stored_schedules().await.unwrap().remove(0);
    schedule.last_fired -= days_down * 24 * 3600 * 1000;
    service.overwrite_schedule(&schedule).await.unwrap();
    schedule
}

#[tokio::test]
async fn downtime_over_several_due_times_enqueues_one_catch_up_test() {
    let mut home = home_with_envs();
    let schedule = add_missed_schedule(&mut home, 3).await;
    home.start_daemon();
    let service = home.service().await;
    let note = schedule_note(&service, schedule.id, "caught up").await;
    assert!(
        note.starts_with("caught up: 3 due times passed while no daemon ran; enqueued one test"),
        "{note}"
    );
    let tests = service.schedule_tests(schedule.id, 10).await.unwrap();
    assert_eq!(tests.len(), 1, "one test for three missed due times");
    // A restart does not fire again for the same due times.
    home.kill_daemon();
    home.start_daemon();
    home.cli_ok(&["schedule", "pause", "nightly"]); // wakes the daemon
    home.cli_ok(&["schedule", "resume", "nightly"]);
    // Nothing to wait for: watch a bounded window in which a second test would have appeared.
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    while std::time::Instant::now() < deadline {
        assert_eq!(service.schedule_tests(schedule.id, 10).await.unwrap().len(), 1, "fired twice");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_due_time_while_the_previous_test_runs_is_skipped() {
    let mut home = home_with_envs();
    let schedule = add_missed_schedule(&mut home, 1).await;
    // The previous test of this schedule is still queued (no daemon has taken it yet).
    let service = home.service().await;
    let test = lachesis::model::InferenceTest::queued(
        uuid::Uuid::new_v4(),
        schedule.spec.clone(),
        Some(schedule.id),
        &home.path().join("tests"),
    );
    service.insert_test_as_given(&test, &test.pending_tasks()).await.unwrap();
    home.start_daemon();
    let note = schedule_note(&service, schedule.id, "skipped").await;
    assert!(note.starts_with("skipped 1 due time up to "), "{note}");
    assert!(note.ends_with("the previous test is still running"), "{note}");
    assert_eq!(service.schedule_tests(schedule.id, 10).await.unwrap().len(), 1, "no second test");
}
