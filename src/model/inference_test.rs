//! An inference test: one-shot work beside training runs that runs an environment against one
//! or more models (a task per model), enqueued by hand or by a schedule; and its state machine.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{InferenceSpec, Millis, ProcessRecord, UnknownState};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TestState {
    Queued,
    Running,
    Succeeded,
    /// Succeeded, but a model's accuracy fell below its schedule's baseline.
    Regressed,
    Failed,
    Cancelled,
}

impl TestState {
    pub const ALL: [TestState; 6] = [
        TestState::Queued,
        TestState::Running,
        TestState::Succeeded,
        TestState::Regressed,
        TestState::Failed,
        TestState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TestState::Queued => "queued",
            TestState::Running => "running",
            TestState::Succeeded => "succeeded",
            TestState::Regressed => "regressed",
            TestState::Failed => "failed",
            TestState::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        !matches!(self, TestState::Queued | TestState::Running)
    }
}

impl fmt::Display for TestState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TestState {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TestState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownState::new("test", s, TestState::ALL.iter().map(|s| s.as_str())))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestTrigger {
    Claim,
    Succeed,
    Regress,
    Fail,
    Cancel,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a {from} test cannot {trigger:?}")]
pub struct IllegalTestTransition {
    pub from: TestState,
    pub trigger: TestTrigger,
}

/// The test state machine: `queued → running → succeeded | regressed | failed`, and
/// `cancelled` from either live state. Pure, like the run table.
pub fn next(from: TestState, trigger: TestTrigger) -> Result<TestState, IllegalTestTransition> {
    use TestState as S;
    use TestTrigger as E;
    Ok(match (from, trigger) {
        (S::Queued, E::Claim) => S::Running,
        (S::Queued | S::Running, E::Cancel) => S::Cancelled,
        (S::Running, E::Succeed) => S::Succeeded,
        (S::Running, E::Regress) => S::Regressed,
        (S::Running, E::Fail) => S::Failed,
        _ => return Err(IllegalTestTransition { from, trigger }),
    })
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InferenceTest {
    pub id: Uuid,
    pub state: TestState,
    pub version: i64,
    pub schedule_id: Option<Uuid>,
    pub env_name: String,
    pub spec: InferenceSpec,
    pub created_at: Millis,
    pub started_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    pub reason: Option<String>,
    /// Per-model results and the summary, once the test has ended.
    pub results: Option<serde_json::Value>,
    pub test_dir: PathBuf,
    /// The node running the test, and the fencing token of its claim.
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub fence: Option<i64>,
}

/// One model's process of a test.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TestTask {
    pub test_id: Uuid,
    pub idx: i64,
    pub model: String,
    /// Its process: state, identity, start and end.
    #[serde(flatten)]
    pub record: ProcessRecord,
    pub timed_out: bool,
}

impl InferenceTest {
    /// A queued test running `spec`, with its directory under `tests_dir`.
    pub fn queued(
        id: Uuid,
        spec: InferenceSpec,
        schedule_id: Option<Uuid>,
        tests_dir: &std::path::Path,
    ) -> InferenceTest {
        InferenceTest {
            id,
            state: TestState::Queued,
            version: 0,
            schedule_id,
            env_name: spec.env_name.clone(),
            spec,
            created_at: crate::model::now_millis(),
            started_at: None,
            ended_at: None,
            reason: None,
            results: None,
            test_dir: tests_dir.join(id.to_string()),
            node: None,
            fence: None,
        }
    }

    /// One pending task per model, as the test starts.
    pub fn pending_tasks(&self) -> Vec<TestTask> {
        let test = self;
        test.spec
            .models
            .iter()
            .enumerate()
            .map(|(idx, model)| TestTask {
                test_id: test.id,
                idx: idx as i64,
                model: model.clone(),
                record: ProcessRecord::default(),
                timed_out: false,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TestState as S;
    use TestTrigger as E;

    #[test]
    fn the_test_table_is_exactly_this() {
        let legal = [
            (S::Queued, E::Claim, S::Running),
            (S::Queued, E::Cancel, S::Cancelled),
            (S::Running, E::Cancel, S::Cancelled),
            (S::Running, E::Succeed, S::Succeeded),
            (S::Running, E::Regress, S::Regressed),
            (S::Running, E::Fail, S::Failed),
        ];
        for from in TestState::ALL {
            for trigger in [E::Claim, E::Succeed, E::Regress, E::Fail, E::Cancel] {
                let want = legal.iter().find(|(f, e, _)| *f == from && *e == trigger).map(|t| t.2);
                assert_eq!(next(from, trigger).ok(), want, "{from} {trigger:?}");
            }
        }
        assert!(TestState::ALL.iter().filter(|s| s.is_terminal()).all(|s| next(*s, E::Cancel).is_err()));
    }
}
