//! When does a starting stage count as up: its probe answers, or its start delay runs out,
//! whichever comes first; a probe with no delay gets `start_timeout` to answer.

use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout};

use crate::workflow::{MAX_DURATION, Probe, StagePlan};

const PROBE_INTERVAL: Duration = Duration::from_millis(50);
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How the stage came up, for the event log.
pub type ReadyHow = String;

#[derive(Debug, thiserror::Error)]
#[error("not up after {}s ({probe} never answered)", waited.as_secs())]
pub struct NotReady {
    pub waited: Duration,
    pub probe: String,
}

/// Waits until the stage counts as up. `elapsed` is how long it has already been starting (a
/// daemon that restarts mid-start resumes rather than starts over).
pub async fn wait_ready(
    plan: &StagePlan,
    elapsed: Duration,
    client: &reqwest::Client,
) -> Result<ReadyHow, NotReady> {
    // Checked: the monotonic clock starts at boot, and a duration from input can be anything.
    let now = Instant::now();
    let begun = now.checked_sub(elapsed.min(Duration::from_secs(86_400))).unwrap_or(now);
    let after = |wait: Duration| begun.checked_add(wait).unwrap_or_else(|| now + MAX_DURATION);
    let Some(probe) = &plan.probe else {
        if let Some(delay) = plan.start_delay {
            tokio::time::sleep_until(after(delay)).await;
            return Ok(format!("start delay of {} elapsed", crate::workflow::Dur(delay)));
        }
        return Ok("no delay or probe".into());
    };
    let deadline = after(plan.start_delay.unwrap_or(plan.start_timeout));
    loop {
        if answers(probe, client).await {
            return Ok(format!("{} answered", describe(probe)));
        }
        if Instant::now() + PROBE_INTERVAL >= deadline {
            sleep(deadline.saturating_duration_since(Instant::now())).await;
            return match plan.start_delay {
                Some(delay) => Ok(format!("start delay of {} elapsed", crate::workflow::Dur(delay))),
                None => Err(NotReady { waited: plan.start_timeout, probe: describe(probe) }),
            };
        }
        sleep(PROBE_INTERVAL).await;
    }
}

pub fn describe(probe: &Probe) -> String {
    match probe {
        Probe::Http { http } => format!("GET {http}"),
        Probe::Tcp { tcp } => format!("tcp {tcp}"),
    }
}

async fn answers(probe: &Probe, client: &reqwest::Client) -> bool {
    match probe {
        Probe::Http { http } => {
            let response = client.get(http).timeout(PROBE_TIMEOUT).send().await;
            response.is_ok_and(|r| r.status().is_success())
        }
        Probe::Tcp { tcp } => {
            timeout(PROBE_TIMEOUT, TcpStream::connect(tcp.as_str())).await.is_ok_and(|r| r.is_ok())
        }
    }
}
