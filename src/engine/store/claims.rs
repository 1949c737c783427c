//! Claims: a node takes pending runs and queued tests off the queue in one transaction each,
//! under a lease it renews in the same transaction, stamping each with its fencing token.

use std::path::PathBuf;

use async_trait::async_trait;
use sqlx::Row;

use super::events::insert_event;
use super::nodes::Lease;
use super::rows::{from_json, json, run_from_row};
use super::sql::SqlStore;
use super::{Result, Store, StoreError};
use crate::model::{EventKind, InferenceTest, Millis, Run, RunParams, RunState, TestState, now_millis};

/// What a claim took, and how many runs it picked that another writer had (another node's
/// claim, or a change of the run) between the read and the lock: those wait for a next look.
#[derive(Debug, Default)]
pub struct Claimed {
    pub runs: Vec<Run>,
    pub lost: usize,
}

/// What the claimer decided about one pending run.
pub enum Pick {
    Take {
        params: Box<RunParams>,
        run_dir: PathBuf,
    },
    Skip,
    /// No more room: end the claim here.
    Stop,
}

#[async_trait]
pub trait ClaimStore: Send + Sync {
    /// Claims pending runs, in queue order, for a node whose lease is healthy: each row is
    /// offered to `pick`, which decides, and only a row it takes is locked (PostgreSQL).
    async fn claim_runs(
        &self,
        lease: &Lease,
        page_size: i64,
        pages: i64,
        pick: &mut (dyn for<'r> FnMut(&'r Run) -> Pick + Send),
    ) -> Result<Claimed>;
    /// Whether any pending run could be claimed now: a read, so an idle daemon can look at an
    /// empty queue without a write transaction.
    async fn runs_waiting(&self) -> Result<bool>;
    /// The earliest backoff end after `after` among the pending runs a claim under `lease`
    /// could take once it is over (not held, no dependency open, its node labels this node's),
    /// so a daemon wakes then, whoever queued the run again; None when none backs off. A read of
    /// the partial index `runs_backing_off`, a page at most: past a page of runs pinned
    /// elsewhere it answers the page's last end, to read on from there then.
    async fn next_backoff_end(&self, after: Millis, lease: &Lease) -> Result<Option<Millis>>;
    /// Claims up to `limit` queued tests, oldest first, each into `tests_dir/<id>`.
    async fn claim_tests(
        &self,
        lease: &Lease,
        limit: i64,
        tests_dir: &std::path::Path,
    ) -> Result<Vec<InferenceTest>>;
}

/// Pending runs in claim order; the `$1` is "now", for retries still backing off. A held run,
/// or one waiting for a dependency, is never offered (`held_at IS NULL AND deps_open = 0`: the
/// partial index `runs_claimable` holds only the others, so waiting runs cost the claim nothing).
const PENDING_PAGE: &str = concat!(
    select_runs_sql!(),
    "WHERE state = 'pending' AND held_at IS NULL AND deps_open = 0 AND (not_before IS NULL OR not_before <= $1) ",
    "ORDER BY priority DESC, seq LIMIT $2 OFFSET $3"
);
/// The earliest backoff end after `$1` of a run the claim reads once it is over: its terms are
/// those of the partial index `runs_backing_off` (migration 0029), so both stores read that
/// index in order, a page at most.
const NEXT_BACKOFF_END: &str = "SELECT not_before, spec FROM runs WHERE state = 'pending' AND held_at IS NULL \
     AND deps_open = 0 AND not_before IS NOT NULL AND not_before > $1 ORDER BY not_before LIMIT $2";
/// How many backing-off runs `next_backoff_end` reads at most for one that fits the node.
const BACKOFF_PAGE: i64 = 32;

/// A run's spec as far as `next_backoff_end` needs it: which nodes may take it.
#[derive(serde::Deserialize)]
struct Pinned {
    #[serde(default)]
    node_labels: std::collections::BTreeMap<String, String>,
}

/// The lock on one picked run, as read (PostgreSQL). Locking the whole page instead would lock
/// the runs this node passes over (pinned to another node's labels, say) while another node that
/// could take them skips them as locked, and then waits for its scan: a lost wake-up.
const LOCK_PICKED: &str =
    "SELECT 1 AS one FROM runs WHERE id = $1 AND version = $2 AND state = 'pending' FOR UPDATE SKIP LOCKED";

