//! The daemon's decisions on a sweep: hyperband's stop of the loser, once, from readings fed
//! in, stored, logged by a trainer or read from W&B; the target's end of new members; a
//! decision that outlives a daemon killed before it acted; a metric written as text.

use super::*;

/// Series fed by the test, as the store's metrics by name would give them.
struct Fed(HashMap<Uuid, Vec<f64>>);

#[async_trait]
impl MetricSeries for Fed {
    async fn series(&self, run: Uuid, _name: &str) -> lachesis::service::Result<Vec<MetricPoint>> {
        let values = self.0.get(&run).cloned().unwrap_or_default();
        Ok(values
            .into_iter()
            .enumerate()
            .map(|(i, value)| MetricPoint { attempt: 1, step: i as i64 + 1, value })
            .collect())
    }

    async fn runs_with_readings_since(&self, _after: Millis) -> lachesis::service::Result<Option<Vec<Uuid>>> {
        Ok(None)
    }
}

#[tokio::test]
async fn hyperband_stops_the_loser_once_and_the_target_ends_new_members() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    let file = write(
        &home,
        "hb.yaml",
        "method: grid\nworkflow: gated\nmax_live: 4\nmetric: {name: loss, target: 0.25}\n\
         early_terminate: {type: hyperband, min_iter: 2, eta: 2, strict: false}\n\
         parameters:\n  lr: {values: [0.1, 0.2, 0.3, 0.4, 0.5]}\n",
    );
    let (sweep, members) = start(&home, &file);
    home.start_daemon();
    let service = home.service().await;
    for id in &members[..4] {
        home.wait_state(*id, RunState::Running, T).await;
    }
    let fed = Fed(HashMap::from([
        (members[0], vec![1.0, 0.9, 0.8]),
        (members[1], vec![1.0, 0.5, 0.4]),
        (members[2], vec![1.0, 0.97, 0.95]),
        (members[3], vec![1.0, 0.3, 0.2]),
    ]));
    let mut decider = SweepDecider::default();
    let decisions = decider.pass(&service, &fed).await.unwrap();
    let short = &sweep.to_string()[..8];
    let reason = format!(
        "early-terminated by sweep {short}: best loss 0.95 by iteration 3 is worse than the band-2 threshold 0.9"
    );
    assert_eq!(
        decisions,
        vec![
            SweepDecision::Target { sweep, k: 3, cancelled: 1 },
            SweepDecision::Stopped { sweep, k: 2, run: members[2], reason: reason.clone() },
        ]
    );
    // Decided once: a second pass finds the member stopping or stopped.
    assert!(decider.pass(&service, &fed).await.unwrap().is_empty());
    // At its target, it ends by itself: no resume.
    let refused = service.resume_sweep(short).await.unwrap_err().to_string();
    assert!(
        refused.contains("cannot resume: it ended by itself (target reached: loss (target 0.25))"),
        "{refused}"
    );
    let (stopped, _) = home.wait_settled(members[2], T).await;
    assert_eq!((stopped.state, stopped.reason.as_deref()), (RunState::Stopped, Some(reason.as_str())));
    assert!(home.messages(members[2]).await.iter().any(|m| m.contains(&reason)), "an event says why");
    let cancelled = home.run(members[4]).await;
    assert_eq!(cancelled.state, RunState::Stopped);
    assert_eq!(
        cancelled.reason.as_deref(),
        Some(
            format!("cancelled: sweep {short} member 3 reached the target: loss 0.2 (target 0.25)").as_str()
        )
    );
    // The others run on and finish.
    std::fs::write(home.path().join("gate"), "").unwrap();
    for id in [members[0], members[1], members[3]] {
        let (run, _) = home.wait_settled(id, T).await;
        assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    }
    // Done, by this decider or the daemon's own, whichever looks first.
    let deadline = std::time::Instant::now() + T;
    let record = loop {
        decider.pass(&service, &fed).await.unwrap();
        let record = service.resolve_sweep(short).await.unwrap();
        if record.state == SweepState::Done {
            break record;
        }
        assert!(std::time::Instant::now() < deadline, "the sweep is still {}", record.state);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let board = service.sweep_status_with(&record, &fed).await.unwrap();
    assert_eq!(board.sweep.state, SweepState::Done);
    assert_eq!(board.winner, Some(3));
    let order: Vec<u64> = board.leaderboard.iter().map(|m| m.k).collect();
    assert_eq!(order, vec![3, 1, 0, 2, 4], "best first by the goal, members without readings last");
    let loser = board.leaderboard.iter().find(|m| m.k == 2).unwrap();
    assert!(loser.early_terminated && loser.reason.as_deref() == Some(reason.as_str()));
    assert_eq!((loser.best, loser.best_step, loser.iterations), (Some(0.95), Some(3), 3));
}

