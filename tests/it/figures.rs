//! The figures bench (benches/figures, `cargo bench --bench figures`) is compiled into this
//! binary too, so it cannot rot unseen, and its smallest figures run once, through the built
//! `lachesis` as the bench drives it: the deep-queue reads against a short queue, and three
//! preemption cycles.

#[path = "../../benches/figures/main.rs"]
#[allow(dead_code)]
mod bench;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_smallest_figure_runs() {
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_lachesis"));
    let report = bench::queue::run(exe, 20, &|_| {}).await.unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(report.pending, 20);
    // Every page and command was read, each answering in full (an error status fails the run).
    assert!(report.figures.iter().any(|f| f.what == "GET /ui/runs"), "{:?}", report.figures);
    assert!(report.figures.iter().all(|f| f.ms.samples > 0 && f.ms.max >= f.ms.p50));
    assert!(report.daemon_rss_mb > 0.0);
}

/// `cargo bench` appends `--bench` to the flags it passes on; the parser takes it.
#[test]
fn the_figures_take_cargo_bench_flags() {
    use clap::{CommandFactory, Parser};
    bench::BenchArgs::command().debug_assert();
    assert!(bench::BenchArgs::try_parse_from(["figures", "--queue", "--pending", "5", "--bench"]).is_ok());
    assert!(bench::BenchArgs::try_parse_from(["figures", "--pending", "0"]).is_err());
    assert!(
        bench::BenchArgs::try_parse_from(["figures", "--preemption", "--cycles", "200", "--bench"]).is_ok()
    );
    assert!(bench::BenchArgs::try_parse_from(["figures", "--preemption", "--cycles", "0"]).is_err());
}

/// The preemption figure's workload, a few cycles: each cycle preempts once, no sample sees a
/// unit held by two live runs, and without `--preempt` nothing is preempted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preemption_figure_runs() {
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_lachesis"));
    let report = bench::preemption::run(exe, 3, &|_| {}).await.unwrap_or_else(|err| panic!("{err}"));
    assert_eq!((report.cycles, report.preemptions), (3, 3), "{report:#?}");
    assert!(report.samples > 0, "{report:#?}");
    assert_eq!(report.violations, 0, "{report:#?}");
    assert_eq!(report.latency_over_grace_ms.samples, 3, "{report:#?}");
    // The work redone is counted to the victim's end: never less than up to the decision.
    assert!(report.work_redone_difference_min_ms >= 0.0, "{report:#?}");
    // …and is the time from the checkpoint to the victim's requeue, not a guess.
    assert!(report.work_redone_vs_requeue_max_ms <= 50.0, "{report:#?}");
    assert_eq!((report.off_urgent_runs, report.off_preemptions), (3, 0), "{report:#?}");
}
