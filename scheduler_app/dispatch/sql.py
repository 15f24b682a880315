"""The statements the ORM cannot say in one go. One constant each, with a header.

Table names are Django's stable defaults. `{lock}` is "FOR UPDATE SKIP LOCKED" on
PostgreSQL and empty on SQLite, where the database serialises writers by itself.
`{any_of}` ... `{end_any}` wrap a locking, limited sub-select of ids so that it runs once
(dispatch.common.one_pass).
Parameters are named (%(name)s) or, for VALUES and IN lists, built by dispatch from one
placeholder row.

Held runs are told apart by their reason: a run waiting for its job to go idle
(overlap buffer_one) starts with "overlap_buffered", one waiting for its tenant's
dispatch quota with "quota_" (both are `pending`).
"""

from scheduler_app.models import PRIORITY_MAX, PRIORITY_MIN

# insert_runs
# Record runs for planned fires; a fire that already has a run (another beat, a manual
# trigger at the same instant) is left alone by the unique (job_id, scheduled_at)
# constraint jobrun_one_per_fire. Returns only the rows this statement created, which
# are the only ones this beat may publish. {rows} is a list of placeholder tuples.
# Runs recorded as queued carry dispatched_at (their first trip to the broker).
INSERT_RUNS = """
INSERT INTO scheduler_app_jobrun
       (job_id, tenant_id, scheduled_at, state, reason, job_version, priority, created_at,
        enqueued_at, dispatched_at, finished_at)
VALUES {rows}
    ON CONFLICT (job_id, scheduled_at) DO NOTHING
RETURNING id, job_id, state
"""
INSERT_RUNS_ROW = "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"

# insert_runs (PostgreSQL): the same, with one array per varying column (dispatch.RunRow)
# and the times computed from the turn's clock as dispatch.run_times does: a queued run
# is sent to the broker now, a skipped one is finished now. Eight parameters whatever the
# batch size: psycopg neither re-parses nor quotes thousands of values, and the text is
# short enough for its statement cache. About twice as fast as VALUES at 1,000 rows.
INSERT_RUNS_PG = """
INSERT INTO scheduler_app_jobrun
       (job_id, tenant_id, scheduled_at, state, reason, job_version, priority, created_at,
        enqueued_at, dispatched_at, finished_at)
SELECT run.*,
       %(now)s::timestamptz,
       CASE WHEN run.state = 'queued' THEN %(now)s::timestamptz END,
       CASE WHEN run.state = 'queued' THEN %(now)s::timestamptz END,
       CASE WHEN run.state = 'skipped' THEN %(now)s::timestamptz END
  FROM unnest(%(job_id)s::bigint[], %(tenant_id)s::bigint[], %(scheduled_at)s::timestamptz[],
              %(state)s::varchar[], %(reason)s::varchar[], %(job_version)s::integer[],
              %(priority)s::smallint[])
       AS run (job_id, tenant_id, scheduled_at, state, reason, job_version, priority)
    ON CONFLICT (job_id, scheduled_at) DO NOTHING
RETURNING id, job_id, state
"""

# The fair order of the due jobs (shared by FAIR_CLAIM and FAIR_ORDER): each tenant's due
# jobs ranked by (priority descending, next_run_at, id), then taken by rank / tenant
# weight, so a tenant of weight 3 gets three claims for every one of a tenant of weight 1
# while both have jobs due, and one tenant's 100,000 due jobs cannot push another tenant's
# ten behind them. Priority orders a tenant's own jobs and never buys a larger share.
# Ties (the same share) go to the higher priority, then the older fire.
#
# SQLite (_FAIR_RANKING): reads every due row and sorts them, with a window function.
_FAIR_RANKING = """
     SELECT ranked.id, ranked.priority, ranked.next_run_at,
            CAST(ranked.tenant_rank AS DOUBLE PRECISION) / tenant.weight AS share
       FROM (SELECT due.id, due.tenant_id, due.priority, due.next_run_at,
                    row_number() OVER (PARTITION BY due.tenant_id
                                       ORDER BY due.priority DESC, due.next_run_at, due.id) AS tenant_rank
               FROM scheduler_app_job AS due
              WHERE due.enabled
                AND due.next_run_at <= %(now)s
                    {held_back}) AS ranked
       JOIN scheduler_app_tenant AS tenant ON tenant.id = ranked.tenant_id
      ORDER BY share, ranked.priority DESC, ranked.next_run_at, ranked.id"""