#[tokio::test]
async fn the_daemon_stops_the_loser_from_its_stored_readings() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    let file = write(
        &home,
        "hb.yaml",
        "method: grid\nworkflow: gated\nmetric: {name: train/loss}\n\
         early_terminate: {type: hyperband, min_iter: 2, eta: 2, strict: false}\n\
         parameters:\n  lr: {values: [0.1, 0.2, 0.3, 0.4]}\n",
    );
    let (sweep, members) = start(&home, &file);
    home.start_daemon();
    let service = home.service().await;
    for id in &members {
        home.wait_state(*id, RunState::Running, T).await;
    }
    let waiting = home.cli_ok(&["sweep", "status", &sweep.to_string()]);
    assert!(
        waiting.contains("waiting   no member has reported train/loss yet (member 0 reports no metric yet)"),
        "{waiting}"
    );
    let losses = [[1.0, 0.9, 0.8], [1.0, 0.5, 0.4], [1.0, 0.97, 0.95], [1.0, 0.3, 0.2]];
    for (id, series) in members.iter().zip(losses) {
        let rows: Vec<lachesis::model::MetricRow> = series
            .iter()
            .enumerate()
            .map(|(i, loss)| lachesis::model::MetricRow {
                step: i as i64 + 1,
                loss: Some(*loss),
                recorded_at: lachesis::model::now_millis(),
                ..Default::default()
            })
            .collect();
        service.put_metric_rows_as_given(*id, &rows).await.unwrap();
    }
    let reason = format!(
        "early-terminated by sweep {}: best train/loss 0.95 by iteration 3 is worse than the band-2 threshold 0.9",
        &sweep.to_string()[..8]
    );
    let (stopped, _) = home.wait_settled(members[2], T).await;
    assert_eq!((stopped.state, stopped.reason.as_deref()), (RunState::Stopped, Some(reason.as_str())));
    let said: Vec<String> = home
        .messages(members[2])
        .await
        .into_iter()
        .filter(|m| m.starts_with("stop: early-terminated"))
        .collect();
    assert_eq!(said, vec![format!("stop: {reason}")], "stopped once, with an event saying why");
    for id in [members[0], members[1], members[3]] {
        assert_eq!(home.run(id).await.state, RunState::Running, "the others run on");
    }
    let board: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["sweep", "status", &sweep.to_string(), "--json"])).unwrap();
    assert_eq!(board["leaderboard"][0]["k"], 3, "{board:#}");
    assert_eq!(board["leaderboard"][0]["best"], 0.2);
    let text = home.cli_ok(&["sweep", "status", &sweep.to_string()]);
    assert!(text.contains(&reason), "{text}");
}

/// A member whose trainer logs `step i loss=v` for each value of its `curve` var; at a `w` it
/// waits for the home's `go` file, and after its last value for the `gate` file.
fn logging(home: &TestHome) -> String {
    let (go, gate) = (home.path().join("go"), home.path().join("gate"));
    format!(
        r#"name: logging
vars: {{curve: "1.0"}}
stages:
  - name: trainer
    argv: [sh, -c, 'i=0; for v in {{curve}}; do if [ "$v" = w ]; then while [ ! -e "{go}" ]; do sleep 0.05; done; continue; fi; i=$((i+1)); echo "step $i loss=$v"; done; while [ ! -e "{gate}" ]; do sleep 0.05; done']
metrics:
  log: {{stage: trainer, pattern: 'step (?P<step>\d+) loss=(?P<loss>\S+)'}}
stop_grace: 2s
"#,
        go = go.display(),
        gate = gate.display()
    )
}

