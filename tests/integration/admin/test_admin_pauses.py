"""Pauses in the admin: the dashboard's panel of jobs paused by people, and a selection over
the threshold paused only on another user's approval."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from scheduler_app import services
from scheduler_app.models import Job, PauseRequest, PauseRequestState, db_now

TASK = "scheduler_app.echo"


def url(model: str, view: str, *args) -> str:
    return reverse(f"admin:scheduler_app_{model}_{view}", args=args)


@pytest.fixture
def jobs(db) -> list[Job]:
    tenant = services.tenant_create(slug="acme", name="Acme")
    return [services.job_create(tenant, services.JobSpec(name=f"j{i}", task_name=TASK, every=60)) for i in range(3)]


def operator(django_user_model, name: str, *codenames: str):
    user = django_user_model.objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_job", "change_job", *codenames]))
    return user


def test_the_dashboard_lists_jobs_paused_by_people_with_why_who_and_until(admin_client, jobs):
    services.job_pause(jobs[0], note="disk swap", actor="api:ann", until=db_now() + timedelta(hours=2))

    html = admin_client.get(reverse("cronfleet:dashboard")).content.decode()

    panel = html[html.index('id="cf-paused"') :]
    panel = panel[: panel.index("</section>")]
    assert "acme/j0" in panel and "api:ann" in panel and "disk swap" in panel and "alert" in panel
    assert "acme/j1" not in panel


def test_a_selection_over_the_threshold_waits_for_another_user(client, django_user_model, jobs, settings):
    settings.CRONFLEET_BULK_PAUSE_APPROVAL_OVER = 2
    ann = operator(django_user_model, "ann")
    bob = operator(django_user_model, "bob", "view_pauserequest", "approve_pauserequest")
    carol = operator(django_user_model, "carol", "view_pauserequest")
    client.force_login(ann)

    asked = client.post(
        url("job", "changelist"), {"action": "pause_jobs", "_selected_action": [j.pk for j in jobs]}, follow=True
    )
    request = PauseRequest.objects.get()
    assert "needs a second person" in asked.content.decode() and not Job.objects.filter(enabled=False).exists()
    client.force_login(carol)  # may see the requests, may not approve
    page = client.get(url("pauserequest", "changelist")).content.decode()
    client.post(url("pauserequest", "changelist"), {"action": "approve_requests", "_selected_action": [request.pk]})
    assert "approve_requests" not in page and not Job.objects.filter(enabled=False).exists()
    client.force_login(bob)

    approved = client.post(
        url("pauserequest", "changelist"),
        {"action": "approve_requests", "_selected_action": [request.pk]},
        follow=True,
    )

    assert f"Approved request {request.pk}: paused 3 job(s)." in approved.content.decode()
    request.refresh_from_db()
    assert (request.state, request.decided_by) == (PauseRequestState.APPROVED, "admin:bob")
    assert Job.objects.filter(enabled=False).count() == 3


def test_the_user_who_asked_cannot_approve_in_the_admin(admin_client, admin_user, jobs, settings):
    settings.CRONFLEET_BULK_PAUSE_APPROVAL_OVER = 2
    admin_client.post(url("job", "changelist"), {"action": "pause_jobs", "_selected_action": [j.pk for j in jobs]})
    request = PauseRequest.objects.get()

    refused = admin_client.post(
        url("pauserequest", "changelist"),
        {"action": "approve_requests", "_selected_action": [request.pk]},
        follow=True,
    )

    assert f"Request {request.pk} not approved: actor:" in refused.content.decode()
    assert PauseRequest.objects.get().state == PauseRequestState.PENDING
    assert not Job.objects.filter(enabled=False).exists()


def test_the_job_page_pauses_for_a_while_then_resume_and_says_so(admin_client, admin_user, jobs):
    page = reverse("admin:scheduler_app_job_console", args=[jobs[0].pk, "pause"])

    done = admin_client.post(page, {"note": "disk swap", "for": "4", "on_expiry": "resume"}, follow=True)
    bad = admin_client.post(
        reverse("admin:scheduler_app_job_console", args=[jobs[1].pk, "pause"]), {"for": "9999"}, follow=True
    )

    job = Job.objects.get(id=jobs[0].id)
    html = done.content.decode()
    assert (job.paused_note, job.paused_by, job.pause_expiry) == ("disk swap", f"admin:{admin_user.username}", "resume")
    assert job.paused_until is not None and "then resume" in html and 'id="cf-paused-until"' in html
    said = [str(message) for message in bad.context["messages"]]
    assert said == ["pause: for: must be one of 1, 4, 24, 168 hours"], said
    assert Job.objects.get(id=jobs[1].id).enabled
