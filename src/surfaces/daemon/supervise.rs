//! `lachesis daemon`: takes the store's daemon lock, listens for wake-ups and runs the
//! reconciler. Stopping the daemon leaves stages running under their shims; the next daemon
//! re-attaches them.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tracing::info;

use super::record::DaemonRecord;
use crate::reconciler::{Msg, ReconcilerConfig};
use crate::service::{Service, ServiceError};
use crate::settings::Settings;

#[derive(Clone, Debug)]
pub struct DaemonOptions {
    /// Where to serve the HTTP API (TCP addresses need the token; unix sockets don't).
    pub listen: Vec<crate::api::Listen>,
    pub max_parallel: usize,
    pub stop_grace: Duration,
    pub scan_interval: Duration,
    /// This daemon's node id; the host name when absent.
    pub node: Option<String>,
    /// Labels workflows can pin runs to (`gpu=h100`); PostgreSQL only.
    pub labels: std::collections::BTreeMap<String, String>,
    /// How long a heartbeat keeps this node's lease; other nodes reap it after that.
    pub lease: Duration,
    /// How often running runs' W&B metric history is read (when WANDB_API_KEY is set).
    pub wandb_interval: Duration,
    /// How often the sweep decider looks at every sweep with new readings, besides deciding
    /// as readings land in this daemon.
    pub sweep_interval: Duration,
    /// Forget finished runs and tests this long after they ended; `None` keeps everything.
    pub keep_finished: Option<Duration>,
    /// Stage log limits where a workflow sets none (1 GiB × 3 files by default).
    pub log_rotation: crate::logs::Rotation,
    /// The morning report to post on a cron, if any.
    pub report: Option<crate::report_poster::ReportPost>,
    /// Counted pools (`--pool gpu=0,1,2,3`, `gpu=auto`); none by default.
    pub pools: Vec<crate::model::pool::PoolSpec>,
    /// With `--preempt`: how much lower a victim's priority must be (None: never preempt).
    pub preempt_gap: Option<i64>,
    /// The daemon's own log, reopened on SIGHUP when it is a file (None: nothing to reopen).
    pub log: Option<super::log::DaemonLog>,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        DaemonOptions {
            listen: Vec::new(),
            max_parallel: 8,
            stop_grace: Duration::from_secs(10),
            scan_interval: Duration::from_secs(2),
            node: None,
            labels: Default::default(),
            lease: Duration::from_secs(60),
            wandb_interval: Duration::from_secs(5 * 60),
            sweep_interval: crate::sweep_decider::INTERVAL,
            keep_finished: None,
            log_rotation: crate::logs::Rotation::default(),
            report: None,
            pools: Vec::new(),
            preempt_gap: None,
            log: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Service(#[from] ServiceError),
    #[error("cannot listen on {path}: {source}")]
    Socket { path: String, source: std::io::Error },
    #[error("cannot find the lachesis binary to start shims: {0}")]
    Exe(std::io::Error),
    #[error(transparent)]
    Api(#[from] crate::api::ApiError),
    #[error("{0}")]
    BadOption(String),
    #[error(transparent)]
    Pools(#[from] crate::node_pools::NodePoolsError),
    #[error(transparent)]
    WebhookSecret(#[from] crate::webhooks::SecretError),
    #[error(transparent)]
    WebhookPolicy(#[from] crate::webhooks::PolicyError),
}

/// Runs the daemon until SIGTERM or SIGINT.
pub async fn run(settings: Settings, options: DaemonOptions) -> Result<(), DaemonError> {
    // First, before anything can take long: a hung-up terminal's SIGHUP must not end the daemon.
    let hangup = signal(SignalKind::hangup())
        .map_err(|source| DaemonError::Socket { path: "SIGHUP".into(), source })?;
    tokio::spawn(on_hangup(hangup, options.log.clone()));
    let wants_token = options.listen.iter().any(|l| matches!(l, crate::api::Listen::Tcp(_)));
    // A short LACHESIS_API_TOKEN is refused before anything starts.
    if wants_token && let Some(token) = crate::environ::var("LACHESIS_API_TOKEN") {
        crate::api::ApiToken::new(&token, "LACHESIS_API_TOKEN")?;
    }
    if options.lease < Duration::from_secs(1) {
        return Err(DaemonError::BadOption(format!(
            "--lease {} is too short: a node must heartbeat within it (use 1s or more; 60s by default)",
            crate::workflow::Dur(options.lease)
        )));
    }
    if options.wandb_interval < Duration::from_secs(1) {
        return Err(DaemonError::BadOption(format!(
            "--wandb-interval {} is too short (use 1s or more; 5m by default)",
            crate::workflow::Dur(options.wandb_interval)
        )));
    }
    if let Some(node) = options.node.as_deref().filter(|n| !is_node_id(n)) {
        return Err(DaemonError::BadOption(format!(
            "--node '{node}' is not a node id (letters, digits, '-', '_' or '.')"
        )));
    }
    let pools = crate::node_pools::resolve(&options.pools)?;
    let outbox = crate::webhooks::OutboxPolicy::from_environ()?;
    let service = Service::open(settings.clone()).await?;
    // After the open, which makes the home private: the secret file is created in it.
    let signer = crate::webhooks::Signer::load(&settings.home)?;
    if !options.labels.is_empty() && !service.backend().supports_nodes() {
        return Err(ServiceError::NeedsPostgres("node labels (--label)".into()).into());
    }
    let node = options.node.clone().unwrap_or_else(hostname);
    let _lock = service.lock_daemon(&node).await?;
    // Published for submissions made without the daemon; only the lock's holder writes it.
    // Supervising the runs matters more than the file: a daemon that cannot write it (a full
    // disk) carries on, and says what a submission made without it will see.
    if let Err(err) = crate::node_pools::publish(&settings.home, &pools) {
        tracing::warn!(
            "{err}: submissions made without the daemon check their needs against the last pools published"
        );
    }
    if !pools.is_empty() {
        info!(pools = %pools, "counted pools");
    }
    let record = DaemonRecord::of_this_process(
        super::control::store_text(&settings),
        options.log.as_ref().and_then(|log| log.path().map(Path::to_path_buf)),
        node.clone(),
    );
    // `daemon stop` and `daemon status` find the daemon by it; one that cannot be written (a
    // full disk) leaves them blind, not the runs unsupervised.
    let record = match record.and_then(|r| r.write(&settings.home).map(|()| r)) {
        Ok(record) => Some(record),
        Err(err) => {
            tracing::warn!(
                "cannot write {}: {err}; `daemon stop` and `daemon status` will not find this daemon",
                super::record::path(&settings.home).display()
            );
            None
        }
    };
    let socket_path = settings.socket_path();
    let socket = crate::wake::listen(&socket_path)
        .map_err(|source| DaemonError::Socket { path: socket_path.display().to_string(), source })?;
    let exe = std::env::current_exe().map_err(DaemonError::Exe)?;
    info!(home = %settings.home.display(), store = %service.backend(), pid = std::process::id(), version = env!("CARGO_PKG_VERSION"), "daemon started");

    let (tx, rx) = mpsc::unbounded_channel();
    let wake_tx = tx.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 16];
        while let Ok(len) = socket.recv(&mut buf).await {
            let msg = match crate::wake::Poke::read(&buf[..len]) {
                crate::wake::Poke::Changed => Msg::Wake,
                crate::wake::Poke::Queued => Msg::Queued,
                crate::wake::Poke::Probe => continue,
            };
            if wake_tx.send(msg).is_err() {
                break;
            }
        }
    });
    // Daemons on other machines announce new work and stop requests through PostgreSQL.
    if service.backend().supports_nodes() {
        let (wake_tx, listener) = (tx.clone(), service.clone());
        tokio::spawn(async move {
            let wake = || wake_tx.send(Msg::Wake).is_ok();
            if let Err(err) = listener.listen_for_wakes(wake).await {
                tracing::warn!("no wake-ups from other machines ({err}); the periodic scan covers them");
            }
        });
    }
    tokio::spawn(watch_free_space(settings.home.clone()));
    if let Some(keep) = options.keep_finished {
        // On a shared store each node forgets the runs it ran: their directories are on its disk.
        let only = service.backend().supports_nodes().then(|| node.clone());
        tokio::spawn(collect_garbage(service.clone(), keep, only));
    }
    let config = ReconcilerConfig {
        exe,
        max_parallel: options.max_parallel.max(1),
        stop_grace: options.stop_grace,
        scan_interval: options.scan_interval,
        tests_dir: settings.home.join("tests"),
        runs_dir: settings.home.join("runs"),
        claims_dir: settings.home.join("claims"),
        log_rotation: options.log_rotation,
        pools,
        preempt_gap: options.preempt_gap,
        signer: Some(signer.clone()),
        outbox: Some(outbox),
    };
    let registration = crate::service::NodeRegistration {
        id: node,
        hostname: hostname(),
        labels: options.labels.clone(),
        lease: options.lease,
    };
    tokio::spawn(crate::metric_poller::run(service.clone(), registration.id.clone(), options.wandb_interval));
    tokio::spawn(crate::sweep_decider::run(service.clone(), options.sweep_interval));
    if let Some(post) = options.report.clone() {
        tokio::spawn(crate::report_poster::run(service.clone(), post, signer.clone()));
    }
    let telemetry = Arc::new(crate::telemetry::Telemetry::default());
    let reconciler = service.reconciler(registration, config, tx, Arc::clone(&telemetry));
    let token = if wants_token {
        let (token, origin) = crate::api::load_or_create_token(&settings.home)?;
        info!(token = %origin, "HTTP API token (send it as `Authorization: Bearer …`)");
        Some(Arc::new(token))
    } else {
        None
    };
    let mut apis = tokio::task::JoinSet::new();
    apis.spawn(crate::api::home::serve(service.clone(), Arc::clone(&telemetry)));
    let home_socket = settings.api_socket_path();
    for listen in options.listen.clone() {
        // `--listen unix:$LACHESIS_HOME/api.sock` names the socket served above: binding it
        // twice would leave one listener without its file.
        if let crate::api::Listen::Unix(path) = &listen
            && same_place(path, &home_socket)
        {
            continue;
        }
        apis.spawn(crate::api::serve(listen, token.clone(), service.clone(), Arc::clone(&telemetry)));
    }
    let api = async move {
        match apis.join_next().await {
            Some(Ok(result)) => result,
            Some(Err(join)) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            Some(Err(_)) => std::future::pending().await,
            None => std::future::pending().await,
        }
    };
    let mut term = signal(SignalKind::terminate())
        .map_err(|source| DaemonError::Socket { path: "SIGTERM".into(), source })?;
    let mut int = signal(SignalKind::interrupt())
        .map_err(|source| DaemonError::Socket { path: "SIGINT".into(), source })?;
    tokio::select! {
        result = reconciler.run(rx) => result.map_err(ServiceError::from)?,
        result = api => result?,
        _ = term.recv() => info!("SIGTERM: daemon exits; stages keep running under their shims"),
        _ = int.recv() => info!("SIGINT: daemon exits; stages keep running under their shims"),
    }
    let _ = std::fs::remove_file(&socket_path);
    let _ = std::fs::remove_file(settings.api_socket_path());
    if let Some(record) = record {
        record.remove_if_ours(&settings.home);
    }
    for listen in &options.listen {
        if let crate::api::Listen::Unix(path) = listen {
            let _ = std::fs::remove_file(path);
        }
    }
    Ok(())
}

/// SIGHUP never ends the daemon (a terminal that hangs up sends it): a log file is reopened, as
/// logrotate expects after moving it away; a log on stderr has nothing to reopen.
async fn on_hangup(mut hangup: tokio::signal::unix::Signal, log: Option<super::log::DaemonLog>) {
    while hangup.recv().await.is_some() {
        match log.as_ref().filter(|log| log.path().is_some()) {
            // The log's writer says when it has reopened the file, in the new file.
            Some(log) => log.reopen(),
            None => info!("SIGHUP ignored: the log goes to stderr, nothing to reopen; the daemon runs on"),
        }
    }
}

/// How often the daemon looks at the home's free space.
const SPACE_CHECK_EVERY: Duration = Duration::from_secs(30);

/// Warns (once per episode) while the home's filesystem is below the reserve that keeps the
/// store and status files writable; stage logs stop growing there on their own.
async fn watch_free_space(home: std::path::PathBuf) {
    use crate::launch::space::{human_bytes, space_at};
    let mut low = false;
    let mut every = tokio::time::interval(SPACE_CHECK_EVERY);
    loop {
        every.tick().await;
        let Ok(space) = space_at(&home) else { continue };
        if space.is_low() && !low {
            tracing::warn!(
                home = %home.display(),
                "only {} free, below the {} reserve: stage logs drop output until space returns",
                human_bytes(space.available),
                human_bytes(space.reserve())
            );
        } else if !space.is_low() && low {
            info!(home = %home.display(), "{} free again", human_bytes(space.available));
        }
        low = space.is_low();
    }
}

/// Forgets what ended more than `keep` ago, now and then hourly. Only terminal rows are
/// touched, which the reconciler no longer moves, so this runs beside it.
async fn collect_garbage(service: Service, keep: Duration, node: Option<String>) {
    let mut tick = tokio::time::interval(GC_INTERVAL);
    loop {
        tick.tick().await;
        match service.collect_garbage(keep, false, node.as_deref()).await {
            Ok(r) if r.runs + r.tests > 0 => {
                info!(runs = r.runs, tests = r.tests, bytes = r.bytes, "forgot finished runs and tests")
            }
            Ok(_) => {}
            Err(err) => tracing::warn!("retention: {err}"),
        }
    }
}

/// How often `--keep-finished` looks for what to forget.
const GC_INTERVAL: Duration = Duration::from_secs(3600);

/// This machine's host name, the default node id.
pub fn hostname() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}

fn is_node_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 200 && id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// Whether two socket paths name the same place: their directories resolved, their names equal.
fn same_place(a: &Path, b: &Path) -> bool {
    let resolve = |p: &Path| {
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        Some((std::fs::canonicalize(dir).ok()?, p.file_name()?.to_owned()))
    };
    match (resolve(a), resolve(b)) {
        (Some(a), Some(b)) => a == b,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::same_place;

    #[test]
    fn a_socket_path_is_the_same_place_through_any_spelling_of_its_directory() {
        let home = tempfile::tempdir().unwrap();
        let socket = home.path().join("api.sock");
        std::fs::create_dir(home.path().join("runs")).unwrap();
        assert!(same_place(&home.path().join("runs/../api.sock"), &socket));
        assert!(!same_place(&home.path().join("other.sock"), &socket));
        assert!(!same_place(&home.path().join("runs/api.sock"), &socket));
        assert!(same_place(std::path::Path::new("/nowhere/x.sock"), std::path::Path::new("/nowhere/x.sock")));
    }
}
