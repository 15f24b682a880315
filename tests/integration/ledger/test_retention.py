"""Retention against the real PostgreSQL: the policy keeps what it should (days, failed runs
longer, a job's newest runs, tenant and job overrides, runs still going never touched);
pruning goes in bounded batches, remembers where it got to and skips rows a second
connection holds; the policy is set through the API, the CLI and the admin, refused with
errors naming the field. The policy alone: tests/unit/ledger/test_retention.py; a beat
pruning in the background: tests/system/ledger/test_retention.py."""

from __future__ import annotations

import itertools
import logging
import time
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, connections
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from scheduler_app import services
from scheduler_app.ledger import retention
from scheduler_app.models import AuditEvent, Job, JobRun, RunState, Tenant, db_now
from tests.integration.api.test_api import client_for, errors_of, make_tenant
from tests.unit.ledger.test_retention import policy  # noqa: F401 (an autouse fixture)

NOW = datetime(2024, 6, 1, tzinfo=UTC)
DAY = timedelta(days=1)
_seconds = itertools.count(1)


def finished(
    job: Job, state: str, days_ago: float, *, now: datetime = NOW, fired_days_ago: float | None = None, **fields
) -> JobRun:
    """A run of `job` that finished `days_ago` days before `now` (fired a little earlier)."""
    finished_at = now - days_ago * DAY
    fired_at = now - fired_days_ago * DAY if fired_days_ago is not None else finished_at - timedelta(minutes=1)
    fired_at -= timedelta(microseconds=next(_seconds))  # one run per fire time
    done = state not in (RunState.PENDING, RunState.QUEUED, RunState.RUNNING, RunState.RETRYING)
    return JobRun.objects.create(
        job=job,
        tenant=job.tenant,
        state=state,
        scheduled_at=fired_at,
        created_at=fired_at,
        finished_at=finished_at if done or state == RunState.RETRYING else None,
        **fields,
    )


def prune(now: datetime = NOW, *, portable: bool = False, **options) -> retention.Progress:
    pruner = retention.once_through(**options)
    pruner.portable = portable
    return retention.prune_everything(pruner, now=lambda: now)


@pytest.fixture(params=["statement", "portable"])
def walk(request) -> bool:
    """Run a policy test through PostgreSQL's statement and through the ORM walk SQLite uses."""
    return request.param == "portable"


def left(*runs: JobRun) -> list[bool]:
    """For each run, whether it is still in the ledger."""
    ids = set(JobRun.objects.filter(id__in=[run.id for run in runs]).values_list("id", flat=True))
    return [run.id in ids for run in runs]


# --- what the policy keeps -----------------------------------------------------------------


def test_finished_runs_go_after_the_days_and_the_younger_ones_stay(make_job, walk):
    job = make_job()
    old = [finished(job, state, 31) for state in (RunState.SUCCEEDED, RunState.SKIPPED, RunState.CANCELLED)]
    young = [finished(job, state, 29) for state in (RunState.SUCCEEDED, RunState.SKIPPED, RunState.CANCELLED)]

    progress = prune(portable=walk)

    assert left(*old) == [False, False, False]
    assert left(*young) == [True, True, True]
    assert progress.pruned == 3


def test_failed_and_dead_runs_are_kept_longer(make_job, walk):
    job = make_job()
    kept = [finished(job, RunState.FAILED, 31), finished(job, RunState.DEAD, 89)]
    gone = [finished(job, RunState.FAILED, 91), finished(job, RunState.DEAD, 91)]

    prune(portable=walk)

    assert left(*kept) == [True, True]
    assert left(*gone) == [False, False]


def test_runs_still_going_are_never_touched_whatever_their_age(make_job, walk):
    job = make_job()
    going = [
        finished(job, state, 400, fired_days_ago=401)
        for state in (RunState.PENDING, RunState.QUEUED, RunState.RUNNING, RunState.RETRYING, RunState.LOST)
    ]
    JobRun.objects.filter(id__in=[run.id for run in going]).update(finished_at=NOW - 400 * DAY)

    assert prune(portable=walk).pruned == 0
    assert left(*going) == [True] * 5


