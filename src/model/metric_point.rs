//! Training metrics by name: a reading is one value of one named metric at one step of one
//! attempt, from any source (W&B history, a JSONL file, a stage log pattern); a series is one
//! metric's readings as the run's training saw them, resumes included.

use serde::{Deserialize, Serialize};

use super::Millis;

/// The most readings of one metric a series read returns (the first ones by attempt and step):
/// a run logging every step for 100,000 steps fits, and no read grows without bound.
pub const MAX_SERIES_POINTS: usize = 100_000;

/// The longest metric name kept; a longer one is not a metric name but a stage's noise.
pub const MAX_NAME_LEN: usize = 200;

/// One point of a metric's series.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricPoint {
    /// The attempt that read it (1 for the first).
    pub attempt: u32,
    pub step: i64,
    pub value: f64,
}

/// One reading to record, under the attempt its writer reads for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricReading {
    pub name: String,
    pub step: i64,
    pub value: f64,
}

impl MetricReading {
    /// A reading of `name` at `step`, or `None` for what W&B drops too (NaN and infinities) and
    /// for a name that is empty or too long to be one.
    pub fn new(name: impl Into<String>, step: i64, value: f64) -> Option<MetricReading> {
        let name = name.into();
        (value.is_finite() && !name.is_empty() && name.len() <= MAX_NAME_LEN).then_some(MetricReading {
            name,
            step,
            value,
        })
    }
}

/// One metric of a run at a glance: its name, how many readings it has, and the last of them
/// (the latest attempt's highest step).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricSummary {
    pub name: String,
    pub count: i64,
    pub last: MetricPoint,
    /// When the last reading was recorded (or last changed), unix milliseconds.
    pub recorded_at: Millis,
}

/// A metric's series from its readings ordered by (attempt, step): a resumed attempt rewound the
/// training to its first step, so its readings replace every earlier attempt's reading from that
/// step on (the abandoned steps past the resume point are not the run's history any more).
/// The result is ordered by step, one point per step.
pub fn series(readings: impl IntoIterator<Item = MetricPoint>) -> Vec<MetricPoint> {
    let mut points: Vec<MetricPoint> = Vec::new();
    let mut attempt = None;
    for point in readings {
        if attempt != Some(point.attempt) {
            // The first reading of a later attempt: drop what it rewound over.
            attempt = Some(point.attempt);
            let keep = points.partition_point(|p| p.step < point.step);
            points.truncate(keep);
        }
        match points.last_mut() {
            // Readings come ordered by step within an attempt; a repeat of a step replaces.
            Some(last) if last.step == point.step => *last = point,
            Some(last) if last.step > point.step => {}
            _ => points.push(point),
        }
    }
    points
}

/// How many buckets [`downsample`] splits a series' inner points into, for at most `max` points.
pub fn buckets(max: usize) -> usize {
    max.max(2).saturating_sub(2) / 2
}

