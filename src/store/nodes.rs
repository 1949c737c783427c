//! Nodes: the daemons sharing one store. Each holds a lease (a heartbeat it renews) and a
//! fencing token handed out when it registers; what it claims carries that token, and its later
//! writes only land while the claim still carries it. When a node's heartbeat is older than its
//! lease, any other node may reap it: mark it lost, then fail or requeue its runs — each with a
//! compare-and-set on the lost node's token, so a run is either reaped or kept, never both.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::sql::{Backend, SqlStore, corrupt, from_json, insert_event, json, run_from_row};
use super::{Result, Store, StoreError};
use crate::jobs::{Job, JobState};
use crate::model::{EventKind, Millis, Run, RunParams, RunState, now_millis};

/// Who a daemon is, as it registers.
#[derive(Clone, Debug)]
pub struct NodeRegistration {
    pub id: String,
    pub hostname: String,
    pub labels: BTreeMap<String, String>,
    /// How long the node's heartbeat stays good.
    pub lease: Duration,
}

/// A node's current lease: its fencing token and how long a heartbeat lasts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub node: String,
    pub token: i64,
    pub labels: BTreeMap<String, String>,
    pub lease: Duration,
    /// The token of the node's previous lease, when it had one that was never reaped: its runs
    /// were handed over to this lease as it was taken.
    pub previous: Option<i64>,
}

impl Lease {
    fn lease_ms(&self) -> i64 {
        self.lease.as_millis().min(i64::MAX as u128) as i64
    }

    /// Whether this node may run work pinned to `wanted` labels.
    pub fn fits(&self, wanted: &BTreeMap<String, String>) -> bool {
        labels_fit(&self.labels, wanted)
    }
}

/// Whether a node labelled `have` may take work pinned to `wanted`: it has every wanted label.
pub fn labels_fit(have: &BTreeMap<String, String>, wanted: &BTreeMap<String, String>) -> bool {
    wanted.iter().all(|(key, value)| have.get(key) == Some(value))
}

/// A row of the nodes table, for `lachesis node list` and the reaper.
#[derive(Clone, Debug, Serialize)]
pub struct NodeInfo {
    pub id: String,
    pub hostname: String,
    pub pid: i64,
    pub labels: BTreeMap<String, String>,
    pub token: i64,
    pub lease_ms: i64,
    pub started_at: Millis,
    pub heartbeat_at: Millis,
    /// `up` or `lost`.
    pub state: String,
    /// Runs it owns that have not ended.
    pub runs: i64,
}

/// What the claimer decided about one pending run.
pub enum Pick {
    Take {
        params: RunParams,
        run_dir: PathBuf,
    },
    Skip,
    /// No more room: end the claim here.
    Stop,
}

/// How a reaper settles one run of a lost node.
#[derive(Clone, Debug)]
pub enum Reap {
    Fail {
        reason: String,
    },
    Requeue {
        reason: String,
        not_before: Millis,
    },
    /// An ended run whose stages were still being stopped: they are lost with the node.
    Release,
}

#[async_trait]
pub trait NodeStore: Send + Sync {
    /// Takes a new lease (and token) for the node, handing its runs and jobs over from its
    /// previous lease when that was never reaped.
    async fn register_node(&self, registration: &NodeRegistration) -> Result<Lease>;
    /// Renews the lease; `LeaseLost` once the node was reaped or took a newer lease.
    async fn heartbeat(&self, lease: &Lease) -> Result<()>;
    /// Every node ever registered, with the runs each owns.
    async fn nodes(&self) -> Result<Vec<NodeInfo>>;
    /// Removes a `lost` node's row; false if there is no such lost node.
    async fn forget_node(&self, id: &str) -> Result<bool>;
    /// Nodes still `up` whose heartbeat is older than their lease.
    async fn expired_nodes(&self, now: Millis) -> Result<Vec<NodeInfo>>;
    /// Marks an expired node lost; false if it heartbeated or re-registered meanwhile (or
    /// another reaper was first).
    async fn mark_node_lost(&self, node: &NodeInfo, now: Millis) -> Result<bool>;
    /// The runs a lost node held under `token` that still need settling.
    async fn node_runs(&self, node: &str, token: i64) -> Result<Vec<Run>>;
    /// Settles one run of a lost node, if it still carries `token`; false if not.
    async fn reap_run(&self, run: &Run, token: i64, how: &Reap) -> Result<bool>;
    /// Fails the running jobs of a lost node; returns how many.
    async fn reap_jobs(&self, node: &str, token: i64, reason: &str) -> Result<u64>;
    /// Claims pending runs, in queue order, for a node whose lease is healthy: each row is
    /// locked (`FOR UPDATE SKIP LOCKED` on PostgreSQL) and offered to `pick`, which decides.
    async fn claim_runs(
        &self,
        lease: &Lease,
        page_size: i64,
        pages: i64,
        pick: &mut (dyn for<'r> FnMut(&'r Run) -> Pick + Send),
    ) -> Result<Vec<Run>>;
    /// Whether any pending run could be claimed now: a read, so an idle daemon can look at an
    /// empty queue without a write transaction.
    async fn runs_waiting(&self) -> Result<bool>;
    /// Claims up to `limit` queued jobs, oldest first, each into `jobs_dir/<id>`.
    async fn claim_jobs(&self, lease: &Lease, limit: i64, jobs_dir: &std::path::Path) -> Result<Vec<Job>>;
}

