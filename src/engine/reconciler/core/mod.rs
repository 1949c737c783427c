//! The reconciler's decisions, pure: each is a function of the state the loop read (a run, its
//! stages, the node's pools, what the store said) and what happened, returning what to do as
//! data — a move with its reason and events, a stage to start or stop, params to write. No
//! store, no runtime, no clock (`now` is an argument), no process, no file: the shell around
//! it (the other files of `reconciler/`) reads, calls the core, writes the decision with its
//! move (commit before act, one writer, held writes), and only then acts. `purity` below holds
//! every file here to that by what it names.
//!
//! - `claim`: which queued runs this node takes, with their units, ports and run directory;
//! - `lifecycle`: what a supervised run's state asks next (start, count up, stop, requeue, end);
//! - `stages`: a started stage up at once (with its run's `running`) or awaiting readiness;
//! - `stage_end`: what a stage's end does to its run (completion rule, `require_total`, retries);
//! - `retries`: a retry's requeue and what its next attempt resumes from;
//! - `progress`: when a reading of a run's step counts, and whether it moves the stall clock;
//! - `readings`: where an attempt's metric worker reads from, which readings are its own, when
//!   they are news to a sweep, how a worker carries on; when checkpoint lines are read on;
//! - `restart`: what restart repair does with a stage recorded live (re-attach, its exit
//!   file's end, look again, vanished and why), and which evidence wins;
//! - `time_limits`: when an attempt's limit is reached and what it decides;
//! - `stalls`: when a running run's step stood still too long and what that decides;
//! - `preemption`: the floor, the shortage and holders, a victim's move and its requeue;
//! - `dependencies`: a claimed run's dependency values, or the problem that fails it;
//! - `held`: writes held while the store refuses them, their replay order, the rounds' wait;
//! - `leases`: a lost node's runs, and the claims a restarted node remembers;
//! - `schedules`: what a due schedule records;
//! - `slurm_jobs`: what each poll of a Slurm stage's job means for the stage;
//! - `test_tasks`: an inference test's tasks to start, and when the test is over;
//! - `wakeups`: when a retry's backoff ends, so the loop claims then, not at the next scan.
//!
//! `sim` (tests only) runs these decisions against a model of the store with the daemon
//! killed between any two writes (preemptions included), and checks what must hold whatever
//! the order; `sim_nodes` does the same for several nodes sharing one store: claims under
//! leases, wake-ups lost or arriving mid-claim, nodes dying and restarting, a node's writes
//! refused for a while (held, its lease lapsing, reaped, fenced once they land), and urgent
//! runs preempting a node's own runs while other nodes claim them or die.

pub mod claim;
pub mod dependencies;
pub mod held;
pub mod leases;
pub mod lifecycle;
pub mod preemption;
pub mod progress;
pub mod readings;
pub mod restart;
pub mod retries;
pub mod schedules;
pub mod slurm_jobs;
pub mod stage_end;
pub mod stages;
pub mod stalls;
pub mod test_tasks;
pub mod time_limits;
pub mod wakeups;

#[cfg(test)]
mod purity;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod sim_nodes;
#[cfg(test)]
mod testing;
