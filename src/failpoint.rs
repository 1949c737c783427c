//! Crash points for the restart tests: `Failpoint::PreemptRequeued.hit()` kills the process
//! with SIGKILL, as a crash would, when `LACHESIS_FAILPOINT` names that point, so a test can
//! stop the daemon between two writes no outside signal could land between reliably. Only a
//! build with the `testing` feature (`cargo test`, `cargo bench`) looks at the variable; in any
//! other build `hit` is an empty inline function and the points cost nothing.
//!
//! The points are one enum, each name spelled once, so a test arms a point by its variant and a
//! misspelt one does not compile; a test below holds every variant to a `hit` in `src/`.

/// The variable that names the one point at which the process kills itself.
#[cfg(feature = "testing")]
pub const VARIABLE: &str = "LACHESIS_FAILPOINT";

/// The enum, `ALL` and each name, from one list.
macro_rules! failpoints {
    ($($(#[doc = $doc:literal])* $variant:ident = $name:literal,)+) => {
        /// A place where a test may have the process crash.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Failpoint {
            $($(#[doc = $doc])* $variant,)+
        }

        impl Failpoint {
            pub const ALL: &[Failpoint] = &[$(Failpoint::$variant),+];

            /// The name `LACHESIS_FAILPOINT` gives it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Failpoint::$variant => $name,)+
                }
            }
        }
    };
}

failpoints! {
    /// A preemption's decision is committed; its victim not yet asked to stop.
    PreemptDecided = "preempt.decided",
    /// The victim's stages are gone and recorded so, before its requeue's commit.
    PreemptStagesGone = "preempt.stages_gone",
    /// The victim's requeue is committed, before the urgent run's claim.
    PreemptRequeued = "preempt.requeued",
    /// A run's move and its webhook's outbox row are committed, before the poster is rung.
    WebhooksRunMoved = "webhooks.run_moved",
    /// A bayes sweep's next member suggested, before its transaction.
    SweepSuggested = "sweep.suggested",
    /// A suggested member's rows written, its transaction not yet committed.
    SweepMemberUncommitted = "sweep.member_uncommitted",
    /// A sweep's resume is committed (live again, its re-runs marked), before any member is
    /// queued again.
    SweepResumed = "sweep.resumed",
    /// A PBT exploit is committed with its loser's stop, before the loser is signalled.
    PbtExploitDecided = "pbt.exploit_decided",
    /// A PBT loser's stages are gone (it is stopped), before its requeue from the donor.
    PbtLoserStopped = "pbt.loser_stopped",
    /// A PBT loser's requeue from the donor's checkpoint is committed.
    PbtLoserRequeued = "pbt.loser_requeued",
}

impl std::fmt::Display for Failpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Failpoint {
    /// Kills this process with SIGKILL if `LACHESIS_FAILPOINT` names this point.
    #[cfg(feature = "testing")]
    pub fn hit(self) {
        if std::env::var_os(VARIABLE).is_none_or(|armed| armed != self.as_str()) {
            return;
        }
        // Said where the daemon's log goes, so a test's failure shows where it died.
        eprintln!("failpoint {self}: killing this process (SIGKILL)");
        let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        // SIGKILL to oneself ends the process before the call returns to user space; this is
        // not reached, and an abort is still a crash should it be.
        std::process::abort();
    }

    /// Nothing: a build without `testing` has no crash points.
    #[cfg(not(feature = "testing"))]
    #[inline(always)]
    pub fn hit(self) {}
}

#[cfg(test)]
mod tests {
    use super::Failpoint;
    use std::path::Path;

    fn sources(dir: &Path, into: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, into);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("src/failpoint.rs") {
                into.push((path.display().to_string(), std::fs::read_to_string(&path).unwrap()));
            }
        }
    }

    /// Every point is hit somewhere in `src/` (not in a comment): none is dead, so a test that
    /// arms one crashes where it means to.
    #[test]
    fn every_failpoint_is_hit_in_the_source() {
        let mut files = Vec::new();
        sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
        for point in Failpoint::ALL {
            let call = format!("Failpoint::{point:?}.hit()");
            let hits: Vec<&str> = files
                .iter()
                .filter(|(_, text)| {
                    text.lines().any(|l| !l.trim_start().starts_with("//") && l.contains(&call))
                })
                .map(|(path, _)| path.as_str())
                .collect();
            assert!(!hits.is_empty(), "{point} ({call}) is hit nowhere in src/");
        }
    }

    #[test]
    fn each_point_has_its_own_name() {
        let mut names: Vec<&str> = Failpoint::ALL.iter().map(|p| p.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Failpoint::ALL.len());
    }
}
