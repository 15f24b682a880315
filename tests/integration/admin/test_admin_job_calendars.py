"""The admin's job forms offer and accept only the calendars of the job's tenant: another
tenant's calendar names are not among the choices, and posting its id is refused on the
calendar field (a staff user who administers tenants, not a superuser)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from scheduler_app import services
from scheduler_app.models import Job, Tenant
from tests.support.admin import change_form, job_form

TASK = "scheduler_app.echo"
TENANT_ADMIN = (
    "view_job",
    "add_job",
    "change_job",
    "view_jobrun",
    "view_tenant",
    "add_tenant",
    "change_tenant",
    "view_calendar",
    "view_auditevent",
)


@pytest.fixture
def acme(db) -> Tenant:
    tenant = services.tenant_create(slug="acme", name="Acme")
    services.calendar_create(tenant, name="acme-days")
    return tenant


@pytest.fixture
def other(db) -> Tenant:
    tenant = services.tenant_create(slug="other", name="Other")
    services.calendar_create(tenant, name="other-secret-days")
    return tenant


@pytest.fixture
def staff(client, db) -> None:
    user = User.objects.create_user("tenant-admin", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="scheduler_app", codename__in=TENANT_ADMIN)
    )
    client.force_login(user)


@pytest.fixture
def job(acme) -> Job:
    return services.job_create(acme, services.JobSpec(name="nightly", task_name=TASK, cron="0 9 * * *"))


def choices(response) -> list[str]:
    return [label for _, label in response.context["adminform"].form.fields["calendar"].choices]


def test_the_change_form_lists_only_the_job_s_tenant_s_calendars(client, staff, job, other):
    response = client.get(reverse("admin:scheduler_app_job_change", args=[job.pk]))

    assert response.status_code == 200
    assert choices(response) == ["---------", "acme-days"]
    assert "other-secret-days" not in response.content.decode()


def test_the_change_form_refuses_another_tenant_s_calendar_id_on_the_calendar_field(client, staff, job, other):
    foreign = other.calendars.get()

    response = client.post(
        reverse("admin:scheduler_app_job_change", args=[job.pk]), change_form(job, calendar=str(foreign.pk))
    )

    assert response.status_code == 200  # the form again
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["calendar"] and "not one of the available choices" in str(errors["calendar"])
    assert "other-secret-days" not in response.content.decode()
    job.refresh_from_db()
    assert job.calendar_id is None and job.version == 1


def test_the_change_form_saves_the_job_s_own_tenant_s_calendar(client, staff, job, acme):
    own = acme.calendars.get()

    response = client.post(reverse("admin:scheduler_app_job_change", args=[job.pk]), change_form(job, calendar=own.pk))

    assert response.status_code == 302, response.content.decode()[:2000]
    job.refresh_from_db()
    assert job.calendar_id == own.pk


def test_the_add_form_for_a_chosen_tenant_lists_only_its_calendars(client, staff, acme, other):
    response = client.get(reverse("admin:scheduler_app_job_add"), {"tenant": acme.pk})

    assert response.status_code == 200
    assert choices(response) == ["---------", "acme-days"]
    assert "other-secret-days" not in response.content.decode()


def test_the_add_form_refuses_another_tenant_s_calendar_id_on_the_calendar_field(client, staff, acme, other):
    foreign = other.calendars.get()

    response = client.post(reverse("admin:scheduler_app_job_add"), job_form(acme, calendar=str(foreign.pk)))

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["calendar"] and "not one of the available choices" in str(errors["calendar"])
    assert not Job.objects.filter(name="from-admin").exists()
    own = acme.calendars.get()
    saved = client.post(reverse("admin:scheduler_app_job_add"), job_form(acme, calendar=str(own.pk)))
    assert saved.status_code == 302, saved.content.decode()[:2000]
    assert Job.objects.get(name="from-admin").calendar_id == own.pk


def test_the_add_form_without_a_tenant_names_each_calendar_with_its_tenant(client, staff, acme, other):
    response = client.get(reverse("admin:scheduler_app_job_add"))

    assert choices(response) == ["---------", "acme/acme-days", "other/other-secret-days"]