#[tokio::test]
async fn hyperband_stops_a_member_from_what_its_trainer_logs() {
    let mut home = TestHome::new();
    home.workflow("logging", &logging(&home));
    // Three members level at 0.4 by iteration 3 (none is worse than any threshold they make),
    // then the fourth reaches iteration 3 at 0.98 once the test says go.
    let file = write(
        &home,
        "log.yaml",
        "method: grid\nworkflow: logging\nmetric: {name: loss}\n\
         early_terminate: {type: hyperband, min_iter: 3, eta: 3, strict: false}\n\
         parameters:\n  curve: {values: ['1.0 0.5 0.4', '0.9 0.5 0.4', '1.0 0.99 w 0.98', '0.8 0.5 0.4']}\n",
    );
    let (sweep, members) = start(&home, &file);
    // The decider's tick is an hour away: the stop comes from the news of the readings.
    home.start_daemon_with(&["--sweep-interval", "1h"]);
    let service = home.service().await;
    let counts = [3, 3, 2, 3];
    wait_for("the first readings to be recorded", T, || {
        let (service, members) = (service.clone(), members.clone());
        async move {
            for (id, count) in members.iter().zip(counts) {
                if service.run_metric_series(*id, "loss").await.unwrap().len() != count {
                    return None;
                }
            }
            Some(())
        }
    })
    .await;
    std::fs::write(home.path().join("go"), "").unwrap();
    let (stopped, _) = home.wait_settled(members[2], T).await;
    let reason = format!(
        "early-terminated by sweep {}: best loss 0.98 by iteration 3 is worse than the band-3 threshold 0.4",
        &sweep.to_string()[..8]
    );
    assert_eq!((stopped.state, stopped.reason.as_deref()), (RunState::Stopped, Some(reason.as_str())));
    for id in [members[0], members[1], members[3]] {
        assert_eq!(home.run(id).await.state, RunState::Running, "the others run on");
    }
    std::fs::write(home.path().join("gate"), "").unwrap();
    for id in [members[0], members[1], members[3]] {
        let (run, _) = home.wait_settled(id, T).await;
        assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    }
    let board = service.sweep_status(&sweep.to_string()).await.unwrap();
    let loser = board.leaderboard.iter().find(|m| m.k == 2).unwrap();
    assert!(loser.early_terminated);
    assert_eq!((loser.best, loser.iterations), (Some(0.98), 3));
    assert_eq!(board.leaderboard.last().map(|m| m.k), Some(2), "the loser ranks last");
}

#[tokio::test]
async fn the_demo_sweep_stops_its_worst_learning_rate_early() {
    let mut home = TestHome::new();
    home.start_daemon();
    let out: serde_json::Value =
        serde_json::from_str(&home.cli_ok(&["sweep", "start", "demo-sweep", "--json"])).unwrap();
    let members: Vec<Uuid> =
        out["members"].as_array().unwrap().iter().map(|m| m.as_str().unwrap().parse().unwrap()).collect();
    assert_eq!(members.len(), 6);
    // lr 1.0 (member 5) earns the least reward at every step; lr 0.001 (member 2) the most.
    let (worst, _) = home.wait_settled(members[5], Duration::from_secs(60)).await;
    assert_eq!(worst.state, RunState::Stopped, "{:?}", worst.reason);
    let reason = worst.reason.unwrap_or_default();
    assert!(reason.starts_with("early-terminated by sweep") && reason.contains("reward"), "{reason}");
    let (best, _) = home.wait_settled(members[2], Duration::from_secs(60)).await;
    assert_eq!(best.state, RunState::Completed, "{:?}", best.reason);
}

#[tokio::test]
async fn a_decision_outlives_a_daemon_killed_before_it_acted() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    let file = write(
        &home,
        "hb.yaml",
        "method: grid\nworkflow: gated\nmetric: {name: loss}\n\
         early_terminate: {type: hyperband, min_iter: 2, eta: 2, strict: false}\n\
         parameters:\n  lr: {values: [0.1, 0.2, 0.3, 0.4]}\n",
    );
    let (_, members) = start(&home, &file);
    home.start_daemon();
    let service = home.service().await;
    for id in &members {
        home.wait_state(*id, RunState::Running, T).await;
    }
    home.kill_daemon();
    // Decided while no daemon runs: the stop request and its reason are in the store.
    let fed = Fed(HashMap::from([
        (members[0], vec![1.0, 0.9, 0.8]),
        (members[1], vec![1.0, 0.5, 0.4]),
        (members[2], vec![1.0, 0.97, 0.95]),
        (members[3], vec![1.0, 0.3, 0.2]),
    ]));
    let decisions = SweepDecider::default().pass(&service, &fed).await.unwrap();
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(home.run(members[2]).await.state, RunState::Stopping);
    // A fresh decider (a restarted daemon's) finds it decided.
    assert!(SweepDecider::default().pass(&service, &fed).await.unwrap().is_empty());
    home.start_daemon();
    let (stopped, _) = home.wait_settled(members[2], T).await;
    assert_eq!(stopped.state, RunState::Stopped);
    assert!(stopped.reason.as_deref().is_some_and(|r| r.starts_with("early-terminated by sweep")));
    let stops = home.messages(members[2]).await.into_iter().filter(|m| m.starts_with("stop: ")).count();
    assert_eq!(stops, 1, "stopped once");
    for id in [members[0], members[1], members[3]] {
        assert_eq!(home.run(id).await.state, RunState::Running);
    }
}

