//! Running a short-lived child to its end within a deadline, with its output collected; on
//! timeout its whole process group is killed.

use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use rustix::process::Signal;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Child;

use super::process::kill_group;

/// How long the pipes may stay open after the child exited (see `wait_or_deadline`).
const PIPE_DRAIN: Duration = Duration::from_millis(500);

/// Why a child's output could not be collected.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("cannot wait for the child: {0}")]
    Wait(io::Error),
    #[error("the child outlived its deadline and was killed")]
    Timeout,
}

pub struct Collected {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Waits for `child` (the leader of its own process group) while reading both pipes (a full
/// pipe would block it). On timeout the whole process group is killed.
pub async fn collect(mut child: Child, limit: Duration) -> Result<Collected, CollectError> {
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let mut out = Vec::new();
    let mut err = Vec::new();
    let finished = {
        let reads = async {
            let _ = tokio::join!(read_all(stdout, &mut out), read_all(stderr, &mut err));
        };
        wait_or_deadline(child.wait(), reads, limit).await
    };
    match finished {
        Some(Ok(status)) => Ok(Collected { status, stdout: out, stderr: err }),
        Some(Err(io)) => Err(CollectError::Wait(io)),
        None => {
            // `id()` is None once the child was reaped; its pid (the group id) may then belong
            // to someone else, so only signal the group while the child is still ours.
            if let Some(pid) = child.id()
                && let Err(err) = kill_group(pid as i32, Signal::KILL)
            {
                tracing::warn!(pid, %err, "could not kill a timed-out child's process group");
            }
            let _ = child.kill().await;
            Err(CollectError::Timeout)
        }
    }
}

/// Runs `exited` while `reads` drains the pipes, until `exited` completes (`Some`) or `limit`
/// passes (`None`). After the exit, the pipes get [`PIPE_DRAIN`] more to reach end of file:
/// a process the environment started may have inherited them and must not hold the answer
/// hostage (the helper's answer itself is written before it exits).
async fn wait_or_deadline<T>(
    exited: impl Future<Output = T>,
    reads: impl Future<Output = ()>,
    limit: Duration,
) -> Option<T> {
    let mut exited = std::pin::pin!(exited);
    let mut reads = std::pin::pin!(reads);
    let mut deadline = std::pin::pin!(tokio::time::sleep(limit));
    let mut read_all = false;
    let result = loop {
        tokio::select! {
            result = &mut exited => break result,
            () = &mut reads, if !read_all => read_all = true,
            () = &mut deadline => return None,
        }
    };
    if !read_all {
        let _ = tokio::time::timeout(PIPE_DRAIN, reads).await;
    }
    Some(result)
}

async fn read_all(pipe: Option<impl AsyncRead + Unpin>, buf: &mut Vec<u8>) -> io::Result<()> {
    match pipe {
        Some(mut pipe) => pipe.read_to_end(buf).await.map(drop),
        None => Ok(()),
    }
}
