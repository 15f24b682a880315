"""Chains (docs/chains.md): a job that runs when a run of another job ends in a given state,
once per parent run, with the parent's fire key and run id passed to its target; no loops,
no chains across tenants; a chained job has no schedule of its own. A real beat and worker
running chains: tests/system/ledger/test_chains.py."""

from __future__ import annotations

import io
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from rest_framework.test import APIClient

from scheduler_app import services
from scheduler_app.dispatch import recovery
from scheduler_app.ledger import chains
from scheduler_app.models import Job, JobRun, RunState, Tenant, Trigger, db_now, fire_key
from scheduler_app.worker import execution, transitions
from tests.conftest import utc
from tests.support.admin import job_form

ECHO = "scheduler_app.echo"

YEARLY = "0 0 1 1 *"  # a parent whose own fires stay out of the way: its runs are triggered


def job(tenant, name, **fields) -> Job:
    fields.setdefault("task_name", ECHO)
    if not any(fields.get(key) for key in ("after_job", "every", "at")):
        fields.setdefault("cron", YEARLY)
    return services.job_create(tenant, services.JobSpec(name=name, **fields))


def queued_run(parent: Job, at=None) -> JobRun:
    return JobRun.objects.create(
        job=parent,
        tenant_id=parent.tenant_id,
        scheduled_at=at or utc(2024, 1, 1),
        created_at=utc(2024, 1, 1),
        state=RunState.QUEUED,
    )


def client_of(tenant) -> APIClient:
    _, raw = services.apikey_create(tenant=tenant, name="chains")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


# --- refused at save -----------------------------------------------------------------------


def test_a_loop_is_refused_at_save_naming_it(tenant):
    a = job(tenant, "a")
    job(tenant, "b", after_job="a")
    job(tenant, "c", after_job="b")

    with pytest.raises(services.InvalidInput, match=r"^after_job: makes a loop: a -> c -> b -> a$"):
        services.job_update(a, {"after_job": "c"})
    with pytest.raises(services.InvalidInput, match=r"^after_job: makes a loop: a -> a$"):
        services.job_update(a, {"after_job": "a"})
    a.refresh_from_db()
    assert a.after_job_id is None and a.cron == YEARLY


def test_a_parent_in_another_tenant_is_refused_naming_the_field(tenant):
    other = Tenant.objects.create(slug="other-chains", name="Other")
    job(other, "theirs")
    with pytest.raises(services.InvalidInput, match=r"^after_job: tenant '.*' has no job named 'theirs'"):
        job(tenant, "mine", after_job="theirs")
    theirs_id = Job.objects.get(tenant=other, name="theirs").id
    with pytest.raises(services.InvalidInput, match=rf"^after_job: tenant '.*' has no job with id {theirs_id}"):
        job(tenant, "mine", after_job=theirs_id)

    refused = client_of(tenant).post(
        "/api/v1/jobs/",
        {"name": "mine", "target": {"kind": "task", "task": ECHO}, "after_job": "theirs"},
        format="json",
    )
    assert refused.status_code == 400 and refused.json()["errors"][0]["field"] == "after_job"
    assert not Job.objects.filter(tenant=tenant).exists()


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"cron": "* * * * *"}, "cron", "a chained job (after_job) has no schedule of its own"),
        ({"every": 60}, "every", "has no schedule of its own"),
        ({"after_states": ["finished"]}, "after_states", "'finished' is not a state a chained job runs after"),
        ({"after_states": "failed"}, "after_states", "must be a list of: succeeded, failed, dead"),
    ],
)
def test_a_chained_job_with_a_schedule_or_unknown_states_is_refused_naming_the_field(tenant, fields, field, says):
    job(tenant, "parent")
    with pytest.raises(services.InvalidInput, match=f"^{field}: .*{re.escape(says)}"):
        job(tenant, "child", after_job="parent", **fields)


def test_after_states_without_a_parent_are_refused_and_default_to_succeeded(tenant):
    with pytest.raises(services.InvalidInput, match="^after_states: applies to a chained job only"):
        job(tenant, "lonely", after_states=["failed"])
    job(tenant, "parent")
    child = job(tenant, "child", after_job="parent")
    assert (child.after_states, child.next_run_at, child.cron) == (["succeeded"], None, "")
    assert Job.objects.get(name="parent", tenant=tenant).has_children is True


def test_a_chained_job_pauses_resumes_and_previews_without_fires(tenant):
    job(tenant, "parent")
    child = job(tenant, "child", after_job="parent")
    services.job_pause(child, note="a moment")
    child = services.job_resume(child)
    assert (child.enabled, child.next_run_at) == (True, None)
    assert services.job_preview(child, count=3) == []


