//! The daemon's health as its loop knows it: whether the store takes the loop's writes, and
//! if not since when, why, and what waits meanwhile. The store cannot be written while this
//! matters, so it lives in the daemon's memory: the loop is its one writer (see `held`), and
//! the service hands a copy to `GET /health`, which `doctor` and `daemon status` read.

use serde::{Deserialize, Serialize};

use crate::engine::store::Fault;
use crate::model::Millis;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// Set while the store refuses writes; None while they land (or nobody tried yet).
    pub writes_failing: Option<WritesFailing>,
}

impl Health {
    pub fn is_healthy(&self) -> bool {
        self.writes_failing.is_none()
    }
}

/// Writes that do not land, and what is held until they do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WritesFailing {
    /// When the first write of this episode failed (ms since the epoch).
    pub since: Millis,
    /// The last failure's kind: `full`, `away` or `lasting`.
    pub kind: Fault,
    /// The last failure, on one line.
    pub error: String,
    /// Runs with messages held.
    pub held_runs: usize,
    /// Messages held, in all.
    pub held_messages: usize,
    /// A claim could not land: the queue waits (its runs stay pending in the store).
    pub queue_waits: bool,
    /// When the held messages are tried next (ms since the epoch), if a try is due.
    pub next_try: Option<Millis>,
}

impl WritesFailing {
    /// One line for a person: `writes fail (lasting: …) since 2026-11-26 10:31:02 UTC (4m 5s):
    /// attempt to write a readonly database; 3 runs, 7 messages held; next try in 30s`.
    pub fn describe(&self, now: Millis) -> String {
        let since = chrono::DateTime::from_timestamp_millis(self.since)
            .map_or_else(|| self.since.to_string(), |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string());
        let ago = |ms: Millis| {
            humantime::format_duration(std::time::Duration::from_secs((ms.max(0) / 1000) as u64))
        };
        let next = match self.next_try {
            Some(at) => format!("; next try in {}", ago(at - now + 999)),
            None => String::new(),
        };
        let queue = if self.queue_waits { ", the queue waits" } else { "" };
        format!(
            "writes fail ({}: {}) since {since} ({}): {}; {} runs, {} messages held{queue}{next}",
            self.kind,
            self.kind.meaning(),
            ago(now - self.since),
            self.error,
            self.held_runs,
            self.held_messages,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_episode_reads_in_one_line() {
        let failing = WritesFailing {
            since: 1_000_000,
            kind: Fault::Lasting,
            error: "attempt to write a readonly database".into(),
            held_runs: 3,
            held_messages: 7,
            queue_waits: true,
            next_try: Some(1_000_000 + 250_000),
        };
        let line = failing.describe(1_000_000 + 245_500);
        assert_eq!(
            line,
            "writes fail (lasting: the store refuses writes until someone acts) since 1970-01-01 00:16:40 \
             UTC (4m 5s): attempt to write a readonly database; 3 runs, 7 messages held, the queue waits; next try in 5s"
        );
        assert!(!line.contains('\n'));
        let health = Health { writes_failing: Some(failing) };
        assert!(!health.is_healthy());
        let json = serde_json::to_value(&health).unwrap();
        assert_eq!(json["writes_failing"]["kind"], "lasting");
        assert_eq!(serde_json::from_value::<Health>(json).unwrap(), health);
        assert!(Health::default().is_healthy());
    }
}
