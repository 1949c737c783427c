//! What the daemon measures about itself, rendered for Prometheus at `/metrics`. Counters and
//! histograms are atomics the reconciler bumps; run and test counts are read from the store at
//! scrape time, so they are right whoever changed them.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::model::{CountedState, RunState, StateCounts, TestState};

/// Upper bounds of the latency buckets, in milliseconds.
const BUCKETS_MS: [f64; 11] = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0];

#[derive(Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS_MS.len()],
    total: AtomicU64,
    /// Sum in microseconds, to keep it an integer.
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn observe_ms(&self, ms: f64) {
        let ms = ms.max(0.0);
        for (bound, count) in BUCKETS_MS.iter().zip(&self.counts) {
            if ms <= *bound {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.total.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add((ms * 1000.0) as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (bound, count) in BUCKETS_MS.iter().zip(&self.counts) {
            let _ =
                writeln!(out, "{name}_bucket{{le=\"{}\"}} {}", bound / 1000.0, count.load(Ordering::Relaxed));
        }
        let total = self.total.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {total}");
        let _ = writeln!(out, "{name}_sum {}", self.sum_us.load(Ordering::Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count {total}");
    }
}

#[derive(Default)]
pub struct Telemetry {
    pub stage_exits_ok: AtomicU64,
    pub stage_exits_failed: AtomicU64,
    pub stage_exits_signalled: AtomicU64,
    pub stages_lost: AtomicU64,
    /// Runs stopped for a run of higher priority (`--preempt`).
    pub preemptions: AtomicU64,
    /// The work those stops lost (since each victim's last resumable checkpoint), in ms.
    pub preempted_work_ms: AtomicU64,
    /// Handling one batch of reconciler messages.
    pub tick: Histogram,
    /// From a stage's exit (as its shim saw it) to the state committed.
    pub exit_detection: Histogram,
    /// The training step of each supervised run (by run id): (step, total).
    pub run_steps: std::sync::Mutex<std::collections::BTreeMap<String, (i64, Option<i64>)>>,
}

impl Telemetry {
    pub fn stage_ended(&self, exit: Option<crate::model::Exit>) {
        use crate::model::Exit;
        let counter = match exit {
            Some(Exit::Code(0)) => &self.stage_exits_ok,
            Some(Exit::Code(_)) => &self.stage_exits_failed,
            Some(Exit::Signal(_)) => &self.stage_exits_signalled,
            None => &self.stages_lost,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn preempted(&self) {
        self.preemptions.fetch_add(1, Ordering::Relaxed);
    }

    pub fn work_lost(&self, ms: i64) {
        self.preempted_work_ms.fetch_add(ms.max(0) as u64, Ordering::Relaxed);
    }

    /// Sets the gauge of a run's step; None drops the run from it (it is no longer supervised).
    pub fn set_run_step(&self, run: &str, step: Option<(i64, Option<i64>)>) {
        let mut steps = self.run_steps.lock().unwrap_or_else(|e| e.into_inner());
        match step {
            Some(step) => steps.insert(run.to_string(), step),
            None => steps.remove(run),
        };
    }

    /// The Prometheus text: `runs` and `tests` are counts by state, read at scrape time.
    pub fn render(&self, runs: &StateCounts<RunState>, tests: &StateCounts<TestState>) -> String {
        let mut out = String::new();
        fn gauge<S: CountedState>(out: &mut String, name: &str, help: &str, counts: &StateCounts<S>) {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (state, count) in counts.iter() {
                let _ = writeln!(out, "{name}{{state=\"{}\"}} {count}", state.name());
            }
        }
        gauge(&mut out, "lachesis_runs", "Runs by state.", runs);
        gauge(&mut out, "lachesis_tests", "Inference tests by state.", tests);
        let _ = writeln!(
            out,
            "# HELP lachesis_stage_exits_total Stage processes that ended, by outcome.\n# TYPE lachesis_stage_exits_total counter"
        );
        for (outcome, counter) in [
            ("success", &self.stage_exits_ok),
            ("failure", &self.stage_exits_failed),
            ("signal", &self.stage_exits_signalled),
            ("lost", &self.stages_lost),
        ] {
            let _ = writeln!(
                out,
                "lachesis_stage_exits_total{{outcome=\"{outcome}\"}} {}",
                counter.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP lachesis_preemptions_total Runs stopped for a run of higher priority.\n# TYPE lachesis_preemptions_total counter\nlachesis_preemptions_total {}",
            self.preemptions.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP lachesis_preempted_work_seconds_total Work preemptions lost: the time since each victim's last resumable checkpoint.\n# TYPE lachesis_preempted_work_seconds_total counter\nlachesis_preempted_work_seconds_total {:.3}",
            self.preempted_work_ms.load(Ordering::Relaxed) as f64 / 1000.0
        );
        {
            let steps = self.run_steps.lock().unwrap_or_else(|e| e.into_inner());
            let _ = writeln!(
                out,
                "# HELP lachesis_run_step The training step of each supervised run.\n# TYPE lachesis_run_step gauge"
            );
            for (run, (step, _)) in steps.iter() {
                let _ = writeln!(out, "lachesis_run_step{{run=\"{run}\"}} {step}");
            }
            let _ = writeln!(
                out,
                "# HELP lachesis_run_total_steps The step each supervised run trains to.\n# TYPE lachesis_run_total_steps gauge"
            );
            for (run, (_, total)) in steps.iter() {
                if let Some(total) = total {
                    let _ = writeln!(out, "lachesis_run_total_steps{{run=\"{run}\"}} {total}");
                }
            }
        }
        self.tick.render(
            &mut out,
            "lachesis_reconciler_tick_seconds",
            "Time to handle one batch of reconciler events.",
        );
        self.exit_detection.render(
            &mut out,
            "lachesis_exit_detection_seconds",
            "From a stage's exit to its state committed.",
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_steps_are_gauges_until_the_run_is_forgotten() {
        let telemetry = Telemetry::default();
        telemetry.set_run_step("r1", Some((420, Some(2500))));
        let text = telemetry.render(&StateCounts::default(), &StateCounts::default());
        assert!(text.contains("lachesis_run_step{run=\"r1\"} 420"), "{text}");
        assert!(text.contains("lachesis_run_total_steps{run=\"r1\"} 2500"), "{text}");
        telemetry.set_run_step("r1", None);
        assert!(!telemetry.render(&StateCounts::default(), &StateCounts::default()).contains("run=\"r1\""));
    }

    #[test]
    fn preemptions_and_the_work_they_lost_are_counters() {
        let telemetry = Telemetry::default();
        telemetry.preempted();
        telemetry.work_lost(160_000);
        telemetry.work_lost(-5);
        let text = telemetry.render(&StateCounts::default(), &StateCounts::default());
        assert!(
            text.contains("# TYPE lachesis_preemptions_total counter\nlachesis_preemptions_total 1\n"),
            "{text}"
        );
        assert!(text.contains("\nlachesis_preempted_work_seconds_total 160.000\n"), "{text}");
    }

    #[test]
    fn histograms_are_cumulative() {
        let h = Histogram::default();
        for ms in [0.5, 3.0, 3.0, 700.0] {
            h.observe_ms(ms);
        }
        let mut out = String::new();
        h.render(&mut out, "x", "help");
        assert!(out.contains("x_bucket{le=\"0.001\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.005\"} 3\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"+Inf\"} 4\nx_sum 0.7065\nx_count 4\n"), "{out}");
    }
}