def test_chaining_by_an_edit_drops_the_schedule_and_unchaining_asks_for_one(tenant):
    job(tenant, "parent")
    child = services.job_update(job(tenant, "child"), {"after_job": "parent", "after_states": ["dead", "failed"]})
    assert (child.after_states, child.cron, child.next_run_at) == (["failed", "dead"], "", None)

    with pytest.raises(services.InvalidInput, match="^schedule: give exactly one of cron, every or at"):
        services.job_update(child, {"after_job": ""})
    child = services.job_update(child, {"after_job": "", "cron": "*/5 * * * *"})
    assert (child.after_job_id, child.after_states, child.next_run_at is not None) == (None, [], True)
    assert Job.objects.get(name="parent", tenant=tenant).has_children is False


def test_the_cli_chains_and_unchains_a_job(tenant):
    job(tenant, "parent")
    out = io.StringIO()
    call_command(
        "jobs",
        "add",
        "--tenant",
        tenant.slug,
        "--name",
        "child",
        "--task",
        ECHO,
        "--after-job",
        "parent",
        "--after-states",
        "failed,dead",
        stdout=out,
    )
    child = Job.objects.get(tenant=tenant, name="child")
    assert (child.after_job.name, child.after_states, child.next_run_at) == ("parent", ["failed", "dead"], None)
    with pytest.raises(CommandError, match="after_job: makes a loop: parent -> child -> parent"):
        call_command("jobs", "edit", f"{tenant.slug}/parent", "--after-job", "child", "--yes", stdout=io.StringIO())
    call_command(
        "jobs", "edit", f"{tenant.slug}/child", "--after-job", "none", "--every", "60", "--yes", stdout=io.StringIO()
    )
    child.refresh_from_db()
    assert (child.after_job_id, child.every_seconds) == (None, 60)


def test_deleting_a_parent_is_refused_while_a_child_follows_it(tenant):
    parent = job(tenant, "parent")
    child = job(tenant, "child", after_job="parent")
    with pytest.raises(services.InvalidInput, match=r"^job: jobs run after it \(child\)"):
        services.job_delete(parent)
    services.job_delete(child)
    parent.refresh_from_db()
    assert parent.has_children is False
    services.job_delete(parent)


# --- once per parent run -------------------------------------------------------------------


def test_the_end_of_a_parent_delivered_twice_starts_one_child(tenant):
    parent = job(tenant, "parent")
    child = job(tenant, "child", after_job="parent")
    run = queued_run(parent)

    first = execution.execute_run(run.id, 1, worker="w1")
    second = execution.execute_run(run.id, 1, worker="w2")  # the same message again: refused at start

    assert (first.state, second.state) == ("succeeded", "duplicate")
    [started] = JobRun.objects.filter(job=child)
    assert (started.trigger, started.parent_run_id, started.scheduled_at) == (Trigger.CHAIN, run.id, run.scheduled_at)
    assert started.state == RunState.PENDING and started.reason.startswith("quota_chain: started by run")
    # The end statement itself, twice: the second is refused by its compare-and-set, and the
    # child's insert a second time (a replayed parent) is a no-op on (job, scheduled_at).
    again = queued_run(parent, at=utc(2024, 1, 2))
    owned = transitions.start_run(again.id, 1, worker="w1")
    assert transitions.end_run(owned, RunState.SUCCEEDED) is True
    assert transitions.end_run(owned, RunState.SUCCEEDED) is False
    chains.start_children([chains.Ended(again.id, parent.id, tenant.id, again.scheduled_at, "succeeded")])
    assert JobRun.objects.filter(job=child).count() == 2  # one per parent run
    assert fire_key(child.id, again.scheduled_at) in {r.fire_key for r in JobRun.objects.filter(job=child)}


def test_a_child_on_failed_starts_only_when_its_parent_fails(tenant):
    parent = job(tenant, "parent")
    on_failure = job(tenant, "on-failure", after_job="parent", after_states=["failed"])
    on_success = job(tenant, "on-success", after_job="parent")

    succeeded = transitions.start_run(queued_run(parent).id, 1, worker="w")
    transitions.end_run(succeeded, RunState.SUCCEEDED)
    failed = transitions.start_run(queued_run(parent, at=utc(2024, 1, 2)).id, 1, worker="w")
    transitions.end_run(failed, RunState.FAILED, error="boom")
    retrying = transitions.start_run(queued_run(parent, at=utc(2024, 1, 3)).id, 1, worker="w")
    transitions.end_run(retrying, RunState.RETRYING, delay=timedelta(seconds=5))

    assert list(JobRun.objects.filter(job=on_failure).values_list("parent_run_id", flat=True)) == [failed.run.id]
    assert list(JobRun.objects.filter(job=on_success).values_list("parent_run_id", flat=True)) == [succeeded.run.id]


