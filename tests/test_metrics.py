"""Metrics (metrics.py, cluster.py, /metrics): what a beat turn and a delivery count, the
cluster's gauges from the database and the broker, and real beats and workers serving them
(a prefork worker through PROMETHEUS_MULTIPROC_DIR)."""

from __future__ import annotations

import os
from datetime import timedelta
from types import SimpleNamespace

import pytest
from celery.exceptions import Ignore
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from scheduler_app import dispatch, services
from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.ledger import lags
from scheduler_app.models import Job, JobRun, NodeKind, RunState, Tenant, Trigger, db_now
from scheduler_app.observability import cluster, metrics
from scheduler_app.observability.nodes import Registration
from scheduler_app.worker import delivery, execution
from tests.conftest import NOW, take_broker_messages, utc, wait_for
from tests.support.observing import free_ports, scrape, scraped, start_worker, total


def sample(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


# --- pure ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("state", "reason", "labels"), [
    ("queued", "", ("queued", "")),
    ("skipped", "coalesced", ("skipped", "coalesced")),
    ("skipped", "overlap_skip: run 7 still running", ("skipped", "overlap_skip")),
    ("skipped", "outside_catchup_window: missed fires up to 2024-01-01T00:00:00+00:00",
     ("skipped", "outside_catchup_window")),
    ("pending", "quota_concurrency: waiting for room under the tenant's limit of 2 concurrent runs", ("held", "quota")),
    ("pending", "overlap_buffered: waiting for run 7 still running", ("held", "overlap")),
    ("skipped", "paused: missed fires from 2024-01-01T00:00:00+00:00", ("skipped", "paused")),
    ("skipped", "Something Else With 123 Digits", ("skipped", "other")),
])
def test_a_fires_labels_are_its_state_and_the_class_of_its_reason(state, reason, labels):
    assert metrics.fire_outcome(state, reason) == labels


def test_recorded_fires_leave_out_fires_that_already_had_a_run():
    rows = [dispatch.plan.RunRow(1, 1, NOW - timedelta(seconds=3), "queued", "", 1, 5),
            dispatch.plan.RunRow(2, 1, NOW - timedelta(seconds=9), "skipped", "coalesced", 1, 5),
            dispatch.plan.RunRow(2, 1, NOW - timedelta(seconds=1), "queued", "", 1, 5)]
    inserted = [(10, 1, "queued"), (11, 2, "skipped")]  # job 2's queued fire had a run already

    found = metrics.recorded_fires(rows, inserted, {1: {"queue": ""}, 2: {"queue": "q2"}}, NOW)

    assert found == [("cronfleet", "queued", "", 3.0), ("q2", "skipped", "coalesced", None)]


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
    assert outcomes == sorted([
        (queue_name, "skipped", "coalesced"), (queue_name, "skipped", "coalesced"), (queue_name, "queued", ""),
        (queue_name, "skipped", "overlap_skip"),  # busy
        (queue_name, "queued", ""), (queue_name, "held", "quota"),  # the quota tenant's two
    ])
    lags = sorted(lag for _, state, _, lag in result.recorded if lag is not None)
    assert lags == [30.0, 30.0]  # NOW is 00:00:30; both queued fires are at 00:00:00
    assert late.id in JobRun.objects.filter(state="queued").values_list("job_id", flat=True)


def test_observe_turn_counts_fires_lags_and_the_turns_other_figures(queue_name):
    before = {name: sample(name) for name in ("cronfleet_beat_turns_total", "cronfleet_runs_lost_total",
                                              "cronfleet_runs_republished_total", "cronfleet_runs_published_total")}
    turn = dispatch.TurnResult(published=3, lost=2, republished=1, held_back=[queue_name], recorded=[
        (queue_name, "queued", "", 0.2), (queue_name, "queued", "", 7.0), (queue_name, "skipped", "coalesced", None),
        (queue_name, "pending", "quota_fires_per_minute: ...", None)])

    metrics.observe_turn(turn, 0.04)

    assert sample("cronfleet_beat_turns_total") == before["cronfleet_beat_turns_total"] + 1
    assert sample("cronfleet_runs_lost_total") == before["cronfleet_runs_lost_total"] + 2
    assert sample("cronfleet_runs_republished_total") == before["cronfleet_runs_republished_total"] + 1
    assert sample("cronfleet_runs_published_total") == before["cronfleet_runs_published_total"] + 3
    assert sample("cronfleet_fires_total", queue=queue_name, outcome="queued", reason="") == 2
    assert sample("cronfleet_fires_total", queue=queue_name, outcome="skipped", reason="coalesced") == 1
    assert sample("cronfleet_fires_total", queue=queue_name, outcome="held", reason="quota") == 1
    assert sample("cronfleet_dispatch_lag_seconds_count", queue=queue_name) == 2
    assert sample("cronfleet_dispatch_lag_seconds_bucket", queue=queue_name, le="0.25") == 1
    assert sample("cronfleet_dispatch_lag_seconds_sum", queue=queue_name) == pytest.approx(7.2)
    assert sample("cronfleet_backpressure_holds_total", queue=queue_name) == 1


