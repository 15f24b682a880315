"""The statements the ORM cannot say in one go. One constant each, with a header.

Table names are Django's stable defaults. `{lock}` is "FOR UPDATE SKIP LOCKED" on
PostgreSQL and empty on SQLite, where the database serialises writers by itself.
Parameters are named (%(name)s) or, for VALUES lists, built by dispatch from one
placeholder row.
"""

# insert_runs
# Record runs for planned fires; a fire that already has a run (another beat, a manual
# trigger at the same instant) is left alone by the unique (job_id, scheduled_at)
# constraint jobrun_one_per_fire. Returns only the rows this statement created, which
# are the only ones this beat may publish. {rows} is a list of placeholder tuples.
INSERT_RUNS = """
INSERT INTO scheduler_app_jobrun
       (job_id, tenant_id, scheduled_at, state, reason, job_version, created_at, enqueued_at, finished_at)
VALUES {rows}
    ON CONFLICT (job_id, scheduled_at) DO NOTHING
RETURNING id, job_id, state
"""
INSERT_RUNS_ROW = "(%s, %s, %s, %s, %s, %s, %s, %s, %s)"

# insert_runs (PostgreSQL): the same, with one array per column. Nine parameters whatever
# the batch size: psycopg neither re-parses nor quotes thousands of values, and the text
# is short enough for its statement cache. About twice as fast as VALUES at 1,000 rows.
INSERT_RUNS_PG = """
INSERT INTO scheduler_app_jobrun
       (job_id, tenant_id, scheduled_at, state, reason, job_version, created_at, enqueued_at, finished_at)
SELECT *
  FROM unnest(%s::bigint[], %s::bigint[], %s::timestamptz[], %s::varchar[], %s::varchar[],
              %s::integer[], %s::timestamptz[], %s::timestamptz[], %s::timestamptz[])
    ON CONFLICT (job_id, scheduled_at) DO NOTHING
RETURNING id, job_id, state
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
REQUEUE_DUE_RETRIES = """
UPDATE scheduler_app_jobrun
   SET state = 'queued',
       attempt = attempt + 1,
       enqueued_at = %(now)s,
       next_attempt_at = NULL
 WHERE id IN (
       SELECT id
         FROM scheduler_app_jobrun
        WHERE state = 'retrying'
          AND next_attempt_at <= %(now)s
        ORDER BY next_attempt_at
        LIMIT %(limit)s
          {lock}
       )
RETURNING id, attempt, job_id, tenant_id
"""

# mark_lost_runs
# Running runs whose lease ran out (the worker died, froze or lost the database) become
# `retrying` at once when the job has attempts left, else `dead`. The CASE reads the job's
# max_attempts through the join. Returns what it changed, for the audit trail.
MARK_LOST_RUNS = """
UPDATE scheduler_app_jobrun AS run
   SET state = CASE WHEN run.attempt < job.max_attempts THEN 'retrying' ELSE 'dead' END,
       next_attempt_at = CASE WHEN run.attempt < job.max_attempts THEN %(now)s ELSE NULL END,
       finished_at = %(now)s,
       lease_expires_at = NULL,
       error = 'lost: lease expired (worker ' || run.worker || ')'
  FROM scheduler_app_job AS job
 WHERE job.id = run.job_id
   AND run.id IN (
       SELECT id
         FROM scheduler_app_jobrun
        WHERE state = 'running'
          AND lease_expires_at < %(now)s
        ORDER BY lease_expires_at
        LIMIT %(limit)s
          {lock}
       )
RETURNING run.id, run.state, run.attempt, run.job_id, run.tenant_id, run.worker
"""

# stale_queues
# Which broker queues hold runs published before %(before)s and still not started.
STALE_QUEUES = """
SELECT DISTINCT job.queue
  FROM scheduler_app_jobrun AS run
  JOIN scheduler_app_job AS job ON job.id = run.job_id
 WHERE run.state = 'queued'
   AND run.enqueued_at < %(before)s
 LIMIT 100
"""

# republish_stale_runs
# Stamp up to %(limit)s queued runs of one broker queue, published before %(before)s and
# still not started, as published now, and return them for publishing again. Same attempt:
# the worker's compare-and-set lets only one delivery start the run.
REPUBLISH_STALE_RUNS = """
UPDATE scheduler_app_jobrun
   SET enqueued_at = %(now)s
 WHERE id IN (
       SELECT run.id
         FROM scheduler_app_jobrun AS run
         JOIN scheduler_app_job AS job ON job.id = run.job_id
        WHERE run.state = 'queued'
          AND run.enqueued_at < %(before)s
          AND job.queue = %(queue)s
        ORDER BY run.enqueued_at
        LIMIT %(limit)s
          {lock_run}
       )
RETURNING id, attempt, job_id
"""

# release_buffered_runs
# Queue runs held by a buffer_one job once none of that job's runs is still going. The
# NOT EXISTS probe reads the small partial index jobrun_active_idx.
RELEASE_BUFFERED_RUNS = """
UPDATE scheduler_app_jobrun
   SET state = 'queued',
       enqueued_at = %(now)s,
       reason = ''
 WHERE id IN (
       SELECT held.id
         FROM scheduler_app_jobrun AS held
        WHERE held.state = 'pending'
          AND NOT EXISTS (
              SELECT 1
                FROM scheduler_app_jobrun AS going
               WHERE going.job_id = held.job_id
                 AND going.state IN ('queued', 'running', 'retrying')
              )
        ORDER BY held.scheduled_at
        LIMIT %(limit)s
          {lock}
       )
RETURNING id, attempt, job_id
"""
