//! The daemon's morning report poster (`lachesis daemon --report-cron …`): at each due time of
//! its cron, the report over its window is POSTed as JSON to its webhooks.
//!
//! A task of its own beside the reconciler, like the metric poller: a report is not run state
//! (nothing decides on it), building one reads up to a thousand rows and some log tails, and a
//! slow receiver is retried for up to a minute; none of that may hold up the loop that notices
//! exits. The last due time handled is kept in the store and moved by a compare-and-set before
//! the post, so a restarted daemon does not post the same due time twice, a daemon that was
//! down over one or more due times posts once when it starts (a catch-up), and of several
//! daemons sharing a PostgreSQL store one posts.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};

use crate::cron::{Cron, Tick, tick};
use crate::service::Service;
use crate::webhooks::{Payload, Webhook, WebhookClient};

/// The environment variable (or `$LACHESIS_HOME/.env` key) naming the report's webhooks,
/// comma-separated: the place for a URL that carries a secret, which argv would show to all.
pub const WEBHOOK_VAR: &str = "LACHESIS_REPORT_WEBHOOK";

/// How long the poster sleeps at most before looking at the clock again (a clock that jumped).
const LONGEST_SLEEP: Duration = Duration::from_secs(3600);
/// How long it waits before trying the store again after an error.
const STORE_RETRY: Duration = Duration::from_secs(30);

/// What the daemon posts, when and where.
#[derive(Clone, Debug)]
pub struct ReportPost {
    pub cron: Cron,
    /// The report's window.
    pub window: Duration,
    /// Where it goes (kept out of every log and message: only redacted forms are shown).
    pub webhooks: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReportPostError {
    #[error(transparent)]
    Cron(#[from] crate::cron::CronError),
    #[error(
        "--report-cron needs a webhook: --report-webhook URL, or LACHESIS_REPORT_WEBHOOK (in the \
         environment or $LACHESIS_HOME/.env)"
    )]
    NoWebhook,
    #[error("--report-webhook needs --report-cron (when to post)")]
    NoCron,
    #[error("report webhook '{0}' must be an http(s) URL")]
    NotHttp(String),
    #[error(
        "--report-webhook {0} carries credentials, which every user sees in the daemon's command line: \
         put it in LACHESIS_REPORT_WEBHOOK (in $LACHESIS_HOME/.env, mode 600) instead"
    )]
    SecretInArgv(String),
}

impl ReportPost {
    /// The post the daemon's settings ask for, if any: `cron` (in `tz`) with the `--report-webhook`
    /// URLs, which must carry no credentials, and those of [`WEBHOOK_VAR`], which may. Without
    /// a cron nothing is posted.
    pub fn from_settings(
        cron: Option<&str>,
        tz: Option<&str>,
        window: Duration,
        argv_webhooks: &[String],
    ) -> Result<Option<ReportPost>, ReportPostError> {
        for url in argv_webhooks {
            if crate::secrets::redact_url(url.trim()) != url.trim() {
                return Err(ReportPostError::SecretInArgv(crate::secrets::redact_url(url)));
            }
        }
        let from_env: Vec<String> = crate::environ::var(WEBHOOK_VAR)
            .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect())
            .unwrap_or_default();
        let webhooks: Vec<String> =
            argv_webhooks.iter().map(|u| u.trim().to_string()).chain(from_env).collect();
        for url in &webhooks {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ReportPostError::NotHttp(crate::secrets::redact_url(url)));
            }
        }
        match (cron, webhooks.is_empty()) {
            (None, _) if !argv_webhooks.is_empty() => Err(ReportPostError::NoCron),
            // A webhook left in the env file posts nothing without a cron (posting is off).
            (None, _) => Ok(None),
            (Some(_), true) => Err(ReportPostError::NoWebhook),
            (Some(cron), false) => Ok(Some(ReportPost { cron: Cron::parse(cron, tz)?, window, webhooks })),
        }
    }

    /// The name its last firing is kept under: one per cron expression and zone, so daemons
    /// sharing a store and a cron post once, and a new cron has missed nothing.
    pub fn name(&self) -> String {
        post_name(self.cron.expression(), self.cron.time_zone())
    }
}

/// The name a post of `cron` in `tz` keeps its last firing under.
pub fn post_name(cron: &str, tz: Option<&str>) -> String {
    format!("{} {}", cron.trim(), tz.unwrap_or("UTC"))
}

fn utc(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_else(Utc::now)
}

