"""Edits of a job managed by schedules as code outside its declaration, as each front door
shows them: the API answers its normal body and a Warning header, the admin a warning
message on the page and after a save, the CLI a sentence on stderr; with
CRONFLEET_MANAGED_JOBS_READ_ONLY each refuses, naming the owner. The CLI in a process of its
own: tests/system/services/test_managed_edits.py."""

from __future__ import annotations

import io
import textwrap

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.core.management import CommandError, call_command
from django.urls import reverse
from rest_framework.test import APIClient

from scheduler_app import services
from scheduler_app.models import AuditEvent, Job, Tenant
from tests.support.admin import change_form

DECLARATION = """
owner = "billing"
tenant = "acme"

[[jobs]]
name = "invoices"
cron = "0 3 * * *"
task = "scheduler_app.echo"
"""
DRIFT = "is managed by 'billing' (schedules as code): this edit is drift until the next"
# What a tenant administrator holds (docs/roles.md): every view, the job writes and the tenant's.
TENANT_ADMIN = (
    "view_job",
    "add_job",
    "change_job",
    "view_jobrun",
    "view_tenant",
    "add_tenant",
    "change_tenant",
    "change_tenant_quotas",
    "view_calendar",
    "view_alert",
    "view_alertrule",
    "view_auditevent",
    "add_apikey",
    "mint_apikey",
    "view_apikey",
)


@pytest.fixture
def acme(db) -> Tenant:
    return services.tenant_create(slug="acme", name="Acme")


@pytest.fixture
def managed(acme, tmp_path) -> Job:
    """acme/invoices, made by `schedules apply` for owner billing; the declaration's path on .path."""
    path = tmp_path / "schedules.toml"
    path.write_text(textwrap.dedent(DECLARATION))
    call_command("schedules", "apply", "--file", str(path), stdout=io.StringIO())
    job = Job.objects.select_related("tenant").get(tenant=acme, name="invoices")
    assert job.managed_by == "billing"
    job.path = str(path)
    return job


def plan_code(path: str) -> int:
    try:
        call_command("schedules", "plan", "--file", path, stdout=io.StringIO())
    except SystemExit as exc:
        return exc.code
    return 0


def api_for(tenant: Tenant) -> APIClient:
    _, raw = services.apikey_create(tenant=tenant, name="k")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return api


def tenant_admin(client) -> User:
    user = User.objects.create_user("tenant-admin", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="scheduler_app", codename__in=TENANT_ADMIN)
    )
    client.force_login(user)
    return user


# --- the API -------------------------------------------------------------------------------


def test_an_api_edit_of_a_managed_job_answers_its_body_and_a_warning_header_and_is_drift(managed):
    api = api_for(managed.tenant)

    response = api.patch(f"/api/v1/jobs/{managed.id}/", {"priority": 9}, format="json")

    assert response.status_code == 200, response.json()
    assert response.json()["priority"] == 9 and response.json()["managed_by"] == "billing"
    warning = response["Warning"]
    assert warning.startswith('299 - "') and warning.endswith('"')
    assert f"job acme/invoices {DRIFT}" in warning and "schedules apply" in warning
    assert plan_code(managed.path) == 3  # the next plan reports the drift


def test_an_api_read_and_an_edit_of_a_hand_made_job_carry_no_warning(managed):
    api = api_for(managed.tenant)
    by_hand = services.job_create(
        managed.tenant, services.JobSpec(name="by-hand", task_name="scheduler_app.echo", cron="0 4 * * *")
    )

    edited = api.patch(f"/api/v1/jobs/{by_hand.id}/", {"priority": 9}, format="json")
    read = api.get(f"/api/v1/jobs/{managed.id}/")
    unchanged = api.patch(f"/api/v1/jobs/{managed.id}/", {"priority": managed.priority}, format="json")

    assert edited.status_code == read.status_code == unchanged.status_code == 200
    assert "Warning" not in edited and "Warning" not in read and "Warning" not in unchanged
    assert edited.json()["managed_by"] == "" and read.json()["managed_by"] == "billing"


def test_an_owner_with_quotes_and_accents_still_makes_one_valid_warning_header(managed):
    Job.objects.filter(id=managed.id).update(managed_by='fin "é"')

    response = api_for(managed.tenant).patch(f"/api/v1/jobs/{managed.id}/", {"priority": 8}, format="json")

    assert response.status_code == 200
    assert response["Warning"].isascii() and '\\"\\xe9\\"' in response["Warning"]


