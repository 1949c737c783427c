//! `sweep resume`: a stopped sweep goes on where it stopped (the members its stop ended run
//! again, as their next attempt; one a user stopped on its own does not), one that ended by
//! itself is refused in one line; a daemon killed between the resume's move and its re-runs
//! queues each re-run once after its restart; and `max_live` holds across two daemons on one
//! PostgreSQL store.

use std::time::Duration;

use lachesis::failpoint::Failpoint;
use lachesis::model::RunState;
use lachesis::model::sweep::SweepState;
use lachesis::service::Service;
use uuid::Uuid;

use crate::support::{TestHome, stderr, wait_for};

const T: Duration = Duration::from_secs(30);

/// A member that runs until the test creates its home's `gate` file.
fn gated(home: &TestHome) -> String {
    let gate = home.path().join("gate");
    format!(
        "name: gated\nvars: {{lr: \"0.1\"}}\nstages:\n  - name: trainer\n    argv: [sh, -c, \"while [ ! -e '{}' ]; do sleep 0.05; done; echo lr={{lr}}\"]\nstop_grace: 2s\n",
        gate.display()
    )
}

/// Starts a grid sweep of `n` members over `gated` with `max_live`: its id and members.
fn start(home: &TestHome, n: usize, max_live: u32) -> (Uuid, Vec<Uuid>) {
    let values: Vec<String> = (1..=n).map(|i| format!("0.{i}")).collect();
    let file = home.path().join("sweep.yaml");
    let text = format!(
        "method: grid\nworkflow: gated\nmax_live: {max_live}\nparameters:\n  lr: {{values: [{}]}}\n",
        values.join(", ")
    );
    std::fs::write(&file, text).unwrap();
    home.start_sweep(file.to_str().unwrap())
}

async fn wait_running(service: &Service, members: &[Uuid], n: usize) {
    wait_for("members running", T, || {
        let (service, members) = (service.clone(), members.to_vec());
        async move {
            let mut running = 0;
            for id in &members {
                running += usize::from(service.run(*id).await.unwrap().unwrap().state == RunState::Running);
            }
            (running == n).then_some(())
        }
    })
    .await;
}

/// Stops the sweep through the CLI and waits for every member to have ended.
async fn stop(home: &mut TestHome, sweep: Uuid, members: &[Uuid]) {
    home.cli_ok(&["sweep", "stop", &sweep.to_string()]);
    for id in members {
        let (run, _) = home.wait_settled(*id, T).await;
        assert_eq!(run.state, RunState::Stopped, "{:?}", run.reason);
    }
}

#[tokio::test]
async fn a_stopped_sweep_resumes_where_it_stopped_and_one_that_ended_is_refused() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    let (sweep, members) = start(&home, 5, 2);
    // Member 4 is stopped by its user before the sweep's stop: that stands.
    home.cli_ok(&["run", "stop", &members[4].to_string()]);
    home.start_daemon_with(&["--sweep-interval", "200ms"]);
    let service = home.service().await;
    wait_running(&service, &members, 2).await;
    stop(&mut home, sweep, &members).await;

    let out = home.cli_ok(&["sweep", "resume", &sweep.to_string()[..8]]);
    assert_eq!(out.trim(), format!("{sweep} live"));
    for (k, id) in members.iter().enumerate() {
        let run = home.run(*id).await;
        match k {
            4 => assert_eq!((run.state, run.attempt), (RunState::Stopped, 1), "a user's stop stands"),
            _ => assert_eq!(run.attempt, 2, "member {k} runs again as its next attempt"),
        }
    }
    let messages = home.messages(members[0]).await;
    assert!(
        messages.iter().any(|m| m
            == &format!("resume: sweep {} resumed: its stop had ended this member", &sweep.to_string()[..8])),
        "{messages:?}"
    );
    // max_live holds for the re-runs too.
    wait_running(&service, &members, 2).await;
    let status = home.cli_ok(&["sweep", "status", &sweep.to_string()]);
    assert!(status.contains("resumed: members 0, 1, 2, 3 re-run"), "{status}");
    std::fs::write(home.path().join("gate"), "").unwrap();
    for id in &members[..4] {
        let (run, _) = home.wait_settled(*id, T).await;
        assert_eq!((run.state, run.attempt), (RunState::Completed, 2));
    }
    wait_for("the sweep to end", T, || {
        let service = service.clone();
        async move {
            (service.resolve_sweep(&sweep.to_string()).await.unwrap().state == SweepState::Done).then_some(())
        }
    })
    .await;
    // Ended by itself now: refused in one line, nothing queued.
    let refused = home.cli(&["sweep", "resume", &sweep.to_string()]);
    assert!(!refused.status.success());
    let said = stderr(&refused);
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    assert!(said.contains("cannot resume: it ended by itself (every member ended (5))"), "{said}");
    assert_eq!(home.run(members[4]).await.state, RunState::Stopped);
}

