"""A tenant moved between two cells mid-stream, with real beats and workers in each (issue 28,
part 3): every-second jobs fire once a second throughout, the fires before the cut in the old
cell and those from it on in the new one, no second missed and none run twice.

The old cell is the test's own database and Redis; the new one a PostgreSQL cluster and a
redis-server of this test's own on free ports (tests/support/servers/), each cell with its beat and
its worker. The tenant is exported from the old cell (services/tenantmove.py) with a cut a few
seconds ahead and imported into the new one before it; the jobs post each fire to a loopback
receiver at a path naming the job, so its log counts each job's fires whichever cell ran them.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection

from scheduler_app import services
from scheduler_app.models import Job, JobRun, RunState, db_now
from scheduler_app.services import tenantmove
from tests.conftest import wait_for
from tests.faults.harness import CLUSTER_ENV, READY_LINE, START_TIMEOUT, STARTED_LINE, UNFINISHED
from tests.faults.receiver import Receiver
from tests.support import servers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.faults]
DATABASE = "cronfleet"
JOBS = 5  # every-second jobs of the moving tenant
BEFORE_CUT = 6  # seconds of fires in the old cell before the cut...
AFTER_CUT = 8  # ... and in the new one after it
DRAIN_TIMEOUT = 60


def start_cell(processes, name: str, queue: str, **env: str) -> None:
    """A beat and a worker on the database this process's connection points at now."""
    processes.worker(queue, name=f"{name}-worker", include="tests.faults.tasks", **{**CLUSTER_ENV, **env})
    processes.beat(f"{name}-beat", **{**CLUSTER_ENV, **env})
    wait_for(
        lambda: STARTED_LINE in processes.log(f"{name}-beat") and READY_LINE in processes.log(f"{name}-worker"),
        timeout=START_TIMEOUT,
        interval=0.1,
        what=f"the {name} cell's beat and worker",
    )


def drain(slug: str) -> list[tuple[str, object]]:
    """Pause the tenant's jobs in the cell this process points at, wait for its recorded runs to
    finish, and return them as (job name, fire time)."""
    connection.close()
    Job.objects.filter(tenant__slug=slug).update(enabled=False)
    wait_for(
        lambda: not JobRun.objects.filter(tenant__slug=slug, state__in=UNFINISHED).exists(),
        timeout=DRAIN_TIMEOUT,
        interval=0.3,
        what=f"{slug}'s runs to finish",
    )
    runs = JobRun.objects.filter(tenant__slug=slug)
    assert set(runs.values_list("state", flat=True)) <= {RunState.SUCCEEDED}, list(runs.values("state", "error"))
    return list(runs.values_list("job__name", "scheduled_at"))


def test_a_tenant_moved_mid_stream_fires_every_second_once_across_the_cut(processes, queue_name, settings):
    if servers.postgres_bindir() is None:
        pytest.skip("needs PostgreSQL's initdb, pg_ctl and postgres (CRONFLEET_TEST_PG_BINDIR)")
    # The import runs in this process and checks each job's task as the new cell's settings
    # allow, as the cells' processes do (CLUSTER_ENV).
    settings.CRONFLEET_ALLOWED_TASKS = [CLUSTER_ENV["CRONFLEET_ALLOWED_TASKS"]]
    slug = f"mover-{queue_name[-6:]}"
    with Receiver() as receiver, servers.private_postgres() as cluster, servers.private_redis() as broker:
        cluster.create_database(DATABASE)
        tenant = services.tenant_create(slug=slug, name="Mover")
        # Not due before the cells have started, however long that takes (moved to `begin` below):
        # 30 s ahead was passed once on a loaded machine, and the old cell fired from then on.
        first = (db_now() + timedelta(hours=1)).replace(microsecond=0)
        Job.objects.bulk_create(
            Job(
                tenant=tenant,
                name=f"every-second-{i}",
                task_name="faults.deliver",
                every_seconds=1,
                anchor_at=first,
                next_run_at=first,
                queue=queue_name,
                max_attempts=3,
                retry_backoff_seconds=1,
                kwargs={"url": f"{receiver.url}/every-second-{i}"},
            )
            for i in range(JOBS)
        )
        start_cell(processes, "old", queue_name)
        with servers.database_on(cluster.host, cluster.port, DATABASE):
            start_cell(processes, "new", queue_name, CELERY_BROKER_URL=broker.url())
        begin = (db_now() + timedelta(seconds=1)).replace(microsecond=0)
        Job.objects.filter(tenant=tenant).update(anchor_at=begin, next_run_at=begin)

        cut = db_now() + timedelta(seconds=BEFORE_CUT, milliseconds=500)  # off the jobs' grid
        written = []
        services.tenant_export(tenant, cut, write=written.append, actor="test")
        with servers.database_on(cluster.host, cluster.port, DATABASE, migrate=False):
            services.tenant_import(json.loads(tenantmove.dumps(written[0])), actor="test")
        assert db_now() < cut, "the move took longer than the lead before its cut"
        wait_for(
            lambda: db_now() >= cut + timedelta(seconds=AFTER_CUT),
            timeout=BEFORE_CUT + AFTER_CUT + 30,
            interval=0.2,
            what="the fires after the cut",
        )

        old = drain(slug)
        with servers.database_on(cluster.host, cluster.port, DATABASE, migrate=False):
            new = drain(slug)
            for name in ("new-beat", "new-worker"):  # before their database goes
                processes.stop(next(proc for proc_name, proc, _ in processes.procs if proc_name == name))
        deliveries = receiver.snapshot()

    assert all(fire < cut for _, fire in old), sorted(fire for _, fire in old if fire >= cut)
    assert all(fire >= cut for _, fire in new), sorted(fire for _, fire in new if fire < cut)
    assert not set(old) & set(new)
    for i in range(JOBS):
        name = f"every-second-{i}"
        fires = sorted(fire for job, fire in old + new if job == name)
        assert fires[0] == begin, (name, fires[:3])
        gaps = [(a, b) for a, b in zip(fires, fires[1:], strict=False) if b - a != timedelta(seconds=1)]
        assert not gaps, (name, gaps)  # one fire a second, across the cut
        assert fires[-1] >= cut + timedelta(seconds=AFTER_CUT / 2), (name, fires[-1])
    delivered = Counter((delivery.path.rsplit("/", 1)[-1], delivery.scheduled_at) for delivery in deliveries)
    assert delivered == Counter(old + new), "each recorded fire delivered once, none more"
    print(
        f"\ntenant move: {len(old)} fires in the old cell before the cut, {len(new)} in the new one after it, "
        f"0 missed, 0 twice, {JOBS} every-second jobs"
    )