def test_a_job_keeps_its_newest_runs_whatever_their_age(make_job, settings, walk):
    settings.CRONFLEET_RETENTION_KEEP_LAST = 3
    monthly, busy = make_job(), make_job()
    monthly_runs = [finished(monthly, RunState.SUCCEEDED, days) for days in (150, 120, 90, 60, 31)]
    busy_old = [finished(busy, RunState.SUCCEEDED, days) for days in (50, 40, 35)]
    busy_new = [finished(busy, RunState.SUCCEEDED, days) for days in (3, 2)]
    finished(busy, RunState.QUEUED, 0)  # runs still going count among the newest

    prune(portable=walk)

    assert left(*monthly_runs) == [False, False, True, True, True]  # its last three, all older than 30 days
    assert left(*busy_old) == [False, False, False]
    assert left(*busy_new) == [True, True]


def test_tenant_and_job_policies_override_the_settings(make_job, walk):
    short, forever = make_tenant(retention_days=7), make_tenant(retention_days=0)
    plain = Job.objects.create(tenant=short, name="plain", cron="* * * * *", task_name="scheduler_app.echo")
    longer = Job.objects.create(
        tenant=short, name="longer", cron="* * * * *", task_name="scheduler_app.echo", retention_days=60
    )
    kept_all = Job.objects.create(tenant=forever, name="kept", cron="* * * * *", task_name="scheduler_app.echo")
    shorter = Job.objects.create(
        tenant=forever, name="shorter", cron="* * * * *", task_name="scheduler_app.echo", retention_days=5
    )
    default_job = make_job()

    runs = {
        "plain 8 days": finished(plain, RunState.SUCCEEDED, 8),
        "plain 6 days": finished(plain, RunState.SUCCEEDED, 6),
        "longer 40 days": finished(longer, RunState.SUCCEEDED, 40),
        "longer 61 days": finished(longer, RunState.SUCCEEDED, 61),
        "kept 400 days": finished(kept_all, RunState.SUCCEEDED, 400),
        "shorter 6 days": finished(shorter, RunState.SUCCEEDED, 6),
        "shorter 4 days": finished(shorter, RunState.SUCCEEDED, 4),
        "default 31 days": finished(default_job, RunState.SUCCEEDED, 31),
    }

    prune(portable=walk)

    still = dict(zip(runs, left(*runs.values()), strict=True))
    assert still == {
        "plain 8 days": False,
        "plain 6 days": True,
        "longer 40 days": True,
        "longer 61 days": False,
        "kept 400 days": True,
        "shorter 6 days": False,
        "shorter 4 days": True,
        "default 31 days": False,
    }


def test_failed_days_are_never_shorter_than_the_days_in_force(make_job, walk):
    tenant = make_tenant(retention_days=60)
    job = Job.objects.create(
        tenant=tenant, name="j", cron="* * * * *", task_name="scheduler_app.echo", retention_failed_days=10
    )  # its days come from the tenant: 60

    runs = [finished(job, RunState.FAILED, 59), finished(job, RunState.FAILED, 61)]
    prune(portable=walk)

    assert left(*runs) == [True, False]


# --- batches, locks, the walk ------------------------------------------------------------------


def test_pruning_goes_in_bounded_batches_and_looks_at_each_run_once(make_job, walk):
    job = make_job()
    gone = [finished(job, RunState.SUCCEEDED, 40 + n) for n in range(7)]
    kept = [finished(job, RunState.FAILED, 40 + n) for n in range(3)]  # kept 90 days: looked at, not deleted
    pruner = retention.once_through(batch_size=3)
    pruner.portable = walk

    first = pruner.prune_batch(NOW)
    after_first = pruner.progress.pruned
    while pruner.prune_batch(NOW):
        pass

    assert first is True and pruner.progress.examined >= 3 and after_first <= 3
    assert left(*gone) == [False] * 7 and left(*kept) == [True] * 3
    # The walk of the others' class looked at all ten runs once; the failed class's walk
    # (90 days) found none old enough to look at.
    assert pruner.progress.examined == 10


