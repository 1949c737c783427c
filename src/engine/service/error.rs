//! What a service operation can fail with, and the kind of each failure a surface answers by.

use crate::engine::store::StoreError;
use crate::model::RunState;
use crate::workflow::CatalogError;

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("no run matches '{0}'")]
    UnknownRun(String),
    #[error("'{prefix}' matches several {what}: {} (give more of the id)", candidates.join(", "))]
    Ambiguous { what: &'static str, prefix: String, candidates: Vec<String> },
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Storage(#[from] StoreError),
    #[error("workflow '{workflow}' needs {} in the environment (not set: {})", wanted.join(", "), missing.join(", "))]
    MissingCredentials { workflow: String, wanted: Vec<String>, missing: Vec<String> },
    #[error("workflow '{0}' runs an environment: pass --env NAME (or select one)")]
    NeedsEnvironment(String),
    /// A workflow that trains one kind of environment, given another.
    #[error(
        "environment '{env}' is of kind {kind}, and workflow '{workflow}' trains {trains} environments ({})",
        instead.map_or_else(|| "a run that names no workflow gets the catalog's default".to_string(), |w| format!("{w} trains it; a run that names no workflow gets it"))
    )]
    WrongEnvironmentKind {
        workflow: String,
        trains: crate::environments::EnvKind,
        env: String,
        kind: crate::environments::EnvKind,
        instead: Option<&'static str>,
    },
    /// A verifiers environment's `load_environment` parameter with no default and no value.
    #[error(
        "environment '{env}' needs a value for '{parameter}' (its load_environment has no default for it): \
         `lachesis config set {parameter} VALUE`, or --set {parameter}=VALUE for one run"
    )]
    MissingEnvArgument { env: String, parameter: String },
    /// A test's `--env-args` that is not a JSON object, or given for an environment that takes none.
    #[error("--env-args {0}")]
    BadEnvArgs(String),
    /// A verifiers environment whose name vf-eval could not be handed safely.
    #[error(
        "environment '{0}' can't be tested: its name is not a module name vf-eval can import (letters, digits, '-', '_', '.'; no path)"
    )]
    NotAVerifiersId(String),
    #[error("unknown variable '{name}' for workflow '{workflow}' (variables: {known})")]
    UnknownVar { name: String, workflow: String, known: String },
    #[error(
        "variable '{name}' is set by lachesis and can't be given per run (only a workflow's declared vars can)"
    )]
    BuiltinVar { name: String },
    #[error("invalid {what} '{text}': expected NAME=VALUE")]
    BadAssignment { what: &'static str, text: String },
    #[error("workflow '{workflow}': {problem}")]
    Unplannable { workflow: String, problem: String },
    #[error("run {id} has already ended ({state})")]
    AlreadyEnded { id: String, state: RunState },
    #[error("run {id} has not ended ({state}): stop it before queueing it again")]
    NotEnded { id: String, state: RunState },
    /// Hold, release and edit change only a run still in the queue.
    #[error("run {id} is {state}: only a pending run can be {action}")]
    NotPending { id: String, state: RunState, action: &'static str },
    #[error("nothing to edit: give --priority, --var, --set or --needs")]
    NothingToEdit,
    #[error("run {id} is {state}: only a failed or stopped run resumes")]
    NotResumable { id: String, state: RunState },
    #[error("run {id}: {problem}")]
    NoCheckpoint { id: String, problem: String },
    #[error(transparent)]
    Environment(#[from] crate::environments::LookupError),
    #[error(transparent)]
    Introspect(#[from] crate::environments::IntrospectError),
    #[error(transparent)]
    Edit(#[from] crate::environments::EditError),
    #[error(transparent)]
    Value(#[from] crate::environments::ValueError),
    #[error("no environment is selected: run `lachesis env select NAME` (see `lachesis env list`)")]
    NoSelection,
    #[error(transparent)]
    Provider(#[from] crate::inference::spec::ProviderError),
    #[error("environment '{name}' file {} no longer exists (select the environment again)", .path.display())]
    EnvironmentFileMissing { name: String, path: std::path::PathBuf },
    #[error("no test matches '{0}'")]
    UnknownTest(String),
    #[error("run {run} has no stage '{stage}' (stages: {known})")]
    UnknownStage { run: String, stage: String, known: String },
    #[error(
        "rotation {rotation} is past the most files a log keeps ({most}): 0 is the live file, N its <log>.N"
    )]
    BadRotation { rotation: u32, most: u32 },
    #[error(transparent)]
    Log(#[from] crate::logs::LogError),
    #[error("{0}")]
    Schedule(String),
    #[error("unknown schedule '{name}' (schedules: {available})")]
    UnknownSchedule { name: String, available: String },
    #[error("test {id} has already ended ({state})")]
    TestEnded { id: String, state: crate::model::TestState },
    #[error("no node is called '{id}' (nodes: {known})")]
    UnknownNode { id: String, known: String },
    #[error(
        "node '{id}' is {health} (last heartbeat {age_s}s ago): only a lost node can be forgotten; \
         stop its daemon and let another node reap it when its lease runs out"
    )]
    NodeNotLost { id: String, health: &'static str, age_s: i64 },
    /// Several daemons (nodes, labels, leases) share state through PostgreSQL only.
    #[error(
        "{0} needs several daemons on one PostgreSQL store (set LACHESIS_DATABASE_URL=postgres://…); \
         the embedded SQLite store serves one daemon on one machine"
    )]
    NeedsPostgres(String),
    /// A request's needs no claim could meet (a pool the daemon lacks, more than it has).
    #[error(transparent)]
    Needs(#[from] crate::model::pool::NeedsError),
    /// A need or pool name that is not one (`--needs`, a body's `needs`).
    #[error("needs: {0}")]
    BadNeeds(#[from] crate::model::pool::PoolError),
    /// The home's pools file cannot be read.
    #[error(transparent)]
    Pools(#[from] crate::node_pools::NodePoolsError),
    /// A run would wait for a run that already ended in a way that never meets the condition.
    #[error("{reason}: a run waiting for it could never start")]
    DependencyUnmet { reason: String },
    /// A dependency that cannot be written as given (a bad or repeated name, a later run, a cycle).
    #[error("{0}")]
    BadDependency(String),
    /// A pipeline file that cannot be queued; nothing was written.
    #[error("{0}")]
    Pipeline(String),
    /// One request of a bulk submission was refused (`index` counts from 1); nothing was written.
    #[error("run {index} of the batch: {source}")]
    InBatch { index: usize, source: Box<ServiceError> },
    /// A sweep file that cannot be read or checked; nothing was written.
    #[error(transparent)]
    SweepFile(#[from] crate::model::sweep::SweepError),
    #[error("{0}")]
    Sweep(String),
    /// A sweep parameter its workflow never uses; nothing was written.
    #[error("{path}: {problem}")]
    BadSweepParameter { path: String, problem: String },
    /// One member of a sweep could not be planned (`k` from 0); nothing was written.
    #[error("sweep member {k}: {source}")]
    InSweep { k: u64, source: Box<ServiceError> },
    #[error("no sweep matches '{0}'")]
    UnknownSweep(String),
    /// `sweep resume` of a sweep its stop did not end: live, or ended by its target or run_cap.
    #[error("sweep {id} cannot resume: {why}")]
    SweepNotResumable { id: String, why: String },
    #[error("no webhook delivery matches '{0}'")]
    UnknownDelivery(String),
    /// A filter asked for runs in a state the command never moves a run out of.
    #[error("run {action} acts on runs that are {applies}, not {state}")]
    NotApplicable { action: &'static str, state: RunState, applies: String },
    #[error("webhook delivery {id} is {state}: only a failed one is sent again")]
    DeliveryNotFailed { id: String, state: crate::model::DeliveryState },
}

pub type Result<T, E = ServiceError> = std::result::Result<T, E>;

/// What kind of failure an error is, for a surface that answers with a status (HTTP) or an
/// exit code. Every error has exactly one kind; the match in `kind` has no catch-all, so a new
/// error must choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request names something that does not exist (a run, test, schedule, workflow, node).
    NotFound,
    /// The request is malformed or asks for something no state of the store would allow.
    Invalid,
    /// A prefix or name matches several things.
    Ambiguous,
    /// The request is sound but the current state refuses it (an ended run, a concurrent move,
    /// no selection, a node that is not lost).
    Conflict,
    /// An operator's setting forbids it (a locked field).
    Forbidden,
    /// The request is understood, but something it needs is missing (credentials, an
    /// environment's introspection).
    Unprocessable,
    /// The store's disk is full: nothing was written, and the same request can succeed later.
    StorageFull,
    /// A fault of this machine or its store, not of the request.
    Internal,
}

impl ServiceError {
    pub fn kind(&self) -> ErrorKind {
        use ServiceError as E;
        match self {
            E::UnknownRun(_) | E::UnknownTest(_) | E::UnknownSchedule { .. } | E::UnknownNode { .. } => {
                ErrorKind::NotFound
            }
            E::UnknownStage { .. } => ErrorKind::NotFound,
            E::Environment(crate::environments::LookupError::Unknown { .. }) => ErrorKind::NotFound,
            E::Environment(crate::environments::LookupError::NotAName { .. }) => ErrorKind::Invalid,
            E::Environment(crate::environments::LookupError::Unreadable { .. }) => ErrorKind::Unprocessable,
            E::Environment(crate::environments::LookupError::Ambiguous { .. }) | E::Ambiguous { .. } => {
                ErrorKind::Ambiguous
            }
            E::Catalog(CatalogError::Unknown { .. } | CatalogError::UnknownSweep { .. }) => {
                ErrorKind::NotFound
            }
            E::Catalog(
                CatalogError::NotAName { .. } | CatalogError::Invalid(_) | CatalogError::BadSweepPath { .. },
            ) => ErrorKind::Invalid,
            E::Catalog(CatalogError::Io { .. }) | E::Log(_) => ErrorKind::Internal,
            E::Storage(err) => store_kind(err),
            E::MissingCredentials { .. } | E::Introspect(_) => ErrorKind::Unprocessable,
            E::Edit(crate::environments::EditError::Locked { .. }) => ErrorKind::Forbidden,
            E::Edit(_) | E::Value(_) | E::Provider(_) | E::Schedule(_) => ErrorKind::Invalid,
            E::NeedsEnvironment(_) | E::UnknownVar { .. } | E::BuiltinVar { .. } => ErrorKind::Invalid,
            E::WrongEnvironmentKind { .. } | E::MissingEnvArgument { .. } => ErrorKind::Invalid,
            E::BadEnvArgs(_) | E::NotAVerifiersId(_) => ErrorKind::Invalid,
            E::BadAssignment { .. } | E::Unplannable { .. } => ErrorKind::Invalid,
            E::NoSelection | E::EnvironmentFileMissing { .. } | E::NeedsPostgres(_) => ErrorKind::Conflict,
            E::AlreadyEnded { .. } | E::TestEnded { .. } | E::NotEnded { .. } => ErrorKind::Conflict,
            E::NotPending { .. } => ErrorKind::Conflict,
            E::NotApplicable { .. } => ErrorKind::Invalid,
            E::NothingToEdit | E::BadRotation { .. } => ErrorKind::Invalid,
            E::NotResumable { .. } | E::NoCheckpoint { .. } => ErrorKind::Conflict,
            E::SweepNotResumable { .. } => ErrorKind::Conflict,
            E::NodeNotLost { .. } => ErrorKind::Conflict,
            E::Needs(_) | E::BadNeeds(_) => ErrorKind::Invalid,
            E::Pools(_) => ErrorKind::Internal,
            E::InBatch { source, .. } => source.kind(),
            E::DependencyUnmet { .. } => ErrorKind::Conflict,
            E::BadDependency(_) | E::Pipeline(_) => ErrorKind::Invalid,
            E::SweepFile(_) | E::Sweep(_) | E::BadSweepParameter { .. } => ErrorKind::Invalid,
            E::InSweep { source, .. } => source.kind(),
            E::UnknownSweep(_) | E::UnknownDelivery(_) => ErrorKind::NotFound,
            E::DeliveryNotFailed { .. } => ErrorKind::Conflict,
        }
    }

    /// Whether the store could not be opened or reached (a server that refuses or drops
    /// connections, a file that cannot be opened): nothing was asked of it, and the same request
    /// may succeed once it answers. The CLI exits with its own code for it.
    pub fn is_unreachable(&self) -> bool {
        match self {
            ServiceError::Storage(err @ StoreError::Open { .. }) => {
                err.fault() != Some(crate::engine::store::Fault::Full)
            }
            ServiceError::Storage(err) => err.fault() == Some(crate::engine::store::Fault::Away),
            ServiceError::InBatch { source, .. } | ServiceError::InSweep { source, .. } => {
                source.is_unreachable()
            }
            _ => false,
        }
    }

    /// A stable machine-readable name for the error (the HTTP API's `error` field): its kind's
    /// name, or a finer one that clients already match on.
    pub fn code(&self) -> &'static str {
        use ServiceError as E;
        match self {
            E::InBatch { source, .. } => source.code(),
            E::InSweep { source, .. } => source.code(),
            E::MissingCredentials { .. } => "missing_credentials",
            E::WrongEnvironmentKind { .. } => "wrong_environment_kind",
            E::MissingEnvArgument { .. } => "missing_env_argument",
            E::BadEnvArgs(_) => "bad_env_args",
            E::Edit(crate::environments::EditError::Locked { .. }) => "locked_field",
            E::NoSelection => "no_selection",
            E::NeedsPostgres(_) => "needs_postgres",
            E::NodeNotLost { .. } => "node_not_lost",
            E::AlreadyEnded { .. } | E::TestEnded { .. } => "already_ended",
            E::NotEnded { .. } => "not_ended",
            E::NotPending { .. } => "not_pending",
            E::NotResumable { .. } | E::SweepNotResumable { .. } => "not_resumable",
            E::NoCheckpoint { .. } => "no_checkpoint",
            E::DependencyUnmet { .. } => "dependency_unmet",
            E::Introspect(_) => "introspection",
            E::DeliveryNotFailed { .. } => "not_failed",
            other => other.kind().name(),
        }
    }
}

impl ErrorKind {
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not_found",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Ambiguous => "ambiguous",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::Unprocessable => "unprocessable",
            ErrorKind::StorageFull => "storage_full",
            ErrorKind::Internal => "internal",
        }
    }
}

fn store_kind(err: &StoreError) -> ErrorKind {
    match err {
        _ if err.is_storage_full() => ErrorKind::StorageFull,
        StoreError::Conflict { .. }
        | StoreError::TestConflict { .. }
        | StoreError::Illegal(_)
        | StoreError::LeaseLost { .. }
        | StoreError::Fenced { .. }
        | StoreError::Locked(_)
        | StoreError::Unmet { .. } => ErrorKind::Conflict,
        StoreError::UnsupportedUrl(_) => ErrorKind::Invalid,
        StoreError::Open { .. }
        | StoreError::Migrate(_)
        | StoreError::Database(_)
        | StoreError::Corrupt(_)
        | StoreError::IllegalProcess(_)
        | StoreError::Io { .. } => ErrorKind::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store error is a conflict, a full disk or a fault by its kind, never by its message.
    #[test]
    fn store_errors_are_classified_by_kind() {
        let conflict =
            StoreError::Conflict { id: uuid::Uuid::nil(), expected: RunState::Pending, version: 1 };
        assert_eq!(ServiceError::Storage(conflict).kind(), ErrorKind::Conflict);
        let enospc = std::io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error());
        let full = ServiceError::Storage(StoreError::Io { path: "/h".into(), source: enospc });
        assert_eq!((full.kind(), full.code()), (ErrorKind::StorageFull, "storage_full"));
        let sql_full = StoreError::Database(sqlx::Error::Io(std::io::Error::from_raw_os_error(
            rustix::io::Errno::DQUOT.raw_os_error(),
        )));
        assert_eq!(ServiceError::Storage(sql_full).kind(), ErrorKind::StorageFull);
        // A message that merely says "full" is not a full disk.
        let corrupt = ServiceError::Storage(StoreError::Corrupt("the table is full of surprises".into()));
        assert_eq!((corrupt.kind(), corrupt.code()), (ErrorKind::Internal, "internal"));
    }
}