#[tokio::test]
async fn a_daemon_killed_between_a_resume_and_its_re_runs_queues_each_once() {
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    let (sweep, members) = start(&home, 3, 2);
    // Armed for this daemon only: it dies once the resume it serves is committed.
    home.environ.push((lachesis::failpoint::VARIABLE.into(), Failpoint::SweepResumed.as_str().into()));
    let api = crate::http::start_with(&mut home, "127.0.0.1", None, &["--sweep-interval", "200ms"]).await;
    home.environ.retain(|(k, _)| k != lachesis::failpoint::VARIABLE);
    let service = home.service().await;
    wait_running(&service, &members, 2).await;
    stop(&mut home, sweep, &members).await;
    // The daemon dies inside the request: no answer.
    api.post_unanswered(&format!("/sweeps/{sweep}/resume")).await;
    home.wait_daemon_killed(T).await;
    assert_eq!(
        service.resolve_sweep(&sweep.to_string()).await.unwrap().state,
        SweepState::Live,
        "the move is kept"
    );
    for id in &members {
        let run = home.run(*id).await;
        assert_eq!((run.state, run.attempt), (RunState::Stopped, 1), "nothing queued yet");
    }
    // The next daemon's sweep pass makes the re-runs, each once.
    home.start_daemon_with(&["--sweep-interval", "200ms"]);
    std::fs::write(home.path().join("gate"), "").unwrap();
    for id in &members {
        let run = wait_for("the member's re-run to complete", T, || {
            let service = service.clone();
            let id = *id;
            async move { service.run(id).await.unwrap().filter(|run| run.state == RunState::Completed) }
        })
        .await;
        assert_eq!(run.attempt, 2, "re-run once");
        let resumes = home.messages(*id).await.iter().filter(|m| m.starts_with("resume: sweep")).count();
        assert_eq!(resumes, 1);
    }
    let refused = home.cli(&["sweep", "resume", &sweep.to_string()]);
    assert!(stderr(&refused).contains("cannot resume"), "{}", stderr(&refused));
}

/// Two daemons on one PostgreSQL store claim members of a sweep with `max_live: 2`: no more
/// than two run at once, counted by the members themselves.
#[tokio::test]
async fn max_live_holds_across_two_daemons() {
    let Some(mut homes) = crate::nodes::cluster(2).await else { return };
    let live = homes[0].path().join("live");
    let counts = homes[0].path().join("counts");
    std::fs::create_dir_all(&live).unwrap();
    let stage = format!(
        "name: counted\nvars: {{lr: \"0\"}}\nstages:\n  - name: work\n    argv: [sh, -c, 'touch {live}/$0; ls {live} | wc -l >> {counts}; sleep 0.4; rm {live}/$0', '{{run_id}}']\n",
        live = live.display(),
        counts = counts.display()
    );
    homes[0].workflow("counted", &stage);
    let file = homes[0].path().join("sweep.yaml");
    std::fs::write(
        &file,
        "method: grid\nworkflow: counted\nmax_live: 2\nparameters:\n  lr: {values: [1, 2, 3, 4, 5, 6, 7, 8]}\n",
    )
    .unwrap();
    let out: serde_json::Value =
        serde_json::from_str(&homes[0].cli_ok(&["sweep", "start", file.to_str().unwrap(), "--json"]))
            .unwrap();
    let members: Vec<Uuid> =
        out["members"].as_array().unwrap().iter().map(|m| m.as_str().unwrap().parse().unwrap()).collect();
    crate::nodes::start_node(&mut homes[0], "n1", crate::nodes::LONG, &[]);
    crate::nodes::start_node(&mut homes[1], "n2", crate::nodes::LONG, &[]);
    for id in &members {
        let (run, _) = homes[0].wait_settled(*id, Duration::from_secs(60)).await;
        assert_eq!(run.state, RunState::Completed, "{:?}", run.reason);
    }
    let seen: Vec<usize> =
        std::fs::read_to_string(&counts).unwrap().lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(seen.len(), 8);
    assert!(seen.iter().all(|n| *n <= 2), "at most two members at once: {seen:?}");
}

