"""Pauses over the API: an end and what then, the paused jobs listed with why, who and
how long, and a bulk pause over the threshold approved by a second key."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler_app import services
from scheduler_app.models import Job, db_now
from tests.integration.api.test_api import client_for, errors_of, make_tenant


@pytest.fixture
def tenant(db):
    return make_tenant()


@pytest.fixture
def jobs(tenant) -> list[Job]:
    return [
        services.job_create(
            tenant, services.JobSpec(name=f"n{i}", task_name="scheduler_app.echo", every=60, tags=["night"])
        )
        for i in range(3)
    ]


def test_a_pause_with_an_end_is_listed_with_why_who_and_how_long(tenant, jobs):
    api = client_for(tenant)
    until = (db_now() + timedelta(hours=6)).isoformat()

    paused = api.post(
        f"/api/v1/jobs/{jobs[0].id}/pause/", {"note": "disk swap", "until": until, "on_expiry": "resume"}, format="json"
    )
    listed = api.get("/api/v1/paused/")

    assert paused.status_code == 200, paused.content
    assert paused.json()["paused_by"] == f"api:{api.key.prefix}" and paused.json()["pause_expiry"] == "resume"
    (row,) = listed.json()["results"]
    assert (row["id"], row["paused_note"], row["paused_by"], row["pause_expiry"]) == (
        jobs[0].id,
        "disk swap",
        f"api:{api.key.prefix}",
        "resume",
    )
    assert row["paused_for_seconds"] >= 0 and row["expired"] is False and row["paused_until"] is not None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"until": "2020-01-01T00:00:00Z"}, "until"),
        ({"on_expiry": "resume"}, "on_expiry"),
        ({"until": "2030-01-01T00:00:00"}, "until"),
        ({"on_expiry": "explode"}, "on_expiry"),
    ],
)
def test_a_pause_with_a_bad_end_is_refused_naming_the_field(tenant, jobs, body, field):
    response = client_for(tenant).post(f"/api/v1/jobs/{jobs[0].id}/pause/", body, format="json")

    assert response.status_code == 400 and field in errors_of(response), response.content
    assert Job.objects.get(id=jobs[0].id).enabled


def test_a_bulk_pause_over_the_threshold_waits_for_a_second_key(tenant, jobs, settings):
    settings.CRONFLEET_BULK_PAUSE_APPROVAL_OVER = 2
    ann, bob = client_for(tenant), client_for(tenant)

    asked = ann.post("/api/v1/jobs/bulk/", {"tag": "night", "action": "pause", "note": "freeze"}, format="json")
    request_id, fingerprint = asked.json()["request"], asked.json()["fingerprint"]
    listed = bob.get("/api/v1/pause-requests/")
    own = ann.post(f"/api/v1/pause-requests/{request_id}/approve/", {"fingerprint": fingerprint}, format="json")
    wrong = bob.post(f"/api/v1/pause-requests/{request_id}/approve/", {"fingerprint": "0" * 16}, format="json")
    approved = bob.post(f"/api/v1/pause-requests/{request_id}/approve/", {"fingerprint": fingerprint}, format="json")

    assert asked.status_code == 202 and asked.json()["count"] == 0, asked.content
    assert [(r["id"], r["state"], r["jobs"]) for r in listed.json()["results"]] == [(request_id, "pending", 3)]
    assert own.status_code == 400 and "actor" in errors_of(own)
    assert wrong.status_code == 400 and "fingerprint" in errors_of(wrong)
    assert approved.status_code == 200 and approved.json()["state"] == "approved", approved.content
    assert approved.json()["decided_by"] == f"api:{bob.key.prefix}"
    assert not Job.objects.filter(tenant=tenant, enabled=True).exists()


def test_an_approval_after_the_set_changed_is_refused(tenant, jobs, settings):
    settings.CRONFLEET_BULK_PAUSE_APPROVAL_OVER = 2
    ann, bob = client_for(tenant), client_for(tenant)
    asked = ann.post("/api/v1/pauses/", {"note": "datacenter move"}, format="json").json()
    services.job_create(tenant, services.JobSpec(name="late", task_name="scheduler_app.echo", every=60))

    refused = bob.post(
        f"/api/v1/pause-requests/{asked['request']}/approve/", {"fingerprint": asked["fingerprint"]}, format="json"
    )

    assert asked["scope"] == "tenant"
    assert refused.status_code == 400 and "changed" in errors_of(refused)["fingerprint"]
    assert not Job.objects.filter(tenant=tenant, enabled=False).exists()


def test_pausing_a_tag_at_the_threshold_pauses_at_once(tenant, jobs):
    done = client_for(tenant).post("/api/v1/pauses/", {"tag": "night"}, format="json")

    assert done.status_code == 200 and done.json()["count"] == 3 and done.json()["request"] is None
