//! The shim fork server: one `lachesis-shim --serve` per daemon, which forks a ready shim for
//! each stage instead of the daemon executing `lachesis-shim` anew.
//!
//! Why: a fresh process image costs about 2 ms of CPU here before `main` (exec, the loader,
//! page faults, and glibc probing the CPU's caches with ~100 `cpuid` instructions, each a trap to
//! the hypervisor on these VMs), while forking a small single-threaded process costs about
//! 0.2 ms. Every stage paid the former; a queue of short runs spent a fifth of its CPU on it.
//!
//! The forked shim is the same program as an executed one (`shim::main` with the same
//! arguments and environment), so what it does, reports and records does not change. Only its
//! parent does: the server, not the daemon. The server lives exactly as long as the daemon's end
//! of its socket, and the kernel reaps the shims it forks (SIGCHLD ignored); a daemon that
//! restarts re-attaches to them as to any shim it did not start.
//!
//! The wire, on a Unix stream socket pair (the server's stdin): per stage, a little-endian u32
//! length sent with the write end of the stage's report pipe as SCM_RIGHTS, then that many bytes
//! of NUL-terminated fields: the number of shim arguments, the arguments, then `KEY=VALUE`
//! environment entries to the end. Nothing comes back: the shim reports on the pipe, and a
//! failed fork is reported there too.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage,
    SendFlags, recvmsg, sendmsg,
};

use super::shim::ShimReport;

/// The largest request the server reads; a larger one is refused and the daemon executes the
/// shim itself (the exec has its own, smaller, limit on arguments and environment).
const MAX_REQUEST: usize = 8 << 20;

/// The server's first argument.
pub const SERVE_FLAG: &str = "--serve";

/// One shim to fork: its command line (as `lachesis-shim` takes it) and the environment added
/// to the server's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub args: Vec<OsString>,
    pub environ: Vec<(OsString, OsString)>,
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut field = |value: &[u8]| {
            bytes.extend_from_slice(value);
            bytes.push(0);
        };
        field(self.args.len().to_string().as_bytes());
        for arg in &self.args {
            field(arg.as_bytes());
        }
        for (key, value) in &self.environ {
            field(&[key.as_bytes(), b"=", value.as_bytes()].concat());
        }
        bytes
    }

    pub fn decode(bytes: &[u8]) -> Result<Request, String> {
        let Some(body) = bytes.strip_suffix(&[0]) else {
            return Err("the request does not end with a NUL".into());
        };
        let mut fields = body.split(|b| *b == 0);
        let count = fields
            .next()
            .and_then(|f| std::str::from_utf8(f).ok())
            .and_then(|f| f.parse::<usize>().ok())
            .ok_or("the request does not start with its argument count")?;
        let mut args = Vec::new();
        for _ in 0..count {
            let arg = fields.next().ok_or("the request has fewer arguments than it says")?;
            args.push(OsString::from_vec(arg.to_vec()));
        }
        let env = fields
            .map(|entry| {
                let at = entry.iter().position(|b| *b == b'=').filter(|at| *at > 0);
                let at = at.ok_or("an environment entry without a name")?;
                Ok((OsString::from_vec(entry[..at].to_vec()), OsString::from_vec(entry[at + 1..].to_vec())))
            })
            .collect::<Result<_, String>>()?;
        Ok(Request { args, environ: env })
    }
}

/// The server's program: fork one shim per request until the daemon's end closes. Must stay
/// single-threaded (a fork copies only the calling thread), so it only reads and forks.
pub fn serve() -> i32 {
    // The kernel reaps the shims we fork; each one restores the default before its stage.
    // SAFETY: setting a signal disposition to SIG_IGN runs no code of ours.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
    // SAFETY: the daemon starts us with the socket as stdin, and nothing else owns fd 0.
    let socket = unsafe { OwnedFd::from_raw_fd(0) };
    loop {
        match receive(&socket) {
            Ok(None) => return 0,
            Ok(Some((Ok(request), report))) => fork_shim(request, report),
            Ok(Some((Err(why), report))) => {
                say(&report, &ShimReport::Failed(format!("the shim server cannot read its request: {why}")));
            }
            Err(err) => {
                eprintln!("lachesis shim server: {err}");
                return 1;
            }
        }
    }
}