/// A sweep run to its end by the daemon (which the caller started): four members of `gated`
/// compared by `train/loss`; member 2 stopped by hyperband after its third reading, the others
/// completed with six readings each, member 3 the best (0.05).
pub(crate) struct FinishedSweep {
    pub sweep: Uuid,
    pub members: Vec<Uuid>,
    /// Member 2's reason.
    pub reason: String,
}

pub(crate) async fn finished_sweep(home: &mut TestHome) -> FinishedSweep {
    home.workflow("gated", &gated(home));
    let file = write(
        home,
        "hb.yaml",
        "method: grid\nworkflow: gated\nmetric: {name: train/loss}\n\
         early_terminate: {type: hyperband, min_iter: 2, eta: 2, strict: false}\n\
         parameters:\n  lr: {values: [0.1, 0.2, 0.3, 0.4]}\n",
    );
    let (sweep, members) = start(home, &file);
    let service = home.service().await;
    for id in &members {
        home.wait_state(*id, RunState::Running, T).await;
    }
    let rows = |values: &[f64], from: i64| -> Vec<lachesis::model::MetricRow> {
        values
            .iter()
            .enumerate()
            .map(|(i, loss)| lachesis::model::MetricRow {
                step: from + i as i64,
                loss: Some(*loss),
                recorded_at: lachesis::model::now_millis(),
                ..Default::default()
            })
            .collect()
    };
    let losses = [[1.0, 0.9, 0.8], [1.0, 0.5, 0.4], [1.0, 0.97, 0.95], [1.0, 0.3, 0.2]];
    for (id, series) in members.iter().zip(losses) {
        service.put_metric_rows_as_given(*id, &rows(&series, 1)).await.unwrap();
    }
    let (stopped, _) = home.wait_settled(members[2], T).await;
    assert_eq!(stopped.state, RunState::Stopped, "{:?}", stopped.reason);
    std::fs::write(home.path().join("gate"), "").unwrap();
    let later = [[0.7, 0.6, 0.5], [0.35, 0.3, 0.25], [0.15, 0.1, 0.05]];
    for (id, series) in [members[0], members[1], members[3]].into_iter().zip(later) {
        let (run, _) = home.wait_settled(id, T).await;
        assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
        // Readings the trainer logged last, read after it ended.
        service.put_metric_rows_as_given(id, &rows(&series, 4)).await.unwrap();
    }
    wait_for("the sweep to be done", T, || {
        let service = service.clone();
        async move {
            let sweep = service.resolve_sweep(&sweep.to_string()).await.unwrap();
            (sweep.state == SweepState::Done).then_some(())
        }
    })
    .await;
    FinishedSweep { sweep, members, reason: stopped.reason.unwrap_or_default() }
}

