//! Webhooks that are never lost: a notification is written with the move that causes it and
//! posted from the store's outbox, so a daemon killed before its post posts it once it is back,
//! a receiver that refuses for a while gets every post once it answers (in order per run), a
//! receiver that answers 410 is not asked again until a user resends, the outbox keeps no more
//! than its cap, and every body carries a delivery id and a signature the receiver can check.

use std::time::Duration;

use lachesis::failpoint::Failpoint;
use lachesis::model::RunState;
use serde_json::Value;
use uuid::Uuid;

use crate::support::{Hit, Receiver, TestHome, files_containing, wait_for};

const T: Duration = Duration::from_secs(60);
const QUICK: &str = "name: quick\nstages:\n  - {name: main, argv: [sh, -c, \"exit 0\"]}\n";

/// A home whose daemon posts every run's end to `hook`, retrying fast.
fn home_posting_to(hook: &Receiver) -> TestHome {
    let mut home = TestHome::new();
    home.environ = vec![
        ("LACHESIS_WEBHOOKS".into(), hook.url.clone()),
        ("LACHESIS_WEBHOOK_BACKOFF".into(), "100ms".into()),
    ];
    home.workflow("quick", QUICK);
    home
}

/// `lachesis webhooks --json`: the deliveries, newest first.
fn deliveries(home: &TestHome) -> Vec<Value> {
    let page: Value = serde_json::from_str(&home.cli_ok(&["webhooks", "--json"])).unwrap();
    page["deliveries"].as_array().cloned().unwrap_or_default()
}

/// The deliveries about `run`, once one is in `state`.
async fn wait_delivery(home: &TestHome, run: Uuid, state: &str) -> Value {
    wait_for(&format!("a {state} delivery about {run}"), T, || {
        let found =
            deliveries(home).into_iter().find(|d| d["subject"] == run.to_string() && d["state"] == state);
        async move { found }
    })
    .await
}