def test_with_the_read_only_setting_an_api_edit_is_refused_in_the_error_shape_naming_the_field(managed, settings):
    settings.CRONFLEET_MANAGED_JOBS_READ_ONLY = True

    response = api_for(managed.tenant).patch(f"/api/v1/jobs/{managed.id}/", {"priority": 9}, format="json")

    assert response.status_code == 400
    body = response.json()
    assert "managed_by" in str(body) and "owner 'billing'" in str(body), body
    assert "Warning" not in response
    managed.refresh_from_db()
    assert managed.priority == 5 and plan_code(managed.path) == 0


# --- the admin -----------------------------------------------------------------------------


def test_the_admin_change_form_says_who_manages_the_job_and_a_save_warns_it_is_drift(client, managed):
    tenant_admin(client)
    page = reverse("admin:scheduler_app_job_change", args=[managed.pk])

    shown = client.get(page)
    saved = client.post(page, change_form(managed, priority="8"), follow=True)

    assert shown.status_code == 200
    shown_messages = [str(message) for message in get_messages(shown.wsgi_request)]
    assert any("owner 'billing'" in text and "drift" in text for text in shown_messages), shown_messages
    assert saved.status_code == 200, saved.content.decode()[:2000]
    warnings = [str(m) for m in saved.context["messages"] if m.level_tag == "warning"]
    assert any("owner 'billing'" in text and "drift" in text for text in warnings), warnings
    managed.refresh_from_db()
    assert managed.priority == 8
    assert AuditEvent.objects.get(job_id=managed.id, action="job.updated").actor == "admin:tenant-admin"
    assert plan_code(managed.path) == 3


def test_with_the_read_only_setting_an_admin_save_is_refused_and_saves_nothing(client, managed, settings):
    settings.CRONFLEET_MANAGED_JOBS_READ_ONLY = True
    tenant_admin(client)
    page = reverse("admin:scheduler_app_job_change", args=[managed.pk])

    shown = client.get(page)
    refused = client.post(page, change_form(managed, priority="8"))

    shown_messages = [str(message) for message in get_messages(shown.wsgi_request)]
    assert any("owner 'billing'" in text and "refused" in text for text in shown_messages), shown_messages
    assert refused.status_code == 200  # the form again, with the refusal
    html = refused.content.decode()
    assert "owner &#x27;billing&#x27;" in html and "CRONFLEET_MANAGED_JOBS_READ_ONLY" in html
    managed.refresh_from_db()
    assert managed.priority == 5 and managed.version == 1


# --- the CLI -------------------------------------------------------------------------------


def jobs_edit(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("jobs", "edit", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_a_cli_edit_of_a_managed_job_tells_the_user_on_stderr_that_it_is_drift(managed):
    out, err = jobs_edit("acme/invoices", "--priority", "8", "--yes")

    assert "(acme/invoices) (version 2)" in out
    assert err.startswith(f"Warning: job acme/invoices {DRIFT}"), err
    assert "schedules apply" in err and "Warning" not in out
    assert plan_code(managed.path) == 3


def test_a_cli_edit_of_a_hand_made_job_prints_no_warning(managed):
    services.job_create(
        managed.tenant, services.JobSpec(name="by-hand", task_name="scheduler_app.echo", cron="0 4 * * *")
    )

    out, err = jobs_edit("acme/by-hand", "--priority", "8", "--yes")

    assert "(acme/by-hand) (version 2)" in out and err == ""


def test_with_the_read_only_setting_a_cli_edit_is_refused_before_its_preview(managed, settings):
    settings.CRONFLEET_MANAGED_JOBS_READ_ONLY = True
    out = io.StringIO()

    with pytest.raises(CommandError) as refused:
        call_command("jobs", "edit", "acme/invoices", "--priority", "8", "--yes", stdout=out, stderr=io.StringIO())

    message = str(refused.value)
    assert message.startswith("jobs edit: managed_by: ") and "owner 'billing'" in message
    assert "CRONFLEET_MANAGED_JOBS_READ_ONLY" in message and refused.value.returncode == 2
    assert "Edit job" not in out.getvalue()  # refused before showing the fires or asking
    managed.refresh_from_db()
    assert managed.priority == 5