/// At most `max` points of `points` (a series, ordered by step) for a chart: the first and the
/// last always, and between them, per bucket of inner points, its lowest and its highest value
/// (the first by step of equals), in step order, so a spike or a dip the full series has is
/// still drawn. Inner point `j` (from 0, of `L`) is in bucket `j * B / L` of [`buckets`]`(max)`.
/// A series that fits is returned whole; `max` below 4 leaves the ends alone.
pub fn downsample(points: &[MetricPoint], max: usize) -> Vec<MetricPoint> {
    let max = max.max(2);
    if points.len() <= max {
        return points.to_vec();
    }
    let inner = &points[1..points.len() - 1];
    let count = buckets(max);
    // Per bucket: its lowest and highest point, by place in `inner`.
    let mut extremes: Vec<Option<(usize, usize)>> = vec![None; count];
    for (j, point) in inner.iter().enumerate().take(if count == 0 { 0 } else { inner.len() }) {
        let slot = &mut extremes[j * count / inner.len()];
        *slot = Some(match *slot {
            None => (j, j),
            Some((low, high)) => (
                if point.value < inner[low].value { j } else { low },
                if point.value > inner[high].value { j } else { high },
            ),
        });
    }
    let mut out = Vec::with_capacity(max);
    out.push(points[0]);
    for (low, high) in extremes.into_iter().flatten() {
        out.push(inner[low.min(high)]);
        if low != high {
            out.push(inner[low.max(high)]);
        }
    }
    out.push(points[points.len() - 1]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(attempt: u32, step: i64, value: f64) -> MetricPoint {
        MetricPoint { attempt, step, value }
    }

    #[test]
    fn one_attempt_is_its_readings() {
        let readings = vec![p(1, 0, 0.1), p(1, 1, 0.2), p(1, 5, 0.3)];
        assert_eq!(series(readings.clone()), readings);
        assert_eq!(series(Vec::new()), Vec::new());
    }

    #[test]
    fn a_resume_replaces_the_steps_it_reads_again_and_drops_those_it_rewound_over() {
        // Attempt 1 reached step 8; attempt 2 resumed at step 5 and is at step 6 so far.
        let readings = vec![p(1, 2, 0.2), p(1, 5, 0.5), p(1, 8, 0.8), p(2, 5, 5.0), p(2, 6, 6.0)];
        assert_eq!(series(readings), vec![p(1, 2, 0.2), p(2, 5, 5.0), p(2, 6, 6.0)]);
        // A third attempt from the start replaces everything.
        let readings = vec![p(1, 2, 0.2), p(2, 5, 5.0), p(3, 0, 9.0)];
        assert_eq!(series(readings), vec![p(3, 0, 9.0)]);
        // An attempt that starts past the end only adds.
        let readings = vec![p(1, 2, 0.2), p(2, 3, 3.0)];
        assert_eq!(series(readings), vec![p(1, 2, 0.2), p(2, 3, 3.0)]);
    }

    #[test]
    fn series_are_ordered_by_step_one_point_per_step() {
        // Every sequence ordered by (attempt, step), however the attempts overlap.
        for seed in 0u64..500 {
            let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let mut next = |n: u64| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 33) % n
            };
            let mut readings = Vec::new();
            for attempt in 1..=1 + next(3) as u32 {
                let mut steps: Vec<i64> = (0..next(6)).map(|_| next(10) as i64).collect();
                steps.sort();
                readings.extend(steps.into_iter().map(|s| p(attempt, s, s as f64)));
            }
            let got = series(readings.clone());
            assert!(got.windows(2).all(|w| w[0].step < w[1].step), "{readings:?} -> {got:?}");
            // The last attempt's readings are all there.
            if let Some(last) = readings.last() {
                for r in readings.iter().filter(|r| r.attempt == last.attempt) {
                    assert!(got.iter().any(|g| g.attempt == r.attempt && g.step == r.step), "{readings:?}");
                }
            }
        }
    }

    #[test]
    fn readings_that_w_and_b_drops_are_never_made() {
        assert!(MetricReading::new("loss", 1, f64::NAN).is_none());
        assert!(MetricReading::new("loss", 1, f64::INFINITY).is_none());
        assert!(MetricReading::new("loss", 1, f64::NEG_INFINITY).is_none());
        assert!(MetricReading::new("", 1, 1.0).is_none());
        assert!(MetricReading::new("x".repeat(MAX_NAME_LEN + 1), 1, 1.0).is_none());
        assert_eq!(MetricReading::new("loss", 1, -0.5).map(|r| r.value), Some(-0.5));
    }

    #[test]
    fn a_downsampled_series_keeps_its_ends_its_extremes_and_its_bound() {
        let points: Vec<MetricPoint> = (0..1_000).map(|i| p(1, i, (i as f64 / 50.0).sin())).collect();
        let mut spiky = points.clone();
        spiky[637].value = 9.0;
        spiky[211].value = -9.0;
        for max in [2, 3, 4, 10, 101, 400, 999] {
            for (series, spikes) in [(&points, false), (&spiky, true)] {
                let got = downsample(series, max);
                assert!(got.len() <= max, "{max}: {} points", got.len());
                assert_eq!((got[0], got[got.len() - 1]), (series[0], series[999]), "{max}");
                assert!(got.windows(2).all(|w| w[0].step < w[1].step), "{max}: ordered by step");
                if max >= 4 && spikes {
                    assert!(
                        got.iter().any(|g| g.value == 9.0) && got.iter().any(|g| g.value == -9.0),
                        "{max}"
                    );
                }
            }
        }
        assert_eq!(downsample(&points[..5], 10), points[..5].to_vec(), "a series that fits is whole");
        assert!(downsample(&[], 10).is_empty());
        // Ties: the first by step of equal values, low and high alike.
        let flat: Vec<MetricPoint> = (0..10).map(|i| p(1, i, 1.0)).collect();
        assert_eq!(downsample(&flat, 4).iter().map(|p| p.step).collect::<Vec<_>>(), vec![0, 1, 9]);
        // Inner point j of L is in bucket j * B / L: 8 inner points, 3 buckets: 0-2, 3-5, 6-7.
        let values = [0.0, 5.0, 1.0, 9.0, 7.0, 2.0, 3.0, 8.0, 6.0, 0.5];
        let zigzag: Vec<MetricPoint> = values.iter().enumerate().map(|(i, v)| p(1, i as i64, *v)).collect();
        let steps: Vec<i64> = downsample(&zigzag, 8).iter().map(|p| p.step).collect();
        assert_eq!(steps, vec![0, 2, 3, 4, 5, 7, 8, 9], "each bucket's lowest and highest, the ends");
    }
}
