"""Per-tenant dispatch quotas end to end, with a real beat and a real worker: a quota tenant's
excess waits, as `pending`, while another tenant's runs start on time.
"""

from datetime import timedelta

import pytest

from scheduler_app.dispatch.quotas import QUOTA_WINDOW
from scheduler_app.models import AuditEvent, db_now
from tests.conftest import wait_for
from tests.integration.dispatch.test_quotas import make_tenant, one_offs, runs_of
from tests.unit.dispatch.test_quotas import FIRES


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_quota_tenants_excess_waits_while_another_tenants_runs_start_on_time(make_job, processes, queue_name):
    a = make_tenant("quota-a", max_fires_per_minute=3)
    b = make_tenant("quota-b")
    at = (db_now() + timedelta(seconds=5)).replace(microsecond=0)
    one_offs(make_job, a, 8, at=at, queue=queue_name)
    one_offs(make_job, b, 6, at=at, queue=queue_name)
    processes.worker(queue_name, concurrency=4)
    processes.beat("beat", "--max-sleep", "1")

    wait_for(
        lambda: runs_of(b).filter(state="succeeded").count() == 6 and runs_of(a).filter(state="succeeded").count() == 3,
        timeout=90,
        what="b's six runs and three of a's to succeed",
    )

    lags = [(r.started_at - r.scheduled_at).total_seconds() for r in runs_of(b)]
    print(f"b's start lag: max {max(lags):.2f} s")
    # a's excess waits for room in the quota's window: b's runs held behind it would start a
    # window late, so b's lag must stay well under that wait, however loaded the machine.
    assert max(lags) < QUOTA_WINDOW.total_seconds() / 2, lags
    a_runs = list(runs_of(a))
    held = [r for r in a_runs if r.state == "pending"]
    assert len(a_runs) == 8 and len(held) == 5
    assert {(r.reason, r.dispatched_at, r.started_at) for r in held} == {(FIRES.format(3), None, None)}
    dispatched = [r.dispatched_at for r in a_runs if r.dispatched_at is not None]
    assert len(dispatched) == 3 and db_now() - min(dispatched) < timedelta(seconds=60)  # still the same minute
    assert not AuditEvent.objects.filter(run_id__in=[r.id for r in held]).exists()  # never started
