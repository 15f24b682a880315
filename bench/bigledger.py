"""A big ledger for the benches (bench ledger, bench console): seeding millions of finished
runs a statement at a time (the indexes that hold every row dropped meanwhile and rebuilt
after), rolling up their hours, emptying the ledger, and EXPLAIN (ANALYZE, BUFFERS) of a
statement with the indexes and sequential scans it used."""

from __future__ import annotations

import time
from datetime import timedelta

from django.db import DatabaseError, connection, transaction

from scheduler_app.ledger import rollup
from scheduler_app.models import Job, JobRun, RunHour, db_now

HISTORY_DAYS = 60
SEED_CHUNK_ROWS = 1_000_000
# The ledger's indexes holding (nearly) every row: dropped while seeding, rebuilt after.
BIG_INDEXES = (
    "jobrun_tenant_recent_idx",
    "jobrun_state_recent_idx",
    "jobrun_tenant_dispatched_idx",
    "jobrun_tenant_state_idx",
)

SEED_RUNS = """
INSERT INTO scheduler_app_jobrun
       (job_id, tenant_id, scheduled_at, state, created_at, enqueued_at, dispatched_at, started_at, finished_at)
SELECT job.id, job.tenant_id, fire.at, fire.state, fire.at,
       CASE WHEN fire.state <> 'skipped' THEN fire.at + interval '50 milliseconds' END,
       CASE WHEN fire.state <> 'skipped' THEN fire.at + interval '50 milliseconds' END,
       CASE WHEN fire.state NOT IN ('skipped', 'cancelled') THEN fire.at + interval '200 milliseconds' END,
       fire.at + CASE WHEN fire.state = 'skipped' THEN interval '0' ELSE interval '2 seconds' END
  FROM generate_series(%(oldest)s, %(newest)s, -1) AS slot (age)
 CROSS JOIN (SELECT id, tenant_id, row_number() OVER (ORDER BY id) AS n
               FROM scheduler_app_job WHERE tenant_id = ANY(%(tenants)s)) AS job
 CROSS JOIN LATERAL (
       SELECT %(now)s - slot.age * %(spacing)s - mod(job.n, 3600) * interval '1 second' AS at,
              (ARRAY['succeeded', 'failed', 'dead', 'skipped', 'cancelled'])[
                  CASE WHEN mod(job.n * 7919 + slot.age * 104729, 100) < 95 THEN 1
                       WHEN mod(job.n * 7919 + slot.age * 104729, 100) < 97 THEN 2
                       WHEN mod(job.n * 7919 + slot.age * 104729, 100) < 98 THEN 3
                       WHEN mod(job.n * 7919 + slot.age * 104729, 100) < 99 THEN 4
                       ELSE 5 END] AS state
       ) AS fire
 ORDER BY slot.age DESC, job.id
"""


def seed_ledger(tenant_ids: list[int], rows: int, note) -> tuple[int, float]:
    started = time.monotonic()
    jobs = Job.objects.filter(tenant_id__in=tenant_ids).count()
    per_job = max(1, rows // jobs)
    spacing = timedelta(days=HISTORY_DAYS) / per_job
    newest = db_now() - timedelta(minutes=1)
    big = [index for index in JobRun._meta.indexes if index.name in BIG_INDEXES]
    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX IF EXISTS {', '.join(BIG_INDEXES)}")
    try:
        slots = max(1, SEED_CHUNK_ROWS // jobs)
        done = 0
        for oldest in range(per_job - 1, -1, -slots):
            youngest = max(0, oldest - slots + 1)
            with connection.cursor() as cursor:
                cursor.execute(
                    SEED_RUNS,
                    {"oldest": oldest, "newest": youngest, "tenants": tenant_ids, "now": newest, "spacing": spacing},
                )
                done += cursor.rowcount
            note(f"seeded {done:,} of {per_job * jobs:,} runs ({time.monotonic() - started:.0f}s)")
    finally:
        with connection.schema_editor() as editor:
            for index in big:
                note(f"building {index.name}")
                editor.add_index(JobRun, index)
    note("VACUUM ANALYZE of the ledger, CHECKPOINT")
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {JobRun._meta.db_table}")
        # Written out now rather than by the checkpointer during the measurements.
        try:
            with transaction.atomic():
                cursor.execute("CHECKPOINT")
        except DatabaseError as exc:
            note(f"no CHECKPOINT ({exc}); the next measurements may share the disk with it")
    return done, time.monotonic() - started


def roll_up_all(note) -> str:
    """Roll up every hour the beats would have (the seeded history has none yet)."""
    started, hours = time.monotonic(), 0
    while added := rollup.roll_up(db_now(), max_hours=24):
        hours += added
    seconds = time.monotonic() - started
    note(f"rolled up {hours} hours in {seconds:.1f}s")
    return f"{hours} hours in {seconds:.1f}s ({seconds / max(1, hours) * 1000:.0f} ms an hour)"


def restore_indexes(note) -> None:
    """Build any of the ledger's indexes missing (dropped by a seeding that did not finish)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s", [JobRun._meta.db_table])
        present = {row[0] for row in cursor.fetchall()}
    missing = [index for index in JobRun._meta.indexes if index.name not in present]
    if missing:
        with connection.schema_editor() as editor:
            for index in missing:
                note(f"building the missing index {index.name}")
                editor.add_index(JobRun, index)


def empty_ledger(tenant_ids: list[int], note) -> None:
    """TRUNCATE the ledger when it holds bench runs only (`clean` then has little to delete)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT FROM scheduler_app_tenant AS tenant WHERE NOT tenant.id = ANY(%s) "
            "AND EXISTS (SELECT FROM scheduler_app_jobrun AS run WHERE run.tenant_id = tenant.id))",
            [tenant_ids],
        )
        if cursor.fetchone()[0]:
            note("the ledger holds other tenants' runs: leaving the bench runs to `clean`")
            return
        cursor.execute(
            "UPDATE scheduler_app_auditevent SET run_id = NULL WHERE run_id IS NOT NULL AND NOT tenant_id = ANY(%s)",
            [tenant_ids],
        )
        cursor.execute(f"TRUNCATE {JobRun._meta.db_table}")
    # The rollup of the bench's hours (and the all-tenant rows that counted them): the beats
    # roll the last days up again from the ledger.
    RunHour.objects.filter(tenant_id__in=[*tenant_ids, 0]).delete()


def explain(statement: str, params, setup: str = "") -> tuple[float, list[str], list[str]]:
    """EXPLAIN (ANALYZE, BUFFERS) of `statement` in a transaction rolled back (after `setup`,
    e.g. SET LOCAL): its time in ms, the indexes it used, and the tables it read sequentially."""
    indexes, seq = [], []
    with transaction.atomic(), connection.cursor() as cursor:
        if setup:
            cursor.execute(setup)
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, params)
        plan = cursor.fetchone()[0]
        plan = plan[0] if isinstance(plan, list) else plan
        transaction.set_rollback(True)

    def walk(node: dict) -> None:
        for arbiter in node.get("Conflict Arbiter Indexes", []):
            indexes.append(f"ON CONFLICT arbiter {arbiter}")
        if "Index Name" in node:
            indexes.append(f"{node['Node Type'].replace(' Scan', '')} {node['Index Name']}")
        if node["Node Type"] == "Seq Scan":
            seq.append(node["Relation Name"])
        for child in node.get("Plans", []):
            walk(child)

    walk(plan["Plan"])
    return plan["Execution Time"], sorted(set(indexes)), sorted(set(seq))