/// Whether a claim may take one more member of a sweep.
enum SweepRoom {
    Room,
    /// Not live, or `max_live` members in flight.
    Full,
    /// Its row is locked by another node's claim.
    Held,
}

/// A sweep's state and `max_live`, its row locked for the claim's transaction (PostgreSQL)
/// unless another claim holds it.
const LOCK_SWEEP: &str = "SELECT state, max_live FROM sweeps WHERE id = $1 FOR UPDATE SKIP LOCKED";
const READ_SWEEP: &str = "SELECT state, max_live FROM sweeps WHERE id = $1";
/// A sweep's members in flight, this transaction's claims included.
const SWEEP_IN_FLIGHT: &str = concat!(
    "SELECT COUNT(*) AS n FROM sweep_members m JOIN runs r ON r.id = m.run_id WHERE m.sweep_id = $1 AND r.state IN (",
    in_flight_states!(),
    ")"
);

impl SqlStore {
    /// Whether sweep `sweep` may start one more member, counted inside the claim's `tx`: on
    /// PostgreSQL under a lock on the sweep's row, so two nodes claiming at once take turns and
    /// never pass its `max_live`; SQLite's one writer serializes claims already. The picker's
    /// count, read before, spares most of these.
    async fn sweep_room(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        sweep: uuid::Uuid,
        locks: bool,
    ) -> Result<SweepRoom> {
        let read = if locks { LOCK_SWEEP } else { READ_SWEEP };
        let Some(row) = sqlx::query(read).bind(sweep.to_string()).fetch_optional(&mut **tx).await? else {
            let exists = locks
                && sqlx::query(READ_SWEEP).bind(sweep.to_string()).fetch_optional(&mut **tx).await?.is_some();
            // Locked by another claim; or no such sweep any more, which holds nothing back.
            return Ok(if exists { SweepRoom::Held } else { SweepRoom::Room });
        };
        let state: String = row.try_get("state")?;
        if state != crate::model::sweep::SweepState::Live.as_str() {
            return Ok(SweepRoom::Full);
        }
        let Some(max_live) = row.try_get::<Option<i64>, _>("max_live")? else { return Ok(SweepRoom::Room) };
        let in_flight: i64 =
            sqlx::query(SWEEP_IN_FLIGHT).bind(sweep.to_string()).fetch_one(&mut **tx).await?.try_get("n")?;
        Ok(if in_flight < max_live { SweepRoom::Room } else { SweepRoom::Full })
    }

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
impl ClaimStore for SqlStore {
    async fn claim_runs(
        &self,
        lease: &Lease,
        page_size: i64,
        pages: i64,
        pick: &mut (dyn for<'r> FnMut(&'r Run) -> Pick + Send),
    ) -> Result<Claimed> {
        let locks = self.backend().locks_rows();
        let mut tx = self.pool().begin().await?;
        self.renew_for_claim(&mut tx, lease).await?;
        let now = now_millis();
        let mut claimed = Vec::new();
        let mut lost = 0;
        let mut seen = 0;
        'pages: for _ in 0..pages {
            // Runs claimed in this transaction (or by another node under it) have left the
            // pending set: skip only the rest.
            let offset = seen - (claimed.len() + lost) as i64;
            let rows =
                sqlx::query(PENDING_PAGE).bind(now).bind(page_size).bind(offset).fetch_all(&mut *tx).await?;
            let last_page = (rows.len() as i64) < page_size;
            for row in &rows {
                seen += 1;
                let run = run_from_row(row)?;
                let (params, run_dir) = match pick(&run) {
                    Pick::Take { params, run_dir } => (*params, run_dir),
                    Pick::Skip => continue,
                    Pick::Stop => break 'pages,
                };
                if let Some(member) = run.params.sweep {
                    match self.sweep_room(&mut tx, member.sweep, locks).await? {
                        SweepRoom::Room => {}
                        SweepRoom::Full => continue,
                        // Another node's claim holds it: looked at again shortly.
                        SweepRoom::Held => {
                            lost += 1;
                            continue;
                        }
                    }
                }
                if locks {
                    let locked = sqlx::query(LOCK_PICKED)
                        .bind(run.id.to_string())
                        .bind(run.version)
                        .fetch_optional(&mut *tx)
                        .await?;
                    if locked.is_none() {
                        lost += 1;
                        continue;
                    }
                }
                claimed.push(self.claim_one(&mut tx, run, lease, params, run_dir, now).await?);
            }
            if last_page {
                break;
            }
        }
        tx.commit().await?;
        Ok(Claimed { runs: claimed, lost })
    }

    async fn runs_waiting(&self) -> Result<bool> {
        let waiting = sqlx::query(
            "SELECT 1 AS one FROM runs WHERE state = 'pending' AND held_at IS NULL AND deps_open = 0 \
             AND (not_before IS NULL OR not_before <= $1) LIMIT 1",
        )
        .bind(now_millis())
        .fetch_optional(self.pool())
        .await?;
        Ok(waiting.is_some())
    }

    async fn next_backoff_end(&self, after: Millis, lease: &Lease) -> Result<Option<Millis>> {
        use futures_util::TryStreamExt;
        // Row by row: the first run this node may take ends the read (the usual case, at once).
        let mut rows = sqlx::query(NEXT_BACKOFF_END).bind(after).bind(BACKOFF_PAGE).fetch(self.pool());
        let (mut read, mut last) = (0, None);
        while let Some(row) = rows.try_next().await? {
            let end: Millis = row.try_get("not_before")?;
            let pinned: Pinned = from_json(&row.try_get::<String, _>("spec")?, "run spec")?;
            if lease.fits(&pinned.node_labels) {
                return Ok(Some(end));
            }
            (read, last) = (read + 1, Some(end));
        }
        // A whole page pinned elsewhere: wake at its last end and read on from there.
        Ok(last.filter(|_| read == BACKOFF_PAGE))
    }

    async fn claim_tests(
        &self,
        lease: &Lease,
        limit: i64,
        tests_dir: &std::path::Path,
    ) -> Result<Vec<InferenceTest>> {
        let lock = match self.backend().locks_rows() {
            true => CLAIM_TESTS_LOCKED,
            false => CLAIM_TESTS,
        };
        let waiting = sqlx::query("SELECT 1 AS one FROM tests WHERE state = 'queued' LIMIT 1")
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
            let test = super::inference_tests::test_from_row(row)?;
            // The claiming node keeps the test's files under its own home.
            let test_dir = tests_dir.join(test.id.to_string());
            sqlx::query(
                "UPDATE tests SET state = 'running', version = version + 1, started_at = $1, node = $2, fence = $3, \
                 test_dir = $4 WHERE id = $5 AND state = 'queued'",
            )
            .bind(now)
            .bind(&lease.node)
            .bind(lease.token)
            .bind(test_dir.to_string_lossy().into_owned())
            .bind(test.id.to_string())
            .execute(&mut *tx)
            .await?;
            let message = format!("queued -> running (node {})", lease.node);
            insert_event(&mut *tx, test.id, EventKind::Note, None, None, &message).await?;
            claimed.push(InferenceTest {
                state: TestState::Running,
                version: test.version + 1,
                started_at: Some(now),
                node: Some(lease.node.clone()),
                fence: Some(lease.token),
                test_dir,
                ..test
            });
        }
        tx.commit().await?;
        Ok(claimed)
    }
}

const CLAIM_TESTS: &str = concat!(select_tests_sql!(), "WHERE state = 'queued' ORDER BY seq LIMIT $1");
const CLAIM_TESTS_LOCKED: &str =
    concat!(select_tests_sql!(), "WHERE state = 'queued' ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED");

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The claim walks the partial index of pending runs neither held nor waiting for a
    /// dependency, in its order: those and finished runs cost it nothing, however many there are.
    #[tokio::test]
    async fn the_claim_reads_the_index_of_runs_not_held_nor_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let location = crate::settings::StoreLocation::Sqlite(dir.path().join("lachesis.db"));
        let store = crate::engine::store::open(&location).await.unwrap();
        let details = crate::engine::store::tests::sqlite_plan(&store, PENDING_PAGE).await;
        assert!(details.iter().any(|d| d.contains("USING INDEX runs_claimable")), "{details:?}");
        assert!(!details.iter().any(|d| d.contains("TEMP B-TREE")), "sorted apart: {details:?}");
    }
}