def test_a_paused_child_records_its_run_skipped_and_a_busy_skip_child_too(tenant):
    parent = job(tenant, "parent")
    paused = job(tenant, "paused", after_job="parent")
    services.job_pause(paused, note="not now")
    busy = job(tenant, "busy", after_job="parent", overlap_policy="skip")
    JobRun.objects.create(
        job=busy, tenant=tenant, scheduled_at=utc(2023, 1, 1), created_at=utc(2023, 1, 1), state=RunState.RUNNING
    )

    execution.execute_run(queued_run(parent).id, 1, worker="w")

    assert JobRun.objects.get(job=paused).state == RunState.SKIPPED
    assert JobRun.objects.get(job=paused).reason.startswith("chain: job is paused")
    assert JobRun.objects.get(job=busy, trigger=Trigger.CHAIN).reason.startswith("chain: overlap_policy skip")


def test_a_run_the_beat_marks_dead_starts_its_dead_child(tenant):
    parent = job(tenant, "parent", max_attempts=1)
    on_dead = job(tenant, "on-dead", after_job="parent", after_states=["dead"])
    now = db_now()
    run = JobRun.objects.create(
        job=parent,
        tenant=tenant,
        scheduled_at=utc(2024, 1, 1),
        created_at=utc(2024, 1, 1),
        state=RunState.RUNNING,
        worker="gone",
        started_at=now - timedelta(minutes=5),
        lease_expires_at=now - timedelta(minutes=1),
    )

    assert recovery.mark_lost_runs(now, limit=100) == 1

    assert JobRun.objects.get(job=on_dead).parent_run_id == run.id


def test_the_end_of_a_job_without_children_costs_no_query(tenant):
    parent = job(tenant, "lonely")
    owned = transitions.start_run(queued_run(parent).id, 1, worker="w")
    assert owned.job.has_children is False
    with CaptureQueriesContext(connection) as queries:  # the end statement itself bypasses Django's cursor
        assert transitions.end_run(owned, RunState.SUCCEEDED)
    assert [q["sql"] for q in queries.captured_queries] == []


def test_the_api_shows_the_chain_on_the_job_and_the_parent_on_the_run(tenant):
    parent = job(tenant, "parent")
    child = job(tenant, "child", after_job="parent", after_states=["succeeded", "dead"])
    run = queued_run(parent)
    execution.execute_run(run.id, 1, worker="w")
    client = client_of(tenant)

    shown = client.get(f"/api/v1/jobs/{child.id}/").json()
    assert (shown["after_job"], shown["after_states"], shown["schedule"]) == ("parent", ["succeeded", "dead"], None)
    [listed] = client.get("/api/v1/runs/", {"job": child.id}).json()["results"]
    assert (listed["parent_run"], listed["trigger"]) == (run.id, "chain")


def test_the_job_page_shows_the_chain_and_a_run_page_its_parent(admin_client, settings, tenant):
    parent = job(tenant, "parent")
    child = job(tenant, "child", after_job="parent", after_states=["failed"])
    run = queued_run(parent)
    transitions.end_run(transitions.start_run(run.id, 1, worker="w"), RunState.FAILED, error="boom")
    child_run = JobRun.objects.get(job=child)

    page = admin_client.get(reverse("admin:scheduler_app_job_change", args=[parent.id])).content.decode()
    child_href = reverse("admin:scheduler_app_job_change", args=[child.id])
    assert f'Then: <a href="{child_href}">child</a> (on failed)' in page
    page = admin_client.get(reverse("admin:scheduler_app_job_change", args=[child.id])).content.decode()
    parent_href = reverse("admin:scheduler_app_job_change", args=[parent.id])
    assert f'Runs after <a href="{parent_href}">parent</a> ends failed' in page
    page = admin_client.get(reverse("admin:scheduler_app_jobrun_change", args=[child_run.id])).content.decode()
    assert f'<a href="{reverse("admin:scheduler_app_jobrun_change", args=[run.id])}">run {run.id}</a> of parent' in page
    page = admin_client.get(reverse("admin:scheduler_app_jobrun_change", args=[run.id])).content.decode()
    assert f"run {child_run.id}</a> of child" in page


def test_the_admin_forms_chain_a_job_within_its_tenant(admin_client, settings, tenant):
    parent = job(tenant, "parent")
    other = Tenant.objects.create(slug="other-admin", name="Other")
    foreign = job(other, "foreign")
    form = job_form(tenant, name="child", cron="", task_name=ECHO, after_states='["dead"]')

    refused = admin_client.post(reverse("admin:scheduler_app_job_add"), {**form, "after_job": foreign.pk})
    assert refused.status_code == 200 and "after_job" in refused.context["adminform"].form.errors
    saved = admin_client.post(reverse("admin:scheduler_app_job_add"), {**form, "after_job": parent.pk})
    assert saved.status_code == 302, saved.content.decode()[:2000]
    child = Job.objects.get(tenant=tenant, name="child")
    assert (child.after_job_id, child.after_states, child.next_run_at) == (parent.id, ["dead"], None)
