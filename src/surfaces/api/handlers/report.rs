//! The morning report over a window (`?since=`).

use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;

use super::answer::{Answer, Q, ok};
use crate::api::{AppState, Failure};

#[derive(Deserialize)]
pub struct ReportQuery {
    pub since: Option<String>,
}

/// The report's window from `?since=` (a duration longer than zero, at most 30 days), or the
/// default 12 hours.
pub fn report_window(since: Option<&str>) -> Result<std::time::Duration, String> {
    match since {
        None => Ok(crate::service::DEFAULT_WINDOW),
        Some(text) => text
            .parse::<crate::workflow::Dur>()
            .and_then(crate::workflow::Dur::positive)
            .map(|d| d.0)
            .map_err(|why| format!("since: {why}")),
    }
}

pub async fn report(State(s): State<AppState>, Q(q): Q<ReportQuery>) -> Answer {
    let window = report_window(q.since.as_deref())
        .map_err(|why| Failure::new(StatusCode::BAD_REQUEST, "invalid_query", why))?;
    ok(s.service.report(window).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_window_is_a_positive_duration_or_the_default() {
        assert_eq!(report_window(None), Ok(crate::service::DEFAULT_WINDOW));
        assert_eq!(report_window(Some("30m")), Ok(std::time::Duration::from_secs(1800)));
        for bad in ["0", "0s", "soon", "-1h", "31d", ""] {
            let why = report_window(Some(bad)).unwrap_err();
            assert!(why.starts_with("since: ") && !why.contains('\n'), "{bad}: {why}");
        }
    }
}
