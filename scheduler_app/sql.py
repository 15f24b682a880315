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

# advance_jobs (PostgreSQL)
# Set next_run_at for a whole claimed batch in one statement. The casts tell PostgreSQL
# the VALUES types, which it cannot infer from text literals (NULL in particular).
ADVANCE_JOBS_PG = """
UPDATE scheduler_app_job AS job
   SET next_run_at = advanced.next_run_at
  FROM (VALUES {rows}) AS advanced (id, next_run_at)
 WHERE job.id = advanced.id
"""
ADVANCE_JOBS_PG_ROW = "(%s::bigint, %s::timestamptz)"

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