fn node_from_row(row: &AnyRow) -> Result<NodeInfo> {
    let labels: String = row.try_get("labels")?;
    Ok(NodeInfo {
        id: row.try_get("id")?,
        hostname: row.try_get("hostname")?,
        pid: row.try_get("pid")?,
        labels: from_json(&labels, "node labels")?,
        token: row.try_get("token")?,
        lease_ms: row.try_get("lease_ms")?,
        started_at: row.try_get("started_at")?,
        heartbeat_at: row.try_get("heartbeat_at")?,
        state: row.try_get("state")?,
        runs: row.try_get::<Option<i64>, _>("runs")?.unwrap_or(0),
    })
}

/// Pending runs in claim order; the `$1` is "now", for retries still backing off.
const PENDING_PAGE: &str = concat!(
    select_runs_sql!(),
    "WHERE state = 'pending' AND (not_before IS NULL OR not_before <= $1) ",
    "ORDER BY priority DESC, seq LIMIT $2 OFFSET $3"
);
const PENDING_PAGE_LOCKED: &str = concat!(
    select_runs_sql!(),
    "WHERE state = 'pending' AND (not_before IS NULL OR not_before <= $1) ",
    "ORDER BY priority DESC, seq LIMIT $2 OFFSET $3 FOR UPDATE SKIP LOCKED"
);

impl SqlStore {
    /// Renews the heartbeat inside `tx` only while the lease is still good; the claim's first
    /// write, so SQLite takes its write lock before reading the queue.
    async fn renew_for_claim(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        lease: &Lease,
    ) -> Result<()> {
        let now = now_millis();
        let renewed = sqlx::query(
            "UPDATE nodes SET heartbeat_at = $1 WHERE id = $2 AND token = $3 AND state = 'up' AND heartbeat_at >= $4",
        )
        .bind(now)
        .bind(&lease.node)
        .bind(lease.token)
        .bind(now - lease.lease_ms())
        .execute(&mut **tx)
        .await?;
        if renewed.rows_affected() == 0 {
            return Err(StoreError::LeaseLost { node: lease.node.clone() });
        }
        Ok(())
    }
}

