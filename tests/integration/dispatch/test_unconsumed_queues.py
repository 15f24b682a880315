"""A queue no live worker consumes: the sweep adds no copies of its runs, its runs expire
with reason no_consumer, and status, /metrics, the dashboard and the commands say so.

Against the real PostgreSQL and Redis; the consumers are the workers' node rows, as a real
worker writes them (observability/nodes.py)."""

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db.models.functions import Now
from django.urls import reverse

from scheduler_app import dispatch
from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.models import AuditEvent, JobRun, Node, NodeKind, RunState, db_now
from scheduler_app.observability import cluster
from scheduler_app.observability.nodes import Registration
from scheduler_app.queues import queue_depth
from tests.conftest import take_broker_messages, utc


@pytest.fixture
def broker_queue(queue_name):
    yield queue_name
    take_broker_messages(queue_name)


def queued_runs(make_run, job, count: int, *, published_ago: float) -> list[JobRun]:
    at = db_now() - timedelta(seconds=published_ago)
    return [
        make_run(job, scheduled_at=utc(2024, 1, 1) + timedelta(minutes=i), enqueued_at=at, dispatched_at=at)
        for i in range(count)
    ]


def worker_node(queue: str, *, seen_ago: float) -> Node:
    return Node.objects.create(
        kind=NodeKind.WORKER,
        name=f"w@{queue}",
        host="h",
        pid=1,
        queues=[queue],
        started_at=Now(),
        last_seen_at=db_now() - timedelta(seconds=seen_ago),
        stale_after_seconds=15,
    )


def test_the_sweep_publishes_no_copies_to_a_queue_no_live_worker_consumes(make_job, make_run, broker_queue, settings):
    """Issue 22 item 5: 100 runs made 400 messages in 15 minutes (a copy every dispatch timeout)."""
    settings.CRONFLEET_DISPATCH_TIMEOUT_SECONDS = 300
    job = make_job(queue=broker_queue, next_run_at=None)
    runs = queued_runs(make_run, job, 100, published_ago=0)
    publish_runs([RunMessage(run.id, 1, broker_queue, 60) for run in runs])
    worker_node(broker_queue, seen_ago=120)  # it consumed the queue once, and stopped heartbeating

    for _ in range(3):  # three dispatch timeouts
        JobRun.objects.filter(job=job).update(enqueued_at=db_now() - timedelta(seconds=301))
        assert publish_runs(dispatch.recovery.republish_stale_runs(db_now(), limit=500)) == 0

    assert queue_depth(broker_queue) == 100
    assert JobRun.objects.filter(job=job, state=RunState.QUEUED).count() == 100
    Registration(NodeKind.WORKER, "back@h", stale_after=15, queues=[broker_queue]).register()
    JobRun.objects.filter(job=job).update(enqueued_at=db_now() - timedelta(seconds=301))
    assert len(dispatch.recovery.republish_stale_runs(db_now(), limit=500)) == 100  # a live consumer: as before


def test_runs_of_a_queue_without_a_worker_for_the_expiry_are_skipped_with_a_reason(
    make_job, make_run, queue_name, settings
):
    settings.CRONFLEET_UNCONSUMED_EXPIRE_SECONDS = 60
    orphan, recent = f"{queue_name}-orphan", f"{queue_name}-recent"
    old = queued_runs(make_run, make_job(queue=orphan, next_run_at=None), 3, published_ago=400)
    young = queued_runs(make_run, make_job(queue=orphan, next_run_at=None), 1, published_ago=30)
    waiting = queued_runs(make_run, make_job(queue=recent, next_run_at=None), 2, published_ago=400)
    node = worker_node(recent, seen_ago=30)  # stale now, but seen within the expiry

    dispatch.recovery.republish_stale_runs(db_now(), limit=10)

    states = dict(JobRun.objects.values_list("id", "state"))
    assert {states[run.id] for run in old} == {RunState.SKIPPED}
    assert {states[run.id] for run in young + waiting} == {RunState.QUEUED}
    skipped = JobRun.objects.get(id=old[0].id)
    assert skipped.reason.startswith(f"no_consumer: no live worker consumed queue '{orphan}' for 60 s")
    assert skipped.finished_at is not None
    assert AuditEvent.objects.filter(action="run.no_consumer", run_id__in=[run.id for run in old]).count() == 3

    Node.objects.filter(id=node.id).update(last_seen_at=db_now() - timedelta(seconds=120))
    JobRun.objects.filter(id__in=[run.id for run in waiting]).update(enqueued_at=db_now() - timedelta(seconds=400))
    dispatch.recovery.republish_stale_runs(db_now(), limit=10)
    assert set(JobRun.objects.filter(id__in=[run.id for run in waiting]).values_list("state", flat=True)) == {
        RunState.SKIPPED
    }


def test_status_metrics_and_the_dashboard_name_a_queue_with_runs_and_no_live_worker(
    make_job, make_run, queue_name, admin_client
):
    orphan, served = f"{queue_name}-orphan", f"{queue_name}-served"
    queued_runs(make_run, make_job(queue=orphan, next_run_at=None), 2, published_ago=5)
    queued_runs(make_run, make_job(queue=served, next_run_at=None), 2, published_ago=5)
    Registration(NodeKind.WORKER, "w@h", stale_after=15, queues=[served]).register()

    out = StringIO()
    call_command("status", stdout=out)
    json_out = StringIO()
    call_command("status", "--json", stdout=json_out)
    families = {family.name: family for family in cluster.ClusterCollector().collect()}
    html = admin_client.get(reverse("cronfleet:dashboard")).content.decode()

    # Other tests leave messages on the default queue, which no worker consumes here either.
    warning = next(line for line in out.getvalue().splitlines() if line.startswith("NO LIVE WORKER for queue"))
    assert orphan in warning and served not in warning and "are not published again" in warning
    unconsumed = json.loads(json_out.getvalue())["unconsumed_queues"]
    assert orphan in unconsumed and served not in unconsumed
    samples = {s.labels["queue"]: s.value for s in families["cronfleet_queue_unconsumed"].samples}
    assert samples[orphan] == 1 and served not in samples
    shown = html.split('id="cf-unconsumed"')[1].split("</p>")[0]
    assert orphan in shown and served not in shown


def test_jobs_add_and_import_beat_warn_when_no_live_worker_consumes_the_queue(tenant, queue_name, settings):
    served = f"{queue_name}-served"
    Registration(NodeKind.WORKER, "w@h", stale_after=15, queues=[served]).register()
    settings.CELERY_BEAT_SCHEDULE = {
        "nightly": {"task": "scheduler_app.echo", "schedule": 60.0, "options": {"queue": queue_name}}
    }

    def add(name: str, queue: str) -> str:
        err = StringIO()
        call_command(
            "jobs",
            "add",
            "--tenant",
            tenant.slug,
            "--name",
            name,
            "--every",
            "60",
            "--task",
            "scheduler_app.echo",
            "--queue",
            queue,
            stdout=StringIO(),
            stderr=err,
        )
        return err.getvalue()

    orphaned, fine = add("orphaned", queue_name), add("fine", served)
    err = StringIO()
    call_command("import_beat", "--tenant", tenant.slug, "--from-settings", stdout=StringIO(), stderr=err)

    assert f"warning: no live worker consumes queue '{queue_name}'" in orphaned
    assert fine == ""
    assert f"import_beat: warning: no live worker consumes queue '{queue_name}'" in err.getvalue()
