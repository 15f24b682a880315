"""Services: what pausing and resuming record, and what job creation refuses."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import IntegrityError, connection

from scheduler_app import services
from scheduler_app.models import ApiKey, AuditEvent, Job, JobRun, Tenant, db_now
from scheduler_app.services.objectives import objective_create
from scheduler_app.services.windows import window_create


def spec(**fields):
    fields.setdefault("name", "job")
    fields.setdefault("task_name", "scheduler_app.echo")
    return services.JobSpec(**fields)


def test_resume_records_the_fires_missed_while_paused_as_one_skipped_run(tenant):
    job = services.job_create(tenant, spec(every=10))
    services.job_pause(job, note="maintenance", actor="test")
    missed_from = db_now() - timedelta(minutes=5)
    Job.objects.filter(id=job.id).update(next_run_at=missed_from)  # paused for five minutes

    job = services.job_resume(job, actor="test")

    skipped = JobRun.objects.get(job=job)
    assert (skipped.state, skipped.scheduled_at) == ("skipped", missed_from)
    assert skipped.reason.startswith(f"paused: missed fires from {missed_from.isoformat()} until ")
    assert job.enabled and job.next_run_at > db_now() - timedelta(seconds=1)
    assert list(AuditEvent.objects.filter(job_id=job.id).order_by("id").values_list("action", flat=True)) == [
        "job.created",
        "job.paused",
        "job.resumed",
    ]


def test_a_paused_job_is_not_due(tenant):
    job = services.job_create(tenant, spec(every=1))
    services.job_pause(job)

    assert not Job.objects.due(db_now() + timedelta(hours=1)).exists()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"every": 10, "task_name": "os.system"}, "task"),
        ({"every": 10, "args": {"a": 1}}, "args"),
        ({"every": 10, "kwargs": [1]}, "kwargs"),
        ({"every": 10, "misfire_policy": "sometimes"}, "misfire_policy"),
        ({"every": 10, "overlap_policy": "queue"}, "overlap_policy"),
        ({"every": 10, "timeout_seconds": 0}, "timeout_seconds"),
        ({"every": 10, "max_attempts": 0}, "max_attempts"),
        ({"every": 10, "name": "bad\u202ename"}, "name"),
        ({"every": 10, "name": "two\u2028lines"}, "name"),
        ({"every": 10, "description": "a\u2069"}, "description"),
        ({"every": 10, "description": "a\u2029b"}, "description"),
        ({"every": 10, "description": "bell\u0007"}, "description"),
        ({"every": 10, "tags": ["ok", "a\u2028b"]}, "tags.1"),
        ({"cron": "0 0 31 2 *"}, "cron"),
        ({"every": 10, "end_at": datetime(2020, 1, 1, tzinfo=UTC)}, "end_at"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"every": 10, "queue": 7}, "queue"),
        ({"every": 10, "description": 3.5}, "description"),
        ({"every": 10, "cron": ["* * * * *"]}, "cron"),
        ({"every": 10, "calendar": {"name": "x"}}, "calendar"),
    ],
)
def test_job_create_refuses_bad_input_naming_the_field_and_writes_nothing(tenant, fields, field):
    with pytest.raises(services.InvalidInput) as caught:
        services.job_create(tenant, spec(**fields))

    assert caught.value.field == field
    assert not Job.objects.exists() and not AuditEvent.objects.exists()


def test_job_names_are_unique_per_tenant(tenant):
    services.job_create(tenant, spec(every=10))

    with pytest.raises(services.InvalidInput, match="already has a job named 'job'"):
        services.job_create(tenant, spec(every=10))


def test_none_in_a_text_field_stands_for_none(tenant):
    """cron=None beside every=10, timezone=None: once refused as 'already has a job named'
    (the NOT NULL column broken); now read as "", as the JobSpec's defaults are."""
    nones = services.job_create(tenant, spec(every=10, cron=None, timezone=None, queue=None, description=None))
    defaults = services.job_create(tenant, spec(name="defaults", every=10))

    fields = ("cron", "timezone", "queue", "description", "every_seconds")
    assert [getattr(nones, f) for f in fields] == [getattr(defaults, f) for f in fields]
    assert nones.cron == "" and nones.every_seconds == 10


