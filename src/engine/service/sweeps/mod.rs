//! Sweeps: a configuration space searched by member runs (`lachesis sweep …`, `/sweeps`).

mod curves;
mod decide;
mod end;
mod ending;
mod exploit;
mod report;
mod resume;
mod series;
mod submit;
mod suggest;
mod views;

pub use crate::engine::reconciler::{SweepReadings, not_a_number_note};
pub use curves::{Curve, SweepCurves};
pub use decide::{SweepDecider, SweepDecision};
pub use ending::SweepEnd;
pub use report::{EarlyTermination, REPORT_SWEEPS, ReportSweep};
pub use series::MetricSeries;
pub use submit::StartedSweep;
pub use views::{MemberStatus, SWEEP_LIST_LIMIT, SweepListing, SweepStatus, SweepSummary};