# --- a delivery -----------------------------------------------------------------------------


def delivered(outcome, queue: str) -> None:
    metrics.observe_delivery(outcome, queue, tenant_labels=True)


def test_a_delivery_counts_its_outcome_duration_and_start_lag_without_retry_backoff(make_job, make_run, queue_name):
    ok = make_job(queue=queue_name)
    failing = make_job(queue=queue_name, task_name="scheduler_app.fail", max_attempts=2)
    now = db_now()
    first = make_run(ok, scheduled_at=now - timedelta(seconds=100), enqueued_at=now - timedelta(seconds=90))
    retry = make_run(failing, scheduled_at=now - timedelta(hours=1), enqueued_at=now - timedelta(seconds=1),
                     attempt=2)

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
    return SimpleNamespace(request=request, app=SimpleNamespace(conf=SimpleNamespace(worker_send_task_events=False)),
                           name="scheduler_app.execute_run")


def test_report_returns_a_success_and_raises_for_what_is_not(make_job, make_run, queue_name, settings):
    settings.CRONFLEET_METRICS_TENANT_LABELS = False
    job = make_job(queue=queue_name, task_name="scheduler_app.fail", max_attempts=1)
    ok, bad = make_job(queue=queue_name), make_run(job)
    good = make_run(ok)

    assert delivery.report(fake_task(queue_name, good.id, 1), execution.execute_run(good.id, 1, worker="w")) == (
        "succeeded")
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
        make_run(job, scheduled_at=now - timedelta(days=3), enqueued_at=now - timedelta(seconds=20), attempt=1,
                 trigger=Trigger.BACKFILL),
    ]
    JobRun.objects.filter(id__in=[run.id for run in runs]).update(started_at=now)

    from django.db import connection
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, {lags.START_LAG_SQL} FROM scheduler_app_jobrun ORDER BY id")
        in_sql = [float(lag) for _, lag in cursor.fetchall()]
    in_python = [lags.start_lag(attempt=run.attempt, trigger=run.trigger, scheduled_at=run.scheduled_at,
                                 enqueued_at=run.enqueued_at, started_at=now) for run in runs]

    assert in_sql == pytest.approx(in_python)
    assert in_python == pytest.approx([50.0, 5.0, 20.0])


# --- the cluster's gauges -------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_metrics_serves_the_clusters_gauges_from_the_database_and_the_broker(client, make_job, make_run, queue_name,
                                                                           settings):
    settings.CRONFLEET_QUEUES = [queue_name]
    now = db_now()
    for minutes in (1, 5, 10):
        make_job(next_run_at=now - timedelta(minutes=minutes), queue=queue_name)
    make_job(next_run_at=now + timedelta(hours=1))  # not due
    make_job(next_run_at=now - timedelta(hours=9), enabled=False)  # paused: not due
    job = make_job(queue=queue_name, next_run_at=None)
    for n, (state, reason) in enumerate([("pending", "quota_concurrency: ..."), ("pending", "overlap_buffered: ..."),
                                         ("pending", "quota_fires_per_minute: ..."), ("queued", ""), ("running", "")]):
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
    assert (total(found, "cronfleet_queue_depth", queue=triggered), total(found, "cronfleet_queue_workers",
                                                                         queue=triggered)) == (1, 0)
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


def test_every_name_the_cluster_collector_exposes_is_listed(client, db):
    found = {family.name for family in text_string_to_metric_families(client.get("/metrics").content.decode())}

    assert found == cluster.NAMES


