//! Sweeps: a configuration space searched by member runs, in W&B's sweep-file format, with
//! W&B's hyperband rule for stopping the losers early. Pure: parsing, members, decisions.

pub mod bayes;
pub mod format;
pub mod generate;
pub mod hyperband;
pub mod member;
pub mod parameter;
pub mod pbt;
pub mod program;
pub mod random;
pub mod record;
pub mod resume;
pub mod spec;
pub mod summary;
pub mod winner;

pub use format::{python_float, var_text};
pub use generate::{Assignment, Configuration, grid_size};
pub use hyperband::{Bands, Hyperband, Series, Stop, stop_runs};
pub use member::{Member, MemberOutcome, StoppedBy, Tally};
pub use parameter::{Domain, Num, Parameter, Quantum, Target};
pub use program::{Expansion, Program};
pub use record::{MemberOf, SweepRecord, SweepState, early_terminated_by};
pub use resume::{Rerun, RerunCause, rerun_reason, reruns, retries_left};
pub use spec::{
    BAYES_MAX_LIVE, Goal, GridPoints, MAX_RUN_CAP, Method, Metric, PROGRAM_WORKFLOW, SweepError, SweepSpec,
};
pub use summary::SeriesSummary;
pub use winner::{SweepWinner, winner};

#[cfg(test)]
mod tests;