# PostgreSQL (_FAIR_RANKING_PG): the same order, reading only about as many rows as it
# lists ({horizon}), never the whole due set: ranking a million due rows took 2.1-2.3 s
# and grew with the spike. Each tenant with a due job (`active`: one probe per priority
# level, stopping at the first due row) gets a quota of ceil(horizon * weight / the active
# tenants' weights) rows; its due jobs are read per priority level, 9 down to 0, as an
# index range of job_tenant_due_idx (tenant, priority, next_run_at <= now) in
# (next_run_at, id) order, at most the quota per level (a range per level: one index
# ordered by priority would interleave jobs due later). The quota's best rows are ranked
# by (priority desc, next_run_at, id) as above, and only rows up to the smallest share a
# cut tenant (one with at least its quota due) reached are kept: below that share every
# tenant's rows are all here, so what is kept is exactly the first rows of the full
# order, and at least horizon - (active tenants) of them when every tenant is cut. Fewer
# (a tenant with less due than its quota) only means the list runs dry sooner and the next
# claim ranks again. Cost: the probes (2 x 10 per tenant) and at most quota rows per
# level of each tenant (jobs spread over several levels read up to that many times the
# quota; at one level, the quota). The due test is the row comparison (priority,
# next_run_at) <= (level, now), which job_tenant_due_idx takes as its range after the
# tenant and job_due_idx (next_run_at, id) cannot take at all: with a plain
# `next_run_at <= now` the planner sometimes read each (tenant, level) from job_due_idx,
# walking the whole due range and filtering on tenant and priority for each of the 2 x 10
# lateral reads per tenant (2.2 s a ranking at 50,000 due in bench e2e, most of a spike's
# dispatch). The comparison starts at priority, not at the tenant: one that starts at the
# tenant read each tenant's whole range (PostgreSQL 15 positions such a scan at the tenant
# only), 0.7 s against 0.4 s at 300,000 due.
_FAIR_RANKING_PG = f"""
     WITH active AS (
          SELECT tenant.id, tenant.weight
            FROM scheduler_app_tenant AS tenant
           WHERE EXISTS (
                 SELECT 1
                   FROM generate_series({PRIORITY_MAX}, {PRIORITY_MIN}, -1) AS level (priority)
                  CROSS JOIN LATERAL (
                        SELECT 1
                          FROM scheduler_app_job AS due
                         WHERE due.tenant_id = tenant.id
                           AND due.priority = level.priority
                           AND due.enabled
                           AND due.next_run_at IS NOT NULL
                           AND (due.priority, due.next_run_at) <= (level.priority, %(now)s)
                               {{held_back}}
                         ORDER BY due.next_run_at  -- the index range, never a scan of the table
                         LIMIT 1) AS found)),
          quota AS (
          SELECT active.id AS tenant_id, active.weight,
                 CAST(ceil(CAST({{horizon}} AS DOUBLE PRECISION) * active.weight
                           / sum(active.weight) OVER ()) AS BIGINT) AS rows
            FROM active),
          head AS (
          SELECT quota.tenant_id, quota.weight, quota.rows, taken.id, taken.priority, taken.next_run_at,
                 row_number() OVER (PARTITION BY quota.tenant_id
                                    ORDER BY taken.priority DESC, taken.next_run_at, taken.id) AS tenant_rank
            FROM quota
           CROSS JOIN generate_series({PRIORITY_MAX}, {PRIORITY_MIN}, -1) AS level (priority)
           CROSS JOIN LATERAL (
                 SELECT due.id, due.priority, due.next_run_at
                   FROM scheduler_app_job AS due
                  WHERE due.tenant_id = quota.tenant_id
                    AND due.priority = level.priority
                    AND due.enabled
                    AND due.next_run_at IS NOT NULL
                    AND (due.priority, due.next_run_at) <= (level.priority, %(now)s)
                        {{held_back}}
                  ORDER BY due.next_run_at, due.id
                  LIMIT quota.rows) AS taken),
          ranked AS (
          SELECT head.id, head.priority, head.next_run_at,
                 CAST(head.tenant_rank AS DOUBLE PRECISION) / head.weight AS share,
                 CAST(head.rows AS DOUBLE PRECISION) / head.weight AS reach,
                 count(*) OVER (PARTITION BY head.tenant_id) >= head.rows AS cut
            FROM head
           WHERE head.tenant_rank <= head.rows)
   SELECT ranked.id, ranked.priority, ranked.next_run_at, ranked.share
     FROM ranked
    WHERE ranked.share <= (SELECT coalesce(min(cut.reach), 'Infinity') FROM ranked AS cut WHERE cut.cut)
    ORDER BY ranked.share, ranked.priority DESC, ranked.next_run_at, ranked.id"""