# --- real processes -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("directory", ["given", "its own"])
@pytest.mark.django_db(transaction=True)
def test_a_real_beat_and_a_prefork_worker_serve_counts_that_match_the_ledger(tenant, processes, queue_name,
                                                                              tmp_path, directory):
    beat_port, worker_port = free_ports(2)
    multiproc = tmp_path / "worker-metrics"
    env = {"PROMETHEUS_MULTIPROC_DIR": str(multiproc)} if directory == "given" else {}
    ok = services.job_create(tenant, services.JobSpec(name="ok", task_name="scheduler_app.echo", every=1,
                                                      queue=queue_name))
    bad = services.job_create(tenant, services.JobSpec(name="bad", task_name="scheduler_app.fail", every=3600,
                                                       queue=queue_name, max_attempts=1))
    worker = start_worker(processes, queue_name, "worker", "--metrics-port", str(worker_port), "--metrics-address",
                          "127.0.0.1", **env)
    processes.beat("beat", "--max-sleep", "1", "--metrics-port", str(beat_port), "--metrics-address", "127.0.0.1")
    services.job_trigger(bad, actor="test")

    wait_for(lambda: JobRun.objects.filter(job=ok, state="succeeded").count() >= 3
             and JobRun.objects.filter(job=bad, state="dead").exists(), timeout=60, what="runs to finish")
    services.job_pause(Job.objects.get(id=ok.id), note="enough", actor="test")
    ledger = lambda: (JobRun.objects.filter(job=ok, state="succeeded").count(),  # noqa: E731
                      JobRun.objects.filter(job=bad, state="dead").count())

    def counts_match():
        found = scrape(f"http://127.0.0.1:{worker_port}/metrics")
        return (total(found, "cronfleet_runs_finished_total", queue=queue_name, state="succeeded"),
                total(found, "cronfleet_runs_finished_total", queue=queue_name, state="dead")) == ledger()

    wait_for(lambda: JobRun.objects.filter(job=ok, state__in=["queued", "running"]).count() == 0, timeout=30,
             what="the last runs to finish")
    wait_for(counts_match, timeout=30, what="the worker's counts to match the ledger")
    # The beat counts a turn's fires once the turn has committed and published them, so a fire
    # the ledger holds may be counted a moment later. A fire due as the job was paused is the
    # pause's to record (skipped, "paused: ..."), not the beat's.
    fires = lambda: JobRun.objects.filter(job=ok, trigger="schedule").exclude(state="skipped").count()  # noqa: E731
    wait_for(lambda: total(scrape(f"http://127.0.0.1:{beat_port}/metrics"), "cronfleet_fires_total", queue=queue_name,
                           outcome="queued") == fires(), timeout=30, what="the beat's fires to match the ledger")
    beat = scrape(f"http://127.0.0.1:{beat_port}/metrics")
    assert total(beat, "cronfleet_fires_total", queue=queue_name, outcome="queued") == fires()
    assert total(beat, "cronfleet_beat_turns_total") >= 1
    assert total(beat, "cronfleet_dispatch_lag_seconds_count", queue=queue_name) >= 3
    found = scrape(f"http://127.0.0.1:{worker_port}/metrics")
    assert total(found, "cronfleet_run_duration_seconds_count", queue=queue_name, target="task") == sum(ledger())
    assert total(found, "cronfleet_runs_in_progress", queue=queue_name) == 0
    if directory == "given":
        assert len({path.name.rsplit("_", 1)[-1] for path in multiproc.glob("*.db")}) >= 2  # each child its own
    else:  # a directory of the worker's own, gone with it
        own = [line for line in processes.log("worker").splitlines() if "metrics on http://" in line]
        assert own and "(processes of " in own[0], processes.log("worker")
        directory_of_its_own = own[0].rsplit("(processes of ", 1)[1].rstrip(")")
        processes.stop(worker)
        assert not os.path.exists(directory_of_its_own)


def test_a_forked_exporter_without_a_multiprocess_directory_is_refused(monkeypatch):
    monkeypatch.setattr(metrics, "MULTIPROC_DIR", "")

    with pytest.raises(metrics.MissingMultiprocDir, match="PROMETHEUS_MULTIPROC_DIR"):
        metrics.process_registry(forked=True)
    assert metrics.process_registry(forked=False) is REGISTRY