def test_a_batch_shares_itself_among_the_tenants_so_runs_written_together_go_together(make_job, settings):
    settings.CRONFLEET_RETENTION_FAILED_DAYS = 0  # failed runs kept forever: one walk per tenant
    other = make_job(tenant=make_tenant())
    first = make_job()
    runs = {job.id: [finished(job, RunState.SUCCEEDED, 40 + n) for n in range(6)] for job in (first, other)}
    pruner = retention.once_through(batch_size=4)

    pruner.prune_batch(NOW)

    # Each tenant's walk took half of the batch: its two oldest runs (the walks go oldest first).
    for job_runs in runs.values():
        assert left(*job_runs) == [True] * 4 + [False] * 2


def test_a_walk_over_runs_the_policy_keeps_locks_and_writes_nothing(make_job):
    kept = [finished(make_job(), RunState.FAILED, 40 + n) for n in range(3)]  # failed: kept 90 days
    gone = finished(make_job(), RunState.SUCCEEDED, 40)

    progress = prune()  # the others' walk looks at the failed runs (over 30 days) and keeps them

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT xmax::text::bigint FROM scheduler_app_jobrun WHERE id = ANY(%s)", [[run.id for run in kept]]
        )
        assert [row[0] for row in cursor.fetchall()] == [0, 0, 0]  # no row lock was ever taken on them
    assert progress.examined >= 3 and left(*kept, gone) == [True, True, True, False]


def test_the_statement_locks_with_skip_locked_and_deletes(make_job):
    finished(make_job(), RunState.SUCCEEDED, 40)

    with CaptureQueriesContext(connection) as captured:
        prune()

    statement = next(q["sql"] for q in captured.captured_queries if "DELETE FROM scheduler_app_jobrun" in q["sql"])
    assert "FOR UPDATE OF run SKIP LOCKED" in statement


@pytest.mark.django_db(transaction=True)
def test_pruning_skips_runs_another_transaction_holds_without_waiting(make_job):
    job = make_job()
    held, free = finished(job, RunState.FAILED, 100), finished(job, RunState.SUCCEEDED, 100)
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:  # a second connection replaying `held`: it holds the row
            cursor.execute("BEGIN")
            cursor.execute("SELECT id FROM scheduler_app_jobrun WHERE id = %s FOR UPDATE", [held.id])
            started = time.monotonic()
            progress = prune()
            took = time.monotonic() - started
            assert left(held, free) == [True, False]
            # Both are judged from the snapshot; the held run is passed over when the doomed are locked.
            assert (progress.doomed, progress.pruned) == (2, 1)
            assert took < 2  # no wait for the lock (lock_timeout would be 5 s)
            cursor.execute(
                "UPDATE scheduler_app_jobrun SET state = 'queued', finished_at = NULL WHERE id = %s", [held.id]
            )
            cursor.execute("COMMIT")
    finally:
        other.close()

    prune()  # the replayed run is going again: kept
    assert left(held) == [True]


def test_a_walk_keeps_its_place_and_starts_again_from_the_oldest_on_rescan(make_job):
    clock = FakeClock()
    job = make_job()
    finished(job, RunState.SUCCEEDED, 40)
    pruner = retention.Pruner(batch_size=100, check_seconds=60, rescan_seconds=3600, clock=clock)
    while pruner.prune_batch(NOW):
        pass
    late = finished(job, RunState.SUCCEEDED, 40, fired_days_ago=45)  # fired before where the walk got to

    clock.now += 61  # the next check: the walk goes on from its place and misses it
    while pruner.prune_batch(NOW):
        pass
    missed = left(late)
    clock.now += 3600  # the rescan starts from the oldest run
    while pruner.prune_batch(NOW):
        pass

    assert missed == [True]
    assert left(late) == [False]


