"""Every pause keeps who, why and until when; a large bulk pause waits for a second person
whose approval is bound to the exact set of jobs (services/pauses.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler_app import services
from scheduler_app.models import AuditEvent, Job, PauseRequest, PauseRequestState, db_now
from scheduler_app.services import pauses


@pytest.fixture
def over_two(settings):
    settings.CRONFLEET_BULK_PAUSE_APPROVAL_OVER = 2


def test_a_pause_keeps_who_why_when_and_until_when(make_job):
    until = db_now() + timedelta(hours=3)

    job = services.job_pause(make_job(), note="disk swap", actor="api:ann", until=until)

    assert (job.enabled, job.paused_note, job.paused_by, job.paused_until) == (False, "disk swap", "api:ann", until)
    assert job.pause_expiry == "alert" and job.paused_at is not None  # an end with no word on it alerts
    event = AuditEvent.objects.get(job=job, action="job.paused")
    assert event.detail == {"note": "disk swap", "until": until.isoformat(), "on_expiry": "alert"}


@pytest.mark.parametrize(
    ("until", "on_expiry", "field"),
    [(timedelta(hours=-1), "", "until"), (None, "resume", "on_expiry"), (timedelta(days=400), "", "until")],
)
def test_a_pause_with_an_end_that_makes_no_sense_is_refused_naming_the_field(make_job, until, on_expiry, field):
    job = make_job()

    with pytest.raises(services.InvalidInput) as refused:
        services.job_pause(job, until=until and db_now() + until, on_expiry=on_expiry)

    assert refused.value.field == field
    job.refresh_from_db()
    assert job.enabled


def test_resume_clears_the_pause(make_job):
    job = services.job_pause(make_job(), note="x", actor="cli", until=db_now() + timedelta(hours=1))

    job = services.job_resume(job, actor="cli")

    assert (job.paused_by, job.paused_at, job.paused_until, job.pause_expiry) == ("", None, None, "")


def test_a_bulk_pause_at_the_threshold_pauses_at_once(make_job, tenant, over_two):
    for _ in range(2):
        make_job(tags=["night"])

    done = services.jobs_bulk(tenant, tag="night", action="pause", note="freeze", actor="api:ann")

    assert (done.count, done.request) == (2, None)
    assert set(Job.objects.values_list("paused_by", "paused_note")) == {("api:ann", "freeze")}


def test_a_bulk_pause_over_the_threshold_waits_for_a_second_person(make_job, tenant, over_two):
    ids = sorted(make_job(tags=["night"]).id for _ in range(3))
    make_job(tags=["day"])

    done = services.jobs_bulk(tenant, tag="night", action="pause", note="freeze", actor="api:ann")

    assert done.count == 0 and done.request is not None
    assert done.request.job_ids == ids and done.request.state == PauseRequestState.PENDING
    assert not Job.objects.filter(enabled=False).exists()  # nothing paused yet
    approved = pauses.pause_request_approve(done.request, fingerprint=done.request.fingerprint, actor="api:bob")
    assert approved.count == 3
    assert sorted(Job.objects.filter(enabled=False).values_list("id", flat=True)) == ids
    assert set(Job.objects.filter(enabled=False).values_list("paused_by", flat=True)) == {
        "api:ann, approved by api:bob"
    }
    request = PauseRequest.objects.get()
    assert (request.state, request.decided_by) == (PauseRequestState.APPROVED, "api:bob")


def test_the_person_who_asked_cannot_approve(make_job, tenant, over_two):
    for _ in range(3):
        make_job(tags=["night"])
    waiting = pauses.pause_bulk(tenant, scope="tag:night", actor="api:ann").request
    assert waiting is not None

    with pytest.raises(services.InvalidInput) as refused:
        pauses.pause_request_approve(waiting, fingerprint=waiting.fingerprint, actor="api:ann")

    assert refused.value.field == "actor"
    assert not Job.objects.filter(enabled=False).exists()


def test_an_approval_naming_another_fingerprint_is_refused(make_job, tenant, over_two):
    for _ in range(3):
        make_job(tags=["night"])
    waiting = pauses.pause_bulk(tenant, scope="tenant", actor="api:ann").request
    assert waiting is not None

    with pytest.raises(services.InvalidInput) as refused:
        pauses.pause_request_approve(waiting, fingerprint="0" * 16, actor="api:bob")

    assert refused.value.field == "fingerprint"


@pytest.mark.parametrize("change", ["added", "resumed elsewhere", "paused meanwhile"])
def test_an_approval_is_refused_when_the_set_of_jobs_changed(make_job, tenant, over_two, change):
    jobs = [make_job(tags=["night"]) for _ in range(3)]
    waiting = pauses.pause_bulk(tenant, scope="tag:night", actor="api:ann").request
    assert waiting is not None
    if change == "added":
        make_job(tags=["night"])
    elif change == "paused meanwhile":
        services.job_pause(jobs[0], actor="cli")
    else:
        Job.objects.filter(id=jobs[1].id).update(tags=["day"])  # retagged: out of the set

    with pytest.raises(services.InvalidInput) as refused:
        pauses.pause_request_approve(waiting, fingerprint=waiting.fingerprint, actor="api:bob")

    assert refused.value.field == "fingerprint" and "changed" in refused.value.message
    assert Job.objects.filter(enabled=False).count() == (1 if change == "paused meanwhile" else 0)
    waiting.refresh_from_db()
    assert waiting.state == PauseRequestState.PENDING


def test_a_decided_request_cannot_be_approved_again(make_job, tenant, over_two):
    for _ in range(3):
        make_job()
    waiting = pauses.pause_bulk(tenant, scope="tenant", actor="api:ann").request
    assert waiting is not None
    pauses.pause_request_refuse(waiting, actor="api:bob")

    with pytest.raises(services.InvalidInput) as refused:
        pauses.pause_request_approve(waiting, fingerprint=waiting.fingerprint, actor="api:carol")

    assert refused.value.field == "request"


def test_another_tenants_request_is_not_there(make_job, tenant, over_two):
    for _ in range(3):
        make_job()
    waiting = pauses.pause_bulk(tenant, scope="tenant", actor="api:ann").request
    other = services.tenant_create(slug="other", name="Other")
    assert waiting is not None

    with pytest.raises(services.InvalidInput) as refused:
        pauses.pause_request_approve(waiting, fingerprint=waiting.fingerprint, actor="api:bob", tenant=other)

    assert refused.value.field == "request"


def test_paused_jobs_lists_the_longest_paused_first(make_job):
    first = services.job_pause(make_job(), note="a", actor="cli")
    second = services.job_pause(make_job(), note="b", actor="cli")
    make_job()

    assert list(services.paused_jobs()) == [first, second]
