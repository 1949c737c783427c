//! Nodes: the daemons sharing one store. Each holds a lease (a heartbeat it renews) and a
//! fencing token handed out when it registers; what it claims carries that token, and its later
//! writes only land while the claim still carries it. When a node's heartbeat is older than its
//! lease, any other node may reap it: mark it lost, then fail or requeue its runs — each with a
//! compare-and-set on the lost node's token, so a run is either reaped or kept, never both.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::events::insert_event;
use super::rows::{corrupt, from_json, json, run_from_row};
use super::sql::SqlStore;
use super::{Result, Store, StoreError};
use crate::model::{EventKind, Millis, Run, now_millis};

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
    pub(super) fn lease_ms(&self) -> i64 {
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

/// How a reaper settles one run of a lost node.
#[derive(Clone, Debug)]
pub enum Reap {
    Fail {
        reason: String,
    },
    Requeue {
        reason: String,
        not_before: Millis,
        /// For a run with a `checkpoints:` source: the next attempt's params (with its resume
        /// point, or without one) and the event saying what it starts from.
        resume: Option<Box<(crate::model::RunParams, String)>>,
    },
    /// A preemption's victim, stopping: queued again as its preemption promised (not charged),
    /// `lost` ms of work added to what its preemptions lost; `params` say what it resumes from,
    /// as `note` does.
    Preempted {
        reason: String,
        params: Box<crate::model::RunParams>,
        note: String,
        lost: Millis,
    },
    /// An ended run whose stages were still being stopped: they are lost with the node.
    Release,
}

#[async_trait]
pub trait NodeStore: Send + Sync {
    /// Takes a new lease (and token) for the node, handing its runs and tests over from its
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
    /// Fails the running tests of a lost node; returns how many.
    async fn reap_tests(&self, node: &str, token: i64, reason: &str) -> Result<u64>;
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
            for table in [ADOPT_RUNS, ADOPT_TESTS] {
                sqlx::query(table).bind(token).bind(&registration.id).bind(old).execute(&mut *tx).await?;
            }
        }
        // Work claimed before nodes existed (a store from an older lachesis) belongs to the
        // first daemon that registers: the one restarted in place of the old one.
        for table in [ADOPT_UNOWNED_RUNS, ADOPT_UNOWNED_TESTS] {
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
        let rows = sqlx::query(concat!(
            "SELECT id, hostname, pid, labels, token, lease_ms, started_at, heartbeat_at, state, \
             (SELECT COUNT(*) FROM runs WHERE runs.node = nodes.id AND runs.fence = nodes.token \
              AND runs.state IN (",
            in_flight_states!(),
            ")) AS runs FROM nodes ORDER BY id"
        ))
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
            "WHERE node = $1 AND fence = $2 AND ",
            supervised_runs_sql!(),
            " ORDER BY seq"
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
                let trigger = match run.state.is_in_flight() {
                    true => crate::model::RunTrigger::NodeLost,
                    false => return fenced.release_run(run).await,
                };
                Store::transition(&fenced, run, trigger, Some(reason), None).await.map(|_| ())
            }
            Reap::Requeue { reason, not_before, resume } => {
                let trigger = crate::model::RunTrigger::Requeue;
                match resume.as_deref() {
                    Some((params, note)) => {
                        fenced.requeue_resuming(run, trigger, reason, *not_before, params, note).await
                    }
                    None => fenced.requeue(run, trigger, reason, *not_before).await,
                }
                .map(|_| ())
            }
            Reap::Preempted { reason, params, note, lost } => {
                use super::PreemptionStore;
                fenced.requeue_preempted(run, reason, params, note, *lost).await.map(|_| ())
            }
            Reap::Release => return fenced.release_run(run).await,
        };
        match result {
            Ok(()) => Ok(true),
            Err(StoreError::Conflict { .. } | StoreError::Fenced { .. }) => Ok(false),
            Err(err) => Err(err),
        }
    }

    async fn reap_tests(&self, node: &str, token: i64, reason: &str) -> Result<u64> {
        let now = now_millis();
        let mut tx = self.pool().begin().await?;
        let ids: Vec<String> =
            sqlx::query("SELECT id FROM tests WHERE node = $1 AND fence = $2 AND state = 'running'")
                .bind(node.to_string())
                .bind(token)
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|row| row.try_get("id"))
                .collect::<std::result::Result<_, _>>()?;
        for id in &ids {
            sqlx::query(
                "UPDATE tests SET state = 'failed', version = version + 1, ended_at = $1, reason = $2, fence = NULL \
                 WHERE id = $3 AND fence = $4",
            )
            .bind(now)
            .bind(reason)
            .bind(id)
            .bind(token)
            .execute(&mut *tx)
            .await?;
            sqlx::query(concat!(
                "UPDATE test_tasks SET state = 'lost', ended_at = $1 WHERE test_id = $2 AND state IN (",
                live_process_states!(),
                ")"
            ))
            .bind(now)
            .bind(id)
            .execute(&mut *tx)
            .await?;
            let test_id = uuid::Uuid::parse_str(id).map_err(corrupt)?;
            insert_event(
                &mut *tx,
                test_id,
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
}

const ADOPT_RUNS: &str =
    concat!("UPDATE runs SET fence = $1 WHERE node = $2 AND fence = $3 AND ", supervised_runs_sql!());
const ADOPT_TESTS: &str = "UPDATE tests SET fence = $1 WHERE node = $2 AND fence = $3 AND state = 'running'";
const ADOPT_UNOWNED_RUNS: &str = concat!(
    "UPDATE runs SET node = $1, fence = $2 WHERE node IS NULL AND fence IS NULL AND ",
    supervised_runs_sql!()
);
const ADOPT_UNOWNED_TESTS: &str =
    "UPDATE tests SET node = $1, fence = $2 WHERE node IS NULL AND fence IS NULL AND state = 'running'";