/// The next request (or why it is unreadable) and its report pipe; None once the daemon's end
/// is closed.
fn receive(socket: &OwnedFd) -> io::Result<Option<(Result<Request, String>, OwnedFd)>> {
    let mut header = [0u8; 4];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got =
        recvmsg(socket, &mut [io::IoSliceMut::new(&mut header)], &mut control, RecvFlags::CMSG_CLOEXEC)?;
    if got.bytes == 0 {
        return Ok(None);
    }
    let mut report = None;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            for fd in fds {
                report.get_or_insert(fd);
            }
        }
    }
    read_exact(socket, &mut header[got.bytes..])?;
    let length = u32::from_le_bytes(header) as usize;
    if length > MAX_REQUEST {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a request of {length} bytes")));
    }
    let mut body = vec![0; length];
    read_exact(socket, &mut body)?;
    let report =
        report.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a request without its pipe"))?;
    Ok(Some((Request::decode(&body), report)))
}

fn read_exact(socket: &OwnedFd, mut buf: &mut [u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match rustix::io::read(socket, &mut *buf) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => buf = &mut buf[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}

/// How often a fork the kernel refused for want of processes or memory is tried again, and
/// the first wait between tries (doubling): about 3 s in all.
const FORK_TRIES: u32 = 8;
const FORK_RETRY: std::time::Duration = std::time::Duration::from_millis(10);

fn fork_shim(request: Request, report: OwnedFd) {
    let mut wait = FORK_RETRY;
    for attempt in 1..=FORK_TRIES {
        // SAFETY: this process has one thread (see `serve`), so the child may do anything.
        match unsafe { libc::fork() } {
            -1 => {
                let err = io::Error::last_os_error();
                // A burst of starts can meet the process or memory limit for a moment.
                let transient = super::spawn::is_transient(&err);
                if attempt < FORK_TRIES && transient {
                    std::thread::sleep(wait);
                    wait *= 2;
                    continue;
                }
                let why = format!("cannot fork a shim: {err}");
                say(&report, &if transient { ShimReport::Busy(why) } else { ShimReport::Failed(why) });
            }
            0 => std::process::exit(become_shim(request, report)),
            _ => {}
        }
        return;
    }
}

/// In the forked child: the same process an executed `lachesis-shim ARGS` would be.
fn become_shim(request: Request, report: OwnedFd) -> i32 {
    // SAFETY: restoring the default disposition runs no code of ours.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
    // stdin was the server's socket: the daemon must see it close when the server dies, so no
    // shim keeps it. stdout is the report pipe; stderr is dropped, as for an executed shim.
    let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") else { return 1 };
    for (fd, target) in [(null.as_fd(), 0), (report.as_fd(), 1), (null.as_fd(), 2)] {
        // SAFETY: dup2 onto the standard descriptors, which nothing else in this process holds.
        if unsafe { libc::dup2(fd.as_raw_fd(), target) } < 0 {
            return 1;
        }
    }
    drop((null, report));
    for (key, value) in &request.environ {
        // SAFETY: this process has one thread; nothing reads the environment concurrently.
        unsafe { std::env::set_var(key, value) };
    }
    super::shim::main(request.args)
}

/// Writes one report line to a pipe the daemon reads (when no shim could be made to).
fn say(report: &OwnedFd, line: &ShimReport) {
    let mut bytes = serde_json::to_vec(line).unwrap_or_default();
    bytes.push(b'\n');
    // One short write: a pipe takes up to PIPE_BUF bytes at once.
    let _ = rustix::io::write(report, &bytes);
}

/// How long a request may wait for room in the server's socket before the server counts as
/// wedged: it forks in well under a millisecond, so only a stuck server takes this long.
const WEDGED: Duration = Duration::from_secs(30);

/// The daemon's handle on its fork server, started on first use and again after it died.
pub struct ForkServer {
    program: PathBuf,
    /// Held across a whole request, so requests never interleave on the socket.
    link: tokio::sync::Mutex<Option<Link>>,
}

struct Link {
    socket: tokio::net::UnixStream,
    /// Reaped by tokio once dropped (no kill: the requests it has read are still served).
    _process: tokio::process::Child,
}

impl ForkServer {
    pub fn new(program: PathBuf) -> ForkServer {
        ForkServer { program, link: tokio::sync::Mutex::new(None) }
    }

    /// Has the server fork a shim with `args` and `env`; answers the read end of the shim's
    /// report pipe. A full socket (a burst of starts) is waited out, never a reason to drop the
    /// server: requests already queued in it are served. An error means no shim was asked for
    /// (the caller starts one itself).
    pub async fn fork_shim(&self, args: &[OsString], env: &BTreeMap<String, String>) -> io::Result<OwnedFd> {
        let request = Request {
            args: args.to_vec(),
            environ: env.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect(),
        };
        let body = request.encode();
        if body.len() > MAX_REQUEST {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "the request is too large"));
        }
        let mut link = self.link.lock().await;
        // A server that died since the last request is replaced once.
        for _ in 0..2 {
            if link.is_none() {
                *link = Some(self.start()?);
            }
            let Some(current) = link.as_mut() else { break };
            match tokio::time::timeout(WEDGED, send(&mut current.socket, &body)).await {
                Ok(Ok(reader)) => return Ok(reader),
                // Out of descriptors for the pipe: the server is fine, the daemon is busy.
                Ok(Err(err)) if super::spawn::is_transient(&err) => return Err(err),
                Ok(Err(_)) => *link = None,
                Err(_) => {
                    // Part of a request may be in the socket: this server's stream is spoilt.
                    *link = None;
                    return Err(io::Error::other(format!(
                        "the shim server took no request for {}s",
                        WEDGED.as_secs()
                    )));
                }
            }
        }
        Err(io::Error::other("the shim server is not answering"))
    }

    fn start(&self) -> io::Result<Link> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        ours.set_nonblocking(true)?;
        let process = tokio::process::Command::new(&self.program)
            .arg(SERVE_FLAG)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        Ok(Link { socket: tokio::net::UnixStream::from_std(ours)?, _process: process })
    }
}