def test_a_changed_policy_is_read_at_the_next_check(make_job):
    clock = FakeClock()
    tenant = make_tenant()
    job = Job.objects.create(tenant=tenant, name="j", cron="* * * * *", task_name="scheduler_app.echo")
    run = finished(job, RunState.SUCCEEDED, 10)
    pruner = retention.Pruner(check_seconds=60, clock=clock)
    while pruner.prune_batch(NOW):
        pass
    services.tenant_set_retention(tenant, {"retention_days": 7})

    clock.now += 61
    while pruner.prune_batch(NOW):
        pass

    assert left(run) == [False]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# --- the beat's step -------------------------------------------------------------------------


def test_step_prunes_while_idle_and_when_busy_only_every_busy_seconds(make_job, django_assert_num_queries):
    clock = FakeClock()
    job = make_job()
    runs = [finished(job, RunState.SUCCEEDED, 400, now=db_now()) for _ in range(5)]
    pruner = retention.Pruner(batch_size=2, busy_seconds=10, check_seconds=60, clock=clock)

    assert pruner.step(idle=False) is True  # busy, but nothing pruned yet: one batch
    with django_assert_num_queries(0):
        assert pruner.step(idle=False) is False  # busy again within 10 s: no batch, not even a query
    while pruner.step(idle=True):  # idle: batch after batch while there is more
        pass
    clock.now += 5
    with django_assert_num_queries(0):
        assert pruner.step(idle=True) is False  # caught up: nothing until the next check

    assert left(*runs) == [False] * 5


def test_step_logs_a_database_error_and_tries_again_later(make_job, caplog):
    clock = FakeClock()
    pruner = retention.Pruner(check_seconds=60, clock=clock)

    with (
        mock.patch.object(retention.Pruner, "prune_batch", side_effect=DatabaseError("boom")),
        caplog.at_level(logging.WARNING, logger="scheduler_app.ledger.retention"),
    ):
        assert pruner.step(idle=True) is False

    assert "pruning failed (DatabaseError: boom)" in caplog.text
    assert pruner.audit_at == clock.now + 60


def test_step_does_nothing_when_beats_do_not_prune(settings, make_job, django_assert_num_queries):
    settings.CRONFLEET_RETENTION_IN_BEAT = False

    with django_assert_num_queries(0):
        assert retention.Pruner().step(idle=True) is False


# --- audit events ------------------------------------------------------------------------------


def test_audit_events_about_runs_go_on_their_own_age_and_operators_actions_stay(make_job):
    job = make_job()
    kept_run = finished(job, RunState.QUEUED, 0)

    def event(action: str, days: int, run_id: int | None) -> AuditEvent:
        made = AuditEvent.objects.create(tenant=job.tenant, job=job, run_id=run_id, action=action, actor="test")
        AuditEvent.objects.filter(id=made.id).update(created_at=NOW - days * DAY)
        return made

    old_run_event = event("run.lost", 400, kept_run.id)  # goes although its run is still there
    young_run_event = event("run.lost", 100, kept_run.id)
    old_job_event = event("job.paused", 400, None)

    assert prune().audit_pruned == 1
    ids = set(AuditEvent.objects.values_list("id", flat=True))
    assert [e.id in ids for e in (old_run_event, young_run_event, old_job_event)] == [False, True, True]


# --- prune_runs --------------------------------------------------------------------------------


def test_prune_runs_dry_run_counts_and_deletes_nothing(make_job, capsys):
    job = make_job()
    runs = [finished(job, RunState.SUCCEEDED, 40, now=db_now()) for _ in range(3)]

    call_command("prune_runs", "--dry-run")

    out = capsys.readouterr().out
    assert "would delete" in out and "dry run, nothing deleted" in out
    assert left(*runs) == [True] * 3


def test_prune_runs_deletes_one_tenant_s_runs_and_reports(make_job, capsys):
    mine, theirs = make_tenant(), make_tenant()
    runs = [
        finished(
            Job.objects.create(tenant=tenant, name="j", cron="* * * * *", task_name="scheduler_app.echo"),
            RunState.SUCCEEDED,
            40,
            now=db_now(),
        )
        for tenant in (mine, theirs)
    ]

    call_command("prune_runs", "--tenant", mine.slug, "--batch-size", "10")

    out = capsys.readouterr().out
    assert f"(tenant {mine.slug} only)" in out and "prune_runs: done" in out
    assert left(*runs) == [False, True]


