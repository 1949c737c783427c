//! What keeps an open page live: the change feed, and a stage's log tail, both as server-sent
//! events.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use serde::Deserialize;

use super::pages::failure_page;
use crate::api::AppState;
use crate::model::RunState;
use crate::service::{DEFAULT_TAIL_LINES, LogRequest};

/// How often an open page's change feed looks at the newest event id.
const CHANGE_CHECK: Duration = Duration::from_millis(200);
/// How often pages refresh while runs are running (their progress moves between events).
const PROGRESS_TICK: Duration = Duration::from_secs(5);
/// How often a log tail looks for new bytes.
const LOG_CHECK: Duration = Duration::from_millis(250);

/// `change` whenever the newest event id of the store moves (and once at the start); and,
/// while a run is running, every `PROGRESS_TICK`, since progress reports need not be events.
pub(super) async fn changes(
    State(s): State<AppState>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let start = (s.service, -1i64, tokio::time::Instant::now(), 0u64);
    let stream = futures_util::stream::unfold(start, |(service, last, mut ticked, mut ticks)| async move {
        loop {
            let now = service.last_event_id().await.unwrap_or(last);
            if now != last {
                let event = SseEvent::default().event("change").data(now.to_string());
                return Some((Ok(event), (service, now, ticked, ticks)));
            }
            if ticked.elapsed() >= PROGRESS_TICK {
                ticked = tokio::time::Instant::now();
                let counts = service.live_run_counts().await.unwrap_or_default();
                if counts.get(RunState::Running) > 0 {
                    ticks += 1;
                    let event = SseEvent::default().event("change").data(format!("{now}.{ticks}"));
                    return Some((Ok(event), (service, now, ticked, ticks)));
                }
            }
            tokio::time::sleep(CHANGE_CHECK).await;
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

#[derive(Deserialize)]
pub(super) struct LogQuery {
    stage: Option<String>,
}

/// A stage's last lines, then each complete line as it is written. Every read goes through
/// `Service::run_logs`, bounded and off the daemon's thread; a log that shrank under the tail
/// (rotated or truncated) is followed again from its start.
pub(super) async fn log_tail(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<LogQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, Response> {
    let opening = s
        .service
        .run_logs(&id, q.stage.as_deref(), LogRequest::Tail { lines: DEFAULT_TAIL_LINES })
        .await
        .map_err(|e| failure_page("Log", "runs", e))?;
    let Some(opening) = opening.into_iter().next() else {
        return Err((StatusCode::NOT_FOUND, "no such stage").into_response());
    };
    let tail = LogFollow {
        service: s.service.clone(),
        id,
        stage: opening.stage,
        file: opening.page.file,
        previous: false,
        offset: opening.page.end,
        pending: opening.page.text,
    };
    let stream = futures_util::stream::unfold(tail, |mut tail| async move {
        loop {
            if let Some(lines) = take_whole_lines(&mut tail.pending) {
                return Some((Ok(SseEvent::default().data(lines)), tail));
            }
            tokio::time::sleep(LOG_CHECK).await;
            // The rest of the file a rotation moved to `<log>.1`, then the new one from its start.
            let previous = tail.file != 0 && tail.previous;
            let request = if previous {
                LogRequest::Previous { offset: tail.offset, limit: crate::logs::MAX_ANSWER }
            } else {
                LogRequest::Range { offset: tail.offset, limit: crate::logs::MAX_ANSWER }
            };
            let page = match tail.service.run_logs(&tail.id, Some(&tail.stage), request).await {
                Ok(mut logs) if !logs.is_empty() => logs.swap_remove(0).page,
                _ => return None, // the run was forgotten meanwhile
            };
            if previous {
                if page.file == tail.file {
                    tail.pending.push_str(&page.text);
                    tail.offset = page.end;
                }
                if page.file != tail.file || page.end >= page.size {
                    (tail.previous, tail.file, tail.offset) = (false, 0, 0);
                }
                continue;
            }
            if page.file == 0 {
                continue; // not there (yet, or between a rotation's two renames)
            }
            if tail.file != 0 && page.file != tail.file {
                tail.previous = true;
                continue;
            }
            tail.file = page.file;
            if page.size < tail.offset {
                tail.offset = 0; // truncated
                continue;
            }
            tail.offset = page.end;
            tail.pending.push_str(&page.text);
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

struct LogFollow {
    service: crate::service::Service,
    id: String,
    stage: String,
    /// The file being read (see `LogPage::file`; 0 before there is one).
    file: u64,
    /// It rotated: reading the rest of `file`, now `<log>.1`.
    previous: bool,
    /// Where the next read starts.
    offset: u64,
    /// Text read but not sent: the start of a line still being written.
    pending: String,
}

/// The complete lines of `pending`, taken out without their final newline; a line longer than
/// one answer is taken as it is, so what waits stays bounded.
pub(super) fn take_whole_lines(pending: &mut String) -> Option<String> {
    let end = match pending.rfind('\n') {
        Some(end) => end,
        None if pending.len() as u64 >= crate::logs::MAX_ANSWER => pending.len(),
        None => return None,
    };
    let rest = pending.split_off((end + 1).min(pending.len()));
    let mut lines = std::mem::replace(pending, rest);
    lines.truncate(end);
    Some(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_tail_sends_whole_lines_and_keeps_the_rest_bounded() {
        let mut pending = "a\nb\npart".to_string();
        assert_eq!(take_whole_lines(&mut pending).as_deref(), Some("a\nb"));
        assert_eq!(take_whole_lines(&mut pending), None);
        assert_eq!(pending, "part", "a line still being written waits");
        pending.push_str("ial\n");
        assert_eq!(take_whole_lines(&mut pending).as_deref(), Some("partial"));
        let mut long = "x".repeat(crate::logs::MAX_ANSWER as usize);
        assert_eq!(take_whole_lines(&mut long).map(|l| l.len() as u64), Some(crate::logs::MAX_ANSWER));
        assert!(long.is_empty());
    }
}