/// Posts at each due time until the daemon stops.
pub async fn run(service: Service, post: ReportPost, signer: crate::webhooks::Signer) {
    let client = match WebhookClient::with_defaults() {
        Ok(client) => client.signed(signer),
        Err(err) => {
            tracing::warn!("no morning report will be posted: {err}");
            return;
        }
    };
    let name = post.name();
    let mut last = loop {
        match service.report_post_since(&name).await {
            Ok(last) => break last,
            Err(err) => {
                tracing::warn!("morning report: cannot read its last post ({err}); trying again");
                tokio::time::sleep(STORE_RETRY).await;
            }
        }
    };
    // The next due time last written to the log: said once, not on every hourly look.
    let mut announced = None;
    loop {
        let now = Utc::now();
        if let Tick::Fire { due_at, missed, .. } = tick(&post.cron, utc(last), now, false) {
            let fired = now.timestamp_millis();
            match service.claim_report_post(&name, last, fired).await {
                Ok(true) => {
                    if missed > 0 {
                        tracing::info!(
                            "morning report: {} due times passed while no daemon ran; posting one report for {due_at}",
                            missed + 1
                        );
                    }
                    last = fired;
                    deliver(&service, &client, &post, due_at).await;
                }
                // Another daemon of this store posted it: take its word for when.
                Ok(false) => match service.report_post_since(&name).await {
                    Ok(theirs) => last = theirs,
                    Err(err) => tracing::warn!("morning report: {err}"),
                },
                Err(err) => {
                    tracing::warn!("morning report: cannot record the post ({err}); trying again");
                    tokio::time::sleep(STORE_RETRY).await;
                    continue;
                }
            }
        }
        let next = post.cron.next_after(now.max(utc(last)));
        match next {
            Some(next) if announced != Some(next) => {
                tracing::info!("morning report: next post due at {next}");
                announced = Some(next);
            }
            Some(_) => {}
            None => {
                tracing::info!("morning report: the cron never fires again");
                return;
            }
        }
        let wait = next.map_or(LONGEST_SLEEP, |due| {
            (due - Utc::now()).to_std().unwrap_or(Duration::ZERO) + Duration::from_millis(5)
        });
        tokio::time::sleep(wait.min(LONGEST_SLEEP)).await;
    }
}

/// Builds the report and hands it to one delivery task per webhook; each says how it went in
/// the daemon's log (URLs redacted).
async fn deliver(service: &Service, client: &WebhookClient, post: &ReportPost, due_at: DateTime<Utc>) {
    let report = match service.report(post.window).await {
        Ok(report) => report,
        Err(err) => {
            tracing::warn!("morning report for {due_at} not posted: cannot build it: {err}");
            return;
        }
    };
    let note = payload(&report, due_at);
    let hooks = post.webhooks.iter().map(|url| Webhook { url: url.clone() }).collect();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    client.spawn_send(hooks, note, tx);
    tokio::spawn(async move {
        while let Some(sent) = rx.recv().await {
            match (sent.delivered, &sent.error) {
                (true, _) => {
                    tracing::info!("morning report posted to {} (attempt {})", sent.url, sent.attempts)
                }
                (false, error) => tracing::warn!(
                    "morning report not posted to {} after {} attempts: {}",
                    sent.url,
                    sent.attempts,
                    error.as_deref().unwrap_or("no answer")
                ),
            }
        }
    });
}

/// The webhook body: `kind` `morning_report`, the window in `ids`, the tally of runs as the
/// `state`, and the whole report as the `summary`.
pub fn payload(report: &crate::service::Report, due_at: DateTime<Utc>) -> Payload {
    Payload {
        kind: Payload::MORNING_REPORT.into(),
        ids: serde_json::json!({
            "window": report.window, "since": report.since, "until": report.until,
            "due_at": due_at.timestamp_millis(),
        }),
        state: report.run_tally(),
        summary: serde_json::to_value(report).unwrap_or_default(),
        at: Utc::now().timestamp(),
        delivery_id: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_post_needs_a_cron_and_a_webhook_and_no_secret_on_the_command_line() {
        let hour = Duration::from_secs(3600);
        let hook = vec!["http://127.0.0.1:9/hook".to_string()];
        let post = ReportPost::from_settings(Some("0 7 * * *"), Some("Europe/Paris"), hour, &hook);
        let post = post.unwrap().unwrap();
        assert_eq!(post.name(), "0 7 * * * Europe/Paris");
        assert_eq!(post.webhooks, hook);
        // The variable is read through the environment; a test can only rely on its absence.
        if crate::environ::var(WEBHOOK_VAR).is_some() {
            return;
        }
        assert!(ReportPost::from_settings(None, None, hour, &[]).unwrap().is_none());
        let err = |cron: Option<&str>, hooks: &[&str]| {
            let hooks: Vec<String> = hooks.iter().map(|h| h.to_string()).collect();
            ReportPost::from_settings(cron, None, hour, &hooks).unwrap_err().to_string()
        };
        assert!(err(Some("0 7 * * *"), &[]).starts_with("--report-cron needs a webhook"));
        assert!(err(None, &["http://h/x"]).starts_with("--report-webhook needs --report-cron"));
        assert!(err(Some("0 25 * * *"), &["http://h/x"]).contains("hour 25 is out of range"));
        assert!(err(Some("0 7 * * *"), &["ftp://h/x"]).contains("must be an http(s) URL"));
        let secret = err(Some("0 7 * * *"), &["https://user:hunter2@h/x?token=abc"]);
        assert!(
            secret.contains("carries credentials") && !secret.contains("hunter2") && !secret.contains("abc")
        );
        for message in [secret, err(Some("0 7 * * *"), &[])] {
            assert!(!message.contains('\n'), "{message}");
        }
    }
}
