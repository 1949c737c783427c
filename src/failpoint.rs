//! Crash points for the restart tests: `hit("preempt.requeued")` kills the process with
//! SIGKILL, as a crash would, when `LACHESIS_FAILPOINT` names that point, so a test can stop
//! the daemon between two writes no outside signal could land between reliably. Only a build
//! with the `testing` feature (`cargo test`, `cargo bench`) looks at the variable; in any
//! other build `hit` is an empty inline function and the points cost nothing.

/// The variable that names the one point at which the process kills itself.
#[cfg(feature = "testing")]
pub const VARIABLE: &str = "LACHESIS_FAILPOINT";

/// Kills this process with SIGKILL if `LACHESIS_FAILPOINT` is `point`.
#[cfg(feature = "testing")]
pub fn hit(point: &str) {
    if std::env::var_os(VARIABLE).is_none_or(|armed| armed != point) {
        return;
    }
    // Said where the daemon's log goes, so a test's failure shows where it died.
    eprintln!("failpoint {point}: killing this process (SIGKILL)");
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    // SIGKILL to oneself ends the process before the call returns to user space; this is not
    // reached, and an abort is still a crash should it be.
    std::process::abort();
}

/// Nothing: a build without `testing` has no crash points.
#[cfg(not(feature = "testing"))]
#[inline(always)]
pub fn hit(_point: &str) {}