# claim_due_jobs
# Lock up to %(limit)s due jobs in the fair order. {held_back} leaves out the jobs of broker
# queues over the high-water mark (dispatch.hold_back_clause; empty when none is). The ranking is a CTE: window functions
# cannot be locked, and a locking clause without OF skips CTEs (and function scans), so
# "FOR NO KEY UPDATE SKIP LOCKED" locks the job rows only, never the tenants. The ranked ids
# are walked in order and each job fetched by primary key ({job}, below); a job another
# beat holds yields no row, so the LIMIT counts only rows this beat locked: two beats
# claiming at once each get a full batch of different jobs, and no row beyond the batch is
# locked. The due test is checked again on the latest version of a row that changed after
# the snapshot (a job paused, or advanced by another beat, is not claimed). {columns} lists
# dispatch.CLAIM_FIELDS; {ranking} is _FAIR_RANKING (SQLite) or _FAIR_RANKING_PG listing
# FAIR_CLAIM_SPARE batches (room for the rows other beats hold: with more beats claiming at
# once than that, a claim may come back short; it is then not a backlog and claims again).
FAIR_CLAIM_SPARE = 4
FAIR_CLAIM = """
WITH fair AS ({ranking}
)
SELECT {{columns}}
  FROM fair
  {{job}}
 WHERE job.enabled
   AND job.next_run_at <= %(now)s
 ORDER BY fair.share, fair.priority DESC, fair.next_run_at, fair.id
 LIMIT %(limit)s
   {{lock}}
"""
FAIR_CLAIM_SQLITE = FAIR_CLAIM.format(ranking=_FAIR_RANKING)
FAIR_CLAIM_PG = FAIR_CLAIM.format(ranking=_FAIR_RANKING_PG.replace("{horizon}", f"{FAIR_CLAIM_SPARE} * %(limit)s"))

# How FAIR_CLAIM and CLAIM_LISTED reach the job of each ranked or listed id. PostgreSQL: a
# LATERAL lookup by primary key alone, fenced by OFFSET 0, so the plan stays "walk the
# order, fetch and lock each job in turn" whatever the planner believes about the due set.
# Statistics gathered before a spike say almost nothing is due; with a plain join (or the
# due test inside the lookup, which lets it use job_due_idx) the planner then scanned the
# due range again for every ranked row (quadratic: a 100,000-job spike stalled a beat for
# a minute) or hashed the whole due set. The lock clause reaches into the subquery; a row
# that changed after the snapshot comes out of it as its latest version, locked, and the
# outer WHERE (the due test) drops it if it is no longer due. SQLite has no LATERAL, and
# no concurrent beat: a plain join.
CLAIM_JOB_PG = """CROSS JOIN LATERAL (
       SELECT *
         FROM scheduler_app_job
        WHERE scheduler_app_job.id = {id}
       OFFSET 0
       ) AS job"""
CLAIM_JOB = "JOIN scheduler_app_job AS job ON job.id = fair.id"

# FairOrder.refresh (PostgreSQL)
# The ids of the first %(horizon)s due jobs in the fair order, without locking anything:
# the next claims take their jobs from this list (CLAIM_LISTED) instead of ranking the
# whole due set again for every batch.
FAIR_ORDER = f"""
SELECT fair.id
  FROM ({_FAIR_RANKING_PG.replace("{horizon}", "%(horizon)s")}
       ) AS fair
 LIMIT %(horizon)s
"""