/// The dashboard's sweep page stops a live sweep and resumes a stopped one through forms, each
/// a POST with the dashboard's cookie from the same origin (another site's is refused), each
/// redirecting back to the page, which then offers the other.
#[tokio::test]
async fn the_sweep_page_stops_and_resumes_its_sweep() {
    const TOKEN: &str = "sweep-forms-token-of-this-test";
    let mut home = TestHome::new();
    home.workflow("gated", &gated(&home));
    let (sweep, _) = start(&home, 3, 1);
    let api = crate::http::start_with(&mut home, "127.0.0.1", Some(TOKEN), &[]).await;
    let http = lachesis::http_client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let page = || async {
        let answer = http
            .get(format!("{}/ui/sweeps/{sweep}", api.base()))
            .header("cookie", format!("lachesis_token={TOKEN}"))
            .send()
            .await
            .unwrap();
        answer.text().await.unwrap()
    };
    let post = |verb: &str, origin: String| {
        http.post(format!("{}/ui/sweeps/{sweep}/{verb}", api.base()))
            .header("cookie", format!("lachesis_token={TOKEN}"))
            .header("origin", origin)
            .send()
    };
    assert!(page().await.contains(&format!("action=\"/ui/sweeps/{sweep}/stop\"")));
    let cross = post("stop", "http://elsewhere.example".into()).await.unwrap();
    assert_eq!(cross.status(), reqwest::StatusCode::FORBIDDEN);
    let stopped = post("stop", api.base().to_string()).await.unwrap();
    assert_eq!(stopped.status(), reqwest::StatusCode::SEE_OTHER);
    assert_eq!(stopped.headers()["location"], format!("/ui/sweeps/{sweep}").as_str());
    let service = home.service().await;
    assert_eq!(service.resolve_sweep(&sweep.to_string()).await.unwrap().state, SweepState::Stopped);
    let shown = page().await;
    assert!(
        shown.contains(&format!("action=\"/ui/sweeps/{sweep}/resume\"")) && !shown.contains("/stop\""),
        "{shown}"
    );
    let resumed = post("resume", api.base().to_string()).await.unwrap();
    assert_eq!(resumed.status(), reqwest::StatusCode::SEE_OTHER);
    assert_eq!(service.resolve_sweep(&sweep.to_string()).await.unwrap().state, SweepState::Live);
    // Once it ends by itself, a resume is refused, in the page frame, saying why.
    std::fs::write(home.path().join("gate"), "").unwrap();
    wait_for("the sweep to end", T, || {
        let service = service.clone();
        async move {
            let state = service.resolve_sweep(&sweep.to_string()).await.unwrap().state;
            (state == SweepState::Done).then_some(())
        }
    })
    .await;
    let refused = post("resume", api.base().to_string()).await.unwrap();
    assert!(refused.status().is_client_error(), "{}", refused.status());
    let text = refused.text().await.unwrap();
    assert!(text.starts_with("<!doctype html>") && text.contains("cannot resume"), "{text}");
}
