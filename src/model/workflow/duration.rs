//! Durations as workflows and flags write them: units or seconds, bounded.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The longest duration lachesis accepts anywhere (timeouts, delays, grace periods, backoffs,
/// daemon intervals): 30 days. Longer values are mistakes, and bounding them keeps every
/// `Instant + Duration` in range.
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);
const MAX_DURATION_TEXT: &str = "30 days";

/// A duration written as `500ms`, `5s`, `2m`, `1h`, `1h 30m` (humantime's syntax), or a number
/// of seconds; at most [`MAX_DURATION`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dur(pub Duration);

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if !ms.is_multiple_of(1000) { write!(f, "{ms}ms") } else { write!(f, "{}s", ms / 1000) }
    }
}

impl Dur {
    /// A number of seconds, as written in YAML or JSON (`5`, `0.25`).
    pub fn from_seconds(secs: f64) -> Result<Dur, String> {
        if !secs.is_finite() || secs < 0.0 {
            return Err(format!("{secs:e} is not a duration (e.g. 500ms, 5s, 2m)"));
        }
        // Compare before converting: from_secs_f64 panics at 2^64 s.
        if secs > MAX_DURATION.as_secs_f64() {
            return Err(format!("{secs:e}s is longer than the maximum of {MAX_DURATION_TEXT}"));
        }
        Ok(Dur(Duration::from_secs_f64(secs)))
    }

    /// Refuses zero, for intervals and waits that must make progress.
    pub fn positive(self) -> Result<Dur, String> {
        if self.0.is_zero() { Err("must be longer than 0s".into()) } else { Ok(self) }
    }
}

impl std::str::FromStr for Dur {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let text = s.trim();
        let shown = crate::text::one_line(text);
        if text.bytes().all(|b| b.is_ascii_digit() || b == b'.') && !text.is_empty() {
            let secs: f64 =
                text.parse().map_err(|_| format!("'{shown}' is not a duration (e.g. 500ms, 5s, 2m)"))?;
            return Dur::from_seconds(secs);
        }
        // humantime has no fractions; `1.5s` is kept by turning it into milliseconds.
        let normalized = fraction_to_millis(text);
        let duration = humantime::parse_duration(normalized.as_deref().unwrap_or(text))
            .map_err(|err| format!("'{shown}' is not a duration ({err}; e.g. 500ms, 5s, 2m, 1h)"))?;
        if duration > MAX_DURATION {
            return Err(format!("'{shown}' is longer than the maximum of {MAX_DURATION_TEXT}"));
        }
        Ok(Dur(duration))
    }
}

/// `1.5s` / `0.5m` / `2.25h` → the same in whole milliseconds; None when `text` isn't one
/// decimal number with one unit.
fn fraction_to_millis(text: &str) -> Option<String> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    if !number.contains('.') {
        return None;
    }
    let scale = match unit.trim() {
        "ms" => 1.0,
        "s" => 1e3,
        "m" => 60e3,
        "h" => 3600e3,
        _ => return None,
    };
    let millis = number.parse::<f64>().ok()? * scale;
    // Out-of-range values are left to humantime's error (and the maximum check).
    (millis.is_finite() && millis <= MAX_DURATION.as_millis() as f64)
        .then(|| format!("{}ms", millis.round() as u64))
}

impl Serialize for Dur {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Seconds(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Seconds(secs) => Dur::from_seconds(secs).map_err(serde::de::Error::custom),
            Raw::Text(text) => text.parse().map_err(serde::de::Error::custom),
        }
    }
}
