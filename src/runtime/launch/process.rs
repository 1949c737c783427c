//! Who a process is, whether it still runs, and how to signal it without hitting a stranger.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::OnceLock;

use rustix::process::{Pid, PidfdFlags, Signal, kill_process_group, pidfd_open};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::model::ProcessIdentity;

/// This boot's id; a pid from another boot names nobody.
pub fn boot_id() -> io::Result<String> {
    static BOOT_ID: OnceLock<String> = OnceLock::new();
    if let Some(id) = BOOT_ID.get() {
        return Ok(id.clone());
    }
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?.trim().to_string();
    Ok(BOOT_ID.get_or_init(|| id).clone())
}

/// (start time, state letter) from /proc/PID/stat.
fn stat(pid: i32) -> io::Result<(u64, char)> {
    let stat = procfs::process::Process::new(pid)
        .and_then(|p| p.stat())
        .map_err(|e| io::Error::new(io::ErrorKind::NotFound, e.to_string()))?;
    Ok((stat.starttime, stat.state))
}

pub fn identity_of(pid: i32) -> io::Result<ProcessIdentity> {
    let (start_time, _) = stat(pid)?;
    Ok(ProcessIdentity { pid, start_time, boot_id: boot_id()? })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// The very process recorded, still running.
    Alive,
    /// The recorded process has exited but not been reaped yet (`kill -0` would still succeed).
    Zombie,
    /// No process has that pid.
    Gone,
    /// The pid now belongs to another process (or the machine rebooted): never signal it.
    Reused,
}

pub fn liveness(id: &ProcessIdentity) -> Liveness {
    if boot_id().ok().as_deref() != Some(id.boot_id.as_str()) {
        return Liveness::Reused;
    }
    match stat(id.pid) {
        Err(_) => Liveness::Gone,
        Ok((start, _)) if start != id.start_time => Liveness::Reused,
        Ok((_, 'Z')) | Ok((_, 'X')) => Liveness::Zombie,
        Ok(_) => Liveness::Alive,
    }
}

/// Sends `signal` to the process group led by `id`, only if `id` is still that very process.
/// Returns whether a signal was sent.
pub fn signal_group(id: &ProcessIdentity, signal: Signal) -> bool {
    if liveness(id) != Liveness::Alive {
        return false;
    }
    kill_group(id.pid, signal).is_ok()
}

/// Sends `signal` to the process group `pgid`. Only for a group whose leader is known to be ours
/// (an unreaped child, or an identity just checked); `signal_group` is the checked form.
pub fn kill_group(pgid: i32, signal: Signal) -> io::Result<()> {
    let pid = Pid::from_raw(pgid).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    kill_process_group(pid, signal).map_err(io::Error::from)
}

/// A process's exit, observable without being its parent (after a daemon restart).
pub struct ExitWatch {
    fd: AsyncFd<OwnedFd>,
}

impl ExitWatch {
    /// Opens a pidfd for `id`, after checking it is still that process, so the fd can't point
    /// at a successor. `Ok(None)` when the process is already gone or is someone else.
    pub fn open(id: &ProcessIdentity) -> io::Result<Option<ExitWatch>> {
        let Some(pid) = Pid::from_raw(id.pid) else {
            return Ok(None);
        };
        let fd = match pidfd_open(pid, PidfdFlags::NONBLOCK) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::SRCH) => return Ok(None),
            Err(err) => return Err(err.into()),
        };
        // Checked after opening: if the identity still matches now, the fd is that process's.
        match liveness(id) {
            Liveness::Alive | Liveness::Zombie => {
                // SAFETY: the OwnedFd moves into the AsyncFd, which keeps it open until dropped.
                let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
                    .map_err(io::Error::from)?;
                Ok(Some(ExitWatch { fd }))
            }
            Liveness::Gone | Liveness::Reused => Ok(None),
        }
    }

    /// Resolves when the process has exited (readable pidfd).
    pub async fn exited(&self) -> io::Result<()> {
        self.fd.readable().await.map(|mut guard| guard.retain_ready())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_tells_a_live_process_from_a_reused_pid() {
        let me = identity_of(std::process::id() as i32).unwrap();
        assert_eq!(liveness(&me), Liveness::Alive);
        let stranger = ProcessIdentity { start_time: me.start_time + 1, ..me.clone() };
        assert_eq!(liveness(&stranger), Liveness::Reused);
        let other_boot = ProcessIdentity { boot_id: "not-this-boot".into(), ..me };
        assert_eq!(liveness(&other_boot), Liveness::Reused);
        assert!(!signal_group(&stranger, Signal::TERM));
    }

    #[tokio::test]
    async fn zombies_count_as_exited_and_pidfd_sees_the_exit() {
        let mut child = std::process::Command::new("sleep").arg("0.2").spawn().unwrap();
        let id = identity_of(child.id() as i32).unwrap();
        let watch = ExitWatch::open(&id).unwrap().unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), watch.exited()).await.unwrap().unwrap();
        // Exited but not reaped yet: a zombie, which is not alive.
        assert_eq!(liveness(&id), Liveness::Zombie);
        child.wait().unwrap();
        assert_eq!(liveness(&id), Liveness::Gone);
        assert!(ExitWatch::open(&id).unwrap().is_none());
    }
}
