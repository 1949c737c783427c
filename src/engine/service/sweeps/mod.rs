//! Sweeps: a configuration space searched by member runs (`lachesis sweep …`, `/sweeps`).

mod decide;
mod readings;
mod series;
mod submit;
mod views;

pub use decide::{SweepDecider, SweepDecision};
pub use readings::{SweepReadings, not_a_number_note};
pub use series::MetricSeries;
pub use submit::StartedSweep;
pub use views::{MemberStatus, SWEEP_LIST_LIMIT, SweepStatus, SweepSummary};
