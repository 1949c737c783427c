//! Reading a resolved `progress:` source: the step (and total) in an HTTP answer, a log line or
//! a JSONL line. The reconciler's workers fetch and follow; this only reads.

use std::path::Path;
use std::time::Duration;

/// The total of a run whose progress is known only as a fraction.
pub const FRACTION_TOTAL: u64 = 1000;

/// Where a run's step is read, with every placeholder filled in.
#[derive(Clone, Debug)]
pub enum ResolvedSource {
    Http { url: String, step: String, every: Duration },
    Log { path: std::path::PathBuf, pattern: regex::Regex },
    Jsonl { path: std::path::PathBuf, step: Option<String>, fraction: Option<String> },
}

impl ResolvedSource {
    /// The file followed line by line: a stage's log or a JSONL file.
    pub fn followed_file(&self) -> Option<&Path> {
        match self {
            ResolvedSource::Log { path, .. } | ResolvedSource::Jsonl { path, .. } => Some(path),
            ResolvedSource::Http { .. } => None,
        }
    }
}

/// Where a run's total comes from, once resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResolvedTotal {
    Fixed(u64),
    /// A JSON pointer into the HTTP answer or the JSONL line.
    Pointer(String),
    /// The `total` group of the log pattern.
    Group,
    Unknown,
}

#[derive(Clone, Debug)]
pub struct ResolvedProgress {
    pub source: ResolvedSource,
    pub total: ResolvedTotal,
}

/// One reading of a source: the step, and the total when the source carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    pub step: u64,
    pub total: Option<u64>,
}

impl ResolvedProgress {
    /// The reading in one JSON answer, if it has a step.
    pub fn read_json(&self, answer: &serde_json::Value) -> Option<Reading> {
        let ResolvedSource::Http { step, .. } = &self.source else { return None };
        let step = as_count(answer.pointer(step)?)?;
        let total = match &self.total {
            ResolvedTotal::Fixed(n) => Some(*n),
            ResolvedTotal::Pointer(p) => answer.pointer(p).and_then(as_count),
            _ => None,
        };
        Some(Reading { step, total })
    }

    /// The reading in one line of a followed file (a log or a JSONL file), if it has one.
    pub fn read_line(&self, line: &str) -> Option<Reading> {
        if let ResolvedSource::Jsonl { .. } = &self.source {
            return self.read_jsonl(line).ok().flatten();
        }
        let ResolvedSource::Log { pattern, .. } = &self.source else { return None };
        let caps = pattern.captures(line)?;
        let step = caps.name("step")?.as_str().parse().ok()?;
        let total = match &self.total {
            ResolvedTotal::Fixed(n) => Some(*n),
            ResolvedTotal::Group => caps.name("total").and_then(|t| t.as_str().parse().ok()),
            _ => None,
        };
        Some(Reading { step, total })
    }
}

impl ResolvedProgress {
    /// The reading in one line of a JSONL file: `Ok(None)` for a line without a step (a blank
    /// line, another record), an error for a line that is not JSON. A step with a total wins;
    /// else a fraction counts in thousandths (see `JsonlSource::fraction`); else the step alone.
    pub fn read_jsonl(&self, line: &str) -> Result<Option<Reading>, serde_json::Error> {
        let ResolvedSource::Jsonl { step, fraction, .. } = &self.source else { return Ok(None) };
        if line.trim().is_empty() {
            return Ok(None);
        }
        let record: serde_json::Value = serde_json::from_str(line)?;
        let step = step.as_deref().and_then(|p| record.pointer(p)).and_then(as_count);
        let total = match &self.total {
            ResolvedTotal::Fixed(n) => Some(*n),
            ResolvedTotal::Pointer(p) => record.pointer(p).and_then(as_count),
            _ => None,
        };
        let fraction = fraction.as_deref().and_then(|p| record.pointer(p)).and_then(as_fraction);
        Ok(match (step, total, fraction) {
            (Some(step), Some(total), _) => Some(Reading { step, total: Some(total) }),
            (_, _, Some(done)) => Some(Reading {
                step: (done * FRACTION_TOTAL as f64).round() as u64,
                total: Some(FRACTION_TOTAL),
            }),
            (Some(step), None, None) => Some(Reading { step, total: None }),
            (None, _, None) => None,
        })
    }

    /// `read_followed` for an attempt that resumed at step `from`: a line whose own step is
    /// below it is not read. It is an earlier attempt's, kept by a trainer that rewrote its file
    /// on resuming (tinker-cookbook keeps the metrics rows before its checkpoint). A JSONL source
    /// without a `step` pointer can't tell, and reads every line.
    pub fn read_followed_from(
        &self,
        line: &str,
        from: Option<u64>,
    ) -> Result<Option<Reading>, serde_json::Error> {
        let reading = self.read_followed(line)?;
        match from {
            Some(from) if reading.is_some() => {
                Ok(reading.filter(|_| self.line_step(line).is_none_or(|step| step >= from)))
            }
            _ => Ok(reading),
        }
    }

    /// The training step a followed line names, as the trainer counts it (not in thousandths).
    fn line_step(&self, line: &str) -> Option<u64> {
        match &self.source {
            ResolvedSource::Jsonl { step: Some(pointer), .. } => {
                serde_json::from_str::<serde_json::Value>(line).ok()?.pointer(pointer).and_then(as_count)
            }
            ResolvedSource::Log { pattern, .. } => {
                pattern.captures(line)?.name("step")?.as_str().parse().ok()
            }
            _ => None,
        }
    }

    /// One line of a followed file: a log line's match or a JSONL line's reading (an error for
    /// a JSONL line that is not JSON).
    pub fn read_followed(&self, line: &str) -> Result<Option<Reading>, serde_json::Error> {
        match self.source {
            ResolvedSource::Jsonl { .. } => self.read_jsonl(line),
            _ => Ok(self.read_line(line)),
        }
    }
}

/// A fraction done, 0 to 1 (a number or a string of one).
fn as_fraction(value: &serde_json::Value) -> Option<f64> {
    let number = value.as_f64().or_else(|| value.as_str()?.trim().parse().ok())?;
    (0.0..=1.0).contains(&number).then_some(number)
}

pub(in crate::runtime::workflow) fn as_count(value: &serde_json::Value) -> Option<u64> {
    value
        .as_u64()
        .or_else(|| value.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
        .or_else(|| value.as_str()?.trim().parse().ok())
}