def test_prune_runs_refuses_an_unknown_tenant(db):
    with pytest.raises(CommandError, match="prune_runs: tenant: no tenant 'nope'"):
        call_command("prune_runs", "--tenant", "nope")


# --- setting the policy: CLI ---------------------------------------------------------------------


def test_retention_set_and_show_from_the_command_line(make_job, capsys):
    job = make_job()

    call_command("retention", "set", "--tenant", job.tenant.slug, "--days", "7", "--keep-last", "5")
    call_command("retention", "set", "--job", str(job.id), "--failed-days", "40")
    capsys.readouterr()
    call_command("retention", "show", "--job", f"{job.tenant.slug}/{job.name}")

    out = capsys.readouterr().out
    assert "7 days    tenant" in out and "40 days   job" in out and "5         tenant" in out
    job.refresh_from_db()
    assert (job.tenant.retention_days, job.retention_failed_days, job.retention_days) == (7, 40, None)
    assert AuditEvent.objects.filter(action="job.updated", actor="cli").count() == 1

    call_command("retention", "set", "--tenant", job.tenant.slug, "--days", "inherit")
    assert Tenant.objects.get(id=job.tenant_id).retention_days is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--days", "36501"], "retention set: retention_days: must be between 0 and 36500"),
        (
            ["--days", "30", "--failed-days", "7"],
            "retention set: retention_failed_days: must be at least retention_days",
        ),
        ([], "retention set: retention: give at least one of"),
    ],
)
def test_retention_set_refuses_bad_values_naming_the_field(make_job, args, message):
    job = make_job()

    with pytest.raises(CommandError, match=message):
        call_command("retention", "set", "--tenant", job.tenant.slug, *args)


# --- setting the policy: API ---------------------------------------------------------------------


def test_staff_set_a_tenant_s_retention_and_see_what_is_in_force(db):
    tenant = make_tenant()
    staff = client_for(None)

    response = staff.patch(
        f"/api/v1/tenants/{tenant.slug}/retention/", {"retention_days": 7, "retention_keep_last": 20}, format="json"
    )

    assert response.status_code == 200, response.content
    assert response.json() == {
        "retention_days": 7,
        "retention_failed_days": None,
        "retention_keep_last": 20,
        "effective": {
            "days": 7,
            "failed_days": 90,
            "keep_last": 20,
            "sources": {"days": "tenant", "failed_days": "settings", "keep_last": "tenant"},
        },
    }
    assert staff.get(f"/api/v1/tenants/{tenant.slug}/retention/").json()["retention_days"] == 7
    assert AuditEvent.objects.get(tenant=tenant, action="tenant.updated").detail == {
        "changes": {"retention_days": [None, 7], "retention_keep_last": [None, 20]}
    }


def test_a_tenant_key_may_not_set_its_tenant_s_retention(db):
    tenant = make_tenant()

    response = client_for(tenant).patch(
        f"/api/v1/tenants/{tenant.slug}/retention/", {"retention_days": 1}, format="json"
    )

    assert response.status_code == 403
    assert Tenant.objects.get(id=tenant.id).retention_days is None