/// Sends one request with a new report pipe's write end, waiting for room in the socket as
/// often as it takes; answers the read end.
async fn send(socket: &mut tokio::net::UnixStream, body: &[u8]) -> io::Result<OwnedFd> {
    use tokio::io::{AsyncWriteExt, Interest};
    let (reader, writer) = std::io::pipe()?;
    let writer = OwnedFd::from(writer);
    let header = u32::try_from(body.len()).map_err(io::Error::other)?.to_le_bytes();
    let fds = [writer.as_fd()];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    control.push(SendAncillaryMessage::ScmRights(&fds));
    // The descriptor goes with the first byte that lands; a refused try sends nothing.
    let sent = socket
        .async_io(Interest::WRITABLE, || {
            sendmsg(
                &*socket,
                &[io::IoSlice::new(&header)],
                &mut control,
                SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
            )
            .map_err(io::Error::from)
        })
        .await?;
    socket.write_all(&header[sent..]).await?;
    socket.write_all(body).await?;
    Ok(OwnedFd::from(reader))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn os(values: &[&str]) -> Vec<OsString> {
        values.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_request_round_trips_with_empty_and_odd_fields() {
        let request = Request {
            args: os(&["--started", "s", "--", "python", "", "a=b"]),
            environ: vec![
                (OsString::from("KEY"), OsString::from("x=y")),
                (OsString::from("EMPTY"), OsString::new()),
            ],
        };
        assert_eq!(Request::decode(&request.encode()).unwrap(), request);
        let mut odd = request.clone();
        odd.args.push(OsString::from_vec(vec![0xff, b'x']));
        assert_eq!(Request::decode(&odd.encode()).unwrap(), odd);
    }

    #[test]
    fn malformed_requests_are_refused_in_words() {
        for (bytes, says) in [
            (&b""[..], "does not end with a NUL"),
            (b"2\0a\0", "fewer arguments"),
            (b"x\0", "argument count"),
            (b"0\0=v\0", "without a name"),
            (b"0\0noequals\0", "without a name"),
        ] {
            let err = Request::decode(bytes).unwrap_err();
            assert!(err.contains(says), "{bytes:?}: {err}");
        }
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            match Request::decode(&bytes) {
                Ok(request) => prop_assert_eq!(Request::decode(&request.encode()).unwrap(), request),
                Err(message) => prop_assert!(!message.is_empty() && !message.contains('\n')),
            }
        }
    }
}
