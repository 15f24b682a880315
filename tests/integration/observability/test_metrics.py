"""Metrics (metrics.py, cluster.py, /metrics): what a beat turn and a delivery count, and the
cluster's gauges from the database and the broker. What needs neither:
tests/unit/observability/test_metrics.py; real beats and workers serving them (a prefork
worker through PROMETHEUS_MULTIPROC_DIR): tests/system/observability/test_metrics.py."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from celery.exceptions import Ignore
from prometheus_client.parser import text_string_to_metric_families

from scheduler_app import dispatch
from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.ledger import lags
from scheduler_app.models import JobRun, NodeKind, RunState, Tenant, Trigger, db_now
from scheduler_app.observability import cluster, metrics
from scheduler_app.observability.nodes import Registration
from scheduler_app.worker import delivery, execution
from tests.conftest import NOW, take_broker_messages, utc
from tests.support.observing import scraped, total
from tests.unit.observability.test_metrics import sample

# --- a beat turn ----------------------------------------------------------------------------


def test_a_dispatch_records_each_fires_queue_outcome_and_lag(make_job, make_run, queue_name):
    late = make_job(cron="* * * * *", next_run_at=utc(2023, 12, 31, 23, 58), queue=queue_name)  # 2 missed, 1 due
    busy = make_job(cron="* * * * *", next_run_at=utc(2024, 1, 1), queue=queue_name, overlap_policy="skip")
    make_run(busy, scheduled_at=utc(2023, 12, 31, 23, 59), state=RunState.RUNNING)
    quota = Tenant.objects.create(slug="quota-one", name="q", max_fires_per_minute=1)
    for name in ("first", "second"):
        make_job(tenant=quota, name=name, cron="* * * * *", next_run_at=utc(2024, 1, 1), queue=queue_name)

    result = dispatch.dispatch_due_jobs(NOW, limit=100, grace=timedelta(seconds=60))

    outcomes = sorted((queue, *metrics.fire_outcome(state, reason)) for queue, state, reason, _ in result.recorded)
    assert outcomes == sorted(
        [
            (queue_name, "skipped", "coalesced"),
            (queue_name, "skipped", "coalesced"),
            (queue_name, "queued", ""),
            (queue_name, "skipped", "overlap_skip"),  # busy
            (queue_name, "queued", ""),
            (queue_name, "held", "quota"),  # the quota tenant's two
        ]
    )
    lags = sorted(lag for _, state, _, lag in result.recorded if lag is not None)
    assert lags == [30.0, 30.0]  # NOW is 00:00:30; both queued fires are at 00:00:00
    assert late.id in JobRun.objects.filter(state="queued").values_list("job_id", flat=True)


# --- a delivery -----------------------------------------------------------------------------


def delivered(outcome, queue: str) -> None:
    metrics.observe_deliveries([outcome], queue, tenant_labels=True)


def test_a_delivery_counts_its_outcome_duration_and_start_lag_without_retry_backoff(make_job, make_run, queue_name):
    ok = make_job(queue=queue_name)
    failing = make_job(queue=queue_name, task_name="scheduler_app.fail", max_attempts=2)
    now = db_now()
    first = make_run(ok, scheduled_at=now - timedelta(seconds=100), enqueued_at=now - timedelta(seconds=90))
    retry = make_run(failing, scheduled_at=now - timedelta(hours=1), enqueued_at=now - timedelta(seconds=1), attempt=2)

    delivered(execution.execute_run(first.id, 1, worker="w"), queue_name)
    delivered(execution.execute_run(retry.id, 2, worker="w"), queue_name)
    delivered(execution.execute_run(first.id, 1, worker="w"), queue_name)  # delivered again

    assert sample("cronfleet_runs_finished_total", queue=queue_name, target="task", state="succeeded") == 1
    assert sample("cronfleet_runs_finished_total", queue=queue_name, target="task", state="dead") == 1
    assert sample("cronfleet_tenant_runs_finished_total", tenant=ok.tenant.slug, state="dead") >= 1
    assert sample("cronfleet_duplicate_deliveries_total", queue=queue_name) == 1
    assert sample("cronfleet_run_duration_seconds_count", queue=queue_name, target="task") == 2
    assert sample("cronfleet_start_lag_seconds_count", queue=queue_name) == 2
    # The first attempt waited ~100 s since its fire; the retry ~1 s since it was queued again,
    # not the hour since its fire: its backoff is not lag.
    assert sample("cronfleet_start_lag_seconds_bucket", queue=queue_name, le="2.0") == 1
    assert 100 <= sample("cronfleet_start_lag_seconds_sum", queue=queue_name) < 110


def fake_task(queue: str, run_id: int, attempt: int):
    request = SimpleNamespace(delivery_info={"routing_key": queue}, args=[run_id, attempt], id="t", hostname="w")
    return SimpleNamespace(
        request=request,
        app=SimpleNamespace(conf=SimpleNamespace(worker_send_task_events=False)),
        name="scheduler_app.execute_run",
    )


def test_report_returns_a_success_and_raises_for_what_is_not(make_job, make_run, queue_name, settings):
    settings.CRONFLEET_METRICS_TENANT_LABELS = False
    job = make_job(queue=queue_name, task_name="scheduler_app.fail", max_attempts=1)
    ok, bad = make_job(queue=queue_name), make_run(job)
    good = make_run(ok)

    assert delivery.report(fake_task(queue_name, good.id, 1), execution.execute_run(good.id, 1, worker="w")) == (
        "succeeded"
    )
    with pytest.raises(delivery.RunFailed, match=rf"^run {bad.id} attempt 1 dead: RuntimeError"):
        delivery.report(fake_task(queue_name, bad.id, 1), execution.execute_run(bad.id, 1, worker="w"))
    with pytest.raises(Ignore):
        delivery.report(fake_task(queue_name, good.id, 1), execution.execute_run(good.id, 1, worker="w"))
    with pytest.raises(delivery.RunFailed, match="no longer owns the run"):
        delivery.report(fake_task(queue_name, good.id, 1), execution.Outcome("stale"))

    assert sample("cronfleet_runs_finished_total", queue=queue_name, target="task", state="dead") == 1
    assert sample("cronfleet_duplicate_deliveries_total", queue=queue_name) == 1
    assert sample("cronfleet_stale_writes_refused_total", queue=queue_name) == 1
    assert sample("cronfleet_tenant_runs_finished_total", tenant=job.tenant.slug, state="dead") == 0  # setting off


def test_start_lag_in_python_and_in_sql_are_the_same_definition(make_job, make_run):
    job = make_job()
    now = db_now()
    runs = [
        make_run(job, scheduled_at=now - timedelta(seconds=50), enqueued_at=now - timedelta(seconds=45), attempt=1),
        make_run(job, scheduled_at=now - timedelta(seconds=40), enqueued_at=now - timedelta(seconds=5), attempt=3),
        make_run(
            job,
            scheduled_at=now - timedelta(days=3),
            enqueued_at=now - timedelta(seconds=20),
            attempt=1,
            trigger=Trigger.BACKFILL,
        ),
    ]
    JobRun.objects.filter(id__in=[run.id for run in runs]).update(started_at=now)

    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, {lags.START_LAG_SQL} FROM scheduler_app_jobrun ORDER BY id")
        in_sql = [float(lag) for _, lag in cursor.fetchall()]
    in_python = [
        lags.start_lag(
            attempt=run.attempt,
            trigger=run.trigger,
            scheduled_at=run.scheduled_at,
            enqueued_at=run.enqueued_at,
            started_at=now,
        )
        for run in runs
    ]

    assert in_sql == pytest.approx(in_python)
    assert in_python == pytest.approx([50.0, 5.0, 20.0])


# --- the cluster's gauges -------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_metrics_serves_the_clusters_gauges_from_the_database_and_the_broker(
    client, make_job, make_run, queue_name, settings
):
    settings.CRONFLEET_QUEUES = [queue_name]
    now = db_now()
    for minutes in (1, 5, 10):
        make_job(next_run_at=now - timedelta(minutes=minutes), queue=queue_name)
    make_job(next_run_at=now + timedelta(hours=1))  # not due
    make_job(next_run_at=now - timedelta(hours=9), enabled=False)  # paused: not due
    job = make_job(queue=queue_name, next_run_at=None)
    for n, (state, reason) in enumerate(
        [
            ("pending", "quota_concurrency: ..."),
            ("pending", "overlap_buffered: ..."),
            ("pending", "quota_fires_per_minute: ..."),
            ("queued", ""),
            ("running", ""),
        ]
    ):
        make_run(job, state=state, reason=reason, scheduled_at=now - timedelta(seconds=n))
    triggered = f"{queue_name}-x"  # a queue only a queued run names: no node, not configured
    make_run(make_job(queue=triggered, next_run_at=None), state="queued", scheduled_at=now)
    Registration(NodeKind.BEAT, "beat@here:1", stale_after=15).register()
    Registration(NodeKind.WORKER, "worker@here", stale_after=15, queues=[queue_name]).register()
    publish_runs([RunMessage(run_id, 1, queue_name, 60) for run_id in (901, 902)])
    publish_runs([RunMessage(903, 1, triggered, 60)])
    try:
        response = client.get("/metrics")
    finally:
        take_broker_messages(queue_name)
        take_broker_messages(triggered)

    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    found = scraped(response.content.decode())
    assert total(found, "cronfleet_due_jobs") == 3
    assert 600 <= total(found, "cronfleet_oldest_due_seconds") < 660
    assert total(found, "cronfleet_runs_waiting", reason="quota") == 2
    assert total(found, "cronfleet_runs_waiting", reason="overlap") == 1
    assert total(found, "cronfleet_runs_in_flight", state="queued") == 2
    assert total(found, "cronfleet_runs_in_flight", state="running") == 1
    assert total(found, "cronfleet_queue_depth", queue=queue_name) == 2
    assert total(found, "cronfleet_queue_workers", queue=queue_name) == 1
    assert total(found, "cronfleet_queue_workers", queue="cronfleet") == 0
    assert (
        total(found, "cronfleet_queue_depth", queue=triggered),
        total(found, "cronfleet_queue_workers", queue=triggered),
    ) == (1, 0)
    assert total(found, "cronfleet_nodes", kind="beat", state="live") == 1
    assert total(found, "cronfleet_nodes", kind="worker", state="live") == 1
    assert 0 <= total(found, "cronfleet_node_last_seen_seconds", kind="beat", node="beat@here:1") < 15
    assert total(found, "cronfleet_database_up") == total(found, "cronfleet_broker_up") == 1


def test_metrics_asks_for_the_token_when_one_is_set(client, db, settings):
    settings.CRONFLEET_METRICS_TOKEN = "s3cret-token"

    refused = client.get("/metrics")
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope")
    allowed = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token")

    assert (refused.status_code, wrong.status_code, allowed.status_code) == (401, 401, 200)


def test_every_name_the_web_exposes_is_the_cluster_collectors_or_the_webs_own(client, db):
    found = {family.name for family in text_string_to_metric_families(client.get("/metrics").content.decode())}

    assert found == cluster.NAMES | {family._name for family in metrics.WEB_FAMILIES}
