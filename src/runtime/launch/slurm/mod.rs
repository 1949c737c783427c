//! Running a stage as a Slurm batch job: `sbatch` submits it, `scontrol show job` (then `sacct`)
//! says how it is doing, `scancel` stops it. Only the command-line tools are used, so any
//! cluster a login shell can use works, with no REST daemon or library to match.
//!
//! What this relies on was checked against Slurm 22.05 (tests/slurm/README.md has the details):
//! - `scancel JOB` sends SIGTERM to the batch step's main process only, and SIGKILL to every
//!   process of the job `KillWait` seconds later. So the batch script `exec`s the stage, or,
//!   when output is masked, stays as the parent and forwards signals to it.
//! - Once the main process exits, whatever it left behind is killed.
//! - `scontrol show job` keeps an ended job for `MinJobAge` seconds, then says "Invalid job id
//!   specified"; after that only `sacct` knows the job (the accounting database, or the
//!   job-completion file with `sacct -c` where there is no database).
//! - The job-completion record of a cancelled or timed-out job is written before the job's
//!   processes exit, so it says `ExitCode=0:0` whatever they did.

mod client;
mod error;
mod job;
mod log;
mod records;
mod script;

pub use client::Slurm;
pub use error::SlurmError;
pub use job::{BadJobId, JobState, SlurmJobId};
pub use log::SlurmLog;
pub use records::{JobRecord, decode_wait_status, parse_sacct, parse_scontrol};
pub use script::{BatchScript, batch_script};
