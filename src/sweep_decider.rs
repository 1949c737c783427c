//! The daemon's sweep decider: every few seconds, over the sweeps with members in flight whose
//! members have new metric readings, stops the running members hyperband condemns, stops
//! starting new members once one reached the metric's target, and marks ended sweeps done
//! (`Service`'s `SweepDecider`).
//!
//! A task of its own beside the reconciler, like the metric poller: reading many members'
//! series must never hold up the loop that notices exits. What it decides it writes through the
//! normal stop (one store transaction: the move, its reason and its event), then pokes the
//! daemon, whose reconciler signals the member's stages as for any stop. A decision is made
//! only from what the store holds, so a restarted daemon, or another node's decider on the same
//! PostgreSQL store, never makes one twice.

use std::time::Duration;

use crate::service::{Service, SweepDecider};

/// How often the decider looks.
pub const INTERVAL: Duration = Duration::from_secs(3);

/// Decides until the daemon stops.
pub async fn run(service: Service, interval: Duration) {
    let mut decider = SweepDecider::default();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        ticker.tick().await;
        match decider.pass(&service, &service).await {
            Ok(decisions) => {
                if std::mem::take(&mut failing) {
                    tracing::info!("sweep decisions are made again");
                }
                for decision in decisions {
                    tracing::debug!(?decision, "sweep decision");
                }
            }
            // Said once while it lasts: the store is the one place a decision is made from.
            Err(err) if !failing => {
                failing = true;
                tracing::warn!("cannot decide on sweeps: {err}; trying again every {}s", interval.as_secs());
            }
            Err(err) => tracing::debug!("still cannot decide on sweeps: {err}"),
        }
    }
}