# FairOrder.claim (PostgreSQL)
# Lock up to %(limit)s of the listed jobs that are still due, in list order, skipping rows
# another beat holds (the lock applies to `job` only: function scans are never locked).
# Returns each row's position in the list, so the caller can drop what it has passed.
CLAIM_LISTED = f"""
SELECT listed.position, {{columns}}
  FROM unnest(%(ids)s::bigint[]) WITH ORDINALITY AS listed (id, position)
       {CLAIM_JOB_PG.format(id="listed.id")}
 WHERE job.enabled
   AND job.next_run_at <= %(now)s
       {{held_back}}
 ORDER BY listed.position
 LIMIT %(limit)s
   FOR NO KEY UPDATE SKIP LOCKED
"""

# tenant_budgets
# Lock the rows of the tenants in {ids} that have a dispatch quota, in id order, waiting
# for a beat that holds one: whoever holds a tenant's row is the only one spending its
# budget until commit, and two beats always take tenant locks in the same order. {lock} is
# "FOR NO KEY UPDATE" on PostgreSQL (it does not block inserts of runs referencing the
# tenant) and empty on SQLite.
LOCK_QUOTA_TENANTS = """
SELECT id
  FROM scheduler_app_tenant
 WHERE id IN ({ids})
   AND (max_fires_per_minute IS NOT NULL OR max_concurrent_runs IS NOT NULL)
 ORDER BY id
   {lock}
"""

# tenant_budgets
# What each tenant in {ids} has used of its quota, read after its row is locked (a new
# statement, so it sees every run committed by the beat that held the lock before):
# runs first dispatched after the first parameter, a minute ago (jobrun_tenant_dispatched_idx),
# runs queued or running (jobrun_tenant_active_idx) but for check-in runs (a monitored job
# runs elsewhere: its /start takes no worker), and whether runs already wait for the
# quota (they go before any new fire). A count is skipped when its limit is not set.
TENANT_USAGE = """
SELECT tenant.id, tenant.max_fires_per_minute, tenant.max_concurrent_runs,
       CASE WHEN tenant.max_fires_per_minute IS NULL THEN 0 ELSE (
            SELECT count(*)
              FROM scheduler_app_jobrun AS run
             WHERE run.tenant_id = tenant.id
               AND run.dispatched_at > %s) END,
       CASE WHEN tenant.max_concurrent_runs IS NULL THEN 0 ELSE (
            SELECT count(*)
              FROM scheduler_app_jobrun AS run
             WHERE run.tenant_id = tenant.id
               AND run.state IN ('queued', 'running')
               AND substr(run.reason, 1, 8) <> 'checkin:') END,
       EXISTS (
            SELECT 1
              FROM scheduler_app_jobrun AS run
             WHERE run.tenant_id = tenant.id
               AND run.state = 'pending'
               AND substr(run.reason, 1, 6) = 'quota_')
  FROM scheduler_app_tenant AS tenant
 WHERE tenant.id IN ({ids})
"""

# advance_jobs (PostgreSQL)
# Set next_run_at for a whole claimed batch in one statement, from two arrays (as above).
ADVANCE_JOBS_PG = """
UPDATE scheduler_app_job AS job
   SET next_run_at = advanced.next_run_at
  FROM unnest(%s::bigint[], %s::timestamptz[]) AS advanced (id, next_run_at)
 WHERE job.id = advanced.id
"""

# advance_jobs (SQLite): one statement per job through executemany; in-process and cheap.
ADVANCE_JOBS_ONE = "UPDATE scheduler_app_job SET next_run_at = %s WHERE id = %s"

# requeue_due_retries
# Move up to %(limit)s retrying runs whose backoff is over back to queued as a new
# attempt. The fencing token is `attempt`: the worker of the old attempt can no longer
# write to the row. Locked rows are skipped, so two beats never requeue the same run.
# dispatched_at stays: a retry is not a new fire for the tenant's quota.
REQUEUE_DUE_RETRIES = """
UPDATE scheduler_app_jobrun
   SET state = 'queued',
       attempt = attempt + 1,
       enqueued_at = %(now)s,
       next_attempt_at = NULL
 WHERE id {any_of}
       SELECT id
         FROM scheduler_app_jobrun
        WHERE state = 'retrying'
          AND next_attempt_at <= %(now)s
        ORDER BY next_attempt_at
        LIMIT %(limit)s
          {lock}
       {end_any}
RETURNING id, attempt, job_id, tenant_id
"""