def test_only_the_name_rule_is_reported_as_a_name_taken(tenant, monkeypatch):
    """Another rule the database enforces (here NOT NULL, broken by a field that validation
    is made to let through) is raised as what it is, not as 'already has a job named'."""
    real = services.jobs.validate_spec

    def lets_null_through(*args, **kwargs):
        schedule, fields = real(*args, **kwargs)
        return schedule, {**fields, "timezone": None}

    monkeypatch.setattr(services.jobs, "validate_spec", lets_null_through)
    with pytest.raises(IntegrityError):
        services.job_create(tenant, spec(every=10))
    assert not Job.objects.exists()


def test_a_tenant_is_reported_as_existing_only_when_its_slug_is_taken(tenant):
    """A slug taken is named; another rule the database enforces (here a check constraint the
    test adds, rolled back with it) is raised as what it is, and no tenant is written."""
    with pytest.raises(services.InvalidInput) as taken:
        services.tenant_create(slug=tenant.slug)
    assert taken.value.field == "slug" and "already exists" in taken.value.message

    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {Tenant._meta.db_table} ADD CONSTRAINT test_no_refused CHECK (slug <> 'refused')")
    with pytest.raises(IntegrityError):
        services.tenant_create(slug="refused")
    assert not Tenant.objects.filter(slug="refused").exists()


@pytest.mark.parametrize(
    "create",
    [
        lambda tenant: window_create(
            tenant, name="w", starts_at="2026-06-01T10:00:00Z", ends_at="2026-06-01T11:00:00Z"
        ),
        lambda tenant: services.calendar_create(tenant, name="c"),
        lambda tenant: objective_create(tenant, name="o", kind="success", target="99%"),
    ],
    ids=["window", "calendar", "objective"],
)
@pytest.mark.django_db(transaction=True)  # the foreign key is checked as the service's own transaction commits
def test_a_window_calendar_or_objective_of_a_tenant_gone_is_not_reported_as_a_name_taken(create):
    """A tenant deleted meanwhile breaks the foreign key, not the name's rule: the error is
    raised as what it is, not as 'already has a ... named', and nothing is written."""
    gone = services.tenant_create(slug="gone")
    Tenant.objects.filter(pk=gone.pk).delete()

    with pytest.raises(IntegrityError):
        create(gone)
    assert not AuditEvent.objects.filter(tenant_id=gone.pk).exists()


@pytest.mark.parametrize(
    "text", ["by \u202enimda", "a\u2066b", "a\u2028b", "a\u2029b", "a\nb", "\u001b[31mred", "a\u0085b"]
)
def test_pause_notes_refuse_hidden_and_control_characters_and_leave_the_job_running(tenant, text):
    job = services.job_create(tenant, spec(every=10))

    with pytest.raises(services.InvalidInput) as caught:
        services.job_pause(job, note=text)

    assert caught.value.field == "note"
    job.refresh_from_db()
    assert job.enabled and job.version == 1
    assert not AuditEvent.objects.filter(action="job.paused").exists()


@pytest.mark.parametrize("name", ["Acme\u202e", "Acme\u2028Corp", "Ac\u0085me", "\u2066Acme"])
def test_tenant_and_key_names_refuse_hidden_and_control_characters(tenant, name):
    with pytest.raises(services.InvalidInput, match="^name: must not contain the character U\\+"):
        services.tenant_create(slug="other", name=name)
    with pytest.raises(services.InvalidInput, match="^name: must not contain"):
        services.tenant_update(tenant, {"name": name})
    with pytest.raises(services.InvalidInput, match="^name: must not contain"):
        services.apikey_create(tenant=tenant, name=name)

    assert not Tenant.objects.filter(slug="other").exists()
    tenant.refresh_from_db()
    assert tenant.name != name and not ApiKey.objects.exists()


def test_a_description_written_in_a_browser_is_stored_with_line_feeds(tenant):
    job = services.job_create(tenant, spec(every=10, description="one\r\ntwo\r\n"))

    unchanged = services.job_update(job, {"description": "one\ntwo\n"})

    assert job.description == "one\ntwo\n"
    assert unchanged.version == 1  # the same text: nothing to save
