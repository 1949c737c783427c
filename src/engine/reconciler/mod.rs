//! The one loop that owns run state in the daemon (`dispatcher`), the messages it is told
//! (`messages`), the writes it holds while the store refuses them (`held`) and the health that
//! makes (`health`), and what it decides about each kind of thing it supervises.

mod after;
mod checkpoints;
mod claim;
mod dispatcher;
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

pub use dispatcher::{Reconciler, ReconcilerConfig};
pub use health::{Health, WritesFailing};
pub use messages::{Msg, Owner, ProcessEnd};
pub(crate) use readings::not_a_number_of;
pub use readings::{SweepReadings, not_a_number_note};
pub use supervised::ports_of;
pub use time_limit::deadline as time_limit_deadline;
pub use weights::{trained_weights, trained_weights_of, weights_in};

use dispatcher::Result;
use supervised::Supervised;
use workers::read_end;