/// The receiver's check: `sha256=` and the HMAC-SHA256 of the raw body under `secret`.
fn signature_holds(hit: &Hit, secret: &str) -> bool {
    let want: String = lachesis::webhooks::hmac_sha256(secret.as_bytes(), &hit.body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    hit.header("x-lachesis-signature") == Some(format!("sha256={want}"))
}

fn delivery_id(hit: &Hit) -> String {
    let body: Value = serde_json::from_slice(&hit.body).unwrap();
    body["delivery_id"].as_str().unwrap_or_default().to_string()
}

async fn killed_before_posting(database_url: Option<String>) {
    let hook = Receiver::start(vec![]).await;
    let mut home = home_posting_to(&hook);
    home.database_url = database_url;
    // Armed for the first daemon only: it dies right after a run's end commits.
    home.environ.push((lachesis::failpoint::VARIABLE.into(), Failpoint::WebhooksRunMoved.as_str().into()));
    home.start_daemon();
    home.environ.retain(|(k, _)| k != lachesis::failpoint::VARIABLE);
    let id = home.submit(&["-w", "quick"]);
    home.wait_daemon_killed(T).await;
    assert_eq!(home.run(id).await.state, RunState::Completed);
    assert!(hook.hits().is_empty(), "nothing was posted before the crash");

    home.start_daemon();
    let body = wait_for("the run_completed post", T, || {
        let got = hook.of_kind("run_completed");
        async move { got.into_iter().next() }
    })
    .await;
    assert_eq!(
        (body["ids"]["run"].as_str(), body["state"].as_str()),
        (Some(&*id.to_string()), Some("completed"))
    );
    let delivered = wait_delivery(&home, id, "delivered").await;
    assert_eq!(delivered["attempts"], 1);
    let hits = hook.hits();
    assert_eq!(hits.len(), 1, "posted once: {hits:?}");
    let id_sent = delivery_id(&hits[0]);
    assert_eq!(hits[0].header("x-lachesis-delivery"), Some(id_sent.clone()));
    assert_eq!(delivered["id"], id_sent.as_str());

    // Signed with the secret the daemon created in the home, private, and nowhere else.
    let secret_file = home.path().join("webhook-secret");
    let secret = std::fs::read_to_string(&secret_file).unwrap().trim().to_string();
    assert!(signature_holds(&hits[0], &secret), "{:?}", hits[0].header("x-lachesis-signature"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&secret_file).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(files_containing(home.path(), secret.as_bytes()), vec![secret_file]);
}

#[tokio::test]
async fn a_run_end_is_posted_by_the_next_daemon_when_one_dies_before_posting() {
    killed_before_posting(None).await;
}

#[tokio::test]
async fn a_run_end_is_posted_by_the_next_daemon_on_postgres_too() {
    let Some(url) = crate::support::fresh_postgres().await else { return };
    killed_before_posting(Some(url)).await;
}

#[tokio::test]
async fn a_receiver_that_refuses_for_a_while_gets_every_post_in_order_once_it_answers() {
    let hook = Receiver::start(vec![]).await;
    hook.answer(503);
    let mut home = home_posting_to(&hook);
    let marker = home.path().join("failed-once");
    // Fails its first attempt, completes its second: two notifications about one run.
    let flaky = format!(
        "name: flaky\nstages:\n  - {{name: main, argv: [sh, -c, \"if [ -e {m} ]; then exit 0; fi; touch {m}; exit 3\"]}}\n",
        m = marker.display()
    );
    home.workflow("flaky", &flaky);
    let secret = "a-secret-the-lab-shares-with-its-receiver";
    home.environ.push(("LACHESIS_WEBHOOK_SECRET".into(), secret.into()));
    home.start_daemon();
    let flaky_run = home.submit(&["-w", "flaky"]);
    let quick: Vec<Uuid> = (0..3).map(|_| home.submit(&["-w", "quick"])).collect();
    home.wait_state(flaky_run, RunState::Failed, T).await;
    home.cli_ok(&["run", "resume", &flaky_run.to_string()]);
    home.wait_state(flaky_run, RunState::Completed, T).await;
    for id in &quick {
        home.wait_state(*id, RunState::Completed, T).await;
    }
    // Each delivery was refused more than once while the receiver was down; none was dropped.
    let refused = wait_for("every delivery refused twice", T, || {
        let pending = deliveries(&home);
        async move {
            let retried =
                pending.iter().filter(|d| d["state"] == "pending" && d["attempts"].as_i64() >= Some(2));
            (retried.count() >= 4).then_some(pending)
        }
    })
    .await;
    assert!(refused.iter().all(|d| d["state"] != "failed"), "{refused:#?}");
    let flaky_second = refused
        .iter()
        .find(|d| d["subject"] == flaky_run.to_string() && d["event"] == "run_completed")
        .expect("the second notice is queued behind the first");
    assert_eq!(flaky_second["attempts"], 0, "held back while the first is not delivered");
    let answer = refused.iter().find_map(|d| d["last_answer"].as_str()).unwrap_or_default();
    assert!(answer.starts_with("http 503") && answer.contains("answered 503"), "{answer}");

    hook.answer(200);
    let posted = wait_for("every post", T, || {
        let bodies = hook.bodies.lock().unwrap().clone();
        async move { (bodies.len() >= 5).then_some(bodies) }
    })
    .await;
    let about = |run: &Uuid| -> Vec<String> {
        posted
            .iter()
            .filter(|b| b["ids"]["run"] == run.to_string())
            .map(|b| b["kind"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(about(&flaky_run), ["run_failed", "run_completed"], "in order per run");
    for id in &quick {
        assert_eq!(about(id), ["run_completed"]);
    }
    let ids: std::collections::BTreeSet<&str> =
        posted.iter().filter_map(|b| b["delivery_id"].as_str()).collect();
    assert_eq!(ids.len(), 5, "five deliveries, each posted once it was answered 200");
    // Every attempt, refused or not, was signed with the shared secret, which no file holds.
    assert!(hook.hits().iter().all(|hit| signature_holds(hit, secret)));
    assert!(files_containing(home.path(), secret.as_bytes()).is_empty());
    for delivery in deliveries(&home) {
        assert_eq!(delivery["state"], "delivered", "{delivery:#?}");
    }
    let told = home.messages(flaky_run).await;
    assert!(
        told.iter().any(|m| m.starts_with("webhook ") && m.contains("told of run_failed (attempt ")),
        "{told:#?}"
    );
}

#[tokio::test]
async fn a_receiver_that_answers_gone_is_not_retried_and_a_resend_delivers() {
    let hook = Receiver::start(vec![]).await;
    hook.answer(410);
    let mut home = home_posting_to(&hook);
    // A token in the URL stays out of every listing.
    home.environ[0].1 = hook.url.replace("http://", "http://lab:s3cret@") + "?token=t0ken";
    home.start_daemon();
    let id = home.submit(&["-w", "quick"]);
    let failed = wait_delivery(&home, id, "failed").await;
    assert_eq!((failed["attempts"].as_i64(), failed["last_status"].as_i64()), (Some(1), Some(410)));
    assert_eq!(failed["last_answer"], "http 410 Gone: answered 410");
    let listing = home.cli_ok(&["webhooks"]);
    for secret in ["s3cret", "t0ken"] {
        assert!(!listing.contains(secret) && !failed.to_string().contains(secret), "{listing}");
        // Nor in the store, its WAL or a log: the delivery keeps the URL's digest.
        assert_eq!(files_containing(home.path(), secret.as_bytes()), Vec::<std::path::PathBuf>::new());
    }
    assert!(listing.contains("failed") && listing.contains("run_completed"), "{listing}");
    let answered: Vec<u16> = hook.hits().iter().map(|hit| hit.status).collect();
    assert_eq!(answered, [410], "a 410 is not retried");
    let told = home.messages(id).await;
    assert!(
        told.iter().any(|m| m.contains("not told of run_completed after 1 attempts: http 410")),
        "{told:#?}"
    );

    // Sent again by hand, by a prefix of its id, under the same id.
    hook.answer(200);
    let delivery = failed["id"].as_str().unwrap().to_string();
    home.cli_ok(&["webhooks", "resend", &delivery[..8]]);
    let delivered = wait_delivery(&home, id, "delivered").await;
    assert_eq!((delivered["id"].as_str(), delivered["attempts"].as_i64()), (Some(&*delivery), Some(2)));
    assert_eq!(hook.of_kind("run_completed")[0]["delivery_id"], delivery.as_str());
    let again = home.cli(&["webhooks", "resend", &delivery]);
    assert!(!again.status.success());
    assert!(crate::support::stderr(&again).contains("only a failed one is sent again"), "{again:?}");
    let unknown = home.cli(&["webhooks", "resend", "zzzz"]);
    assert!(crate::support::stderr(&unknown).contains("no webhook delivery matches 'zzzz'"), "{unknown:?}");
}

#[tokio::test]
async fn the_outbox_keeps_no_more_than_its_cap() {
    let hook = Receiver::start(vec![]).await;
    let mut home = home_posting_to(&hook);
    home.environ.push(("LACHESIS_WEBHOOK_OUTBOX_CAP".into(), "3".into()));
    home.start_daemon();
    for _ in 0..6 {
        home.submit(&["-w", "quick"]);
    }
    wait_for("every run's post", T, || {
        let got = hook.of_kind("run_completed").len();
        async move { (got == 6).then_some(()) }
    })
    .await;
    let kept = wait_for("the outbox pruned to its cap", T, || {
        let kept = deliveries(&home);
        async move { (kept.len() <= 3).then_some(kept) }
    })
    .await;
    assert!(kept.iter().all(|d| d["state"] == "delivered"), "{kept:#?}");
}

#[tokio::test]
async fn deliveries_are_listed_and_resent_over_http_and_on_the_dashboard() {
    let hook = Receiver::start(vec![]).await;
    hook.answer(410);
    let mut home = home_posting_to(&hook);
    home.environ[0].1 = hook.url.replace("http://", "http://lab:s3cret@");
    let api = crate::http::start_with(&mut home, "127.0.0.1", None, &[]).await;
    let id = home.submit(&["-w", "quick"]);
    let failed = wait_for("the failed delivery over HTTP", T, || {
        let api = &api;
        async move {
            let (_, page) = api.get("/webhooks/deliveries?limit=10").await;
            page["deliveries"]
                .as_array()?
                .iter()
                .find(|d| d["subject"] == id.to_string() && d["state"] == "failed")
                .cloned()
        }
    })
    .await;
    let delivery = failed["id"].as_str().unwrap().to_string();
    assert!(failed["target"].as_str().unwrap().starts_with("http://***@127.0.0.1:"), "{failed}");

    let (status, page) = api.get("/ui/webhooks").await;
    let page = page.as_str().unwrap_or_default().to_string();
    assert_eq!(status, reqwest::StatusCode::OK);
    assert!(
        page.contains(&delivery[..8]) && page.contains(&format!("/ui/webhooks/{delivery}/resend")),
        "{page}"
    );
    assert!(!page.contains("s3cret"), "{page}");

    let (status, body) = api.get("/webhooks/deliveries?limit=many").await;
    assert_eq!((status.as_u16(), body["error"].as_str()), (400, Some("invalid_query")), "{body}");
    let (status, body) = api.post("/webhooks/deliveries/zzzz/resend", Value::Null).await;
    assert_eq!((status.as_u16(), body["error"].as_str()), (404, Some("not_found")), "{body}");

    hook.answer(200);
    let (status, resent) =
        api.post(&format!("/webhooks/deliveries/{}/resend", &delivery[..8]), Value::Null).await;
    assert_eq!((status.as_u16(), resent["id"].as_str()), (200, Some(&*delivery)), "{resent}");
    wait_delivery(&home, id, "delivered").await;
    let (status, body) = api.post(&format!("/webhooks/deliveries/{delivery}/resend"), Value::Null).await;
    assert_eq!((status.as_u16(), body["error"].as_str()), (409, Some("not_failed")), "{body}");
}
