//! The operations every surface (CLI, HTTP, MCP) offers, in one place. Surfaces parse and
//! print; they decide nothing.

mod daemon;
mod environments;
mod inference_tests;
mod logs;
mod metric_history;
mod metrics;
mod nodes;
mod retention;
mod runs;

use std::sync::Arc;

use crate::model::RunState;
use crate::settings::Settings;
use crate::store::{Store, StoreError};
use crate::workflow::CatalogError;

pub use environments::{ConfigView, FieldView};
pub use inference_tests::{ScheduleDetail, TestRequest, TestStatus};
pub use logs::{DEFAULT_TAIL_LINES, LogRequest, MAX_TAIL_LINES, StageLog, read_log};
pub use metric_history::{HISTORY_SAMPLES, MetricHistory, ReadingError};
pub use metrics::{RunMetrics, wandb_project, wandb_run_name};
pub use nodes::NodeView;
pub use retention::{GcReport, disk_usage};
pub use runs::{RunResults, RunStatus, RunSummary, SubmitRequest, trained_weights};

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("no run matches '{0}'")]
    UnknownRun(String),
    #[error("'{prefix}' matches several {what}: {} (give more of the id)", candidates.join(", "))]
    Ambiguous { what: &'static str, prefix: String, candidates: Vec<String> },
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("workflow '{workflow}' needs {} in the environment (not set: {})", wanted.join(", "), missing.join(", "))]
    MissingCredentials { workflow: String, wanted: Vec<String>, missing: Vec<String> },
    #[error("workflow '{0}' runs an environment: pass --env NAME (or select one)")]
    NeedsEnvironment(String),
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
    /// One request of a bulk submission was refused (`index` counts from 1); nothing was written.
    #[error("run {index} of the batch: {source}")]
    InBatch { index: usize, source: Box<ServiceError> },
}

pub type Result<T, E = ServiceError> = std::result::Result<T, E>;

#[derive(Clone)]
pub struct Service {
    pub settings: Settings,
    /// Surfaces never see it: every read and write they offer is a method here.
    store: Arc<dyn Store>,
}

impl Service {
    pub async fn open(settings: Settings) -> Result<Service> {
        settings
            .ensure_private_home()
            .map_err(|source| StoreError::Io { path: settings.home.clone(), source })?;
        let store = crate::store::open(&settings.store_location()?).await?;
        Ok(Service { settings, store: Arc::new(store) })
    }

    /// After a write the daemons must act on: pokes this machine's daemon through its socket,
    /// and the daemons of other machines through the store. Returns whether a local one heard.
    pub async fn wake(&self) -> bool {
        self.poke(crate::wake::Poke::Changed).await
    }

    /// `wake` after queueing new work: the local daemon only looks at its queue.
    pub async fn wake_queued(&self) -> bool {
        self.poke(crate::wake::Poke::Queued).await
    }

    async fn poke(&self, poke: crate::wake::Poke) -> bool {
        if let Err(err) = self.store.announce().await {
            tracing::debug!("cannot announce to other daemons: {err}");
        }
        crate::wake::notify(&self.settings.socket_path(), poke)
    }
}

/// What a user's id or id prefix names: the row with that exact id, else the one row whose id
/// starts with it; `unknown` when none does, `Ambiguous` (naming `what`) when several do.
async fn resolve_prefix<T>(
    prefix: &str,
    what: &'static str,
    by_id: impl AsyncFnOnce(uuid::Uuid) -> crate::store::Result<Option<T>>,
    by_prefix: impl AsyncFnOnce(&str) -> crate::store::Result<Vec<T>>,
    id_of: impl Fn(&T) -> uuid::Uuid,
    unknown: fn(String) -> ServiceError,
) -> Result<T> {
    let prefix = prefix.trim();
    if let Ok(id) = uuid::Uuid::parse_str(prefix)
        && let Some(found) = by_id(id).await?
    {
        return Ok(found);
    }
    let mut matches = by_prefix(prefix).await?;
    match matches.len() {
        // The prefix comes from the user: shown escaped, so the error stays one printable line.
        0 => Err(unknown(crate::yaml::one_line(prefix))),
        1 => Ok(matches.remove(0)),
        _ => Err(ServiceError::Ambiguous {
            what,
            prefix: crate::yaml::one_line(prefix),
            candidates: matches.iter().map(|m| id_of(m).to_string()).collect(),
        }),
    }
}
