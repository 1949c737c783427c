//! The daemon's sweep decider: stops the running members hyperband condemns, stops starting
//! new members once one reached the metric's target, and marks ended sweeps done
//! (`Service`'s `SweepDecider`).
//!
//! It decides when readings of a sweep's members land in this process (the metric workers and
//! the W&B poller ring `SweepReadings`): after a short settle, so a burst of readings from many
//! members is one pass, it reads only the sweeps that got them. Every few seconds a tick looks
//! at every sweep with members in flight whose members have readings since the last tick: the
//! safety net for readings recorded elsewhere (another node, a lost ring) and for the ends of
//! sweeps.
//!
//! A task of its own beside the reconciler, like the metric poller, and each pass runs on
//! tokio's blocking pool (the daemon's runtime has one thread, which the reconciler's loop
//! shares): reading a big sweep's series (100,000 readings take a few hundred ms) must never
//! hold up the loop that notices exits. While news keeps coming, a pass follows the last one by
//! at least its own length, so deciding takes at most about half of one core. What it decides it writes through the
//! normal stop (one store transaction: the move, its reason and its event), then pokes the
//! daemon, whose reconciler signals the member's stages as for any stop. A decision is made
//! only from what the store holds, so a restarted daemon, or another node's decider on the same
//! PostgreSQL store, never makes one twice.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::service::{Result, Service, SweepDecider, SweepDecision};

/// How often the decider looks without news of readings.
pub const INTERVAL: Duration = Duration::from_secs(3);
/// How long it waits after news of readings for the rest of a burst.
pub const SETTLE: Duration = Duration::from_millis(25);

/// Decides until the daemon stops.
pub async fn run(service: Service, interval: Duration) {
    let readings = service.sweep_readings();
    let mut decider = SweepDecider::default();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    let mut last_pass = Duration::ZERO;
    loop {
        let news = tokio::select! {
            _ = ticker.tick() => None,
            () = readings.wait() => {
                tokio::time::sleep(SETTLE.max(last_pass)).await;
                Some(readings.take())
            }
        };
        if news.as_ref().is_some_and(BTreeSet::is_empty) {
            continue;
        }
        let started = Instant::now();
        let decided;
        (decider, decided) = off_the_loop(decider, service.clone(), news).await;
        last_pass = started.elapsed();
        match decided {
            Ok(decisions) => {
                if std::mem::take(&mut failing) {
                    tracing::info!("sweep decisions are made again");
                }
                log(&decisions);
            }
            // Said once while it lasts: the store is the one place a decision is made from. The
            // news is dropped: the next tick reads every sweep with readings since its last.
            Err(err) if !failing => {
                failing = true;
                tracing::warn!("cannot decide on sweeps: {err}; trying again every {}s", interval.as_secs());
            }
            Err(err) => tracing::debug!("still cannot decide on sweeps: {err}"),
        }
    }
}

fn log(decisions: &[SweepDecision]) {
    for decision in decisions {
        tracing::debug!(?decision, "sweep decision");
    }
}

/// One pass (over the sweeps with news, or the tick's) on tokio's blocking pool, its future
/// driven there: the rows it reads are decoded off the daemon's one thread.
async fn off_the_loop(
    mut decider: SweepDecider,
    service: Service,
    news: Option<BTreeSet<Uuid>>,
) -> (SweepDecider, Result<Vec<SweepDecision>>) {
    let handle = tokio::runtime::Handle::current();
    let pass = tokio::task::spawn_blocking(move || {
        let decided = handle.block_on(async {
            match &news {
                Some(sweeps) => decider.decide_on(&service, &service, sweeps).await,
                None => decider.pass(&service, &service).await,
            }
        });
        (decider, decided)
    });
    match pass.await {
        Ok(done) => done,
        Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
        // Cancelled: the runtime is shutting down.
        Err(_) => (SweepDecider::default(), Ok(Vec::new())),
    }
}
