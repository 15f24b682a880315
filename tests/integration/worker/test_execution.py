"""Worker side, called directly against the real PostgreSQL: compare-and-set, outcomes, retries."""

from datetime import timedelta

import pytest
from django.db import connection

from scheduler_app.models import AuditEvent, JobRun, RunState
from scheduler_app.worker import execution
from tests.conftest import NOW, utc


def test_execute_run_runs_the_task_with_its_fire_and_records_the_result(make_job, make_run):
    run = make_run(make_job(task_name="scheduler_app.echo", kwargs={"x": 1}))

    outcome = execution.execute_run(run.id, 1, worker="w1", task_id="t1")

    run.refresh_from_db()
    assert (outcome.state, run.state, run.worker, run.celery_task_id) == ("succeeded", "succeeded", "w1", "t1")
    assert run.started_at and run.finished_at and run.lease_expires_at is None
    assert '"kwargs": {"x": 1}' in run.result
    assert f'"fire_key": "{run.fire_key}"' in run.result
    assert '"scheduled_at": "2024-01-01T00:00:00+00:00"' in run.result


def test_a_second_delivery_of_the_same_message_does_nothing_and_is_counted(make_run):
    run = make_run()

    first = execution.execute_run(run.id, 1, worker="w1")
    second = execution.execute_run(run.id, 1, worker="w2")

    run.refresh_from_db()
    assert (first.state, second.state) == ("succeeded", "duplicate")
    assert (run.worker, run.duplicate_deliveries) == ("w1", 1)
    assert [(a["attempt"], a["worker"], a["outcome"]) for a in run.attempts] == [(1, "w1", "succeeded")]
    assert not AuditEvent.objects.filter(run_id=run.id, action="run.started").exists()  # normal: on the row
    assert AuditEvent.objects.filter(run_id=run.id, action="run.duplicate_delivery").count() == 1  # an anomaly


