"""Pauses from the command line: an end and what then, the paused jobs listed, and a bulk
pause over the threshold asked by one person and approved by another."""

from __future__ import annotations

import pytest

from scheduler_app import services
from scheduler_app.models import AuditEvent, Job, PauseRequest, PauseRequestState
from tests.support.cli import cli, run  # noqa: F401 (cli: a fixture)

TASK = "scheduler_app.echo"


@pytest.fixture
def acme(db):
    tenant = services.tenant_create(slug="acme", name="Acme")
    for name in ("a", "b", "c"):
        services.job_create(tenant, services.JobSpec(name=name, task_name=TASK, every=60, tags=["night"]))
    return tenant


def test_jobs_pause_for_a_while_then_resume_is_listed(acme):
    said = run(
        "jobs", "pause", "acme/a", "--note", "vendor down", "--for", "2h", "--on-expiry", "resume", "--by", "ann"
    )
    listed = run("jobs", "paused")

    job = Job.objects.get(name="a")
    assert said.startswith(f"Paused job {job.id} (acme/a) until ") and said.rstrip().endswith("then resume.")
    assert (job.paused_by, job.paused_note, job.pause_expiry) == ("cli:ann", "vendor down", "resume")
    header, rule, row = listed.splitlines()
    assert header.split() == ["id", "job", "paused", "by", "paused", "for", "until", "then", "why"]
    assert row.split()[:3] == [str(job.id), "acme/a", "cli:ann"] and row.rstrip().endswith("resume  vendor down")


def test_jobs_pause_without_by_records_cli_and_no_end(acme):
    run("jobs", "pause", "acme/b")

    job = Job.objects.get(name="b")
    assert (job.paused_by, job.paused_until, job.pause_expiry) == ("cli", None, "")
    assert "(no reason given)" in run("pauses", "list", "--tenant", "acme")


def test_a_bad_end_ends_the_command_naming_the_field(acme, cli):
    status, _, err = cli("jobs", "pause", "acme/a", "--for", "2 hours")

    assert status == 2 and err.startswith("jobs pause: for: ")
    assert Job.objects.get(name="a").enabled


def test_a_bulk_pause_over_the_threshold_is_approved_by_a_second_person(acme, settings, cli):
    settings.CRONFLEET_BULK_PAUSE_APPROVAL_OVER = 2

    asked = run("pauses", "tag", "acme", "night", "--note", "freeze", "--for", "1d", "--by", "ann")
    request = PauseRequest.objects.get()
    approve = asked.splitlines()[-1].split()  # ./manage.py pauses approve ID --fingerprint F
    waiting = run("pauses", "requests")
    own = cli("pauses", *approve[2:], "--by", "ann")
    done = run("pauses", *approve[2:], "--by", "bob")

    assert approve[:2] == ["./manage.py", "pauses"] and approve[2:4] == ["approve", str(request.id)]
    assert f"--fingerprint {request.fingerprint}" in asked
    assert request.fingerprint in waiting and "cli:ann" in waiting
    assert own[0] == 2 and own[2].startswith("pauses approve: actor: 'cli:ann' asked for this pause")
    assert done.strip() == f"Approved request {request.id}: paused 3 jobs."
    request.refresh_from_db()
    assert (request.state, request.decided_by) == (PauseRequestState.APPROVED, "cli:bob")
    assert set(Job.objects.values_list("paused_by", flat=True)) == {"cli:ann, approved by cli:bob"}
    assert AuditEvent.objects.filter(action="pause.approved", actor="cli:bob").count() == 1


def test_pauses_tenant_at_the_threshold_pauses_at_once_and_refuse_refuses(acme, settings):
    assert run("pauses", "tenant", "acme", "--by", "ann").strip() == "Paused 3 jobs of acme (every job of the tenant)."
    settings.CRONFLEET_BULK_PAUSE_APPROVAL_OVER = 0
    services.jobs_bulk(acme, tag="night", action="resume")
    run("pauses", "tenant", "acme", "--by", "ann")

    refused = run("pauses", "refuse", str(PauseRequest.objects.get().id), "--by", "bob")

    assert refused.startswith("Refused request")
    assert PauseRequest.objects.get().state == PauseRequestState.REFUSED
    assert "No bulk pause is waiting." in run("pauses", "requests")


def test_jobs_pause_of_a_paused_job_with_an_end_gives_it_that_end(acme):
    run("jobs", "pause", "acme/c", "--note", "waiting")

    said = run("jobs", "pause", "acme/c", "--for", "1d", "--on-expiry", "resume", "--by", "ann")

    job = Job.objects.get(name="c")
    assert "was already paused: it now stays paused until " in said and said.rstrip().endswith("then resume.")
    assert (job.paused_note, job.paused_by, job.pause_expiry) == ("waiting", "cli:ann", "resume")
