//! Starting, watching and stopping stage processes on this machine.

pub mod collect;
pub mod forkserver;
pub mod probe;
pub mod process;
pub mod shim;
pub mod slurm;
pub mod space;
pub mod spawn;
pub mod status;
