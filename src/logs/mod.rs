//! Stage logs: the only code that opens one. Reads are bounded (the last lines, a byte range,
//! the last matching line) and cost the same on any size of log; the shim writes through
//! [`RotatingLog`] under the stage's [`Rotation`], and the progress reader follows a
//! growing log with [`follow::Follower`] (carrying on through a rotation). A log another process
//! appends to (a Slurm job's) is rotated from outside by [`copy_truncate`]. Surfaces get
//! logs from `Service::run_logs`, which reads off the daemon's thread.

pub mod copytruncate;
pub mod follow;
pub mod limits;
pub mod read;
pub mod rotate;

pub use copytruncate::copy_truncate;
pub use limits::{ByteSize, LogLimits, Rotation};
pub use read::{LogError, LogPage, MAX_ANSWER, SCAN_WINDOW, last_match, range, tail};
pub use rotate::{LogFile, RotatingLog, log_files, rotated};