/// A member whose trainer writes the sweep's metric as text: said once per attempt, as an
/// event on the member, and by `sweep status` while the sweep waits for a number.
#[tokio::test]
async fn a_metric_written_as_text_is_said_once_and_shown_while_the_sweep_waits() {
    let mut home = TestHome::new();
    let gate = home.path().join("gate");
    let script = write(
        &home,
        "texty.sh",
        &format!(
            "for s in 1 2 3; do printf '{{\"step\": %d, \"loss\": \"0.%d\", \"kl\": 1}}\\n' $s $s >> \"$1/metrics.jsonl\"; done\n\
             while [ ! -e '{}' ]; do sleep 0.05; done\n",
            gate.display()
        ),
    );
    home.workflow(
        "texty",
        &format!(
            "name: texty\nvars: {{lr: '0.1'}}\nstages:\n  - {{name: trainer, argv: [sh, '{script}', '{{run_dir}}']}}\n\
             metrics:\n  jsonl: {{file: metrics.jsonl, step: /step}}\nstop_grace: 2s\n"
        ),
    );
    let file = write(
        &home,
        "text.yaml",
        "method: grid\nworkflow: texty\nmetric: {name: loss}\nparameters:\n  lr: {values: [0.1]}\n",
    );
    let (sweep, members) = start(&home, &file);
    home.start_daemon();
    let service = home.service().await;
    let member = members[0];
    wait_for("the three rows to be read", T, || {
        let service = service.clone();
        async move { (service.run_metric_series(member, "kl").await.unwrap().len() == 3).then_some(()) }
    })
    .await;
    let said = "metrics: loss at step 1 is not a number (\"0.1\"): sweep";
    let notes = wait_for("the note", T, || {
        let mut home_messages = Vec::new();
        let service = service.clone();
        async move {
            let (_, events) = service.run_events(&member.to_string()).await.unwrap();
            home_messages
                .extend(events.into_iter().map(|e| e.message).filter(|m| m.starts_with("metrics: loss")));
            (!home_messages.is_empty()).then_some(home_messages)
        }
    })
    .await;
    assert_eq!(notes.len(), 1, "said once: {notes:?}");
    assert!(notes[0].starts_with(said), "{notes:?}");
    assert!(
        service.run_metric_series(member, "loss").await.unwrap().is_empty(),
        "no reading is made of text"
    );
    let board = home.cli_ok(&["sweep", "status", &sweep.to_string()]);
    assert!(
        board.contains(
            "waiting   no member has reported loss as a number yet (member 0: loss at step 1 is not a number (\"0.1\"))"
        ),
        "{board}"
    );
    std::fs::write(&gate, "").unwrap();
    let (run, _) = home.wait_settled(member, T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
}

/// Readings the W&B poller records are news to the decider too: with its tick an hour away,
/// the member whose W&B history reaches the target ends the sweep's new members at once.
#[tokio::test]
async fn a_wandb_reading_that_reaches_the_target_is_decided_on_at_once() {
    use serde_json::json;
    let mut home = TestHome::new();
    let logged = gated(&home).replacen("name: gated", "name: logged\ncredentials: [WANDB_API_KEY]", 1);
    home.workflow("logged", &logged);
    home.environ.extend([
        ("WANDB_API_KEY".to_string(), "wandb-test-key-0123456789".to_string()),
        ("WANDB_ENTITY".to_string(), "lab".to_string()),
        ("LACHESIS_WANDB_INTERVAL".to_string(), "1s".to_string()),
    ]);
    let file = write(
        &home,
        "wandb.yaml",
        "method: grid\nworkflow: logged\nmax_live: 1\nmetric: {name: train/loss, target: 0.5}\n\
         parameters:\n  lr: {values: [0.1, 0.2]}\n",
    );
    let (sweep, members) = start(&home, &file);
    let short = &members[0].simple().to_string()[..8];
    // One answer serves both queries: the run lookup reads project.runs, the history project.run.
    let rows: Vec<serde_json::Value> = [1.0, 0.8, 0.4]
        .iter()
        .enumerate()
        .map(|(step, loss)| json!({"_step": step, "train/loss": loss}))
        .collect();
    let reply = json!({ "data": { "project": {
        "runs": { "edges": [{ "node": {
            "name": "abc123", "displayName": format!("run-{short}"), "state": "running",
            "summaryMetrics": r#"{"_step": 2}"#, "historyKeys": "{}" } }] },
        "run": { "sampledHistory": [rows] },
    } } });
    let wandb = crate::support::Receiver::start_with(vec![], reply.to_string()).await;
    home.environ.push(("WANDB_BASE_URL".to_string(), wandb.url.trim_end_matches("/hook").to_string()));
    home.start_daemon_with(&["--sweep-interval", "1h"]);
    let (cancelled, _) = home.wait_settled(members[1], T).await;
    let why = format!(
        "cancelled: sweep {} member 0 reached the target: train/loss 0.4 (target 0.5)",
        &sweep.to_string()[..8]
    );
    assert_eq!((cancelled.state, cancelled.reason.as_deref()), (RunState::Stopped, Some(why.as_str())));
    assert_eq!(home.run(members[0]).await.state, RunState::Running, "the member at the target runs on");
    std::fs::write(home.path().join("gate"), "").unwrap();
    let (run, _) = home.wait_settled(members[0], T).await;
    assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    drop(wandb);
}
