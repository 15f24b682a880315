"""Every execute_run message is named after its job (`tenant/job`, Celery's shadow name, as
Flower shows it), read from the broker (Redis). What a real Flower shows is tested in
tests/system/observability/test_flower.py."""

from __future__ import annotations

from datetime import timedelta

from scheduler_app import dispatch
from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.models import celery_task_id
from tests.conftest import NOW, take_broker_messages, utc

# --- the shadow name ------------------------------------------------------------------------


def test_a_published_message_is_named_after_its_tenant_and_job(make_job, queue_name):
    job = make_job(name="nightly-report", queue=queue_name)

    publish_runs([RunMessage.of(41, 2, job)])

    [message] = take_broker_messages(queue_name)
    assert message["headers"]["shadow"] == f"{job.tenant.slug}/nightly-report"
    assert (message["headers"]["task"], message["headers"]["id"], message["args"]) == (
        "scheduler_app.execute_run",
        celery_task_id(41, 2),
        [41, 2],
    )


def test_the_beats_messages_carry_the_job_name_from_the_claim(make_job, queue_name):
    job = make_job(name="every-minute", queue=queue_name, next_run_at=utc(2024, 1, 1))

    result = dispatch.dispatch_due_jobs(NOW, limit=10, grace=timedelta(seconds=60))
    publish_runs(result.messages)

    [message] = take_broker_messages(queue_name)
    assert message["headers"]["shadow"] == f"{job.tenant.slug}/every-minute"


def test_a_message_without_a_job_keeps_the_tasks_own_name(db, queue_name):
    publish_runs([RunMessage(7, 1, queue_name, 60)])

    [message] = take_broker_messages(queue_name)
    assert message["headers"]["shadow"] is None  # Celery shows scheduler_app.execute_run