def executions_of_prepared_transitions() -> int:
    """How many times this session has executed the worker's prepared statements (each
    run's start and end: a data-modifying CTE over the runs, an UPDATE appending to attempts)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(generic_plans + custom_plans), 0) FROM pg_prepared_statements "
            "WHERE statement LIKE '%%WITH started AS%%' OR statement LIKE '%%jsonb_build_object%%'"
        )
        return cursor.fetchone()[0]


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "not-prepared"])
def test_the_workers_statements_are_prepared_statements_unless_turned_off(make_job, make_run, settings, prepared):
    settings.CRONFLEET_PREPARED_STATEMENTS = prepared
    job = make_job(task_name="scheduler_app.echo")
    alone, *batch = [make_run(job, scheduled_at=utc(2024, 1, 1, 0, minute)) for minute in range(3)]
    before = executions_of_prepared_transitions()

    outcomes = [
        execution.execute_run(alone.id, 1, worker="w"),
        *execution.execute_runs([(run.id, 1) for run in batch], worker="w"),
    ]

    assert [outcome.state for outcome in outcomes] == ["succeeded"] * 3
    # A run alone and a batch: a start and an end each, through the prepared statements.
    assert executions_of_prepared_transitions() - before == (4 if prepared else 0)


def test_a_start_reads_the_same_values_in_the_binary_format_as_in_text(make_job, make_run, tenant, monkeypatch):
    """The start statement's rows come in PostgreSQL's binary format (USE_TZ on): each field
    of the started run, its job and its tenant is what the text format gives, type and
    time zone included."""
    from scheduler_app import services
    from scheduler_app.worker import transitions

    services.tenant_signing_secrets(tenant, NOW)  # its first secret
    services.tenant_rotate_webhook_secret(tenant, overlap=timedelta(hours=1))  # and a previous one, until
    job = make_job(
        args=[1, "a", {"k": [1.5, None, True]}],
        kwargs={"\u00e9": "\u00fc", "big": 10**15},
        target_kind="http",
        target_config={"method": "POST", "url": "http://example.com/p?q=1", "headers": {"X": "y"}, "body": "{}"},
        timeout_seconds=7,
        queue="lane",
    )
    parent = make_run()
    runs = [make_run(job, enqueued_at=NOW, trigger="manual", parent_run=parent), make_run()]
    execute = transitions.execute

    def started(binary: bool) -> list[list[dict]]:
        JobRun.objects.filter(id__in=[r.id for r in runs]).update(state=RunState.QUEUED)
        monkeypatch.setattr(transitions, "execute", lambda *a, **k: execute(*a, **{**k, "binary": binary}))
        return [
            [
                {name: (value, type(value), getattr(value, "tzinfo", None)) for name, value in vars(obj).items()}
                for obj in (s.run, s.job, s.job.tenant)
            ]
            for s in transitions.start_runs([(r.id, 1) for r in runs], worker="w")
        ]

    text, binary = started(False), started(True)

    assert len(binary) == 2 and binary[0][1]["kwargs"][0] == {"\u00e9": "\u00fc", "big": 10**15}
    assert binary[0][2]["webhook_secret_previous_until"][2] is not None  # an aware datetime
    for a, b in zip(text, binary, strict=True):
        for text_fields, binary_fields in zip(a, b, strict=True):
            for name in ("_state", "started_at"):  # the model's own state; a new start's time
                text_fields.pop(name, None), binary_fields.pop(name, None)
            assert binary_fields == text_fields


def test_start_run_refuses_a_stale_attempt(make_run):
    run = make_run(attempt=2)

    assert execution.start_run(run.id, 1, worker="w") is None
    assert execution.start_run(run.id, 2, worker="w") is not None
    assert execution.start_run(run.id, 2, worker="w") is None


def test_a_failing_run_with_attempts_left_waits_to_retry(make_job, make_run):
    run = make_run(make_job(task_name="scheduler_app.fail", max_attempts=3, retry_backoff_seconds=10))

    outcome = execution.execute_run(run.id, 1, worker="w")

    run.refresh_from_db()
    assert (outcome.state, run.state) == ("retrying", "retrying")
    assert "RuntimeError: scheduler_app.fail always fails" in run.error
    delay = (run.next_attempt_at - run.finished_at).total_seconds()
    assert 9 <= delay <= 11  # 10 s base, +/-10% jitter


def test_a_failure_on_the_last_attempt_is_dead(make_job, make_run):
    run = make_run(make_job(task_name="scheduler_app.fail", max_attempts=2), attempt=2)

    assert execution.execute_run(run.id, 2, worker="w").state == "dead"
    run.refresh_from_db()
    assert run.state == "dead" and run.next_attempt_at is None


def test_a_task_not_allowed_fails_without_retrying(make_job, make_run, settings):
    settings.CRONFLEET_ALLOWED_TASKS = ["scheduler_app.fail"]
    run = make_run(make_job(task_name="scheduler_app.echo", max_attempts=5))

    outcome = execution.execute_run(run.id, 1, worker="w")

    run.refresh_from_db()
    assert (outcome.state, run.state) == ("failed", "failed")
    assert "not in CRONFLEET_ALLOWED_TASKS" in run.error


def test_a_write_from_a_superseded_attempt_is_rejected(make_run):
    run = make_run()
    started = execution.start_run(run.id, 1, worker="old")
    JobRun.objects.filter(id=run.id).update(state=RunState.QUEUED, attempt=2)  # re-claimed meanwhile

    assert execution.finish_run(started, "late").state == "stale"

    run.refresh_from_db()
    assert (run.state, run.attempt, run.result) == ("queued", 2, "")
    assert AuditEvent.objects.filter(run_id=run.id, action="run.stale_write_rejected").exists()


def test_requeue_moves_due_retries_back_to_queued_as_the_next_attempt(make_run):
    from scheduler_app import dispatch

    due = make_run(state=RunState.RETRYING, next_attempt_at=NOW - timedelta(seconds=1))
    later = make_run(
        state=RunState.RETRYING, scheduled_at=utc(2024, 1, 1, 0, 1), next_attempt_at=NOW + timedelta(seconds=30)
    )

    messages = dispatch.recovery.requeue_due_retries(NOW, limit=10)

    assert [(m.run_id, m.attempt) for m in messages] == [(due.id, 2)]
    due.refresh_from_db()
    later.refresh_from_db()
    assert (due.state, due.attempt, later.state) == ("queued", 2, "retrying")
