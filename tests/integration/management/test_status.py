"""manage.py status: beats and workers, the due backlog, queue depths, lags, recent runs by
state and the failing jobs, as a table or JSON. Printing again and again (--watch) in a real
process is tested in tests/system/management/test_status.py."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.models import JobRun, Node, NodeKind, Trigger, db_now
from scheduler_app.observability.nodes import Registration
from tests.conftest import take_broker_messages


def status(*args: str) -> str:
    out = StringIO()
    call_command("status", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def cluster_state(make_job, make_run, tenant, queue_name, settings):
    """Two beats (one frozen), a worker on the test's queue, three due jobs, a message
    waiting, and an hour of runs: some succeeded with known lags, a flaky job's failures."""
    settings.CRONFLEET_QUEUES = [queue_name]
    now = db_now()
    Registration(NodeKind.BEAT, "beat@a:1", stale_after=15).register()
    frozen = Registration(NodeKind.BEAT, "beat@b:2", stale_after=15)
    frozen.register()
    Node.objects.filter(id=frozen.id).update(last_seen_at=now - timedelta(seconds=60))
    Registration(NodeKind.WORKER, "worker@c", stale_after=15, queues=[queue_name]).heartbeat("idle, 7 done")
    for minutes in (1, 2, 3):
        make_job(next_run_at=now - timedelta(minutes=minutes), queue=queue_name)
    ok = make_job(name="ok", next_run_at=None, queue=queue_name)
    flaky = make_job(name="flaky", next_run_at=None, queue=queue_name)
    for n in range(1, 5):  # dispatch lag n/10 s, start lag n s
        at = now - timedelta(minutes=n)
        make_run(
            ok,
            scheduled_at=at,
            state="succeeded",
            dispatched_at=at + timedelta(seconds=n / 10),
            enqueued_at=at + timedelta(seconds=n / 10),
            started_at=at + timedelta(seconds=n),
        )
    make_run(flaky, scheduled_at=now - timedelta(minutes=10), state="dead", error="RuntimeError: it broke")
    make_run(flaky, scheduled_at=now - timedelta(minutes=20), state="failed", error="http 404: gone")
    make_run(ok, scheduled_at=now - timedelta(hours=3), state="dead")  # outside the hour
    make_run(
        ok,
        scheduled_at=now - timedelta(seconds=30),
        state="succeeded",
        trigger=Trigger.BACKFILL,
        dispatched_at=now,
        started_at=now,
    )  # counted, but not in the lags
    publish_runs([RunMessage(999, 1, queue_name, 60)])
    yield {"tenant": tenant, "queue": queue_name}
    take_broker_messages(queue_name)


def test_status_shows_the_cluster_as_a_table(cluster_state):
    text = status()

    queue, slug = cluster_state["queue"], cluster_state["tenant"].slug
    assert "Beats: 1 live   Workers: 1 live" in text
    assert "beat@b:2" in text and "STALE" in text and "idle, 7 done" in text
    assert "Due: 3 jobs, oldest due 3.0 min ago" in text
    assert any(line.split()[:3] == [queue, "1", "1"] for line in text.splitlines())
    assert "Runs scheduled in the last hour: 5 succeeded, 1 failed, 1 dead; failure rate 28.6%" in text
    assert f"{slug}/flaky" in text and "RuntimeError: it broke" in text
    [dispatch] = [line.split() for line in text.splitlines() if line.startswith("dispatch ")]
    assert dispatch[1] == "4"  # the backfill has no lag


def test_status_json_has_the_same_figures(cluster_state):
    found = json.loads(status("--json"))

    assert found["live"] == {"beat": 1, "worker": 1}
    assert {node["name"]: node["state"] for node in found["nodes"]} == {
        "beat@a:1": "live",
        "beat@b:2": "stale",
        "worker@c": "live",
    }
    assert (found["due_jobs"], 180 <= found["oldest_due_seconds"] < 200) == (3, True)
    assert found["queues"][cluster_state["queue"]] == {"depth": 1, "live_workers": 1}
    assert found["runs"] == {"succeeded": 5, "failed": 1, "dead": 1}
    assert found["failure_rate"] == pytest.approx(2 / 7)
    assert found["dispatch_lag_seconds"]["count"] == 4
    assert found["dispatch_lag_seconds"]["p50"] == pytest.approx(0.25)
    assert found["start_lag_seconds"]["p99"] == pytest.approx(3.97)
    [flaky] = found["failing_jobs"]
    assert (flaky["job"], flaky["failed"], flaky["dead"], flaky["last_error"]) == (
        f"{cluster_state['tenant'].slug}/flaky",
        1,
        1,
        "RuntimeError: it broke",
    )


def test_status_costs_the_same_few_queries_however_many_runs_there_are(cluster_state, make_run):
    with CaptureQueriesContext(connection) as few:
        status("--json")
    JobRun.objects.bulk_create(
        [
            JobRun(
                job_id=JobRun.objects.first().job_id,
                tenant=cluster_state["tenant"],
                scheduled_at=db_now() - timedelta(seconds=n + 100),
                created_at=db_now(),
                state="succeeded",
            )
            for n in range(500)
        ]
    )
    with CaptureQueriesContext(connection) as many:
        status("--json")

    assert len(few) == len(many) <= 10
    assert not any(
        'scheduler_app_job"' in query["sql"] and "count(" in query["sql"].lower() and "next_run_at" not in query["sql"]
        for query in many.captured_queries
    )  # never counts all jobs


def test_status_says_when_no_beat_is_live(db):
    assert "NO LIVE BEAT" in status()


def test_status_refuses_a_watch_interval_that_is_not_positive(db):
    with pytest.raises(CommandError, match="--watch must be a positive"):
        status("--watch", "0")
