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
//! A task of its own beside the reconciler, like the metric poller: reading many members'
//! series must never hold up the loop that notices exits. What it decides it writes through the
//! normal stop (one store transaction: the move, its reason and its event), then pokes the
//! daemon, whose reconciler signals the member's stages as for any stop. A decision is made
//! only from what the store holds, so a restarted daemon, or another node's decider on the same
//! PostgreSQL store, never makes one twice.

use std::time::Duration;

use crate::service::{Service, SweepDecider, SweepDecision};

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
    loop {
        let news = tokio::select! {
            _ = ticker.tick() => None,
            () = readings.wait() => {
                tokio::time::sleep(SETTLE).await;
                Some(readings.take())
            }
        };
        let decided = match &news {
            Some(sweeps) if sweeps.is_empty() => continue,
            Some(sweeps) => decider.decide_on(&service, &service, sweeps).await,
            None => decider.pass(&service, &service).await,
        };
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