def test_a_tenant_sets_its_job_s_retention_and_not_another_tenant_s(db):
    mine, theirs = make_tenant(retention_days=14), make_tenant()
    job = services.job_create(mine, services.JobSpec(name="j", task_name="scheduler_app.echo", every=60))
    other = services.job_create(theirs, services.JobSpec(name="j", task_name="scheduler_app.echo", every=60))
    client = client_for(mine)

    response = client.patch(f"/api/v1/jobs/{job.id}/retention/", {"retention_failed_days": 60}, format="json")

    assert response.status_code == 200, response.content
    assert response.json()["effective"] == {
        "days": 14,
        "failed_days": 60,
        "keep_last": 0,
        "sources": {"days": "tenant", "failed_days": "job", "keep_last": "settings"},
    }
    assert Job.objects.get(id=job.id).version == 1  # retention is not a new version of the job
    assert client.get(f"/api/v1/jobs/{other.id}/retention/").status_code == 404
    assert client.patch(f"/api/v1/jobs/{other.id}/retention/", {"retention_days": 1}, format="json").status_code == 404


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"retention_days": -1}, "retention_days", "greater than or equal to 0"),
        ({"retention_days": "7"}, "retention_days", "must be a whole number"),
        ({"retention_days": 36501}, "retention_days", "must be between 0 and 36500"),
        ({"retention_keep_last": 100_001}, "retention_keep_last", "must be between 0 and 100000"),
        ({"retention_days": 30, "retention_failed_days": 7}, "retention_failed_days", "at least retention_days (30)"),
        ({"retention_weeks": 1}, "retention_weeks", "is not a known field"),
    ],
)
def test_bad_retention_values_are_refused_naming_the_field(db, body, field, message):
    tenant = make_tenant()
    job = services.job_create(tenant, services.JobSpec(name="j", task_name="scheduler_app.echo", every=60))

    response = client_for(tenant).patch(f"/api/v1/jobs/{job.id}/retention/", body, format="json")

    assert response.status_code == 400
    assert message in errors_of(response)[field]
    assert Job.objects.get(id=job.id).retention_days is None


# --- setting the policy: admin ---------------------------------------------------------------------


TENANT_FORM = {
    "timezone": "UTC",
    "is_active": "on",
    "max_jobs": "",
    "min_interval_seconds": "0",
    "max_fires_per_minute": "",
    "max_concurrent_runs": "",
    "weight": "1",
    "api_requests_per_minute": "",
}


def test_the_tenant_change_page_sets_retention(admin_client):
    tenant = make_tenant()
    form = {
        **TENANT_FORM,
        "name": tenant.name,
        "retention_days": "7",
        "retention_failed_days": "",
        "retention_keep_last": "3",
    }

    response = admin_client.post(reverse("admin:scheduler_app_tenant_change", args=[tenant.pk]), form)

    assert response.status_code == 302, response.content.decode()[:3000]
    tenant.refresh_from_db()
    assert (tenant.retention_days, tenant.retention_failed_days, tenant.retention_keep_last) == (7, None, 3)
    page = admin_client.get(reverse("admin:scheduler_app_tenant_change", args=[tenant.pk])).content.decode()
    assert "finished runs 7 days (tenant), failed and dead 90 days (settings)" in page


def test_the_tenant_change_page_shows_a_bad_retention_on_its_field(admin_client):
    tenant = make_tenant()
    form = {
        **TENANT_FORM,
        "name": tenant.name,
        "retention_days": "30",
        "retention_failed_days": "7",
        "retention_keep_last": "",
    }

    response = admin_client.post(reverse("admin:scheduler_app_tenant_change", args=[tenant.pk]), form)

    assert response.status_code == 200
    assert "at least retention_days (30)" in str(response.context["adminform"].form.errors["retention_failed_days"])
    assert Tenant.objects.get(id=tenant.id).retention_days is None


def test_the_job_change_page_sets_retention_without_a_new_version(admin_client):
    from tests.support.admin import change_form

    tenant = make_tenant()
    job = services.job_create(
        tenant, services.JobSpec(name="nightly", task_name="scheduler_app.echo", cron="0 9 * * *")
    )

    response = admin_client.post(
        reverse("admin:scheduler_app_job_change", args=[job.pk]),
        change_form(job, retention_days="3", retention_failed_days="", retention_keep_last=""),
    )

    assert response.status_code == 302, response.content.decode()[:3000]
    job.refresh_from_db()
    assert (job.retention_days, job.version) == (3, 1)
    assert AuditEvent.objects.get(job_id=job.id, action="job.updated").detail == {
        "changes": {"retention_days": [None, 3]}
    }