# mark_lost_runs
# Running runs whose lease ran out (the worker died, froze or lost the database) become
# `retrying` at once when the job has attempts left, else `dead`. The CASE reads the job's
# max_attempts by primary key (a correlated subquery, not UPDATE ... FROM: SQLite refuses a
# RETURNING that names an alias). The lost attempt joins the run's history ({append}:
# models.append_attempt). Returns what it changed, for the audit trail.
LOST_ERROR = "'lost: lease expired (worker ' || worker || ')'"
MARK_LOST_RUNS = """
UPDATE scheduler_app_jobrun
   SET state = CASE WHEN attempt < (SELECT job.max_attempts FROM scheduler_app_job AS job
                                     WHERE job.id = scheduler_app_jobrun.job_id)
                    THEN 'retrying' ELSE 'dead' END,
       next_attempt_at = CASE WHEN attempt < (SELECT job.max_attempts FROM scheduler_app_job AS job
                                               WHERE job.id = scheduler_app_jobrun.job_id)
                              THEN %(now)s ELSE NULL END,
       finished_at = %(now)s,
       lease_expires_at = NULL,
       error = {error},
       attempts = {append}
 WHERE id {any_of}
       SELECT id
         FROM scheduler_app_jobrun
        WHERE state = 'running'
          AND lease_expires_at < %(now)s
        ORDER BY lease_expires_at
        LIMIT %(limit)s
          {lock}
       {end_any}
RETURNING id, state, attempt, job_id, tenant_id, worker
"""

# stale_queues
# Which broker queues hold runs published before %(before)s and still not started, among
# the %(sample)s oldest such runs (jobrun_queued_idx, in enqueued_at order). Reading them all
# cost O(queued runs) every sweep: during a spike of 1,000,000 every queued run is older than
# the idle delay after 15 s, and a beat's sweep every 2 s read hundreds of thousands of runs
# (~5 us each). The oldest come first, so runs past the dispatch timeout are always found;
# a queue whose only stale runs are younger than the sample's is found once the runs ahead
# of it are published again or started.
# {job} reaches each sampled run's job: on PostgreSQL by primary key, one row at a time
# (CLAIM_JOB_PG): with a plain join the planner hashed the whole job table for the 10,000
# sampled runs (a sequential scan, 196 ms a sweep at 1,000,000 jobs; 18 ms by key).
STALE_QUEUES_TEMPLATE = """
SELECT DISTINCT job.queue
  FROM (SELECT run.job_id
          FROM scheduler_app_jobrun AS run
         WHERE run.state = 'queued'
           AND run.enqueued_at < %(before)s
         ORDER BY run.enqueued_at
         LIMIT %(sample)s) AS stale
       {job}
 LIMIT 100
"""
STALE_QUEUES = STALE_QUEUES_TEMPLATE.format(job="JOIN scheduler_app_job AS job ON job.id = stale.job_id")
STALE_QUEUES_PG = STALE_QUEUES_TEMPLATE.format(job=CLAIM_JOB_PG.format(id="stale.job_id"))

# republish_stale_runs
# Stamp up to %(limit)s queued runs of one broker queue, published before %(before)s and
# still not started, as published now, and return them for publishing again. Same attempt:
# the worker's compare-and-set lets only one delivery start the run.
REPUBLISH_STALE_RUNS = """
UPDATE scheduler_app_jobrun
   SET enqueued_at = %(now)s
 WHERE id {any_of}
       SELECT run.id
         FROM scheduler_app_jobrun AS run
         JOIN scheduler_app_job AS job ON job.id = run.job_id
        WHERE run.state = 'queued'
          AND run.enqueued_at < %(before)s
          AND job.queue = %(queue)s
        ORDER BY run.enqueued_at
        LIMIT %(limit)s
          {lock_run}
       {end_any}
RETURNING id, attempt, job_id
"""

