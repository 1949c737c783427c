//! The one loop that owns run state in the daemon (`dispatcher`), the messages it is told
//! (`messages`), the writes it holds while the store refuses them (`held`) and the health that
//! makes (`health`). What it decides is `core`, pure; the other files are the shell that reads,
//! asks the core, commits the decision and then acts.

mod after;
mod checkpoints;
mod claim;
mod core;
mod dispatcher;
mod exploits;
mod health;
mod held;
mod inference_tests;
mod messages;
mod metrics;
mod node;
mod outbox;
mod outcome;
mod preempt;
mod progress;
mod readings;
mod recover;
mod runs;
mod schedules;
mod slurm;
mod supervised;
mod time_limit;
mod webhooks;
mod weights;
mod workers;

pub use self::core::time_limits::deadline as time_limit_deadline;
pub use dispatcher::{Reconciler, ReconcilerConfig};
pub use health::{Health, WritesFailing};
pub use messages::{Msg, Owner, ProcessEnd};
pub(crate) use readings::not_a_number_of;
pub use readings::{SweepReadings, not_a_number_note};
pub use supervised::ports_of;
pub use weights::{trained_weights, trained_weights_of, weights_in};

use dispatcher::Result;
use supervised::Supervised;
use workers::read_end;