#[async_trait]
impl NodeStore for SqlStore {
    async fn register_node(&self, registration: &NodeRegistration) -> Result<Lease> {
        let now = now_millis();
        let lease_ms = registration.lease.as_millis().min(i64::MAX as u128) as i64;
        let mut tx = self.pool().begin().await?;
        let token: i64 = sqlx::query("UPDATE fencing SET last = last + 1 WHERE id = 1 RETURNING last")
            .fetch_one(&mut *tx)
            .await?
            .try_get("last")?;
        let previous = sqlx::query("SELECT token, state FROM nodes WHERE id = $1")
            .bind(&registration.id)
            .fetch_optional(&mut *tx)
            .await?;
        let previous = match previous {
            Some(row) if row.try_get::<String, _>("state")? == "up" => Some(row.try_get::<i64, _>("token")?),
            _ => None,
        };
        sqlx::query(
            "INSERT INTO nodes (id, hostname, pid, labels, token, lease_ms, started_at, heartbeat_at, state) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7, 'up') ON CONFLICT (id) DO UPDATE SET \
             hostname = excluded.hostname, pid = excluded.pid, labels = excluded.labels, token = excluded.token, \
             lease_ms = excluded.lease_ms, started_at = excluded.started_at, \
             heartbeat_at = excluded.heartbeat_at, state = 'up'",
        )
        .bind(&registration.id)
        .bind(&registration.hostname)
        .bind(i64::from(std::process::id()))
        .bind(json(&registration.labels))
        .bind(token)
        .bind(lease_ms)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        if let Some(old) = previous {
            // Compare-and-set against a reaper settling the same runs: each goes one way.
            for table in [ADOPT_RUNS, ADOPT_JOBS] {
                sqlx::query(table).bind(token).bind(&registration.id).bind(old).execute(&mut *tx).await?;
            }
        }
        // Work claimed before nodes existed (a store from an older lachesis) belongs to the
        // first daemon that registers: the one restarted in place of the old one.
        for table in [ADOPT_UNOWNED_RUNS, ADOPT_UNOWNED_JOBS] {
            sqlx::query(table).bind(&registration.id).bind(token).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(Lease {
            node: registration.id.clone(),
            token,
            labels: registration.labels.clone(),
            lease: registration.lease,
            previous,
        })
    }

    async fn heartbeat(&self, lease: &Lease) -> Result<()> {
        let renewed =
            sqlx::query("UPDATE nodes SET heartbeat_at = $1 WHERE id = $2 AND token = $3 AND state = 'up'")
                .bind(now_millis())
                .bind(&lease.node)
                .bind(lease.token)
                .execute(self.pool())
                .await?;
        if renewed.rows_affected() == 0 {
            return Err(StoreError::LeaseLost { node: lease.node.clone() });
        }
        Ok(())
    }

    async fn nodes(&self) -> Result<Vec<NodeInfo>> {
        let rows = sqlx::query(
            "SELECT id, hostname, pid, labels, token, lease_ms, started_at, heartbeat_at, state, \
             (SELECT COUNT(*) FROM runs WHERE runs.node = nodes.id AND runs.fence = nodes.token \
              AND runs.state IN ('starting', 'running', 'stopping', 'retrying')) AS runs \
             FROM nodes ORDER BY id",
        )
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(node_from_row).collect()
    }

    async fn forget_node(&self, id: &str) -> Result<bool> {
        let gone = sqlx::query("DELETE FROM nodes WHERE id = $1 AND state = 'lost'")
            .bind(id.to_string())
            .execute(self.pool())
            .await?;
        Ok(gone.rows_affected() == 1)
    }

    async fn expired_nodes(&self, now: Millis) -> Result<Vec<NodeInfo>> {
        let rows = sqlx::query(
            "SELECT id, hostname, pid, labels, token, lease_ms, started_at, heartbeat_at, state, 0 AS runs \
             FROM nodes WHERE state = 'up' AND heartbeat_at < $1 - lease_ms ORDER BY id",
        )
        .bind(now)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(node_from_row).collect()
    }

    async fn mark_node_lost(&self, node: &NodeInfo, now: Millis) -> Result<bool> {
        let marked = sqlx::query(
            "UPDATE nodes SET state = 'lost' WHERE id = $1 AND token = $2 AND state = 'up' \
             AND heartbeat_at < $3 - lease_ms",
        )
        .bind(&node.id)
        .bind(node.token)
        .bind(now)
        .execute(self.pool())
        .await?;
        Ok(marked.rows_affected() == 1)
    }

    async fn node_runs(&self, node: &str, token: i64) -> Result<Vec<Run>> {
        let rows = sqlx::query(concat!(
            select_runs_sql!(),
            "WHERE node = $1 AND fence = $2 AND (state IN ('starting', 'running', 'stopping', 'retrying') ",
            "OR EXISTS (SELECT 1 FROM stages WHERE stages.run_id = runs.id ",
            "AND stages.state IN ('spawning', 'starting', 'up'))) ORDER BY seq"
        ))
        .bind(node.to_string())
        .bind(token)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(run_from_row).collect()
    }

    async fn reap_run(&self, run: &Run, token: i64, how: &Reap) -> Result<bool> {
        let fenced = self.with_fence(token);
        let result = match how {
            Reap::Fail { reason } => {
                let event = match run.state {
                    RunState::Starting | RunState::Running | RunState::Retrying | RunState::Stopping => {
                        crate::transitions::RunEvent::NodeLost
                    }
                    _ => return fenced.release_run(run).await,
                };
                Store::transition(&fenced, run, event, Some(reason), None).await.map(|_| ())
            }
            Reap::Requeue { reason, not_before } => fenced
                .requeue(run, crate::transitions::RunEvent::Requeue, reason, *not_before)
                .await
                .map(|_| ()),
            Reap::Release => return fenced.release_run(run).await,
        };
        match result {
            Ok(()) => Ok(true),
            Err(StoreError::Conflict { .. } | StoreError::Fenced { .. }) => Ok(false),
            Err(err) => Err(err),
        }
    }

    async fn reap_jobs(&self, node: &str, token: i64, reason: &str) -> Result<u64> {
        let now = now_millis();
        let mut tx = self.pool().begin().await?;
        let ids: Vec<String> =
            sqlx::query("SELECT id FROM jobs WHERE node = $1 AND fence = $2 AND state = 'running'")
                .bind(node.to_string())
                .bind(token)
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|row| row.try_get("id"))
                .collect::<std::result::Result<_, _>>()?;
        for id in &ids {
            sqlx::query(
                "UPDATE jobs SET state = 'failed', version = version + 1, ended_at = $1, reason = $2, fence = NULL \
                 WHERE id = $3 AND fence = $4",
            )
            .bind(now)
            .bind(reason)
            .bind(id)
            .bind(token)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "UPDATE job_tasks SET state = 'lost', ended_at = $1 WHERE job_id = $2 \
                 AND state IN ('spawning', 'starting', 'up')",
            )
            .bind(now)
            .bind(id)
            .execute(&mut *tx)
            .await?;
            let job_id = uuid::Uuid::parse_str(id).map_err(corrupt)?;
            insert_event(
                &mut *tx,
                job_id,
                EventKind::Note,
                None,
                None,
                &format!("running -> failed: {reason}"),
            )
            .await?;
        }
        tx.commit().await?;
        Ok(ids.len() as u64)
    }

    async fn claim_runs(
        &self,
        lease: &Lease,
        page_size: i64,
        pages: i64,
        pick: &mut (dyn for<'r> FnMut(&'r Run) -> Pick + Send),
    ) -> Result<Vec<Run>> {
        let page_sql = match self.backend_kind() {
            Backend::Postgres => PENDING_PAGE_LOCKED,
            Backend::Sqlite { .. } => PENDING_PAGE,
        };
        let mut tx = self.pool().begin().await?;
        self.renew_for_claim(&mut tx, lease).await?;
        let now = now_millis();
        let mut claimed = Vec::new();
        let mut seen = 0;
        'pages: for _ in 0..pages {
            // Runs claimed in this transaction have left the pending set: skip only the rest.
            let offset = seen - claimed.len() as i64;
            let rows =
                sqlx::query(page_sql).bind(now).bind(page_size).bind(offset).fetch_all(&mut *tx).await?;
            let last_page = (rows.len() as i64) < page_size;
            for row in &rows {
                seen += 1;
                let run = run_from_row(row)?;
                let (params, run_dir) = match pick(&run) {
                    Pick::Take { params, run_dir } => (params, run_dir),
                    Pick::Skip => continue,
                    Pick::Stop => break 'pages,
                };
                claimed.push(self.claim_one(&mut tx, run, lease, params, run_dir, now).await?);
            }
            if last_page {
                break;
            }
        }
        tx.commit().await?;
        Ok(claimed)
    }

    async fn runs_waiting(&self) -> Result<bool> {
        let waiting = sqlx::query(
            "SELECT 1 AS one FROM runs WHERE state = 'pending' AND (not_before IS NULL OR not_before <= $1) LIMIT 1",
        )
        .bind(now_millis())
        .fetch_optional(self.pool())
        .await?;
        Ok(waiting.is_some())
    }

    async fn claim_jobs(&self, lease: &Lease, limit: i64, jobs_dir: &std::path::Path) -> Result<Vec<Job>> {
        let lock = match self.backend_kind() {
            Backend::Postgres => CLAIM_JOBS_LOCKED,
            Backend::Sqlite { .. } => CLAIM_JOBS,
        };
        let waiting = sqlx::query("SELECT 1 AS one FROM jobs WHERE state = 'queued' LIMIT 1")
            .fetch_optional(self.pool())
            .await?;
        if waiting.is_none() {
            return Ok(Vec::new());
        }
        let mut tx = self.pool().begin().await?;
        self.renew_for_claim(&mut tx, lease).await?;
        let now = now_millis();
        let rows = sqlx::query(lock).bind(limit).fetch_all(&mut *tx).await?;
        let mut claimed = Vec::new();
        for row in &rows {
            let job = super::jobs::job_from_row(row)?;
            // The claiming node keeps the job's files under its own home.
            let job_dir = jobs_dir.join(job.id.to_string());
            sqlx::query(
                "UPDATE jobs SET state = 'running', version = version + 1, started_at = $1, node = $2, fence = $3, \
                 job_dir = $4 WHERE id = $5 AND state = 'queued'",
            )
            .bind(now)
            .bind(&lease.node)
            .bind(lease.token)
            .bind(job_dir.to_string_lossy().into_owned())
            .bind(job.id.to_string())
            .execute(&mut *tx)
            .await?;
            let message = format!("queued -> running (node {})", lease.node);
            insert_event(&mut *tx, job.id, EventKind::Note, None, None, &message).await?;
            claimed.push(Job {
                state: JobState::Running,
                version: job.version + 1,
                started_at: Some(now),
                node: Some(lease.node.clone()),
                fence: Some(lease.token),
                job_dir,
                ..job
            });
        }
        tx.commit().await?;
        Ok(claimed)
    }
}