# release_buffered_runs
# The runs held by a buffer_one job whose job has no run still going (a run waiting for
# its tenant's quota counts as going: it is the job's next run), oldest first. {quota} is
# "NOT" for tenants without a dispatch quota and empty for tenants with one. The NOT EXISTS
# probe reads the small partial index jobrun_active_idx.
READY_BUFFERED_RUNS = """
SELECT held.id
  FROM scheduler_app_jobrun AS held
 WHERE held.state = 'pending'
   AND substr(held.reason, 1, 16) = 'overlap_buffered'
   AND {quota} EXISTS (
       SELECT 1
         FROM scheduler_app_tenant AS tenant
        WHERE tenant.id = held.tenant_id
          AND (tenant.max_fires_per_minute IS NOT NULL OR tenant.max_concurrent_runs IS NOT NULL)
       )
   AND NOT EXISTS (
       SELECT 1
         FROM scheduler_app_jobrun AS going
        WHERE going.job_id = held.job_id
          AND (going.state IN ('queued', 'running', 'retrying')
               OR (going.state = 'pending' AND substr(going.reason, 1, 6) = 'quota_'))
       )
 ORDER BY held.scheduled_at
 LIMIT %(limit)s
   {lock}
"""

# release_buffered_runs
# Queue the ready held runs of tenants without a dispatch quota. COALESCE keeps an earlier
# first dispatch.
RELEASE_BUFFERED_RUNS = """
UPDATE scheduler_app_jobrun
   SET state = 'queued',
       enqueued_at = %(now)s,
       dispatched_at = COALESCE(dispatched_at, %(now)s),
       reason = ''
 WHERE id IN ({ready})
RETURNING id, attempt, job_id
"""

# release_buffered_runs
# The ready held runs of tenants with a dispatch quota are not queued here, which would
# bypass the quota: they now wait for the quota instead (a reason starting with "quota_",
# naming the tenant's limit) and release_quota_held_runs queues them within the tenant's
# budget. From here on they count as their job's going run, so the job's overlap policy
# still holds.
HAND_OVER_BUFFERED_RUNS = """
UPDATE scheduler_app_jobrun
   SET reason = (
       SELECT CASE WHEN tenant.max_fires_per_minute IS NOT NULL
                   THEN %(fires_head)s || CAST(tenant.max_fires_per_minute AS VARCHAR(20)) || %(fires_tail)s
                   ELSE %(concurrency_head)s || CAST(tenant.max_concurrent_runs AS VARCHAR(20)) || %(concurrency_tail)s
              END
         FROM scheduler_app_tenant AS tenant
        WHERE tenant.id = scheduler_app_jobrun.tenant_id)
 WHERE id IN ({ready})
"""

# release_quota_held_runs
# The tenants with runs waiting for their quota, the one waiting longest first. Reads the
# pending runs only (jobrun_state_recent_idx): the work held back, never the whole ledger.
QUOTA_HELD_TENANTS = """
SELECT held.tenant_id
  FROM scheduler_app_jobrun AS held
 WHERE held.state = 'pending'
   AND substr(held.reason, 1, 6) = 'quota_'
 GROUP BY held.tenant_id
 ORDER BY min(held.scheduled_at), held.tenant_id
 LIMIT %(limit)s
"""

# release_quota_held_runs (quotas.release_held)
# Queue up to %(limit)s of one tenant's runs waiting for its quota ({manual}: "=" its held
# manual runs, reason starting %(manual_prefix)s, "<>" the others), none of a job whose queue is held back ({held_back}: empty,
# or a NOT IN of the queues over the high-water mark), highest priority first, then oldest
# fire, in the order of jobrun_tenant_held_idx (so a long wait list is not sorted each time);
# the caller holds the tenant's row lock and passes the budget as the limit. This is the
# run's first trip to the broker, hence dispatched_at. Locked rows are skipped.
RELEASE_QUOTA_HELD_RUNS = """
UPDATE scheduler_app_jobrun
   SET state = 'queued',
       enqueued_at = %(now)s,
       dispatched_at = %(now)s,
       reason = ''
 WHERE id {any_of}
       SELECT held.id
         FROM scheduler_app_jobrun AS held
        WHERE held.tenant_id = %(tenant)s
          AND held.state = 'pending'
          AND substr(held.reason, 1, 6) = 'quota_'
          AND substr(held.reason, 1, {manual_length}) {manual} %(manual_prefix)s
          {held_back}
        ORDER BY held.priority DESC, held.scheduled_at, held.id
        LIMIT %(limit)s
          {lock}
       {end_any}
RETURNING id, attempt, job_id
"""
