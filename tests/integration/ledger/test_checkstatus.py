"""A monitored job's check-in status (ledger/checkstatus.py) read from real runs, as the admin's
job list, the check-ins page, the API and /metrics show it; the pure decision on a pinned
clock: tests/unit/ledger/test_checkstatus.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from scheduler_app import services
from scheduler_app.ledger import checkstatus
from scheduler_app.models import Job, JobRun, Tenant, db_now
from tests.integration.api.test_api import client_for
from tests.integration.dispatch.test_checkins import fire_now, key_of, monitored, ping


@pytest.fixture
def tenant(db) -> Tenant:
    return services.tenant_create(slug="ops", name="Ops")


def one_of_each(tenant: Tenant) -> dict[str, Job]:
    """A monitored job in each status: new, up, late, down, paused. Only fire_now() makes one
    due (each is put a day off before and after), so no turn fires another whatever minute
    the clock crosses meanwhile."""
    client = Client()
    jobs = {status: monitored(tenant, f"check-{status}") for status in checkstatus.STATUSES}
    put_off(*jobs.values())
    for status in ("up", "late", "down", "paused"):
        fire_now(jobs[status])
        put_off(jobs[status])
    assert ping(Client(), key_of(jobs["up"]), body=b"all good <b>").status_code == 200
    assert ping(client, key_of(jobs["down"]), "2", body=b"disk full").status_code == 200
    services.job_pause(jobs["paused"], note="holiday")
    return jobs


def put_off(*jobs: Job) -> None:
    Job.objects.filter(id__in=[job.id for job in jobs]).update(next_run_at=db_now() + timedelta(days=1))


def statuses(tenant: Tenant) -> dict[str, str | None]:
    now = db_now()
    jobs = checkstatus.with_check_fields(Job.objects.filter(tenant=tenant))
    return {job.name: checkstatus.status_of(job, now) for job in jobs}


def test_each_status_is_read_from_the_jobs_runs_in_one_statement(tenant, django_assert_num_queries):
    one_of_each(tenant)
    services.job_create(tenant, services.JobSpec(name="plain", task_name="scheduler_app.echo", every=60))

    with django_assert_num_queries(2):  # the clock and the jobs with their latest check-in runs
        found = statuses(tenant)

    assert found == {f"check-{status}": status for status in checkstatus.STATUSES} | {"plain": None}


def test_a_check_goes_down_late_and_up_as_its_fires_come_and_its_pings_answer(tenant):
    job = monitored(tenant, "nightly")
    first = fire_now(job)
    assert statuses(tenant)["nightly"] == "late"
    ping(Client(), key_of(job), "fail")
    assert statuses(tenant)["nightly"] == "down"

    JobRun.objects.filter(id=first.id).update(scheduled_at=first.scheduled_at - timedelta(minutes=1))
    Job.objects.filter(id=job.id).update(next_run_at=None)
    fire_now(job)  # the next fire: waiting for its ping
    assert statuses(tenant)["nightly"] == "late"

    ping(Client(), key_of(job))
    assert statuses(tenant)["nightly"] == "up"


def test_the_api_shows_checkin_status_on_monitored_jobs_only(tenant):
    jobs = one_of_each(tenant)
    services.job_create(tenant, services.JobSpec(name="plain", task_name="scheduler_app.echo", every=60))
    api = client_for(tenant)

    listed = api.get("/api/v1/jobs/").json()["results"]
    one = api.get(f"/api/v1/jobs/{jobs['down'].id}/").json()
    schema = api.get("/api/schema/?format=json").json()

    assert {job["name"]: job["checkin_status"] for job in listed} == {
        f"check-{status}": status for status in checkstatus.STATUSES
    } | {"plain": None}
    assert one["checkin_status"] == "down"
    field = schema["components"]["schemas"]["Job"]["properties"]["checkin_status"]
    assert field["readOnly"] is True and "late" in str(field)


def test_the_jobs_list_computes_the_status_without_a_query_per_job(tenant, django_assert_max_num_queries):
    for index in range(12):
        monitored(tenant, f"many-{index}")
    api = client_for(tenant)
    api.get("/api/v1/jobs/")  # warm: the key's lookups

    with django_assert_max_num_queries(30) as captured:
        listed = api.get("/api/v1/jobs/?limit=100").json()["results"]

    assert [job["checkin_status"] for job in listed] == ["new"] * 12
    statements = [query["sql"] for query in captured.captured_queries]
    assert sum("scheduler_app_jobrun" in sql for sql in statements) <= 1, statements


def test_metrics_count_the_checks_by_status(tenant, client, settings):
    one_of_each(tenant)
    monitored(tenant, "another-new")
    other = services.tenant_create(slug="other", name="Other")
    monitored(other, "theirs")

    def scraped() -> dict[tuple, float]:
        text = client.get("/metrics").content.decode()
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name.startswith(("cronfleet_checks", "cronfleet_tenant_checks"))
        }

    found = scraped()
    assert {labels[0][1]: value for (name, labels), value in found.items()} == {
        "new": 3,
        "up": 1,
        "late": 1,
        "down": 1,
        "paused": 1,
    }
    settings.CRONFLEET_METRICS_TENANT_LABELS = True
    by_tenant = {labels: value for (name, labels), value in scraped().items() if name == "cronfleet_tenant_checks"}
    assert by_tenant[(("status", "new"), ("tenant", "other"))] == 1
    assert by_tenant[(("status", "new"), ("tenant", "ops"))] == 2