const ADOPT_RUNS: &str = "UPDATE runs SET fence = $1 WHERE node = $2 AND fence = $3";
const ADOPT_JOBS: &str = "UPDATE jobs SET fence = $1 WHERE node = $2 AND fence = $3";
const ADOPT_UNOWNED_RUNS: &str = "UPDATE runs SET node = $1, fence = $2 WHERE node IS NULL AND fence IS NULL \
     AND (state IN ('starting', 'running', 'stopping', 'retrying') OR (state IN ('stopped', 'completed', 'failed') \
     AND EXISTS (SELECT 1 FROM stages WHERE stages.run_id = runs.id AND stages.state IN ('spawning', 'starting', 'up'))))";
const ADOPT_UNOWNED_JOBS: &str =
    "UPDATE jobs SET node = $1, fence = $2 WHERE node IS NULL AND fence IS NULL AND state = 'running'";
const CLAIM_JOBS: &str = concat!(select_jobs_sql!(), "WHERE state = 'queued' ORDER BY seq LIMIT $1");
const CLAIM_JOBS_LOCKED: &str =
    concat!(select_jobs_sql!(), "WHERE state = 'queued' ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED");

impl SqlStore {
    /// Moves one locked pending run to `starting` under `lease`, in `tx`.
    async fn claim_one(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        run: Run,
        lease: &Lease,
        params: RunParams,
        run_dir: PathBuf,
        now: Millis,
    ) -> Result<Run> {
        sqlx::query(
            "UPDATE runs SET state = 'starting', version = version + 1, updated_at = $1, started_at = $1, \
             params = $2, node = $3, fence = $4, run_dir = $5, not_before = NULL WHERE id = $6 AND state = 'pending'",
        )
        .bind(now)
        .bind(json(&params))
        .bind(&lease.node)
        .bind(lease.token)
        .bind(run_dir.to_string_lossy().into_owned())
        .bind(run.id.to_string())
        .execute(&mut **tx)
        .await?;
        if run_dir != run.run_dir {
            // The claiming node keeps the run's files under its own home.
            for (idx, stage) in run.spec.stages.iter().enumerate() {
                sqlx::query("UPDATE stages SET log_path = $1 WHERE run_id = $2 AND idx = $3")
                    .bind(run_dir.join(stage.log_file()).to_string_lossy().into_owned())
                    .bind(run.id.to_string())
                    .bind(idx as i64)
                    .execute(&mut **tx)
                    .await?;
            }
        }
        let message = format!("claim by node {} (attempt {})", lease.node, run.attempt);
        let states = Some((RunState::Pending, RunState::Starting));
        insert_event(&mut **tx, run.id, EventKind::State, states, None, &message).await?;
        Ok(Run {
            state: RunState::Starting,
            version: run.version + 1,
            updated_at: now,
            started_at: Some(now),
            params,
            node: Some(lease.node.clone()),
            fence: Some(lease.token),
            run_dir,
            not_before: None,
            ..run
        })
    }
}
